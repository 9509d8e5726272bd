// src/index/elimda/elimda.h — ElimDA: Eliminating Double I/O Amplifications of Hashing Indexes
// for Persistent Memory.
//
// Paper: ElimDA (../shared/papers/elimda.txt), sections 3.1-3.7.
//
// ============================================================================================
// Design summary
// ============================================================================================
// Three layers, as in the paper (Figure 5):
//
//   * Cache layer: `logs` collecting logs (default 8192; 4 in a pool created under ADR: below),
//     each one 256 B block (the media access granularity L) selected by the top log2(logs) bits
//     of the key's hash, or under ADR (writer logs, W1) by the appending thread. An insert appends
//     its 16 B item to the log's active block and sets the item's bit in the block's header
//     word. Under eADR the blocks live in the pool and are never flushed (Persister<Eadr>::Flush
//     is a no-op; the fences only order; a sealed block's item lines are written back as a
//     media-traffic hint, ElimdaParams::eadr_write_back); under ADR (paper 3.7) each item is
//     flushed as it is appended, so the log block IS the backup log. Our addition (ADR): the
//     item goes to the block's first line, which holds the header, so that one flush and one
//     fence persist the item and its bit together; when that line's three slots are taken,
//     their items first move to free slots of the other lines (LB+-tree's entry moving, as in
//     Pea): one persist per append, two once per three appends at most, against the paper's
//     two per append. This needs a line to reach the media whole; ElimdaParams::tear_safe
//     appends in order, item then bit, for platforms with 8-byte failure atomicity only.
//   * PM layer: the backup log is the set of sealed log blocks. When a log's active block is
//     full it is sealed and a fresh block is swapped in by one 8-byte pointer write (the paper's
//     shadow-log swap: no data moves); the sealed block keeps its items and, with them, backs
//     the DRAM table. The PM table is extendible hashing over segments of `segment_buckets`
//     P-buckets of `bucket_items` (N_p) 16 B items; a P-bucket's items are appended, never
//     rewritten, and its item count lives in the segment header.
//   * DRAM layer: one directory shared by the DRAM table and the PM table (same global and local
//     depths, same segments: a SegMeta describes both), D-buckets of up to `dbucket_items` (N_d)
//     items (each a reference to its log slot plus a copy of key and value), and a 16-bit
//     fingerprint of every PM-table item.
//   * Bucket relocation: a D-bucket that reaches N_d items is written to its P-bucket as whole
//     blocks (NtCopy, one fence) and the P-bucket's count is published (the commit point). The
//     items' log slots become invalid in DRAM only, as in the paper (its DRAM bitmap, 3.5):
//     their bits stay set in PM, as shadows of the relocated items (I13), until an update or
//     erase of the item, or Close, clears them; recovery drops them (I5). Sealed blocks whose
//     items are all relocated or erased are unlinked and freed in batches, as the paper reuses
//     invalidated log space once it is contiguous: a run of consecutive empty blocks with one
//     store (`empty_block_batch`). A P-bucket without room splits
//     its segment (older to newer, dropping duplicates and erased items); the DRAM side
//     (fingerprints, D-buckets, shadows, directory) splits in the same step.
//   * Out of space: when a split cannot get space (pool full, max_depth, directory budget), the
//     P-bucket is compacted in place (erased slots reused, I10); an insert that finds no room
//     for a new log block first relocates every waiting D-bucket that fits after compaction, so
//     that emptied log blocks are freed. Only then is it refused with kOutOfSpace.
//   * Reversed search: PM table via the DRAM fingerprints (PM read only on a fingerprint hit),
//     then the D-bucket, then the log's active block through its DRAM mirror (valid bits and
//     fingerprints in the log's cache line: PM read only on a fingerprint hit). Every sealed
//     item is in the DRAM table, so there is no shadow-log step.
//
// Our API's semantics (the paper appends blindly): Insert checks existence first, under the
// key's log lock (fingerprints, D-bucket, active log; PM only on a fingerprint hit), and returns
// kExists. So a key is stored once; "first-inserted wins" holds trivially, and should a P-bucket
// ever hold a key twice (a pool written by another implementation of the paper) Find returns
// the older slot, Erase tombstones every copy (newest first) and a split keeps the oldest.
//   * Update: in place, one failure-atomic 8-byte store of the value where the item lives (the
//     P-bucket slot, or the log slot that backs it; the DRAM copy follows), then one persist.
//   * Erase: a PM-table item's key word is replaced by a tombstone key (one 8-byte store, one
//     persist; see I5); a logged item's bit is cleared in its block header (one 8-byte store,
//     one persist) and its DRAM copy is marked dead.
//
// ============================================================================================
// Layout (all offsets are pool offsets; chunk size 256 B)
// ============================================================================================
//   roots[0]  offset of the first segment (hash prefix 00..0); segments are chained in prefix
//             order through their header's `next`
//   roots[1]  offset of the log table: `logs` 8-byte words, word i = the active block of log i
//             (0: none yet)
//
//   segment (1 + segment_buckets * bucket_items / 16 chunks):
//     header 256 B: [ tag:56 | local depth:8 ][ next segment ][ count[0] ] .. [ count[15] ] pad
//     bucket 0:     [ key | value ] x bucket_items          (bucket_items * 16 B, 256-aligned)
//     ...
//   log block (1 chunk = 256 B):
//     [ tag:48 | valid bits:16 ][ older block of the same log ][ key|value ] x 15
//
//   hash bits: top G        directory (segment), top log2(logs): log
//              bits 8..11   bucket in segment (above the collide mode's low byte)
//              bits 16..31  fingerprint
//
//   DRAM: directory (2^G SegMeta*), per segment: counts, fingerprints (uint16 per P-bucket
//   slot), D-buckets (vectors of DItem), per P-bucket the shadows of its relocated items still
//   logged (I13); per log: spin lock + chain of BlockInfo (newest first; live and stale bits).
//
// ============================================================================================
// Crash-consistency invariants and commit points
// ============================================================================================
//   I1  A P-bucket slot holds a live item iff its index < the bucket's count AND hash(key) maps
//       to this segment's prefix and this bucket. Slots beyond count are garbage.
//   I2  A log slot holds a live item iff its bit is set in the block header; a set bit is only
//       ever written after the slot's item was persisted (tear_safe append: item persist, then
//       header store + persist; otherwise I3'). A block is reachable iff it is in its log's
//       chain from the log table.
//   I3  Insert's commit point: the header store that sets the item's bit. Before it the slot is
//       garbage (I2).
//   I3' (not tear_safe) First-line append: the item and the header word share the block's first
//       line (slots 0..2), stored item first, header last, one flush + fence. A first-line item
//       moves by being copied to a free slot of another line (bit clear: garbage), persisted,
//       and then renamed by one header store that clears its old bit and sets the new one;
//       only after that store may its old slot be overwritten. So every version of the first
//       line that can reach the media (any prefix of its stores, written back whole) names
//       only items that are complete and durable.
//   I4  Seal (log swap): a new block is written with header (tag, no bits) and next = the old
//       active block, persisted, then the log table word is switched to it (commit: one 8-byte
//       write). Before: the new block is unreachable (freed by the allocator rebuild).
//   I5  Relocation: items written past count (NtCopy, fence: invisible by I1), then count
//       published (commit: one 8-byte store + persist; under ADR later, for many relocations at
//       once: I14). The log bits are not cleared (I13), so
//       a relocated key is both in the P-bucket and in a log: recovery treats a logged item that
//       is live in the PM table (elimda: the same key; elimda-kv: the same record) as relocated
//       and clears its bit durably (no key is otherwise in both places: Insert checks existence;
//       a PM-table erase removes the key word; a log erase clears the bit).
//   I6  Erase tombstone: a key whose hash has the other top bit than the segment's prefix
//       (local depth >= 1 always), so it is never live in this segment nor in a split of it.
//   I7  Split of segment S: two new segments are built in DRAM from S's live items (duplicates
//       and tombstones dropped), written with NtCopy (the header and each bucket's items up to
//       their last line: slots past the counts are garbage by I1), fenced; then the
//       predecessor's `next` (or roots[0]) is switched to the first of them (commit). Their
//       chain continues to S's old successor; S becomes unreachable.
//   I8  Empty sealed blocks: a run of consecutive ones in a log's chain is unlinked by one
//       8-byte store into the next newer block's `next`, then its blocks are freed. Until its
//       batch (SweepEmptyBlocks), and after a crash before that store, an empty block stays
//       reachable: recovery unlinks it.
//   I9  No leaks: the allocator is rebuilt at open from what roots 0 and 1 reach; elimda-kv's
//       record heap from the records of the live items (a record written but not published, or
//       replaced or erased before a crash, is free after it).
//   I10 Compaction (only when a split finds no space): the P-bucket's last live items are copied
//       into its dead slots (tombstones, later copies), value first, then key, each slot
//       flushed; one fence; then the count is lowered (commit: one 8-byte store + persist). A
//       crash before leaves a moved item stored twice with the same value: the first copy in a
//       bucket is the one that counts (Find, ForEach, recovery, CheckInvariants); a later copy
//       is never returned, Erase tombstones every copy (newest first), and the next compaction
//       or split drops it.
//   I11 (elimda-kv) An append's record is a checked record (src/index/records.h: a check word
//       over its key and value) written and flushed but not fenced before the item and its bit
//       are stored: the append's one fence persists all three (one fence per insert, not two).
//       A crash may leave a set bit whose record is torn, but only in the first line of a log's
//       active block: every other logged item was appended, and fenced, before it moved out of
//       the first line or its block was sealed (and a tear_safe append's item persist fences the
//       record before the bit is stored). Recovery drops such an item (its record not Intact:
//       key hash and check word) and clears its bit durably: that insert was never
//       acknowledged. A slot whose old bytes could pass for the new record (a record of the
//       same key hash, or lengths too long to tell) is fenced at once by NewChecked, so no stale
//       record is ever taken for the new one. An update's record is fenced before the value
//       store, as before: dropping a torn update would lose the old value.
//   I12 Clean shutdown (not in the paper; src/pm/saved_state.h): Close saves what
//       the two walks below derive — per log its blocks' offsets and the active block's mirror,
//       per segment its offset, depth, counts, the fingerprints below the counts and the live
//       D-bucket items (key, value, block, slot) — and the next open of a clean pool loads it
//       instead of walking. Nothing changed in PM since the save (Close quiesced the index; the
//       clean mark is its last write), so the loaded state is the one the walks would build.
//       The load bounds every offset and names every chunk once (segments, blocks, the log
//       table), which must then be exactly the loaded allocator's chunks; each log's first
//       block must be its log-table word; any mismatch falls back to the walk. It reads no
//       segment or block: no reader follows an offset read from PM (segments are found through
//       the directory, blocks through their BlockInfo, counts are DRAM), so a forged image can
//       make answers wrong, never a read out of bounds; `pmhash check` (CheckInvariants)
//       compares the loaded state with PM. elimda-kv appends the record heap's image
//       (record_heap.h, "Clean shutdown"; Close frees the retired records and releases empty
//       slabs first): its slabs are named too, the used chunks must be the named ones plus the
//       large records', and the heap's records the live items. No record is read: what the
//       walk's record checks protected is bounded where a record is read (Records::Fits), as
//       in turbo-kv and reh-kv.
//   W1  Writer logs (`writer_logs`, ADR's default): an append goes to the writer thread's log,
//       not to its hash's, unless its lock stripe's items may still be in the active block of
//       the log the stripe's last append went to (Stripe::last_log, last_block == that log's
//       active block): then there. So all of a stripe's items in active blocks are in one
//       active block, the one its stripe names, which is the only one a search of the stripe's
//       keys reads. (last_block may equal a later active block that reuses its chunk: the
//       stripe then appends there and searches it for nothing; harmless.) A sealed block's items
//       are found through the DRAM table whatever their log, and written under the lock of
//       their block's log (BlockInfo::log). Nothing in PM names a key's log: recovery takes a
//       logged key from any log (and refuses a key logged twice across all logs), then settles
//       the stripes from the active blocks' items (SettleWriterLogs); a stripe found in two
//       active blocks (a pool reopened with fewer lock stripes) makes it seal every active
//       block that has items (I4, before any operation), which leaves nothing to settle.
//   I13 Shadows (the paper's DRAM bitmap, made safe for our update and erase): a relocated
//       item's log slot keeps its bit in PM. DRAM marks it stale (BlockInfo::stale), lists it
//       under the item's P-bucket by the item's position there (SegMeta::shadow, sorted: a
//       relocation appends at the count; a split or compaction renumbers the entries of the
//       items it moves and clears the shadows of those it drops, before its fence) and sets the
//       position's bit in SegMeta::shadowed, so that only an item with a shadow searches the
//       list. A shadow is harmless while its item is live in the PM table with the same
//       identity (I5 drops it at recovery); whatever would end that clears the bit first.
//       elimda: an erase clears it and fences before the tombstone (an update leaves the
//       shadow, whose key stays live, with an older value: a crash that kept only the tombstone
//       would bring that value back). elimda-kv: an update clears it and fences before it
//       publishes the new record (the shadow names the old record, which recovery would no
//       longer find in the PM table, and would recover the key twice); so a shadow names the
//       record its item has, and an erase flushes the clearing with the tombstone, one fence (a
//       crash that keeps only the tombstone brings the key back with that record: the erase did
//       not happen). Close clears every stale bit, so the image (I12) names none. A block whose
//       live bits are clear is unlinked (I8) whatever its stale bits (an unreachable block's
//       bits mean nothing); its BlockInfo is kept, without stale bits, until the last shadow
//       entry naming it is pruned (a relocation or compaction prunes its list, a split the
//       lists it divides). The Dram policy keeps no shadows (nothing is recovered): a
//       relocation clears the bits, unflushed. What it saves: a relocation wrote one header
//       line per log block it took items from, about one random line, so one media write, per
//       insert under ADR; now it writes none. What it costs: an erase (elimda-kv: an update) of
//       an item with a shadow flushes one more line and fences once more; recovery clears the
//       shadows' bits (one flush per block).
//   I14 Late counts (ADR and the crash simulator: where a count's persist is a media write). A
//       relocation does not publish its count (I5's commit): it raises the DRAM count only and
//       lists the segment (SegMeta::unpublished). Its items are durable already (fenced), and,
//       past PM's count, garbage to recovery (I1), which finds them in their log slots instead:
//       their bits stay set (I13). The counts are published, each listed segment's in one
//       header flush and all with one fence (PublishAllCounts), before any log block is
//       unlinked or freed (SweepEmptyBlocks: the blocks a relocation empties wait for it there
//       anyway), at Close before the stale bits are cleared (so the image's counts are PM's),
//       and before a compaction. An in-place update of a PM-table item publishes its segment
//       first (PublishCounts): the value it writes must be where recovery reads it. An erase
//       need not: it clears the item's shadow (fenced, or flushed with the tombstone), so a
//       crash finds the item in neither place, the erase's effect. A split writes its halves'
//       counts whole and unlists the old segment. No slot past PM's count is live without a
//       valid shadow (CheckInvariants). 2M-10M keys, one thread: a publish covers 8.3 relocations
//       (docs/results.md).
//
// Recovery (paper 3.6): walk the segment chain (tiling and tags checked, every offset
// validated, MarkReachable), rebuild directory, counts and fingerprints; walk every log chain
// (tags, offsets, each logged key must belong to the log, unless writer logs), clear the bits of
// relocated keys (I5), put every sealed item into its D-bucket, unlink empty sealed blocks;
// writer logs: settle the stripes (W1). Any inconsistency is Status::Corruption. After a clean
// Close, the saved state instead (I12), and the same settling.
//
// ============================================================================================
// Concurrency, and where this deviates from the paper
// ============================================================================================
// A table-wide reader-writer lock (writer-preferring, waiters yield after a short spin), one spin
// lock per stripe of keys (`lock_stripes`, an open-time option, default 8192, by the hash's top
// bits) and one per log. Find/Insert/Update/Erase take the table lock shared and the key's
// stripe lock (held across the persist, so a read never returns a write that is not yet
// durable), and the key's log lock only while they touch the log (LogSection): the active
// block (search, append, an update or erase there: another stripe's append may move the item,
// I3') or a sealed block's header word and DRAM bits (an erase, a shadow's clearing). With no
// more stripes than logs each log has its own stripe, whose lock is then the log's (taken
// once). A search skips the active block, and its lock, when the stripe's last append went to
// another block (Stripe::last_block): with few logs, a negative search rarely waits for an
// append. Sealing a log (with the D-bucket inserts, relocations and splits it causes) takes
// the table lock exclusively. Every key's items live only in structures its stripe lock, its
// log lock or the exclusive lock protect (PM and D-bucket slots of other keys are only read,
// through atomics). The paper's lock-free CAS append and per-thread shadow logs are replaced by
// the log lock (an insert is a few stores either way), and the sealed block stays where it is
// instead of being copied into a separate backup log (the swap of pointers is the same, the copy
// is saved). Relocation and splits run on the inserting thread (no background work). With
// writer logs (W1) a thread's log is picked once per thread and pool (thread_local, round
// robin); the log is still locked per append, since a stripe's pending items pin appends of any
// thread to their block.
// Fingerprints are 16 bits (fixed).
//
// Logs against stripes. Under eADR the paper's 8192 logs are its cache layer (2 MB of CPU
// cache). Under ADR it flushes each item to the backup log and counts on the appends being
// sequential, so that the media's write combining (Optane's XPBuffer) merges them into whole
// 256 B writes (paper 3.7): with 8192 logs each flushed append lands in a block of its own, one
// media write per insert. So a pool created under ADR (or the crash simulator) without a
// `logs` gets 4 (DurabilityDefaults): measured in the harness's media model at 2M keys, ADR
// media writes per insert 1.16 at 64 logs, 0.84 at 16, 0.33 at 4, 0.30 at one (docs/results.md;
// since the unlink batches, I8: 0.30 at 4, 0.25 at one; one log costs two writers 28% of their
// inserts). Writer logs (W1, ADR's default since 2026-12-03) give each writer thread a log of
// its own, so one thread fills one block after another at any number of logs: 0.253 media
// writes per insert at 4 logs as at one (2M keys; 10M: 0.295 -> 0.256; 64 B blocks 1.118 ->
// 0.868; elimda-kv 0.526 -> 0.407), while two writers still append to two logs.
// The stripes keep reads and writes of different keys apart whatever the logs: a log lock is
// held for an append's few stores and persist, not for the search before it.
//
// elimda-kv (variable-size keys and values; the paper's 3.7 value pool, in the shared record
// heap): the same engine with kRecords. An item holds [hash(key) | record offset] and the record
// [klen | vlen | check | key | value] lives in the pool's record heap (src/index/records.h),
// allocated from the same chunk allocator. Fingerprints, logs, buckets, splits and tombstones
// (the words 0 and 2^63, like reh-kv's) work on the hash as elimda works on the key; keys are
// compared by hash, then the record's bytes. An update's record is flushed and fenced before the
// value store that publishes it; an append's is persisted by the append's own fence and checked
// at recovery (I11). An update or an erase retires the old record through the epoch (FindBytes
// copies a value after leaving the locks, under an epoch guard). Relocation and compaction copy items, never records: every copy of a pair names the
// same record, so copies are told apart by their record offset (Identity()), and recovery finds
// a relocated item still logged (I5) by its record offset: a slab record whose slot the PM
// table's walk marked (and no logged item), a large one among the PM table's large records; of
// the record it reads only the lengths, once the offset is inside the heap. Open rebuilds the
// record heap from the live items (Records::Recover: offset, lengths, slab, sharing, key hash
// and check word validated before use).
//
// Thread safety: all public operations may run concurrently. Close() requires quiescence.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <thread>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/fingerprint.h"
#include "common/hash.h"
#include "common/locks.h"
#include "common/resize_log.h"
#include "common/striped_counter.h"
#include "common/thread_annotations.h"
#include "index/descriptor.h"
#include "index/engine_base.h"
#include "index/lifecycle.h"
#include "index/records.h"
#include "pm/persist.h"
#include "pm/pool.h"
#include "pm/saved_state.h"
#include "pm/slot.h"
#include "pmhash/index.h"

namespace pmhash::elimda {

using pm::PmSlot;

inline constexpr uint32_t kBlockBytes = 256;  // a log block: the media access granularity L
inline constexpr uint32_t kBlockSlots = 15;
inline constexpr uint32_t kFullBits = (1u << kBlockSlots) - 1;
inline constexpr uint32_t kFirstLineBytes = 64;  // header, next and three items (I3')
inline constexpr uint32_t kFirstLineSlots = 3;
inline constexpr uint32_t kFirstLineBits = (1u << kFirstLineSlots) - 1;
inline constexpr uint32_t kMirrorMissing = ~0u;  // saved state: the log's mirror was not kept
inline constexpr uint32_t kMaxSegmentBuckets = 16;
inline constexpr uint32_t kMaxDepthLimit = 40;
inline constexpr uint64_t kBlockTag = 0xE11DA10C0B10ULL;  // 48 bits
inline constexpr uint64_t kSegTag = 0xE11DA5E65E6D0AULL;  // 56 bits

struct alignas(256) LogBlock {
  std::atomic<uint64_t> header;  // tag:48 | valid bits:16
  std::atomic<uint64_t> next;    // older block of the same log (0: none)
  PmSlot slots[kBlockSlots];
};
static_assert(sizeof(LogBlock) == kBlockBytes, "a log block is one 256 B media block");
static_assert(offsetof(LogBlock, slots) == 16, "items follow the 16 B header");
static_assert(offsetof(LogBlock, slots) + kFirstLineSlots * sizeof(PmSlot) == kFirstLineBytes,
              "the header and the first three items share the block's first line");

struct alignas(256) SegHeader {
  std::atomic<uint64_t> tag_depth;  // tag:56 | local depth:8
  std::atomic<uint64_t> next;       // next segment in prefix order (0: last)
  std::atomic<uint64_t> count[kMaxSegmentBuckets];
  uint64_t reserved[14];
};
static_assert(sizeof(SegHeader) == 256, "the segment header is one media block");

inline constexpr uint64_t BlockHeader(uint32_t bits) { return (kBlockTag << 16) | bits; }
inline constexpr uint64_t SegWord(uint32_t depth) { return (kSegTag << 8) | depth; }

// Layout words: the log block's bytes and items.
// Version 2: writer_logs.
struct PersistentParams : index::LayoutWords<kBlockBytes, kBlockSlots, 2> {
  uint32_t bucket_items = 0;            // N_p
  uint32_t dbucket_items = 0;           // N_d
  uint32_t segment_buckets = 0;
  uint32_t logs = 0;
  uint32_t writer_logs = 0;  // 1: appends go to the writer's log, not the hash's (W1)
  uint32_t initial_depth = 0;
  uint32_t max_depth = 0;
  uint32_t records = 0;           // 2: elimda-kv (checked records, src/index/records.h)
  uint32_t max_record_bytes = 0;  // elimda-kv only
};

struct Config : PersistentParams, index::CommonOpenOptions {
  bool tear_safe = false;
  bool eadr_write_back = true;
  uint32_t lock_stripes = 8192;
  std::optional<uint32_t> empty_block_batch;
  void SetOpenOptions(const Options& o) {
    tear_safe = o.elimda.tear_safe;
    eadr_write_back = o.elimda.eadr_write_back;
    lock_stripes = o.elimda.lock_stripes;
    empty_block_batch = o.elimda.empty_block_batch;
  }
};

inline uint64_t SegmentChunks(const PersistentParams& s) {
  return 1 + uint64_t{s.segment_buckets} * s.bucket_items * sizeof(PmSlot) / kBlockBytes;
}
inline uint64_t LogTableChunks(const PersistentParams& s) {
  return (uint64_t{s.logs} * 8 + kBlockBytes - 1) / kBlockBytes;
}

template <pm::PersistPolicy P, bool kRecords>
class ElimDA;

namespace detail {
// The table lock: RwSpinLock's writer-preferring protocol (a writer announces itself, new readers
// back off, the writer waits for readers to drain), but a waiter yields its core after a short
// spin: sealing a log holds it exclusively for a relocation or a split, long enough that
// spinning readers would burn the cores the sealing thread needs.
inline void Pause(int spins) {
  if (spins < 64) {
    CpuRelax();
  } else {
    std::this_thread::yield();
  }
}

class PMHASH_CAPABILITY("shared mutex") TableLock {
 public:
  void lock() PMHASH_ACQUIRE() {
    uint32_t s = state_.load(std::memory_order_relaxed);
    for (int spins = 0;; spins++) {
      if ((s & kWriter) == 0 &&
          state_.compare_exchange_weak(s, s | kWriter, std::memory_order_acquire)) {
        break;
      }
      Pause(spins);
      s = state_.load(std::memory_order_relaxed);
    }
    for (int spins = 0; (state_.load(std::memory_order_acquire) & ~kWriter) != 0; spins++) {
      Pause(spins);
    }
  }
  void unlock() PMHASH_RELEASE() { state_.fetch_and(~kWriter, std::memory_order_release); }
  void lock_shared() PMHASH_ACQUIRE_SHARED() {
    for (int spins = 0;; spins++) {
      uint32_t s = state_.load(std::memory_order_relaxed);
      if ((s & kWriter) == 0 && state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire)) {
        return;
      }
      Pause(spins);
    }
  }
  void unlock_shared() PMHASH_RELEASE_SHARED() { state_.fetch_sub(1, std::memory_order_release); }

 private:
  static constexpr uint32_t kWriter = 1u << 31;
  std::atomic<uint32_t> state_{0};
};

// A log's lock: a test-and-test-and-set spin lock whose waiters yield after a short spin (held
// across a persist; a preempted holder must not cost the waiters their time slices).
class PMHASH_CAPABILITY("mutex") LogLock {
 public:
  void lock() PMHASH_ACQUIRE() {
    for (int spins = 0;; spins++) {
      if (!flag_.load(std::memory_order_relaxed) &&
          !flag_.exchange(true, std::memory_order_acquire)) {
        return;
      }
      Pause(spins);
    }
  }
  void unlock() PMHASH_RELEASE() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

// Held by a caller that holds a key's stripe lock while it touches the key's log: the log's
// lock where several stripes share the log; nothing where each log has its own stripe, whose
// lock (the log's, then) the caller holds already. Either way the log's lock is held for the
// analysis.
class PMHASH_SCOPED_CAPABILITY LogSection {
 public:
  LogSection(LogLock& mu, bool shared) PMHASH_ACQUIRE(mu) PMHASH_NO_THREAD_SAFETY_ANALYSIS
      : mu_(shared ? &mu : nullptr) {
    if (mu_) mu_->lock();
  }
  ~LogSection() PMHASH_RELEASE() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
    if (mu_) mu_->unlock();
  }
  LogSection(const LogSection&) = delete;
  LogSection& operator=(const LogSection&) = delete;

 private:
  LogLock* mu_;
};

// A set of pair identities (ElimDA::Identity): a bucket's, so that a scan keeps the first copy of
// a pair and drops a later one (I10), or every logged item's (recovery refuses a pair logged
// twice). Recovery and the scans visit every item: a std::unordered_set cost a heap node per
// item (a fifth of ElimDA's recovery time, perf). Open addressing, at most half full, emptied in
// O(1) by a generation number per cell (a scan clears it once per bucket).
class IdentitySet {
 public:
  explicit IdentitySet(size_t expected) {
    Reset(std::bit_ceil(size_t{2} * std::max<size_t>(expected, 4)));
  }
  void Clear() {
    size_ = 0;
    if (++cur_ == 0) {  // the generations wrapped: forget them all
      std::fill(gen_.begin(), gen_.end(), 0);
      cur_ = 1;
    }
  }
  // True if `id` was not in the set; it is now.
  bool Insert(uint64_t id) {
    if (2 * (size_ + 1) > ids_.size()) Grow();
    for (size_t i = Mix64(id, 0x9E3779B97F4A7C15ULL) & mask_;; i = (i + 1) & mask_) {
      if (gen_[i] != cur_) {
        gen_[i] = cur_;
        ids_[i] = id;
        size_++;
        return true;
      }
      if (ids_[i] == id) return false;
    }
  }
  bool Contains(uint64_t id) const {
    for (size_t i = Mix64(id, 0x9E3779B97F4A7C15ULL) & mask_;; i = (i + 1) & mask_) {
      if (gen_[i] != cur_) return false;
      if (ids_[i] == id) return true;
    }
  }

 private:
  void Reset(size_t cells) {
    ids_.assign(cells, 0);
    gen_.assign(cells, 0);
    mask_ = cells - 1;
    size_ = 0;
    cur_ = 1;  // cells of another generation are empty
  }
  void Grow() {
    std::vector<uint64_t> ids = std::move(ids_);
    std::vector<uint32_t> gen = std::move(gen_);
    const uint32_t live = cur_;
    Reset(ids.size() * 2);
    for (size_t i = 0; i < ids.size(); i++) {
      if (gen[i] == live) Insert(ids[i]);
    }
  }

  std::vector<uint64_t> ids_;
  std::vector<uint32_t> gen_;
  size_t mask_ = 0;
  size_t size_ = 0;
  uint32_t cur_ = 1;
};
}  // namespace detail

// The registry's words for elimda and elimda-kv (pmhash list; src/index/descriptor.h).
inline constexpr index::KindTexts kTexts{
    "elimda", "elimda-kv", "elimda.max_record_bytes",
    "ElimDA: Eliminating Double I/O Amplifications of Hashing Indexes for Persistent Memory",
    "insert-ahead 256 B logs, DRAM table + 16-bit fingerprints, whole-block bucket relocation"};

// kRecords = false: "elimda" (8 B inline keys and values). kRecords = true: "elimda-kv"
// (variable-size records: an item holds [hash | record offset], src/index/records.h).
template <bool kRecords>
struct DescriptorFor
    : index::FlaggedDescriptorTypes<ElimdaParams, &Options::elimda, PersistentParams, ElimDA,
                                    kRecords, kTexts, index::kCheckedRecords> {
  using Params = ElimdaParams;
  using Stored = PersistentParams;
  static constexpr auto kProperties = std::tuple{
      index::PoolProperty{"elimda.bucket_items", &Params::bucket_items, &Stored::bucket_items,
                          256u},
      index::PoolProperty{"elimda.dbucket_items", &Params::dbucket_items, &Stored::dbucket_items,
                          64u},
      index::PoolProperty{"elimda.segment_buckets", &Params::segment_buckets,
                          &Stored::segment_buckets, 16u},
      index::PoolProperty{"elimda.logs", &Params::logs, &Stored::logs, 8192u},
      index::PoolProperty{"elimda.writer_logs", &Params::writer_logs, &Stored::writer_logs, 0u},
      index::PoolProperty{"elimda.initial_depth", &Params::initial_depth, &Stored::initial_depth,
                          1u},
      index::PoolProperty{"elimda.max_depth", &Params::max_depth, &Stored::max_depth, 32u},
  };
  // Under ADR (and the crash simulator, which flushes as ADR does) the logs are the backup log
  // the items are flushed to one by one: the paper's 8192 collecting logs are its eADR
  // configuration, and under ADR it relies on sequential appends, which the media's write
  // combining turns into whole-block writes (paper 3.7). So a new ADR pool gets few logs
  // (kAdrLogs); lock stripes keep reads spread (Options::elimda.lock_stripes).
  static constexpr uint32_t kAdrLogs = 4;
  static void DurabilityDefaults(const Params& given, Durability d, Stored* s) {
    if (d != Durability::kAdr && d != Durability::kSim) return;
    if (!given.logs) s->logs = kAdrLogs;
    if (!given.writer_logs) s->writer_logs = 1;
  }
  static std::string Check(const Stored& s) {
    if (s.bucket_items < 16 || s.bucket_items > 4096 || s.bucket_items % 16 != 0) {
      return "bucket_items must be a multiple of 16 in [16, 4096] (whole 256 B blocks)";
    }
    if (s.dbucket_items < 16 || s.dbucket_items % 16 != 0 || s.dbucket_items > s.bucket_items ||
        s.bucket_items % s.dbucket_items != 0) {
      return "dbucket_items must be a multiple of 16 that divides bucket_items";
    }
    if (s.segment_buckets < 1 || s.segment_buckets > kMaxSegmentBuckets ||
        !std::has_single_bit(s.segment_buckets)) {
      return "segment_buckets must be a power of 2 in [1, 16]";
    }
    if (s.logs < 1 || s.logs > (1u << 20) || !std::has_single_bit(s.logs)) {
      return "logs must be a power of 2 in [1, 2^20]";
    }
    if (s.writer_logs > 1) return "writer_logs must be 0 or 1";
    if (s.max_depth < 1 || s.max_depth > kMaxDepthLimit) return "max_depth must be in [1, 40]";
    if (s.initial_depth < 1 || s.initial_depth > s.max_depth || s.initial_depth > 20) {
      return "initial_depth must be in [1, min(max_depth, 20)]";
    }
    return "";
  }
  static index::PoolLayout Layout(const Stored& s) {
    return {kBlockBytes, (uint64_t{1} << s.initial_depth) * SegmentChunks(s) + LogTableChunks(s)};
  }
  // PM-table items at ~0.4 load after splits, plus the default logs' blocks.
  static constexpr double kPoolBytesPerKey = sizeof(PmSlot) / 0.4;
  static constexpr uint64_t kPoolFixedBytes = (uint64_t{8192} * 2 + 64) * kBlockBytes;
};

template <pm::PersistPolicy P, bool kRecords = false>
class ElimDA : public index::EngineBase<ElimDA<P, kRecords>, P, Config> {
  PMHASH_ENGINE(ElimDA, P, Config, DescriptorFor<kRecords>);  // Open, Find, Erase, ..., ~ElimDA()

 public:
  using Base::Size;

  // Variable-size API (BytesIndex, src/index/records.h). NotSupported on "elimda".
  PMHASH_PROBE_RECORDS_API(kRecords);

  // For tests and tools.
  uint32_t global_depth() const;
  uint32_t logs() const { return params_.logs; }
  // More lock stripes than logs: several stripes share a log, and a stripe's holder takes the
  // log's lock (LogSection) to touch it.
  bool shared_logs() const { return stripes_ != nullptr; }
  // Appends go to the writer's log (ElimdaParams::writer_logs, W1).
  bool writer_logs() const { return writer_; }
  uint64_t log_swaps() const { return log_swaps_.load(std::memory_order_relaxed); }
  uint64_t relocations() const { return relocations_.load(std::memory_order_relaxed); }
  uint64_t duplicates_dropped() const { return dups_dropped_.load(std::memory_order_relaxed); }
  // Where k's item lives: 0 absent, 1 PM table, 2 DRAM table (sealed log block), 3 active log.
  int LayerOf(Key k) const;
  // Test hook (hostile pools, duplicates): pool offset of the PM-table slot holding k, or 0.
  uint64_t PmSlotOffsetForTest(Key k) const;
  // Test hook: appends a second, durable copy (k, v) to the P-bucket of k, which must hold k
  // already — what a blind-appending writer of the paper's design can leave behind. (elimda
  // only: a copy of an elimda-kv item would share its record.)
  Status AppendCopyForTest(Key k, Value v)
    requires(!kRecords);

 private:
  using WriteMode = index::WriteMode;

  struct BlockInfo {
    uint64_t off = 0;  // 0: unlinked, kept while shadow entries name it (I13)
    uint32_t log = 0;
    uint16_t live = 0;   // sealed block: the bits of its items still in D-buckets (DRAM)
    uint16_t stale = 0;  // bits set in PM whose items were relocated (I13)
    uint32_t refs = 0;   // shadow entries that name this block (valid or not)
    BlockInfo* newer = nullptr;  // towards the active block (unlinked: the list of such blocks)
    BlockInfo* older = nullptr;
  };
  // I13: a relocated item whose log slot's bit is still set in PM, listed under its P-bucket
  // by the item's position there (the list sorted by it: relocations append at the count,
  // splits and compactions renumber); valid while its block's `stale` bit is set.
  struct Shadow {
    BlockInfo* bi;
    uint32_t pos;   // the item's slot in the P-bucket
    uint32_t slot;  // its log slot in bi
  };
  static_assert(sizeof(Shadow) == 16);
  struct DItem {
    Key key;
    Value value;
    BlockInfo* block;
    uint32_t slot;
    uint32_t live;
  };
  struct SegMeta {
    uint64_t off = 0;
    uint32_t depth = 0;
    std::vector<uint32_t> count;             // per P-bucket (PM's may be lower: I14)
    // I14: some count is above its PM count (a relocation's, not yet published). Set under the
    // exclusive lock; cleared by a publish, which an update may run under the shared lock.
    std::atomic<bool> unpublished{false};
    bool listed = false;  // in ElimDA::unpublished_ (under the exclusive lock)
    std::vector<uint16_t> fp;                // bucket b, slot j at [b * N_p + j]
    std::vector<std::vector<DItem>> dbucket;  // per bucket
    std::vector<std::vector<uint16_t>> dfp;   // per bucket: the fingerprint of each D-item
    std::vector<std::vector<Shadow>> shadow;  // per bucket, by position: items still logged (I13)
    // A bit per P-bucket slot, set while a valid shadow entry may name it: an update or erase
    // of an item without one reads no list (I13). Set under the exclusive lock; cleared by
    // writers of keys of different logs at once, so atomic (a bit is only a hint: a clear
    // bit means no valid entry, a set one that the list must say).
    std::vector<std::atomic<uint64_t>> shadowed;
    bool Shadowed(size_t i) const {
      return (shadowed[i >> 6].load(std::memory_order_relaxed) >> (i & 63)) & 1;
    }
    void SetShadowed(size_t i, bool on) {
      const uint64_t bit = uint64_t{1} << (i & 63);
      if (on) {
        shadowed[i >> 6].fetch_or(bit, std::memory_order_relaxed);
      } else {
        shadowed[i >> 6].fetch_and(~bit, std::memory_order_relaxed);
      }
    }
    void Push(uint32_t b, const DItem& it, uint16_t f) {
      dbucket[b].push_back(it);
      dfp[b].push_back(f);
    }
    void DropDead(uint32_t b) {  // erases dead D-items (and their fingerprints)
      auto& d = dbucket[b];
      auto& f = dfp[b];
      size_t n = 0;
      for (size_t i = 0; i < d.size(); i++) {
        if (!d[i].live) continue;
        d[n] = d[i];
        f[n] = f[i];
        n++;
      }
      d.resize(n);
      f.resize(n);
    }
  };
  // A log's DRAM state, one cache line: its lock, its active block and a mirror of that block's
  // valid bits and of its items' fingerprints, so that a search whose fingerprint matches no
  // logged item (every negative one, nearly) reads neither the block (PM) nor its BlockInfo.
  // The mirror describes `mirror_of` only; Locate falls back to reading the block while
  // mirror_of != head. Its bits are a superset of the block's (Locate re-checks the header on a
  // fingerprint match): a bit is set in the mirror before the item is appended, and cleared
  // after the erase that clears it in the block. Written under the log lock or the exclusive
  // table lock, like the block itself.
  struct alignas(64) LogState {
    detail::LogLock mu;
    uint32_t mirror_bits = 0;
    BlockInfo* head = nullptr;  // the active block (newest)
    const BlockInfo* mirror_of = nullptr;
    uint16_t mirror_fp[kBlockSlots] = {};
    uint64_t head_off = 0;  // head->off (0: no head), so that an append misses on no BlockInfo
  };
  static_assert(sizeof(LogState) == 64, "one cache line per log");
  // A lock stripe of keys (when lock_stripes > logs) and the active block its last append went
  // to (written under its lock; kUnknown until its first append after open).
  struct Stripe {
    static constexpr uint64_t kUnknown = ~uint64_t{0};
    static constexpr uint64_t kNone = 1;  // writer logs: no item in an active block (no chunk)
    detail::LogLock mu;
    uint64_t last_block = kUnknown;
    uint32_t last_log = 0;  // writer logs: the log of last_block (W1)
  };
  enum class Layer { kNone, kPm, kDram, kLog };
  struct Where {
    Layer layer = Layer::kNone;
    SegMeta* seg = nullptr;
    uint32_t b = 0, j = 0;
    DItem* item = nullptr;
    BlockInfo* block = nullptr;
  };

  ElimDA(std::unique_ptr<pm::Pool> pool, const Config& config);
  Status Init();
  Status Create();
  Status Recover();
  // I12: the image of a clean Close (src/pm/saved_state.h); elimda-kv's ends with the record
  // heap's.
  struct SavedItem {  // a live D-bucket item
    uint64_t key;
    uint64_t value;
    uint64_t block_slot;  // block index (in the image's order) << 4 | slot
  };
  static_assert(sizeof(SavedItem) == 24);
  void SaveState(pm::StateWriter& w) const;
  Status LoadState(pm::StateReader& r);
  // Recover and LoadState, building log li's chain newest first: the BlockInfo of the block at
  // `off`, linked after `newer` (nullptr: it is the log's head). nullptr if out of memory.
  BlockInfo* AppendBlockInfo(uint32_t li, uint64_t off, BlockInfo* newer);
  // A key as the search compares it: the inline key, or hash + bytes (elimda-kv).
  using Probe = index::KeyProbe;
  using Keys = index::ProbeKeys<kRecords>;  // src/index/records.h
  Probe MakeProbe(Key k) const { return Keys::Make(hash_, k); }
  Probe MakeProbe(std::string_view s) const { return Keys::Make(hash_, s); }
  // The probe of a uint64 key as this kind stores it (elimda-kv: its 8 bytes).
  Probe U64Probe(Key k, const index::U64Bytes& bytes) const {
    if constexpr (kRecords) {
      return MakeProbe(bytes.view());
    } else {
      return MakeProbe(k);
    }
  }
  // The hash a stored key word stands for (elimda-kv: the word is the hash).
  uint64_t SlotHash(uint64_t key_word) const { return Keys::SlotHash(hash_, key_word); }
  // What identifies a stored pair when copies are dropped (a crashed compaction's second copy,
  // a relocated item still logged): its key word, or (elimda-kv) its record offset, which every
  // copy of the pair shares.
  static uint64_t Identity(uint64_t key_word, uint64_t value_word) {
    return kRecords ? value_word : key_word;
  }
  // True if a D-bucket item holds p's key.
  bool ItemMatches(const DItem& it, const Probe& p) const;
  // p's value word (elimda-kv: its record's offset), under the table lock shared and p's log
  // lock; false if absent. REQUIRES (elimda-kv): an epoch guard while the caller reads the record.
  bool Search(const Probe& p, uint64_t* word) const;
  // The value stored is `value` (elimda) or a new record of p.s and value_bytes (elimda-kv).
  Status Write(const Probe& p, std::string_view value_bytes, Value value, WriteMode mode);
  Status EraseProbe(const Probe& p);
  // Calls take(slot) for every live item's PM slot (P-bucket slot, or the log slot that backs a
  // D-bucket item or an active-log item) under the exclusive table lock, then done() unlocked.
  template <class Take, class Done>
  void WalkLiveSlots(Take&& take, Done&& done) const;
  EpochManager& RecordEpoch() const { return *epoch_; }  // elimda-kv's FindBytes
  void Quiesce() {  // Close(): counts published, empty blocks unlinked, stale log bits cleared,
                    // records freed
    PublishAllCounts();  // I14: before the stale bits go, and the image (I12) names PM's counts
    SweepEmptyBlocks(/*all=*/true);
    ClearAllStale();
    if constexpr (kRecords) {
      epoch_->Drain();
      records_->ReleaseEmptySlabs();  // (before the image: I12)
    }
  }
  // REQUIRES: log->mu held, blk the log's active block with a free slot, hdr its header word.
  void Append(LogState* log, LogBlock* blk, uint64_t hdr, uint64_t h, Key k, Value v)
      PMHASH_REQUIRES(log->mu);

  uint32_t LogOf(uint64_t h) const {
    return log_bits_ ? static_cast<uint32_t>(h >> (64 - log_bits_)) : 0;
  }
  // h's lock stripe, or nullptr where each log has its own stripe (no more stripes than logs).
  Stripe* StripeOf(uint64_t h) const {
    return stripes_ ? &stripes_[h >> (64 - stripe_bits_)] : nullptr;
  }
  // The lock a key's reads and writes take: its stripe's, which is its log's lock where each
  // log has its own stripe.
  detail::LogLock& StripeLock(uint64_t h) const {
    Stripe* s = StripeOf(h);
    return s ? s->mu : logs_[LogOf(h)].mu;
  }
  // The log whose active block may hold h's item: its hash's, or (writer logs) the log its
  // stripe's last append went to (W1). REQUIRES: h's stripe lock, or exclusive.
  uint32_t PendingLogOf(uint64_t h) const { return writer_ ? StripeOf(h)->last_log : LogOf(h); }
  LogState& PendingLog(uint64_t h) const { return logs_[PendingLogOf(h)]; }
  // Writer logs: the calling thread's log. Each thread gets the next log at its first append
  // to this index (round robin), so that up to `logs` writers append to logs of their own;
  // a thread that alternates between indexes takes a new one each time (a hint only: any log
  // is correct).
  uint32_t WriterLog() {
    struct Home {
      const void* index = nullptr;
      uint32_t log = 0;
    };
    static thread_local Home home;
    if (home.index != this) {
      home.index = this;
      home.log = next_writer_.fetch_add(1, std::memory_order_relaxed);
    }
    return home.log & (params_.logs - 1);
  }
  // False if no key of h's stripe can be in log's active block, so that a search need not
  // take the log's lock: the stripe's last append went to another block (items enter an active
  // block only by appends, and leave it only when it is sealed). REQUIRES: h's stripe lock.
  bool MayBeInActiveBlock(uint64_t h, const LogState& log) const {
    const Stripe* s = StripeOf(h);
    return !s || s->last_block == log.head_off || s->last_block == Stripe::kUnknown;
  }
  // Writer logs, at open (after Recover or LoadState): every stripe's last_log and last_block
  // from the active blocks' items (W1). A stripe with items in two active blocks (a pool opened
  // with fewer lock stripes than it was written with) is settled by sealing every log that has
  // items in its active block. REQUIRES: no concurrent operations.
  Status SettleWriterLogs();
  uint32_t BucketOf(uint64_t h) const {
    return static_cast<uint32_t>(h >> 8) & (params_.segment_buckets - 1);
  }
  static uint16_t FpOf(uint64_t h) { return static_cast<uint16_t>(h >> 16); }
  SegMeta* SegOf(uint64_t h) const { return dir_[h >> (64 - gd_)]; }
  uint64_t Prefix(const SegMeta* s, uint64_t some_index) const {
    return some_index >> (gd_ - s->depth);
  }
  SegHeader* Header(const SegMeta* s) const { return pool_->template At<SegHeader>(s->off); }
  PmSlot* BucketSlots(uint64_t seg_off, uint32_t b) const {
    return pool_->template At<PmSlot>(seg_off + sizeof(SegHeader) +
                                      uint64_t{b} * params_.bucket_items * sizeof(PmSlot));
  }
  LogBlock* Block(const BlockInfo* bi) const { return pool_->template At<LogBlock>(bi->off); }
  std::atomic<uint64_t>* LogTable() const {
    return pool_->template At<std::atomic<uint64_t>>(pool_->root(1));
  }
  uint64_t Tombstone(uint64_t prefix_top_bit) const { return tombstone_[prefix_top_bit ^ 1]; }
  // Live in segment (prefix, depth), bucket b (I1).
  bool LiveIn(Key k, uint64_t prefix, uint32_t depth, uint32_t b) const {
    const uint64_t h = SlotHash(k);
    return (h >> (64 - depth)) == prefix && BucketOf(h) == b;
  }

  // REQUIRES: table lock (shared or exclusive), p's stripe lock and p's log section, or
  // exclusive.
  Where Locate(const Probe& p) const;
  // Locate's first two layers, the PM table and the D-bucket: true (and *w set) if they hold
  // p's key. REQUIRES: table lock and p's stripe lock, or exclusive.
  PMHASH_ALWAYS_INLINE bool LocateTables(const Probe& p, Where* w) const;
  // Locate's last layer, the log's active block. REQUIRES: table lock, p's stripe lock and p's
  // log section, or exclusive.
  PMHASH_ALWAYS_INLINE bool LocateLog(const Probe& p, Where* w) const;
  // Locate's first layer: true (and *w set) if the PM table holds p's key; s, b and f are
  // SegOf, BucketOf and FpOf of p.h. REQUIRES: as Locate.
  PMHASH_ALWAYS_INLINE bool LocatePm(const Probe& p, SegMeta* s, uint32_t b, uint16_t f,
                                     Where* w) const;
  // Rebuilds log's mirror from its active block (recovery). REQUIRES: exclusive.
  void MirrorActiveBlock(LogState* log) const;
  // Swaps a new active block into `log` if its active block is full or missing (or, `force`,
  // has any item). REQUIRES: no locks held (takes the table lock exclusively).
  Status Seal(uint32_t log, bool force = false);
  Status MakeRoom(uint64_t h);
  void Relocate(SegMeta* s, uint32_t b, std::vector<DItem>& items);
  void Compact(SegMeta* s, uint32_t b);
  void Reclaim();
  Status Split(SegMeta* s, uint64_t h);
  Status Double();
  // REQUIRES: exclusive (or recovery). `all`: now, whatever their number (else once they are
  // 1/empty_batch_ of the sealed blocks). False if none was waiting or none was due.
  bool SweepEmptyBlocks(bool all = false);
  void FreeBlock(BlockInfo* bi);
  // The run of empty blocks from `oldest` to `newest` (towards the active block): one store.
  void UnlinkRun(BlockInfo* oldest, BlockInfo* newest);
  void Release(BlockInfo* bi);  // an unlinked block: its chunk freed, its BlockInfo too or kept
  // I13. REQUIRES: exclusive.
  void PruneShadows(std::vector<Shadow>* list);
  void Unref(BlockInfo* bi);
  // I13: clears stale bits of bi in PM (one header store + flush, no fence) and in DRAM.
  void ClearStale(BlockInfo* bi, uint32_t mask);
  // I13: the PM item at P-bucket position `pos`: clears its shadow's bit, if it has one, and
  // flushes the block's header (no fence), in the section of the shadow's log (the key's log,
  // unless writer logs). REQUIRES: the key's stripe lock, and no log section.
  bool ClearShadow(SegMeta* s, uint32_t b, uint32_t pos);
  void ClearAllStale();  // Close: every stale bit cleared in PM (I13)
  // I14: s's counts stored into its PM header, persisted, fenced. REQUIRES: the table lock
  // (shared: the counts only change under the exclusive lock; concurrent publishers store the
  // same words).
  void PublishCounts(SegMeta* s);
  void StoreCounts(SegMeta* s);  // the header's counts stored and flushed, no fence
  // I14: every segment with unpublished counts, one fence. REQUIRES: exclusive (or recovery).
  void PublishAllCounts();

  SegMeta* NewSegMeta(uint64_t off, uint32_t depth) const;
  void DeleteAll();
  void FreeDram() { DeleteAll(); }  // at destruction (PMHASH_ENGINE)

  const uint64_t max_directory_bytes_;
  const uint64_t seg_chunks_;
  // Emptied log blocks are unlinked once they are 1/empty_batch_ of the sealed log blocks (0: at
  // each seal). Under ADR an unlink's store is a media write, and batches make runs: at 2M keys, 4
  // logs, media writes per insert 0.331 (at once) -> 0.296 (4) -> 0.289 (2), for 3% (4) and
  // 11% (2) more pool; 1 log: 0.295 -> 0.253 -> 0.247 (docs/results.md). Under eADR and in DRAM
  // the store stays in the cache and the batch only holds blocks and their shadows longer (10M
  // keys, eADR: 0.223 -> 0.231 media writes per insert, erase 1.12 -> 1.20 persists).
  static constexpr uint32_t kAdrEmptyBatch = 4;
  const uint32_t empty_batch_;
  uint32_t log_bits_ = 0;
  uint32_t stripe_bits_ = 0;
  const bool writer_;  // writer logs (W1)
  // Writer logs: the log the next thread to append for the first time gets (its home log).
  std::atomic<uint32_t> next_writer_{0};
  uint64_t tombstone_[2] = {0, 0};

  mutable detail::TableLock table_mu_;
  uint32_t gd_ = 0;
  std::vector<SegMeta*> dir_;
  std::unique_ptr<LogState[]> logs_;
  std::unique_ptr<Stripe[]> stripes_;  // null unless lock_stripes > logs or writer logs
  mutable SpinLock empty_mu_;
  // Sealed blocks left without items, linked until their batch (SweepEmptyBlocks, I8).
  std::vector<BlockInfo*> empty_blocks_;
  BlockInfo* unlinked_ = nullptr;  // unlinked blocks that shadow entries still name (I13)
  // I14: segments whose counts a relocation raised in DRAM only (the flag may have been
  // cleared since by an update's publish), each once. Under the exclusive lock.
  std::vector<SegMeta*> unpublished_;
  // Under the exclusive lock: a relocation's items (scratch_[0]), a split's two segment images.
  std::vector<uint64_t> scratch_[2];

  std::atomic<uint64_t> log_swaps_{0}, relocations_{0}, relocated_items_{0}, dups_dropped_{0},
      blocks_freed_{0}, block_unlinks_{0}, segments_{0}, blocks_{0}, compactions_{0},
      line_moves_{0}, stale_cleared_{0},  // shadows cleared by an update or erase (I13)
      torn_dropped_{0},  // elimda-kv: unacknowledged appends whose record a crash tore (I11)
      writer_settle_seals_{0},  // opens that sealed the logs to settle the stripes (W1)
      count_publishes_{0};      // segment headers whose counts were published late (I14)
  // I13: shadow list entries (valid or not) and stale bits.
  std::atomic<uint64_t> shadow_entries_{0}, stale_slots_{0}, shadow_prunes_{0};

  std::unique_ptr<index::Records> records_;  // elimda-kv only (src/index/records.h)
  // elimda-kv only, after pool_ and records_: its destructor frees into them.
  std::unique_ptr<EpochManager> epoch_;
};

// ============================================================================================
// Implementation
// ============================================================================================

template <pm::PersistPolicy P, bool R>
ElimDA<P, R>::ElimDA(std::unique_ptr<pm::Pool> pool, const Config& config)
    : Base(std::move(pool), config),
      max_directory_bytes_(config.DirectoryBudget(pool_->size())),
      seg_chunks_(SegmentChunks(config)),
      empty_batch_(config.empty_block_batch.value_or(P::kWritesBack ? kAdrEmptyBatch : 0)),
      writer_(config.writer_logs != 0) {
  if constexpr (R) {
    index::MakeRecords(*pool_, config.reclaim_batch, config.max_record_bytes, kKindName, &epoch_,
                       &records_, /*checked=*/true);
  }
}

template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::DeleteAll() {
  for (size_t i = 0; i < dir_.size();) {
    SegMeta* s = dir_[i];
    if (s == nullptr) {  // a recovery that failed part way leaves the rest of the entries empty
      i++;
      continue;
    }
    i += size_t{1} << (gd_ - s->depth);
    delete s;
  }
  dir_.clear();
  unpublished_.clear();
  if (logs_) {
    for (uint32_t i = 0; i < params_.logs; i++) {
      for (BlockInfo* b = logs_[i].head; b;) {
        BlockInfo* o = b->older;
        delete b;
        b = o;
      }
      logs_[i].head = nullptr;
      logs_[i].head_off = 0;
      logs_[i].mirror_of = nullptr;
      logs_[i].mirror_bits = 0;
    }
  }
  empty_blocks_.clear();
  shadow_entries_.store(0, std::memory_order_relaxed);
  stale_slots_.store(0, std::memory_order_relaxed);
  while (unlinked_) {
    BlockInfo* o = unlinked_->older;
    delete unlinked_;
    unlinked_ = o;
  }
}

template <pm::PersistPolicy P, bool R>
typename ElimDA<P, R>::SegMeta* ElimDA<P, R>::NewSegMeta(uint64_t off, uint32_t depth) const {
  auto* s = new (std::nothrow) SegMeta;
  if (!s) return nullptr;
  s->off = off;
  s->depth = depth;
  s->count.assign(params_.segment_buckets, 0);
  s->fp.assign(size_t{params_.segment_buckets} * params_.bucket_items, 0);
  s->dbucket.resize(params_.segment_buckets);
  s->dfp.resize(params_.segment_buckets);
  s->shadow.resize(params_.segment_buckets);
  s->shadowed = std::vector<std::atomic<uint64_t>>(
      (size_t{params_.segment_buckets} * params_.bucket_items + 63) / 64);  // zeroed
  return s;
}

template <pm::PersistPolicy P, bool R>
Status ElimDA<P, R>::Init() {
  const uint32_t stripes = params_.lock_stripes;
  if (stripes < 1 || stripes > (1u << 20) || !std::has_single_bit(stripes)) {
    return Status::InvalidArgument("elimda: lock_stripes must be a power of 2 in [1, 2^20]");
  }
  log_bits_ = static_cast<uint32_t>(std::countr_zero(params_.logs));
  logs_.reset(new (std::nothrow) LogState[params_.logs]);
  if (!logs_) return Status::OutOfMemory("elimda: log states");
  if (stripes > params_.logs || writer_) {
    // Writer logs need a stripe per key to remember its log (W1): at least two, so that the
    // stripe is the hash's top bits.
    const uint32_t n = std::max(stripes, 2u);
    stripe_bits_ = static_cast<uint32_t>(std::countr_zero(n));
    stripes_.reset(new (std::nothrow) Stripe[n]);
    if (!stripes_) return Status::OutOfMemory("elimda: lock stripes");
    if (writer_) {  // a new pool's stripes have nothing logged; an open settles them (W1)
      for (uint32_t i = 0; i < n; i++) stripes_[i].last_block = Stripe::kNone;
    }
  }
  if constexpr (R) {  // the key word is the hash: 0 and 2^63 (I6)
    tombstone_[0] = 0;
    tombstone_[1] = uint64_t{1} << 63;
    return Status::OK();
  }
  // Tombstone keys (I6): the first keys whose hash has top bit 0 / 1.
  bool have[2] = {false, false};
  for (uint64_t k = 0; !(have[0] && have[1]); k++) {
    const uint64_t t = hash_(k) >> 63;
    if (!have[t]) {
      tombstone_[t] = k;
      have[t] = true;
    }
  }
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
Status ElimDA<P, R>::Create() {
  const uint32_t gd = params_.initial_depth;
  const uint64_t n = uint64_t{1} << gd;
  auto table = pool_->allocator().Allocate(static_cast<uint32_t>(LogTableChunks(params_)));
  if (!table.ok()) return table.status();
  {
    auto* words = pool_->template At<std::atomic<uint64_t>>(table.value());
    for (uint32_t i = 0; i < params_.logs; i++) words[i].store(0, std::memory_order_relaxed);
    persist_.Flush(words, uint64_t{params_.logs} * 8);
  }
  // Segments, last first so each can name its successor.
  uint64_t next = 0;
  std::vector<uint64_t> offs(n);
  for (uint64_t i = 0; i < n; i++) {
    auto off = pool_->allocator().Allocate(static_cast<uint32_t>(seg_chunks_));
    if (!off.ok()) return off.status();
    offs[i] = off.value();
  }
  for (uint64_t i = n; i-- > 0;) {
    auto* h = pool_->template At<SegHeader>(offs[i]);
    h->tag_depth.store(SegWord(gd), std::memory_order_relaxed);
    h->next.store(next, std::memory_order_relaxed);
    for (auto& c : h->count) c.store(0, std::memory_order_relaxed);
    persist_.Flush(h, sizeof(SegHeader));
    next = offs[i];
  }
  persist_.Fence();
  pool_->SetRoot(1, table.value());
  pool_->SetRoot(0, offs[0]);
  return pool_->CommitCreate();
}

template <pm::PersistPolicy P, bool R>
Status ElimDA<P, R>::Recover() {
  DeleteAll();
  auto& alloc = pool_->allocator();
  if constexpr (R) records_->Reset();
  auto bad = [](const std::string& what) { return Status::Corruption("elimda: " + what); };

  // Log table.
  const uint64_t table = pool_->root(1);
  const uint32_t table_chunks = static_cast<uint32_t>(LogTableChunks(params_));
  if (!alloc.ValidChunk(table, table_chunks)) {
    return bad("log table offset " + std::to_string(table));
  }
  PMHASH_RETURN_IF_ERROR(alloc.MarkReachable(table, table_chunks));

  // Walk 1: the segment chain, in prefix order; the ranges must tile the hash space.
  std::vector<std::pair<uint64_t, uint32_t>> segs;
  long double covered = 0;
  uint32_t gd = 0;
  for (uint64_t off = pool_->root(0); off != 0;) {
    if (!alloc.ValidChunk(off, static_cast<uint32_t>(seg_chunks_))) {
      return bad("segment offset " + std::to_string(off) + " outside the heap or misaligned");
    }
    PMHASH_RETURN_IF_ERROR(alloc.MarkReachable(off, static_cast<uint32_t>(seg_chunks_)));
    const SegHeader* h = pool_->template At<SegHeader>(off);
    const uint64_t w = h->tag_depth.load(std::memory_order_relaxed);
    const uint32_t ld = static_cast<uint32_t>(w & 0xFF);
    if ((w >> 8) != kSegTag || ld < 1 || ld > params_.max_depth) {
      return bad("segment at " + std::to_string(off) + " has a bad header word");
    }
    for (uint32_t b = 0; b < params_.segment_buckets; b++) {
      if (h->count[b].load(std::memory_order_relaxed) > params_.bucket_items) {
        return bad("segment at " + std::to_string(off) + " has a bucket count over bucket_items");
      }
    }
    segs.emplace_back(off, ld);
    gd = std::max(gd, ld);
    covered += std::ldexp(1.0L, -static_cast<int>(ld));
    if (covered > 1.0L) return bad("segments cover more than the hash space");
    off = h->next.load(std::memory_order_relaxed);
  }
  if (segs.empty() || covered != 1.0L) return bad("segments do not tile the hash space");
  if ((uint64_t{8} << gd) > max_directory_bytes_) {
    return Status::OutOfSpace("elimda: a directory of 2^" + std::to_string(gd) +
                              " entries exceeds max_directory_bytes");
  }
  gd_ = gd;
  dir_.assign(size_t{1} << gd, nullptr);
  uint64_t live = 0;
  uint64_t i = 0;
  // elimda-kv: the large records live in the PM table (a slab record's is its marked slot).
  detail::IdentitySet pm_large(R ? 64 : 0);
  detail::IdentitySet seen(params_.bucket_items);
  for (const auto& [off, ld] : segs) {
    const uint64_t stride = uint64_t{1} << (gd - ld);
    if (i % stride != 0) return bad("segment chain out of prefix order");
    SegMeta* s = NewSegMeta(off, ld);
    if (!s) return Status::OutOfMemory("elimda: segment metadata");
    for (uint64_t e = i; e < i + stride; e++) dir_[e] = s;
    segments_.fetch_add(1, std::memory_order_relaxed);
    const uint64_t prefix = i >> (gd - ld);
    const SegHeader* h = Header(s);
    for (uint32_t b = 0; b < params_.segment_buckets; b++) {
      const uint32_t n = static_cast<uint32_t>(h->count[b].load(std::memory_order_relaxed));
      s->count[b] = n;
      const PmSlot* slots = BucketSlots(off, b);
      seen.Clear();
      for (uint32_t j = 0; j < n; j++) {
        const Key k = slots[j].key.load(std::memory_order_relaxed);
        const uint64_t v = slots[j].value.load(std::memory_order_relaxed);
        const uint64_t kh = SlotHash(k);
        // elimda-kv: the record 16 items ahead (a random miss each; the items are read in
        // order). Never faults, whatever the slot holds.
        if constexpr (R) {
          if (j + 16 < n) records_->Prefetch(slots[j + 16].value.load(std::memory_order_relaxed));
        }
        s->fp[size_t{b} * params_.bucket_items + j] = FpOf(kh);
        if ((kh >> (64 - ld)) == prefix && BucketOf(kh) == b &&
            seen.Insert(Identity(k, v))) {
          if constexpr (R) {
            PMHASH_RETURN_IF_ERROR(records_->Recover(v, k, hash_));
            if (records_->Large(v)) pm_large.Insert(v);
          }
          live++;
        }
      }
    }
    i += stride;
  }

  // Walk 2: the logs. Items of sealed blocks go to their D-buckets; a logged key that is live
  // in the PM table was relocated before the crash cleared its bit (I5): clear it now.
  // The identities of one log's items: a key logged twice is in one log (an item of another
  // log's key is refused below), so the set is cleared per log and stays in cache. elimda-kv:
  // the identity is the record, and the set spans every log (one record named by items of two
  // logs is refused: "logged twice"), so that a slab record whose slot is marked but by no
  // logged item was marked by the PM table's walk above: relocated (I5). (The walk above keeps
  // the large records it recovered: marked chunks do not tell a record from another owner.)
  detail::IdentitySet logged(4 * kBlockSlots);
  const auto* words = LogTable();
  uint64_t blocks = 0;
  for (uint32_t li = 0; li < params_.logs; li++) {
    if (!R && !writer_) logged.Clear();  // (writer logs: a key may be in any log)
    BlockInfo* newer = nullptr;
    for (uint64_t off = words[li].load(std::memory_order_relaxed); off != 0;) {
      if (!alloc.ValidChunk(off, 1)) return bad("log block offset " + std::to_string(off));
      PMHASH_RETURN_IF_ERROR(alloc.MarkReachable(off, 1));
      BlockInfo* bi = AppendBlockInfo(li, off, newer);
      if (!bi) return Status::OutOfMemory("elimda: log block metadata");
      newer = bi;
      blocks++;
      LogBlock* blk = Block(bi);
      uint64_t hdr = blk->header.load(std::memory_order_relaxed);
      if ((hdr >> 16) != kBlockTag || (hdr & 0xFFFF & ~uint64_t{kFullBits}) != 0) {
        return bad("log block at " + std::to_string(off) + " has a bad header word");
      }
      uint32_t bits = static_cast<uint32_t>(hdr & kFullBits);
      for (uint32_t c = bits; c; c &= c - 1) {
        const uint32_t j = static_cast<uint32_t>(std::countr_zero(c));
        const Key k = blk->slots[j].key.load(std::memory_order_relaxed);
        const uint64_t v = blk->slots[j].value.load(std::memory_order_relaxed);
        const uint64_t kh = SlotHash(k);
        if (!writer_ && LogOf(kh) != li) {
          return bad("log block at " + std::to_string(off) + " holds a key of another log");
        }
        SegMeta* s = SegOf(kh);  // the item's segment, bucket and fingerprint (PM table, D-bucket)
        const uint32_t b = BucketOf(kh);
        const uint16_t f = FpOf(kh);
        // Relocated (I5): its copy is live in the PM table (elimda-kv: the copy names the same
        // record; its bytes are not read before Records::Recover checked them).
        bool relocated;
        if constexpr (R) {
          relocated = records_->Large(v) ? pm_large.Contains(v)
                                         : records_->SlotMarked(v) && !logged.Contains(v);
        } else {
          Where w;  // only the PM table can hold the relocated copy: no other layer is searched
          relocated = LocatePm(Probe{kh, k, {}}, s, b, f, &w);
        }
        if (relocated) {
          bits &= ~(1u << j);
          continue;
        }
        if constexpr (R) {
          // I11: an append to the active block's first line whose record a crash tore was not
          // acknowledged: drop it (its bit is cleared durably below, its slot is free). An
          // offset outside the heap is no tear (the item holds it): Recover refuses it below.
          if (bi == logs_[li].head && j < kFirstLineSlots && records_->Plausible(v) &&
              !records_->Intact(v, k, hash_)) {
            bits &= ~(1u << j);
            torn_dropped_.fetch_add(1, std::memory_order_relaxed);
            continue;
          }
        }
        if (!logged.Insert(Identity(k, v))) {
          return bad("key " + std::to_string(k) + " is logged twice");
        }
        if constexpr (R) PMHASH_RETURN_IF_ERROR(records_->Recover(v, k, hash_));
        live++;
        if (bi != logs_[li].head) s->Push(b, DItem{k, v, bi, j, 1}, f);
      }
      if (bits != (hdr & kFullBits)) {
        blk->header.store(BlockHeader(bits), std::memory_order_relaxed);
        persist_.Persist(&blk->header, 8);
      }
      if (bi != logs_[li].head) bi->live = static_cast<uint16_t>(bits);
      if (bits == 0 && bi != logs_[li].head) empty_blocks_.push_back(bi);
      off = blk->next.load(std::memory_order_relaxed);
    }
  }
  blocks_.store(blocks, std::memory_order_relaxed);
  SweepEmptyBlocks(/*all=*/true);
  for (uint32_t li = 0; li < params_.logs; li++) MirrorActiveBlock(&logs_[li]);
  size_.Reset(static_cast<int64_t>(live));
  return SettleWriterLogs();
}

template <pm::PersistPolicy P, bool R>
Status ElimDA<P, R>::SettleWriterLogs() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  if (!writer_) return Status::OK();
  const uint32_t n = 1u << stripe_bits_;
  auto settle = [&] {  // false if a stripe has items in two active blocks
    for (uint32_t i = 0; i < n; i++) stripes_[i].last_block = Stripe::kNone;
    for (uint32_t li = 0; li < params_.logs; li++) {
      const LogState& log = logs_[li];
      if (!log.head) continue;
      const LogBlock* blk = Block(log.head);
      const uint64_t hdr = blk->header.load(std::memory_order_relaxed);
      for (uint32_t c = static_cast<uint32_t>(hdr & kFullBits); c; c &= c - 1) {
        const uint32_t j = static_cast<uint32_t>(std::countr_zero(c));
        Stripe* st = StripeOf(SlotHash(blk->slots[j].key.load(std::memory_order_relaxed)));
        if (st->last_block != Stripe::kNone && st->last_log != li) return false;
        st->last_block = log.head_off;
        st->last_log = li;
      }
    }
    return true;
  };
  if (settle()) return Status::OK();
  for (uint32_t li = 0; li < params_.logs; li++) {
    PMHASH_RETURN_IF_ERROR(Seal(li, /*force=*/true));
  }
  writer_settle_seals_.fetch_add(1, std::memory_order_relaxed);
  return settle() ? Status::OK() : Status::Corruption("elimda: writer logs did not settle");
}

template <pm::PersistPolicy P, bool R>
typename ElimDA<P, R>::BlockInfo* ElimDA<P, R>::AppendBlockInfo(uint32_t li, uint64_t off,
                                                                BlockInfo* newer) {
  auto* bi = new (std::nothrow) BlockInfo;
  if (!bi) return nullptr;
  bi->off = off;
  bi->log = li;
  bi->newer = newer;
  if (newer) {
    newer->older = bi;
  } else {
    logs_[li].head = bi;
    logs_[li].head_off = off;
  }
  return bi;
}

// I12: live items, global depth, block and segment counts; then per log its blocks' offsets
// (newest first) and the active block's mirror; the sealed blocks awaiting the sweep; then per
// segment in prefix order its offset, depth and, per bucket, the count, the fingerprints of the
// slots below it and the live D-bucket items (elimda-kv: then the record heap's). What Recover
// derives from PM, without the reads.
template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::SaveState(pm::StateWriter& w) const {
  // The counts as the structures hold them (the load requires them to match what follows).
  uint64_t nblocks = 0, nsegs = 0;
  for (uint32_t li = 0; li < params_.logs; li++) {
    for (const BlockInfo* bi = logs_[li].head; bi; bi = bi->older) nblocks++;
  }
  for (size_t i = 0; i < dir_.size(); nsegs++) i += size_t{1} << (gd_ - dir_[i]->depth);
  w.Put<uint64_t>(Size());
  w.Put<uint32_t>(gd_);
  w.Put(nblocks);
  w.Put(nsegs);
  // Blocks are named by their position in the image. A block not listed (none is: every
  // BlockInfo is in its log's chain) gets an index the load refuses: it walks instead.
  std::unordered_map<const BlockInfo*, uint64_t> index;
  index.reserve(nblocks);
  auto index_of = [&](const BlockInfo* bi) {
    const auto it = index.find(bi);
    return it == index.end() ? nblocks : it->second;
  };
  for (uint32_t li = 0; li < params_.logs; li++) {
    const LogState& log = logs_[li];
    uint32_t n = 0;
    for (const BlockInfo* bi = log.head; bi; bi = bi->older) n++;
    w.Put(n);
    for (const BlockInfo* bi = log.head; bi; bi = bi->older) {
      index.emplace(bi, index.size());
      w.Put(bi->off);
    }
    if (n == 0) continue;
    // The mirror, or a flag asking the load to rebuild it from the block.
    w.Put<uint32_t>(log.mirror_of == log.head ? log.mirror_bits : kMirrorMissing);
    w.Put(log.mirror_fp);
  }
  w.Put<uint64_t>(empty_blocks_.size());
  for (const BlockInfo* bi : empty_blocks_) w.Put<uint64_t>(index_of(bi));
  for (size_t i = 0; i < dir_.size();) {
    const SegMeta* s = dir_[i];
    w.Put(s->off);
    w.Put(s->depth);
    for (uint32_t b = 0; b < params_.segment_buckets; b++) {
      w.Put(s->count[b]);
      w.Put(&s->fp[size_t{b} * params_.bucket_items], s->count[b] * sizeof(uint16_t));
      uint32_t nd = 0;
      for (const DItem& it : s->dbucket[b]) nd += it.live;
      w.Put(nd);
      for (const DItem& it : s->dbucket[b]) {
        if (it.live) w.Put(SavedItem{it.key, it.value, index_of(it.block) << 4 | it.slot});
      }
    }
    i += size_t{1} << (gd_ - s->depth);
  }
  if constexpr (R) records_->SaveState(w);
}

// I12: the DRAM table, fingerprints and log chains from the image, after the checks Recover
// makes of the structure (depths in range, segments tiling the directory within its budget,
// counts <= N_p, every segment, log block and the log table a heap chunk named once, each log's
// table word its first block) plus: every D-bucket item names a live slot (its bit set in the
// block's header) of a listed sealed block, no slot named twice, and the chunks named are exactly
// the loaded allocator's. No bucket or block is read but the log table and the headers of the
// blocks D-items name. (The sweep frees a sealed block once its bits are clear: a D-item naming
// a clear bit, a slot another D-item names, or the active block, whose items become D-items when
// it is sealed, would be left pointing at a freed block.)
template <pm::PersistPolicy P, bool R>
Status ElimDA<P, R>::LoadState(pm::StateReader& r) {
  DeleteAll();
  const pm::ChunkAllocator& alloc = pool_->allocator();
  const Status bad = Status::Corruption("elimda: saved state");
  uint64_t live = 0, nblocks = 0, nsegs = 0;
  uint32_t gd = 0;
  if (!r.Get(&live) || !r.Get(&gd) || !r.Get(&nblocks) || !r.Get(&nsegs)) return bad;
  if (gd < 1 || gd > params_.max_depth || (uint64_t{8} << gd) > max_directory_bytes_ ||
      nblocks > alloc.used_chunks() || nsegs == 0 || nsegs > alloc.used_chunks() / seg_chunks_) {
    return bad;
  }
  pm::ChunkSet named(alloc);
  const uint64_t table = pool_->root(1);
  if (!named.Add(table, static_cast<uint32_t>(LogTableChunks(params_)))) return bad;
  const auto* words = LogTable();
  std::vector<BlockInfo*> blocks;
  blocks.reserve(nblocks);
  for (uint32_t li = 0; li < params_.logs; li++) {
    LogState& log = logs_[li];
    uint32_t n = 0;
    if (!r.Get(&n) || n > nblocks - blocks.size()) return bad;
    BlockInfo* newer = nullptr;
    for (uint32_t x = 0; x < n; x++) {
      uint64_t off = 0;
      if (!r.Get(&off) || !named.Add(off)) return bad;
      BlockInfo* bi = AppendBlockInfo(li, off, newer);
      if (!bi) return Status::OutOfMemory("elimda: log block metadata");
      newer = bi;
      blocks.push_back(bi);
    }
    if (words[li].load(std::memory_order_relaxed) != log.head_off) return bad;
    if (n == 0) continue;
    uint32_t bits = 0;
    if (!r.Get(&bits) || !r.Get(&log.mirror_fp)) return bad;
    if (bits == kMirrorMissing) {
      MirrorActiveBlock(&log);
    } else if ((bits & ~kFullBits) != 0) {
      return bad;
    } else {
      log.mirror_of = log.head;
      log.mirror_bits = bits;
    }
  }
  if (blocks.size() != nblocks) return bad;
  uint64_t nempty = 0;
  if (!r.Get(&nempty) || nempty > nblocks) return bad;
  for (uint64_t x = 0; x < nempty; x++) {
    uint64_t e = 0;
    if (!r.Get(&e) || e >= nblocks) return bad;
    empty_blocks_.push_back(blocks[e]);
  }
  std::vector<uint16_t> named_slots(nblocks);  // per block, the slots D-items name
  static_assert(kBlockSlots <= 16);
  gd_ = gd;
  dir_.assign(size_t{1} << gd, nullptr);
  uint64_t i = 0, segs = 0;
  while (i < dir_.size()) {
    uint64_t off = 0;
    uint32_t ld = 0;
    if (!r.Get(&off) || !r.Get(&ld) || ld < 1 || ld > gd) return bad;
    const uint64_t stride = uint64_t{1} << (gd - ld);
    if (i % stride != 0 || ++segs > nsegs) return bad;  // tiling is checked as Recover does
    if (!named.Add(off, static_cast<uint32_t>(seg_chunks_))) return bad;
    SegMeta* s = NewSegMeta(off, ld);
    if (!s) return Status::OutOfMemory("elimda: segment metadata");
    for (uint64_t e = i; e < i + stride; e++) dir_[e] = s;  // DeleteAll frees it on failure
    i += stride;
    for (uint32_t b = 0; b < params_.segment_buckets; b++) {
      uint32_t n = 0, nd = 0;
      if (!r.Get(&n) || n > params_.bucket_items ||
          !r.Get(&s->fp[size_t{b} * params_.bucket_items], n * sizeof(uint16_t)) ||
          !r.Get(&nd) || nd > r.remaining() / sizeof(SavedItem)) {
        return bad;
      }
      s->count[b] = n;
      s->dbucket[b].reserve(nd);
      s->dfp[b].reserve(nd);
      for (uint32_t x = 0; x < nd; x++) {
        SavedItem it;
        if (!r.Get(&it)) return bad;
        const uint64_t blk = it.block_slot >> 4;
        const uint32_t slot = static_cast<uint32_t>(it.block_slot & 15);
        if (blk >= nblocks || slot >= kBlockSlots) return bad;
        BlockInfo* bi = blocks[blk];
        const auto bit = static_cast<uint16_t>(1u << slot);
        if (bi == logs_[bi->log].head || (named_slots[blk] & bit) != 0 ||
            (Block(bi)->header.load(std::memory_order_relaxed) & bit) == 0) {
          return bad;
        }
        named_slots[blk] |= bit;
        s->Push(b, DItem{it.key, it.value, bi, slot, 1}, FpOf(SlotHash(it.key)));
      }
    }
  }
  if (segs != nsegs) return bad;
  for (uint64_t x = 0; x < nblocks; x++) blocks[x]->live = named_slots[x];  // no stale bit (I13)
  if constexpr (R) {
    if (!records_->LoadState(r, live,
                             [&named](uint64_t o, uint32_t n) { return named.Add(o, n); }) ||
        !named.AllocatorHasAll() ||
        alloc.used_chunks() != named.count() + records_->large_chunks()) {
      return bad;  // a leak, a chunk the bitmap lacks, or records no item names
    }
  } else if (!named.EqualsAllocator()) {
    return bad;
  }
  segments_.store(nsegs, std::memory_order_relaxed);
  blocks_.store(nblocks, std::memory_order_relaxed);
  size_.Reset(static_cast<int64_t>(live));
  return SettleWriterLogs();  // (reads the named active blocks' keys; a Seal writes PM)
}

template <pm::PersistPolicy P, bool R>
bool ElimDA<P, R>::ItemMatches(const DItem& it, const Probe& p) const {
  if constexpr (R) {
    return it.key == p.h && records_->KeyEquals(it.value, p.s);
  } else {
    return it.key == p.k;
  }
}

template <pm::PersistPolicy P, bool R>
bool ElimDA<P, R>::LocatePm(const Probe& p, SegMeta* s, uint32_t b, uint16_t f,
                            Where* w) const {
  const uint32_t n = s->count[b];
  const uint16_t* fps = &s->fp[size_t{b} * params_.bucket_items];
  const PmSlot* slots = BucketSlots(s->off, b);
  // Sixteen fingerprints per step (the bucket's fingerprint array has bucket_items >= 16
  // entries, a multiple of 16, so a load never leaves it); PM is read on a match only.
  for (uint32_t base = 0; base < n; base += 16) {
    uint32_t m = Match16Wide(fps + base, f);
    if (n - base < 16) m &= (1u << (n - base)) - 1;
    for (; m; m &= m - 1) {  // bit i: lane base + i
      const uint32_t j = base + static_cast<uint32_t>(std::countr_zero(m));
      if (Keys::Matches(records_.get(), slots[j], p)) {
        w->layer = Layer::kPm;
        w->seg = s;
        w->b = b;
        w->j = j;
        return true;  // the oldest copy: the first-inserted value wins
      }
    }
  }
  return false;
}

template <pm::PersistPolicy P, bool R>
typename ElimDA<P, R>::Where ElimDA<P, R>::Locate(const Probe& p) const {
  Where w;
  if (!LocateTables(p, &w)) LocateLog(p, &w);
  return w;
}

template <pm::PersistPolicy P, bool R>
bool ElimDA<P, R>::LocateTables(const Probe& p, Where* out) const {
  const uint64_t h = p.h;
  Where& w = *out;
  SegMeta* s = SegOf(h);
  const uint32_t b = BucketOf(h);
  const uint16_t f = FpOf(h);
  if (LocatePm(p, s, b, f, &w)) return true;
  // The D-bucket: its fingerprints first (2 B per item, sixteen per step while sixteen remain),
  // an item only on a match.
  const std::vector<uint16_t>& dfp = s->dfp[b];
  const size_t nd = dfp.size();
  auto dram_hit = [&](size_t i) {
    DItem& it = s->dbucket[b][i];
    if (!it.live || !ItemMatches(it, p)) return false;
    w.layer = Layer::kDram;
    w.item = &it;
    return true;
  };
  size_t i = 0;
  for (; i + 16 <= nd; i += 16) {
    for (uint32_t m = Match16Wide(dfp.data() + i, f); m; m &= m - 1) {
      if (dram_hit(i + static_cast<size_t>(std::countr_zero(m)))) return true;
    }
  }
  for (; i < nd; i++) {
    if (dfp[i] == f && dram_hit(i)) return true;
  }
  return false;
}

template <pm::PersistPolicy P, bool R>
bool ElimDA<P, R>::LocateLog(const Probe& p, Where* out) const {
  const uint64_t h = p.h;
  const uint16_t f = FpOf(h);
  Where& w = *out;
  const LogState& log = PendingLog(h);
  if (BlockInfo* bi = log.head) {
    uint32_t candidates = kFullBits;
    if (log.mirror_of == bi) {  // the mirror: PM is read on a fingerprint match only
      candidates = 0;
      for (uint32_t c = log.mirror_bits; c; c &= c - 1) {
        const uint32_t j = static_cast<uint32_t>(std::countr_zero(c));
        if (log.mirror_fp[j] == f) candidates |= 1u << j;
      }
      if (candidates == 0) return false;
    }
    const LogBlock* blk = Block(bi);
    for (uint32_t c = blk->header.load(std::memory_order_acquire) & candidates; c; c &= c - 1) {
      const uint32_t j = static_cast<uint32_t>(std::countr_zero(c));
      if (Keys::Matches(records_.get(), blk->slots[j], p)) {
        w.layer = Layer::kLog;
        w.block = bi;
        w.j = j;
        return true;
      }
    }
  }
  return false;
}

template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::MirrorActiveBlock(LogState* log) const {
  log->mirror_of = log->head;
  log->mirror_bits = 0;
  if (!log->head) return;
  const LogBlock* blk = Block(log->head);
  const uint32_t bits =
      static_cast<uint32_t>(blk->header.load(std::memory_order_relaxed) & kFullBits);
  for (uint32_t c = bits; c; c &= c - 1) {
    const uint32_t j = static_cast<uint32_t>(std::countr_zero(c));
    log->mirror_fp[j] = FpOf(SlotHash(blk->slots[j].key.load(std::memory_order_relaxed)));
  }
  log->mirror_bits = bits;
}

template <pm::PersistPolicy P, bool R>
bool ElimDA<P, R>::Search(const Probe& p, uint64_t* word) const {
  SharedLockGuard<detail::TableLock> g(table_mu_);
  LockGuard<detail::LogLock> sg(StripeLock(p.h));
  Where w;
  if (LocateTables(p, &w)) {
    *word = w.layer == Layer::kPm
                ? BucketSlots(w.seg->off, w.b)[w.j].value.load(std::memory_order_relaxed)
                : w.item->value;
    return true;
  }
  // The active block: other stripes' appends may move its items (I3').
  LogState& log = PendingLog(p.h);
  if (!MayBeInActiveBlock(p.h, log)) return false;
  detail::LogSection ls(log.mu, shared_logs());
  if (!LocateLog(p, &w)) return false;
  *word = Block(w.block)->slots[w.j].value.load(std::memory_order_relaxed);
  return true;
}

template <pm::PersistPolicy P, bool R>
int ElimDA<P, R>::LayerOf(Key k) const {
  const index::U64Bytes bytes(k);
  const Probe p = U64Probe(k, bytes);
  SharedLockGuard<detail::TableLock> g(table_mu_);
  LockGuard<detail::LogLock> sg(StripeLock(p.h));
  detail::LogSection ls(PendingLog(p.h).mu, shared_logs());
  return static_cast<int>(Locate(p).layer);
}

template <pm::PersistPolicy P, bool R>
uint64_t ElimDA<P, R>::PmSlotOffsetForTest(Key k) const {
  const index::U64Bytes bytes(k);
  const Probe p = U64Probe(k, bytes);
  SharedLockGuard<detail::TableLock> g(table_mu_);
  LockGuard<detail::LogLock> sg(StripeLock(p.h));
  Where w;
  if (!LocateTables(p, &w) || w.layer != Layer::kPm) return 0;
  return pool_->OffsetOf(&BucketSlots(w.seg->off, w.b)[w.j]);
}

template <pm::PersistPolicy P, bool R>
Status ElimDA<P, R>::AppendCopyForTest(Key k, Value v)
  requires(!R)
{
  const uint64_t h = hash_(k);
  LockGuard<detail::TableLock> g(table_mu_);
  const Where w = Locate(MakeProbe(k));
  if (w.layer != Layer::kPm) return Status::InvalidArgument("elimda: key not in the PM table");
  SegMeta* s = w.seg;
  const uint32_t j = s->count[w.b];
  if (j >= params_.bucket_items) return Status::OutOfSpace("elimda: P-bucket full");
  PmSlot& slot = BucketSlots(s->off, w.b)[j];
  slot.value.store(v, std::memory_order_relaxed);
  slot.key.store(k, std::memory_order_relaxed);
  persist_.Persist(&slot, sizeof(PmSlot));
  Header(s)->count[w.b].store(j + 1, std::memory_order_release);
  persist_.Persist(&Header(s)->count[w.b], sizeof(uint64_t));
  s->fp[size_t{w.b} * params_.bucket_items + j] = FpOf(h);
  s->count[w.b] = j + 1;
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
uint32_t ElimDA<P, R>::global_depth() const {
  SharedLockGuard<detail::TableLock> g(table_mu_);
  return gd_;
}

// An append (I2, I3). tear_safe: the lowest free slot, its item persisted before the header
// store that sets its bit (two fences). Otherwise the item goes to the block's first line, where
// the header is, so that one flush and one fence persist both (I3'): when that line's three slots
// are taken, their items are first copied to free slots of the other lines and persisted (still
// invisible: their bits are clear), then the header moves them there by one 8-byte store, which
// frees the line, and the new item and its bit follow in it (two fences, once per three appends
// at most). Every intermediate version of the first line is consistent: a slot is overwritten
// only after a header store has cleared its bit, and the bit is set only after the item is in.
template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::Append(LogState* log, LogBlock* blk, uint64_t hdr, uint64_t h, Key k, Value v) {
  uint32_t bits = static_cast<uint32_t>(hdr & kFullBits);
  const bool mirrored = log->mirror_of == log->head;
  auto put = [&](uint32_t j, Key key, Value value, uint16_t fp) {
    PmSlot& s = blk->slots[j];
    s.value.store(value, std::memory_order_relaxed);
    s.key.store(key, std::memory_order_release);
    if (mirrored) log->mirror_fp[j] = fp;
  };
  if (!params_.tear_safe) {
    if ((bits & kFirstLineBits) == kFirstLineBits) {
      // Copy the first line's items to the lowest free slots of the other lines (as many as
      // there are: at least one, the block is not full), persist the copies, then one header
      // store moves them.
      uint32_t moved = bits, lo = kBlockSlots, hi = 0;
      for (uint32_t from = 0; from < kFirstLineSlots; from++) {
        const uint32_t to = static_cast<uint32_t>(std::countr_one(moved | kFirstLineBits));
        if (to >= kBlockSlots) break;
        const PmSlot& s = blk->slots[from];
        put(to, s.key.load(std::memory_order_relaxed), s.value.load(std::memory_order_relaxed),
            mirrored ? log->mirror_fp[from] : 0);
        moved = (moved | (1u << to)) & ~(1u << from);
        lo = std::min(lo, to);
        hi = to;
      }
      persist_.Flush(&blk->slots[lo], (hi - lo + 1) * sizeof(PmSlot));
      persist_.Fence();  // the copies are durable before the header names them
      line_moves_.fetch_add(1, std::memory_order_relaxed);
      bits = moved;
      blk->header.store(BlockHeader(bits), std::memory_order_release);
    }
    // The first line has a free slot now: the lowest free slot of the block.
    const uint32_t j = static_cast<uint32_t>(std::countr_one(bits));
    put(j, k, v, FpOf(h));
    bits |= 1u << j;
    blk->header.store(BlockHeader(bits), std::memory_order_release);  // I3': commit
    persist_.Persist(blk, kFirstLineBytes);  // the item and its bit: one line, one flush
    if (mirrored) log->mirror_bits = bits;
    return;
  }
  const uint32_t j = static_cast<uint32_t>(std::countr_one(bits));
  put(j, k, v, FpOf(h));
  persist_.Persist(&blk->slots[j], sizeof(PmSlot));  // I2: the item before its bit
  bits |= 1u << j;
  blk->header.store(BlockHeader(bits), std::memory_order_release);  // I3: commit
  persist_.Persist(&blk->header, sizeof(uint64_t));
  if (mirrored) log->mirror_bits = bits;
}

template <pm::PersistPolicy P, bool R>
Status ElimDA<P, R>::Write(const Probe& p, std::string_view value_bytes, Value value,
                           WriteMode mode) {
  const uint64_t h = p.h;
  uint32_t li = LogOf(h);  // the log to append to (writer logs: chosen under the stripe lock)
  // The value word to store: the value, or a new record's offset. An update's record is fenced
  // before the value store that publishes it; an append's checked record is persisted by the
  // append's own fence (I11).
  uint64_t v = 0;
  auto value_word = [&] {
    return index::ValueWord<R>(records_.get(), p.s, value_bytes, value, persist_, &v);
  };
  auto append_word = [&]() -> Status {
    if constexpr (R) {
      Result<uint64_t> rec = records_->NewChecked(p.s, value_bytes, h, hash_, persist_);
      if (!rec.ok()) return rec.status();
      v = rec.value();
    } else {
      v = value;
    }
    return Status::OK();
  };
  // An update in place: one failure-atomic 8-byte store where the item is persistent, one
  // persist (the DRAM copy of a D-bucket item follows).
  auto publish = [&](std::atomic<uint64_t>* cell, DItem* item) {
    const uint64_t old = cell->load(std::memory_order_relaxed);
    cell->store(v, std::memory_order_release);
    persist_.Persist(cell, sizeof(Value));
    if (item) item->value = v;
    if constexpr (R) records_->Retire(old);
    return Status::OK();
  };
  for (;;) {
    {
      SharedLockGuard<detail::TableLock> g(table_mu_);
      LockGuard<detail::LogLock> sg(StripeLock(h));
      // The key's items in an active block are in its pending log's (W1, or its hash's log). An
      // append goes there too while they may be (writer logs: else to the thread's log).
      const uint32_t pending = PendingLogOf(h);
      const bool may_be_logged = MayBeInActiveBlock(h, logs_[pending]);
      li = writer_ && !may_be_logged ? WriterLog() : pending;
      LogState& log = logs_[li];
      // An insert appends to the active block's first line: start that miss before the search's.
      if (log.head_off) __builtin_prefetch(pool_->template At<LogBlock>(log.head_off), 1);
      Where w;
      if (LocateTables(p, &w)) {
        if (mode == WriteMode::kInsert) return Status::Exists();
        PMHASH_RETURN_IF_ERROR(value_word());
        if (w.layer == Layer::kDram) {  // a sealed block's slot: no append moves it
          return publish(&Block(w.item->block)->slots[w.item->slot].value, w.item);
        }
        // I14: an in-place write needs its slot below the PM count, where recovery reads it.
        if (w.seg->unpublished.load(std::memory_order_acquire)) PublishCounts(w.seg);
        // I13, elimda-kv: the shadow names the old record, which recovery would no longer find
        // in the PM table: its bit is cleared, durably, before the new record is published.
        // (elimda: the shadow holds the key, which stays live in the PM table; it is left, and
        // an erase clears it first.)
        if constexpr (R) {
          if (ClearShadow(w.seg, w.b, w.j)) persist_.Fence();
        }
        return publish(&BucketSlots(w.seg->off, w.b)[w.j].value, nullptr);
      }
      // The active block, which other stripes' appends share (I3' moves items in it).
      detail::LogSection ls(log.mu, shared_logs());
      if (may_be_logged && LocateLog(p, &w)) {
        if (mode == WriteMode::kInsert) return Status::Exists();
        PMHASH_RETURN_IF_ERROR(value_word());
        return publish(&Block(w.block)->slots[w.j].value, nullptr);
      }
      if (mode == WriteMode::kUpdate) return Status::NotFound();
      if (log.head_off) {
        LogBlock* blk = pool_->template At<LogBlock>(log.head_off);
        const uint64_t hdr = blk->header.load(std::memory_order_relaxed);
        if ((hdr & kFullBits) != kFullBits) {
          PMHASH_RETURN_IF_ERROR(append_word());
          Append(&log, blk, hdr, h, Keys::KeyWord(p), v);
          if (Stripe* st = StripeOf(h)) {
            st->last_block = log.head_off;
            st->last_log = li;
          }
          size_.Add(1);
          return Status::OK();
        }
      }
    }
    PMHASH_RETURN_IF_ERROR(Seal(li));  // no active block, or a full one: swap in a new one
  }
}

template <pm::PersistPolicy P, bool R>
Status ElimDA<P, R>::EraseProbe(const Probe& p) {
  const uint64_t h = p.h;
  SharedLockGuard<detail::TableLock> g(table_mu_);
  LockGuard<detail::LogLock> sg(StripeLock(h));
  Where w;
  if (LocateTables(p, &w) && w.layer == Layer::kPm) {
    // Every copy, newest first, so that a crash in between leaves the oldest (the value Find
    // returns) in place (I6).
    SegMeta* s = w.seg;
    PmSlot* slots = BucketSlots(s->off, w.b);
    const uint64_t t = Tombstone(h >> 63);
    const uint16_t f = FpOf(h);
    // elimda-kv: the records of the copies (one; two only in a pool written by another
    // implementation: Insert refuses a present key, so a key has one record).
    uint64_t records[2] = {0, 0};
    for (uint32_t j = s->count[w.b]; j-- > w.j;) {
      if (s->fp[size_t{w.b} * params_.bucket_items + j] != f) continue;
      if (!Keys::Matches(records_.get(), slots[j], p)) continue;
      // I13: the copy's shadow bit is cleared before its tombstone. elimda-kv: flushed with it,
      // one fence (a crash that keeps only the tombstone brings the key back from its shadow
      // with the record it has in the PM table, since updates clear shadows: the erase did not
      // happen). elimda: fenced first (an update leaves the shadow with an older value).
      if (ClearShadow(s, w.b, j) && !R) persist_.Fence();
      if constexpr (R) {
        const uint64_t r = slots[j].value.load(std::memory_order_relaxed);
        if (r != records[0] && r != records[1]) records[records[0] ? 1 : 0] = r;
      }
      slots[j].key.store(t, std::memory_order_release);
      persist_.Persist(&slots[j].key, sizeof(Key));
    }
    if constexpr (R) {
      for (const uint64_t r : records) {
        if (r) records_->Retire(r);
      }
    }
    size_.Add(-1);
    return Status::OK();
  }
  // A logged item: its block's header word and DRAM bits are the log's (other stripes' erases
  // and appends write them): the sealed block's log, or the pending log (W1).
  LogState& log = w.layer == Layer::kDram ? logs_[w.item->block->log] : PendingLog(h);
  if (w.layer == Layer::kNone && !MayBeInActiveBlock(h, log)) return Status::NotFound();
  detail::LogSection ls(log.mu, shared_logs());
  if (w.layer == Layer::kNone && !LocateLog(p, &w)) return Status::NotFound();
  BlockInfo* bi = w.layer == Layer::kDram ? w.item->block : w.block;
  const uint32_t j = w.layer == Layer::kDram ? w.item->slot : w.j;
  LogBlock* blk = Block(bi);
  const uint64_t hdr = blk->header.load(std::memory_order_relaxed) & ~(uint64_t{1} << j);
  blk->header.store(hdr, std::memory_order_release);
  persist_.Persist(&blk->header, sizeof(uint64_t));
  if (log.mirror_of == bi) log.mirror_bits &= ~(1u << j);
  if (w.layer == Layer::kDram) {
    w.item->live = 0;
    bi->live = static_cast<uint16_t>(bi->live & ~(1u << j));
    if (bi->live == 0 && bi != log.head) {
      LockGuard<SpinLock> eg(empty_mu_);
      empty_blocks_.push_back(bi);
    }
  }
  if constexpr (R) records_->Retire(blk->slots[j].value.load(std::memory_order_relaxed));
  size_.Add(-1);
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
Status ElimDA<P, R>::Seal(uint32_t li, bool force) PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  LockGuard<detail::TableLock> g(table_mu_);
  LogState& log = logs_[li];
  BlockInfo* old = log.head;
  if (old) {
    const uint32_t bits =
        static_cast<uint32_t>(Block(old)->header.load(std::memory_order_relaxed) & kFullBits);
    if (force ? bits == 0 : bits != kFullBits) return Status::OK();  // another thread swapped
  } else if (force) {
    return Status::OK();
  }
  // (The batch of empty blocks is swept at the end: a full pool sweeps them all in Reclaim.)
  auto off = pool_->allocator().Allocate(1);
  if (!off.ok()) {
    Reclaim();
    off = pool_->allocator().Allocate(1);
    if (!off.ok()) return off.status();
  }
  auto* bi = new (std::nothrow) BlockInfo;
  if (!bi) {
    pool_->allocator().Free(off.value());
    return Status::OutOfMemory("elimda: log block metadata");
  }
  LogBlock* blk = pool_->template At<LogBlock>(off.value());
  blk->header.store(BlockHeader(0), std::memory_order_relaxed);
  blk->next.store(old ? old->off : 0, std::memory_order_relaxed);
  persist_.Persist(blk, 16);
  std::atomic<uint64_t>& word = LogTable()[li];
  word.store(off.value(), std::memory_order_release);  // I4: the swap's commit point
  persist_.Persist(&word, sizeof(uint64_t));
  bi->off = off.value();
  bi->log = li;
  bi->older = old;
  if (old) old->newer = bi;
  log.head = bi;
  log.head_off = bi->off;
  log.mirror_of = bi;  // a fresh block: no items
  log.mirror_bits = 0;
  blocks_.fetch_add(1, std::memory_order_relaxed);
  if (!old) return Status::OK();
  log_swaps_.fetch_add(1, std::memory_order_relaxed);

  // The sealed block's items enter the DRAM table; full D-buckets are relocated.
  const LogBlock* sealed = Block(old);
  const uint32_t bits =
      static_cast<uint32_t>(sealed->header.load(std::memory_order_relaxed) & kFullBits);
  old->live = static_cast<uint16_t>(bits);
  uint64_t hashes[kBlockSlots];
  uint32_t nh = 0;
  for (uint32_t c = bits; c; c &= c - 1) {
    const uint32_t j = static_cast<uint32_t>(std::countr_zero(c));
    const Key k = sealed->slots[j].key.load(std::memory_order_relaxed);
    const uint64_t h = SlotHash(k);
    SegOf(h)->Push(BucketOf(h),
                   DItem{k, sealed->slots[j].value.load(std::memory_order_relaxed), old, j, 1},
                   FpOf(h));
    hashes[nh++] = h;
  }
  // eADR: the full block's item lines go to the media now, together, rather than as lines the
  // cache evicts apart (a hint: nothing under ADR, where each append was flushed). After the
  // reads above (clwb may evict the line). Not the header line, which appends kept dirty: left
  // to the cache, it is rewritten in place when the block's chunk is reused (2M keys: writing
  // it back too gave the same media writes at 256 B blocks, 0.744 instead of 0.680 at 64 B).
  if (params_.eadr_write_back) {
    persist_.WriteBack(reinterpret_cast<const char*>(sealed) + 64, kBlockBytes - 64);
  }
  if (bits == 0) {
    LockGuard<SpinLock> eg(empty_mu_);
    empty_blocks_.push_back(old);
  }
  for (uint32_t i = 0; i < nh; i++) {
    // Out of space for a split leaves the items where they are: logged and in the DRAM table.
    if (Status s = MakeRoom(hashes[i]); !s.ok() && !s.IsOutOfSpace()) return s;
  }
  SweepEmptyBlocks();
  return Status::OK();
}

// REQUIRES: exclusive. Relocates the D-bucket of h once it holds N_d live items, splitting the
// segment while the P-bucket has no room for them.
template <pm::PersistPolicy P, bool R>
Status ElimDA<P, R>::MakeRoom(uint64_t h) PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  for (;;) {
    SegMeta* s = SegOf(h);
    const uint32_t b = BucketOf(h);
    auto& d = s->dbucket[b];
    // Below N_d items, dead ones included, there is nothing to relocate: no need to scan the
    // D-bucket (this runs for every item a seal adds; the scan was a sixth of insert time).
    if (d.size() < params_.dbucket_items) return Status::OK();
    s->DropDead(b);
    if (d.size() < params_.dbucket_items) return Status::OK();
    if (s->count[b] + d.size() <= params_.bucket_items) {
      Relocate(s, b, d);
      return Status::OK();
    }
    Status st = Split(s, h);
    // Blocks waiting for their batch first: their chunks may make room.
    if (st.IsOutOfSpace() && SweepEmptyBlocks(/*all=*/true)) continue;
    if (st.IsOutOfSpace()) {
      // No room to grow: reuse the P-bucket's erased slots instead, if that makes room.
      Compact(s, b);
      if (s->count[b] + d.size() > params_.bucket_items) return st;
      Relocate(s, b, d);
      return Status::OK();
    }
    PMHASH_RETURN_IF_ERROR(st);
  }
}

// REQUIRES: exclusive. Out of space: compact every P-bucket that has D-bucket items waiting and
// relocate those items where they now fit, so that sealed log blocks empty and are freed.
template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::Reclaim() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  for (size_t i = 0; i < dir_.size();) {
    SegMeta* s = dir_[i];
    i += size_t{1} << (gd_ - s->depth);
    for (uint32_t b = 0; b < params_.segment_buckets; b++) {
      s->DropDead(b);
      auto& d = s->dbucket[b];
      if (d.empty()) continue;
      if (s->count[b] + d.size() > params_.bucket_items) Compact(s, b);
      if (s->count[b] + d.size() <= params_.bucket_items) Relocate(s, b, d);
    }
  }
  SweepEmptyBlocks(/*all=*/true);
}

// REQUIRES: exclusive. Moves the P-bucket's last live items into its dead slots (tombstones,
// later copies of a key), then lowers its count (the commit point, one 8-byte store). A moved
// item is written value first, then key, into a dead slot: until the count is lowered it is
// stored twice with the same value (I1 keeps the first copy; recovery and splits drop the
// second), never lost.
template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::Compact(SegMeta* s, uint32_t b) PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  if (s->unpublished.load(std::memory_order_relaxed)) PublishCounts(s);  // I14
  const uint32_t n = s->count[b];
  PmSlot* slots = BucketSlots(s->off, b);
  uint16_t* fps = &s->fp[size_t{b} * params_.bucket_items];
  size_t first = 0;
  while (first < dir_.size() && dir_[first] != s) first++;
  const uint64_t prefix = first >> (gd_ - s->depth);
  std::vector<bool> live(n, false);
  detail::IdentitySet seen(params_.bucket_items);
  uint32_t nlive = 0;
  for (uint32_t j = 0; j < n; j++) {
    const Key k = slots[j].key.load(std::memory_order_relaxed);
    live[j] = LiveIn(k, prefix, s->depth, b) &&
              seen.Insert(Identity(k, slots[j].value.load(std::memory_order_relaxed)));
    nlive += live[j];
  }
  if (nlive == n) return;
  // I13: where each live item ends up (dead ones: nowhere), for its shadow entry.
  std::vector<uint32_t> moved_to(n, UINT32_MAX);
  for (uint32_t j = 0; j < n; j++) {
    if (live[j]) moved_to[j] = j;
  }
  uint32_t dst = 0, src = n;
  for (;;) {
    while (dst < n && live[dst]) dst++;
    while (src > 0 && !live[src - 1]) src--;
    if (src == 0 || dst >= src - 1) break;
    const uint32_t from = src - 1;
    moved_to[from] = dst;
    slots[dst].value.store(slots[from].value.load(std::memory_order_relaxed),
                           std::memory_order_relaxed);
    slots[dst].key.store(slots[from].key.load(std::memory_order_relaxed),
                         std::memory_order_release);
    persist_.Flush(&slots[dst], sizeof(PmSlot));
    fps[dst] = fps[from];
    live[dst] = true;
    live[from] = false;
  }
  // I13: shadows renumbered (re-sorted); a dead item's valid shadow is cleared, flushed before
  // the fence below.
  std::vector<Shadow>& shadows = s->shadow[b];
  PruneShadows(&shadows);
  size_t kept = 0;
  for (const Shadow& e : shadows) {
    const uint32_t to = e.pos < n ? moved_to[e.pos] : UINT32_MAX;
    if (to == UINT32_MAX) {
      ClearStale(e.bi, 1u << e.slot);
      Unref(e.bi);
      continue;
    }
    shadows[kept++] = Shadow{e.bi, to, e.slot};
  }
  shadows.resize(kept);
  std::sort(shadows.begin(), shadows.end(),
            [](const Shadow& x, const Shadow& y) { return x.pos < y.pos; });
  for (uint32_t j = 0; j < n; j++) s->SetShadowed(size_t{b} * params_.bucket_items + j, false);
  for (const Shadow& e : shadows) s->SetShadowed(size_t{b} * params_.bucket_items + e.pos, true);
  persist_.Fence();
  SegHeader* hdr = Header(s);
  hdr->count[b].store(nlive, std::memory_order_release);
  persist_.Persist(&hdr->count[b], sizeof(uint64_t));
  s->count[b] = nlive;
  compactions_.fetch_add(1, std::memory_order_relaxed);
}

template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::Relocate(SegMeta* s, uint32_t b, std::vector<DItem>& items)
    PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  const uint32_t n = static_cast<uint32_t>(items.size());
  const uint32_t at = s->count[b];
  PmSlot* dst = BucketSlots(s->off, b) + at;
  std::vector<uint64_t>& img = scratch_[0];
  img.resize(size_t{n} * 2);
  for (uint32_t i = 0; i < n; i++) {
    img[2 * i] = items[i].key;
    img[2 * i + 1] = items[i].value;
  }
  persist_.NtCopy(dst, img.data(), size_t{n} * sizeof(PmSlot));
  persist_.Fence();  // the items are durable before a count names them (any thread's publish)
  if constexpr (P::kWritesBack) {
    // I14: the count is published later, with the segment's other counts (one media write for
    // all the relocations into the segment since), before a block these items leave is freed;
    // until then the items' log slots, whose bits stay set (I13), are what recovery finds.
    s->unpublished.store(true, std::memory_order_relaxed);
    if (!s->listed) {
      s->listed = true;
      unpublished_.push_back(s);
    }
  } else {
    SegHeader* hdr = Header(s);
    hdr->count[b].store(at + n, std::memory_order_release);  // I5: the relocation's commit point
    persist_.Persist(&hdr->count[b], sizeof(uint64_t));
  }
  for (uint32_t i = 0; i < n; i++) {
    s->fp[size_t{b} * params_.bucket_items + at + i] = FpOf(SlotHash(items[i].key));
  }
  s->count[b] = at + n;
  // The log slots are invalidated in DRAM only, as in the paper (its bitmap): their bits stay
  // set in PM, as shadows of the relocated items (I13), until an update or erase of the item,
  // or Close, clears them; recovery clears them by I5. A block whose items are all relocated
  // or erased is unlinked by the sweep.
  // Under the Dram policy nothing is recovered: the bits are cleared (no flush) and no shadow
  // is kept.
  std::vector<Shadow>& shadows = s->shadow[b];
  if constexpr (P::kPersistent) PruneShadows(&shadows);
  for (const DItem& it : items) {
    BlockInfo* const bi = it.block;
    const auto bit = static_cast<uint16_t>(1u << it.slot);
    bi->live = static_cast<uint16_t>(bi->live & ~bit);
    if constexpr (P::kPersistent) {
      const auto pos = static_cast<uint32_t>(&it - items.data()) + at;
      bi->stale |= bit;
      bi->refs++;
      shadows.push_back(Shadow{bi, pos, it.slot});
      s->SetShadowed(size_t{b} * params_.bucket_items + pos, true);
    } else {
      std::atomic<uint64_t>& word = Block(bi)->header;
      word.store(word.load(std::memory_order_relaxed) & ~uint64_t{bit}, std::memory_order_relaxed);
    }
    if (bi->live == 0 && bi != logs_[bi->log].head) {
      LockGuard<SpinLock> eg(empty_mu_);
      empty_blocks_.push_back(bi);
    }
  }
  if constexpr (P::kPersistent) {
    shadow_entries_.fetch_add(n, std::memory_order_relaxed);
    stale_slots_.fetch_add(n, std::memory_order_relaxed);
  }
  items.clear();
  s->dfp[b].clear();
  // Entries of unlinked blocks and cleared shadows are dropped only where a list is rewritten:
  // once they are half of all, every list is pruned (amortized: each entry once).
  if (shadow_entries_.load(std::memory_order_relaxed) >
      2 * stale_slots_.load(std::memory_order_relaxed) + 256) {
    for (size_t i = 0; i < dir_.size(); i += size_t{1} << (gd_ - dir_[i]->depth)) {
      for (auto& list : dir_[i]->shadow) PruneShadows(&list);
    }
    shadow_prunes_.fetch_add(1, std::memory_order_relaxed);
  }
  relocations_.fetch_add(1, std::memory_order_relaxed);
  relocated_items_.fetch_add(n, std::memory_order_relaxed);
}

template <pm::PersistPolicy P, bool R>
Status ElimDA<P, R>::Double() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  const auto started = ResizeLog::Now();
  if (gd_ >= params_.max_depth) {
    return Status::OutOfSpace("elimda: directory at max_depth " +
                              std::to_string(params_.max_depth) +
                              " and a bucket of that depth is full");
  }
  if ((uint64_t{8} << (gd_ + 1)) > max_directory_bytes_) {
    return Status::OutOfSpace("elimda: doubling the directory would exceed max_directory_bytes");
  }
  std::vector<SegMeta*> nd(dir_.size() * 2);
  for (size_t i = 0; i < dir_.size(); i++) nd[2 * i] = nd[2 * i + 1] = dir_[i];
  dir_.swap(nd);
  gd_++;
  doublings_.fetch_add(1, std::memory_order_relaxed);
  resize_log_.Record(started);
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
Status ElimDA<P, R>::Split(SegMeta* s, uint64_t h) PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  if (s->depth == gd_) PMHASH_RETURN_IF_ERROR(Double());
  const auto started = ResizeLog::Now();
  const uint32_t ld = s->depth;
  auto& alloc = pool_->allocator();
  auto a = alloc.Allocate(static_cast<uint32_t>(seg_chunks_));
  if (!a.ok()) return a.status();
  auto c = alloc.Allocate(static_cast<uint32_t>(seg_chunks_));
  if (!c.ok()) {
    alloc.Free(a.value(), static_cast<uint32_t>(seg_chunks_));
    return c.status();
  }
  SegMeta* half[2] = {NewSegMeta(a.value(), ld + 1), NewSegMeta(c.value(), ld + 1)};
  if (!half[0] || !half[1]) {
    delete half[0];
    delete half[1];
    alloc.Free(a.value(), static_cast<uint32_t>(seg_chunks_));
    alloc.Free(c.value(), static_cast<uint32_t>(seg_chunks_));
    return Status::OutOfMemory("elimda: segment metadata");
  }
  const uint64_t prefix = h >> (64 - ld);
  // The halves' images, built in the scratch buffers: only what is copied below is written (the
  // header whole; each bucket's items, and the rest of the line of its last one, zeroed).
  std::vector<uint64_t>* img = scratch_;
  for (int side = 0; side < 2; side++) img[side].resize(seg_chunks_ * kBlockBytes / 8);
  const SegHeader* old_hdr = Header(s);
  uint64_t dropped = 0;
  // Older to newer: the first live copy of a key is kept, later ones dropped (paper 3.5).
  // I13: each item's shadow entries follow it to its new position (the lists stay sorted);
  // a dropped item's valid shadow is cleared (flushed before the commit's fence), none is
  // left naming a slot of the old segment.
  for (uint32_t b = 0; b < params_.segment_buckets; b++) {
    const PmSlot* slots = BucketSlots(s->off, b);
    const std::vector<Shadow>& shadows = s->shadow[b];
    size_t cur = 0;
    auto shadows_of = [&](uint32_t j, SegMeta* to, uint32_t x) {
      for (; cur < shadows.size() && shadows[cur].pos <= j; cur++) {
        const Shadow& e = shadows[cur];
        if (e.pos == j && to && ((e.bi->stale >> e.slot) & 1)) {
          to->shadow[b].push_back(Shadow{e.bi, x, e.slot});
          to->SetShadowed(size_t{b} * params_.bucket_items + x, true);
          continue;
        }
        if ((e.bi->stale >> e.slot) & 1) ClearStale(e.bi, 1u << e.slot);
        Unref(e.bi);
      }
    };
    for (uint32_t j = 0; j < s->count[b]; j++) {
      const Key k = slots[j].key.load(std::memory_order_relaxed);
      const uint64_t v = slots[j].value.load(std::memory_order_relaxed);
      const uint64_t kh = SlotHash(k);
      if ((kh >> (64 - ld)) != prefix || BucketOf(kh) != b) {  // tombstone
        shadows_of(j, nullptr, 0);
        continue;
      }
      const int side = static_cast<int>((kh >> (63 - ld)) & 1);
      SegMeta* t = half[side];
      const uint16_t f = FpOf(kh);
      uint64_t* tslots =
          img[side].data() + (sizeof(SegHeader) + size_t{b} * params_.bucket_items * 16) / 8;
      const uint16_t* tfp = &t->fp[size_t{b} * params_.bucket_items];
      bool dup = false;
      // Sixteen fingerprints per step (the array holds bucket_items, a multiple of 16, entries:
      // no load leaves it; lanes past the count are masked), the identity on a match only.
      const uint32_t tn = t->count[b];
      for (uint32_t base = 0; base < tn && !dup; base += 16) {
        uint32_t m = Match16Wide(tfp + base, f);
        if (tn - base < 16) m &= (1u << (tn - base)) - 1;
        for (; m && !dup; m &= m - 1) {
          const uint32_t x = base + static_cast<uint32_t>(std::countr_zero(m));
          dup = Identity(tslots[2 * x], tslots[2 * x + 1]) == Identity(k, v);
        }
      }
      if (dup) {
        shadows_of(j, nullptr, 0);
        dropped++;
        continue;
      }
      shadows_of(j, t, t->count[b]);
      const uint32_t x = t->count[b]++;
      t->fp[size_t{b} * params_.bucket_items + x] = f;
      tslots[2 * x] = k;
      tslots[2 * x + 1] = v;
    }
    shadows_of(UINT32_MAX, nullptr, 0);  // none should be left past the count
  }
  for (int side = 0; side < 2; side++) {
    uint64_t* w = img[side].data();
    std::fill(w, w + sizeof(SegHeader) / 8, uint64_t{0});
    w[0] = SegWord(ld + 1);
    w[1] = side == 0 ? c.value() : old_hdr->next.load(std::memory_order_relaxed);
    for (uint32_t b = 0; b < params_.segment_buckets; b++) w[2 + b] = half[side]->count[b];
    // The header and each bucket's items, to the end of the line that holds the last one: the
    // slots past a count are garbage (I1), so the media is spared the empty tail of every
    // bucket (the new halves were under 40% full in a 10M-key run).
    char* const dst = pool_->template At<char>(half[side]->off);
    const char* const src = reinterpret_cast<const char*>(w);
    persist_.NtCopy(dst, src, sizeof(SegHeader));
    for (uint32_t b = 0; b < params_.segment_buckets; b++) {
      const size_t at = sizeof(SegHeader) + size_t{b} * params_.bucket_items * sizeof(PmSlot);
      const size_t used = size_t{half[side]->count[b]} * sizeof(PmSlot);
      const size_t len = (used + 63) & ~size_t{63};
      if (len > used) std::fill(w + (at + used) / 8, w + (at + len) / 8, uint64_t{0});
      if (len > 0) persist_.NtCopy(dst + at, src + at, len);
    }
  }
  persist_.Fence();
  // I7: the commit point, one 8-byte write into the predecessor (or root 0).
  const uint64_t span = uint64_t{1} << (gd_ - ld);
  const uint64_t first = prefix * span;
  if (first == 0) {
    pool_->SetRoot(0, a.value());
  } else {
    SegHeader* pred = Header(dir_[first - 1]);
    pred->next.store(a.value(), std::memory_order_release);
    persist_.Persist(&pred->next, sizeof(uint64_t));
  }
  // DRAM: D-buckets split by the same bit, directory entries, the old segment freed.
  for (uint32_t b = 0; b < params_.segment_buckets; b++) {
    for (size_t i = 0; i < s->dbucket[b].size(); i++) {
      const DItem& it = s->dbucket[b][i];
      if (!it.live) continue;
      half[(SlotHash(it.key) >> (63 - ld)) & 1]->Push(b, it, s->dfp[b][i]);
    }
  }
  for (uint64_t e = first; e < first + span; e++) dir_[e] = half[e >= first + span / 2];
  alloc.Free(s->off, static_cast<uint32_t>(seg_chunks_));
  // I14: s's unpublished counts go with it: the halves' headers hold them all.
  if (s->listed) std::erase(unpublished_, s);
  delete s;
  segments_.fetch_add(1, std::memory_order_relaxed);
  dups_dropped_.fetch_add(dropped, std::memory_order_relaxed);
  splits_.fetch_add(1, std::memory_order_relaxed);
  resize_log_.Record(started);
  return Status::OK();
}

// REQUIRES: exclusive (or recovery). Unlinks and frees the sealed blocks left without items. Each
// unlink is a store into the next newer block's `next`, a line no append touches any more (unless
// that block is the active one): under ADR one media write per freed block (0.75 of the 5.3 media
// writes per 16 B insert at 2M keys, 4 logs, before batching). Batched, a run of consecutive empty
// blocks goes with one store; the blocks empty roughly in their order (a D-bucket relocates its
// items together), so the runs grow with the batch. Until then an empty block stays linked, the
// state a crash before its unlink leaves (I8): recovery frees it.
template <pm::PersistPolicy P, bool R>
bool ElimDA<P, R>::SweepEmptyBlocks(bool all) PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  std::vector<BlockInfo*> todo;
  {
    LockGuard<SpinLock> eg(empty_mu_);
    if (empty_blocks_.empty()) return false;
    const uint64_t blocks = blocks_.load(std::memory_order_relaxed);
    const uint64_t sealed = blocks > params_.logs ? blocks - params_.logs : 0;  // not the heads
    if (!all && empty_batch_ != 0 && empty_blocks_.size() * empty_batch_ < sealed) return false;
    todo.swap(empty_blocks_);
  }
  // I14: the relocated items these blocks' stale bits shadow are published before a block goes.
  PublishAllCounts();
  // A block may be listed twice: its first listing counts, in the order listed (the order of the
  // unlinks' persists, which a crash test's replay repeats), told by address (a block unlinked
  // and deleted may be listed again: never read before this check). Every linked sealed block
  // without items is listed (each is listed when its last item goes), so a run's blocks are
  // marked done as it goes.
  std::vector<BlockInfo*> listed(todo);
  std::sort(listed.begin(), listed.end());
  std::vector<bool> done(listed.size(), false);
  auto mark = [&](const BlockInfo* bi) {
    const auto it = std::lower_bound(listed.begin(), listed.end(), bi);
    // Not listed (only a forged saved state could leave such a block): its run takes it all the
    // same, and it is never reached again.
    if (it == listed.end() || *it != bi) return false;
    const auto at = static_cast<size_t>(it - listed.begin());
    const bool first = !done[at];
    done[at] = true;
    return first;
  };
  for (BlockInfo* bi : todo) {
    if (!mark(bi)) continue;
    const BlockInfo* const head = logs_[bi->log].head;
    if (bi == head || bi->live != 0) continue;  // the active block is never unlinked
    auto empty = [&](const BlockInfo* b) { return b && b != head && b->live == 0; };
    BlockInfo* newest = bi;
    while (empty(newest->newer)) newest = newest->newer;
    BlockInfo* oldest = bi;
    while (empty(oldest->older)) oldest = oldest->older;
    for (const BlockInfo* b = oldest; b != newest->newer; b = b->newer) mark(b);
    UnlinkRun(oldest, newest);
  }
  return true;
}

template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::UnlinkRun(BlockInfo* oldest, BlockInfo* newest) {
  // I8: the newer block's `next` skips the run (one 8-byte store), then its blocks are free.
  BlockInfo* const newer = newest->newer;
  BlockInfo* const older = oldest->older;
  LogBlock* nb = Block(newer);
  nb->next.store(older ? older->off : 0, std::memory_order_release);
  persist_.Persist(&nb->next, sizeof(uint64_t));
  block_unlinks_.fetch_add(1, std::memory_order_relaxed);
  newer->older = older;
  if (older) older->newer = newer;
  for (BlockInfo* bi = oldest; bi != newer;) {
    BlockInfo* const next = bi->newer;  // before Release relinks bi
    Release(bi);
    bi = next;
  }
}

template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::Release(BlockInfo* bi) {
  pool_->allocator().Free(bi->off, 1);
  blocks_.fetch_sub(1, std::memory_order_relaxed);
  blocks_freed_.fetch_add(1, std::memory_order_relaxed);
  if (bi->refs == 0) {
    delete bi;
    return;
  }
  // Shadow entries still name it: every one is invalid now (no stale bit), and the last one
  // pruned deletes it (Unref).
  stale_slots_.fetch_sub(static_cast<uint64_t>(std::popcount(bi->stale)),
                         std::memory_order_relaxed);  // unreachable: the PM bits mean nothing
  bi->off = 0;
  bi->stale = 0;
  bi->newer = nullptr;
  bi->older = unlinked_;
  if (unlinked_) unlinked_->newer = bi;
  unlinked_ = bi;
}

template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::Unref(BlockInfo* bi) {
  shadow_entries_.fetch_sub(1, std::memory_order_relaxed);
  if (--bi->refs != 0 || bi->off != 0) return;
  if (bi->newer) {
    bi->newer->older = bi->older;
  } else {
    unlinked_ = bi->older;
  }
  if (bi->older) bi->older->newer = bi->newer;
  delete bi;
}

template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::PruneShadows(std::vector<Shadow>* list) {
  size_t n = 0;
  for (const Shadow& e : *list) {
    if ((e.bi->stale >> e.slot) & 1) {
      (*list)[n++] = e;
    } else {
      Unref(e.bi);
    }
  }
  list->resize(n);
}

template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::ClearStale(BlockInfo* bi, uint32_t mask) PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  LogBlock* blk = Block(bi);
  blk->header.store(blk->header.load(std::memory_order_relaxed) & ~uint64_t{mask},
                    std::memory_order_release);
  persist_.Flush(&blk->header, sizeof(uint64_t));
  bi->stale = static_cast<uint16_t>(bi->stale & ~mask);
  stale_slots_.fetch_sub(static_cast<uint64_t>(std::popcount(mask)), std::memory_order_relaxed);
}

template <pm::PersistPolicy P, bool R>
bool ElimDA<P, R>::ClearShadow(SegMeta* s, uint32_t b, uint32_t pos)
    PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  const size_t i = size_t{b} * params_.bucket_items + pos;
  if (!s->Shadowed(i)) return false;
  s->SetShadowed(i, false);
  const std::vector<Shadow>& list = s->shadow[b];
  auto it = std::lower_bound(list.begin(), list.end(), pos,
                             [](const Shadow& e, uint32_t p) { return e.pos < p; });
  for (; it != list.end() && it->pos == pos; ++it) {
    // The block's header word and stale bits are its log's: other stripes' erases write them.
    // (h's log, unless writer logs.)
    detail::LogSection ls(logs_[it->bi->log].mu, shared_logs());
    if ((it->bi->stale >> it->slot) & 1) {
      ClearStale(it->bi, 1u << it->slot);
      stale_cleared_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::ClearAllStale() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  LockGuard<detail::TableLock> g(table_mu_);
  bool any = false;
  for (uint32_t li = 0; li < params_.logs; li++) {
    for (BlockInfo* bi = logs_[li].head; bi; bi = bi->older) {
      if (bi->stale == 0) continue;
      ClearStale(bi, bi->stale);
      any = true;
    }
  }
  if (any) persist_.Fence();
}

template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::StoreCounts(SegMeta* s) PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  SegHeader* hdr = Header(s);
  for (uint32_t b = 0; b < params_.segment_buckets; b++) {
    hdr->count[b].store(s->count[b], std::memory_order_release);
  }
  persist_.Flush(&hdr->count[0], params_.segment_buckets * sizeof(uint64_t));
}

template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::PublishCounts(SegMeta* s) PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  StoreCounts(s);
  persist_.Fence();
  s->unpublished.store(false, std::memory_order_release);
  count_publishes_.fetch_add(1, std::memory_order_relaxed);
}

template <pm::PersistPolicy P, bool R>
void ElimDA<P, R>::PublishAllCounts() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  if (unpublished_.empty()) return;
  uint64_t n = 0;
  for (SegMeta* s : unpublished_) {
    s->listed = false;
    if (!s->unpublished.load(std::memory_order_relaxed)) continue;  // an update published it
    StoreCounts(s);
    s->unpublished.store(false, std::memory_order_relaxed);
    n++;
  }
  if (n) persist_.Fence();
  unpublished_.clear();
  count_publishes_.fetch_add(n, std::memory_order_relaxed);
}

template <pm::PersistPolicy P, bool R>
template <class Take, class Done>
void ElimDA<P, R>::WalkLiveSlots(Take&& take, Done&& done) const PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  {
    LockGuard<detail::TableLock> g(table_mu_);
    detail::IdentitySet seen(params_.bucket_items);  // a later copy is not live (I10)
    for (size_t i = 0; i < dir_.size();) {
      const SegMeta* s = dir_[i];
      const uint64_t prefix = i >> (gd_ - s->depth);
      for (uint32_t b = 0; b < params_.segment_buckets; b++) {
        const PmSlot* slots = BucketSlots(s->off, b);
        seen.Clear();
        for (uint32_t j = 0; j < s->count[b]; j++) {
          const Key k = slots[j].key.load(std::memory_order_relaxed);
          if (!LiveIn(k, prefix, s->depth, b) ||
              !seen.Insert(Identity(k, slots[j].value.load(std::memory_order_relaxed)))) {
            continue;
          }
          take(slots[j]);
        }
        for (const DItem& it : s->dbucket[b]) {
          if (it.live) take(Block(it.block)->slots[it.slot]);  // the log slot that backs it
        }
      }
      i += size_t{1} << (gd_ - s->depth);
    }
    for (uint32_t li = 0; li < params_.logs; li++) {
      if (const BlockInfo* bi = logs_[li].head) {
        const LogBlock* blk = Block(bi);
        for (uint32_t c = blk->header.load(std::memory_order_relaxed) & kFullBits; c; c &= c - 1) {
          take(blk->slots[std::countr_zero(c)]);
        }
      }
    }
  }
  done();
}

template <pm::PersistPolicy P, bool R>
IndexStats ElimDA<P, R>::Stats() const PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  IndexStats s;
  this->FillCommonStats(&s);
  uint64_t dram_items = 0, fp_bytes = 0, dir_bytes = 0;
  const uint64_t shadows = shadow_entries_.load(std::memory_order_relaxed);
  uint32_t gd = 0, active_logs = 0;
  {
    SharedLockGuard<detail::TableLock> g(table_mu_);
    gd = gd_;
    for (uint32_t li = 0; li < params_.logs; li++) active_logs += logs_[li].head_off != 0;
    dir_bytes = dir_.size() * sizeof(SegMeta*);
    for (size_t i = 0; i < dir_.size();) {
      const SegMeta* m = dir_[i];
      for (const auto& d : m->dbucket) dram_items += d.size();
      fp_bytes += m->fp.size() * sizeof(uint16_t);
      i += size_t{1} << (gd_ - m->depth);
    }
  }
  const uint64_t segs = segments_.load(std::memory_order_relaxed);
  const uint64_t blocks = blocks_.load(std::memory_order_relaxed);
  s.buckets = segs * params_.segment_buckets;
  s.capacity_slots = s.buckets * params_.bucket_items + blocks * kBlockSlots;  // PM table + logs
  s.load_factor = s.capacity_slots ? static_cast<double>(s.size) / s.capacity_slots : 0;
  s.pm_bytes = segs * seg_chunks_ * kBlockBytes + blocks * kBlockBytes +
               LogTableChunks(params_) * kBlockBytes + pm::kHeaderBytes;
  s.dram_bytes = dir_bytes + fp_bytes + dram_items * (sizeof(DItem) + sizeof(uint16_t)) +
                 blocks * sizeof(BlockInfo) + uint64_t{params_.logs} * sizeof(LogState) +
                 shadows * sizeof(Shadow) +
                 pool_->allocator().dram_bytes() + (R ? records_->dram_bytes() : 0);
  if constexpr (R) s.pm_bytes += records_->pm_bytes();
  s.global_depth = gd;
  auto add = [&](const char* name, double v) { s.details.push_back({name, v}); };
  add("elimda.segments", static_cast<double>(segs));
  add("elimda.log_blocks", static_cast<double>(blocks));
  add("elimda.active_logs", static_cast<double>(active_logs));  // logs with an active block
  {
    LockGuard<SpinLock> eg(empty_mu_);  // those awaiting their batch (I8): still linked
    add("elimda.empty_blocks_linked", static_cast<double>(empty_blocks_.size()));
  }
  add("elimda.log_swaps", static_cast<double>(log_swaps_.load()));
  if (writer_) add("elimda.writer_settle_seals", static_cast<double>(writer_settle_seals_.load()));
  add("elimda.first_line_moves", static_cast<double>(line_moves_.load()));
  if constexpr (R) add("elimda.torn_appends_dropped", static_cast<double>(torn_dropped_.load()));
  add("elimda.relocations", static_cast<double>(relocations_.load()));
  add("elimda.relocated_items", static_cast<double>(relocated_items_.load()));
  add("elimda.split_duplicates_dropped", static_cast<double>(dups_dropped_.load()));
  add("elimda.blocks_freed", static_cast<double>(blocks_freed_.load()));
  add("elimda.block_unlinks", static_cast<double>(block_unlinks_.load()));
  add("elimda.count_publishes", static_cast<double>(count_publishes_.load()));
  add("elimda.compactions", static_cast<double>(compactions_.load()));
  add("elimda.dram_items", static_cast<double>(dram_items));
  add("elimda.shadow_entries", static_cast<double>(shadows));
  add("elimda.stale_log_slots", static_cast<double>(stale_slots_.load()));
  add("elimda.shadow_prunes", static_cast<double>(shadow_prunes_.load()));
  add("elimda.shadows_cleared", static_cast<double>(stale_cleared_.load()));
  add("alloc.reused", static_cast<double>(pool_->allocator().reused_allocations()));
  if constexpr (R) records_->AddDetails(&s);
  return s;
}

// REQUIRES: no concurrent writers.
template <pm::PersistPolicy P, bool R>
Status ElimDA<P, R>::CheckInvariants() const PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  const index::InvariantFailure fail{kKindName};
  LockGuard<detail::TableLock> g(table_mu_);
  if constexpr (R) epoch_->Drain();  // elimda-kv: retired records are back in the heap
  index::LiveKeys keys(records_.get(), hash_);  // (records_: null unless R)
  // A live item's key, once; its record checked (elimda-kv, whose key word is the key's hash).
  auto add_key = [&](uint64_t k, uint64_t v) { return keys.Add(k, v, k); };
  uint64_t live = 0, chunks = LogTableChunks(params_), segs = 0;
  uint64_t i = 0;
  detail::IdentitySet in_bucket(params_.bucket_items);  // a later copy is not live (I10)
  detail::IdentitySet pm_live(1024);  // the PM table's live items (a stale log slot's is one)
  std::unordered_map<const BlockInfo*, uint32_t> refs;  // shadow entries per block (I13)
  std::unordered_set<uint64_t> shadowed;                // (block offset | slot) of valid ones
  std::unordered_set<const BlockInfo*> waiting;         // empty blocks awaiting their batch (I8)
  {
    LockGuard<SpinLock> eg(empty_mu_);
    waiting.insert(empty_blocks_.begin(), empty_blocks_.end());
  }
  for (uint64_t off = pool_->root(0); off != 0; segs++) {
    if (segs > pool_->allocator().chunk_count()) return fail("segment chain has a cycle");
    if (i >= dir_.size()) return fail("segment chain longer than the directory");
    const SegMeta* s = dir_[i];
    if (s->off != off) return fail("directory and segment chain disagree");
    const uint64_t stride = uint64_t{1} << (gd_ - s->depth);
    if (i % stride != 0) return fail("segment out of prefix order");
    for (uint64_t e = i; e < i + stride; e++) {
      if (dir_[e] != s) return fail("directory entry");
    }
    if (!pool_->allocator().IsUsed(off)) return fail("segment not marked allocated");
    const SegHeader* h = Header(s);
    if (h->tag_depth.load() != SegWord(s->depth)) return fail("segment header word");
    const uint64_t prefix = i >> (gd_ - s->depth);
    for (uint32_t b = 0; b < params_.segment_buckets; b++) {
      // I14: PM's count is the DRAM count, or below it while the segment is listed unpublished.
      const uint64_t pm_count = h->count[b].load();
      if (pm_count > s->count[b] || (pm_count < s->count[b] && !s->unpublished.load())) {
        return fail("bucket count differs from PM");
      }
      const PmSlot* slots = BucketSlots(off, b);
      in_bucket.Clear();
      for (uint32_t j = 0; j < s->count[b]; j++) {
        const Key k = slots[j].key.load(std::memory_order_relaxed);
        const uint64_t v = slots[j].value.load(std::memory_order_relaxed);
        if (!LiveIn(k, prefix, s->depth, b)) continue;
        if (s->fp[size_t{b} * params_.bucket_items + j] != FpOf(SlotHash(k))) {
          return fail("fingerprint");
        }
        if (!in_bucket.Insert(Identity(k, v))) continue;
        if (std::string e = add_key(k, v); !e.empty()) return fail(e);
        pm_live.Insert(Identity(k, v));
        live++;
      }
      uint32_t last_pos = 0;
      uint32_t covered = static_cast<uint32_t>(pm_count);  // I14: below it, or shadowed
      auto unshadowed = [&](uint32_t from, uint32_t to) {  // true if no live item in [from, to)
        for (uint32_t j = from; j < to; j++) {
          if (LiveIn(slots[j].key.load(), prefix, s->depth, b)) return false;
        }
        return true;
      };
      for (const Shadow& e : s->shadow[b]) {
        refs[e.bi]++;
        if (e.pos < last_pos) return fail("shadow list out of order");
        last_pos = e.pos;
        if (!((e.bi->stale >> e.slot) & 1)) continue;
        if (!unshadowed(covered, std::min(e.pos, s->count[b]))) {
          return fail("an unpublished item without a shadow (lost in a crash)");
        }
        covered = std::max(covered, e.pos + 1);
        if (e.pos >= s->count[b]) return fail("shadow past the bucket's count");
        if (!s->Shadowed(size_t{b} * params_.bucket_items + e.pos)) {
          return fail("shadowed slot without its bit");
        }
        const PmSlot& item = slots[e.pos];
        const PmSlot& logged = Block(e.bi)->slots[e.slot];
        if (!LiveIn(item.key.load(), prefix, s->depth, b) ||
            Identity(item.key.load(), item.value.load()) !=
                Identity(logged.key.load(), logged.value.load())) {
          return fail("shadow names another item than its P-bucket slot holds");
        }
        if (!shadowed.insert(e.bi->off << 4 | e.slot).second) {
          return fail("log slot shadowed twice");
        }
      }
      if (!unshadowed(covered, s->count[b])) {
        return fail("an unpublished item without a shadow (lost in a crash)");
      }
      if (s->dfp[b].size() != s->dbucket[b].size()) return fail("D-bucket fingerprints");
      for (size_t x = 0; x < s->dbucket[b].size(); x++) {
        const DItem& it = s->dbucket[b][x];
        if (s->dfp[b][x] != FpOf(SlotHash(it.key))) return fail("D-bucket fingerprint");
        if (!it.live) continue;
        const uint64_t kh = SlotHash(it.key);
        if ((kh >> (64 - s->depth)) != prefix || BucketOf(kh) != b) {
          return fail("D-bucket item misplaced");
        }
        const LogBlock* blk = Block(it.block);
        if (!((blk->header.load() >> it.slot) & 1)) return fail("D-bucket item without its bit");
        if (!((it.block->live >> it.slot) & 1)) return fail("D-bucket item not live in its block");
        const PmSlot& ls = blk->slots[it.slot];
        if (ls.key.load() != it.key || ls.value.load() != it.value) {
          return fail("D-bucket item differs from its log slot");
        }
        if (std::string e = add_key(it.key, it.value); !e.empty()) return fail(e);
        live++;
      }
    }
    chunks += seg_chunks_;
    i += stride;
    off = h->next.load(std::memory_order_relaxed);
  }
  if (i != dir_.size()) return fail("segment chain does not cover the directory");
  uint64_t sealed_items = 0, dram_live = 0, stale = 0;
  for (size_t x = 0; x < dir_.size();) {
    for (const auto& d : dir_[x]->dbucket) {
      for (const DItem& it : d) dram_live += it.live;
    }
    x += size_t{1} << (gd_ - dir_[x]->depth);
  }
  const auto* words = LogTable();
  for (uint32_t li = 0; li < params_.logs; li++) {
    const BlockInfo* head = logs_[li].head;
    if (words[li].load() != (head ? head->off : 0)) return fail("log table word");
    if (logs_[li].head_off != (head ? head->off : 0)) return fail("log head offset");
    if (head && logs_[li].mirror_of == head) {  // the mirror covers every live item (a superset)
      const LogState& log = logs_[li];
      const LogBlock* blk = Block(head);
      const uint32_t bits = static_cast<uint32_t>(blk->header.load() & kFullBits);
      if ((bits & ~log.mirror_bits) != 0) return fail("log mirror misses a logged item");
      for (uint32_t c = bits; c; c &= c - 1) {
        const uint32_t j = static_cast<uint32_t>(std::countr_zero(c));
        if (log.mirror_fp[j] != FpOf(SlotHash(blk->slots[j].key.load())))
          return fail("log mirror fingerprint");
      }
    }
    for (const BlockInfo* bi = head; bi; bi = bi->older) {
      chunks++;
      const LogBlock* blk = Block(bi);
      if ((blk->header.load() >> 16) != kBlockTag) return fail("log block tag");
      if (blk->next.load() != (bi->older ? bi->older->off : 0)) return fail("log chain");
      const uint32_t bits = static_cast<uint32_t>(blk->header.load() & kFullBits);
      if (bi->refs != refs[bi]) return fail("shadow references of a log block");
      if (bi != head && (bits != (bi->live | bi->stale) || (bi->live & bi->stale) != 0)) {
        return fail("log block bits differ from its live and stale bits");
      }
      if (bi != head && bi->live == 0 && !waiting.contains(bi)) {
        return fail("an empty sealed block is not listed for its unlink");
      }
      for (uint32_t c = bits; c; c &= c - 1) {
        const uint32_t j = static_cast<uint32_t>(std::countr_zero(c));
        const Key k = blk->slots[j].key.load();
        if (writer_) {  // W1: the key's stripe names this active block
          const Stripe* st = StripeOf(SlotHash(k));
          if (bi == head && (st->last_log != li || st->last_block != bi->off)) {
            return fail("W1: a key in an active block its stripe does not name");
          }
        } else if (LogOf(SlotHash(k)) != li) {
          return fail("logged key in the wrong log");
        }
        if ((bi->stale >> j) & 1) {  // I13: a relocated item, live in the PM table
          if (!pm_live.Contains(Identity(k, blk->slots[j].value.load()))) {
            return fail("stale log slot whose item is not live in the PM table");
          }
          stale++;
          continue;
        }
        if (bi == head) {
          if (std::string e = add_key(k, blk->slots[j].value.load()); !e.empty()) return fail(e);
          live++;
        } else {
          sealed_items++;
        }
      }
    }
  }
  if (sealed_items != dram_live) return fail("sealed log items != live D-bucket items");
  if (stale != shadowed.size()) return fail("stale log slots != valid shadow entries");
  uint64_t entries = 0;
  for (const auto& [bi, n] : refs) entries += n;
  if (stale != stale_slots_.load() || entries != shadow_entries_.load()) {
    return fail("shadow counters");
  }
  for (const BlockInfo* bi = unlinked_; bi; bi = bi->older) {
    if (bi->off != 0 || bi->stale != 0 || bi->refs == 0 || bi->refs != refs[bi]) {
      return fail("unlinked log block kept for shadows");
    }
  }
  if (std::string e = keys.Finish(&chunks); !e.empty()) return fail(e);
  if (std::string e = this->CheckAccounting(chunks, live); !e.empty()) return fail(e);
  return Status::OK();
}

PMHASH_PROBE_ENGINE_CALLS_WITH_FIND((template <pm::PersistPolicy P, bool R>), ElimDA<P, R>);

PMHASH_ENGINE_INSTANTIATIONS(extern, ElimDA, false);
PMHASH_ENGINE_INSTANTIATIONS(extern, ElimDA, true);

}  // namespace pmhash::elimda
