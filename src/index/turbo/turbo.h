// src/index/turbo/turbo.h — TurboHash: sharded linear probing with lock-free reads, near-place
// updates and variable-size items.
//
// Paper: Xingsheng Zhao, Chen Zhong, Song Jiang. "TurboHash: A Hash Table for Key-value Store on
// Persistent Memory", SYSTOR '23 (../shared/papers/turbohash.txt, sections 3.1-3.7 and 4.6).
//
// ============================================================================================
// Design summary
// ============================================================================================
// The hash space is cut into 2^shard_bits shards (bits 8.. of the hash). A shard is one small
// linear-probing table: a contiguous array of 2^k buckets of 256 B (one Optane XPLine), k grows
// by one at each shard rehash. A key's home bucket is the top k bits of its hash, so doubling a
// shard sends the keys of bucket i to 2i / 2i+1 (paper 4.7). The shard directory lives in PM
// (two (offset, log2 buckets) sets + a version word per shard) and is mirrored in DRAM, where
// each shard also has its write lock.
//
//   * Search path (3.2): a search walks buckets home, home+1, ... (mod the shard size) and stops
//     at the first bucket with at least two EMPTY slots (valid bit 0), or after probe_scope
//     buckets. One empty slot per bucket is reserved for near-place updates, so a bucket with
//     one empty slot is "full" for inserts. Deleted slots (valid 1, delete 1) are not empty and
//     never shorten a path.
//   * Insert: reuse the first deleted slot on the path, else take an empty slot of the path-end
//     bucket. Write the slot (and tag), persist, then ONE 8-byte store sets the valid bit,
//     clears the delete bit and bumps the bucket's sequence number; persist. Two persists.
//   * Update (near-place, 3.2/3.4): write the new item into an empty slot of the SAME bucket,
//     persist, then one 8-byte store flips both valid bits (old off, new on) and bumps the
//     sequence; persist. Two persists, one 256 B media block.
//   * Erase: one 8-byte store sets the delete bit and bumps the sequence; persist. One persist.
//   * Find is lock-free: per bucket, read the meta word, SIMD-match the 14 tags, compare the
//     candidate keys, read the value, then re-read the meta word; retry the bucket if it moved.
//     (A value read that fails in a bucket whose meta word did not move is a damaged record,
//     not a stale one: it reads as absent, never as a reason to retry; I8.)
//     Finds touch no PM beyond the buckets of the path (and one record in turbo-kv).
//   * Durable reads (ADR): before its meta store a writer names the bucket in the shard's DRAM
//     line (ShardRef::unpersisted, the line readers already read for the shard's address) and
//     clears the name once the meta word is persisted. A reader that finds its bucket named
//     there after loading the meta word flushes the meta line and fences before it returns
//     anything it read in that bucket — it helps the write become durable — so no completed
//     read can return (or deny) an item that a crash would then take back. Nothing is added
//     to PM, and nothing under eADR or for Dram (a store a reader can see is persistent).
//   * Shard rehash (no slot within the probing scope): build the 2x shard in DRAM, re-placing
//     every live item with the insert rule, write it with non-temporal stores, persist the
//     inactive descriptor set, then flip the descriptor's version word (8-byte atomic); then the
//     DRAM descriptor. The old shard is freed through the EpochManager once every reader that
//     may hold it has left. Garbage collection (4.6) is the same rehash at the same size, chosen
//     when more than gc_deleted_ratio of the shard's slots are deleted.
//   * turbo-kv (Fig. 3, 3.6): a slot holds the key's 64-bit hash and the pool offset of a record
//     [key_len:32 | value_len:32 | key | value] allocated from the pool's record heap
//     (src/pm/record_heap.h): a slot of a size-class slab for records up to 224 B (a 24 B
//     record takes 32 B), whole chunks beyond. Records are immutable; an update writes a new
//     record. Old records are retired to the record heap through the EpochManager.
//
// ============================================================================================
// Layout
// ============================================================================================
//   PM bucket, 256 B, 256-aligned (one XPLine, four cache lines):
//
//     line 0:  [ meta: valid:16 | deleted:16 | seq:32 ][ tags[14] + 2 unused ][ reserved:8 ]
//              [ slot0: key | value ][ slot1 ]
//     line 1:  [ slot2 ] [ slot3 ] [ slot4 ] [ slot5 ]
//     line 2:  [ slot6 ] ... [ slot9 ]
//     line 3:  [ slot10 ] ... [ slot13 ]
//
//     turbo:    slot = [ key:64 | value:64 ]
//     turbo-kv: slot = [ hash(key):64 | record offset:64 ]
//     record (turbo-kv; 8 + klen + vlen bytes, placed by pm::RecordHeap: a slot of the smallest
//     size class that holds it, 16-aligned inside a 4 KiB slab, or whole chunks if larger than
//     every class):
//              [ klen:32 | vlen:32 | key bytes | value bytes | unused ]
//
//   PM shard directory (root 0), 32 B per shard:
//     [ set0: offset:48 | log2 buckets:8 | 0:8 ][ set1: same ][ version: 0 or 1 ][ reserved ]
//   DRAM directory, 64 B per shard: [ offset:48 | log2 buckets:8 ][ write lock ][ deleted ]
//
//   Hash bits: tag = bits 0..7; shard = bits 8..8+shard_bits; home bucket = top k bits.
//
// ============================================================================================
// Crash-consistency invariants
// ============================================================================================
//   I1  A slot holds a live item iff its valid bit is 1 and its delete bit is 0 in the bucket's
//       meta word. Meta words change only by single 8-byte stores, each persisted before the
//       operation returns (Persister::Persist). While a bucket is named in its shard's
//       `unpersisted` word, its meta word may not be durable yet, and a reader persists it
//       before trusting it (durable linearizability of reads).
//   I2  A slot's contents (and, in turbo-kv, its record) are persisted BEFORE the meta store that
//       makes the slot live. Only slots that are not live (empty, or deleted) are ever written,
//       so a crash at any instant leaves every live slot intact.
//   I3  Every bucket has at least one empty slot at all times (the near-place reserve): inserts
//       take an empty slot only from a bucket with >= 2, updates trade one empty for one.
//       Empty counts never grow in a live shard, so once a bucket is part of a path it stays a
//       non-end bucket: a key at distance d from home has every bucket before it "full".
//   I4  Update never leaves two live copies: the old and new slot flip in the same 8-byte store.
//   I5  A shard is reachable only through the ACTIVE set of its PM descriptor. A rehash writes
//       (NT) and fences the new shard, persists the inactive set, then flips the version word
//       (one 8-byte store, persisted). A crash before the flip leaves the old shard, intact,
//       active; after it, the new one. Neither is modified after the build started.
//   I6  No leaks: the chunk allocator's bitmap and the record heap's slot bitmaps are DRAM
//       only; recovery marks the directory and every active shard (chunk allocator) and every
//       record referenced by a live slot (turbo-kv: RecordHeap::MarkReachable, which marks its
//       slab or chunks), and nothing else. An allocated-but-unpublished record or shard is free
//       again after a crash, and so is a slab none of whose records is reachable. A slab's
//       header is persisted before any record in it is published (H1 in record_heap.h).
//   I7  Recovery validates every offset (directory, shards: in the heap, chunk-aligned, no
//       chunk shared; records: the 8-byte header inside the heap and 16-aligned before it is
//       read, lengths
//       bounded by max_record_bytes, then the record heap's checks — valid slab header of the
//       record's size class, slot boundary, no slot or chunk shared — and the stored hash equal
//       to the key's), every meta word (delete subset of valid, I3) and the descriptor version;
//       any violation is kCorruption, never an out-of-bounds read. Tags are recomputed (a live
//       slot's tag that a crash left stale is rewritten and persisted: I8 trusts them).
//   I8  Clean shutdown (not in the paper; src/pm/saved_state.h): Close saves the live count and
//       each shard's deleted-slot count beside the allocator's bitmap (turbo-kv: and the record
//       heap's slabs with their occupancy bitmaps, after returning its empty slabs), and the
//       next open loads them instead of walking the buckets. The directory is still checked as
//       in I7 (32 B per shard), and the loaded allocator must hold exactly the directory, the
//       active shards and the slabs (disjoint, in use) plus the large records' chunks; turbo-kv's
//       live count must be the heap's record count. No bucket is read, so no meta word is
//       checked; what readers and writers take from one is bounded instead: slot indexes come
//       from the 14-bit valid and delete fields only (MetaValid/MetaDeleted mask the spare
//       bits), a path ends within probe_scope, and an update refuses a bucket without its
//       reserved empty slot (kCorruption) instead of trusting I3. Tags are not recomputed: a
//       writer persists them with the meta word's line (I2), the walk persists any it fixed
//       (I7), and a forged one can only hide a key.
//       turbo-kv's records are not validated either (H5 of record_heap.h holds for what a walk
//       reached): every read of one checks that its header and bytes lie in the pool
//       (Records::Fits; a record that does not reads as empty and is never freed), and a free
//       of a slot the loaded heap does not hold is ignored. CheckInvariants() reports what a
//       forgery leaves (meta bits, stale tags, records, the counts).
//
// Where the paper is vague or wrong, and what we chose:
//   * Algorithm 1 validates the sequence number only when a key is found. A negative result must
//     be validated too (a slot deleted and reused after the meta read could hide the key behind
//     a changed tag), so the reader re-checks the meta word before leaving every bucket.
//   * The paper's shard descriptor has a 1-byte version; ours is an 8-byte word (0 or 1) so the
//     flip is a plain aligned store. PMDK transactions (3.7) are not needed: I5 + I6 suffice.
//   * Readers take an epoch guard (3.6) so a shard or record freed by a writer cannot be reused
//     under them; the sequence number still decides whether what they read is consistent.
//   * Where does a rehashed item go? The paper doubles bucket indexes; items that probed past
//     their home are re-placed with the insert rule in the new shard, in old-bucket order. If
//     the new shard cannot place every item within the scope (pathological clusters), the
//     shard is built at 4x, 8x, ... instead.
//   * GC (4.6) is triggered when an insert finds no room and the shard has more than
//     gc_deleted_ratio of its slots deleted; GarbageCollect() forces it for every such shard.
//   * Deleted records (turbo-kv) are retired at erase time, not when the slot is reused: a
//     deleted slot's offset is dead (recovery ignores it).
//   * LoadFactor (a stub in the authors' code) is live items / (14 x buckets).
//   * Out of space: an insert that needs a rehash the pool cannot hold fails with kOutOfSpace and
//     changes nothing. Re-inserting erased keys then reuses deleted slots (first on the path),
//     which is always possible while paths end within the probing scope; a key whose path is cut
//     by the scope can find its old slot taken by an earlier re-insert and be refused.
//   * uint64 API on turbo-kv: an 8-byte little-endian key and an 8-byte value record; ForEach
//     visits only such records and returns kNotSupported with the count of the others when
//     there were any (ForEachBytes visits all).
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
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "common/epoch.h"
#include "common/fingerprint.h"
#include "common/hash.h"
#include "common/huge_array.h"
#include "common/locks.h"
#include "common/resize_log.h"
#include "common/striped_counter.h"
#include "index/descriptor.h"
#include "index/engine_base.h"
#include "index/lifecycle.h"
#include "index/records.h"
#include "pm/persist.h"
#include "pm/pool.h"
#include "pm/record_heap.h"
#include "pm/saved_state.h"
#include "pm/slot.h"
#include "pmhash/index.h"

namespace pmhash::turbo {

inline constexpr int kSlots = 14;
inline constexpr uint32_t kSlotMask = (1u << kSlots) - 1;
inline constexpr uint64_t kOffsetMask = (uint64_t{1} << 48) - 1;
inline constexpr uint32_t kMaxShardBits = 20;
inline constexpr uint32_t kMaxLog2Buckets = 24;
inline constexpr uint32_t kMaxScope = 1024;

// A slot (src/pm/slot.h): turbo: key and value; turbo-kv: hash of the key and record offset.
using Slot = pm::PmSlot;

struct alignas(256) Bucket {
  std::atomic<uint64_t> meta;     // valid:16 | deleted:16 | seq:32
  std::atomic<uint64_t> tags[2];  // tag of slot j in byte j (bytes 14, 15 unused)
  uint64_t reserved;
  Slot slots[kSlots];
};
static_assert(sizeof(Slot) == 16, "a slot is one 16 B item");
static_assert(sizeof(Bucket) == 256, "a bucket is one 256 B Optane XPLine");
static_assert(offsetof(Bucket, tags) == 8 && offsetof(Bucket, slots) == 32,
              "meta and tags share line 0 with slots 0-1");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "8-byte failure-atomic stores");

struct PmShardDesc {
  std::atomic<uint64_t> set[2];   // offset:48 | log2 buckets:8
  std::atomic<uint64_t> version;  // which set is active: 0 or 1
  uint64_t reserved;
};
static_assert(sizeof(PmShardDesc) == 32, "32 B per shard descriptor");


// The valid and delete bits of the 14 slots. The two spare bits of each field are never set by
// a writer; the accessors mask them off so that no slot index read from a meta word can pass the
// bucket's 14 slots, even in a pool whose meta words no walk has checked (I8).
inline constexpr uint32_t MetaValid(uint64_t m) { return static_cast<uint32_t>(m) & kSlotMask; }
inline constexpr uint32_t MetaDeleted(uint64_t m) {
  return static_cast<uint32_t>(m >> 16) & kSlotMask;
}
inline constexpr bool MetaSpareBits(uint64_t m) {
  return (m & ((uint64_t{0xFFFF & ~kSlotMask} << 16) | (0xFFFF & ~kSlotMask))) != 0;
}
inline constexpr uint32_t MetaLive(uint64_t m) { return MetaValid(m) & ~MetaDeleted(m); }
inline constexpr uint32_t MetaEmpty(uint64_t m) { return ~MetaValid(m) & kSlotMask; }
inline constexpr uint64_t MakeMeta(uint32_t valid, uint32_t deleted, uint64_t seq) {
  return uint64_t{valid & 0xFFFF} | (uint64_t{deleted & 0xFFFF} << 16) | (seq << 32);
}
inline constexpr uint64_t MetaSeq(uint64_t m) { return m >> 32; }
// At least two empty slots: the end of every search path through this bucket (3.2). (No
// popcount: without -mpopcnt it is a library call on the hot path.)
inline constexpr bool PathEnd(uint64_t m) {
  const uint32_t e = MetaEmpty(m);
  return (e & (e - 1)) != 0;
}
inline constexpr uint64_t PackShard(uint64_t off, uint32_t log2n) {
  return (off & kOffsetMask) | (uint64_t{log2n} << 48);
}
inline constexpr uint64_t ShardOffset(uint64_t w) { return w & kOffsetMask; }
inline constexpr uint32_t ShardLog2(uint64_t w) { return static_cast<uint32_t>(w >> 48); }

// The pool properties, as stored in the pool header (src/index/descriptor.h).
// layout_version: 1 for turbo; 2 for turbo-kv since records live in the record heap's slabs
// (a turbo-kv pool of layout 1, with a chunk per record, is refused).
inline constexpr uint32_t kLayoutInline = 1;
inline constexpr uint32_t kLayoutRecordHeap = 2;
struct PersistentParams : index::LayoutWords<sizeof(Bucket), kSlots, kLayoutInline> {
  uint32_t records = 0;  // 1: turbo-kv
  uint32_t shard_bits = 0;
  uint32_t initial_buckets = 0;
  uint32_t probe_scope = 0;
  uint32_t max_shard_buckets = 0;
  uint32_t max_record_bytes = 0;  // turbo-kv only
};

// What an open index runs with: the pool's properties and this open's options.
struct Config : PersistentParams, index::CommonOpenOptions {
  double gc_deleted_ratio = 0.10;
  void SetOpenOptions(const Options& o) { gc_deleted_ratio = o.turbo.gc_deleted_ratio; }
};

template <pm::PersistPolicy P, bool kRecords>
class Turbo;

// The registry's words for turbo and turbo-kv (pmhash list; src/index/descriptor.h).
inline constexpr index::KindTexts kTexts{
    "turbo", "turbo-kv", "turbo.max_record_bytes",
    "Zhao, Zhong, Jiang: TurboHash: A Hash Table for Key-value Store on PM (SYSTOR'23)",
    "sharded linear probing, 256 B buckets, near-place update, lock-free reads, 8 B items"};

// kRecords = false: "turbo" (8 B inline items). kRecords = true: "turbo-kv" (records).
template <bool kRecords>
struct DescriptorFor
    : index::FlaggedDescriptorTypes<TurboParams, &Options::turbo, PersistentParams, Turbo, kRecords,
                                    kTexts> {
  // This open's options (not pool properties), checked before the pool is opened.
  static Status CheckOptions(const Options& o) {
    if (!(o.turbo.gc_deleted_ratio >= 0)) {
      return Status::InvalidArgument("turbo.gc_deleted_ratio < 0");
    }
    return Status::OK();
  }
  static constexpr auto kProperties =
      std::tuple{index::PoolProperty{"turbo.shard_bits", &TurboParams::shard_bits,
                                     &PersistentParams::shard_bits, 12u},
                 index::PoolProperty{"turbo.initial_buckets", &TurboParams::initial_buckets,
                                     &PersistentParams::initial_buckets, 16u},
                 index::PoolProperty{"turbo.probe_scope", &TurboParams::probe_scope,
                                     &PersistentParams::probe_scope, 16u},
                 index::PoolProperty{"turbo.max_shard_buckets", &TurboParams::max_shard_buckets,
                                     &PersistentParams::max_shard_buckets, 1u << 22}};
  static PersistentParams Base() {
    PersistentParams s;
    s.layout_version = kRecords ? kLayoutRecordHeap : kLayoutInline;
    return s;
  }
  static std::string Check(const PersistentParams& s);
  static index::PoolLayout Layout(const PersistentParams& s) {
    const uint64_t nshards = uint64_t{1} << s.shard_bits;
    const uint64_t dir_chunks = (nshards * sizeof(PmShardDesc) + 255) / 256;
    return {sizeof(Bucket), dir_chunks + nshards * s.initial_buckets};
  }
  // 256 B bucket per 14 slots; a shard is at ~0.4 load right after doubling (plan 0.3), and the
  // old shard stays allocated until its readers leave.
  static constexpr double kPoolBytesPerKey = sizeof(Bucket) / static_cast<double>(kSlots) / 0.3;
};

template <bool kRecords>
std::string DescriptorFor<kRecords>::Check(const PersistentParams& s) {
  if (s.shard_bits > kMaxShardBits) return "shard_bits > 20";
  if (!std::has_single_bit(s.initial_buckets) || !std::has_single_bit(s.max_shard_buckets) ||
      s.initial_buckets > s.max_shard_buckets || s.max_shard_buckets > (1u << kMaxLog2Buckets)) {
    return "initial_buckets and max_shard_buckets must be powers of two, initial <= max <= 2^24";
  }
  if (s.probe_scope < 1 || s.probe_scope > kMaxScope) return "probe_scope must be in [1, 1024]";
  return "";
}

template <pm::PersistPolicy P, bool kRecords = false>
class Turbo : public index::EngineBase<Turbo<P, kRecords>, P, Config> {
  PMHASH_ENGINE(Turbo, P, Config, DescriptorFor<kRecords>);  // Open, Find, Erase, ..., ~Turbo()

 public:
  using Base::Size;

  // Variable-size API (BytesIndex, src/index/records.h). NotSupported on "turbo" (inline items).
  PMHASH_RECORDS_API(kRecords);

  // Garbage-collects (same-size rehash) every shard with more than gc_deleted_ratio deleted.
  // Returns the number of shards rebuilt.
  Result<uint64_t> GarbageCollect();

  // For tests and tools.
  uint32_t shard_count() const { return nshards_; }

 private:
  using WriteMode = index::WriteMode;
  void Quiesce() {  // Close(): retired shards and records are freed
    epoch_.Drain();
    if constexpr (kRecords) records_->ReleaseEmptySlabs();  // (before the image, I8)
  }

  struct alignas(64) ShardRef {
    std::atomic<uint64_t> word{0};  // offset:48 | log2 buckets:8
    mutable SpinLock lock;
    uint32_t deleted PMHASH_GUARDED_BY(lock) = 0;  // slots with valid 1, delete 1
    // The bucket whose meta store may not be durable yet (write-back policies; "Durable
    // reads"); written under `lock`, read by lock-free readers.
    std::atomic<const Bucket*> unpersisted{nullptr};
  };

  struct View {
    Bucket* base;
    uint32_t log2n;
    uint32_t mask;   // buckets - 1
    uint32_t scope;  // min(probe_scope, buckets)
  };
  struct Where {
    Bucket* b = nullptr;
    int j = -1;
  };
  // A key as the probe compares it: the inline key, or hash + bytes (turbo-kv).
  using Probe = index::KeyProbe;
  using Keys = index::ProbeKeys<kRecords>;  // make a probe, match a slot (src/index/records.h)
  Probe MakeProbe(Key k) const { return Keys::Make(hash_, k); }

  Turbo(std::unique_ptr<pm::Pool> pool, const Config& config);

  uint32_t ShardOf(uint64_t h) const { return static_cast<uint32_t>(h >> 8) & (nshards_ - 1); }
  static uint32_t Home(uint64_t h, uint32_t log2n) {
    return log2n ? static_cast<uint32_t>(h >> (64 - log2n)) : 0;
  }
  View MakeView(uint64_t w) const {
    const uint32_t l = ShardLog2(w);
    return View{pool_->template At<Bucket>(ShardOffset(w)), l, (1u << l) - 1,
                std::min<uint32_t>(params_.probe_scope, 1u << l)};
  }
  static uint32_t Candidates(const Bucket* b, uint8_t tag, uint64_t m) {
    const __m128i v =
        _mm_set_epi64x(static_cast<long long>(b->tags[1].load(std::memory_order_relaxed)),
                       static_cast<long long>(b->tags[0].load(std::memory_order_relaxed)));
    return Match16(v, tag) & MetaLive(m);
  }
  static void SetTag(Bucket* b, int j, uint8_t t) {
    auto& w = b->tags[j >> 3];
    const int sh = (j & 7) * 8;
    w.store((w.load(std::memory_order_relaxed) & ~(uint64_t{0xFF} << sh)) | (uint64_t{t} << sh),
            std::memory_order_relaxed);
  }
  static uint8_t GetTag(const Bucket* b, int j) {
    return static_cast<uint8_t>(b->tags[j >> 3].load(std::memory_order_relaxed) >> ((j & 7) * 8));
  }

  uint32_t RecChunks(uint64_t bytes) const {
    return static_cast<uint32_t>((bytes + chunk_ - 1) / chunk_);
  }
  // Calls fn(slot) for every live slot of shard s, under the shard's lock.
  template <class Fn>
  void ForEachLiveSlot(uint32_t s, Fn&& fn) const;

  // REQUIRES: the shard's lock. True if found (*found), else *ins is where an insert goes
  // (ins->b == nullptr: no room within the scope).
  bool Locate(const View& v, const Probe& p, Where* found, Where* ins) const;
  Status Write(const Probe& p, std::string_view value_bytes, Value value, WriteMode mode);
  Status Write(Key k, Value v, WriteMode mode);
  Status WriteBytes(std::string_view k, std::string_view v, WriteMode mode);
  Status EraseProbe(const Probe& p);
  // Stores `m` as b's meta word and persists it; with a write-back policy b is named in
  // r.unpersisted until the persist is done ("Durable reads").
  void PublishMeta(ShardRef& r, Bucket* b, uint64_t m) PMHASH_REQUIRES(r.lock);
  // Lock-free search; calls fn(slot value) under the sequence check, once validated.
  template <class OnFound>
  bool Search(const Probe& p, OnFound&& on_found) const;
  // Batched finds (src/index/batch.h; turbo only, turbo-kv copies records): the shard's word,
  // then the home bucket whole, as Search asks for it.
  static constexpr int kBatchStages = kRecords ? 0 : 2;
  template <int kStage>
  PMHASH_ALWAYS_INLINE void BatchPrefetch(const Probe& p) const {
    const ShardRef& r = shards_[ShardOf(p.h)];
    if constexpr (kStage == 0) {
      PrefetchLine(&r.word);
    } else {
      const View v = MakeView(r.word.load(std::memory_order_acquire));
      const char* hb = reinterpret_cast<const char*>(v.base + Home(p.h, v.log2n));
      for (int l = 0; l < 4; l++) PrefetchLine(hb + 64 * l);
    }
  }
  // (Always inlined: Find is a call of it, and a call between the shard word and the bucket
  // read costs the overlap of one find's misses with the next one's.)
  PMHASH_ALWAYS_INLINE Status BatchFind(const Probe& p, Value* v) const;

  // REQUIRES: r.lock held. Rebuilds the shard at twice its size, or the same size (GC).
  Status Rehash(ShardRef& r, bool force_gc) PMHASH_REQUIRES(r.lock);
  // Builds an image of 2^log2n buckets holding every live item of v. False if some item does not
  // fit within the probing scope.
  bool BuildImage(const View& v, uint32_t log2n, std::unique_ptr<Bucket[]>* img) const;
  uint64_t SlotHash(const Slot& s) const {
    if constexpr (kRecords) {
      return s.key.load(std::memory_order_relaxed);
    } else {
      return hash_(s.key.load(std::memory_order_relaxed));
    }
  }
  // Sum of positive probe distances (1 = home) of the live items of v, and their count.
  std::pair<uint64_t, uint64_t> ProbeSum(const View& v) const;

  Status Init();
  Status Create();
  Status Recover();
  template <class Name>
  Status LoadDirectory(Name&& name);
  // I8: the image of a clean Close (src/pm/saved_state.h).
  void SaveState(pm::StateWriter& w) const;
  Status LoadState(pm::StateReader& r);

  const uint32_t nshards_;
  uint64_t chunk_ = 256;
  PmShardDesc* pm_dir_ = nullptr;
  std::unique_ptr<ShardRef[]> shards_;
  std::unique_ptr<index::Records> records_;  // turbo-kv only (src/index/records.h)
  mutable EpochManager epoch_;  // after pool_ and records_: its destructor frees into them

  std::atomic<uint64_t> gcs_{0};
  std::atomic<uint64_t> gc_dist_before_{0}, gc_dist_after_{0}, gc_items_{0};
  mutable std::atomic<uint64_t> read_retries_{0};  // lock-free reads that re-read a bucket
};

// ============================================================================================
// Implementation
// ============================================================================================

template <pm::PersistPolicy P, bool R>
Turbo<P, R>::Turbo(std::unique_ptr<pm::Pool> pool, const Config& config)
    : Base(std::move(pool), config),
      nshards_(1u << config.shard_bits) {
  chunk_ = pool_->allocator().chunk_size();
  epoch_.set_reclaim_batch(config.reclaim_batch);
}

// The DRAM shard references and (turbo-kv) the record heap's DRAM state.
template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::Init() {
  shards_.reset(new (std::nothrow) ShardRef[nshards_]);
  if (!shards_) return Status::OutOfMemory("turbo: shard directory");
  if constexpr (R) {
    records_ = std::make_unique<index::Records>(*pool_, epoch_, params_.max_record_bytes,
                                                kKindName);
  }
  return Status::OK();
}

// The directory and every shard at its initial size, all buckets empty.
template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::Create() {
  pm::ChunkAllocator& alloc = pool_->allocator();
  const uint64_t dir_bytes = uint64_t{nshards_} * sizeof(PmShardDesc);
  const uint32_t dir_chunks = RecChunks(dir_bytes);
  auto dir = alloc.Allocate(dir_chunks);
  if (!dir.ok()) return dir.status();
  alignas(256) static constexpr uint8_t kZero[256] = {};
  const uint32_t log2n = static_cast<uint32_t>(std::countr_zero(params_.initial_buckets));
  auto* d = pool_->template At<PmShardDesc>(dir.value());
  // Descriptors first (in DRAM cache), then the shards; one fence before the root is set.
  for (uint32_t s = 0; s < nshards_; s++) {
    auto off = alloc.Allocate(params_.initial_buckets);
    if (!off.ok()) return off.status();
    for (uint32_t i = 0; i < params_.initial_buckets; i++) {
      persist_.NtCopy(pool_->template At<Bucket>(off.value()) + i, kZero, sizeof(Bucket));
    }
    d[s].set[0].store(PackShard(off.value(), log2n), std::memory_order_relaxed);
    d[s].set[1].store(0, std::memory_order_relaxed);
    d[s].version.store(0, std::memory_order_relaxed);
    d[s].reserved = 0;
  }
  persist_.Flush(d, dir_bytes);
  persist_.Fence();
  pool_->SetRoot(0, dir.value());
  return pool_->CommitCreate();
}

// Recover and LoadState: the PM directory (root 0) and each shard's active set, checked (I7:
// version word 0 or 1, 2^l buckets with l in [initial, max], no stray bits), into the DRAM
// shard words. name(offset, chunks) is given the directory and every active shard; it checks
// that the range lies in the heap and takes it (a non-OK Status refuses the pool).
template <pm::PersistPolicy P, bool R>
template <class Name>
Status Turbo<P, R>::LoadDirectory(Name&& name) {
  const uint64_t dir = pool_->root(0);
  const uint32_t dir_chunks = RecChunks(uint64_t{nshards_} * sizeof(PmShardDesc));
  if (dir == 0 || !pool_->allocator().ValidChunk(dir, dir_chunks)) {
    return Status::Corruption("turbo: shard directory offset " + std::to_string(dir) +
                              " is outside the heap");
  }
  if (Status st = name(dir, dir_chunks); !st.ok()) {
    return Status::Corruption("turbo: shard directory: " + std::string(st.message()));
  }
  pm_dir_ = pool_->template At<PmShardDesc>(dir);
  const uint32_t min_log = static_cast<uint32_t>(std::countr_zero(params_.initial_buckets));
  const uint32_t max_log = static_cast<uint32_t>(std::countr_zero(params_.max_shard_buckets));
  for (uint32_t s = 0; s < nshards_; s++) {
    const PmShardDesc& pd = pm_dir_[s];
    const uint64_t ver = pd.version.load(std::memory_order_relaxed);
    if (ver > 1) {
      return Status::Corruption("turbo: shard " + std::to_string(s) + " has version word " +
                                std::to_string(ver));
    }
    const uint64_t w = pd.set[ver].load(std::memory_order_relaxed);
    const uint32_t l = ShardLog2(w);
    if (l < min_log || l > max_log || (w >> 56) != 0) {
      return Status::Corruption("turbo: shard " + std::to_string(s) + " has 2^" +
                                std::to_string(l) + " buckets");
    }
    if (Status st = name(ShardOffset(w), 1u << l); !st.ok()) {
      return Status::Corruption("turbo: shard " + std::to_string(s) + ": " +
                                std::string(st.message()));
    }
    shards_[s].word.store(w, std::memory_order_relaxed);
  }
  return Status::OK();
}

// 3.7: rebuild the DRAM directory from the PM one; I7: validate everything that is read.
template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::Recover() {
  pm::ChunkAllocator& alloc = pool_->allocator();
  if constexpr (R) records_->Reset();
  // MarkReachable refuses an offset outside the heap, misaligned, or already reachable.
  PMHASH_RETURN_IF_ERROR(
      LoadDirectory([&alloc](uint64_t off, uint32_t n) { return alloc.MarkReachable(off, n); }));
  uint64_t live = 0;
  for (uint32_t s = 0; s < nshards_; s++) {
    ShardRef& r = shards_[s];
    LockGuard<SpinLock> g(r.lock);
    r.deleted = 0;
    const View v = MakeView(r.word.load(std::memory_order_relaxed));
    for (uint32_t i = 0; i <= v.mask; i++) {
      Bucket* b = v.base + i;
      if constexpr (R) {
        // The records of the bucket 2 ahead (its lines are read in order: the hardware has
        // them): each Recover below is a random miss, and these overlap. Never faults.
        if (i + 2 <= v.mask) {
          const Bucket* a = b + 2;
          for (uint32_t c = MetaLive(a->meta.load(std::memory_order_relaxed)); c; c &= c - 1) {
            records_->Prefetch(a->slots[std::countr_zero(c)].value.load(std::memory_order_relaxed));
          }
        }
      }
      const uint64_t m = b->meta.load(std::memory_order_relaxed);
      const uint32_t valid = MetaValid(m), del = MetaDeleted(m);
      if (MetaSpareBits(m) || (del & ~valid) || MetaEmpty(m) == 0) {
        return Status::Corruption("turbo: bad meta word in shard " + std::to_string(s) +
                                  " bucket " + std::to_string(i));
      }
      r.deleted += static_cast<uint32_t>(std::popcount(del));
      uint64_t tags[2] = {0, 0}, lanes[2] = {0, 0};
      for (uint32_t c = MetaLive(m); c; c &= c - 1) {
        const int j = std::countr_zero(c);
        const Slot& sl = b->slots[j];
        if constexpr (R) {
          PMHASH_RETURN_IF_ERROR(records_->Recover(sl.value.load(std::memory_order_relaxed),
                                                   sl.key.load(std::memory_order_relaxed), hash_));
        }
        const uint8_t tag = static_cast<uint8_t>(SlotHash(sl));
        tags[j >> 3] |= uint64_t{tag} << ((j & 7) * 8);
        lanes[j >> 3] |= uint64_t{0xFF} << ((j & 7) * 8);
        live++;
      }
      // The live slots' tags, recomputed. One a crash tore from its meta word is rewritten and
      // persisted: a later clean Close's image (I8) trusts the tags in PM.
      bool stale = false;
      for (int t = 0; t < 2; t++) {
        const uint64_t old = b->tags[t].load(std::memory_order_relaxed);
        const uint64_t fixed = (old & ~lanes[t]) | tags[t];
        if (fixed != old) {
          b->tags[t].store(fixed, std::memory_order_relaxed);
          stale = true;
        }
      }
      if (stale) persist_.Flush(&b->tags, sizeof(b->tags));
    }
  }
  persist_.Fence();
  size_.Reset(static_cast<int64_t>(live));
  return Status::OK();
}

// I8: the image of a clean Close — the live pairs, then each shard's deleted-slot count, then
// (turbo-kv) the record heap's (record_heap.h, "Clean shutdown").
template <pm::PersistPolicy P, bool R>
void Turbo<P, R>::SaveState(pm::StateWriter& w) const {
  w.Put<uint64_t>(Size());
  for (uint32_t s = 0; s < nshards_; s++) {
    const ShardRef& r = shards_[s];
    LockGuard<SpinLock> g(r.lock);
    w.Put<uint32_t>(r.deleted);
  }
  if constexpr (R) records_->SaveState(w);
}

// I8: no bucket and no record is read. The directory is checked as Recover checks it, and the
// loaded allocator against it: the directory, the active shards and (turbo-kv) the record heap's
// slabs inside the heap, disjoint, in use, and the used chunks exactly those plus the large
// records' chunks. The counts are bounded by the shards' slots; turbo-kv's live count must be
// the heap's records.
template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::LoadState(pm::StateReader& r) {
  const Status bad = Status::Corruption(std::string(kKindName) + ": saved state");
  const pm::ChunkAllocator& alloc = pool_->allocator();
  uint64_t live = 0;
  if (!r.Get(&live)) return bad;
  pm::ChunkRanges named(alloc);
  PMHASH_RETURN_IF_ERROR(LoadDirectory(
      [&](uint64_t off, uint32_t n) { return named.Add(off, n) ? Status::OK() : bad; }));
  uint64_t slots = 0;
  for (uint32_t s = 0; s < nshards_; s++) {
    ShardRef& sr = shards_[s];
    const uint64_t n = uint64_t{kSlots} << ShardLog2(sr.word.load(std::memory_order_relaxed));
    uint32_t deleted = 0;
    if (!r.Get(&deleted) || deleted > n) return bad;
    LockGuard<SpinLock> g(sr.lock);
    sr.deleted = deleted;
    slots += n;
  }
  if (live > slots) return bad;
  uint64_t large = 0;  // chunks of records too large for a slab
  if constexpr (R) {
    if (!records_->LoadState(r, live,
                             [&named](uint64_t o, uint32_t n) { return named.Add(o, n); })) {
      return bad;
    }
    large = records_->large_chunks();
  }
  if (r.remaining() != 0 || !named.Disjoint() || !named.AllUsed() ||
      alloc.used_chunks() != named.count() + large) {
    return bad;
  }
  size_.Reset(static_cast<int64_t>(live));
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
template <class OnFound>
bool Turbo<P, R>::Search(const Probe& p, OnFound&& on_found) const {
  EpochManager::Guard guard(epoch_);
  const uint8_t tag = static_cast<uint8_t>(p.h);
  const ShardRef& r = shards_[ShardOf(p.h)];
  const View v = MakeView(r.word.load(std::memory_order_acquire));
  const uint32_t home = Home(p.h, v.log2n);
  {
    // The home bucket is one 256 B block: ask for all of it now, so the slot line's miss
    // overlaps the meta line's instead of following it.
    const char* hb = reinterpret_cast<const char*>(v.base + home);
    for (int l = 0; l < 4; l++) _mm_prefetch(hb + 64 * l, _MM_HINT_T0);
  }
  for (uint32_t d = 0; d < v.scope; d++) {
    const Bucket* b = v.base + ((home + d) & v.mask);
    for (;;) {
      const uint64_t m = b->meta.load(std::memory_order_acquire);
      // A write in this bucket may not be durable yet: make it so before relying on it.
      if constexpr (P::kWritesBack) {
        if (r.unpersisted.load(std::memory_order_acquire) == b) {
          persist_.Persist(&b->meta, sizeof(uint64_t));
        }
      }
      int hit = -1;
      for (uint32_t c = Candidates(b, tag, m); c; c &= c - 1) {
        const int j = std::countr_zero(c);
        if (Keys::Matches(records_.get(), b->slots[j], p)) {
          hit = j;
          break;
        }
      }
      bool ok = true;
      if (hit >= 0) ok = on_found(b->slots[hit]);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (b->meta.load(std::memory_order_relaxed) != m) {
        read_retries_.fetch_add(1, std::memory_order_relaxed);
        continue;  // a writer changed the bucket while we read it
      }
      // The bucket did not change, so the slot and its record were stable: a record on_found
      // could not read (turbo-kv: not inside the pool) is damaged, not stale. It reads as
      // absent (I8: an image vouches for no record; CheckInvariants reports it).
      if (!ok) return false;
      if (hit >= 0) return true;
      if (PathEnd(m)) return false;  // path end
      break;
    }
  }
  return false;
}

template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::Find(Key k, Value* out) const {
  if constexpr (R) {
    return index::FindU64AsBytes(*this, k, out);
  } else {
    return BatchFind(MakeProbe(k), out);
  }
}

template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::BatchFind(const Probe& p, Value* out) const {
  Value val = 0;
  const bool found = Search(p, [&](const Slot& s) {
    val = s.value.load(std::memory_order_relaxed);
    return true;
  });
  if (!found) return Status::NotFound();
  *out = val;
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::FindBytes([[maybe_unused]] std::string_view k,
                           [[maybe_unused]] std::string* out) const {
  if constexpr (!R) {
    return index::NoRecords(kKindName);
  } else {
    const Probe p = Keys::Make(hash_, k);
    const bool found = Search(p, [&](const Slot& s) {
      return records_->ReadValue(s.value.load(std::memory_order_acquire), out);
    });
    return found ? Status::OK() : Status::NotFound();
  }
}

template <pm::PersistPolicy P, bool R>
bool Turbo<P, R>::Locate(const View& v, const Probe& p, Where* found, Where* ins) const {
  const uint8_t tag = static_cast<uint8_t>(p.h);
  const uint32_t home = Home(p.h, v.log2n);
  *ins = Where{};
  for (uint32_t d = 0; d < v.scope; d++) {
    Bucket* b = v.base + ((home + d) & v.mask);
    const uint64_t m = b->meta.load(std::memory_order_relaxed);
    for (uint32_t c = Candidates(b, tag, m); c; c &= c - 1) {
      const int j = std::countr_zero(c);
      if (Keys::Matches(records_.get(), b->slots[j], p)) {
        *found = Where{b, j};
        return true;
      }
    }
    if (ins->b == nullptr && MetaDeleted(m) != 0) {
      *ins = Where{b, std::countr_zero(MetaDeleted(m))};
    }
    const uint32_t empty = MetaEmpty(m);
    if (PathEnd(m)) {
      if (ins->b == nullptr) *ins = Where{b, std::countr_zero(empty)};
      return false;
    }
  }
  return false;
}

template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::Write(Key k, Value v, WriteMode mode) {
  if constexpr (R) {
    return WriteBytes(index::U64Bytes(k).view(), index::U64Bytes(v).view(), mode);
  } else {
    return Write(Keys::Make(hash_, k), {}, v, mode);
  }
}

template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::WriteBytes([[maybe_unused]] std::string_view k,
                            [[maybe_unused]] std::string_view v,
                            [[maybe_unused]] WriteMode mode) {
  if constexpr (!R) {
    return index::NoRecords(kKindName);
  } else {
    return Write(Keys::Make(hash_, k), v, 0, mode);
  }
}

template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::Write(const Probe& p, std::string_view value_bytes, Value value,
                          WriteMode mode) {
  if (life_.closed()) [[unlikely]] return index::Lifecycle::ClosedError(kKindName);
  ShardRef& r = shards_[ShardOf(p.h)];
  LockGuard<SpinLock> g(r.lock);
  for (;;) {
    const View v = MakeView(r.word.load(std::memory_order_relaxed));
    Where f, ins;
    const bool found = Locate(v, p, &f, &ins);
    if (found && mode == WriteMode::kInsert) return Status::Exists();
    if (!found && mode == WriteMode::kUpdate) return Status::NotFound();
    if (!found && ins.b == nullptr) {
      PMHASH_RETURN_IF_ERROR(Rehash(r, /*force_gc=*/false));
      continue;
    }
    Bucket* b = found ? f.b : ins.b;
    const uint64_t m = b->meta.load(std::memory_order_relaxed);
    if (found && MetaEmpty(m) == 0) [[unlikely]] {
      // (I3 holds in every bucket a walk checked; a loaded image vouches for no meta word: I8.)
      return Status::Corruption("turbo: bucket without its reserved empty slot (I3)");
    }
    // The item to write: (key, value) or (hash, new record).
    uint64_t item_key = p.k, item_value = value;
    if constexpr (R) {
      auto rec = records_->New(p.s, value_bytes, persist_);
      if (!rec.ok()) return rec.status();
      item_key = p.h;
      item_value = rec.value();
    }
    // The size before the persists (under the shard lock; Size() is not linearizable with
    // concurrent writes anyway): its locked add after a fence waits for the write-back, which
    // the next operation's misses can otherwise overlap (REH, docs/results.md).
    if (!found) size_.Add(1);
    // Near-place update: the bucket's reserved empty slot (I3 guarantees one).
    const int j = found ? std::countr_zero(MetaEmpty(m)) : ins.j;
    // Readers validate with the meta word; order our slot writes after everything before (the
    // seqlock writer fence), so a reader that sees them also sees a changed meta word.
    std::atomic_thread_fence(std::memory_order_release);
    Slot& s = b->slots[j];
    s.key.store(item_key, std::memory_order_relaxed);
    s.value.store(item_value, std::memory_order_release);
    SetTag(b, j, static_cast<uint8_t>(p.h));
    persist_.Flush(&s, sizeof(Slot));  // I2 (the tag shares line 0 with the meta word)
    persist_.Fence();
    uint32_t valid = MetaValid(m) | (1u << j);
    uint32_t del = MetaDeleted(m) & ~(1u << j);
    uint64_t old_record = 0;
    if (found) {
      valid &= ~(1u << f.j);  // I4: old off, new on, one store
      old_record = b->slots[f.j].value.load(std::memory_order_relaxed);
    } else if (MetaDeleted(m) & (1u << j)) {
      r.deleted--;
    }
    PublishMeta(r, b, MakeMeta(valid, del, MetaSeq(m) + 1));
    if constexpr (R) {
      if (found) records_->Retire(old_record);
    }
    return Status::OK();
  }
}

template <pm::PersistPolicy P, bool R>
void Turbo<P, R>::PublishMeta(ShardRef& r, Bucket* b, uint64_t m) {
  // Ordered before the meta store by its release.
  if constexpr (P::kWritesBack) r.unpersisted.store(b, std::memory_order_relaxed);
  b->meta.store(m, std::memory_order_release);
  persist_.Persist(&b->meta, sizeof(uint64_t));
  if constexpr (P::kWritesBack) r.unpersisted.store(nullptr, std::memory_order_release);
}

template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::EraseProbe(const Probe& p) {
  if (life_.closed()) [[unlikely]] return index::Lifecycle::ClosedError(kKindName);
  ShardRef& r = shards_[ShardOf(p.h)];
  LockGuard<SpinLock> g(r.lock);
  const View v = MakeView(r.word.load(std::memory_order_relaxed));
  Where f, ins;
  if (!Locate(v, p, &f, &ins)) return Status::NotFound();
  const uint64_t m = f.b->meta.load(std::memory_order_relaxed);
  size_.Add(-1);  // before the persist, as in Write
  PublishMeta(r, f.b, MakeMeta(MetaValid(m), MetaDeleted(m) | (1u << f.j), MetaSeq(m) + 1));
  r.deleted++;
  if constexpr (R) records_->Retire(f.b->slots[f.j].value.load(std::memory_order_relaxed));
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::Erase(Key k) {
  if constexpr (R) {
    return EraseBytes(index::U64Bytes(k).view());
  } else {
    return EraseProbe(Keys::Make(hash_, k));
  }
}

template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::EraseBytes([[maybe_unused]] std::string_view k) {
  if constexpr (!R) {
    return index::NoRecords(kKindName);
  } else {
    return EraseProbe(Keys::Make(hash_, k));
  }
}

template <pm::PersistPolicy P, bool R>
bool Turbo<P, R>::BuildImage(const View& v, uint32_t log2n, std::unique_ptr<Bucket[]>* img) const {
  const uint32_t n = 1u << log2n;
  const uint32_t mask = n - 1;
  const uint32_t scope = std::min<uint32_t>(params_.probe_scope, n);
  img->reset(new (std::nothrow) Bucket[n]());
  if (!*img) return false;
  std::memset(static_cast<void*>(img->get()), 0, n * sizeof(Bucket));
  for (uint32_t i = 0; i <= v.mask; i++) {
    const Bucket* b = v.base + i;
    const uint64_t m = b->meta.load(std::memory_order_relaxed);
    for (uint32_t c = MetaLive(m); c; c &= c - 1) {
      const Slot& s = b->slots[std::countr_zero(c)];
      const uint64_t h = SlotHash(s);
      const uint32_t home = Home(h, log2n);
      bool placed = false;
      for (uint32_t d = 0; d < scope && !placed; d++) {
        Bucket& nb = (*img)[(home + d) & mask];
        const uint64_t nm = nb.meta.load(std::memory_order_relaxed);
        const uint32_t empty = MetaEmpty(nm);
        if (!PathEnd(nm)) continue;
        const int j = std::countr_zero(empty);
        nb.slots[j].key.store(s.key.load(std::memory_order_relaxed), std::memory_order_relaxed);
        nb.slots[j].value.store(s.value.load(std::memory_order_relaxed), std::memory_order_relaxed);
        SetTag(&nb, j, static_cast<uint8_t>(h));
        nb.meta.store(MakeMeta(MetaValid(nm) | (1u << j), 0, 0), std::memory_order_relaxed);
        placed = true;
      }
      if (!placed) return false;
    }
  }
  return true;
}

template <pm::PersistPolicy P, bool R>
std::pair<uint64_t, uint64_t> Turbo<P, R>::ProbeSum(const View& v) const {
  uint64_t sum = 0, items = 0;
  for (uint32_t i = 0; i <= v.mask; i++) {
    const Bucket* b = v.base + i;
    for (uint32_t c = MetaLive(b->meta.load(std::memory_order_relaxed)); c; c &= c - 1) {
      const uint32_t home = Home(SlotHash(b->slots[std::countr_zero(c)]), v.log2n);
      sum += ((i - home) & v.mask) + 1;
      items++;
    }
  }
  return {sum, items};
}

template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::Rehash(ShardRef& r, bool force_gc) {
  const auto started = ResizeLog::Now();
  const uint64_t w = r.word.load(std::memory_order_relaxed);
  const View v = MakeView(w);
  const uint64_t slots = uint64_t{v.mask + 1} * kSlots;
  bool gc = force_gc || static_cast<double>(r.deleted) > params_.gc_deleted_ratio * slots;
  uint32_t log2n = gc ? v.log2n : v.log2n + 1;
  const uint32_t max_log = static_cast<uint32_t>(std::countr_zero(params_.max_shard_buckets));
  std::unique_ptr<Bucket[]> img;
  for (;; log2n++) {
    if (log2n > max_log) {
      return Status::OutOfSpace("turbo: shard at max_shard_buckets " +
                                std::to_string(params_.max_shard_buckets) + " is full");
    }
    if (BuildImage(v, log2n, &img)) break;
    if (!img) return Status::OutOfMemory("turbo: rehash image");
  }
  gc = gc && log2n == v.log2n;  // a GC that could not place everything became a doubling
  const uint32_t n = 1u << log2n;
  auto off = pool_->allocator().Allocate(n);
  if (!off.ok()) return off.status();
  Bucket* nb = pool_->template At<Bucket>(off.value());
  persist_.NtCopy(nb, img.get(), uint64_t{n} * sizeof(Bucket));
  persist_.Fence();
  // I5: inactive set, then the version flip.
  const uint32_t s = static_cast<uint32_t>(&r - shards_.get());
  PmShardDesc& pd = pm_dir_[s];
  const uint64_t ver = pd.version.load(std::memory_order_relaxed);
  const uint64_t nw = PackShard(off.value(), log2n);
  pd.set[ver ^ 1].store(nw, std::memory_order_relaxed);
  persist_.Persist(&pd.set[ver ^ 1], sizeof(uint64_t));
  pd.version.store(ver ^ 1, std::memory_order_release);
  persist_.Persist(&pd.version, sizeof(uint64_t));
  r.word.store(nw, std::memory_order_release);
  r.deleted = 0;
  pm::ChunkAllocator* a = &pool_->allocator();
  const uint64_t old_off = ShardOffset(w);
  const uint32_t old_n = v.mask + 1;
  if (gc) {
    const auto before = ProbeSum(v);
    const auto after = ProbeSum(MakeView(nw));
    gc_dist_before_.fetch_add(before.first, std::memory_order_relaxed);
    gc_dist_after_.fetch_add(after.first, std::memory_order_relaxed);
    gc_items_.fetch_add(before.second, std::memory_order_relaxed);
    gcs_.fetch_add(1, std::memory_order_relaxed);
  }
  if (log2n > v.log2n) doublings_.fetch_add(1, std::memory_order_relaxed);
  epoch_.Retire([a, old_off, old_n] { a->Free(old_off, old_n); });
  resize_log_.Record(started);
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
Result<uint64_t> Turbo<P, R>::GarbageCollect() {
  uint64_t done = 0;
  for (uint32_t s = 0; s < nshards_; s++) {
    ShardRef& r = shards_[s];
    LockGuard<SpinLock> g(r.lock);
    const uint64_t slots = uint64_t{1} << ShardLog2(r.word.load(std::memory_order_relaxed));
    if (r.deleted == 0 ||
        static_cast<double>(r.deleted) <= params_.gc_deleted_ratio * slots * kSlots) {
      continue;
    }
    PMHASH_RETURN_IF_ERROR(Rehash(r, /*force_gc=*/true));
    done++;
  }
  return done;
}

template <pm::PersistPolicy P, bool R>
template <class Fn>
void Turbo<P, R>::ForEachLiveSlot(uint32_t s, Fn&& fn) const {
  const ShardRef& r = shards_[s];
  LockGuard<SpinLock> g(r.lock);
  const View v = MakeView(r.word.load(std::memory_order_relaxed));
  for (uint32_t i = 0; i <= v.mask; i++) {
    const Bucket* b = v.base + i;
    for (uint32_t c = MetaLive(b->meta.load(std::memory_order_relaxed)); c; c &= c - 1) {
      fn(b->slots[std::countr_zero(c)]);
    }
  }
}

template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::ForEach(const std::function<void(Key, Value)>& fn) const {
  std::vector<std::pair<Key, Value>> pairs;
  uint64_t skipped = 0;  // turbo-kv records the uint64 API cannot express
  for (uint32_t s = 0; s < nshards_; s++) {
    pairs.clear();
    ForEachLiveSlot(s, [&](const Slot& sl) {
      if constexpr (R) {
        Key kk;
        Value vv;
        if (records_->AsU64(sl.value.load(std::memory_order_relaxed), &kk, &vv)) {
          pairs.emplace_back(kk, vv);
        } else {
          skipped++;
        }
      } else {
        pairs.emplace_back(sl.key.load(std::memory_order_relaxed),
                           sl.value.load(std::memory_order_relaxed));
      }
    });
    for (const auto& [k, v] : pairs) fn(k, v);  // outside the shard lock
  }
  if constexpr (R) return records_->SkippedError(skipped);
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
void Turbo<P, R>::ForEachBytes(
    const std::function<void(std::string_view, std::string_view)>& fn) const {
  if constexpr (R) {
    std::vector<std::pair<std::string, std::string>> pairs;
    for (uint32_t s = 0; s < nshards_; s++) {
      pairs.clear();
      ForEachLiveSlot(s, [this, &pairs](const Slot& sl) {
        const uint64_t ro = sl.value.load(std::memory_order_relaxed);
        pairs.emplace_back(std::string(records_->Key(ro)), std::string(records_->Value(ro)));
      });
      for (const auto& [k, v] : pairs) fn(k, v);
    }
  } else {
    (void)fn;
  }
}

template <pm::PersistPolicy P, bool R>
IndexStats Turbo<P, R>::Stats() const {
  IndexStats st;
  this->FillCommonStats(&st);
  uint64_t buckets = 0, deleted = 0;
  uint64_t pos_sum = 0, pos_items = 0, pos_max = 0, neg_sum = 0, neg_max = 0;
  for (uint32_t s = 0; s < nshards_; s++) {
    const ShardRef& r = shards_[s];
    LockGuard<SpinLock> g(r.lock);
    const View v = MakeView(r.word.load(std::memory_order_relaxed));
    buckets += v.mask + 1;
    deleted += r.deleted;
    for (uint32_t i = 0; i <= v.mask; i++) {
      const Bucket* b = v.base + i;
      for (uint32_t c = MetaLive(b->meta.load(std::memory_order_relaxed)); c; c &= c - 1) {
        const Slot& sl = b->slots[std::countr_zero(c)];
        const uint64_t dist = ((i - Home(SlotHash(sl), v.log2n)) & v.mask) + 1;
        pos_sum += dist;
        pos_max = std::max(pos_max, dist);
        pos_items++;
      }
      // A negative search with home i visits buckets until the first path end.
      uint64_t d = 1;
      while (d < v.scope &&
             !PathEnd(v.base[(i + d - 1) & v.mask].meta.load(std::memory_order_relaxed))) {
        d++;
      }
      neg_sum += d;
      neg_max = std::max(neg_max, d);
    }
  }
  st.buckets = buckets;
  st.capacity_slots = buckets * kSlots;
  st.load_factor = st.capacity_slots ? static_cast<double>(st.size) / st.capacity_slots : 0;
  const uint64_t dir_bytes = RecChunks(uint64_t{nshards_} * sizeof(PmShardDesc)) * chunk_;
  st.pm_bytes = pm::kHeaderBytes + dir_bytes + buckets * sizeof(Bucket) +
                 (R ? records_->pm_bytes() : 0);
  st.dram_bytes = uint64_t{nshards_} * sizeof(ShardRef) + pool_->allocator().dram_bytes() +
                  (R ? records_->dram_bytes() : 0);
  st.splits = doublings_.load(std::memory_order_relaxed) + gcs_.load(std::memory_order_relaxed);
  auto add = [&](const char* name, double value) { st.details.push_back({name, value}); };
  const uint64_t gci = gc_items_.load(std::memory_order_relaxed);
  add("turbo.shards", nshards_);
  add("turbo.deleted_slots", static_cast<double>(deleted));
  add("turbo.probe.mean", pos_items ? static_cast<double>(pos_sum) / pos_items : 0);
  add("turbo.probe.max", static_cast<double>(pos_max));
  add("turbo.probe.neg_mean", buckets ? static_cast<double>(neg_sum) / buckets : 0);
  add("turbo.probe.neg_max", static_cast<double>(neg_max));
  add("turbo.rehash.doublings", static_cast<double>(doublings_.load(std::memory_order_relaxed)));
  add("turbo.gc.count", static_cast<double>(gcs_.load(std::memory_order_relaxed)));
  add("alloc.reused", static_cast<double>(pool_->allocator().reused_allocations()));
  add("turbo.gc.probe_before",
      gci ? static_cast<double>(gc_dist_before_.load(std::memory_order_relaxed)) / gci : 0);
  add("turbo.gc.probe_after",
      gci ? static_cast<double>(gc_dist_after_.load(std::memory_order_relaxed)) / gci : 0);
  add("turbo.read_retries", static_cast<double>(read_retries_.load(std::memory_order_relaxed)));
  add("turbo.epoch.pending", static_cast<double>(epoch_.pending()));
  if constexpr (R) records_->AddDetails(&st);
  return st;
}

// REQUIRES: no concurrent operations.
template <pm::PersistPolicy P, bool R>
Status Turbo<P, R>::CheckInvariants() const {
  const index::InvariantFailure fail{kKindName};
  epoch_.Drain();  // retired shards and records are back in the allocator
  index::LiveKeys keys(records_.get(), hash_);  // (records_: null unless R)
  uint64_t chunks = RecChunks(uint64_t{nshards_} * sizeof(PmShardDesc));
  uint64_t live = 0;
  for (uint32_t s = 0; s < nshards_; s++) {
    const ShardRef& r = shards_[s];
    if (!r.lock.try_lock()) return fail("shard lock held at rest");
    const uint32_t rdeleted = r.deleted;
    r.lock.unlock();
    const uint64_t w = r.word.load(std::memory_order_relaxed);
    const PmShardDesc& pd = pm_dir_[s];
    const uint64_t ver = pd.version.load(std::memory_order_relaxed);
    if (ver > 1 || pd.set[ver].load(std::memory_order_relaxed) != w) {
      return fail("DRAM descriptor of shard " + std::to_string(s) + " differs from PM");
    }
    const View v = MakeView(w);
    if (!pool_->allocator().IsUsed(ShardOffset(w))) return fail("shard not marked allocated");
    chunks += v.mask + 1;
    uint32_t deleted = 0;
    for (uint32_t i = 0; i <= v.mask; i++) {
      const Bucket* b = v.base + i;
      const uint64_t m = b->meta.load(std::memory_order_relaxed);
      if (MetaSpareBits(m) || (MetaDeleted(m) & ~MetaValid(m))) return fail("meta bits");
      if (MetaEmpty(m) == 0) return fail("bucket without a reserved empty slot (I3)");
      deleted += static_cast<uint32_t>(std::popcount(MetaDeleted(m)));
      for (uint32_t c = MetaLive(m); c; c &= c - 1) {
        const int j = std::countr_zero(c);
        const Slot& sl = b->slots[j];
        const uint64_t h = SlotHash(sl);
        if (ShardOf(h) != s) return fail("key in the wrong shard");
        if (GetTag(b, j) != static_cast<uint8_t>(h)) return fail("stale tag");
        const uint32_t home = Home(h, v.log2n);
        const uint32_t dist = (i - home) & v.mask;
        if (dist >= v.scope) return fail("key beyond the probing scope");
        for (uint32_t d = 0; d < dist; d++) {
          if (PathEnd(v.base[(home + d) & v.mask].meta.load(std::memory_order_relaxed))) {
            return fail("key beyond its path end (I3)");
          }
        }
        const uint64_t k = sl.key.load(std::memory_order_relaxed);
        const uint64_t val = sl.value.load(std::memory_order_relaxed);
        if (std::string e = keys.Add(k, val, h); !e.empty()) return fail(e);
        live++;
      }
    }
    if (deleted != rdeleted) return fail("deleted-slot count of shard " + std::to_string(s));
  }
  if (std::string e = keys.Finish(&chunks); !e.empty()) return fail(e);
  if (std::string e = this->CheckAccounting(chunks, live); !e.empty()) return fail(e);
  return Status::OK();
}

template <pm::PersistPolicy P>
using TurboKv = Turbo<P, true>;

PMHASH_ENGINE_FIND_BATCH((template <pm::PersistPolicy P, bool R>), Turbo<P, R>);

// Instantiated once, in the library (turbo.cc); users of this header link to those
// instead of compiling the whole index again in every translation unit.
PMHASH_ENGINE_INSTANTIATIONS(extern, Turbo, false);
PMHASH_ENGINE_INSTANTIATIONS(extern, Turbo, true);

}  // namespace pmhash::turbo
