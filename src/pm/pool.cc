#include "pm/pool.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include "pm/persist.h"

#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif
#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef STATX_ATTR_DAX
#define STATX_ATTR_DAX 0x00200000
#endif

namespace pmhash::pm {

namespace {

std::string Errno(std::string_view what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string SysfsCharDir(const struct stat& st) {
  return "/sys/dev/char/" + std::to_string(major(st.st_rdev)) + ":" +
         std::to_string(minor(st.st_rdev));
}

// Size of a devdax device from sysfs; 0 if unknown.
uint64_t DevdaxSize(const struct stat& st) {
  std::ifstream f(SysfsCharDir(st) + "/size");
  uint64_t size = 0;
  if (f) f >> size;
  return size;
}

// A character device is devdax iff its sysfs subsystem link ends in "/dax" (/dev/zero: "mem").
bool IsDevdax(const struct stat& st) {
  char target[256];
  const ssize_t n =
      readlink((SysfsCharDir(st) + "/subsystem").c_str(), target, sizeof(target) - 1);
  if (n <= 0) return false;
  const std::string_view t(target, static_cast<size_t>(n));
  return t == "dax" || t.ends_with("/dax");
}

// A pool is a regular file or a devdax device; anything else (a FIFO, whose open() blocks; a
// directory; another character device, where writes go nowhere) is refused before it is opened.
Status CheckFileType(const struct stat& st, const std::string& path) {
  if (S_ISREG(st.st_mode)) return Status::OK();
  if (S_ISCHR(st.st_mode)) {
    if (IsDevdax(st)) return Status::OK();
    return Status::InvalidArgument(path + " is a character device but not a devdax device (" +
                                   SysfsCharDir(st) + "/subsystem is not dax)");
  }
  return Status::InvalidArgument("not a regular file or devdax device: " + path);
}

// True if the file's data lives in persistent memory (statx reports STATX_ATTR_DAX, Linux 5.8+).
bool IsDaxFile(int fd) {
  struct statx stx;
  if (statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &stx) != 0) return false;
  return (stx.stx_attributes_mask & STATX_ATTR_DAX) && (stx.stx_attributes & STATX_ATTR_DAX);
}

bool IsTmpfs(int fd) {
  struct statfs sfs;
  return fstatfs(fd, &sfs) == 0 && static_cast<uint64_t>(sfs.f_type) == TMPFS_MAGIC;
}

// A seed nobody can predict (hash flooding): getrandom(2); should it fail (no entropy yet with
// GRND_NONBLOCK, an old kernel), the clock, the pid and a stack address, mixed.
uint64_t RandomSeed() {
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) == static_cast<ssize_t>(sizeof(seed))) {
    return seed;
  }
  uint64_t x = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
               (static_cast<uint64_t>(getpid()) << 32) ^ reinterpret_cast<uintptr_t>(&seed);
  x += 0x9e3779b97f4a7c15ULL;  // splitmix64 finaliser
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool PersistentDurability(uint8_t d) {
  return d == static_cast<uint8_t>(Durability::kAdr) ||
         d == static_cast<uint8_t>(Durability::kEadr);
}

// The geometry of a header read through pread, checked before anything is mapped: a mapping is
// only ever as large as the file, and the heap lies inside it.
Status ValidateGeometry(const PoolHeader& h, uint64_t file_size, bool devdax,
                        const std::string& path) {
  auto bad = [&](const std::string& what) {
    return Status::Corruption("pool header geometry is inconsistent (" + what + "): " + path);
  };
  if (h.header_bytes != kHeaderBytes) return Status::Corruption("bad header size in " + path);
  if (h.pool_size < kHeaderBytes) {
    return bad("pool_size " + std::to_string(h.pool_size) + " B is smaller than the header");
  }
  if (h.pool_size > file_size) {
    return Status::Corruption("truncated pool: " + path + " is " + std::to_string(file_size) +
                              " B but its header says " + std::to_string(h.pool_size) + " B");
  }
  if (!devdax && h.pool_size != file_size) {
    return bad("pool_size " + std::to_string(h.pool_size) + " B, but the file is " +
               std::to_string(file_size) + " B");
  }
  if (h.chunk_size < 64 || !std::has_single_bit(h.chunk_size)) {
    return bad("chunk_size " + std::to_string(h.chunk_size));
  }
  if (h.heap_offset < kHeaderBytes || h.heap_offset % h.chunk_size != 0 ||
      h.heap_offset > h.pool_size) {
    return bad("heap_offset " + std::to_string(h.heap_offset));
  }
  if (h.chunk_count > (h.pool_size - h.heap_offset) / h.chunk_size) {
    return bad("chunk_count " + std::to_string(h.chunk_count) + " does not fit in pool_size " +
               std::to_string(h.pool_size));
  }
  return Status::OK();
}

// A header whose magic says "formatted", read through pread: version, checksum, geometry.
Status CheckFormattedHeader(const PoolHeader& disk, uint64_t file_size, bool devdax,
                            const std::string& path) {
  if (std::memcmp(disk.magic, kPoolMagic, 8) != 0) {
    return Status::Corruption("not a pmhash pool (bad magic): " + path);
  }
  if (disk.format_version != kFormatVersion) {
    return Status::NotSupported("pool format version " + std::to_string(disk.format_version) +
                                " is not supported (this build reads version " +
                                std::to_string(kFormatVersion) + "): " + path);
  }
  if (HeaderChecksum(&disk) != disk.checksum) {
    return Status::Corruption("pool header checksum mismatch: " + path);
  }
  return ValidateGeometry(disk, file_size, devdax, path);
}

std::string KindOf(const PoolHeader& h) { return std::string(h.kind, strnlen(h.kind, kKindBytes)); }

}  // namespace

Result<PoolIdentity> ReadPoolIdentity(const std::string& path) {
  PMHASH_RETURN_IF_ERROR(CheckPoolFileType(path));
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(Errno("cannot open", path));
  PoolHeader disk;
  std::memset(static_cast<void*>(&disk), 0, sizeof(disk));
  struct stat st;
  Status s;
  if (fstat(fd, &st) != 0) {
    s = Status::IOError(Errno("fstat", path));
  } else if (s = CheckFileType(st, path); s.ok()) {
    const bool devdax = S_ISCHR(st.st_mode);
    uint64_t file_size = devdax ? DevdaxSize(st) : static_cast<uint64_t>(st.st_size);
    const ssize_t got = pread(fd, &disk, sizeof(disk), 0);
    if (devdax && file_size == 0) file_size = disk.pool_size;  // size unknown: trust the header
    if (got < 0) {
      s = Status::IOError(Errno("read header of", path));
    } else if (static_cast<size_t>(got) < sizeof(disk) || IsUnformattedMagic(disk.magic)) {
      s = Status::Corruption("not a pmhash pool (" +
                             std::string(got == 0 ? "empty file" : "unformatted") + "): " + path);
    } else if (std::memcmp(disk.magic, kPoolMagicCreating, 8) == 0) {
      s = Status::Corruption("pool creation did not complete (crash during create): " + path);
    } else {
      s = CheckFormattedHeader(disk, file_size, devdax, path);
    }
  }
  close(fd);
  if (!s.ok()) return s;
  return PoolIdentity{KindOf(disk), disk.created_durability};
}

std::string_view MappingName(Mapping m) {
  switch (m) {
    case Mapping::kAnonymous:
      return "anonymous";
    case Mapping::kTmpfsFile:
      return "tmpfs file";
    case Mapping::kFile:
      return "file (page cache)";
    case Mapping::kFileMapSync:
      return "fsdax file (MAP_SYNC)";
    case Mapping::kDevdax:
      return "devdax";
  }
  return "unknown";
}

Status CheckMapSync(bool dax_file, bool map_sync, Durability d, bool allow,
                    const std::string& path) {
  if (!dax_file || map_sync || allow) return Status::OK();
  if (d != Durability::kAdr && d != Durability::kEadr) return Status::OK();
  return Status::NotSupported(
      path + " is on a DAX file system that refused MAP_SYNC: without it, the file system "
             "metadata of a page fault may not survive a crash, so '" +
      std::string(DurabilityName(d)) +
      "' cannot keep its promise (set Options::allow_no_map_sync to map it anyway)");
}

Status CheckPoolFileType(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound("no such file: " + path);
    return Status::IOError(Errno("stat", path));
  }
  return CheckFileType(st, path);
}

std::string_view DescribeStorage(int fd) {
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISCHR(st.st_mode)) return IsDevdax(st) ? "devdax" : "not devdax";
  if (IsTmpfs(fd)) return "tmpfs file";
  if (IsDaxFile(fd)) return "file on a DAX file system";
  return "file (page cache)";
}

uint64_t HeaderChecksum(const void* header) {
  unsigned char image[offsetof(PoolHeader, checksum)];
  std::memcpy(image, header, sizeof(image));
  std::memcpy(image, kPoolMagic, sizeof(kPoolMagic));
  return XXH3_64bits(image, sizeof(image));
}

Pool::Pool(const Options& o, Durability d)
    : path_(o.path),
      durability_(d),
      counters_(o.media_block_bytes, o.media_cache_bytes),
      sim_hook_(d == Durability::kSim ? ThreadSimHook() : nullptr) {
  counters_.set_enabled(o.counters);
}

Pool::~Pool() {
  const bool unlink_file = created_file_ && !committed_;
  Unmap();
  if (fd_ >= 0) close(fd_);  // also drops the flock
  if (unlink_file) unlink(path_.c_str());
}

void Pool::Unmap() {
  if (base_ && sim_hook_) sim_hook_->OnUnmap(base_, size_);
  if (base_) munmap(base_, size_);
  base_ = nullptr;
}

Result<std::unique_ptr<Pool>> Pool::Open(const Options& o, const PoolSpec& spec) {
  if (spec.kind.empty() || spec.kind.size() >= kKindBytes) {
    return Status::InvalidArgument("index kind name must be 1..15 characters");
  }
  if (spec.params.size() > kMaxParamsBytes) {
    return Status::InvalidArgument("index parameter block larger than 128 bytes");
  }
  if (spec.chunk_size < 64 || !std::has_single_bit(spec.chunk_size)) {
    return Status::InvalidArgument("chunk size must be a power of two >= 64");
  }
  if (o.durability && *o.durability != spec.durability) {
    return Status::InvalidArgument(
        "Options::durability is '" + std::string(DurabilityName(*o.durability)) +
        "' but the engine opening the pool is the '" +
        std::string(DurabilityName(spec.durability)) + "' one");
  }
  std::unique_ptr<Pool> pool(new Pool(o, spec.durability));
  PMHASH_RETURN_IF_ERROR(pool->MapFile(o, spec));
  if (o.huge_pages) {
    // A hint (Options::huge_pages): EINVAL where THP is compiled out changes nothing that works.
    (void)madvise(pool->base_, pool->size_, MADV_HUGEPAGE);
  }
  if (pool->created_) {
    PMHASH_RETURN_IF_ERROR(pool->InitHeader(o, spec));
  }
  const PoolHeader* h = pool->header();
  pool->allocator_ =
      std::make_unique<ChunkAllocator>(h->heap_offset, h->chunk_size, h->chunk_count);
  if (!pool->allocator_->ok()) return Status::OutOfMemory("the chunk allocator's bitmap");
  if (!pool->created_) {
    pool->was_clean_ = h->clean_shutdown.load() == 1;
    pool->header()->clean_shutdown.store(0);
    pool->header()->open_count.fetch_add(1);
    pool->PersistRange(&h->clean_shutdown, 16);
  }
  return pool;
}

Status Pool::MapFile(const Options& o, const PoolSpec& spec) {
  const uint64_t min_size =
      AlignUp(kHeaderBytes, std::max<uint64_t>(kHeaderBytes, spec.chunk_size)) +
      spec.min_chunks * spec.chunk_size;
  auto too_small = [&](uint64_t size) {
    return Status::InvalidArgument("pool size " + std::to_string(size) +
                                   " B is too small for index '" + std::string(spec.kind) +
                                   "': it needs at least " + std::to_string(min_size) + " B");
  };

  if (path_.empty()) {
    if (o.mode == OpenMode::kOpenExisting) {
      return Status::InvalidArgument("an anonymous (path-less) pool cannot be reopened");
    }
    if (o.pool_size < min_size) return too_small(o.pool_size);
    void* p = mmap(o.map_address_hint, o.pool_size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return Status::IOError(std::string("mmap anonymous: ") + strerror(errno));
    base_ = static_cast<char*>(p);
    size_ = o.pool_size;
    created_ = anonymous_ = true;
    return Status::OK();
  }

  // The file type first, without opening: open() of a FIFO blocks, of a terminal may make it
  // the controlling one.
  if (struct stat pre; stat(path_.c_str(), &pre) == 0) {
    PMHASH_RETURN_IF_ERROR(CheckFileType(pre, path_));
  }

  // Open or create the file.
  bool fresh = false;
  if (o.mode == OpenMode::kCreateExclusive) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOCTTY | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno == EEXIST) {
      return Status::InvalidArgument("pool file already exists (create-exclusive): " + path_);
    }
    fresh = fd_ >= 0;
  } else {
    fd_ = ::open(path_.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fd_ < 0 && errno == ENOENT) {
      if (o.mode == OpenMode::kOpenExisting) return Status::NotFound("no pool file at " + path_);
      fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOCTTY | O_CLOEXEC, 0644);
      fresh = fd_ >= 0;
    }
  }
  if (fd_ < 0) return Status::IOError(Errno("cannot open", path_));
  created_file_ = fresh;
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    created_file_ = false;  // someone else's file now
    if (errno == EWOULDBLOCK) return Status::Busy("pool is already open (locked): " + path_);
    return Status::IOError(Errno("flock", path_));
  }

  struct stat st;
  if (fstat(fd_, &st) != 0) return Status::IOError(Errno("fstat", path_));
  PMHASH_RETURN_IF_ERROR(CheckFileType(st, path_));  // again: the path may have changed
  const bool devdax = S_ISCHR(st.st_mode);
  uint64_t file_size = devdax ? DevdaxSize(st) : static_cast<uint64_t>(st.st_size);
  if (devdax && file_size == 0) file_size = o.pool_size;

  // Decide between create and open from what the file holds.
  PoolHeader disk;
  std::memset(static_cast<void*>(&disk), 0, sizeof(disk));
  if (!fresh && file_size > 0) {
    const ssize_t got = pread(fd_, &disk, sizeof(disk), 0);
    if (got < 0) return Status::IOError(Errno("read header of", path_));
    if (static_cast<size_t>(got) < sizeof(disk)) {
      return Status::Corruption("truncated pool: " + path_ + " is " + std::to_string(file_size) +
                                " B, smaller than the " + std::to_string(kHeaderBytes) +
                                "-byte header");
    }
  }
  const bool can_create = o.mode != OpenMode::kOpenExisting;
  // A file whose magic is all zero was never formatted (or its creation crashed before the
  // "creating" magic became durable): nothing in it can be pool data.
  const bool empty = fresh || file_size == 0 || IsUnformattedMagic(disk.magic);
  const bool incomplete = !empty && std::memcmp(disk.magic, kPoolMagicCreating, 8) == 0;
  if (incomplete && !can_create) {
    return Status::Corruption("pool creation did not complete (crash during create): " + path_);
  }
  if (empty && !can_create) {
    return Status::Corruption("not a pmhash pool (unformatted: zero magic): " + path_);
  }
  created_ = empty || incomplete;

  if (created_) {
    const uint64_t size = devdax ? file_size : o.pool_size;
    if (size < min_size) return too_small(size);
    if (!devdax) {
      // Zero, then allocate every block now: a sparse file would turn a full file system into
      // SIGBUS at some later store.
      if (ftruncate(fd_, 0) != 0) return Status::IOError(Errno("ftruncate", path_));
      if (const int err = posix_fallocate(fd_, 0, static_cast<off_t>(size)); err != 0) {
        (void)!ftruncate(fd_, 0);  // leave no half-allocated file behind (unlinked if ours)
        const std::string what = "cannot allocate " + std::to_string(size) + " B for pool " +
                                 path_ + ": " + std::strerror(err);
        if (err == ENOSPC || err == EDQUOT) return Status::OutOfSpace(what);
        return Status::IOError(what);
      }
    }
    size_ = size;
  } else {
    PMHASH_RETURN_IF_ERROR(CheckFormattedHeader(disk, file_size, devdax, path_));
    size_ = disk.pool_size;
  }

  int flags = MAP_SHARED_VALIDATE | MAP_SYNC;
  void* p = mmap(o.map_address_hint, size_, PROT_READ | PROT_WRITE, flags, fd_, 0);
  if (p == MAP_FAILED && (errno == EOPNOTSUPP || errno == EINVAL)) {
    p = mmap(o.map_address_hint, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  } else if (p != MAP_FAILED) {
    map_sync_ = true;
  }
  if (p == MAP_FAILED) return Status::IOError(Errno("mmap", path_));
  base_ = static_cast<char*>(p);
  mapping_ = devdax       ? Mapping::kDevdax
             : map_sync_  ? Mapping::kFileMapSync
             : IsTmpfs(fd_) ? Mapping::kTmpfsFile
                            : Mapping::kFile;
  if (!devdax) {
    PMHASH_RETURN_IF_ERROR(
        CheckMapSync(IsDaxFile(fd_), map_sync_, durability_, o.allow_no_map_sync, path_));
  }
  if (sim_hook_) sim_hook_->OnMap(base_, size_);

  if (!created_) return ValidateHeader(o, spec);
  return Status::OK();
}

Status Pool::ValidateHeader(const Options& o, const PoolSpec& spec) {
  const PoolHeader& h = *header();
  // Re-check what was validated through pread, now on the mapping (the file could change between).
  if (std::memcmp(h.magic, kPoolMagic, 8) != 0 || HeaderChecksum(&h) != h.checksum ||
      h.pool_size != size_) {
    return Status::Corruption("pool header changed while opening: " + path_);
  }
  if ((h.incompat_features & ~kKnownIncompatFeatures) != 0) {
    return Status::NotSupported("pool uses incompatible features unknown to this build: " + path_);
  }
  // The geometry was checked on the pread copy; the mapped header is that copy (magic,
  // checksum and size re-checked above), so it holds here too.
  if (KindOf(h) != spec.kind) {
    return Status::InvalidArgument("pool " + path_ + " holds index '" + KindOf(h) + "', not '" +
                                   std::string(spec.kind) + "'");
  }
  if (h.params_bytes > kMaxParamsBytes) {
    return Status::Corruption("pool " + path_ + " has a " + std::to_string(h.params_bytes) +
                              "-byte parameter block (at most " +
                              std::to_string(kMaxParamsBytes) + ")");
  }
  if (h.hash_mode > static_cast<uint8_t>(HashMode::kCollide)) {
    return Status::Corruption("pool " + path_ + " has unknown hash mode " +
                              std::to_string(h.hash_mode));
  }
  if (o.hash_mode && h.hash_mode != static_cast<uint8_t>(*o.hash_mode)) {
    return Status::InvalidArgument("pool " + path_ + " was created with another hash mode");
  }
  // A pool created persistent stays persistent: opening it with `dram` would acknowledge writes
  // that never reach the media. adr <-> eadr is the platform's business; dram and sim (test)
  // pools promised nothing.
  if (PersistentDurability(h.created_durability) && durability_ == Durability::kDram &&
      !o.allow_durability_change) {
    return Status::InvalidArgument(
        "pool " + path_ + " was created with durability '" +
        std::string(DurabilityName(static_cast<Durability>(h.created_durability))) +
        "'; opening it with 'dram' would silently stop persisting writes (set "
        "Options::allow_durability_change to open it anyway)");
  }
  return Status::OK();
}

Status Pool::InitHeader(const Options& o, const PoolSpec& spec) {
  // Fields first, then the "creating" magic: a crash in between leaves a zero magic, which the
  // next open treats as unformatted.
  PoolHeader* h = header();
  std::memset(static_cast<void*>(h), 0, sizeof(PoolHeader));
  h->format_version = kFormatVersion;
  h->header_bytes = kHeaderBytes;
  h->pool_size = size_;
  h->heap_offset = AlignUp(kHeaderBytes, std::max<uint64_t>(kHeaderBytes, spec.chunk_size));
  h->chunk_size = spec.chunk_size;
  h->chunk_count = (size_ - h->heap_offset) / spec.chunk_size;
  std::memcpy(h->kind, spec.kind.data(), spec.kind.size());
  h->hash_mode = static_cast<uint8_t>(o.hash_mode.value_or(HashMode::kStrong));
  h->created_durability = static_cast<uint8_t>(durability_);
  h->params_bytes = static_cast<uint16_t>(spec.params.size());
  h->hash_seed = o.hash_seed ? *o.hash_seed : RandomSeed();
  h->create_time_ns = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch() /
                                            std::chrono::nanoseconds(1));
  if (!spec.params.empty()) std::memcpy(h->params, spec.params.data(), spec.params.size());
  h->open_count.store(1, std::memory_order_relaxed);  // this, the creating open
  PersistRange(h, sizeof(PoolHeader));
  std::memcpy(h->magic, kPoolMagicCreating, 8);
  PersistRange(h->magic, 8);
  return Status::OK();
}

Status Pool::CommitCreate() {
  PoolHeader* h = header();
  h->checksum = HeaderChecksum(h);
  PersistRange(&h->checksum, sizeof(h->checksum));
  std::memcpy(h->magic, kPoolMagic, 8);
  PersistRange(h->magic, 8);
  committed_ = true;
  return Status::OK();
}

void Pool::MarkClean() {
  header()->clean_shutdown.store(1, std::memory_order_release);
  PersistRange(&header()->clean_shutdown, 8);
}

void Pool::SetSavedState(uint64_t offset) {
  header()->saved_state.store(offset, std::memory_order_release);
  PersistRange(&header()->saved_state, 8);
}

void Pool::SetRoot(int i, uint64_t offset) {
  header()->roots[i].store(offset, std::memory_order_release);
  PersistRange(&header()->roots[i], 8);
}

void Pool::PersistRange(const void* p, size_t len) {
  WithPolicy(durability_,
             [&](auto policy) { Persister<decltype(policy)>(persist_target()).Persist(p, len); });
}

}  // namespace pmhash::pm
