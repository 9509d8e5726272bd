// src/index/pea/pea.h — Pea Hash: a performant extendible adaptive hashing index: "pea" with
// 8 B inline items, "pea-kv" with variable-size keys and values, "pea-multi" with duplicate keys.
//
// Paper: Zhuoxuan Liu, Shimin Chen. "Pea Hash: A Performant Extendible Adaptive Hashing Index",
// Proc. ACM Manag. Data 1(1), 2023 (../shared/papers/pea-hash.txt), sections 3.1 to 3.4
// (duplicate keys, 3.3: pea-multi, below and in pea_multi.h).
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
//               2 = offset of the StashSid array, 4 = plain pea's live count + 1 written by
//               Close (0 = none; trusted only after a clean shutdown). Chunk size = segment size.
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
//       the directory, the StashSid array and the current directory region (pea-kv: and the
//       records of live slots, I9), or loaded from a clean Close's image (I14). Stash segments
//       are never freed (as in the paper); segments and directory regions of a crashed split or
//       expansion were never reachable and are free again.
//
//   I9  pea-kv (below): a record is durable (flushed and fenced) before the 8-byte store that
//       publishes it (the header word of an insert, the value word of an update), and is freed
//       only after the store that unpublishes it is durable (erase, update) and the epoch's
//       readers have left. Recovery marks exactly the records of live slots (I1) reachable.
//   I14 pea-kv and pea-multi, clean shutdown (src/pm/saved_state.h): Close frees what the epoch
//       retired and the retired directory regions, releases empty slabs, and saves the live
//       count and the record heap's (pea-kv) or value heap's (pea-multi) image beside the
//       allocator's bitmap. The next open checks the directory as the walk does (no stride to
//       repair: one refuses the image) and the loaded allocator against it: the directory
//       region, StashSid array, stash segments, segments, slabs and (pea-multi) redo logs each
//       named once and in use, nothing else used but the heap's large records; pea-kv's heap
//       record count must be the live count; pea-multi's redo logs must all be empty. It reads
//       no bucket, record or value node: what the walk's checks of them protected is bounded
//       where they are read (pea-kv: Records::Fits, as in turbo-kv; pea-multi: I15).
//   I15 pea-multi: every list a reader or writer follows is bounded as recovery checks it,
//       because after a loaded image no walk has: a reader's ReadList stops at a node outside
//       the heap or past the heap's length (a cycle); a writer follows only a CheckedNode
//       (aligned, header, geometry and values inside the heap, count <= capacity) at most as
//       many steps as the heap has chunks, and answers kCorruption before its first store
//       otherwise. A forged but bounded list can make answers wrong, never an access outside
//       the pool; CheckInvariants (`pmhash check`) walks every list and reports it.
//
// pea-kv (variable-size keys and values; not in the paper): the same engine with kRecords, as
// TurboHash's and REH's records (src/index/records.h). A slot holds
// [ hash(key):64 | record offset:64 ] and the record [ klen | vlen | key | value ] lives in the
// pool's record heap, whose slabs are chunks of the segments' allocator (one 512 KB segment
// chunk per slab by default, size classes up to 56 KiB; larger records take whole chunks).
// What changes:
//   * a slot's hash is its key word (splits and the invariant check read it; the fingerprint is
//     its low byte as before); two slots hold the same key iff their key words are equal and
//     their records' keys are;
//   * insert: the record is written, flushed and fenced (I9), then the slot and header exactly
//     as above (I2/I3): two fences per insert. The header store is the commit point, and the
//     header's line may be written back at any moment after it, before its own flush, so the
//     record cannot ride on that flush as the slot does;
//   * update: a new durable record, the 8-byte value store + persist (I4), then the old record
//     is retired through the epoch (an optimistic reader may be reading it);
//   * erase: the header store + persist (I4), then the record is retired;
//   * readers already hold an epoch guard (for segments); they compare a candidate's key bytes
//     before their version check, so that comparison never reads outside the pool whatever a
//     stale offset's header says (Records::KeyEquals);
//   * entry moving and splits copy the [hash | offset] words: records never move;
//   * recovery after a crash is no longer O(directory): it walks every live slot once,
//     validating its record (src/index/records.h: in the heap, lengths, its slab and slot, its
//     key's hash against the slot's) and marking it reachable, after the segments are marked.
//     That walk also counts Size(). After a clean Close the open loads the image instead (I14).
// The uint64 API of pea-kv stores 8-byte little-endian keys and values as records.
//
// pea-multi (paper 3.3, data-aware adaptive buckets; the same engine with kMulti, pea_multi.h):
// a multimap (MultiIndex in include/pmhash/index.h). Layout:
//   * bucket bitmap: k > 0 low zero bits then a one = slots 0..k-1 are (key, pointer) slots, the
//     others (key, value) slots whose live bit stays bit 1 + j (paper Figure 3(a)); a pointer
//     slot has a fingerprint like any slot and is live while it is in the prefix;
//   * a pointer names a list of value nodes in a record heap over the segments' chunk allocator
//     (src/pm/record_heap.h): a value buffer of type t = 2^t x 256 B (the paper's value segment
//     types: a slab of that class is a type-t value segment), 32 B header then the values:
//       [ key ][ count:20 | next node / 16 : 44 ][ capacity:32 | type:8 ][ 0 ][ v0 ] .. [ v(cap-1) ]
//     and, once the largest buffer type is full, chain nodes of one whole chunk (the paper's
//     type 11, 512 KB) put in front of it: head -> newest chain node -> ... -> the full buffer;
//   * redo logs (root 3, kMultiLogs x 1088 B): (offset, value) pairs of 8-byte stores.
// Operations:
//   * Insert(k, v): a pointer slot of k among the candidate buckets -> append v to its list
//     (value store, persist; count store, persist: two fences); else a (key, value) slot as in
//     pea (one fence in line 0), in the candidate that already holds one of k's (key, value)
//     slots if it has room, else in the emptier one. All candidates full -> compaction of each candidate in probe
//     order: the keys with two or more entries in the bucket (the pending one counts) move into
//     new buffers, and the bucket is rewritten with their pointer slots in front (paper: "bucket
//     compaction"; pointer slots of emptied lists are dropped). Only when no candidate frees a
//     slot is the segment full under its strategy: transition or split as in pea.
//   * Full buffer of type t: the values are copied into a type t + 1 buffer (up to the largest
//     type a slab holds: 32 KiB with 512 KB segments), then a chain node goes in front.
//   * Erase(k, v): a (key, value) slot -> its bit (one store); in a list: the last value of a
//     node -> its count; else the node is copied without v (copy on write) and relinked; a node
//     after the head that empties is unlinked. EraseAll(k): every bit of k's (key, value) slots
//     and every head's state (count 0, no next) of k's lists, in one redo-logged step when that is
//     more than one 8-byte store. Erase(k) of the uint64 API is EraseAll.
//   * FindAll: the optimistic read of pea over every candidate, collecting every (key, value)
//     match and the heads of the pointer slots; the bucket versions are validated before a head
//     is followed and again after the values are copied (I13). Find (one value) is pea's
//     Search: the first slot holding k in the first candidate that has k; a (key, value) slot is
//     the answer (so a unique key costs what it costs in pea: measured 0.95-1.00x pea's find+
//     and find-, against 0.69x through FindAll's path), a pointer slot sends it to FindAll's
//     path, stopping at the list's first value.
//   * A key's slots are kept in one bucket where there is room (insert and split above), so that
//     EraseAll is mostly one header store. It is not an invariant (a full bucket sends the next
//     entry to another candidate), so each segment has a DRAM flag, SegLocks::together: set for
//     a new pool's segments and by a split that kept every key together, cleared (under the
//     bucket locks, before the unlock that publishes the insert) by an insert that spills a key
//     into a second bucket. While it is set, FindAll and EraseAll stop at the first candidate
//     holding the key, as pea's Find and Erase do; a reader that raced with the clearing insert
//     fails its version validation and retries. After a reopen the flag is 0 (unknown: every
//     candidate is read) until a split rewrites the segment. CheckInvariants checks it.
//   * Splits copy pointer slots as (key, offset) words, pointer slots first so that each new
//     bucket gets them as its prefix, then each key's (key, value) slots together into one
//     bucket where it has room; lists never move. Only a slot whose key may have placed slots
//     looks for them: every slot of a segment not flagged `together`, else a pointer slot or
//     one whose key an earlier slot of its bucket holds (fingerprint, then key).
//   * adaptive_buckets = 0 (pool property): the paper's baseline ("Dash with value buffers",
//     section 4): every key is a (key, pointer) slot from its first value, to a buffer of 4 values
//     that doubles; no compaction.
// Invariants:
//   I10 A compaction's new buffers are durable (flush, one fence) before the redo log that
//       rewrites the bucket commits; the bucket's new image is one logged step (I12).
//   I11 A list changes by single 8-byte stores, each after what it publishes is durable: an
//       appended value before the count that covers it; a grown buffer, chain node or copied
//       node before the pointer (slot word or previous node's state) that names it; an erased
//       value's node is retired only after the store that unlinks it is durable.
//   I12 Redo log: the (offset, value) pairs are durable before the store of their number n (the
//       commit); they are applied and flushed, then n is cleared and persisted, before the
//       writer's bucket locks are released. Recovery applies every committed log (offsets
//       validated to lie in the heap) before it reads a bucket.
//   I13 Nothing of the value heap is allocated but what a live pointer slot reaches: recovery
//       marks each list node (validated: in the heap, a known type and capacity, its slab and
//       slot, the slot's key, count <= capacity; a node reached twice, e.g. a cycle, is
//       corruption) and counts the pairs for Size(). Readers hold an epoch guard, so a node they
//       may still read is freed only after they leave.
//
// Where the paper is vague or wrong, and what we chose:
//   * Durable erase is not described: bitmap clear + one flush (I4).
//   * "Recovery in ms" has no live-key count to rebuild: Size() after a crash is computed lazily
//     by the first Size()/Stats() call (one scan of the bucket headers, exact when no writer runs
//     concurrently with that first call); recovery itself is O(directory + StashSid). After a
//     clean shutdown there is nothing to scan: Close saves the count in root 4 before the pool's
//     clean mark, and an open that finds the mark takes it (a crash after the save leaves no mark,
//     so a stale count is never used; a hostile one is caught by CheckInvariants' recount).
//     pea-kv and pea-multi count at open after a crash (their recovery walks every live slot)
//     and load the count after a clean Close (I14).
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
#include <unordered_map>
#include <unordered_set>
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
#include "pm/slot.h"
#include "pmhash/index.h"

#include "index/pea/pea_layout.h"

namespace pmhash::pea {

template <pm::PersistPolicy P, bool kRecords = false, bool kMulti = false>
class Pea : public index::EngineBase<Pea<P, kRecords, kMulti>, P, Config> {
  PMHASH_ENGINE(Pea, P, Config, DescriptorFor<kRecords, kMulti>);  // Open, Find, ..., ~Pea()

 public:
  uint64_t Size() const;

  // Variable-size API (BytesIndex, src/index/records.h). NotSupported on "pea" (inline items).
  PMHASH_PROBE_RECORDS_API(kRecords);

  // Multi-value API (MultiIndex, include/pmhash/index.h; pea-multi only): pea_multi.h.
  bool SupportsMulti() const requires kMulti { return true; }
  Status FindAll(Key k, std::vector<Value>* values) const requires kMulti;
  Status ForEachValue(Key k, const std::function<void(Value)>& fn) const requires kMulti;
  uint64_t Count(Key k) const requires kMulti;
  Status Erase(Key k, Value v) requires kMulti;
  Status EraseAll(Key k) requires kMulti;

  // For tests and tools.
  uint32_t global_depth() const { return dir_.load(std::memory_order_acquire)->depth; }
  // Strategy and local depth of the segment holding key k (quiescent use).
  uint32_t StrategyOf(Key k) const;
  uint32_t LocalDepthOf(Key k) const;
  // Which root (0 or 1) holds the current directory descriptor.
  int DirectoryRoot() const { return dir_.load(std::memory_order_acquire)->root; }
  static constexpr int kSavedSizeRoot = 4;  // plain pea's live count + 1, saved by Close

 private:
  using WriteMode = index::WriteMode;

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
    bool ptr = false;  // pea-multi: a (key, pointer) slot
    // pea-multi: the key may have slots placed before this one (Place keeps them together).
    bool shared = false;
  };
  struct Leaf {
    uint64_t prefix;
    uint32_t depth;
    uint32_t strategy;
    uint64_t sid = 0;
    std::unique_ptr<BucketImage[]> img;
    BucketImage stash[2];
    bool together = false;  // pea-multi: Place kept every key's slots in one bucket
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

  // A key as the search compares it: the inline key, or hash + bytes (pea-kv; src/index/records.h).
  using Probe = index::KeyProbe;
  using Keys = index::ProbeKeys<kRecords>;
  Probe MakeProbe(Key k) const { return Keys::Make(hash_, k); }
  Probe MakeProbe(std::string_view s) const { return Keys::Make(hash_, s); }
  // Splits and the invariant check re-hash a slot's key word (pea-kv: the word is the hash).
  uint64_t SlotHash(uint64_t key_word) const { return Keys::SlotHash(hash_, key_word); }
  EpochManager& RecordEpoch() const { return epoch_; }  // ProbeCalls::FindBytes
  // Slot of key p in bucket b (fingerprint-filtered), or -1. pea-multi: its first slot holding
  // k, a (key, pointer) slot before any (key, value) one.
  PMHASH_ALWAYS_INLINE int SearchBucket(const PmBucket* b, const Probe& p) const;
  // REQUIRES: b's lock held, b not full. Persists as described in I2/I3.
  void InsertIntoBucket(PmBucket* b, Key k, Value v, uint8_t f);
  static void PrefetchBucket(const PmBucket* b) {
    const char* p = reinterpret_cast<const char*>(b);
    for (int line = 0; line < 4; line++) PrefetchLine(p + 64 * line);  // (kept: attributes.h)
  }
  // The version of segment lock L, taken while directory d still maps entry i to e (the seqlock
  // read start of Find and of a writer's locate). False, to retry, while a resize holds the
  // segment or once the directory or the entry has moved on.
  bool SnapshotSegment(const SegLocks& L, const Directory* d, uint64_t i, uint64_t e,
                       uint32_t* sv, Backoff* backoff) const {
    *sv = L.seg.Snapshot();
    if (VersionLock::IsLockedVersion(*sv)) {
      backoff->Pause();
      return false;
    }
    return d->entries[i].load(std::memory_order_acquire) == e &&
           dir_.load(std::memory_order_acquire) == d;
  }
  // pea-multi: the number k of (key, pointer) slots at the front of a bucket (paper 3.3: k low
  // zero bits then a one); 0 in pea and pea-kv, whose bit 0 is always set.
  static int PtrSlots(uint64_t w0) {
    if constexpr (!kMulti) {
      return 0;
    } else {
      const uint32_t low = static_cast<uint32_t>(w0) & 0xFFFF;
      return low ? std::countr_zero(low) : 0;
    }
  }
  // Live (key, value) slots: bit 1 + j of the bitmap, for slots j >= PtrSlots (the marker bit
  // of k > 0 sits where slot k - 1's bit would be).
  static uint32_t KvOcc(uint64_t w0) {
    const uint32_t occ = static_cast<uint32_t>(w0 >> 1) & kOccMask;
    return kMulti ? occ & ~((1u << PtrSlots(w0)) - 1) : occ;
  }
  static uint32_t Occupancy(const PmBucket* b) {
    return KvOcc(b->hdr[0].load(std::memory_order_relaxed));
  }
  // Slots in use: pointer slots and live (key, value) slots.
  static int Used(const PmBucket* b) {
    const uint64_t w0 = b->hdr[0].load(std::memory_order_relaxed);
    return PtrSlots(w0) + std::popcount(KvOcc(w0));
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
    PmBucket* hit;  // bucket holding the key, or nullptr (always nullptr in pea-multi)
    int j;          // its slot
  };
  // Retries until the key's candidate buckets are locked under an unchanged directory entry and
  // segment version, then searches them. REQUIRES: an epoch guard.
  Locked LockAndLocate(const Probe& p) PMHASH_NO_THREAD_SAFETY_ANALYSIS;
  // Releases the bucket locks of `w`, bumping the version of those in `modified`.
  void Unlock(const Locked& w, uint32_t modified) PMHASH_NO_THREAD_SAFETY_ANALYSIS;
  // Optimistic read of p's slot: true and its value word (pea-kv: the record offset) if p is
  // present. pea-multi: *list is set when the slot is a (key, pointer) one (the word is then
  // the head of k's value list, to be read as SearchAll reads it). REQUIRES: an epoch guard
  // (pea-kv: held while the caller uses the record).
  PMHASH_ALWAYS_INLINE bool Search(const Probe& p, uint64_t* word, bool* list = nullptr) const;
  // pea-multi's Find: one of p's values. The first slot holding the key, as pea's Search reads
  // it: a (key, value) slot is the answer SearchAll would give (it takes the first candidate
  // holding the key, and there the first (key, value) slot before any list), so a unique key
  // costs what it costs in pea; a pointer slot: the list's first value, through SearchAll (I13).
  // *v is written only when the key is found. REQUIRES: an epoch guard.
  PMHASH_ALWAYS_INLINE Status FindOne(const Probe& p, Value* v) const requires kMulti;
  // FindOne's list case. (Not constrained: clang instantiates FindOne's body in pea's explicit
  // instantiation, where a call to a constrained FindInList would not compile.)
  PMHASH_COLD Status FindInList(Key k, Value* v) const;
  // Batched finds (src/index/batch.h; pea and pea-multi: pea-kv copies records): the directory
  // entry, then the first bucket whole and the second one's header, as Search asks for them; one
  // epoch guard per 256 keys (kBatchChunk).
  static constexpr int kBatchStages = kRecords ? 0 : 2;
  template <int kStage>
  PMHASH_ALWAYS_INLINE void BatchPrefetch(const Probe& p) const {
    const Directory* d = dir_.load(std::memory_order_acquire);
    const std::atomic<uint64_t>& entry = d->entries[DirIndex(p.h, d->depth)];
    if constexpr (kStage == 0) {
      PrefetchLine(&entry);
    } else {
      const uint64_t e = entry.load(std::memory_order_acquire);
      const uint32_t b1 = Bucket1(p.h);
      PrefetchBucket(BucketAt(EntrySid(e), b1));
      if (EntryStrategy(e) >= kTwoChoice) PrefetchLine(BucketAt(EntrySid(e), Bucket2(p.h, b1)));
    }
  }
  EpochManager::Guard BatchGuard() const { return EpochManager::Guard(epoch_); }
  PMHASH_ALWAYS_INLINE Status BatchFind(const Probe& p, Value* v) const {
    if constexpr (kMulti) {
      return FindOne(p, v);
    } else {
      return Search(p, v) ? Status::OK() : Status::NotFound();
    }
  }
  // The value to store: `value` (pea) or a new record of p.s and value_bytes (pea-kv).
  PMHASH_ALWAYS_INLINE Status Write(const Probe& p, std::string_view value_bytes, Value value,
                                    WriteMode mode);
  PMHASH_ALWAYS_INLINE Status EraseProbe(const Probe& p);
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
             BucketImage* stash, bool* together) const;
  Status Plan(std::vector<Item>&& items, uint64_t prefix, uint32_t depth,
              std::vector<Leaf>* leaves) const;

  // Locks a segment for a structural read (ForEach): returns its entry.
  uint64_t LockSegmentFor(uint64_t h) const;
  // take(slot) for every live slot of the segment of entry e. REQUIRES: its locks held.
  template <class Take>
  void ForEachLiveSlot(uint64_t e, Take&& take) const;
  // The segments in prefix order, each locked while take(slot) runs for its live slots; then
  // segment_done() runs outside the locks. A key present for the whole walk is taken once.
  template <class Take, class Done>
  void WalkLiveSlots(Take&& take, Done&& segment_done) const;
  template <class Fn>
  void ForEachSegment(const Directory* d, Fn&& fn) const;  // strided walk: fn(first, entry)

  Status Create();
  // Recover and LoadState: the directory and the segments, checked; name(offset, chunks) takes
  // each range. Then the DRAM state.
  template <class Name>
  Status LoadDirectory(Name&& name, bool repair);
  Status Recover();
  Status Quiesce();  // Close(): plain pea saves its live count (root kSavedSizeRoot)
  // pea-kv and pea-multi: a clean Close's image, loaded by the next open instead of the walk
  // (I14).
  void SaveState(pm::StateWriter& w) const requires(kRecords || kMulti);
  Status LoadState(pm::StateReader& r) requires(kRecords || kMulti);
  Status RecoverRecords();
  uint64_t CountLive() const;

  // pea-multi (pea_multi.h).
  ValueNode* Node(uint64_t off) const { return pool_->template At<ValueNode>(off); }
  static std::atomic<uint64_t>* NodeValues(ValueNode* n) {
    return reinterpret_cast<std::atomic<uint64_t>*>(n + 1);
  }
  uint64_t NodeBytes(uint64_t geom) const {
    return NodeType(geom) == kChainType ? seg_bytes_ : sizeof(ValueNode) + 8 * NodeCapacity(geom);
  }
  // Capacity of a value buffer of `type` (0..max_buffer_type_).
  uint32_t BufferCapacity(uint32_t type) const;
  // A new node of `type` holding vals[0..n) (n <= its capacity), written and flushed, not fenced.
  Result<uint64_t> NewNode(Key k, uint32_t type, const Value* vals, uint64_t n, uint64_t next);
  // Appends every value of the list at `head` to *out (push_back; lock-free readers: bounded,
  // offsets checked).
  template <class Out>
  bool ReadList(uint64_t head, Out* out) const;
  // True if geom is a node's as NewNode writes them: a known type and its capacity.
  bool GeometryOk(uint64_t geom) const {
    const uint32_t type = NodeType(geom), cap = NodeCapacity(geom);
    return type == kChainType ? cap == chain_capacity_
                              : type <= max_buffer_type_ && cap == BufferCapacity(type);
  }
  // The node at `off` if a writer may follow it (I15): aligned, its header, geometry and every
  // value slot inside the heap, its count within its capacity; else nullptr. A walked pool never
  // has another (recovery checks each node, I13); a loaded image's lists are not walked (I14).
  ValueNode* CheckedNode(uint64_t off) const {
    if (!values_->PlausibleRecord(off, sizeof(ValueNode))) return nullptr;
    ValueNode* n = Node(off);
    const uint64_t geom = n->geom;
    if (!GeometryOk(geom) || !values_->Contains(off, NodeBytes(geom)) ||
        NodeCount(n->state.load(std::memory_order_relaxed)) > NodeCapacity(geom)) {
      return nullptr;
    }
    return n;
  }
  // The number of values in the list at `head` into *pairs; false if a node is not a
  // CheckedNode or the list is longer than the heap could hold (a cycle). REQUIRES: the lock of
  // its slot's bucket.
  bool ListPairs(uint64_t head, uint64_t* pairs) const {
    uint64_t steps = 0;
    for (uint64_t off = head; off != 0; steps++) {
      const ValueNode* n = CheckedNode(off);
      if (n == nullptr || steps > chunk_count_) return false;
      const uint64_t st = n->state.load(std::memory_order_relaxed);
      *pairs += NodeCount(st);
      off = NodeNext(st);
    }
    return true;
  }
  void RetireList(uint64_t head, bool keep_head);
  Status MultiWrite(const Probe& p, Value v, WriteMode mode);
  // REQUIRES: the bucket lock of the list's slot held.
  Status AppendValue(std::atomic<uint64_t>* slot_word, Key k, Value v);
  // Data-aware compaction of a full bucket (paper 3.3). REQUIRES: its lock held. *freed: a slot
  // became free; *inserted: (x, v) went into a new buffer with x's other values.
  Status Compact(PmBucket* b, Key x, Value v, bool* freed, bool* inserted);
  // Word stores that must land together, at most a redo log's worth (kLogWords: enough for
  // every header and pointer slot of four candidate buckets), kept on the stack.
  class WordStores {
   public:
    struct Store {  // an aggregate: the array below is not zeroed on every call
      std::atomic<uint64_t>* first;
      uint64_t second;
    };
    void push_back(Store s) { s_[n_++] = s; }  // REQUIRES: size() < kLogWords
    size_t size() const { return n_; }
    bool empty() const { return n_ == 0; }
    const Store& operator[](size_t i) const { return s_[i]; }
    const Store* begin() const { return s_.data(); }
    const Store* end() const { return s_.data() + n_; }

   private:
    std::array<Store, kLogWords> s_;
    size_t n_ = 0;
  };
  static_assert(kLogWords >= 4 * (1 + kSlots), "EraseAll's worst case fits one log");
  // The stores land together: one 8-byte store and a persist, or a redo log (MultiLog).
  void CommitStores(const WordStores& stores);
  Status EraseAllProbe(const Probe& p);
  // Calls fn(slot index, is pointer slot) for every live slot of bucket b holding key p.k.
  template <class Fn>
  void ForEachMatch(const PmBucket* b, const Probe& p, Fn&& fn) const;
  // Every value of k into *out (clear, push_back, empty: a std::vector, or FirstValue for Find).
  template <class Out>
  Status SearchAll(Key k, Out* out) const;
  struct FirstValue {
    Value value = 0;
    bool has = false;
    void clear() { has = false; }
    void push_back(Value v) {
      if (!has) value = v;
      has = true;
    }
    bool empty() const { return !has; }
  };
  Status CreateMulti();
  Status RecoverMulti();
  std::string CheckList(uint64_t head, Key k, uint64_t* pairs) const;

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
  std::unique_ptr<index::Records> records_;  // pea-kv only (src/index/records.h)
  // pea-multi only: value buffers and chain nodes; the redo logs (root 3) and the free ones.
  std::unique_ptr<pm::RecordHeap> values_;
  MultiLog* logs_ = nullptr;
  uint64_t logs_offset_ = 0;
  std::atomic<uint64_t> free_logs_{~uint64_t{0}};
  uint32_t max_buffer_type_ = 0;
  uint32_t chain_capacity_ = 0;
  std::atomic<uint64_t> compactions_{0};
  std::atomic<uint64_t> compactions_empty_{0};  // compactions that freed nothing
  std::atomic<uint64_t> buffer_grows_{0};
  std::atomic<uint64_t> chain_nodes_{0};
  std::atomic<uint64_t> logged_commits_{0};
  // After records_: its destructor runs the frees still pending, into them.
  mutable EpochManager epoch_;

  mutable std::atomic<bool> size_known_{false};
  mutable std::atomic<int64_t> size_base_{0};
  mutable SpinLock size_mu_;
  std::atomic<uint64_t> to_two_choice_{0};
  std::atomic<uint64_t> to_stash_{0};
  // Coverage figures (the crash suite asserts its workloads reach these paths).
  std::atomic<uint64_t> max_stride_{0};           // widest directory stride written
  std::atomic<uint64_t> stash_splits_{0};         // splits of a segment in the stash strategy
  std::atomic<uint64_t> stale_stash_cleared_{0};  // stash buckets of a reused id, cleared (I5)
  std::atomic<uint64_t> stash_segments_{0};
};

// ============================================================================================
// Implementation
// ============================================================================================

template <pm::PersistPolicy P, bool R, bool M>
Pea<P, R, M>::Pea(std::unique_ptr<pm::Pool> pool, const Config& config)
    : Base(std::move(pool), config) {
  epoch_.set_reclaim_batch(config.reclaim_batch);
  heap_offset_ = pool_->allocator().heap_offset();
  heap_ = pool_->base() + heap_offset_;
  seg_bytes_ = pool_->allocator().chunk_size();
  chunk_count_ = pool_->allocator().chunk_count();
  bmask_ = params_.segment_buckets - 1;
  first_strategy_ = FirstStrategy(static_cast<PeaStrategies>(params_.strategies));
  last_strategy_ = LastStrategy(static_cast<PeaStrategies>(params_.strategies));
  if constexpr (R) {
    records_ = std::make_unique<index::Records>(*pool_, epoch_, config.max_record_bytes,
                                                kKindName);
  }
  if constexpr (M) {
    values_ = std::make_unique<pm::RecordHeap>(pool_->base(), &pool_->allocator(), &epoch_);
    // Buffer types while a buffer fits a slab class (512 KB segments: 256 B .. 32 KiB), then
    // the chain of whole chunks.
    max_buffer_type_ = 0;
    while (max_buffer_type_ < 10 &&
           sizeof(ValueNode) + 8ull * BufferCapacity(max_buffer_type_ + 1) <=
               values_->max_slot_bytes()) {
      max_buffer_type_++;
    }
    chain_capacity_ = static_cast<uint32_t>(
        std::min<uint64_t>((seg_bytes_ - sizeof(ValueNode)) / 8, kMaxNodeValues));
  }
}

template <pm::PersistPolicy P, bool R, bool M>
int Pea<P, R, M>::SearchBucket(const PmBucket* b, const Probe& p) const {
  const uint64_t w0 = b->hdr[0].load(std::memory_order_relaxed);
  const uint64_t w1 = b->hdr[1].load(std::memory_order_relaxed);
  // pea-multi: the pointer slots too (a compacted key); pea, pea-kv: no pointer slots.
  const uint32_t occ = KvOcc(w0) | ((1u << PtrSlots(w0)) - 1);
  const __m128i tags = _mm_set_epi64x(static_cast<long long>(w1), static_cast<long long>(w0));
  for (uint32_t m = (Match16(tags, Fp(p.h)) >> 2) & occ; m; m &= m - 1) {
    const int j = std::countr_zero(m);
    if (Keys::Matches(records_.get(), b->slots[j], p)) return j;
  }
  if ((occ >> kFpSlots) & 1) {
    if (Keys::Matches(records_.get(), b->slots[kFpSlots], p)) return kFpSlots;
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

template <pm::PersistPolicy P, bool R, bool M>
void Pea<P, R, M>::InsertIntoBucket(PmBucket* b, Key k, Value v, uint8_t f) {
  uint64_t w[2] = {b->hdr[0].load(std::memory_order_relaxed),
                   b->hdr[1].load(std::memory_order_relaxed)};
  const uint32_t occ = KvOcc(w[0]);
  // pea-multi: the pointer slots are not free, and a bucket that has some keeps its marker bit
  // instead of the key/value format bit; entry moving is off there (paper 3.3: line 0 holds
  // pointers).
  const int nptr = PtrSlots(w[0]);
  const uint32_t free_slots = ~occ & kOccMask & ~((1u << nptr) - 1);
  const uint64_t format = nptr > 0 ? 0 : kKvFormat;
  // Release on both words (a plain store on x86): a lock-free reader may load the old key and
  // then this value, and must then see the record the value names (pea-kv).
  auto put = [&](int j, Key key, Value val) {
    b->slots[j].value.store(val, std::memory_order_release);
    b->slots[j].key.store(key, std::memory_order_release);
  };
  // Fast case: a free slot in line 0, persisted together with the header (I2).
  int j = -1;
  if (free_slots & kLine0Slots) {
    j = std::countr_zero(free_slots & kLine0Slots);
  } else if (!params_.entry_moving || nptr > 0) {
    j = std::countr_zero(free_slots);
  }
  if (j >= 0 && SlotLine(j) == 0) {
    put(j, k, v);
    // I2': with torn lines the slot must be durable before the header word names it.
    if (params_.tear_safe) persist_.Persist(&b->slots[j], sizeof(PmSlot));
    w[0] |= format | (uint64_t{1} << (1 + j));
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
  w[0] = (w[0] | format | (uint64_t{targets} << 1)) & ~(uint64_t{moved_from} << 1);
  b->hdr[1].store(w[1], std::memory_order_relaxed);
  b->hdr[0].store(w[0], std::memory_order_release);
  persist_.Persist(b, 64);
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::Find(Key k, Value* out) const {
  if constexpr (M) {
    EpochManager::Guard guard(epoch_);
    return FindOne(MakeProbe(k), out);
  } else if constexpr (R) {
    return index::FindU64AsBytes(*this, k, out);
  } else {
    EpochManager::Guard guard(epoch_);
    return Search(MakeProbe(k), out) ? Status::OK() : Status::NotFound();
  }
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::FindOne(const Probe& p, Value* v) const requires M {
  uint64_t word = 0;
  bool list = false;
  if (!Search(p, &word, &list)) return Status::NotFound();
  if (!list) {
    *v = word;
    return Status::OK();
  }
  return FindInList(p.k, v);
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::FindInList(Key k, Value* v) const {
  FirstValue first;  // (SearchAll's own epoch guard nests in the caller's)
  PMHASH_RETURN_IF_ERROR(SearchAll(k, &first));
  *v = first.value;
  return Status::OK();
}

template <pm::PersistPolicy P, bool R, bool M>
bool Pea<P, R, M>::Search(const Probe& p, uint64_t* word, bool* list) const {
  const uint64_t h = p.h;
  const uint32_t b1 = Bucket1(h);
  Backoff backoff;  // (a writer or a resize holds a lock we wait on)
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
    uint32_t sv;
    if (!SnapshotSegment(L, d, i, e, &sv, &backoff)) continue;
    const VersionLock& l1 = L.bucket[b1 & (kBucketLocks - 1)];
    const uint32_t v1 = l1.Snapshot();
    if (VersionLock::IsLockedVersion(v1)) {
      backoff.Pause();
      continue;
    }
    const PmBucket* hit = nullptr;
    int j = SearchBucket(B1, p);
    if (j >= 0) hit = B1;
    bool consistent = true;
    if (!hit && st >= kTwoChoice) {
      const uint32_t b2 = Bucket2(h, b1);
      const PmBucket* B2 = BucketAt(sid, b2);
      const VersionLock& l2 = L.bucket[b2 & (kBucketLocks - 1)];
      const uint32_t v2 = l2.Snapshot();
      if (VersionLock::IsLockedVersion(v2)) {
        backoff.Pause();
        continue;
      }
      j = SearchBucket(B2, p);
      if (j >= 0) hit = B2;
      if (!hit && st == kStash) {
        const uint32_t s0 = L.bucket[0].Snapshot();
        const uint32_t s1 = L.bucket[1].Snapshot();
        if (VersionLock::IsLockedVersion(s0 | s1)) {
          backoff.Pause();
          continue;
        }
        for (int s = 0; s < 2 && !hit; s++) {
          const PmBucket* S = StashBucket(sid, s);
          j = SearchBucket(S, p);
          if (j >= 0) hit = S;
        }
        consistent = L.bucket[0].Validate(s0) && L.bucket[1].Validate(s1);
      }
      consistent = consistent && l2.Validate(v2);
    }
    const uint64_t val =
        hit ? hit->slots[j].value.load(R || M ? std::memory_order_acquire
                                              : std::memory_order_relaxed)
            : 0;
    // (The header is read again; the versions validated below cover both reads.)
    const bool is_list = M && hit && j < PtrSlots(hit->hdr[0].load(std::memory_order_relaxed));
    if (!consistent || !l1.Validate(v1) || !L.seg.Validate(sv)) {
      continue;
    }
    if (!hit) return false;
    *word = val;
    if constexpr (M) *list = is_list;
    return true;
  }
}

template <pm::PersistPolicy P, bool R, bool M>
typename Pea<P, R, M>::Locked Pea<P, R, M>::LockAndLocate(const Probe& p) {
  const uint64_t h = p.h;
  const uint32_t b1 = Bucket1(h);
  Backoff backoff;  // (a writer or a resize holds a lock we wait on)
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
    uint32_t sv;
    if (!SnapshotSegment(L, d, i, e, &sv, &backoff)) continue;
    uint32_t mask = 1u << (b1 & (kBucketLocks - 1));
    if (st >= kTwoChoice) mask |= 1u << (b2 & (kBucketLocks - 1));
    if (st == kStash) mask |= 3u;
    for (uint32_t m = mask; m; m &= m - 1) L.bucket[std::countr_zero(m)].Lock();
    if (L.seg.Snapshot() != sv) {
      for (uint32_t m = mask; m; m &= m - 1) L.bucket[std::countr_zero(m)].UnlockUnchanged();
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
    for (int c = 0; c < nc && !hit && !M; c++) {  // pea-multi scans with ForEachMatch instead
      j = SearchBucket(cand[c], p);
      if (j >= 0) hit = cand[c];
    }
    return Locked{d, e, st, &L, mask, {cand[0], cand[1], cand[2], cand[3]}, nc, hit, j};
  }
}

template <pm::PersistPolicy P, bool R, bool M>
void Pea<P, R, M>::Unlock(const Locked& w, uint32_t modified) {
  for (uint32_t m = w.mask; m; m &= m - 1) {
    const int x = std::countr_zero(m);
    if (modified & (1u << x)) {
      w.L->bucket[x].Unlock();
    } else {
      w.L->bucket[x].UnlockUnchanged();
    }
  }
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::Write(const Probe& p, std::string_view value_bytes, Value value,
                        WriteMode mode) {
  if constexpr (M) return MultiWrite(p, value, mode);
  EpochManager::Guard guard(epoch_);
  // The value word to store: the value, or a new record's offset, durable before the store that
  // publishes it (I9).
  auto value_word = [&](uint64_t* w) {
    return index::ValueWord<R>(records_.get(), p.s, value_bytes, value, persist_, w);
  };
  for (;;) {
    const Locked w = LockAndLocate(p);
    PmBucket* const hit = w.hit;
    const int j = w.j;
    const uint32_t st = w.st;
    PmBucket* const B1 = w.cand[0];
    uint32_t modified = 0;  // lock bits whose buckets changed
    Status result = Status::OK();
    bool done = true;
    uint64_t retired = 0;  // pea-kv: the record an update replaced
    if (hit) {
      uint64_t word = 0;
      if (mode == WriteMode::kInsert) {
        result = Status::Exists();
      } else if (result = value_word(&word); result.ok()) {
        retired = hit->slots[j].value.load(std::memory_order_relaxed);
        hit->slots[j].value.store(word, std::memory_order_release);  // I4
        persist_.Persist(&hit->slots[j].value, sizeof(Value));
        modified = w.mask;
      }
    } else if (mode == WriteMode::kUpdate) {
      result = Status::NotFound();
    } else {
      // Target: b1 (single); the emptier of b1/b2 (balanced 2-choice); else the emptier stash.
      PmBucket* tgt = nullptr;
      const int o1 = Used(B1);
      if (st == kSingleHash) {
        if (o1 < kSlots) tgt = B1;
      } else {
        const int o2 = Used(w.cand[1]);
        if (o1 < kSlots || o2 < kSlots) tgt = o2 < o1 ? w.cand[1] : B1;
        if (!tgt && st == kStash) {
          const int s0 = Used(w.cand[2]);
          const int s1 = Used(w.cand[3]);
          if (s0 < kSlots || s1 < kSlots) tgt = s1 < s0 ? w.cand[3] : w.cand[2];
        }
      }
      uint64_t word = 0;
      if (!tgt) {
        done = false;
      } else if (result = value_word(&word); result.ok()) {
        InsertIntoBucket(tgt, Keys::KeyWord(p), word, Fp(p.h));
        modified = w.mask;
        size_.Add(1);
      }
    }
    Unlock(w, modified);
    if constexpr (R) {
      if (retired != 0) records_->Retire(retired);
    }
    if (done) return result;
    PMHASH_RETURN_IF_ERROR(SlowPath(p.h, w.e, w.d));
  }
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::EraseProbe(const Probe& p) {
  if constexpr (M) return EraseAllProbe(p);
  EpochManager::Guard guard(epoch_);
  const Locked w = LockAndLocate(p);
  PmBucket* const hit = w.hit;
  const uint64_t record = hit ? hit->slots[w.j].value.load(std::memory_order_relaxed) : 0;
  if (hit) {
    // I4: one 8-byte store clears the bit; one flush + fence makes the erase durable.
    const uint64_t w0 = hit->hdr[0].load(std::memory_order_relaxed);
    hit->hdr[0].store(w0 & ~(uint64_t{1} << (1 + w.j)), std::memory_order_release);
    persist_.Persist(hit, 64);
    size_.Add(-1);
  }
  Unlock(w, hit ? w.mask : 0);
  if constexpr (R) {
    if (hit) records_->Retire(record);  // pea-kv: durably unreachable now
  }
  return hit ? Status::OK() : Status::NotFound();
}

}  // namespace pmhash::pea

#include "index/pea/pea_inspect.h"
#include "index/pea/pea_multi.h"
#include "index/pea/pea_recovery.h"
#include "index/pea/pea_resize.h"

namespace pmhash::pea {

PMHASH_PROBE_ENGINE_CALLS((template <pm::PersistPolicy P, bool R, bool M>), Pea<P, R, M>);

// Instantiated once, in the library (pea.cc); users of this header link to those
// instead of compiling the whole index again in every translation unit.
PMHASH_ENGINE_INSTANTIATIONS(extern, Pea, false);
PMHASH_ENGINE_INSTANTIATIONS(extern, Pea, true);
PMHASH_ENGINE_INSTANTIATIONS(extern, Pea, false, true);

template <pm::PersistPolicy P>
using PeaKv = Pea<P, true>;
template <pm::PersistPolicy P>
using PeaMulti = Pea<P, false, true>;

}  // namespace pmhash::pea
