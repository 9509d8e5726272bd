// src/index/pea/pea.h — Pea Hash: a performant extendible adaptive hashing index (unique keys).
//
// Paper: Zhuoxuan Liu, Shimin Chen. "Pea Hash: A Performant Extendible Adaptive Hashing Index",
// Proc. ACM Manag. Data 1(1), 2023 (../shared/papers/pea-hash.txt), sections 3.1, 3.2 and 3.4.
// Duplicate keys (section 3.3) are a separate issue: the bucket header encoding leaves room.
//
// ============================================================================================
// Design summary
// ============================================================================================
// Extendible hashing over main segments (default 2048 buckets of 256 B = 512 KB). The directory
// lives in PM: 2^G entries of 8 B (segment id, local depth, hashing strategy), indexed by the G
// most significant hash bits. Each segment is a small hash table of its own whose strategy is
// adapted to its load (paper 3.2, Definition 3.1: each strategy contains the previous one):
//
//     single hashing  --full-->  2-choice (balanced)  --full-->  2-choice + stash  --full-->
//     split into four segments (each normally back to single hashing)
//
//   * A transition moves no entry: it rewrites the strategy byte of the segment's directory
//     entries (two-step, the lowest entry being the commit: one atomic 8-byte write).
//   * A split copies the segment's live entries into four new segments built in DRAM and written
//     with non-temporal stores (NtCopy + one fence), then updates the directory in two steps: all
//     of the segment's entries but the lowest, persist; then the lowest, persist (the commit).
//     Recovery copies the lowest entry of every stride across the stride, which undoes step 1 of
//     an interrupted split and frees its segments (they were never reachable).
//   * Directory expansion builds the doubled directory in a fresh region and switches to it with
//     one atomic 8-byte write of that region's descriptor (global depth | offset) into the unused
//     one of two pool roots; recovery takes the descriptor with the larger global depth.
//   * Find: hash -> directory entry (PM) -> bucket header (PM, SIMD over 14 fingerprints) -> slot
//     line only on a fingerprint hit. A negative find under single hashing reads the directory
//     entry, the segment's lock line (DRAM) and one bucket header line.
//   * Insert: slot and header share the bucket's first line when slots 0..2 have room, so the
//     common insert is one flush + one fence. When line 0 is full the new entry goes to another
//     line and, in the same persist, up to three line-0 entries are copied next to it (LB+-tree
//     entry moving): the header update that follows frees line 0 for the next inserts.
//     PeaParams::tear_safe (no whole-line write-back) persists the slot before the header word
//     instead: two fences (two or three flushes) per insert (I2').
//   * Erase clears the slot's bitmap bit: one 8-byte store to the header word, one flush + fence
//     (the paper leaves durable deletes implicit; this is our choice). Update overwrites the value
//     word in place: one flush + fence.
//
// ============================================================================================
// Layout
// ============================================================================================
//   Pool roots: 0, 1 = directory descriptors [G:8 | region offset:56] (0 = unused),
//               2 = offset of the StashSid array.  Chunk size = segment size.
//
//   Directory region (chunk-aligned, 2^G entries):
//     entry = [ strategy:8 | local depth:8 | segment id:48 ]  (segment id = heap chunk index)
//
//   Bucket, 256 B, 256-aligned (one XPLine, four cache lines):
//     line 0:  [ bitmap:16 | fp0 .. fp5 ][ fp6 .. fp13 ][ k0 | v0 ][ k1 | v1 ][ k2 | v2 ]
//     line 1:  [ k3 | v3 ] .. [ k6 | v6 ]
//     line 2:  [ k7 | v7 ] .. [ k10| v10]
//     line 3:  [ k11| v11] .. [ k14| v14]      (slot 14 has no fingerprint)
//     bitmap bit 0 = 1: "all 15 slots are key/value" (the paper's encoding; 0 with a following 1
//     is reserved for duplicate-key (key, pointer) slots, not produced by this build);
//     bit 1+j = slot j is live. A zero header (never written) is an empty bucket.
//
//   Segment: segment_buckets buckets. Bucket 1 of a key = (h >> 8) mod B, bucket 2 = bucket 1
//   xor a nonzero value from bits 24.. of h; fingerprint = low byte of h.
//
//   StashSid array: one 8-byte word per group of B/2 main segment ids: 0 = no stash segment yet,
//   else stash segment id + 1. Main segment s uses stash buckets 2s mod B and 2s mod B + 1 of
//   stash segment StashSid[s / (B/2)] (paper 3.2).
//
//   DRAM (rebuilt at open): lock table, one 64 B line per heap chunk: segment lock + 8 bucket
//   locks (paper: b = 8), each a 32-bit word [version:31 | locked:1]; the directory descriptor
//   objects; the chunk allocator's bitmap + hint (the paper's segment bitmap and FESid).
//
// ============================================================================================
// Crash-consistency invariants (what recovery relies on)
// ============================================================================================
//   I1  A key/value is live iff its bucket's bitmap bit is set, the bucket belongs to a segment
//       reachable from the chosen directory, and (for a stash bucket) that segment's strategy is
//       2-choice + stash. Nothing else in a bucket is trusted; no offset is stored in a bucket.
//   I2  Insert writes the slot (value, then key) before the header word that sets its bit. Slot
//       in line 0: one flush covers both (whole-line write-back, as REH's I4). Otherwise the slot
//       line is persisted first, then the header. Fingerprints of slots 6..13 are in header word
//       1, written before word 0 (bitmap + fp0..5) in the same line: a slot's fingerprint is only
//       read once its bit is set, and a line written back whole never holds the new word 0 with
//       the old word 1.
//   I2' With PeaParams::tear_safe (platforms with only 8-byte failure atomicity: a line may reach
//       the media torn, 8 bytes at a time), nothing relies on two stores in one line arriving
//       together: a slot in line 0 is persisted (flush + fence) before word 0 is stored; for a
//       slot in another line, word 1 is stored before the slot line's fence and flushed with it
//       (it only gains fingerprints of slots that are not live), so both are durable before word
//       0 is stored. Two fences per insert either way. The only other multi-word line writes are
//       already ordered by fences (new segments and directory regions: NtCopy + fence before the
//       8-byte store that links them, I6; a stash bucket's cleared header: word 0 = no live slot
//       whatever word 1 holds, fenced before the transition, I5); erase, update, directory entries,
//       descriptors and StashSid words are single 8-byte stores. The crash suite runs the
//       default under whole-line write-back and tear_safe under the simulator's 8-byte tearing
//       (which breaks the default: PeaCrash.OneFlushInsertNeedsWholeLineWriteBack).
//   I3  Entry moving: the copies are persisted in their new (free) slots before the single
//       8-byte header store that sets the new bits and clears the old ones. The copies share the
//       new entry's line, which is never line 0, so this holds under tearing too (with I2' for
//       the copies' fingerprints in word 1).
//   I4  Erase: one 8-byte header store clearing the bit, then persist. Update: one 8-byte store
//       of the value, then persist.
//   I5  Strategy transitions and splits change the directory in two steps; the lowest entry of a
//       segment's stride is the commit and recovery copies it across the stride. A transition to
//       stash first clears (and persists) the segment's two stash bucket headers; a segment that
//       is not in the stash strategy never reads its stash buckets, so stale contents left there
//       by a dead segment with the same id never become live.
//   I6  New segments are completely written and fenced before the directory step that can make
//       them reachable; a new directory region likewise before its descriptor.
//   I7  Directory descriptors: the one with the larger G is current. Expansion writes only the
//       other root, after the new region is durable, so a crash leaves one of the two valid.
//   I8  No persistent memory leaks: the allocator's bitmap is DRAM only and rebuilt at open from
//       the directory, the StashSid array and the current directory region. Stash segments are
//       never freed (as in the paper); segments and directory regions of a crashed split or
//       expansion were never reachable and are free again.
//
// Where the paper is vague or wrong, and what we chose:
//   * Durable erase is not described: bitmap clear + one flush (I4).
//   * "Recovery in ms" has no live-key count to rebuild: Size() after a crash is computed lazily
//     by the first Size()/Stats() call (one scan of the bucket headers, exact when no writer runs
//     concurrently with that first call); recovery itself is O(directory + StashSid).
//   * A transition rewrites every directory entry of the segment, not "one atomic write": we use
//     the split's two-step rule (lowest entry last) so that one 8-byte write still commits it.
//   * The directory is not preallocated for a maximum table size (the paper's region capacity);
//     each expansion allocates a region of the doubled size from the heap and the descriptor
//     carries its offset (the paper's bit-63 fallback, made the only case). Retired regions stay
//     allocated until Close (optimistic readers may still read them); after a crash they are free.
//   * Readers read the PM directory directly. They check, after reading the segment lock, that
//     the directory (and its entry) are unchanged; a dead segment keeps its segment lock held, so
//     no reader validates against it. Its chunk goes back to the allocator through an epoch
//     manager (src/common/epoch.h): only once no operation that might still read it is running,
//     so an optimistic read never overlaps the non-temporal fill of a reused chunk.
//   * A quarter that fits under no allowed strategy (possible with adversarial hashes or tiny
//     segments) is split again, recursively (the paper "does not see" this case).
//   * The paper's 32-bit lock (thread id, refcount, version) lets one thread take two buckets that
//     share a lock entry; we compute the set of lock entries an operation needs and take each once,
//     in ascending order (same effect, no owner field).
//
// Concurrency (paper 3.4): fast path = optimistic segment-version snapshot + bucket locks for
// writers / bucket-version validation for readers. Inserts that need a transition or split
// retry on the slow path: directory lock (shared; exclusive to expand), segment lock, then for a
// split all 8 bucket locks (waiting for in-flight fast-path writers).
//
// Thread safety: all public operations may run concurrently. Close() requires quiescence.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "common/epoch.h"
#include "common/fingerprint.h"
#include "common/hash.h"
#include "common/huge_array.h"
#include "common/locks.h"
#include "common/resize_log.h"
#include "common/striped_counter.h"
#include "index/descriptor.h"
#include "index/lifecycle.h"
#include "pm/persist.h"
#include "pm/pool.h"
#include "pmhash/index.h"

namespace pmhash::pea {

inline constexpr int kSlots = 15;
inline constexpr int kFpSlots = 14;           // slot 14 has no fingerprint
inline constexpr uint32_t kOccMask = 0x7FFF;  // occupancy bits (bitmap >> 1)
inline constexpr uint64_t kKvFormat = 1;      // bitmap bit 0: all slots are key/value
inline constexpr uint64_t kSidMask = (uint64_t{1} << 48) - 1;
inline constexpr uint64_t kDescOffsetMask = (uint64_t{1} << 56) - 1;
inline constexpr uint32_t kMaxDepthLimit = 48;
inline constexpr int kBucketLocks = 8;

enum Strategy : uint32_t { kSingleHash = 0, kTwoChoice = 1, kStash = 2 };

struct PmSlot {
  std::atomic<uint64_t> key;
  std::atomic<uint64_t> value;
};

struct alignas(256) PmBucket {
  std::atomic<uint64_t> hdr[2];  // [bitmap:16 | fp0..fp5], [fp6..fp13]
  PmSlot slots[kSlots];
};
static_assert(sizeof(PmSlot) == 16, "a slot is one 16 B key/value unit");
static_assert(sizeof(PmBucket) == 256, "a bucket is one 256 B Optane XPLine");
static_assert(offsetof(PmBucket, slots) == 16, "16 B header, then 15 slots");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "8-byte failure-atomic stores");

// The same bytes as a plain image, for building segments in DRAM before NtCopy.
struct alignas(256) BucketImage {
  uint64_t hdr[2];
  uint64_t kv[2 * kSlots];
};
static_assert(sizeof(BucketImage) == sizeof(PmBucket));

// Line of slot j (0..3): slots 0..2 share line 0 with the header.
inline constexpr int SlotLine(int j) { return (16 + 16 * j) / 64; }
inline constexpr uint32_t kLine0Slots = 0x7;  // slots 0..2
inline constexpr uint32_t kLineSlots[4] = {0x7, 0x78, 0x780, 0x7800};

inline constexpr uint64_t PackEntry(uint64_t sid, uint32_t ld, uint32_t strategy) {
  return (sid & kSidMask) | (uint64_t{ld & 0xFF} << 48) | (uint64_t{strategy & 0xFF} << 56);
}
inline constexpr uint64_t EntrySid(uint64_t e) { return e & kSidMask; }
inline constexpr uint32_t EntryDepth(uint64_t e) { return static_cast<uint32_t>(e >> 48) & 0xFF; }
inline constexpr uint32_t EntryStrategy(uint64_t e) { return static_cast<uint32_t>(e >> 56); }
inline constexpr uint64_t PackDesc(uint32_t g, uint64_t off) {
  return (uint64_t{g} << 56) | (off & kDescOffsetMask);
}
inline constexpr uint32_t DescDepth(uint64_t d) { return static_cast<uint32_t>(d >> 56); }
inline constexpr uint64_t DescOffset(uint64_t d) { return d & kDescOffsetMask; }

// Strategy range [first, last] of each ablation mode.
inline constexpr uint32_t FirstStrategy(PeaStrategies m) {
  switch (m) {
    case PeaStrategies::kTwoChoice:
      return kTwoChoice;
    case PeaStrategies::kTwoChoiceStash:
      return kStash;
    default:
      return kSingleHash;
  }
}
inline constexpr uint32_t LastStrategy(PeaStrategies m) {
  switch (m) {
    case PeaStrategies::kSingle:
      return kSingleHash;
    case PeaStrategies::kTwoChoice:
    case PeaStrategies::kSingleTwoChoice:
      return kTwoChoice;
    default:
      return kStash;
  }
}

// Per-segment DRAM lock line: segment lock + b = 8 bucket locks, each [version:31 | locked:1].
struct alignas(64) SegLocks {
  std::atomic<uint32_t> seg{0};
  std::atomic<uint32_t> bucket[kBucketLocks] = {};
};
static_assert(sizeof(SegLocks) == 64, "one cache line per segment");
// The lock table lives in a HugeArray (raw mapped storage): Recover() constructs the lines in
// place, and the array unmaps them without running destructors.
static_assert(std::is_trivially_destructible_v<SegLocks>, "HugeArray never destroys elements");

inline bool TryLockWord(std::atomic<uint32_t>& w) {
  uint32_t v = w.load(std::memory_order_relaxed);
  return (v & 1) == 0 && w.compare_exchange_strong(v, v | 1, std::memory_order_acquire);
}
inline void LockWord(std::atomic<uint32_t>& w) {
  while (!TryLockWord(w)) CpuRelax();
}
// Releases and bumps the version (readers that overlapped retry).
inline void UnlockWord(std::atomic<uint32_t>& w) {
  w.store(w.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}
// Releases without a version change: nothing was modified under the lock.
inline void UnlockWordUnchanged(std::atomic<uint32_t>& w) {
  w.store(w.load(std::memory_order_relaxed) & ~1u, std::memory_order_release);
}

// The pool properties, as stored in the pool header (src/index/descriptor.h).
struct PersistentParams {
  uint32_t layout_version = 1;
  uint32_t bucket_bytes = sizeof(PmBucket);
  uint32_t slots = kSlots;
  uint32_t segment_buckets = 0;
  uint32_t initial_depth = 0;
  uint32_t max_depth = 0;
  uint32_t strategies = 0;
  uint32_t reserved = 0;
};

// What an open index runs with: the pool's properties and this open's options.
struct Config : PersistentParams {
  bool entry_moving = true;
  bool tear_safe = false;
};

template <pm::PersistPolicy P>
class Pea;

struct Descriptor {
  static constexpr std::string_view kName = "pea";
  static constexpr std::string_view kPaper =
      "Liu, Chen: Pea Hash: A Performant Extendible Adaptive Hashing Index (SIGMOD 2023)";
  static constexpr std::string_view kSummary =
      "extendible hashing, 512 KB segments, adaptive single/2-choice/stash strategy, 4-way split";
  using Params = PeaParams;
  using Stored = PersistentParams;
  template <class P>
  using Engine = Pea<P>;
  static const Params& Given(const Options& o) { return o.pea; }
  static constexpr auto kProperties = std::tuple{
      index::PoolProperty{"pea.segment_buckets", &Params::segment_buckets,
                          &Stored::segment_buckets, 2048u},
      index::PoolProperty{"pea.initial_depth", &Params::initial_depth, &Stored::initial_depth, 2u},
      index::PoolProperty{"pea.max_depth", &Params::max_depth, &Stored::max_depth, 32u},
      index::PoolProperty{"pea.strategies", &Params::strategies, &Stored::strategies,
                          PeaStrategies::kAdaptive},
  };
  static std::string Check(const Stored& s) {
    if (s.segment_buckets < 4 || s.segment_buckets > 65536 ||
        !std::has_single_bit(s.segment_buckets)) {
      return "segment_buckets must be a power of two in [4, 65536]";
    }
    if (s.max_depth < 2 || s.max_depth > kMaxDepthLimit) return "max_depth must be in [2, 48]";
    if (s.initial_depth > s.max_depth || s.initial_depth > 20) {
      return "initial_depth must be in [0, min(max_depth, 20)]";
    }
    if (s.strategies > static_cast<uint32_t>(PeaStrategies::kSingleTwoChoice)) {
      return "strategies: unknown strategy sequence " + std::to_string(s.strategies);
    }
    if (s.reserved != 0) return "reserved word is not zero";
    return "";
  }
  // Initial segments, directory, StashSid array and one stash segment at least.
  static index::PoolLayout Layout(const Stored& s) {
    const uint32_t chunk = s.segment_buckets * static_cast<uint32_t>(sizeof(PmBucket));
    const uint64_t dir_bytes = uint64_t{8} << s.initial_depth;
    return {chunk, (uint64_t{1} << s.initial_depth) + (dir_bytes + chunk - 1) / chunk + 2};
  }
  // 256 B bucket per 15 slots; a 4-way split leaves segments near 0.22 load and uniform keys
  // fill them in waves, so the whole table can dip that low. Plan for 0.2 (the directory,
  // retired directories and stash segments are well under 1% on top).
  static uint64_t EstimatePoolBytes(uint64_t keys) {
    return static_cast<uint64_t>(static_cast<double>(keys) * sizeof(PmBucket) / kSlots / 0.2);
  }
};

template <pm::PersistPolicy P>
class Pea {
 public:
  static constexpr std::string_view kKindName = "pea";
  using Policy = P;

  static Result<std::unique_ptr<Pea>> Open(const Options& options);
  ~Pea() {  // closes (src/index/lifecycle.h) unless Abandon()ed
    if (life_.CloseOnDestroy()) (void)Close();
  }
  void Abandon() { life_.Abandon(); }
  Pea(const Pea&) = delete;
  Pea& operator=(const Pea&) = delete;

  Status Insert(Key k, Value v) { return Write(k, v, WriteMode::kInsert); }
  Status Update(Key k, Value v) { return Write(k, v, WriteMode::kUpdate); }
  Status Upsert(Key k, Value v) { return Write(k, v, WriteMode::kUpsert); }
  Status Find(Key k, Value* v) const;
  Status Erase(Key k);
  uint64_t Size() const;
  Status ForEach(const std::function<void(Key, Value)>& fn) const;
  IndexStats Stats() const;
  Status CheckInvariants() const;
  void ResetCounters() { pool_->counters().Reset(); }
  Status Close();

  // For tests and tools.
  pm::Pool& pool() { return *pool_; }
  uint32_t global_depth() const { return dir_.load(std::memory_order_acquire)->depth; }
  // Strategy and local depth of the segment holding key k (quiescent use).
  uint32_t StrategyOf(Key k) const;
  uint32_t LocalDepthOf(Key k) const;
  // Which root (0 or 1) holds the current directory descriptor.
  int DirectoryRoot() const { return dir_.load(std::memory_order_acquire)->root; }

 private:
  enum class WriteMode { kInsert, kUpdate, kUpsert };

  struct Directory {
    uint32_t depth;
    int root;  // pool root holding its descriptor
    uint64_t offset;
    uint32_t chunks;
    std::atomic<uint64_t>* entries;  // in PM
    uint64_t size() const { return uint64_t{1} << depth; }
  };

  struct Item {
    Key key;
    Value value;
    uint64_t hash;
  };
  struct Leaf {
    uint64_t prefix;
    uint32_t depth;
    uint32_t strategy;
    uint64_t sid = 0;
    std::unique_ptr<BucketImage[]> img;
    BucketImage stash[2];
  };

  Pea(std::unique_ptr<pm::Pool> pool, const Config& config);

  static uint64_t DirIndex(uint64_t h, uint32_t g) { return g == 0 ? 0 : h >> (64 - g); }
  static uint8_t Fp(uint64_t h) { return static_cast<uint8_t>(h); }
  uint32_t Bucket1(uint64_t h) const { return static_cast<uint32_t>(h >> 8) & bmask_; }
  uint32_t Bucket2(uint64_t h, uint32_t b1) const {
    uint32_t x = static_cast<uint32_t>(h >> 24) & bmask_;
    return b1 ^ (x ? x : 1u);
  }
  char* SegmentBase(uint64_t sid) const { return heap_ + sid * seg_bytes_; }
  PmBucket* BucketAt(uint64_t sid, uint32_t b) const {
    return reinterpret_cast<PmBucket*>(SegmentBase(sid) + uint64_t{b} * sizeof(PmBucket));
  }
  uint64_t SidOf(uint64_t offset) const { return (offset - heap_offset_) / seg_bytes_; }
  uint64_t OffsetOfSid(uint64_t sid) const { return heap_offset_ + sid * seg_bytes_; }
  std::atomic<uint64_t>& StashSidWord(uint64_t sid) const {
    return stash_sids_[sid / (params_.segment_buckets / 2)];
  }
  // REQUIRES: the segment's stash segment exists.
  PmBucket* StashBucket(uint64_t sid, int k) const {
    const uint64_t ss = StashSidWord(sid).load(std::memory_order_acquire) - 1;
    return BucketAt(ss, static_cast<uint32_t>((2 * sid + k) & bmask_));
  }
  uint64_t StashArrayWords() const {
    return (chunk_count_ + params_.segment_buckets / 2 - 1) / (params_.segment_buckets / 2);
  }
  uint32_t ChunksFor(uint64_t bytes) const {
    return static_cast<uint32_t>((bytes + seg_bytes_ - 1) / seg_bytes_);
  }

  // Slot of key k in bucket b (fingerprint-filtered), or -1.
  static int SearchBucket(const PmBucket* b, Key k, uint8_t f);
  // REQUIRES: b's lock held, b not full. Persists as described in I2/I3.
  void InsertIntoBucket(PmBucket* b, Key k, Value v, uint8_t f);
  static void PrefetchBucket(const PmBucket* b) {
    const char* p = reinterpret_cast<const char*>(b);
    __builtin_prefetch(p);
    __builtin_prefetch(p + 64);
    __builtin_prefetch(p + 128);
    __builtin_prefetch(p + 192);
  }
  static uint32_t Occupancy(const PmBucket* b) {
    return static_cast<uint32_t>(b->hdr[0].load(std::memory_order_relaxed) >> 1) & kOccMask;
  }

  // A writer's view of a key's segment: its candidate buckets locked and the key located.
  struct Locked {
    const Directory* d;
    uint64_t e;         // directory entry the locks were validated against
    uint32_t st;        // its strategy
    SegLocks* L;        // lock table line of the segment
    uint32_t mask;      // bucket-lock bits held
    PmBucket* cand[4];  // candidate buckets in probe order: b1 [, b2 [, stash 0, stash 1]]
    int nc;
    PmBucket* hit;  // bucket holding the key, or nullptr
    int j;          // its slot
  };
  // Retries until the key's candidate buckets are locked under an unchanged directory entry and
  // segment version, then searches them. REQUIRES: an epoch guard.
  Locked LockAndLocate(Key k, uint64_t h) PMHASH_NO_THREAD_SAFETY_ANALYSIS;
  // Releases the bucket locks of `w`, bumping the version of those in `modified`.
  void Unlock(const Locked& w, uint32_t modified) PMHASH_NO_THREAD_SAFETY_ANALYSIS;
  Status Write(Key k, Value v, WriteMode mode);
  // Slow path of an insert that found no room: transition, split or expansion. OK = retry.
  Status SlowPath(uint64_t h, uint64_t e_seen, const Directory* d_seen);
  // REQUIRES: dir_lock_ shared, segment lock of e held. Leaves it held.
  Status Transition(Directory* d, uint64_t i, uint64_t e, uint32_t to);
  // REQUIRES: dir_lock_ shared, segment lock of e held. Releases it (dead on success).
  // *need_depth > 0: the split needs a deeper directory first (nothing changed).
  Status Split(Directory* d, uint64_t i, uint64_t e, uint32_t* need_depth);
  Status Expand(const Directory* seen, uint32_t target);
  Status EnsureStash(uint64_t sid);
  // Two-step directory write of [first, first + n): entries [first+1, ..) then `first`.
  void WriteStride(Directory* d, uint64_t first, uint64_t n,
                   const std::function<uint64_t(uint64_t)>& entry_of);

  // Split planning: place items into a fresh segment image under strategy s.
  bool Place(const std::vector<Item>& items, uint32_t s, BucketImage* img,
             BucketImage* stash) const;
  Status Plan(std::vector<Item>&& items, uint64_t prefix, uint32_t depth,
              std::vector<Leaf>* leaves) const;

  // Locks a segment for a structural read (ForEach): returns its entry.
  uint64_t LockSegmentFor(uint64_t h) const;
  void CollectSegment(uint64_t e, std::vector<std::pair<Key, Value>>* out) const;
  template <class Fn>
  void ForEachSegment(const Directory* d, Fn&& fn) const;  // strided walk: fn(first, entry)

  Status Create();
  Status Recover();
  uint64_t CountLive() const;

  std::unique_ptr<pm::Pool> pool_;
  const Config params_;
  Hasher hash_;
  pm::Persister<P> persist_;
  char* heap_ = nullptr;
  uint64_t heap_offset_ = 0;
  uint64_t seg_bytes_ = 0;
  uint64_t chunk_count_ = 0;
  uint32_t bmask_ = 0;
  uint32_t first_strategy_ = 0;
  uint32_t last_strategy_ = 0;
  std::atomic<uint64_t>* stash_sids_ = nullptr;  // in PM

  mutable HugeArray<SegLocks> locks_;  // one per heap chunk
  std::atomic<Directory*> dir_{nullptr};
  mutable RwSpinLock dir_lock_;  // exclusive: expansion; shared: directory entry updates
  std::vector<std::unique_ptr<Directory>> dirs_ PMHASH_GUARDED_BY(dir_lock_);  // live + retired
  SpinLock stash_mu_;

  // A segment freed by a split is retired through the epoch manager: its chunk returns to the
  // allocator (and may be rewritten) only after every operation that could have read it ended.
  std::atomic<uint64_t> limbo_chunks_{0};
  mutable EpochManager epoch_;

  StripedCounter size_;  // delta since open
  mutable std::atomic<bool> size_known_{false};
  mutable std::atomic<int64_t> size_base_{0};
  mutable SpinLock size_mu_;
  std::atomic<uint64_t> splits_{0};
  std::atomic<uint64_t> doublings_{0};
  std::atomic<uint64_t> to_two_choice_{0};
  std::atomic<uint64_t> to_stash_{0};
  // Coverage figures (the crash suite asserts its workloads reach these paths).
  std::atomic<uint64_t> max_stride_{0};           // widest directory stride written
  std::atomic<uint64_t> stash_splits_{0};         // splits of a segment in the stash strategy
  std::atomic<uint64_t> stale_stash_cleared_{0};  // stash buckets of a reused id, cleared (I5)
  std::atomic<uint64_t> stash_segments_{0};
  ResizeLog resize_log_;
  bool recovered_ = false;
  double recovery_seconds_ = 0;
  index::Lifecycle life_;
};

// ============================================================================================
// Implementation
// ============================================================================================

template <pm::PersistPolicy P>
Pea<P>::Pea(std::unique_ptr<pm::Pool> pool, const Config& config)
    : pool_(std::move(pool)),
      params_(config),
      hash_(pool_->hash_mode(), pool_->hash_seed()),
      persist_(pool_->persist_target()) {
  heap_offset_ = pool_->allocator().heap_offset();
  heap_ = pool_->base() + heap_offset_;
  seg_bytes_ = pool_->allocator().chunk_size();
  chunk_count_ = pool_->allocator().chunk_count();
  bmask_ = params_.segment_buckets - 1;
  first_strategy_ = FirstStrategy(static_cast<PeaStrategies>(params_.strategies));
  last_strategy_ = LastStrategy(static_cast<PeaStrategies>(params_.strategies));
}

template <pm::PersistPolicy P>
Result<std::unique_ptr<Pea<P>>> Pea<P>::Open(const Options& options) {
  auto opened = index::OpenIndexPool<Descriptor>(options, P::kDurability);
  if (!opened.ok()) return opened.status();
  Config config;
  static_cast<PersistentParams&>(config) = opened->params;
  config.entry_moving = options.pea.entry_moving;
  config.tear_safe = options.pea.tear_safe;
  std::unique_ptr<Pea> r(new (std::nothrow) Pea(std::move(opened->pool), config));
  if (!r) return Status::OutOfMemory("pea: index object");
  r->epoch_.set_reclaim_batch(options.reclaim_batch);
  if (r->pool_->created()) PMHASH_RETURN_IF_ERROR(r->Create());
  PMHASH_RETURN_IF_ERROR(r->Recover());
  return r;
}

template <pm::PersistPolicy P>
Status Pea<P>::Create() {
  pm::ChunkAllocator& alloc = pool_->allocator();
  const uint32_t g = params_.initial_depth;
  const uint64_t n = uint64_t{1} << g;
  // StashSid array, directory region, segments (and, for a pure-stash sequence, their stash
  // segments), all written with NtCopy and fenced once before the roots name them.
  std::vector<uint64_t> stash_words(StashArrayWords(), 0);
  const uint64_t stash_bytes = stash_words.size() * 8;
  auto soff = alloc.Allocate(ChunksFor(stash_bytes));
  if (!soff.ok()) return soff.status();
  auto doff = alloc.Allocate(ChunksFor(n * 8));
  if (!doff.ok()) return doff.status();
  std::vector<uint64_t> entries(n);
  std::unique_ptr<BucketImage[]> img(new BucketImage[params_.segment_buckets]);
  std::memset(static_cast<void*>(img.get()), 0, seg_bytes_);
  for (uint32_t b = 0; b < params_.segment_buckets; b++) img[b].hdr[0] = kKvFormat;
  for (uint64_t i = 0; i < n; i++) {
    auto off = alloc.Allocate(1);
    if (!off.ok()) return off.status();
    persist_.NtCopy(pool_->At<char>(off.value()), img.get(), seg_bytes_);
    const uint64_t sid = SidOf(off.value());
    entries[i] = PackEntry(sid, g, first_strategy_);
    uint64_t& w = stash_words[sid / (params_.segment_buckets / 2)];
    if (first_strategy_ == kStash && w == 0) {
      auto st = alloc.Allocate(1);  // empty stash segment: every stash bucket starts cleared
      if (!st.ok()) return st.status();
      persist_.NtCopy(pool_->At<char>(st.value()), img.get(), seg_bytes_);
      w = SidOf(st.value()) + 1;
    }
  }
  persist_.NtCopy(pool_->At<char>(soff.value()), stash_words.data(), stash_bytes);
  persist_.NtCopy(pool_->At<char>(doff.value()), entries.data(), n * 8);
  persist_.Fence();
  pool_->SetRoot(2, soff.value());
  pool_->SetRoot(0, PackDesc(g, doff.value()));
  return pool_->CommitCreate();
}

// Recovery (paper 3.4): pick the directory, mark what is reachable, strided scan that repairs
// interrupted two-step updates, rebuild the DRAM lock table. Every value read is validated.
template <pm::PersistPolicy P>
Status Pea<P>::Recover() {
  const auto t0 = std::chrono::steady_clock::now();
  pm::ChunkAllocator& alloc = pool_->allocator();
  alloc.Reset();

  // The directory: the valid descriptor with the larger global depth.
  uint64_t desc[2] = {pool_->root(0), pool_->root(1)};
  int pick = -1;
  for (int r = 0; r < 2; r++) {
    if (desc[r] == 0) continue;
    if (pick < 0 || DescDepth(desc[r]) > DescDepth(desc[pick])) {
      pick = r;
    } else if (DescDepth(desc[r]) == DescDepth(desc[pick])) {
      return Status::Corruption("pea: both directory descriptors claim global depth " +
                                std::to_string(DescDepth(desc[r])));
    }
  }
  if (pick < 0) return Status::Corruption("pea: pool has no directory (roots 0 and 1 are empty)");
  const uint32_t g = DescDepth(desc[pick]);
  const uint64_t doff = DescOffset(desc[pick]);
  if (g > params_.max_depth) {
    return Status::Corruption("pea: directory depth " + std::to_string(g) + " exceeds max_depth");
  }
  const uint64_t n = uint64_t{1} << g;
  const uint32_t dchunks = ChunksFor(n * 8);
  if (!alloc.ValidChunk(doff, dchunks)) {
    return Status::Corruption("pea: directory region at offset " + std::to_string(doff) + " (2^" +
                              std::to_string(g) + " entries) is not in the heap");
  }
  PMHASH_RETURN_IF_ERROR(alloc.MarkReachable(doff, dchunks));

  // The StashSid array and the stash segments it names.
  const uint64_t soff = pool_->root(2);
  const uint64_t swords = StashArrayWords();
  if (!alloc.ValidChunk(soff, ChunksFor(swords * 8))) {
    return Status::Corruption("pea: StashSid array offset " + std::to_string(soff) +
                              " is not in the heap");
  }
  if (Status s = alloc.MarkReachable(soff, ChunksFor(swords * 8)); !s.ok()) {
    return Status::Corruption("pea: StashSid array: " + std::string(s.message()));
  }
  stash_sids_ = pool_->At<std::atomic<uint64_t>>(soff);
  uint64_t nstash = 0;
  for (uint64_t w = 0; w < swords; w++) {
    const uint64_t x = stash_sids_[w].load(std::memory_order_relaxed);
    if (x == 0) continue;
    if (x - 1 >= chunk_count_) {
      return Status::Corruption("pea: StashSid[" + std::to_string(w) + "] names no segment");
    }
    if (Status s = alloc.MarkReachable(OffsetOfSid(x - 1)); !s.ok()) {
      return Status::Corruption("pea: stash segment: " + std::string(s.message()));
    }
    nstash++;
  }

  // Strided scan of the directory (paper: copy the lowest element across its stride).
  auto* entries = pool_->At<std::atomic<uint64_t>>(doff);
  bool repaired = false;
  for (uint64_t i = 0; i < n;) {
    const uint64_t e = entries[i].load(std::memory_order_relaxed);
    const uint32_t ld = EntryDepth(e);
    const uint32_t st = EntryStrategy(e);
    if (ld > g)
      return Status::Corruption("pea: directory entry " + std::to_string(i) +
                                " has local depth above the global depth");
    if (st < first_strategy_ || st > last_strategy_) {
      return Status::Corruption("pea: directory entry " + std::to_string(i) + " has strategy " +
                                std::to_string(st));
    }
    const uint64_t stride = uint64_t{1} << (g - ld);
    if (i % stride != 0) {
      return Status::Corruption("pea: segment depths do not tile the directory at entry " +
                                std::to_string(i));
    }
    const uint64_t sid = EntrySid(e);
    if (sid >= chunk_count_) {
      return Status::Corruption("pea: directory entry " + std::to_string(i) + " names segment " +
                                std::to_string(sid) + " outside the heap");
    }
    if (Status s = alloc.MarkReachable(OffsetOfSid(sid)); !s.ok()) {
      return Status::Corruption("pea: segment of directory entry " + std::to_string(i) + ": " +
                                std::string(s.message()));
    }
    if (st == kStash && stash_sids_[sid / (params_.segment_buckets / 2)].load() == 0) {
      return Status::Corruption("pea: segment " + std::to_string(sid) +
                                " uses a stash that does not exist");
    }
    for (uint64_t x = i + 1; x < i + stride; x++) {
      if (entries[x].load(std::memory_order_relaxed) != e) {
        entries[x].store(e, std::memory_order_relaxed);
        persist_.Flush(&entries[x], 8);
        repaired = true;
      }
    }
    i += stride;
  }
  if (repaired) persist_.Fence();

  // DRAM state.
  locks_ = HugeArray<SegLocks>(chunk_count_);
  if (!locks_) return Status::OutOfMemory("pea: lock table");
  // The mapping is zero-filled, but only a constructor begins an atomic's lifetime (as REH
  // constructs its directory entries in place).
  std::uninitialized_default_construct_n(locks_.data(), locks_.size());
  auto dir = std::make_unique<Directory>();
  dir->depth = g;
  dir->root = pick;
  dir->offset = doff;
  dir->chunks = dchunks;
  dir->entries = entries;
  {
    LockGuard<RwSpinLock> gd(dir_lock_);
    dirs_.clear();
    dir_.store(dir.get(), std::memory_order_release);
    dirs_.push_back(std::move(dir));
  }
  stash_segments_.store(nstash);
  size_.Reset(0);
  size_base_.store(0);
  size_known_.store(pool_->created());
  recovered_ = !pool_->created() && !pool_->was_clean();
  recovery_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::OK();
}

template <pm::PersistPolicy P>
int Pea<P>::SearchBucket(const PmBucket* b, Key k, uint8_t f) {
  const uint64_t w0 = b->hdr[0].load(std::memory_order_relaxed);
  const uint64_t w1 = b->hdr[1].load(std::memory_order_relaxed);
  const uint32_t occ = static_cast<uint32_t>(w0 >> 1) & kOccMask;
  const __m128i tags = _mm_set_epi64x(static_cast<long long>(w1), static_cast<long long>(w0));
  for (uint32_t m = (Match16(tags, f) >> 2) & occ; m; m &= m - 1) {
    const int j = std::countr_zero(m);
    if (b->slots[j].key.load(std::memory_order_relaxed) == k) return j;
  }
  if ((occ >> kFpSlots) & 1) {
    if (b->slots[kFpSlots].key.load(std::memory_order_relaxed) == k) return kFpSlots;
  }
  return -1;
}

inline void SetFpByte(uint64_t* w, int j, uint8_t f) {
  const int byte = 2 + j;
  const int sh = (byte & 7) * 8;
  w[byte >> 3] = (w[byte >> 3] & ~(uint64_t{0xFF} << sh)) | (uint64_t{f} << sh);
}
inline uint8_t GetFpByte(const uint64_t* w, int j) {
  const int byte = 2 + j;
  return static_cast<uint8_t>(w[byte >> 3] >> ((byte & 7) * 8));
}

template <pm::PersistPolicy P>
void Pea<P>::InsertIntoBucket(PmBucket* b, Key k, Value v, uint8_t f) {
  uint64_t w[2] = {b->hdr[0].load(std::memory_order_relaxed),
                   b->hdr[1].load(std::memory_order_relaxed)};
  const uint32_t occ = static_cast<uint32_t>(w[0] >> 1) & kOccMask;
  const uint32_t free_slots = ~occ & kOccMask;
  auto put = [&](int j, Key key, Value val) {
    b->slots[j].value.store(val, std::memory_order_relaxed);
    b->slots[j].key.store(key, std::memory_order_release);
  };
  // Fast case: a free slot in line 0, persisted together with the header (I2).
  int j = -1;
  if (free_slots & kLine0Slots) {
    j = std::countr_zero(free_slots & kLine0Slots);
  } else if (!params_.entry_moving) {
    j = std::countr_zero(free_slots);
  }
  if (j >= 0 && SlotLine(j) == 0) {
    put(j, k, v);
    // I2': with torn lines the slot must be durable before the header word names it.
    if (params_.tear_safe) persist_.Persist(&b->slots[j], sizeof(PmSlot));
    w[0] |= kKvFormat | (uint64_t{1} << (1 + j));
    SetFpByte(w, j, f);
    b->hdr[0].store(w[0], std::memory_order_release);
    persist_.Persist(b, 64);
    return;
  }
  uint32_t targets = 0;  // slots to fill: the new entry first, then moved line-0 entries
  uint32_t moved_from = 0;
  if (j < 0) {
    // Line 0 is full: pick the line (1..3, fingerprinted slots only) with the most room.
    int best = -1, best_free = 0;
    for (int line = 1; line <= 3; line++) {
      const int fr = std::popcount(free_slots & kLineSlots[line] & ((1u << kFpSlots) - 1));
      if (fr > best_free) {
        best = line;
        best_free = fr;
      }
    }
    if (best < 0) {
      j = kFpSlots;  // only slot 14 is left (the caller checked that the bucket is not full)
    } else {
      uint32_t room = free_slots & kLineSlots[best] & ((1u << kFpSlots) - 1);
      j = std::countr_zero(room);
      room &= room - 1;
      // Entry moving: copy line-0 entries into the remaining room of that line.
      for (uint32_t src = occ & kLine0Slots; src && room; src &= src - 1, room &= room - 1) {
        const int from = std::countr_zero(src);
        const int to = std::countr_zero(room);
        put(to, b->slots[from].key.load(std::memory_order_relaxed),
            b->slots[from].value.load(std::memory_order_relaxed));
        SetFpByte(w, to, GetFpByte(w, from));
        targets |= 1u << to;
        moved_from |= 1u << from;
      }
    }
  }
  put(j, k, v);
  if (j < kFpSlots) SetFpByte(w, j, f);
  targets |= 1u << j;
  if (params_.tear_safe && w[1] != b->hdr[1].load(std::memory_order_relaxed)) {
    // I2': word 1 only gains fingerprints of slots that are not live yet, so it may be stored
    // now and made durable by the slot line's fence, before word 0 sets their bits.
    b->hdr[1].store(w[1], std::memory_order_relaxed);
    persist_.Flush(b, 64);
  }
  // The new slots' line is durable before the header that makes them live (I2, I3).
  persist_.Persist(&b->slots[j], 16);
  // (Moved entries share the new entry's line: the flush above covered them.)
  w[0] = (w[0] | kKvFormat | (uint64_t{targets} << 1)) & ~(uint64_t{moved_from} << 1);
  b->hdr[1].store(w[1], std::memory_order_relaxed);
  b->hdr[0].store(w[0], std::memory_order_release);
  persist_.Persist(b, 64);
}

template <pm::PersistPolicy P>
Status Pea<P>::Find(Key k, Value* out) const {
  EpochManager::Guard guard(epoch_);
  const uint64_t h = hash_(k);
  const uint8_t f = Fp(h);
  const uint32_t b1 = Bucket1(h);
  for (;;) {
    const Directory* d = dir_.load(std::memory_order_acquire);
    const uint64_t i = DirIndex(h, d->depth);
    const uint64_t e = d->entries[i].load(std::memory_order_acquire);
    const uint64_t sid = EntrySid(e);
    const PmBucket* B1 = BucketAt(sid, b1);
    const uint32_t st = EntryStrategy(e);
    // Overlap the misses: the whole first bucket (header and slot lines share one 4 KB page,
    // so one TLB walk) and the second candidate's header are requested before anything is read.
    PrefetchBucket(B1);
    if (st >= kTwoChoice) __builtin_prefetch(BucketAt(sid, Bucket2(h, b1)));
    SegLocks& L = locks_[sid];
    const uint32_t sv = L.seg.load(std::memory_order_acquire);
    if (sv & 1) {
      CpuRelax();
      continue;
    }
    if (d->entries[i].load(std::memory_order_acquire) != e ||
        dir_.load(std::memory_order_acquire) != d) {
      continue;
    }
    std::atomic<uint32_t>& l1 = L.bucket[b1 & (kBucketLocks - 1)];
    const uint32_t v1 = l1.load(std::memory_order_acquire);
    if (v1 & 1) {
      CpuRelax();
      continue;
    }
    const PmBucket* hit = nullptr;
    int j = SearchBucket(B1, k, f);
    if (j >= 0) hit = B1;
    bool consistent = true;
    if (!hit && st >= kTwoChoice) {
      const uint32_t b2 = Bucket2(h, b1);
      const PmBucket* B2 = BucketAt(sid, b2);
      std::atomic<uint32_t>& l2 = L.bucket[b2 & (kBucketLocks - 1)];
      const uint32_t v2 = l2.load(std::memory_order_acquire);
      if (v2 & 1) {
        CpuRelax();
        continue;
      }
      j = SearchBucket(B2, k, f);
      if (j >= 0) hit = B2;
      if (!hit && st == kStash) {
        const uint32_t s0 = L.bucket[0].load(std::memory_order_acquire);
        const uint32_t s1 = L.bucket[1].load(std::memory_order_acquire);
        if ((s0 | s1) & 1) {
          CpuRelax();
          continue;
        }
        for (int s = 0; s < 2 && !hit; s++) {
          const PmBucket* S = StashBucket(sid, s);
          j = SearchBucket(S, k, f);
          if (j >= 0) hit = S;
        }
        std::atomic_thread_fence(std::memory_order_acquire);
        consistent = L.bucket[0].load(std::memory_order_relaxed) == s0 &&
                     L.bucket[1].load(std::memory_order_relaxed) == s1;
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      consistent = consistent && l2.load(std::memory_order_relaxed) == v2;
    }
    const Value val = hit ? hit->slots[j].value.load(std::memory_order_relaxed) : 0;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (!consistent || l1.load(std::memory_order_relaxed) != v1 ||
        L.seg.load(std::memory_order_relaxed) != sv) {
      continue;
    }
    if (!hit) return Status::NotFound();
    *out = val;
    return Status::OK();
  }
}

template <pm::PersistPolicy P>
typename Pea<P>::Locked Pea<P>::LockAndLocate(Key k, uint64_t h) {
  const uint8_t f = Fp(h);
  const uint32_t b1 = Bucket1(h);
  for (;;) {
    const Directory* d = dir_.load(std::memory_order_acquire);
    const uint64_t i = DirIndex(h, d->depth);
    const uint64_t e = d->entries[i].load(std::memory_order_acquire);
    const uint64_t sid = EntrySid(e);
    PmBucket* B1 = BucketAt(sid, b1);
    const uint32_t st = EntryStrategy(e);
    const uint32_t b2 = st >= kTwoChoice ? Bucket2(h, b1) : b1;
    PrefetchBucket(B1);
    if (st >= kTwoChoice) __builtin_prefetch(BucketAt(sid, b2), 1);
    SegLocks& L = locks_[sid];
    const uint32_t sv = L.seg.load(std::memory_order_acquire);
    if (sv & 1) {
      CpuRelax();
      continue;
    }
    if (d->entries[i].load(std::memory_order_acquire) != e ||
        dir_.load(std::memory_order_acquire) != d) {
      continue;
    }
    uint32_t mask = 1u << (b1 & (kBucketLocks - 1));
    if (st >= kTwoChoice) mask |= 1u << (b2 & (kBucketLocks - 1));
    if (st == kStash) mask |= 3u;
    for (uint32_t m = mask; m; m &= m - 1) LockWord(L.bucket[std::countr_zero(m)]);
    if (L.seg.load(std::memory_order_acquire) != sv) {
      for (uint32_t m = mask; m; m &= m - 1) UnlockWordUnchanged(L.bucket[std::countr_zero(m)]);
      continue;
    }
    // Candidate buckets in probe order.
    PmBucket* cand[4] = {B1, nullptr, nullptr, nullptr};
    int nc = 1;
    if (st >= kTwoChoice) cand[nc++] = BucketAt(sid, b2);
    if (st == kStash) {
      cand[nc++] = StashBucket(sid, 0);
      cand[nc++] = StashBucket(sid, 1);
    }
    int j = -1;
    PmBucket* hit = nullptr;
    for (int c = 0; c < nc && !hit; c++) {
      j = SearchBucket(cand[c], k, f);
      if (j >= 0) hit = cand[c];
    }
    return Locked{d, e, st, &L, mask, {cand[0], cand[1], cand[2], cand[3]}, nc, hit, j};
  }
}

template <pm::PersistPolicy P>
void Pea<P>::Unlock(const Locked& w, uint32_t modified) {
  for (uint32_t m = w.mask; m; m &= m - 1) {
    const int x = std::countr_zero(m);
    if (modified & (1u << x)) {
      UnlockWord(w.L->bucket[x]);
    } else {
      UnlockWordUnchanged(w.L->bucket[x]);
    }
  }
}

template <pm::PersistPolicy P>
Status Pea<P>::Write(Key k, Value v, WriteMode mode) {
  if (life_.closed()) [[unlikely]] return index::Lifecycle::ClosedError(kKindName);
  EpochManager::Guard guard(epoch_);
  const uint64_t h = hash_(k);
  for (;;) {
    const Locked w = LockAndLocate(k, h);
    PmBucket* const hit = w.hit;
    const int j = w.j;
    const uint32_t st = w.st;
    PmBucket* const B1 = w.cand[0];
    uint32_t modified = 0;  // lock bits whose buckets changed
    Status result = Status::OK();
    bool done = true;
    if (hit) {
      if (mode == WriteMode::kInsert) {
        result = Status::Exists();
      } else {
        hit->slots[j].value.store(v, std::memory_order_release);  // I4
        persist_.Persist(&hit->slots[j].value, sizeof(Value));
        modified = w.mask;
      }
    } else if (mode == WriteMode::kUpdate) {
      result = Status::NotFound();
    } else {
      // Target: b1 (single); the emptier of b1/b2 (balanced 2-choice); else the emptier stash.
      PmBucket* tgt = nullptr;
      const int o1 = std::popcount(Occupancy(B1));
      if (st == kSingleHash) {
        if (o1 < kSlots) tgt = B1;
      } else {
        const int o2 = std::popcount(Occupancy(w.cand[1]));
        if (o1 < kSlots || o2 < kSlots) tgt = o2 < o1 ? w.cand[1] : B1;
        if (!tgt && st == kStash) {
          const int s0 = std::popcount(Occupancy(w.cand[2]));
          const int s1 = std::popcount(Occupancy(w.cand[3]));
          if (s0 < kSlots || s1 < kSlots) tgt = s1 < s0 ? w.cand[3] : w.cand[2];
        }
      }
      if (tgt) {
        InsertIntoBucket(tgt, k, v, Fp(h));
        modified = w.mask;
        size_.Add(1);
      } else {
        done = false;
      }
    }
    Unlock(w, modified);
    if (done) return result;
    PMHASH_RETURN_IF_ERROR(SlowPath(h, w.e, w.d));
  }
}

template <pm::PersistPolicy P>
Status Pea<P>::Erase(Key k) {
  if (life_.closed()) [[unlikely]] return index::Lifecycle::ClosedError(kKindName);
  EpochManager::Guard guard(epoch_);
  const Locked w = LockAndLocate(k, hash_(k));
  PmBucket* const hit = w.hit;
  if (hit) {
    // I4: one 8-byte store clears the bit; one flush + fence makes the erase durable.
    const uint64_t w0 = hit->hdr[0].load(std::memory_order_relaxed);
    hit->hdr[0].store(w0 & ~(uint64_t{1} << (1 + w.j)), std::memory_order_release);
    persist_.Persist(hit, 64);
    size_.Add(-1);
  }
  Unlock(w, hit ? w.mask : 0);
  return hit ? Status::OK() : Status::NotFound();
}

template <pm::PersistPolicy P>
Status Pea<P>::SlowPath(uint64_t h, uint64_t e_seen,
                        const Directory* d_seen) PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  dir_lock_.lock_shared();
  Directory* d = dir_.load(std::memory_order_acquire);
  const uint64_t i = DirIndex(h, d->depth);
  const uint64_t e = d->entries[i].load(std::memory_order_acquire);
  if (d != d_seen || e != e_seen) {
    dir_lock_.unlock_shared();
    return Status::OK();  // the segment changed meanwhile: retry the fast path
  }
  SegLocks& L = locks_[EntrySid(e)];
  if (!TryLockWord(L.seg)) {
    dir_lock_.unlock_shared();
    CpuRelax();
    return Status::OK();  // another thread is transitioning or splitting it
  }
  // Entries of a segment change only under its lock or the exclusive directory lock.
  if (d->entries[i].load(std::memory_order_acquire) != e) {
    UnlockWordUnchanged(L.seg);
    dir_lock_.unlock_shared();
    return Status::OK();
  }
  const uint32_t st = EntryStrategy(e);
  if (st < last_strategy_) {
    Status s = Transition(d, i, e, st + 1);
    UnlockWord(L.seg);
    dir_lock_.unlock_shared();
    return s;
  }
  const uint32_t ld = EntryDepth(e);
  uint32_t need = 0;
  Status s;
  if (ld + 2 > d->depth) {
    need = ld + 2;
    UnlockWordUnchanged(L.seg);
  } else {
    s = Split(d, i, e, &need);
  }
  dir_lock_.unlock_shared();
  if (!s.ok()) return s;
  if (need > 0) {
    if (need > params_.max_depth) {
      return Status::OutOfSpace("pea: directory at max_depth " + std::to_string(params_.max_depth) +
                                " and a segment of that depth is full");
    }
    return Expand(d, need);
  }
  return Status::OK();
}

template <pm::PersistPolicy P>
void Pea<P>::WriteStride(Directory* d, uint64_t first, uint64_t n,
                         const std::function<uint64_t(uint64_t)>& entry_of) {
  if (n > max_stride_.load(std::memory_order_relaxed)) {
    max_stride_.store(n, std::memory_order_relaxed);  // statistics only: races are harmless
  }
  for (uint64_t x = first + 1; x < first + n; x++) {
    d->entries[x].store(entry_of(x), std::memory_order_release);
  }
  if (n > 1) {
    persist_.Flush(&d->entries[first + 1], (n - 1) * 8);
    persist_.Fence();
  }
  d->entries[first].store(entry_of(first), std::memory_order_release);  // the commit
  persist_.Persist(&d->entries[first], 8);
}

template <pm::PersistPolicy P>
Status Pea<P>::EnsureStash(uint64_t sid) {
  std::atomic<uint64_t>& w = StashSidWord(sid);
  if (w.load(std::memory_order_acquire) != 0) return Status::OK();
  LockGuard<SpinLock> g(stash_mu_);
  if (w.load(std::memory_order_acquire) != 0) return Status::OK();
  auto off = pool_->allocator().Allocate(1);
  if (!off.ok()) return off.status();
  // Its buckets are cleared by each main segment as it turns to stash (I5).
  w.store(SidOf(off.value()) + 1, std::memory_order_release);
  persist_.Persist(&w, 8);
  stash_segments_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

template <pm::PersistPolicy P>
Status Pea<P>::Transition(Directory* d, uint64_t i, uint64_t e, uint32_t to) {
  const uint64_t sid = EntrySid(e);
  if (to == kStash) {
    PMHASH_RETURN_IF_ERROR(EnsureStash(sid));
    for (int s = 0; s < 2; s++) {
      PmBucket* sb = StashBucket(sid, s);
      const uint64_t h0 = sb->hdr[0].load(std::memory_order_relaxed);
      if ((h0 != 0 && h0 != kKvFormat) || sb->hdr[1].load(std::memory_order_relaxed) != 0) {
        stale_stash_cleared_.fetch_add(1, std::memory_order_relaxed);
      }
      sb->hdr[1].store(0, std::memory_order_relaxed);
      sb->hdr[0].store(kKvFormat, std::memory_order_release);
      persist_.Flush(sb, 64);
    }
    persist_.Fence();
  }
  const uint64_t stride = uint64_t{1} << (d->depth - EntryDepth(e));
  const uint64_t first = i & ~(stride - 1);
  const uint64_t ne = PackEntry(sid, EntryDepth(e), to);
  WriteStride(d, first, stride, [ne](uint64_t) { return ne; });
  (to == kStash ? to_stash_ : to_two_choice_).fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

template <pm::PersistPolicy P>
bool Pea<P>::Place(const std::vector<Item>& items, uint32_t s, BucketImage* img,
                   BucketImage* stash) const {
  // Build order inside a bucket: lines 1..3 first, so that line 0 stays free for the next
  // one-flush inserts; slot 14 (no fingerprint) last.
  static constexpr int kOrder[kSlots] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 0, 1, 2, 14};
  const uint32_t nb = params_.segment_buckets;
  for (uint32_t b = 0; b < nb; b++) {
    img[b].hdr[0] = kKvFormat;
    img[b].hdr[1] = 0;
  }
  for (int x = 0; x < 2; x++) {
    stash[x].hdr[0] = kKvFormat;
    stash[x].hdr[1] = 0;
  }
  auto count = [](const BucketImage& b) {
    return std::popcount(static_cast<uint32_t>(b.hdr[0] >> 1) & kOccMask);
  };
  auto put = [](BucketImage& b, const Item& it) {
    const int j = kOrder[std::popcount(static_cast<uint32_t>(b.hdr[0] >> 1) & kOccMask)];
    b.kv[2 * j] = it.key;
    b.kv[2 * j + 1] = it.value;
    b.hdr[0] |= uint64_t{1} << (1 + j);
    if (j < kFpSlots) SetFpByte(b.hdr, j, Fp(it.hash));
  };
  for (const Item& it : items) {
    const uint32_t b1 = Bucket1(it.hash);
    BucketImage* tgt = nullptr;
    const int o1 = count(img[b1]);
    if (s == kSingleHash) {
      if (o1 < kSlots) tgt = &img[b1];
    } else {
      const uint32_t b2 = Bucket2(it.hash, b1);
      const int o2 = count(img[b2]);
      if (o1 < kSlots || o2 < kSlots) tgt = o2 < o1 ? &img[b2] : &img[b1];
      if (!tgt && s == kStash) {
        const int s0 = count(stash[0]), s1 = count(stash[1]);
        if (s0 < kSlots || s1 < kSlots) tgt = s1 < s0 ? &stash[1] : &stash[0];
      }
    }
    if (!tgt) return false;
    put(*tgt, it);
  }
  return true;
}

template <pm::PersistPolicy P>
Status Pea<P>::Plan(std::vector<Item>&& items, uint64_t prefix, uint32_t depth,
                    std::vector<Leaf>* leaves) const {
  // Four quarters at depth + 2; a quarter that fits under no allowed strategy splits again.
  if (depth + 2 > params_.max_depth) {
    return Status::OutOfSpace("pea: a segment at max_depth " + std::to_string(params_.max_depth) +
                              " cannot hold its keys");
  }
  const uint32_t nd = depth + 2;
  std::vector<Item> q[4];
  for (const Item& it : items) q[(it.hash >> (64 - nd)) & 3].push_back(it);
  items.clear();
  items.shrink_to_fit();
  for (uint64_t x = 0; x < 4; x++) {
    Leaf leaf;
    leaf.prefix = (prefix << 2) | x;
    leaf.depth = nd;
    leaf.img.reset(new BucketImage[params_.segment_buckets]);
    bool placed = false;
    for (uint32_t s = first_strategy_; s <= last_strategy_ && !placed; s++) {
      if (Place(q[x], s, leaf.img.get(), leaf.stash)) {
        leaf.strategy = s;
        placed = true;
      }
    }
    if (placed) {
      leaves->push_back(std::move(leaf));
    } else {
      leaf.img.reset();
      PMHASH_RETURN_IF_ERROR(Plan(std::move(q[x]), leaf.prefix, nd, leaves));
    }
  }
  return Status::OK();
}

template <pm::PersistPolicy P>
Status Pea<P>::Split(Directory* d, uint64_t i, uint64_t e, uint32_t* need_depth) {
  const auto started = ResizeLog::Now();
  const uint64_t sid = EntrySid(e);
  const uint32_t ld = EntryDepth(e);
  const uint32_t st = EntryStrategy(e);
  const uint32_t g = d->depth;
  const uint64_t stride = uint64_t{1} << (g - ld);
  const uint64_t first = i & ~(stride - 1);
  SegLocks& L = locks_[sid];
  // Wait for in-flight fast-path writers (they validated the segment version before we locked).
  for (int x = 0; x < kBucketLocks; x++) LockWord(L.bucket[x]);
  auto release = [&](bool dead) {
    for (int x = 0; x < kBucketLocks; x++) UnlockWord(L.bucket[x]);
    if (!dead) UnlockWord(L.seg);  // a dead segment keeps its lock held until reuse
  };

  // Collect the live entries.
  std::vector<Item> items;
  items.reserve(static_cast<size_t>(params_.segment_buckets) * kSlots);
  auto collect = [&](const PmBucket* b) {
    for (uint32_t m = Occupancy(b); m; m &= m - 1) {
      const int j = std::countr_zero(m);
      const Key k = b->slots[j].key.load(std::memory_order_relaxed);
      items.push_back({k, b->slots[j].value.load(std::memory_order_relaxed), hash_(k)});
    }
  };
  for (uint32_t b = 0; b < params_.segment_buckets; b++) collect(BucketAt(sid, b));
  if (st == kStash) {
    collect(StashBucket(sid, 0));
    collect(StashBucket(sid, 1));
  }
  std::vector<Leaf> leaves;
  const uint64_t prefix = ld == 0 ? 0 : first >> (g - ld);
  if (Status s = Plan(std::move(items), prefix, ld, &leaves); !s.ok()) {
    release(false);
    return s;
  }
  uint32_t maxd = 0;
  for (const Leaf& l : leaves) maxd = std::max(maxd, l.depth);
  if (maxd > g) {
    release(false);
    *need_depth = maxd;
    return Status::OK();
  }
  // Allocate and write the new segments (I6).
  pm::ChunkAllocator& alloc = pool_->allocator();
  for (size_t x = 0; x < leaves.size(); x++) {
    auto off = alloc.Allocate(1);
    Status s = off.ok() ? Status::OK() : off.status();
    if (off.ok()) {
      leaves[x].sid = SidOf(off.value());
      locks_[leaves[x].sid].seg.fetch_or(1, std::memory_order_acquire);  // fresh or dead
      if (leaves[x].strategy == kStash) s = EnsureStash(leaves[x].sid);
      if (!s.ok()) x++;  // free this one too
    }
    if (!s.ok()) {
      for (size_t y = 0; y < x; y++) alloc.Free(OffsetOfSid(leaves[y].sid));  // locks stay held
      release(false);
      return s;
    }
  }
  for (Leaf& l : leaves) {
    persist_.NtCopy(SegmentBase(l.sid), l.img.get(), seg_bytes_);
    if (l.strategy == kStash) {
      for (int s = 0; s < 2; s++) {
        persist_.NtCopy(StashBucket(l.sid, s), &l.stash[s], sizeof(BucketImage));
      }
    }
  }
  persist_.Fence();
  // Two-step directory update (I5): lowest entry last.
  WriteStride(d, first, stride, [&](uint64_t x) {
    const uint64_t h = (x << (64 - g));  // any hash with the GD-bit prefix x (g >= 2 here)
    for (const Leaf& l : leaves) {
      if ((h >> (64 - l.depth)) == l.prefix) return PackEntry(l.sid, l.depth, l.strategy);
    }
    return e;  // unreachable: the leaves tile the segment's range
  });
  for (const Leaf& l : leaves) UnlockWord(locks_[l.sid].seg);
  release(true);
  limbo_chunks_.fetch_add(1, std::memory_order_relaxed);
  epoch_.Retire([this, sid] {
    pool_->allocator().Free(OffsetOfSid(sid));
    limbo_chunks_.fetch_sub(1, std::memory_order_relaxed);
  });
  splits_.fetch_add(1, std::memory_order_relaxed);
  if (st == kStash) stash_splits_.fetch_add(1, std::memory_order_relaxed);
  resize_log_.Record(started);
  return Status::OK();
}

template <pm::PersistPolicy P>
Status Pea<P>::Expand(const Directory* seen, uint32_t target) {
  const auto started = ResizeLog::Now();
  LockGuard<RwSpinLock> g(dir_lock_);
  Directory* d = dir_.load(std::memory_order_acquire);
  if (d != seen && d->depth >= target) return Status::OK();
  while (d->depth < target) {
    if (d->depth + 1 > params_.max_depth) {
      return Status::OutOfSpace("pea: directory at max_depth " + std::to_string(params_.max_depth));
    }
    const uint32_t ng = d->depth + 1;
    const uint64_t n = uint64_t{1} << ng;
    const uint32_t chunks = ChunksFor(n * 8);
    auto off = pool_->allocator().Allocate(chunks);
    if (!off.ok()) return off.status();
    std::vector<uint64_t> img(n);
    for (uint64_t x = 0; x < d->size(); x++) {
      img[2 * x] = img[2 * x + 1] = d->entries[x].load(std::memory_order_relaxed);
    }
    persist_.NtCopy(pool_->At<char>(off.value()), img.data(), n * 8);
    persist_.Fence();  // I6
    auto nd = std::make_unique<Directory>();
    nd->depth = ng;
    nd->root = 1 - d->root;
    nd->offset = off.value();
    nd->chunks = chunks;
    nd->entries = pool_->At<std::atomic<uint64_t>>(off.value());
    pool_->SetRoot(nd->root, PackDesc(ng, off.value()));  // I7: the switch, one 8-byte write
    d = nd.get();
    dir_.store(d, std::memory_order_release);
    dirs_.push_back(std::move(nd));  // the old region stays allocated until Close
    doublings_.fetch_add(1, std::memory_order_relaxed);
  }
  resize_log_.Record(started);
  return Status::OK();
}

template <pm::PersistPolicy P>
uint64_t Pea<P>::LockSegmentFor(uint64_t h) const {
  for (;;) {
    const Directory* d = dir_.load(std::memory_order_acquire);
    const uint64_t i = DirIndex(h, d->depth);
    const uint64_t e = d->entries[i].load(std::memory_order_acquire);
    SegLocks& L = locks_[EntrySid(e)];
    if (TryLockWord(L.seg)) {
      if (d->entries[i].load(std::memory_order_acquire) == e &&
          dir_.load(std::memory_order_acquire) == d) {
        for (int x = 0; x < kBucketLocks; x++) LockWord(L.bucket[x]);
        return e;
      }
      UnlockWordUnchanged(L.seg);
    }
    CpuRelax();
  }
}

template <pm::PersistPolicy P>
void Pea<P>::CollectSegment(uint64_t e, std::vector<std::pair<Key, Value>>* out) const {
  const uint64_t sid = EntrySid(e);
  auto take = [&](const PmBucket* b) {
    for (uint32_t m = Occupancy(b); m; m &= m - 1) {
      const int j = std::countr_zero(m);
      out->emplace_back(b->slots[j].key.load(std::memory_order_relaxed),
                        b->slots[j].value.load(std::memory_order_relaxed));
    }
  };
  for (uint32_t b = 0; b < params_.segment_buckets; b++) take(BucketAt(sid, b));
  if (EntryStrategy(e) == kStash) {
    take(StashBucket(sid, 0));
    take(StashBucket(sid, 1));
  }
}

template <pm::PersistPolicy P>
Status Pea<P>::ForEach(const std::function<void(Key, Value)>& fn) const {
  // Walk the hash space by segment ranges (as REH): splits only cut ranges, so a key present
  // for the whole walk is visited exactly once.
  std::vector<std::pair<Key, Value>> pairs;
  for (uint64_t cursor = 0;;) {
    pairs.clear();
    const uint64_t e = LockSegmentFor(cursor);
    SegLocks& L = locks_[EntrySid(e)];
    CollectSegment(e, &pairs);
    for (int x = 0; x < kBucketLocks; x++) UnlockWordUnchanged(L.bucket[x]);
    UnlockWordUnchanged(L.seg);
    for (const auto& [k, v] : pairs) fn(k, v);
    const uint32_t ld = EntryDepth(e);
    if (ld == 0) break;
    const uint32_t shift = 64 - ld;
    if ((cursor >> shift) == (~uint64_t{0} >> shift)) break;
    cursor = ((cursor >> shift) + 1) << shift;
  }
  return Status::OK();
}

template <pm::PersistPolicy P>
template <class Fn>
void Pea<P>::ForEachSegment(const Directory* d, Fn&& fn) const {
  for (uint64_t i = 0; i < d->size();) {
    const uint64_t e = d->entries[i].load(std::memory_order_acquire);
    fn(i, e);
    i += uint64_t{1} << (d->depth - std::min(EntryDepth(e), d->depth));
  }
}

template <pm::PersistPolicy P>
uint64_t Pea<P>::CountLive() const {
  EpochManager::Guard guard(epoch_);
  uint64_t live = 0;
  ForEachSegment(dir_.load(std::memory_order_acquire), [&](uint64_t, uint64_t e) {
    const uint64_t sid = EntrySid(e);
    for (uint32_t b = 0; b < params_.segment_buckets; b++) {
      live += std::popcount(Occupancy(BucketAt(sid, b)));
    }
    if (EntryStrategy(e) == kStash) {
      live += std::popcount(Occupancy(StashBucket(sid, 0)));
      live += std::popcount(Occupancy(StashBucket(sid, 1)));
    }
  });
  return live;
}

template <pm::PersistPolicy P>
uint64_t Pea<P>::Size() const {
  if (!size_known_.load(std::memory_order_acquire)) {
    // After a crash: one scan of the bucket headers (see "paper is vague" in the header).
    LockGuard<SpinLock> g(size_mu_);
    if (!size_known_.load(std::memory_order_relaxed)) {
      const int64_t before = size_.Sum();
      size_base_.store(static_cast<int64_t>(CountLive()) - before, std::memory_order_relaxed);
      size_known_.store(true, std::memory_order_release);
    }
  }
  const int64_t s = size_.Sum() + size_base_.load(std::memory_order_relaxed);
  return s < 0 ? 0 : static_cast<uint64_t>(s);
}

template <pm::PersistPolicy P>
uint32_t Pea<P>::StrategyOf(Key k) const {
  const Directory* d = dir_.load(std::memory_order_acquire);
  return EntryStrategy(d->entries[DirIndex(hash_(k), d->depth)].load());
}

template <pm::PersistPolicy P>
uint32_t Pea<P>::LocalDepthOf(Key k) const {
  const Directory* d = dir_.load(std::memory_order_acquire);
  return EntryDepth(d->entries[DirIndex(hash_(k), d->depth)].load());
}

template <pm::PersistPolicy P>
IndexStats Pea<P>::Stats() const {
  IndexStats s;
  const Directory* d = dir_.load(std::memory_order_acquire);
  uint64_t per[3] = {0, 0, 0};
  uint64_t stash_entries = 0;
  EpochManager::Guard guard(epoch_);  // the walk may read segments that a split retires
  ForEachSegment(d, [&](uint64_t, uint64_t e) {
    const uint32_t st = std::min<uint32_t>(EntryStrategy(e), 2);
    per[st]++;
    if (st == kStash) {
      stash_entries += std::popcount(Occupancy(StashBucket(EntrySid(e), 0)));
      stash_entries += std::popcount(Occupancy(StashBucket(EntrySid(e), 1)));
    }
  });
  const uint64_t segments = per[0] + per[1] + per[2];
  s.size = Size();
  s.buckets = segments * params_.segment_buckets + per[2] * 2;
  s.capacity_slots = s.buckets * kSlots;
  s.load_factor = s.capacity_slots ? static_cast<double>(s.size) / s.capacity_slots : 0;
  s.pm_bytes = pool_->allocator().used_chunks() * seg_bytes_ + pm::kHeaderBytes;
  s.dram_bytes = locks_.bytes() + pool_->allocator().dram_bytes();
  s.pool_bytes = pool_->size();
  s.global_depth = d->depth;
  s.splits = splits_.load(std::memory_order_relaxed);
  s.doublings = doublings_.load(std::memory_order_relaxed);
  s.resize_ns = resize_log_.Snapshot();
  s.recovered = recovered_;
  s.recovery_seconds = recovery_seconds_;
  s.traffic = pool_->counters().Snapshot();
  auto add = [&](const char* name, double v) { s.details.push_back({name, v}); };
  add("pea.segments", static_cast<double>(segments));
  add("pea.segments.single", static_cast<double>(per[0]));
  add("pea.segments.two_choice", static_cast<double>(per[1]));
  add("pea.segments.stash", static_cast<double>(per[2]));
  add("pea.transitions.two_choice", static_cast<double>(to_two_choice_.load()));
  add("pea.transitions.stash", static_cast<double>(to_stash_.load()));
  add("pea.stash.segments", static_cast<double>(stash_segments_.load()));
  add("pea.stash.entries", static_cast<double>(stash_entries));
  add("pea.segment_buckets", static_cast<double>(params_.segment_buckets));
  add("pea.directory.max_stride", static_cast<double>(max_stride_.load()));
  add("pea.splits.stash", static_cast<double>(stash_splits_.load()));
  add("pea.stash.stale_cleared", static_cast<double>(stale_stash_cleared_.load()));
  add("alloc.reused", static_cast<double>(pool_->allocator().reused_allocations()));
  return s;
}

// REQUIRES: no concurrent writers.
template <pm::PersistPolicy P>
Status Pea<P>::CheckInvariants() const {
  auto fail = [](const std::string& what) { return Status::Corruption("pea invariant: " + what); };
  const Directory* d = dir_.load(std::memory_order_acquire);
  const uint32_t g = d->depth;
  const pm::ChunkAllocator& alloc = pool_->allocator();
  std::unordered_set<Key> keys;
  std::unordered_set<uint64_t> sids;
  uint64_t live = 0;
  std::string err;
  auto check_bucket = [&](const PmBucket* b, uint64_t prefix, uint32_t ld, uint32_t st,
                          uint32_t bidx, uint64_t sid, bool stash) {
    const uint64_t w[2] = {b->hdr[0].load(), b->hdr[1].load()};
    if (w[0] != 0 && (w[0] & kKvFormat) == 0)
      err = "bucket header without the key/value format bit";
    for (uint32_t m = static_cast<uint32_t>(w[0] >> 1) & kOccMask; m && err.empty(); m &= m - 1) {
      const int j = std::countr_zero(m);
      const Key k = b->slots[j].key.load();
      const uint64_t h = hash_(k);
      if (ld > 0 && (h >> (64 - ld)) != prefix) {
        err = "key " + std::to_string(k) + " in segment " + std::to_string(sid) +
              " outside its hash range";
        break;
      }
      if (j < kFpSlots && GetFpByte(w, j) != Fp(h)) {
        err = "stale fingerprint for key " + std::to_string(k);
        break;
      }
      if (!stash) {
        const uint32_t b1 = Bucket1(h);
        const bool ok = bidx == b1 || (st >= kTwoChoice && bidx == Bucket2(h, b1));
        if (!ok) {
          err = "key " + std::to_string(k) + " in a bucket its strategy does not probe";
          break;
        }
      }
      if (!keys.insert(k).second) {
        err = "duplicate key " + std::to_string(k);
        break;
      }
      live++;
    }
  };
  uint64_t segments = 0;
  for (uint64_t i = 0; i < d->size() && err.empty();) {
    const uint64_t e = d->entries[i].load();
    const uint32_t ld = EntryDepth(e);
    const uint32_t st = EntryStrategy(e);
    if (ld > g) return fail("local depth above global depth");
    if (st < first_strategy_ || st > last_strategy_) return fail("strategy out of range");
    const uint64_t stride = uint64_t{1} << (g - ld);
    if (i % stride != 0) return fail("directory does not tile");
    for (uint64_t x = i; x < i + stride; x++) {
      if (d->entries[x].load() != e)
        return fail("directory stride not uniform at " + std::to_string(x));
    }
    const uint64_t sid = EntrySid(e);
    if (sid >= chunk_count_ || !alloc.IsUsed(OffsetOfSid(sid)))
      return fail("segment not allocated");
    if (!sids.insert(sid).second) return fail("segment referenced by two strides");
    const SegLocks& L = locks_[sid];
    if (L.seg.load() & 1) return fail("segment lock held at rest");
    for (int x = 0; x < kBucketLocks; x++) {
      if (L.bucket[x].load() & 1) return fail("bucket lock held at rest");
    }
    const uint64_t prefix = ld == 0 ? 0 : i >> (g - ld);
    for (uint32_t b = 0; b < params_.segment_buckets && err.empty(); b++) {
      check_bucket(BucketAt(sid, b), prefix, ld, st, b, sid, false);
    }
    if (st == kStash) {
      if (StashSidWord(sid).load() == 0) return fail("stash segment missing");
      check_bucket(StashBucket(sid, 0), prefix, ld, st, 0, sid, true);
      check_bucket(StashBucket(sid, 1), prefix, ld, st, 0, sid, true);
    }
    segments++;
    i += stride;
  }
  if (!err.empty()) return fail(err);
  // Allocation: segments + stash segments + StashSid array + current and retired directories.
  uint64_t expect = segments + ChunksFor(StashArrayWords() * 8) + limbo_chunks_.load();
  for (uint64_t w = 0; w < StashArrayWords(); w++) expect += stash_sids_[w].load() != 0;
  {
    LockGuard<RwSpinLock> gd(const_cast<RwSpinLock&>(dir_lock_));
    for (const auto& x : dirs_) expect += x->chunks;
  }
  if (alloc.used_chunks() != expect) {
    return fail("allocated chunks (" + std::to_string(alloc.used_chunks()) +
                ") != reachable chunks (" + std::to_string(expect) + "): leak");
  }
  if (live != Size()) {
    return fail("Size() " + std::to_string(Size()) + " != live slots " + std::to_string(live));
  }
  return Status::OK();
}

template <pm::PersistPolicy P>
Status Pea<P>::Close() {
  return life_.Close(*pool_, [] {});
}

// Instantiated once, in the library (pea.cc); users of this header link to those
// instead of compiling the whole index again in every translation unit.
extern template class Pea<pm::Dram>;
extern template class Pea<pm::Adr>;
extern template class Pea<pm::Eadr>;
extern template class Pea<pm::Sim>;

}  // namespace pmhash::pea
