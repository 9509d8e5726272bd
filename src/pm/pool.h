// src/pm/pool.h — a mapped persistent-memory pool: header, chunk heap, roots, lock.
//
// A Pool is a region mapped from a file (tmpfs, ordinary or fsdax file system, with MAP_SYNC when
// the file system offers it), a devdax character device, or an anonymous DRAM region (empty path).
// It owns the header (src/pm/pool_format.h), the chunk allocator over the heap, the traffic
// counters, and an advisory lock (flock) that keeps a second opener out.
//
// Everything inside a pool is addressed by offset from base(): nothing in it depends on the
// address the pool is mapped at, so a pool reopens anywhere.
//
// Creation protocol (crash-safe): the header is written with the "creating" magic, the index
// builds its initial structure and sets its roots, then CommitCreate() persists the checksum and
// finally the real magic. A crash before that leaves a pool that Open() recognises as incomplete
// and re-creates (modes that allow creation) or refuses with kCorruption.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "pm/chunk_allocator.h"
#include "pm/counters.h"
#include "pm/persist.h"
#include "pm/pool_format.h"
#include "pmhash/options.h"
#include "pmhash/status.h"

namespace pmhash::pm {

// How the pool's bytes are mapped: decides which failures a persist survives
// (docs/durability.md, "Where a pool lives").
enum class Mapping : uint8_t {
  kAnonymous,    // no path: anonymous DRAM, nothing survives Close
  kTmpfsFile,    // a file on tmpfs: survives a process crash, not an OS crash or power failure
  kFile,         // a file mapped without MAP_SYNC (page cache): survives a process crash
  kFileMapSync,  // a file on a DAX file system mapped MAP_SYNC (fsdax): survives power failure
  kDevdax,       // a devdax character device: survives power failure
};
// "anonymous", "tmpfs file", "file (page cache)", "fsdax file (MAP_SYNC)", "devdax".
std::string_view MappingName(Mapping m);

// The MAP_SYNC rule: a file whose data lives in PM (DAX) but that could not be mapped MAP_SYNC
// has page-fault metadata that a crash may lose, so `adr`/`eadr` refuse it (kNotSupported) unless
// `allow` (Options::allow_no_map_sync). Anything else is OK.
Status CheckMapSync(bool dax_file, bool map_sync, Durability d, bool allow,
                    const std::string& path);

// For tools that look at a pool file without opening it as a pool. CheckPoolFileType stats (never
// opens) `path`: OK for a regular file or a devdax device, kNotFound if there is nothing there,
// kInvalidArgument for anything else (a FIFO, whose open would block; a directory; /dev/zero).
Status CheckPoolFileType(const std::string& path);
// Where the file behind `fd` keeps its bytes: "devdax", "tmpfs file", "file on a DAX file
// system" or "file (page cache)".
std::string_view DescribeStorage(int fd);

// What an index asks of the pool it opens.
struct PoolSpec {
  std::string_view kind;            // stored in / checked against the header
  std::span<const uint8_t> params;  // a new pool's parameter block, byte image (<= 128 B); an
                                    // existing pool's is read back with Pool::params()
  uint32_t chunk_size = 256;        // allocator chunk size for a new pool
  uint64_t min_chunks = 1;          // a new pool must offer at least this many chunks
  Durability durability = Durability::kAdr;  // the engine's policy (Options::durability is
                                             // the registry's choice of engine)
};

// What a pool holds, for callers that must know it before opening the pool (pmhash::Open without
// a kind). ReadPoolIdentity reads the header of the pool at `path` (never maps or locks it) and
// checks it as Open does: magic, format version, checksum, geometry. kNotFound if there is no
// file; kCorruption for an unformatted, incompletely created or damaged one.
struct PoolIdentity {
  std::string kind;
  uint8_t created_durability = 0;  // a Durability, unchecked
};
Result<PoolIdentity> ReadPoolIdentity(const std::string& path);

class Pool {
 public:
  static Result<std::unique_ptr<Pool>> Open(const Options& options, const PoolSpec& spec);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // True if this Open created the pool: the index must build its initial structure, set its
  // roots, then call CommitCreate().
  bool created() const { return created_; }
  Status CommitCreate();

  // Clean-shutdown protocol. Open() clears the flag (persisted) before returning; Close() of the
  // index calls MarkClean() as its last persistent write.
  bool was_clean() const { return was_clean_; }
  void MarkClean();

  char* base() const { return base_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  Durability durability() const { return durability_; }
  bool map_sync() const { return map_sync_; }
  Mapping mapping() const { return mapping_; }
  HashMode hash_mode() const { return static_cast<HashMode>(header()->hash_mode); }
  uint64_t hash_seed() const { return header()->hash_seed; }
  uint64_t create_time_ns() const { return header()->create_time_ns; }
  // The index's parameter block as stored in the header (validated by the index: the pool only
  // knows that it is at most kMaxParamsBytes long).
  std::span<const uint8_t> params() const {
    return {header()->params, header()->params_bytes};
  }

  template <class T>
  T* At(uint64_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }
  uint64_t OffsetOf(const void* p) const {
    return static_cast<uint64_t>(static_cast<const char*>(p) - base_);
  }

  // The image of DRAM state saved by the last clean Close (saved_state.h); 0 = none. The
  // setter persists.
  uint64_t saved_state() const { return header()->saved_state.load(std::memory_order_acquire); }
  void SetSavedState(uint64_t offset);

  // Roots: pool offsets the index uses to find its structure. SetRoot persists.
  uint64_t root(int i) const { return header()->roots[i].load(std::memory_order_acquire); }
  void SetRoot(int i, uint64_t offset);

  ChunkAllocator& allocator() { return *allocator_; }
  const ChunkAllocator& allocator() const { return *allocator_; }
  TrafficCounters& counters() { return counters_; }
  TrafficCounters* counters_ptr() { return &counters_; }
  // What an index's Persister binds to (counters, and the simulator hook of a Sim pool: the
  // hook installed on the opening thread, kept for every thread that uses the pool).
  PersistTarget persist_target() { return PersistTarget{&counters_, sim_hook_}; }
  SimHook* sim_hook() const { return sim_hook_; }

  // Persist [p, p+len) with this pool's durability (for rare writes outside an index template).
  void PersistRange(const void* p, size_t len);

 private:
  Pool(const Options& o, Durability d);
  PoolHeader* header() const { return reinterpret_cast<PoolHeader*>(base_); }
  Status MapFile(const Options& o, const PoolSpec& spec);
  Status InitHeader(const Options& o, const PoolSpec& spec);
  Status ValidateHeader(const Options& o, const PoolSpec& spec);
  void Unmap();

  std::string path_;
  Durability durability_;
  int fd_ = -1;
  char* base_ = nullptr;
  uint64_t size_ = 0;
  bool created_ = false;
  bool was_clean_ = false;
  bool map_sync_ = false;
  Mapping mapping_ = Mapping::kAnonymous;
  bool anonymous_ = false;
  bool created_file_ = false;  // this Open created the file (unlinked if never committed)
  bool committed_ = false;
  std::unique_ptr<ChunkAllocator> allocator_;
  TrafficCounters counters_;
  SimHook* sim_hook_ = nullptr;  // Sim pools: the opening thread's hook
};

}  // namespace pmhash::pm
