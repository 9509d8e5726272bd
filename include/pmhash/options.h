// pmhash/options.h — how to open a pool and which index to run in it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pmhash {

// How stores reach persistence. The same index code is instantiated once per policy
// (src/pm/persist.h); this enum picks the instantiation at run time through the registry.
enum class Durability : uint8_t {
  kDram = 0,  // volatile: no flush, no fence. The "DRAM variant" of every index.
  kAdr = 1,   // caches are volatile: clwb (else clflushopt, else clflush) + sfence.
  kEadr = 2,  // caches are persistent: no flush, sfence for ordering only.
  kSim = 3,   // every flush/fence/non-temporal copy goes to a per-thread hook (crash simulator).
};

enum class OpenMode : uint8_t {
  kOpenOrCreate = 0,     // open the pool at `path`, create it if the file does not exist
  kCreateExclusive = 1,  // create; fail with kInvalidArgument if the file exists
  kOpenExisting = 2,     // open; fail with kNotFound if the file does not exist
};

// Hash function selection. kCollide is for tests: it forces fingerprint collisions and clusters
// of keys that share the same full hash (see src/common/hash.h for the exact construction).
enum class HashMode : uint8_t { kStrong = 0, kCollide = 1 };

// Per-index parameters come in two sorts:
//   * pool properties (std::optional): fixed when the pool is created and stored in its header.
//     Unset, a new pool gets the default written next to the field, and an existing pool is
//     opened with whatever it was created with (a pool is self-describing). Set on open, the
//     value must equal the pool's (kInvalidArgument naming the field otherwise).
//   * open-time options (plain fields): may differ from one open to the next.

// REH parameters (../shared/papers/reh.txt). Buckets are 256 B with 15 slots (the paper's
// geometry, pinned by static_assert); what varies is the directory.
struct RehParams {
  // Pool properties.
  std::optional<uint32_t> initial_depth;  // 1: global depth of a new pool (2^d buckets), <= max
  std::optional<uint32_t> max_depth;      // 32: the directory never grows past 2^max_depth
  std::optional<uint32_t> max_record_bytes;  // 2^24, reh-kv only: key + value + 8 B header
  // Open-time.
  // The paper persists an insert with one flush of the slot's line (value and key share it), so
  // it relies on a 64 B line reaching the media whole. Platforms that only guarantee 8-byte
  // failure atomicity should set tear_safe: the value is persisted before the key is written
  // (two fences per insert). Not a pool property: may differ from one open to the next.
  bool tear_safe = false;
};

// Pea Hash geometry and policy (src/index/pea, ../shared/papers/pea-hash.txt). Buckets are 256 B
// with 15 slots (pinned by static_assert); segments, directory and strategy sequence vary.
enum class PeaStrategies : uint8_t {
  kAdaptive = 0,         // Pea Hash: single -> 2-choice -> 2-choice + stash -> split (paper)
  kSingle = 1,           // ablation (Figure 7): pure single hashing
  kTwoChoice = 2,        // pure 2-choice hashing (balanced insert)
  kTwoChoiceStash = 3,   // pure 2-choice + stash
  kSingleTwoChoice = 4,  // single -> 2-choice -> split
};
struct PeaParams {
  // Pool properties.
  std::optional<uint32_t> segment_buckets;  // 2048 (paper): per segment, power of 2 in [4, 65536]
  std::optional<uint32_t> initial_depth;    // 2: global depth of a new pool (2^d segments)
  std::optional<uint32_t> max_depth;        // 32: the directory never grows past 2^max_depth
  std::optional<PeaStrategies> strategies;  // kAdaptive
  std::optional<uint32_t> max_record_bytes;  // 2^24, pea-kv only: key + value + 8 B header
  // pea-multi only: 1 (default) = the paper's data-aware adaptive buckets; 0 = the baseline the
  // paper compares with (every key a (key, pointer) slot to a value buffer of 4 values that
  // doubles: its ablation).
  std::optional<uint32_t> adaptive_buckets;
  // Open-time.
  // LB+-tree entry moving (paper 3.4).
  bool entry_moving = true;
  // The paper persists an insert into the header's line with one flush (slot and header share
  // it), and orders the two header words and entry moving within one line, so it relies on a 64 B
  // line reaching the media whole. Platforms that only guarantee 8-byte failure atomicity should
  // set tear_safe: every slot, and the fingerprint word, is persisted before the header word that
  // makes it live (one more flush and fence per insert into line 0).
  bool tear_safe = false;
};

// TurboHash geometry and policy (../shared/papers/turbohash.txt, src/index/turbo). Buckets are
// 256 B with 14 slots (pinned by static_assert); shards, their initial size and the probing scope
// vary. The item layout is chosen by the kind: "turbo" keeps 8 B keys and values inline in the
// 16 B slot (the paper's TURBO16); "turbo-kv" stores a key hash and a record offset (TURBO30:
// variable-size keys and values in a record heap).
struct TurboParams {
  // Pool properties.
  std::optional<uint32_t> shard_bits;         // 12: 2^bits shards (paper: 16); bits <= 20
  std::optional<uint32_t> initial_buckets;    // 16: buckets per shard at creation; a power of 2
  std::optional<uint32_t> probe_scope;        // 16: buckets a key may sit away from home; <= 1024
  std::optional<uint32_t> max_shard_buckets;  // 2^22: a shard never grows past this (power of 2)
  std::optional<uint32_t> max_record_bytes;   // 2^24, turbo-kv only: key + value + 8 B header
  // Open-time.
  // A rehash whose shard has more than this fraction of its slots deleted is a garbage
  // collection: a same-size rehash that drops the deleted items (paper 4.6). 1.0 disables GC.
  double gc_deleted_ratio = 0.10;
};

// SmartHT (../shared/papers/smartht.txt, src/index/smartht): chained hashing of 64 B PM buckets
// (three 1-byte tokens, three 16 B slots, an 8 B next offset: pinned by static_assert) under a
// head-bucket array, with a DRAM Bloom filter in front so that negative searches do not touch PM.
struct SmartHtParams {
  // Pool properties.
  // log2 of the head buckets of a new pool. 0 (default): from the pool size, one head per 1 KiB
  // of pool (the paper uses 2^24 heads), at least 2^6 and at most 2^24. The heads grow as keys
  // arrive (grow_keys_per_head), so this only sets the starting point.
  std::optional<uint32_t> head_bits;
  std::optional<uint32_t> max_head_bits;  // 28: the head array never grows past 2^max_head_bits
  // Heads split at a time by linear-hashing growth (a power of two, 1..1024; default 16): one
  // fence pair per batch, and a batch is the longest that a writer's growth step holds locks.
  std::optional<uint32_t> split_batch;
  std::optional<uint32_t> max_record_bytes;  // 2^24, smartht-kv only: key + value + 8 B header
  // Open-time.
  // Bloom filter bits per key of capacity (one 64 B block per key, 8 bits set in it): 24 gives
  // a false-positive rate near 1e-4 (the paper's target).
  uint32_t filter_bits_per_key = 24;
  // The table splits heads (linear hashing, split_batch at a time) while it holds more than this
  // many keys per head bucket in use (three slots per bucket). 0: never grow. Space against
  // speed: 3 gives a load factor of 0.71 (chains of 1.4 buckets), 6 0.86, the paper's 11.9
  // (200M keys in 2^24 heads) 0.92 with chains of 3.5 and half the find+ and erase throughput
  // (docs/results.md).
  double grow_keys_per_head = 3.0;
  // Erased keys leave stale bits in the filter; it is rebuilt (in the background) once the keys
  // erased since it was built pass this fraction of the keys it was sized for.
  double rebuild_erased_ratio = 0.25;
  // An insert persists the slot and its token with one flush of the bucket's line (the paper),
  // which relies on a 64 B line reaching the media whole. Platforms that only guarantee 8-byte
  // failure atomicity should set tear_safe: the slot is persisted before the token is written
  // (two fences per insert).
  bool tear_safe = false;
  // Close() saves the filter into the pool (the next clean open loads it instead of rebuilding)
  // when the table holds at least this many keys; smaller filters are rebuilt faster than they
  // are read back and checked.
  uint64_t save_filter_min_keys = 1024;
  // After a crash, smartht opens without walking its chains: it serves at once while a
  // background task walks them (rebuilding the allocator, the counts and the filter, and
  // checking every chain; a damaged chain is then reported by writes, Close and
  // CheckInvariants). smartht-kv serves reads at once and writes after the walk (which also
  // rebuilds its record heap). false: the open walks every chain first and refuses a damaged
  // pool.
  bool lazy_recovery = true;
};

// ElimDA geometry (../shared/papers/elimda.txt, src/index/elimda). Log blocks are 256 B (the
// media block: a 16 B header and 15 items, pinned by static_assert); the PM table's buckets,
// the DRAM table's buckets, the segments and the number of collecting logs vary.
struct ElimdaParams {
  // Pool properties.
  std::optional<uint32_t> bucket_items;     // 256: N_p, items per P-bucket (multiple of 16)
  std::optional<uint32_t> dbucket_items;    // 64: N_d, items per D-bucket (divides N_p)
  std::optional<uint32_t> segment_buckets;  // 16: P-buckets per segment, power of 2 <= 16
  // Collecting logs, power of 2 (hash MSBs). Unset: 8192 under eADR and DRAM (the paper's
  // cache layer), 4 under ADR (the paper's backup log, appended sequentially so that the
  // media combines the flushed items into whole blocks).
  std::optional<uint32_t> logs;
  // 1: writer logs (the paper's ADR mode, 3.7: one backup log appended in order). An insert
  // appends to the log of its thread, not of its key's hash, so that each writer fills one
  // block after another and the media combines its flushed items into whole-block writes
  // whatever the number of logs; a key's lock stripe remembers the log its last append went
  // to, which is where a search looks. 0: a key's log is chosen by its hash's MSBs (the paper's
  // eADR cache layer). Unset: 1 under ADR (and the crash simulator), 0 under eADR and in DRAM.
  std::optional<uint32_t> writer_logs;
  std::optional<uint32_t> initial_depth;    // 1: global depth of a new pool
  std::optional<uint32_t> max_depth;        // 32: the directory never grows past 2^max_depth
  std::optional<uint32_t> max_record_bytes;  // 2^24, elimda-kv only: key + value + 8 B header
  // Open-time.
  // An append persists the item and its valid bit with one flush of the log block's first line
  // when the item goes there (older items are moved out of that line to make room, LB+-tree
  // style), which relies on a 64 B line reaching the media whole. Platforms that only guarantee
  // 8-byte failure atomicity should set tear_safe: items are appended in order, each persisted
  // before the header word that makes it valid (two fences per insert).
  bool tear_safe = false;
  // Open-time, eADR only. A sealed log block's item lines are written back at once (clwb, no
  // fence: a hint, durability needs none under eADR), so that they reach the media as one 256 B
  // block rather than as lines the cache evicts apart: 0.35 -> 0.23 media writes per insert at
  // 10M keys in the harness's model (docs/results.md, "Media writes under eADR"), for about 5%
  // of insert throughput on a DRAM-backed pool. False: leave them to the cache.
  bool eadr_write_back = true;
  // Open-time. Lock stripes, power of 2 in [1, 2^20], selected by the key hash's MSBs: a read or
  // write takes its key's stripe, and the key's log's own lock only while it touches the log
  // (its active block, or a sealed block's valid bits). With fewer logs than stripes the logs
  // are append streams several stripes share (few logs: sequential appends, which the media
  // combines under ADR) while reads still spread over the stripes. Below `logs`: as many as
  // the logs (each log's lock is its stripe's).
  uint32_t lock_stripes = 8192;
  // Open-time. Sealed log blocks left without items are unlinked in batches, once they are at
  // least 1/empty_block_batch of the sealed log blocks (0: at every log swap). A batch unlinks
  // each run of consecutive empty blocks with one 8-byte store, a media write under ADR: 4 takes
  // ADR media writes per insert from 5.3 to 4.7 x 16 B at 2M keys (4.7 -> 4.0 with one log),
  // for about 3% more pool (docs/results.md). A log swap or a split that finds the pool full,
  // and Close, unlink them all first (elimda-kv's record allocation does not: it may report
  // kOutOfSpace while up to 1/N of the log blocks wait). Unset: 4 under ADR (and the crash
  // simulator), 0 under eADR and in DRAM, where the store stays in the cache.
  std::optional<uint32_t> empty_block_batch;
};

struct Options {
  // Pool location. Empty: an anonymous, unnamed DRAM region (nothing survives Close). Otherwise a
  // file on tmpfs, an ordinary or fsdax file system (mapped with MAP_SYNC when the file system
  // supports it), or a devdax character device (/dev/daxX.Y).
  std::string path;
  uint64_t pool_size = uint64_t{1} << 30;  // bytes, used on create (a devdax device has its own)
  OpenMode mode = OpenMode::kOpenOrCreate;
  // Which instantiation pmhash::Open runs. Unset: the durability the pool was created with (an
  // existing pool), else kAdr. A concrete engine (Reh<pm::Eadr>::Open) has its policy's
  // durability; setting another one here is kInvalidArgument.
  std::optional<Durability> durability;

  // Hashing, recorded in the pool header on create. On open, a given hash_mode must match the
  // pool's (kInvalidArgument otherwise); hash_seed is ignored and the pool's stored seed is used.
  // hash_mode unset: kStrong at create. hash_seed unset: a new pool gets a random seed
  // (getrandom(2)), so that nobody can choose keys that collide (hash flooding); set it for
  // reproducible tests and benchmarks.
  std::optional<HashMode> hash_mode;
  std::optional<uint64_t> hash_seed;

  // DRAM budget of an index's directory (REH: the live directory, 8 B per entry; retired ones
  // add at most as much again). Growth past it fails with kOutOfSpace; a pool whose structure
  // needs more is refused at open. 0: automatic, max(1 GiB, the pool's size).
  uint64_t max_directory_bytes = 0;

  // Space an index frees while lock-free readers may still look at it (segments, shards,
  // records) is reclaimed through epochs in batches of this many (tests: 1, so freed space is
  // reused at once).
  uint32_t reclaim_batch = 64;

  // Worker threads of an index's background work (ElimDA's log flushes, SmartHT's filter
  // rebuild; src/pm/background.h), at most 64. 0: manual mode — no thread, the tasks run on the
  // caller's thread when Close() drains them (or a test runs them), deterministically; the crash
  // suite uses it. Not for serving: SmartHT then keeps the filter it opened with (its negative
  // searches read PM once the table is past the keys that filter was sized for) and, after a
  // crash, reads PM for every negative search until Close. Close() always finishes the queued
  // work first. Indexes without background work ignore it. Open-time.
  uint32_t background_threads = 1;

  // A pool created with a persistent durability (adr, eadr) is refused when opened with `dram`,
  // which would silently drop durability; set this to open it anyway. Pools created with `dram`
  // or `sim` (tests) may be opened with any durability.
  bool allow_durability_change = false;
  // `adr`/`eadr` on a DAX file system that refuses MAP_SYNC is refused (page-fault metadata would
  // not be durable); set this to map it without MAP_SYNC anyway.
  bool allow_no_map_sync = false;

  // Advise the kernel to back the pool's mapping with transparent huge pages (2 MiB;
  // madvise(MADV_HUGEPAGE)). PM exposed through a DAX device or file system is mapped with 2 MiB
  // pages; a pool on 4 KiB pages pays a TLB miss on nearly every random probe of a large table.
  // Honoured for an anonymous pool when THP is in "madvise" or "always" mode, for a tmpfs file when
  // the mount allows it (huge=within_size or advise; huge=always needs no advice). A hint: a
  // kernel that refuses it leaves the pool on small pages. Open-time.
  bool huge_pages = false;

  // Where to try to map the pool (a hint, never MAP_FIXED). Tests use it to prove that a pool
  // reopens at another address; nullptr lets the kernel choose.
  void* map_address_hint = nullptr;

  // Persistence traffic counters (src/pm/counters.h): compiled in, off unless asked for.
  bool counters = false;
  uint32_t media_block_bytes = 256;  // 256: Optane XPLine; 64: CXL-attached memory
  // eADR: capacity of the last-level-cache model in which persisted lines stay dirty until
  // evicted (src/pm/counters.h); 0 counts every eADR persist as a media write-back at once.
  uint64_t media_cache_bytes = uint64_t{16} << 20;

  // Per-index parameters, typed. Only the struct of the chosen kind is read.
  RehParams reh;
  PeaParams pea;
  TurboParams turbo;
  SmartHtParams smartht;
  ElimdaParams elimda;
};

std::string_view DurabilityName(Durability d);
bool ParseDurability(std::string_view s, Durability* out);

}  // namespace pmhash
