// src/index/reh/reh.h — REH: Redesigning Extendible Hashing for Commercial Non-Volatile Memory.
//
// Paper: Zhengtao Li, Zhipeng Tan, Jianxi Chen. "REH: Redesigning Extendible Hashing for
// Commercial Non-Volatile Memory" (../shared/papers/reh.txt).
//
// ============================================================================================
// Design summary
// ============================================================================================
// Extendible hashing with no segment layer: a directory entry points straight at one 256 B
// bucket (the Optane XPLine). Selective persistence: only the buckets live in PM; the directory
// and each bucket's metadata (bitmap, fingerprints, lock) live in DRAM and are rebuilt from the
// buckets at open. Buckets are chained in PM by sibling offsets in prefix order, so recovery can
// rebuild the directory with one walk (Algorithm 1).
//
//   * Find reads DRAM metadata, SIMD-matches the 8-bit fingerprint against 15 tags, and touches
//     PM only for fingerprint hits: a negative find normally reads no PM at all.
//   * Insert writes the 16 B slot (value first, then key, same cache line) and persists that one
//     line: one flush + one fence per insert, as in the paper. The DRAM bitmap/fingerprint are
//     updated under the bucket lock, which is released only after the fence: readers wait on
//     it, so none sees the insert before it is durable.
//   * Split of a full bucket A (prefix P, depth d): copy A whole into a new bucket A' with header
//     (d+1, A.sibling), persist A' (non-temporal), then ONE 8-byte atomic write sets A's header to
//     (d+1, A'). That write both links A' into the chain and invalidates, in A, every key whose
//     prefix is P1: no slot is erased and no key moved twice. Then DRAM metadata and directory.
//   * Directory doubling under the directory lock (exclusive); splits take it shared while they
//     update entries; inserts/finds take no directory lock (paper III-F) and re-validate instead.
//
// ============================================================================================
// Layout
// ============================================================================================
//   PM bucket, 256 B, 256-aligned (one XPLine, four cache lines):
//
//     line 0:  [ key0 | val0 ][ key1 | val1 ][ key2 | val2 ][ key3 | val3 ]
//     line 1:  [ key4 | val4 ] ...                            [ key7 | val7 ]
//     line 2:  [ key8 | val8 ] ...                            [ key11| val11]
//     line 3:  [ key12| val12][ key13| val13][ key14| val14][ LD:16 SIB:48 | reserved ]
//
//     SIB is the pool offset of the next bucket in prefix order (0 = end of chain).
//     The pool's root 0 is the offset of the first bucket (prefix 00..0).
//
//   DRAM metadata, 32 B per bucket (paper Fig. 4, fields reordered for alignment):
//
//     [ fp0 .. fp14, -- : 16 B ][ bitmap:16 | pad:16 ][ VersionLock:32 ][ LD:16 | bucket:48 ]
//
//   DRAM directory: 2^GD pointers to metadata, indexed by the GD most significant hash bits.
//   Retired directories are kept until Close (their total is bounded by the live one: geometric
//   series), so readers need no epoch protection on the hot path.
//
// ============================================================================================
// Crash-consistency invariants (what recovery relies on)
// ============================================================================================
//   I1  Slot validity is derived, never stored: slot j of a bucket with header (LD, ·) whose
//       first bucket-chain position gives prefix P holds a live pair iff
//       hash(key) >> (64 - LD) == P. LD >= 1 always (initial depth >= 1).
//   I2  If a bucket is reachable from root 0 then its 256 bytes were persisted before the 8-byte
//       header write that made it reachable (split: NtCopy + fence, then link + persist).
//   I3  The chain visits buckets in increasing prefix order and their ranges tile the hash
//       space: sum of 2^-LD over the chain == 1. Recovery checks this exactly.
//   I4  Insert: value and key share one 64 B line and are stored value-then-key (x86 stores are
//       not reordered, and a line is written back whole), so any persisted image of the line holds
//       either the old key (the slot's old, invalid occupant: I1 keeps it invalid) or the new key
//       with the new value. The insert is acknowledged only after the line's flush + fence.
//   I4' With RehParams::tear_safe (platforms with only 8-byte failure atomicity), the value is
//       persisted before the key is stored, so even a torn line never pairs the new key with a
//       stale value. The crash suite checks both: the default under whole-line write-back, and
//       tear_safe under the simulator's 8-byte tearing (which does break the default).
//   I5  Erase (the paper leaves durable deletes implicit): one 8-byte atomic store replaces the
//       slot's key with a tombstone key T whose hash has the other top bit than the bucket's
//       prefix, so T is invalid in this bucket and in every bucket split from it (prefixes only
//       grow). Then persist. No other slot, and no header, is touched. Recovery never
//       resurrects an erased key: after the persist the old key is gone from PM.
//   I6  Update: one 8-byte atomic store of the value, then persist.
//   I7  A fresh bucket's unused slots hold tombstones (creation) or keys copied from its split
//       parent (split), all invalid in it by I1; zero-filled slots never appear (key 0 could be
//       valid in a bucket by chance; the paper's "initialise buckets when first allocated").
//   I8  No persistent memory leaks: the allocator's bitmap is DRAM only and rebuilt at open from
//       the chain; a bucket allocated by a split that did not reach its link write is free again.
//   I9  WriteBatch (not in the paper): each op writes and flushes exactly as I4-I6 (the single
//       calls' StoreNew / StoreValue / StoreTombstone), but keeps its bucket locked instead of
//       fencing; one fence then covers up to kBatchHeld buckets, and
//       only after it are they unlocked. The lock is what publishes a write (readers wait while
//       it is held, writers cannot reuse the slot), so no thread observes an op before it is
//       durable, and no op's slot is written by two ops between two fences. While it holds
//       locks the batch only TryLocks (never waits holding one: no deadlock with other writers,
//       splits or doublings); a busy bucket, one it already holds (a key twice in a batch: the
//       second op sees the first, and one key's ops persist in order) and a full bucket (the
//       single-op split path) make it fence and unlock first. A crash before the fence keeps
//       any subset of the held buckets' lines: each is a complete I4-I6 write or absent.
//   I10 Clean shutdown (not in the paper; src/pm/saved_state.h): Close saves the DRAM state —
//       per bucket in chain order its header word, fingerprints and bitmap, and the pair count —
//       and the next open loads it instead of walking the chain, if the pool was closed
//       cleanly. Nothing changed in PM since the save (Close quiesced the index, and the clean
//       mark is its last write), so the loaded state is the one walk 2 would derive; the load
//       checks it against the loaded allocator, and any mismatch falls back to the walk. Such
//       an open reads no bucket: a bucket damaged after the Close is found by the next walk
//       (after a crash) or by `pmhash check`, never followed out of bounds (slots hold plain
//       words; only the walk follows sibling offsets). reh-kv adds the record heap's state
//       (record_heap.h, "Clean shutdown"); its slots name records that such an open does not
//       validate, so every record read is bounded to the pool (Records::Fits) instead.
//
// reh-kv (variable-size keys and values; not in the paper): the same engine with kRecords, as
// TurboHash's records (src/index/records.h). A slot holds [ hash(key):64 | record offset:64 ]
// and the record [ klen | vlen | key | value ] lives in the pool's record heap. What changes:
//   * a slot's "hash" is its key word itself (I1 reads the stored hash; the tombstones are the
//     words 0 and 2^63, whose top bits differ), and two slots hold the same key iff their hashes
//     are equal and their records' keys are;
//   * insert: the record is written, flushed AND fenced, then the slot line as above (I4): two
//     fences per insert. The key store is the commit point and the slot's line may be written
//     back at any moment after it, before its own flush: the record must be durable first (the
//     crash suite finds the image of a valid slot naming a record of zero bytes otherwise). A
//     crash before the key store leaves the record unreachable, and recovery frees it (I8
//     applies to records: reachability from live slots);
//   * update: a new durable record, then the 8-byte value store + persist (I6), then the old
//     record is retired through the epoch (a lock-free reader may be reading it);
//   * erase: the tombstone store + persist (I5), then the record is retired;
//   * readers hold an epoch guard while they dereference a record offset read from a slot;
//   * recovery validates every live slot's record (src/index/records.h: in the heap, lengths,
//     its slab and slot, its key's hash against the slot's) before it reads its key.
// The uint64 API of reh-kv stores 8-byte little-endian keys and values as records.
//
// Paper errata fixed here: Algorithm 1 compares the key's LD-bit prefix with the directory index
// `i`, which is a GD-bit number; the bucket's prefix is i >> (GD - LD). Bucket merge (mentioned
// in III-E) is not implemented: erase never shrinks the table.
//
// Concurrency (paper III-F): per-bucket optimistic VersionLock. Writers lock the bucket, then
// re-read the directory to confirm it still maps the key to this bucket (a split that moved the
// key away changed the entry before unlocking). Readers snapshot the version, re-read the
// directory, read, and validate the version.
//
// Thread safety: all public operations may run concurrently. Close() requires quiescence.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "common/attributes.h"
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
#include "pm/saved_state.h"
#include "pm/slot.h"
#include "pmhash/index.h"

namespace pmhash::reh {

inline constexpr int kSlots = 15;
inline constexpr uint16_t kFullMask = (1u << kSlots) - 1;
inline constexpr uint64_t kOffsetMask = (uint64_t{1} << 48) - 1;
inline constexpr uint32_t kMaxDepthLimit = 40;  // 2^40 directory entries: far beyond any pool

using pm::PmSlot;  // src/pm/slot.h

struct alignas(256) PmBucket {
  PmSlot slots[kSlots];
  std::atomic<uint64_t> header;  // LD:16 | sibling offset:48
  uint64_t reserved;
};
static_assert(sizeof(PmBucket) == 256, "a bucket is one 256 B Optane XPLine");
static_assert(offsetof(PmBucket, header) == 240, "header is the first word of the last unit");

inline constexpr uint64_t PackHeader(uint32_t ld, uint64_t offset) {
  return (uint64_t{ld} << 48) | (offset & kOffsetMask);
}
inline constexpr uint32_t HeaderDepth(uint64_t h) { return static_cast<uint32_t>(h >> 48); }
inline constexpr uint64_t HeaderOffset(uint64_t h) { return h & kOffsetMask; }

// Per-bucket DRAM metadata (paper Fig. 4).
struct alignas(32) Meta {
  std::atomic<uint64_t> fp[2];  // fingerprint of slot j in byte j (byte 15 unused)
  std::atomic<uint16_t> bitmap;
  uint16_t pad;
  mutable VersionLock lock;         // logically not part of the value (ForEach locks const metas)
  std::atomic<uint64_t> ld_bucket;  // LD:16 | bucket offset:48

  uint32_t depth() const { return HeaderDepth(ld_bucket.load(std::memory_order_relaxed)); }
  uint64_t bucket_offset() const { return HeaderOffset(ld_bucket.load(std::memory_order_relaxed)); }
  uint8_t Fingerprint(int j) const {
    return static_cast<uint8_t>(fp[j >> 3].load(std::memory_order_relaxed) >> ((j & 7) * 8));
  }
  // REQUIRES: lock held (or the meta not yet published).
  void SetFingerprint(int j, uint8_t f) {
    auto& w = fp[j >> 3];
    const int sh = (j & 7) * 8;
    w.store((w.load(std::memory_order_relaxed) & ~(uint64_t{0xFF} << sh)) | (uint64_t{f} << sh),
            std::memory_order_relaxed);
  }
  // Bit j set iff slot j is live and its fingerprint equals f.
  uint32_t Candidates(uint8_t f) const {
    const __m128i v = _mm_set_epi64x(static_cast<long long>(fp[1].load(std::memory_order_relaxed)),
                                     static_cast<long long>(fp[0].load(std::memory_order_relaxed)));
    return Match16(v, f) & bitmap.load(std::memory_order_relaxed);
  }
};
static_assert(sizeof(Meta) == 32, "paper: 32 B of DRAM metadata per bucket");

// The pool properties, as stored in the pool header (src/index/descriptor.h).
struct PersistentParams : index::LayoutWords<sizeof(PmBucket), kSlots> {
  uint32_t initial_depth = 0;
  uint32_t max_depth = 0;
  uint32_t records = 0;           // 1: reh-kv
  uint32_t max_record_bytes = 0;  // reh-kv only
};

// What an open index runs with: the pool's properties and this open's options.
struct Config : PersistentParams, index::CommonOpenOptions {
  bool tear_safe = false;
  void SetOpenOptions(const Options& o) { tear_safe = o.reh.tear_safe; }
};

template <pm::PersistPolicy P, bool kRecords>
class Reh;

// The registry's words for reh and reh-kv (pmhash list; src/index/descriptor.h).
inline constexpr index::KindTexts kTexts{
    "reh", "reh-kv", "reh.max_record_bytes",
    "Li, Tan, Chen: REH: Redesigning Extendible Hashing for Commercial NVM",
    "extendible hashing, 256 B PM buckets, DRAM directory + fingerprints, 1 flush/insert"};

// kRecords = false: "reh" (8 B inline items). kRecords = true: "reh-kv" (records).
template <bool kRecords>
struct DescriptorFor
    : index::FlaggedDescriptorTypes<RehParams, &Options::reh, PersistentParams, Reh, kRecords,
                                    kTexts> {
  static constexpr auto kProperties =
      std::tuple{index::PoolProperty{"reh.initial_depth", &RehParams::initial_depth,
                                     &PersistentParams::initial_depth, 1u},
                 index::PoolProperty{"reh.max_depth", &RehParams::max_depth,
                                     &PersistentParams::max_depth, 32u}};
  static std::string Check(const PersistentParams& s) {
    if (s.max_depth < 1 || s.max_depth > kMaxDepthLimit) return "max_depth must be in [1, 40]";
    if (s.initial_depth < 1 || s.initial_depth > s.max_depth || s.initial_depth > 24) {
      return "initial_depth must be in [1, min(max_depth, 24)]";
    }
    return "";
  }
  static index::PoolLayout Layout(const PersistentParams& s) {
    return {sizeof(PmBucket), uint64_t{1} << s.initial_depth};
  }
  // 256 B bucket per 15 slots; extendible hashing averages ~0.69 load and can dip towards 0.5
  // right after a wave of splits. Plan for 0.35.
  static constexpr double kPoolBytesPerKey = sizeof(PmBucket) / static_cast<double>(kSlots) / 0.35;
};

template <pm::PersistPolicy P, bool kRecords = false>
class Reh : public index::EngineBase<Reh<P, kRecords>, P, Config> {
  PMHASH_ENGINE(Reh, P, Config, DescriptorFor<kRecords>);  // Open, Find, Erase, ..., ~Reh()

 public:
  using Base::Size;

  // Variable-size API (BytesIndex, src/index/records.h). NotSupported on "reh" (inline items).
  PMHASH_PROBE_RECORDS_API(kRecords);

  // For tests and tools.
  uint32_t global_depth() const { return dir_.load(std::memory_order_acquire)->depth; }

 private:
  using WriteMode = index::WriteMode;

  struct Directory {
    uint32_t depth;
    HugeArray<std::atomic<Meta*>> entries;  // 2^depth, THP-backed
    size_t size() const { return size_t{1} << depth; }
  };

  Reh(std::unique_ptr<pm::Pool> pool, const Config& config);
  // kOutOfSpace if a directory of 2^depth entries would exceed the DRAM budget.
  Status CheckDirectoryBudget(uint32_t depth, std::string_view what) const;

  PmBucket* Bucket(const Meta* m) const { return pool_->template At<PmBucket>(m->bucket_offset()); }
  static size_t DirIndex(uint64_t h, const Directory* d) { return h >> (64 - d->depth); }
  Meta* Lookup(uint64_t h) const {
    const Directory* d = dir_.load(std::memory_order_acquire);
    return d->entries[DirIndex(h, d)].load(std::memory_order_acquire);
  }
  // A key as the search compares it: the inline key, or hash + bytes (reh-kv).
  using Probe = index::KeyProbe;
  using Keys = index::ProbeKeys<kRecords>;  // src/index/records.h
  Probe MakeProbe(Key k) const { return Keys::Make(hash_, k); }
  Probe MakeProbe(std::string_view s) const { return Keys::Make(hash_, s); }
  // The hash a slot's key word stands for (I1 reads it; reh-kv: the word is the hash).
  uint64_t SlotHash(uint64_t key_word) const { return Keys::SlotHash(hash_, key_word); }
  // Two live slots holding the same key (recovery's duplicate check).
  bool SameKey(const PmSlot& a, const PmSlot& b) const {
    if (a.key.load(std::memory_order_relaxed) != b.key.load(std::memory_order_relaxed)) {
      return false;
    }
    if constexpr (kRecords) {
      return records_->Key(a.value.load(std::memory_order_relaxed)) ==
             records_->Key(b.value.load(std::memory_order_relaxed));
    }
    return true;
  }
  // Locks the bucket that holds hash h, re-validated against the directory.
  Meta* LockBucket(uint64_t h) const;
  // Slot of key p in m (fingerprint-filtered), or -1. Valid under m's lock.
  PMHASH_ALWAYS_INLINE int FindSlot(const Meta* m, const Probe& p) const;
  // A key invalid in every bucket that can hold h (I5): its hash has the other top bit.
  uint64_t Tombstone(uint64_t h) const { return tombstone_[(h >> 63) ^ 1]; }

  // Optimistic read of p's slot: true and its value word (reh-kv: the record offset) if p is
  // present. REQUIRES (reh-kv): the caller holds an epoch guard while it uses the record.
  PMHASH_ALWAYS_INLINE bool Search(const Probe& p, uint64_t* word) const;
  // Batched finds (src/index/batch.h): the directory entry, then the metadata, then the line of
  // the first fingerprint candidate (none for most absent keys).
  static constexpr int kBatchStages = 3;
  static constexpr size_t kBatchDistance = 16;  // one line per stage: room for more keys
  template <int kStage>
  PMHASH_ALWAYS_INLINE void BatchPrefetch(const Probe& p) const {
    if constexpr (kStage == 0) {
      const Directory* d = dir_.load(std::memory_order_acquire);
      PrefetchLine(&d->entries[DirIndex(p.h, d)]);
    } else if constexpr (kStage == 1) {
      PrefetchLine(Lookup(p.h));
    } else {
      const Meta* m = Lookup(p.h);
      if (const uint32_t c = m->Candidates(static_cast<uint8_t>(p.h))) {
        PrefetchLine(&Bucket(m)->slots[std::countr_zero(c)]);
      }
    }
  }
  PMHASH_ALWAYS_INLINE Status BatchFind(const Probe& p, Value* v) const {
    return Search(p, v) ? Status::OK() : Status::NotFound();
  }
  // The value to store: `value` (reh) or a new record of p.s and value_bytes (reh-kv).
  PMHASH_ALWAYS_INLINE Status Write(const Probe& p, std::string_view value_bytes, Value value,
                                    WriteMode mode);
  PMHASH_ALWAYS_INLINE Status EraseProbe(const Probe& p);
  // The stores of one write into p's bucket m, flushed but not fenced, and m's metadata updated:
  // the caller fences before it unlocks m (Write and EraseProbe at once, BatchWrite once per
  // held set), so no reader sees them before they are durable. REQUIRES: m locked.
  // A new pair (value word w) in m's first free slot, `bitmap` being m's bitmap (I4, I4').
  PMHASH_ALWAYS_INLINE void StoreNew(Meta* m, uint16_t bitmap, const Probe& p, uint64_t w);
  // Slot j's value word (I6).
  PMHASH_ALWAYS_INLINE void StoreValue(Meta* m, int j, uint64_t w);
  // Slot j's key replaced by a tombstone (I5), its bitmap bit cleared.
  PMHASH_ALWAYS_INLINE void StoreTombstone(Meta* m, int j, const Probe& p);
  // WriteBatch's hook (src/index/batch.h; I9 in the design comment). reh only: reh-kv's writes
  // fence their records anyway, and run one call per op.
  void BatchWrite(std::span<const WriteOp> ops, std::span<Status> statuses)
    requires(!kRecords);
  // The buckets a batch holds locked, their writes flushed but not yet fenced.
  static constexpr size_t kBatchHeld = 16;
  // A batch's cache misses overlap as FindBatch's do (src/index/batch.h): op i + 3D's directory
  // entry, i + 2D's metadata and i + D's slot line (stage 2 below) are asked for before op i runs.
  static constexpr size_t kWriteDistance = 4;
  // The line op p will write: its key's slot (first fingerprint candidate) or the first free one.
  PMHASH_ALWAYS_INLINE void WritePrefetch(const Probe& p) const {
    const Meta* m = Lookup(p.h);
    const uint32_t c = m->Candidates(static_cast<uint8_t>(p.h));
    const int j = c ? std::countr_zero(c)
                    : std::countr_one(m->bitmap.load(std::memory_order_relaxed));
    if (j < kSlots) PrefetchLineForWrite(&Bucket(m)->slots[j]);
  }
  // Calls take(slot) for every live slot, one bucket at a time under its lock, and bucket_done()
  // after each bucket, outside the lock.
  template <class Take, class Done>
  void WalkLiveSlots(Take&& take, Done&& bucket_done) const;
  EpochManager& RecordEpoch() const { return *epoch_; }  // reh-kv
  void Quiesce() {  // Close(): retired records are freed
    if constexpr (kRecords) {
      epoch_->Drain();
      records_->ReleaseEmptySlabs();  // (before the image: I10)
    }
  }
  // REQUIRES: m locked and full. Returns with m unlocked.
  Status Split(Meta* m, uint64_t h);
  Status Double(const Directory* seen);

  Status Create();
  Status Recover();
  // The image of a clean Close (src/pm/saved_state.h; I10): per bucket, in chain order.
  struct SavedBucket {
    uint64_t ld_bucket;  // Meta::ld_bucket
    uint64_t fp[2];      // Meta::fp
    uint16_t bitmap;     // Meta::bitmap
    uint8_t zero[6];
  };
  static_assert(sizeof(SavedBucket) == 32);
  // reh-kv: then the record heap's (record_heap.h, "Clean shutdown").
  void SaveState(pm::StateWriter& w) const;
  Status LoadState(pm::StateReader& r);
  // I3, one bucket at a time: a bucket of depth ld may cover the next directory entries from
  // *pos of a directory of 2^gd; if so *pos moves past them.
  static bool TileNext(uint64_t* pos, uint32_t gd, uint32_t ld) {
    if (ld > gd) return false;
    const uint64_t stride = uint64_t{1} << (gd - ld);
    if (*pos % stride != 0 || *pos + stride > (uint64_t{1} << gd)) return false;
    *pos += stride;
    return true;
  }
  // Recovery's start (Recover and LoadState): a directory of 2^gd entries within the DRAM
  // budget (`what` names the source of gd in the error), no metadata but `buckets` fresh ones;
  // and its end: `dir` the only directory.
  Status StartRebuild(uint32_t gd, uint64_t buckets, std::string_view what,
                      std::unique_ptr<Directory>* dir, Meta** metas);
  void ResetMetas();
  void InstallDirectory(std::unique_ptr<Directory> dir);
  // Asks for b's first `lines` 64 B lines (all four: its slots; three: those before the line
  // of its header, which the caller reads itself).
  static void PrefetchBucket(const PmBucket* b, size_t lines) {
    const char* p = reinterpret_cast<const char*>(b);
    for (size_t line = 0; line < lines; line++) PrefetchLine(p + line * 64);
  }
  // A live slot of b (per `bitmap`, fingerprints in m) whose key an earlier live slot holds too,
  // or -1.
  int DuplicateSlot(const PmBucket* b, const Meta* m, uint16_t bitmap) const;
  Meta* NewMeta();
  // n fresh metas in one block (recovery: the bucket count is known), or nullptr.
  Meta* NewMetas(size_t n);
  void FillTombstones(PmBucket* img, uint64_t prefix, uint32_t depth) const;

  const uint64_t max_directory_bytes_;  // Options::max_directory_bytes, resolved
  uint64_t tombstone_[2] = {0, 0};  // a key whose hash has top bit 0 / 1

  std::atomic<Directory*> dir_{nullptr};
  mutable RwSpinLock dir_lock_;  // exclusive: doubling; shared: entry updates by splits
  std::vector<std::unique_ptr<Directory>> dirs_ PMHASH_GUARDED_BY(dir_lock_);  // live + retired

  // Metadata lives in THP-backed blocks of geometrically growing size (4096 .. 65536 metas, the
  // last being 2 MiB); addresses are stable for the life of the index.
  mutable SpinLock meta_mu_;
  std::vector<HugeArray<Meta>> meta_blocks_ PMHASH_GUARDED_BY(meta_mu_);
  size_t meta_block_used_ PMHASH_GUARDED_BY(meta_mu_) = 0;
  std::atomic<size_t> meta_count_{0};  // metas handed out (== buckets)
  static constexpr size_t kFirstMetaBlock = 4096;
  static constexpr size_t kMaxMetaBlock = 65536;

  std::unique_ptr<index::Records> records_;  // reh-kv only (src/index/records.h)
  // reh-kv only, after pool_ and records_: its destructor frees into them. (Not a member of
  // "reh": its thread slots would make every Reh a 64-byte-aligned object of kilobytes.)
  std::unique_ptr<EpochManager> epoch_;
};

// ============================================================================================
// Implementation
// ============================================================================================

template <pm::PersistPolicy P, bool R>
Reh<P, R>::Reh(std::unique_ptr<pm::Pool> pool, const Config& config)
    : Base(std::move(pool), config),
      max_directory_bytes_(config.DirectoryBudget(pool_->size())) {
  if constexpr (R) {
    index::MakeRecords(*pool_, config.reclaim_batch, config.max_record_bytes, kKindName, &epoch_,
                       &records_);
    tombstone_[1] = uint64_t{1} << 63;  // the key word is the hash: 0 and 2^63
    return;
  }
  // Tombstone keys: the first keys whose hash has top bit 0 and 1 (two or three tries in
  // expectation, in either hash mode).
  bool have[2] = {false, false};
  for (uint64_t k = 0; !(have[0] && have[1]); k++) {
    const int b = static_cast<int>(hash_(k) >> 63);
    if (!have[b]) {
      tombstone_[b] = k;
      have[b] = true;
    }
  }
}

template <pm::PersistPolicy P, bool R>
Status Reh<P, R>::CheckDirectoryBudget(uint32_t depth, std::string_view what) const {
  constexpr uint64_t kEntry = sizeof(std::atomic<Meta*>);
  if (depth < 64 - 3 && (uint64_t{1} << depth) <= max_directory_bytes_ / kEntry) {
    return Status::OK();
  }
  return Status::OutOfSpace("reh: " + std::string(what) + " needs a directory of 2^" +
                            std::to_string(depth) + " entries, over Options::max_directory_bytes (" +
                            std::to_string(max_directory_bytes_) + " B)");
}

template <pm::PersistPolicy P, bool R>
void Reh<P, R>::FillTombstones(PmBucket* img, uint64_t prefix, uint32_t depth) const {
  const uint64_t t = tombstone_[1 - ((prefix >> (depth - 1)) & 1)];
  for (auto& s : img->slots) {
    s.key.store(t, std::memory_order_relaxed);
    s.value.store(0, std::memory_order_relaxed);
  }
}

// Builds the initial chain: 2^d buckets, all tombstoned, linked in prefix order.
template <pm::PersistPolicy P, bool R>
Status Reh<P, R>::Create() {
  const uint32_t d = params_.initial_depth;
  const uint64_t n = uint64_t{1} << d;
  std::vector<uint64_t> offs(n);
  for (uint64_t i = 0; i < n; i++) {
    auto off = pool_->allocator().Allocate(1);
    if (!off.ok()) return off.status();
    offs[i] = off.value();
  }
  // Write back to front so each bucket knows its successor.
  alignas(256) PmBucket img;
  for (uint64_t i = n; i-- > 0;) {
    FillTombstones(&img, i, d);
    img.header.store(PackHeader(d, i + 1 < n ? offs[i + 1] : 0), std::memory_order_relaxed);
    img.reserved = 0;
    persist_.NtCopy(pool_->template At<PmBucket>(offs[i]), &img, sizeof(img));
  }
  persist_.Fence();
  pool_->SetRoot(0, offs[0]);
  return pool_->CommitCreate();
}

template <pm::PersistPolicy P, bool R>
Meta* Reh<P, R>::NewMeta() {
  LockGuard<SpinLock> g(meta_mu_);
  if (meta_blocks_.empty() || meta_block_used_ == meta_blocks_.back().size()) {
    const size_t n = meta_blocks_.empty() ? kFirstMetaBlock
                                          : std::min(kMaxMetaBlock, meta_blocks_.back().size() * 2);
    HugeArray<Meta> block(n);
    if (!block) return nullptr;
    meta_blocks_.push_back(std::move(block));
    meta_block_used_ = 0;
  }
  Meta* m = new (&meta_blocks_.back()[meta_block_used_++]) Meta();
  meta_count_.fetch_add(1, std::memory_order_release);
  return m;
}

template <pm::PersistPolicy P, bool R>
Meta* Reh<P, R>::NewMetas(size_t n) {
  HugeArray<Meta> block(n);
  if (!block) return nullptr;
  for (size_t i = 0; i < n; i++) new (&block[i]) Meta();
  LockGuard<SpinLock> g(meta_mu_);
  meta_blocks_.push_back(std::move(block));
  meta_block_used_ = n;
  meta_count_.fetch_add(n, std::memory_order_release);
  return &meta_blocks_.back()[0];
}

template <pm::PersistPolicy P, bool R>
int Reh<P, R>::DuplicateSlot(const PmBucket* b, const Meta* m, uint16_t bitmap) const {
  // One SIMD fingerprint match per live slot; keys are compared only on a fingerprint collision.
  const __m128i fps =
      _mm_set_epi64x(static_cast<long long>(m->fp[1].load(std::memory_order_relaxed)),
                     static_cast<long long>(m->fp[0].load(std::memory_order_relaxed)));
  for (uint32_t c = bitmap; c; c &= c - 1) {
    const int j = std::countr_zero(c);
    uint32_t same = Match16(fps, m->Fingerprint(j)) & bitmap & ((1u << j) - 1);
    if (same == 0) [[likely]] continue;
    for (; same; same &= same - 1) {
      if (SameKey(b->slots[std::countr_zero(same)], b->slots[j])) return j;
    }
  }
  return -1;
}

// Algorithm 1, with every offset validated: two walks of the chain (depths, then contents).
template <pm::PersistPolicy P, bool R>
Status Reh<P, R>::Recover() {
  pm::ChunkAllocator& alloc = pool_->allocator();
  if constexpr (R) records_->Reset();
  const uint64_t first = pool_->root(0);

  // Walk 1: reachability (cycles and stray offsets are rejected by MarkReachable), and each
  // bucket's offset and depth, read once: walk 2 uses these, never the PM headers again.
  // Walk 1 chases the chain, one dependent miss per bucket (the header's line, the last); it also
  // asks for the bucket's other three lines, whose misses overlap the chase, so that walk 2 finds
  // them cached (a table that fits the last-level cache).
  uint32_t gd = 0;
  uint64_t buckets = 0;
  std::vector<uint64_t> offsets;
  std::vector<uint8_t> depths;
  for (uint64_t off = first; off != 0;) {
    if (Status s = alloc.MarkReachable(off); !s.ok()) {
      return Status::Corruption("reh: bucket chain: " + std::string(s.message()));
    }
    const PmBucket* bucket = pool_->template At<PmBucket>(off);
    PrefetchBucket(bucket, offsetof(PmBucket, header) / 64);
    const uint64_t h = bucket->header.load(std::memory_order_relaxed);
    const uint32_t ld = HeaderDepth(h);
    if (ld < 1 || ld > params_.max_depth) {
      return Status::Corruption("reh: bucket at offset " + std::to_string(off) +
                                " has local depth " + std::to_string(ld));
    }
    gd = std::max(gd, ld);
    buckets++;
    offsets.push_back(off);
    depths.push_back(static_cast<uint8_t>(ld));
    off = HeaderOffset(h);
  }
  if (buckets == 0) return Status::Corruption("reh: pool has no bucket chain (root 0 is empty)");

  // I3 before any allocation: the depths must tile the hash space in prefix order. A hostile
  // chain asking for a huge directory (one bucket claiming depth 32) is refused here, not by
  // running out of memory.
  {
    uint64_t pos = 0;
    const uint64_t entries = uint64_t{1} << gd;
    for (const uint8_t ld : depths) {
      if (!TileNext(&pos, gd, ld)) {
        return Status::Corruption("reh: bucket depths do not tile the hash space");
      }
    }
    if (pos != entries) {
      return Status::Corruption("reh: bucket chain covers " + std::to_string(pos) + " of " +
                                std::to_string(entries) + " directory entries");
    }
  }

  // The directory: 2^gd entries, within the DRAM budget (a chain can tile the hash space and
  // still ask for 2^32 entries: depths 1, 2, ..., 32, 32).
  std::unique_ptr<Directory> dir;
  Meta* metas = nullptr;
  PMHASH_RETURN_IF_ERROR(StartRebuild(
      gd, buckets,
      "the bucket chain (" + std::to_string(buckets) + " buckets; corrupt, or opened with a "
                                                       "smaller budget than it grew under)",
      &dir, &metas));

  // Walk 2: metadata (from the slots) and directory entries, over the tiling checked above.
  uint64_t live = 0;
  uint64_t i = 0;
  // Walk 2 reads buckets in chain order, which is not address order: request the lines of the
  // bucket kAhead places ahead (a table larger than the cache lost walk 1's prefetches).
  constexpr size_t kAhead = 4;
  for (size_t n = 0; n < offsets.size(); n++) {
    if (n + kAhead < offsets.size()) {
      PrefetchBucket(pool_->template At<PmBucket>(offsets[n + kAhead]), sizeof(PmBucket) / 64);
    }
    const uint64_t off = offsets[n];
    const uint32_t ld = depths[n];
    const PmBucket* b = pool_->template At<PmBucket>(off);
    const uint64_t stride = uint64_t{1} << (gd - ld);
    const uint64_t prefix = i >> (gd - ld);  // (the paper's Algorithm 1 uses i here)
    Meta* m = &metas[n];
    uint16_t bitmap = 0;
    for (int j = 0; j < kSlots; j++) {
      const uint64_t kh = SlotHash(b->slots[j].key.load(std::memory_order_relaxed));
      if ((kh >> (64 - ld)) == prefix) {
        if constexpr (R) records_->Prefetch(b->slots[j].value.load(std::memory_order_relaxed));
        bitmap |= static_cast<uint16_t>(1u << j);
        m->SetFingerprint(j, static_cast<uint8_t>(kh));
        live++;
      }
    }
    if constexpr (R) {  // the bucket's records, their first lines requested together above
      for (uint32_t c = bitmap; c; c &= c - 1) {
        const PmSlot& s = b->slots[std::countr_zero(c)];
        PMHASH_RETURN_IF_ERROR(records_->Recover(s.value.load(std::memory_order_relaxed),
                                                 s.key.load(std::memory_order_relaxed), hash_));
      }
    }
    // A key is live only in the bucket of its hash (I1, I3), so a duplicate can only be in this
    // bucket.
    if (const int dup = DuplicateSlot(b, m, bitmap); dup >= 0) [[unlikely]] {
      return Status::Corruption(std::string(kKindName) + ": key " +
                                std::to_string(b->slots[dup].key.load(std::memory_order_relaxed)) +
                                " is stored twice in the bucket at offset " +
                                std::to_string(off) +
                                " (slot " + std::to_string(dup) + " and an earlier one)");
    }
    m->bitmap.store(bitmap, std::memory_order_relaxed);
    m->ld_bucket.store(PackHeader(ld, off), std::memory_order_relaxed);
    for (uint64_t e = i; e < i + stride; e++) new (&dir->entries[e]) std::atomic<Meta*>(m);
    i += stride;
  }
  InstallDirectory(std::move(dir));
  size_.Reset(static_cast<int64_t>(live));
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
Status Reh<P, R>::StartRebuild(uint32_t gd, uint64_t buckets, std::string_view what,
                               std::unique_ptr<Directory>* dir, Meta** metas) {
  PMHASH_RETURN_IF_ERROR(CheckDirectoryBudget(gd, what));
  *dir = std::make_unique<Directory>();
  (*dir)->depth = gd;
  (*dir)->entries = HugeArray<std::atomic<Meta*>>(size_t{1} << gd);
  if (!(*dir)->entries) return Status::OutOfMemory("reh: directory of 2^" + std::to_string(gd));
  ResetMetas();
  *metas = NewMetas(buckets);
  if (!*metas) return Status::OutOfMemory("reh: bucket metadata");
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
void Reh<P, R>::ResetMetas() {
  LockGuard<SpinLock> g(meta_mu_);
  meta_blocks_.clear();
  meta_block_used_ = 0;
  meta_count_.store(0);
}

template <pm::PersistPolicy P, bool R>
void Reh<P, R>::InstallDirectory(std::unique_ptr<Directory> dir) {
  LockGuard<RwSpinLock> g(dir_lock_);
  dirs_.clear();
  dir_.store(dir.get(), std::memory_order_release);
  dirs_.push_back(std::move(dir));
}

// I10: live pairs, global depth, bucket count, then per bucket in chain (prefix) order its
// metadata as walk 2 of Recover derives it: header word (LD, offset), fingerprints, bitmap.
template <pm::PersistPolicy P, bool R>
void Reh<P, R>::SaveState(pm::StateWriter& w) const {
  const Directory* d = dir_.load(std::memory_order_acquire);
  w.Put<uint64_t>(Size());
  w.Put<uint32_t>(d->depth);
  w.Put<uint64_t>(meta_count_.load(std::memory_order_acquire));
  for (size_t i = 0; i < d->size();) {
    const Meta* m = d->entries[i].load(std::memory_order_relaxed);
    SavedBucket b{};
    b.ld_bucket = m->ld_bucket.load(std::memory_order_relaxed);
    b.fp[0] = m->fp[0].load(std::memory_order_relaxed);
    b.fp[1] = m->fp[1].load(std::memory_order_relaxed);
    b.bitmap = m->bitmap.load(std::memory_order_relaxed);
    w.Put(b);
    i += size_t{1} << (d->depth - m->depth());
  }
  if constexpr (R) records_->SaveState(w);
}

// I10: the directory and metadata from the image, after the checks Recover makes of the chain
// (depths in range, I3 tiling, the directory budget, every bucket a heap chunk reached once),
// plus: the bitmaps' pairs the saved count, and the allocator's used chunks exactly the
// buckets' chunks: nothing the image names lies outside what the allocator holds, and nothing it
// holds is unnamed. reh-kv: the record heap's slabs are named too, the used chunks are those plus
// the large records' chunks, and the pairs must be the heap's records.
template <pm::PersistPolicy P, bool R>
Status Reh<P, R>::LoadState(pm::StateReader& r) {
  const pm::ChunkAllocator& alloc = pool_->allocator();
  const Status bad = Status::Corruption(std::string(kKindName) + ": saved state");
  uint64_t live = 0, buckets = 0;
  uint32_t gd = 0;
  if (!r.Get(&live) || !r.Get(&gd) || !r.Get(&buckets)) return bad;
  if (gd < 1 || gd > params_.max_depth || buckets == 0 || buckets > alloc.used_chunks()) {
    return bad;
  }
  std::unique_ptr<Directory> dir;
  Meta* metas = nullptr;
  PMHASH_RETURN_IF_ERROR(StartRebuild(gd, buckets, "the saved state", &dir, &metas));
  // The chunks the buckets take (a bucket is one chunk), each named once: at the end they must
  // be exactly the loaded allocator's used chunks.
  pm::ChunkSet named(alloc);
  uint64_t pos = 0, pairs = 0;
  for (uint64_t n = 0; n < buckets; n++) {
    SavedBucket b;
    if (!r.Get(&b)) return bad;
    const uint32_t ld = HeaderDepth(b.ld_bucket);
    const uint64_t first = pos;
    if (ld < 1 || (b.bitmap >> kSlots) != 0 || !TileNext(&pos, gd, ld)) return bad;
    // Inside the heap, chunk-aligned, not named twice.
    if (!named.Add(HeaderOffset(b.ld_bucket))) return bad;
    Meta* m = &metas[n];
    m->fp[0].store(b.fp[0], std::memory_order_relaxed);
    m->fp[1].store(b.fp[1], std::memory_order_relaxed);
    m->bitmap.store(b.bitmap, std::memory_order_relaxed);
    m->ld_bucket.store(b.ld_bucket, std::memory_order_relaxed);
    for (uint64_t e = first; e < pos; e++) new (&dir->entries[e]) std::atomic<Meta*>(m);
    pairs += static_cast<uint64_t>(std::popcount(b.bitmap));
  }
  if (pos != dir->size() || pairs != live) return bad;
  if constexpr (R) {
    if (!records_->LoadState(r, live,
                             [&named](uint64_t o, uint32_t n) { return named.Add(o, n); }) ||
        !named.AllocatorHasAll() ||
        alloc.used_chunks() != named.count() + records_->large_chunks()) {
      return bad;  // a leak, a slab or bucket the bitmap lacks, or records no slot names
    }
  } else if (!named.EqualsAllocator()) {
    return bad;  // a leak, or a bucket the bitmap lacks
  }
  InstallDirectory(std::move(dir));
  size_.Reset(static_cast<int64_t>(live));
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
Meta* Reh<P, R>::LockBucket(uint64_t h) const {
  for (;;) {
    Meta* m = Lookup(h);
    m->lock.Lock();
    if (Lookup(h) == m) return m;  // still the bucket of h: nothing can move h away now
    m->lock.Unlock();
  }
}

template <pm::PersistPolicy P, bool R>
int Reh<P, R>::FindSlot(const Meta* m, const Probe& p) const {
  const PmBucket* b = Bucket(m);
  for (uint32_t c = m->Candidates(static_cast<uint8_t>(p.h)); c; c &= c - 1) {
    const int j = std::countr_zero(c);
    if (Keys::Matches(records_.get(), b->slots[j], p)) return j;
  }
  return -1;
}

template <pm::PersistPolicy P, bool R>
bool Reh<P, R>::Search(const Probe& p, uint64_t* word) const {
  for (;;) {
    const Meta* m = Lookup(p.h);
    const uint32_t ver = m->lock.BeginRead();
    if (Lookup(p.h) != m) continue;  // a split moved h after we read the directory
    const int j = FindSlot(m, p);
    const uint64_t w = j >= 0 ? Bucket(m)->slots[j].value.load(R ? std::memory_order_acquire
                                                                 : std::memory_order_relaxed)
                              : 0;
    if (!m->lock.Validate(ver)) continue;
    if (j < 0) return false;
    *word = w;
    return true;
  }
}

template <pm::PersistPolicy P, bool R>
Status Reh<P, R>::Write(const Probe& p, std::string_view value_bytes, Value value,
                        WriteMode mode) {
  // The value word to store: the value, or a new record's offset, durable before the store that
  // publishes it (reh-kv in the design comment).
  auto value_word = [&](uint64_t* w) {
    return index::ValueWord<R>(records_.get(), p.s, value_bytes, value, persist_, w);
  };
  for (;;) {
    Meta* m = LockBucket(p.h);
    if (const int j = FindSlot(m, p); j >= 0) {
      uint64_t w = 0;
      Status st = mode == WriteMode::kInsert ? Status::Exists() : value_word(&w);
      if (!st.ok()) {
        m->lock.Unlock();
        return st;
      }
      const uint64_t old = Bucket(m)->slots[j].value.load(std::memory_order_relaxed);
      StoreValue(m, j, w);
      persist_.Fence();
      m->lock.Unlock();
      if constexpr (R) records_->Retire(old);
      return Status::OK();
    }
    if (mode == WriteMode::kUpdate) {
      m->lock.Unlock();
      return Status::NotFound();
    }
    const uint16_t bitmap = m->bitmap.load(std::memory_order_relaxed);
    if (bitmap != kFullMask) {
      uint64_t w = 0;
      if (Status st = value_word(&w); !st.ok()) {
        m->lock.Unlock();
        return st;
      }
      // The size before the fence: a locked add after it waits for the line's write-back,
      // which the next operation's cache misses can otherwise overlap.
      size_.Add(1);
      StoreNew(m, bitmap, p, w);
      persist_.Fence();
      m->lock.Unlock();
      return Status::OK();
    }
    PMHASH_RETURN_IF_ERROR(Split(m, p.h));  // unlocks m; then retry into the right half
  }
}

template <pm::PersistPolicy P, bool R>
Status Reh<P, R>::EraseProbe(const Probe& p) {
  Meta* m = LockBucket(p.h);
  const int j = FindSlot(m, p);
  if (j < 0) {
    m->lock.Unlock();
    return Status::NotFound();
  }
  const uint64_t record = Bucket(m)->slots[j].value.load(std::memory_order_relaxed);  // reh-kv
  size_.Add(-1);  // before the fence, as in Write
  StoreTombstone(m, j, p);
  persist_.Fence();
  m->lock.Unlock();
  if constexpr (R) records_->Retire(record);
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
void Reh<P, R>::StoreNew(Meta* m, uint16_t bitmap, const Probe& p, uint64_t w) {
  const int j = std::countr_one(bitmap);
  PmSlot& s = Bucket(m)->slots[j];
  // I4: value, then key, one line. Release on both (a plain store on x86): a lock-free reader
  // may load the old key and then this value, and must see the record it names.
  s.value.store(w, std::memory_order_release);
  if (params_.tear_safe) persist_.Persist(&s.value, sizeof(Value));  // I4': 8-byte model
  s.key.store(Keys::KeyWord(p), std::memory_order_release);
  persist_.Flush(&s, sizeof(PmSlot));
  m->SetFingerprint(j, static_cast<uint8_t>(p.h));
  m->bitmap.store(static_cast<uint16_t>(bitmap | (1u << j)), std::memory_order_relaxed);
}

template <pm::PersistPolicy P, bool R>
void Reh<P, R>::StoreValue(Meta* m, int j, uint64_t w) {
  std::atomic<uint64_t>& value = Bucket(m)->slots[j].value;
  value.store(w, std::memory_order_release);  // I6
  persist_.Flush(&value, sizeof(Value));
}

template <pm::PersistPolicy P, bool R>
void Reh<P, R>::StoreTombstone(Meta* m, int j, const Probe& p) {
  std::atomic<uint64_t>& key = Bucket(m)->slots[j].key;
  key.store(Tombstone(p.h), std::memory_order_release);  // I5
  persist_.Flush(&key, sizeof(Key));
  m->bitmap.store(static_cast<uint16_t>(m->bitmap.load(std::memory_order_relaxed) & ~(1u << j)),
                  std::memory_order_relaxed);
}

template <pm::PersistPolicy P, bool R>
void Reh<P, R>::BatchWrite(std::span<const WriteOp> ops, std::span<Status> statuses)
  requires(!R)
PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  std::array<Meta*, kBatchHeld> held;
  size_t n_held = 0;
  int64_t size_delta = 0;
  // One fence makes every held bucket's flushed lines durable; then they are published.
  // (The size first: its locked add would wait for the fence's write-backs, and the next op's
  // misses with it. Size() is not linearizable with concurrent writes anyway.)
  auto drain = [&] {
    if (n_held == 0) return;
    if (size_delta != 0) size_.Add(size_delta);
    size_delta = 0;
    persist_.Fence();
    for (size_t i = 0; i < n_held; i++) held[i]->lock.Unlock();
    n_held = 0;
  };
  // Op i's probe lives in ring[i % kRing] from step i - 3D (its first prefetch) to step i.
  constexpr size_t D = kWriteDistance;
  constexpr size_t kRing = std::bit_ceil(3 * D + 1);
  index::ProbeRing<Probe, kRing> ring;
  const size_t n = ops.size();
  const bool pipelined = n > 1;  // a single op: nothing to overlap with
  if (pipelined) {
    for (size_t q = 0; q < std::min(3 * D, n); q++) {
      ring[q % kRing] = MakeProbe(ops[q].key);
      BatchPrefetch<0>(ring[q % kRing]);
    }
    for (size_t q = 0; q < std::min(2 * D, n); q++) BatchPrefetch<1>(ring[q % kRing]);
    for (size_t q = 0; q < std::min(D, n); q++) WritePrefetch(ring[q % kRing]);
  }
  for (size_t i = 0; i < n; i++) {
    const WriteOp& op = ops[i];
    if (!pipelined) {
      ring[0] = MakeProbe(op.key);
    } else {
      // Op i + 3D's directory entry, i + 2D's metadata, i + D's slot line.
      if (i + 3 * D < n) {
        ring[(i + 3 * D) % kRing] = MakeProbe(ops[i + 3 * D].key);
        BatchPrefetch<0>(ring[(i + 3 * D) % kRing]);
      }
      if (i + 2 * D < n) BatchPrefetch<1>(ring[(i + 2 * D) % kRing]);
      if (i + D < n) WritePrefetch(ring[(i + D) % kRing]);
    }
    const Probe& p = ring[i % kRing];
    // Lock p's bucket: by TryLock while others are held (a batch never waits holding a lock),
    // else drain first and wait. A bucket the batch holds already fails the TryLock too, so it
    // is drained: its earlier op is published, and this one sees it.
    Meta* m = Lookup(p.h);
    if (!m->lock.TryLock()) {
      drain();
      m = LockBucket(p.h);
    } else if (Lookup(p.h) != m) {  // split away between the lookup and the lock
      m->lock.UnlockUnchanged();
      drain();
      m = LockBucket(p.h);
    }
    const int j = FindSlot(m, p);
    bool wrote = false;
    Status st = Status::OK();
    if (op.kind == WriteKind::kErase) {
      if (j < 0) {
        st = Status::NotFound();
      } else {
        StoreTombstone(m, j, p);
        size_delta--;
        wrote = true;
      }
    } else if (j >= 0) {
      if (op.kind == WriteKind::kInsert) {
        st = Status::Exists();
      } else {
        StoreValue(m, j, op.value);
        wrote = true;
      }
    } else if (op.kind == WriteKind::kUpdate) {
      st = Status::NotFound();
    } else if (const uint16_t bitmap = m->bitmap.load(std::memory_order_relaxed);
               bitmap != kFullMask) {
      StoreNew(m, bitmap, p, op.value);
      size_delta++;
      wrote = true;
    } else {
      // Full: the split path of a single write, with nothing held.
      m->lock.UnlockUnchanged();
      drain();
      statuses[i] = Write(p, {}, op.value,
                          op.kind == WriteKind::kInsert ? WriteMode::kInsert : WriteMode::kUpsert);
      continue;
    }
    statuses[i] = st;
    if (!wrote) {
      m->lock.UnlockUnchanged();
      continue;
    }
    held[n_held++] = m;
    if (n_held == kBatchHeld) drain();
  }
  drain();
}

template <pm::PersistPolicy P, bool R>
Status Reh<P, R>::Split(Meta* m, uint64_t h) PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  const auto started = ResizeLog::Now();
  const uint32_t ld = m->depth();
  dir_lock_.lock_shared();
  Directory* d = dir_.load(std::memory_order_acquire);
  if (ld == d->depth) {
    dir_lock_.unlock_shared();
    m->lock.Unlock();
    return Double(d);
  }
  auto off = pool_->allocator().Allocate(1);
  Meta* mb = off.ok() ? NewMeta() : nullptr;
  if (!mb) {
    if (off.ok()) pool_->allocator().Free(off.value());
    dir_lock_.unlock_shared();
    m->lock.Unlock();
    return off.ok() ? Status::OutOfMemory("reh: bucket metadata") : off.status();
  }
  PmBucket* a = Bucket(m);
  PmBucket* nb = pool_->template At<PmBucket>(off.value());
  const uint64_t a_header = a->header.load(std::memory_order_relaxed);

  // I2: the new bucket is a full copy of A (its P0 keys are invalid there by I1) with header
  // (ld+1, A's old sibling), persisted before it becomes reachable.
  alignas(256) PmBucket img;
  for (int j = 0; j < kSlots; j++) {
    img.slots[j].key.store(a->slots[j].key.load(std::memory_order_relaxed),
                           std::memory_order_relaxed);
    img.slots[j].value.store(a->slots[j].value.load(std::memory_order_relaxed),
                             std::memory_order_relaxed);
  }
  img.header.store(PackHeader(ld + 1, HeaderOffset(a_header)), std::memory_order_relaxed);
  img.reserved = 0;
  persist_.NtCopy(nb, &img, sizeof(img));
  persist_.Fence();
  // The split's commit point: one failure-atomic 8-byte write.
  a->header.store(PackHeader(ld + 1, off.value()), std::memory_order_release);
  persist_.Persist(&a->header, sizeof(uint64_t));

  // DRAM: B takes the live slots whose hash has bit (63 - ld) set.
  const uint16_t bitmap = m->bitmap.load(std::memory_order_relaxed);
  uint16_t moved = 0;
  for (uint32_t c = bitmap; c; c &= c - 1) {
    const int j = std::countr_zero(c);
    if ((SlotHash(img.slots[j].key.load(std::memory_order_relaxed)) >> (63 - ld)) & 1) {
      moved |= static_cast<uint16_t>(1u << j);
    }
  }
  // B stays locked until every directory entry of its range names it: a thread that finds B
  // through an entry already written could otherwise lock B and split it while this loop is
  // still writing B into the rest of the range, over that split's entries (two metas left
  // claiming one range; found by StressTest.SharedRange under TSan).
  mb->lock.MarkLocked();
  mb->fp[0].store(m->fp[0].load(std::memory_order_relaxed), std::memory_order_relaxed);
  mb->fp[1].store(m->fp[1].load(std::memory_order_relaxed), std::memory_order_relaxed);
  mb->bitmap.store(moved, std::memory_order_relaxed);
  mb->ld_bucket.store(PackHeader(ld + 1, off.value()), std::memory_order_relaxed);
  m->bitmap.store(static_cast<uint16_t>(bitmap & ~moved), std::memory_order_relaxed);
  m->ld_bucket.store(PackHeader(ld + 1, pool_->OffsetOf(a)), std::memory_order_relaxed);

  // Directory: the upper half of A's entry range now maps to B.
  const uint64_t prefix = h >> (64 - ld);
  const uint64_t span = uint64_t{1} << (d->depth - ld);
  const uint64_t first = prefix * span;
  for (uint64_t e = first + span / 2; e < first + span; e++) {
    d->entries[e].store(mb, std::memory_order_release);
  }
  dir_lock_.unlock_shared();
  mb->lock.Unlock();
  m->lock.Unlock();
  splits_.fetch_add(1, std::memory_order_relaxed);
  resize_log_.Record(started);
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
Status Reh<P, R>::Double(const Directory* seen) {
  const auto started = ResizeLog::Now();
  LockGuard<RwSpinLock> g(dir_lock_);
  Directory* d = dir_.load(std::memory_order_acquire);
  if (d != seen) return Status::OK();  // another thread doubled first
  if (d->depth >= params_.max_depth) {
    return Status::OutOfSpace("reh: directory at max_depth " + std::to_string(params_.max_depth) +
                              " and a bucket of that depth is full");
  }
  PMHASH_RETURN_IF_ERROR(CheckDirectoryBudget(d->depth + 1, "a full bucket of depth " +
                                                                std::to_string(d->depth)));
  auto nd = std::make_unique<Directory>();
  nd->depth = d->depth + 1;
  nd->entries = HugeArray<std::atomic<Meta*>>(nd->size());
  if (!nd->entries) return Status::OutOfMemory("reh: directory doubling");
  for (size_t i = 0; i < d->size(); i++) {
    Meta* m = d->entries[i].load(std::memory_order_relaxed);
    new (&nd->entries[2 * i]) std::atomic<Meta*>(m);
    new (&nd->entries[2 * i + 1]) std::atomic<Meta*>(m);
  }
  dir_.store(nd.get(), std::memory_order_release);
  dirs_.push_back(std::move(nd));  // the old one stays allocated until Close (see layout note)
  doublings_.fetch_add(1, std::memory_order_relaxed);
  resize_log_.Record(started);
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
template <class Take, class Done>
void Reh<P, R>::WalkLiveSlots(Take&& take, Done&& bucket_done) const {
  // Walk the hash space in prefix order: lock the bucket covering `cursor`, take its pairs, move
  // the cursor past its range. Splits only cut ranges and never move a key out of the range of
  // its hash, so a key present for the whole walk is visited exactly once.
  for (uint64_t cursor = 0;;) {
    const Meta* m = LockBucket(cursor);
    const uint32_t shift = 64 - m->depth();
    const bool last = (cursor >> shift) == (~uint64_t{0} >> shift);
    const PmBucket* b = Bucket(m);
    for (uint32_t c = m->bitmap.load(std::memory_order_relaxed); c; c &= c - 1) {
      take(b->slots[std::countr_zero(c)]);
    }
    m->lock.Unlock();
    bucket_done();
    if (last) break;
    cursor = ((cursor >> shift) + 1) << shift;
  }
}

template <pm::PersistPolicy P, bool R>
IndexStats Reh<P, R>::Stats() const {
  IndexStats s;
  this->FillCommonStats(&s);
  const Directory* d = dir_.load(std::memory_order_acquire);
  s.buckets = meta_count_.load(std::memory_order_acquire);
  s.capacity_slots = s.buckets * kSlots;
  s.load_factor = s.capacity_slots ? static_cast<double>(s.size) / s.capacity_slots : 0;
  s.pm_bytes = s.buckets * sizeof(PmBucket) + pm::kHeaderBytes + (R ? records_->pm_bytes() : 0);
  size_t dir_bytes = 0;
  {
    LockGuard<RwSpinLock> g(const_cast<RwSpinLock&>(dir_lock_));
    for (const auto& x : dirs_) dir_bytes += x->entries.bytes();
  }
  s.dram_bytes = s.buckets * sizeof(Meta) + dir_bytes + pool_->allocator().dram_bytes() +
                 (R ? records_->dram_bytes() : 0);
  s.global_depth = d->depth;
  if constexpr (R) records_->AddDetails(&s);
  return s;
}

// REQUIRES: no concurrent writers.
template <pm::PersistPolicy P, bool R>
Status Reh<P, R>::CheckInvariants() const {
  const index::InvariantFailure fail{kKindName};
  if constexpr (R) epoch_->Drain();  // reh-kv: retired records are back in the heap
  const Directory* d = dir_.load(std::memory_order_acquire);
  const uint32_t gd = d->depth;
  index::LiveKeys keys(records_.get(), hash_);  // (records_: null unless R)
  uint64_t i = 0, buckets = 0, live = 0;
  for (uint64_t off = pool_->root(0); off != 0; buckets++) {
    if (buckets > pool_->allocator().chunk_count()) return fail("bucket chain has a cycle");
    if (!pool_->allocator().IsUsed(off)) return fail("chain bucket not marked allocated");
    const PmBucket* b = pool_->template At<PmBucket>(off);
    const uint64_t hdr = b->header.load(std::memory_order_relaxed);
    const uint32_t ld = HeaderDepth(hdr);
    if (ld < 1 || ld > gd) return fail("local depth out of range at " + std::to_string(off));
    const uint64_t stride = uint64_t{1} << (gd - ld);
    if (i % stride != 0 || i + stride > d->size()) return fail("chain out of prefix order");
    const Meta* m = d->entries[i].load(std::memory_order_relaxed);
    if (m->bucket_offset() != off || m->depth() != ld) return fail("metadata/bucket mismatch");
    for (uint64_t e = i; e < i + stride; e++) {
      if (d->entries[e].load(std::memory_order_relaxed) != m) return fail("directory entry");
    }
    const uint64_t prefix = i >> (gd - ld);
    const uint16_t bitmap = m->bitmap.load(std::memory_order_relaxed);
    if (m->lock.IsLocked()) return fail("bucket lock held at rest");
    for (int j = 0; j < kSlots; j++) {
      const Key k = b->slots[j].key.load(std::memory_order_relaxed);
      const uint64_t kh = SlotHash(k);
      const bool valid = (kh >> (64 - ld)) == prefix;
      if (valid != static_cast<bool>((bitmap >> j) & 1)) return fail("bitmap disagrees with PM");
      if (!valid) continue;
      if (m->Fingerprint(j) != static_cast<uint8_t>(kh)) return fail("stale fingerprint");
      const uint64_t v = b->slots[j].value.load(std::memory_order_relaxed);
      if (std::string e = keys.Add(k, v, kh); !e.empty()) return fail(e);
      live++;
    }
    i += stride;
    off = HeaderOffset(hdr);
  }
  if (i != d->size()) return fail("chain does not cover the directory");
  if (buckets != meta_count_.load()) return fail("bucket count != metadata count");
  uint64_t chunks = buckets;
  if (std::string e = keys.Finish(&chunks); !e.empty()) return fail(e);
  if (std::string e = this->CheckAccounting(chunks, live); !e.empty()) return fail(e);
  return Status::OK();
}

PMHASH_PROBE_ENGINE_CALLS_WITH_FIND((template <pm::PersistPolicy P, bool R>), Reh<P, R>);

// Instantiated once, in the library (reh.cc); users of this header link to those
// instead of compiling the whole index again in every translation unit.
template <pm::PersistPolicy P>
using RehKv = Reh<P, true>;

PMHASH_ENGINE_INSTANTIATIONS(extern, Reh, false);
PMHASH_ENGINE_INSTANTIATIONS(extern, Reh, true);

}  // namespace pmhash::reh
