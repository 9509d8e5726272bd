// src/index/smartht/smartht.h — SmartHT: chained hashing in PM behind a DRAM Bloom filter.
//
// Paper: Renzhi Xiao, Hong Jiang, Dan Feng et al. "Accelerating Persistent Hash Indexes via
// Reducing Negative Searches" (SmartHT; ../shared/papers/smartht.txt, section III; IV for the
// experiments).
//
// ============================================================================================
// Design summary
// ============================================================================================
// Two layers (paper Figure 2):
//
//   * The persistent data layer (PDL) is chained hashing in PM: a head-bucket array of 2^L
//     64 B buckets (L from SmartHtParams::head_bits, growing), each the start of a chain of
//     64 B buckets linked by pool offsets. A bucket holds three 16 B key/value slots, each made
//     live by its own 1-byte token in the same cache line.
//   * The volatile filter layer (VFL) is a DRAM Bloom filter over every live key. A search or
//     an erase whose key the filter rules out answers kNotFound without reading PM; an insert
//     whose key the filter rules out skips the duplicate check of the chain.
//
// Operations (head bucket H = the head of address a(h), h the key's 64-bit hash; see Growth):
//   * Insert (Algorithm 1): a free slot of H or of H's first chained bucket takes the pair:
//     key and value stored, then the token, then one flush + fence of that one line. Both full:
//     a new bucket is built with the pair in slot 0 and next = H.next, persisted, fenced; then
//     H.next = new bucket (one 8-byte store), persisted, fenced ("head insertion": the new
//     bucket becomes H's first chained bucket, where the next inserts go).
//   * Erase: the token is cleared and persisted (lazy deletion: no slot moves, no bucket is
//     unlinked; the filter keeps the erased key's bits until it is rebuilt).
//   * Update: one 8-byte store of the value, persisted.
//   * Find: the filter, then the chain from H, comparing the key of every slot whose token
//     matches (the token is a 7-bit fingerprint with the top bit set, not the paper's plain 1,
//     so most non-matching slots are skipped without reading their key).
//
// Concurrency (paper III-B): reader-writer spin locks, one per stripe of head buckets (stripe =
// hash bits [g, g + S), g + S <= L, both fixed for the life of the open: 256 heads per stripe on
// large tables, as in the paper, one head per stripe on tables of <= 64 heads; g =
// log2(split_batch) where L allows, so a split batch's heads share one stripe). Since bit L is
// not a stripe bit, a head and the head it splits into (a + 2^L) share a stripe. Reads take the
// stripe shared, writes exclusive; the lock is held across the persist, so no reader ever sees
// a write that a crash can undo. A search (or an erase) whose key the filter rules out takes no
// lock at all (FilterCheck: no locked instruction, so consecutive negative searches overlap
// their filter misses): it reads the live filter's block and trusts a "no" only if no filter
// swap came between its load of the filter and that read; otherwise, and for a "maybe", it goes
// on under the stripe's lock. A swapped-out filter is kept mapped (zeroed, reused for a later
// filter) until the index is destroyed, so such a late read stays in mapped memory. A split
// batch takes the stripes of its heads exclusive (one, or a few on small tables), in ascending
// order, under resize_mu_ (one batch at a time); the only
// stop-the-world phase left is the swap of a rebuilt filter (a pointer swap under every stripe,
// in order, under stw_mu_; an operation that sees it under way sleeps on stw_mu_ instead of
// spinning on its stripe).
//
// Filter: a split-block Bloom filter: a key selects one 64 B block and sets one bit in each of
// its eight 64-bit words, so a query costs one DRAM cache miss. Sized for
// filter_bits_per_key bits per key of capacity (24: a false-positive rate near 1e-4, the
// paper's figure). It is rebuilt — a new filter filled from PM by a background task
// (pm::BackgroundWork) while the old one keeps serving, then swapped in — when the keys erased
// since the last build pass rebuild_erased_ratio of its capacity, and after a crash.
// While a filter is being filled, writers add their keys to it as well as to the live one.
//
// Growth (beyond the paper, which fixes 2^24 heads): linear hashing, one small batch of heads at
// a time, never stopping the world. The table is at level L with split pointer s (0 <= s < 2^L):
// 2^L + s heads are in use, and a key's address is a(h) = h mod 2^L, or h mod 2^(L+1) if that is
// below s. (The threshold trades space for chain length: at the default 3 keys per head the load
// factor is 0.71 with chains of 1.4 buckets; at the paper's 11.9 (200M keys, 2^24 heads) 0.92
// with 3.5, and find+ and erase at half speed: docs/results.md, "the load factor of the paper's
// geometry".) When the table holds more than grow_keys_per_head keys per head in use, a background
// task (pm::BackgroundWork; the writer that notices only schedules it, and splits itself only in
// manual mode, during a filter rebuild or once the task is a quarter behind) splits batch after
// batch of B = min(split_batch, 2^L) heads s..s+B-1 (their stripe locked) into heads
// 2^L+s..2^L+s+B-1; past s = 2^L the level becomes L+1, s = 0 (the same addresses). Per batch:
//   1. Build (fresh chunks only): the new heads (their slots in the next segment of the head
//      array, never read before the commit) holding the "movers" (bit L of h set) of every
//      source chain, with fresh chained buckets past three; and for each source head H that has
//      chained buckets, the "stayers" of those buckets: the first ones go to H's open slots
//      (free, or a mover's) in step 3, the rest to a fresh compact chain C. NtCopy all; one
//      fence.
//   2. Commit: root 0 = (L, s + B) or (L + 1, 0): one persisted 8-byte store.
//   3. Clean up each source head, all in H's line, in this order: the movers' tokens cleared,
//      the stayers H takes written, then their tokens, then H.next = C (with tear_safe, each
//      step flushed and fenced before the next); one flush per line and one fence for the batch
//      otherwise. The old chained buckets are freed. A crash before 3 ends leaves, in a source
//      chain, movers (copies of pairs their new head holds) and stayers twice (in H and in the
//      old chained bucket): recovery clears the movers and the second copies (the last batch is
//      known from root 0 and split_batch), so 3 is redone, never undone.
// The head array is a list of segments that double (segment 0: the 2^L0 heads of the new pool;
// segment k >= 1: heads [2^(L0+k-1), 2^(L0+k))), named by a directory block (root 2); segment k
// is allocated and its directory word persisted when level L0+k-1 starts, before any head in it
// is written. The filter is keyed by h alone, so splits never touch it; it is rebuilt larger in
// the background once the keys pass its capacity.
//
// smartht-kv (variable-size keys and values; not in the paper, the issue asks for it): the same
// engine with kRecords. A slot holds [hash(key) | record offset], the record [klen | vlen | key |
// value] lives in the pool's record heap (src/index/records.h). The token, the filter and the
// addresses use the same 64-bit hash, so a negative search still reads no PM and a split moves
// slots, never records. An insert's record is flushed and fenced before the slot's line is
// written (I2 then holds for the line as for smartht); an update publishes a new record with
// its 8-byte value store and retires the old one through the epoch (FindBytes copies a value
// after leaving the stripe's lock, under an epoch guard); an erase retires the record after its
// token is persisted. A crash open rebuilds the record heap from the live slots
// (Records::Recover: offset, lengths, slab, sharing and key hash validated before use); a clean
// open loads the heap's image with the rest of the saved state (I9).
//
// Recovery (paper III-D): after a clean shutdown the filter saved in the pool is used (its
// geometry and key count must match at open, its checksum when a background task loads its
// blocks; otherwise it is rebuilt); after a crash the index serves at once with an empty,
// *incomplete* filter that a background task fills. While a filter is incomplete (being loaded,
// filled or rebuilt), negative searches go to PM, so it never gives a false negative. After a
// clean Close there is no walk (I9): the allocator and the counts come from the saved state, the
// filter from its saved copy, and readers bound every link themselves (Next). After a crash
// there is no walk before serving either (I10): open checks root 0 and the directory,
// cleans the split batch the crash cut (at most split_batch heads), holds every chunk below
// root 3 in the allocator and returns; one background walk then checks every chain, marks what
// it reaches, counts the keys and fills the filter, while readers and writers run (writes take
// chunks above root 3). Size(), Stats() and CheckInvariants wait for it; a damaged chain found
// by it fails every later write, CheckInvariants and Close with kCorruption (the pool stays
// unclean). smartht-kv opens so too, its reads and writes beside the walk, which also rebuilds
// the record heap below root 3 (writers' records come from above it; I10).
// Options::smartht.lazy_recovery = false walks at open as before.
//
// ============================================================================================
// Layout
// ============================================================================================
//   PM bucket, 64 B, 64-aligned (one cache line, one allocator chunk):
//
//     [ tok0 tok1 tok2 | pad:5 ][ key0 | val0 ][ key1 | val1 ][ key2 | val2 ][ next:8 ]
//       0    1    2      3..7     8              24             40             56
//
//     tok j: 0 = slot j free, 0x80 | (h >> 57) = slot j holds a live pair whose key hashes to h
//            (the top bits: the address takes the low ones).
//     key j / val j: the pair (smartht-kv: h and the record's offset).
//     next:  pool offset of the next bucket of the chain, 0 = end.
//
//   Pool roots:
//     root 0  [ L:8 | s:56 ]     the geometry: level L, split pointer s; 2^L + s heads in use
//     root 1  offset of the saved filter (clean shutdown only; cleared, persisted, at every
//             open before the first write)
//     root 2  offset of the directory block (4 chunks, 256 B):
//             [ L0 | seg 0 | seg 1 | ... | seg 30 ]   seg k: offset of segment k, 0 = none yet
//             segment 0 = 2^L0 contiguous heads, segment k >= 1 = 2^(L0+k-1) contiguous heads
//     root 3  the link bound (smartht): every chunk of the table (directory, segments, chained
//             buckets) ends at or below this offset (I10)
//
//   Saved filter (chunks of 64 B, allocated at Close):
//     [ magic:8 | root 0:8 | blocks:8 | keys:8 | stale:8 | checksum:8 | pad:16 ][ blocks x 64 B ]
//     checksum = XXH3-64 of the blocks, seeded with the other header words.
//
//   DRAM: stripes (one 64 B line each: a RwSpinLock), the filter (blocks x 64 B, in a mapping
//   of a power of two of blocks), the spare filters' mappings (their pages given back), no
//   per-bucket metadata.
//
// ============================================================================================
// Crash-consistency invariants
// ============================================================================================
//   I1  A slot holds a live pair iff its token is non-zero; a non-zero token equals
//       Token(hash(key)) and a(hash(key)) is the bucket's chain head (recovery checks both),
//       except for the movers a crash left in the sources of the last split batch (I8).
//   I2  Insert into a free slot: key and value are stored before the token, all in one line, and
//       the line is flushed once: under whole-line write-back an image with the token has the
//       pair. With tear_safe the slot is persisted before the token is stored (8-byte model).
//   I3  If a bucket is reachable then its 64 bytes were persisted before the 8-byte store that
//       linked it (head insertion: NtCopy + fence, then H.next + persist).
//   I4  Erase clears one token (one byte, failure-atomic) and persists it; update stores one
//       8-byte value and persists it.
//   I5  A split batch writes only fresh chunks and heads beyond those in use until its root
//       store; if root 0 counts a head in use, its chain was persisted before (fence before the
//       root store). A segment's directory word is persisted before any of its heads is used.
//   I6  No leak: the allocator's bitmap is rebuilt from roots 0 and 2 at open (after a crash,
//       by the lazy walk: I10); a bucket allocated but not linked, a batch's chains before its
//       commit, the chained buckets a batch's cleanup unlinked and a saved filter are free.
//       smartht-kv: a record is reachable only from a live slot (one slot per record; I8's
//       second copies of a stayer name the same record and are cleared before the heap is
//       counted), so a record written but not published, or replaced or erased before a crash,
//       is free after it.
//   I7  The saved filter is used only if the pool was shut down cleanly, root 1 names it, and
//       its checksum, geometry and key count match; root 1 is cleared (persisted) before the
//       first write of the open, so a filter can never be trusted for a pool changed after it
//       was saved. Its blocks are loaded by a background task (LoadFilterTask) while the index
//       serves, its chunks held in use until then. A key written before the loaded copy is
//       published as the filter being built is kept in its stripe's `late` list (under the
//       stripe's lock), and the task adds those keys before the copy is swapped in; from the
//       publication on, writers add to it themselves (PublishFilter, as the lazy walk's, I10).
//   I8  Only the last split batch (from root 0: level L, heads [s - B, s), or the last batch of
//       level L - 1 if s = 0) may hold movers in its source chains, each a copy of a pair that
//       its new head's chain holds (built and fenced before the commit), and stayers twice, the
//       first copy in the head bucket (its pair written before its token). Open clears the
//       movers and the second copies (token, persisted) before serving; anywhere else a
//       misplaced or repeated pair is kCorruption (repeats: CheckInvariants).
//   I9  A clean Close saves root 0, the live keys, the chained buckets (smartht-kv: and the
//       record heap's state, record_heap.h "Clean shutdown") and the saved filter's place in
//       the pool's state image (src/pm/saved_state.h: checksummed, trusted only after a clean
//       shutdown, used once, with the allocator's bitmap). The open that loads it walks no
//       chain: nothing changed in PM since the save (Close quiesced the index; the clean mark
//       is its last write). It checks the loaded allocator against what it can name without a
//       walk — the directory, the segments and the saved filter inside the heap, named once
//       and in use, the used chunks exactly those plus the saved count of chained buckets,
//       root 0 and root 1 the image's, the live count the saved filter's — and frees the saved
//       filter's chunks once the filter is loaded.
//       Since no walk bounded the links, every reader bounds them itself (Next: a link must be
//       a bucket of the heap, a chain at most the heap's chunk count long; anything else ends
//       the chain and is counted in "smartht.bad_links"). So a forged image or a bucket damaged
//       after the Close can make answers wrong, never a read out of bounds; CheckInvariants
//       (`pmhash check`) walks the chains and reports it, and an open after a crash refuses
//       it. smartht-kv's slots name records no such open validates: every record read is
//       bounded to the pool (Records::Fits), the loaded heap's slabs are named with the
//       directory (disjoint, in use; the used chunks include them and the large records'), and
//       the heap's records must be the live keys.
//   I10 Lazy crash open. Root 3 bounds the table. A chunk is linked (a bucket into a chain, a
//       segment into the directory, the directory at creation) or holds a published record
//       (smartht-kv: a slab or a large record of the record heap, whose chunk hook covers it
//       before the heap hands out a record in it) only after root 3 covers it (CoverChunks:
//       raised by 1/32 of the heap at a time, persisted before the link's or the record's
//       store), and root 3 never shrinks. So after a crash every chunk above root 3 is free,
//       and the lazy open hands out only those (ClaimBelow holds the rest) until its walk has
//       named the reachable chunks below it (SettleBelow: the rest below it is free, I6). No
//       chunk below root 3 is freed meanwhile (no split runs until the walk ends; smartht-kv's
//       frees of records below it wait, below). The walk follows each chain under its stripe's
//       lock shared, so a writer sees it before or after a head, never during: a write to a
//       head the walk has passed counts in the size counter, one to a head still ahead is
//       counted by the walk (CountLive); likewise its key's filter bits: the walk fills its
//       filter alone (no locked instruction), and a write to a head it has passed keeps the
//       key's hash in its stripe's `late` list, added once the filter is published at the end
//       (every stripe locked: writers add to it themselves from then on). A link the walk meets
//       past root 3 must be a chunk
//       allocated since the open (a writer's head insertion); the walk's set of reached chunks
//       catches one reached twice. The cut batch (I8) is cleaned before the open returns, so
//       every head a reader or writer visits holds what I1 says.
//       smartht-kv: writes run beside the walk too. The record heap starts empty, so writers'
//       records come from new slabs above root 3. The walk marks each record below root 3 in
//       the heap (record_heap.h, "Lazy recovery": its slab's or its chunks into the walk's set,
//       past root 3 refused), which leaves the slabs it rebuilds in no bin until its end, so no
//       writer takes a slot there that a record the walk has not reached yet holds; a record
//       past root 3 must be one a write since the open published (Records::CheckWritten: in
//       use, its key of the slot's hash). A write that replaces or erases a record below root
//       3 does not free it (DeferFree, under the head's stripe lock): if the walk has passed
//       the head, the record was marked and is freed after the walk's end; if not, the walk
//       will never reach it and its slot is free after the walk as it is (if the walk fails,
//       every such free stays deferred: no slab it half rebuilt is ever binned). The walk's
//       end: if a write dropped a record, an epoch grace period (a reader may still copy it);
//       the rebuilt slabs go to the orphan bins (EndLazyRecovery), the allocator is settled,
//       then the deferred frees run (RetireDeferred, through the epoch). A write that finds no
//       room above root 3 (root 3 may be near the heap's end) waits for the walk's end and runs
//       again (smartht.recovery.write_waits). Readers only read: every record read is bounded
//       to the pool (Records::Fits), so a damaged slot found by the walk later was never read
//       out of bounds before it. A link past root 3 is only checked to be a chunk in use: in a
//       damaged smartht-kv pool it may be a writer's record chunk, read as a bucket (its tokens
//       and keys checked, every read in bounds). A pool whose root 3 covers nothing
//       (smartht-kv before its records were covered) is walked at open.
//
// Thread safety: every public operation may run concurrently; Close() requires quiescence.
#pragma once

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/attributes.h"
#include "common/fingerprint.h"
#include "common/hash.h"
#include "common/huge_array.h"
#include "common/locks.h"
#include "common/mutex.h"
#include "common/resize_log.h"
#include "common/striped_counter.h"
#include "index/descriptor.h"
#include "index/engine_base.h"
#include "index/lifecycle.h"
#include "index/records.h"
#include "pm/background.h"
#include "pm/persist.h"
#include "pm/pool.h"
#include "pm/slot.h"
#include "pmhash/index.h"

namespace pmhash::smartht {

inline constexpr int kSlots = 3;
inline constexpr uint32_t kMinHeadBits = 1;
inline constexpr uint32_t kMaxHeadBitsLimit = 31;  // 2^31 heads = 128 GiB of head array
inline constexpr uint64_t kOffsetMask = (uint64_t{1} << 56) - 1;

using pm::PmSlot;

struct alignas(64) PmBucket {
  std::atomic<uint8_t> tokens[kSlots];
  uint8_t pad[5];
  PmSlot slots[kSlots];
  std::atomic<uint64_t> next;
};
static_assert(sizeof(PmBucket) == 64, "paper Figure 3: a bucket is one 64 B cache line");
static_assert(offsetof(PmBucket, slots) == 8, "slots are 8-byte aligned after the tokens");
static_assert(offsetof(PmBucket, next) == 56, "the next offset closes the line");
static_assert(std::atomic<uint8_t>::is_always_lock_free);

inline constexpr uint8_t Token(uint64_t h) { return static_cast<uint8_t>(0x80 | (h >> 57)); }

// A live pair and its token, as a bucket image takes it.
struct Pair {
  Key k;
  Value v;
  uint8_t t;
};
// *b := a bucket image holding pairs p[0..n) (n <= kSlots) in its first slots, then `next`:
// every byte written (the image is NtCopy'd whole).
inline void FillBucket(PmBucket* b, const Pair* p, size_t n, uint64_t next) {
  std::memset(static_cast<void*>(b), 0, sizeof(PmBucket));
  for (size_t j = 0; j < n; j++) {
    b->tokens[j].store(p[j].t, std::memory_order_relaxed);
    b->slots[j].key.store(p[j].k, std::memory_order_relaxed);
    b->slots[j].value.store(p[j].v, std::memory_order_relaxed);
  }
  b->next.store(next, std::memory_order_relaxed);
}

// Root 0, the geometry: level L and split pointer s (2^L + s heads in use).
inline constexpr uint64_t PackGeo(uint32_t bits, uint64_t split) {
  return (uint64_t{bits} << 56) | (split & kOffsetMask);
}
inline constexpr uint32_t GeoBits(uint64_t g) { return static_cast<uint32_t>(g >> 56); }
inline constexpr uint64_t GeoSplit(uint64_t g) { return g & kOffsetMask; }
inline constexpr uint64_t HeadsInUse(uint64_t g) {
  return (uint64_t{1} << GeoBits(g)) + GeoSplit(g);
}
// The head of hash h (linear hashing): h mod 2^L, or h mod 2^(L+1) if that head was split.
inline constexpr uint64_t AddressOf(uint64_t h, uint64_t g) {
  const uint64_t a = h & ((uint64_t{1} << GeoBits(g)) - 1);
  return a < GeoSplit(g) ? h & ((uint64_t{2} << GeoBits(g)) - 1) : a;
}

// The directory block (root 2): the heads of the new pool (L0) and the segments' offsets.
inline constexpr int kMaxSegments = 31;
struct DirBlock {
  uint64_t base_bits;
  std::atomic<uint64_t> seg[kMaxSegments];
};
static_assert(sizeof(DirBlock) == 256, "the directory is four 64 B chunks");
inline constexpr uint32_t kDirChunks = sizeof(DirBlock) / 64;
// Segment k: its first head and its number of heads (k = 0: the 2^L0 heads of the new pool).
inline constexpr uint64_t SegmentFirst(uint32_t l0, uint32_t k) {
  return k ? uint64_t{1} << (l0 + k - 1) : 0;
}
inline constexpr uint64_t SegmentHeads(uint32_t l0, uint32_t k) {
  return uint64_t{1} << (k ? l0 + k - 1 : l0);
}
inline constexpr uint32_t SegmentOf(uint32_t l0, uint64_t head) {
  return head >> l0 ? static_cast<uint32_t>(std::bit_width(head)) - l0 : 0;
}

// The saved filter's header (one chunk), followed by the blocks.
struct SavedFilterHeader {
  uint64_t magic;
  uint64_t geometry;  // root 0 when it was saved
  uint64_t blocks;
  uint64_t keys;
  uint64_t stale;
  uint64_t checksum;
  uint64_t pad[2];
};
static_assert(sizeof(SavedFilterHeader) == 64);
inline constexpr uint64_t kSavedFilterMagic = 0x32544c4946485453ULL;  // "STHFILT2"

// Split-block Bloom filter: one 64 B block per key, one bit in each of its eight words.
// A filter's words stay mapped for the object's life, which is the open's (SmartHt keeps every
// filter it swapped out: FilterCheck reads the live one without a lock, so a reader may
// still read one that was just replaced). Discard() gives its pages back (zeros again) and
// Reset() reuses the mapping for another filter of at most capacity() blocks: the mapping is a
// power of two of blocks, its pages faulted in only where used, so one spare of each size
// serves every later filter up to it.
class BloomFilter {
 public:
  static constexpr uint64_t kBlockBits = 512;

  BloomFilter() = default;
  explicit BloomFilter(uint64_t blocks)
      : words_(std::bit_ceil(blocks) * 8), capacity_(std::bit_ceil(blocks)), blocks_(blocks) {}
  explicit operator bool() const { return static_cast<bool>(words_); }

  // Blocks for `keys` keys at `bits_per_key` bits each (at least one).
  static uint64_t BlocksFor(uint64_t keys, uint32_t bits_per_key) {
    return std::max<uint64_t>(1, (keys * bits_per_key + kBlockBits - 1) / kBlockBits);
  }

  // kExclusive: without locked instructions. REQUIRES: then no concurrent Add of any kind.
  template <bool kExclusive = false>
  void Add(uint64_t h) {
    uint64_t* w = &words_[Block(h) * 8];
    const uint64_t bits = Bits(h);
    for (int i = 0; i < 8; i++) {
      const uint64_t m = uint64_t{1} << ((bits >> (i * 8)) & 63);
      std::atomic_ref<uint64_t> a(w[i]);
      const uint64_t old = a.load(std::memory_order_relaxed);
      if constexpr (kExclusive) {
        a.store(old | m, std::memory_order_relaxed);  // (no branch: bits are random)
      } else if ((old & m) == 0) {
        a.fetch_or(m, std::memory_order_relaxed);
      }
    }
  }
  // (The vector probe where the CPU has one: a negative search is this block's miss, and the
  // word-by-word probe's eight loads let fewer searches' misses overlap; BlockBitsSetAvx2.)
  PMHASH_ALWAYS_INLINE bool MayContain(uint64_t h) const {
    const uint64_t* w = &words_[Block(h) * 8];
    return avx2_ ? BlockBitsSetAvx2(w, Bits(h)) : BlockBitsSet(w, Bits(h));
  }

  // Starts the miss of h's block (FilterFill, batched finds).
  void Prefetch(uint64_t h) const { __builtin_prefetch(&words_[Block(h) * 8], 1); }

  uint64_t blocks() const { return blocks_.load(std::memory_order_relaxed); }
  uint64_t capacity() const { return capacity_; }
  uint64_t bytes() const { return blocks() * 64; }
  // Word i (for saving and loading; REQUIRES no concurrent Add).
  uint64_t Word(uint64_t i) const {
    return std::atomic_ref<uint64_t>(words_[i]).load(std::memory_order_relaxed);
  }
  void SetWord(uint64_t i, uint64_t v) {
    std::atomic_ref<uint64_t>(words_[i]).store(v, std::memory_order_relaxed);
  }
  // Every word zero, the pages given back; the mapping stays (a late reader reads zeros).
  void Discard() {
    if (words_.Discard()) return;
    for (uint64_t i = 0; i < blocks() * 8; i++) SetWord(i, 0);  // (the kernel kept the pages)
  }
  // A new, empty filter of `blocks` blocks in this mapping. REQUIRES: blocks <= capacity(),
  // Discard() since the last use, and no search trusts this filter until it is swapped in.
  void Reset(uint64_t blocks) { blocks_.store(blocks, std::memory_order_relaxed); }

 private:
  uint64_t Block(uint64_t h) const {
    return static_cast<uint64_t>(
        (static_cast<__uint128_t>(Mix64(h, 0x9E3779B97F4A7C15ULL)) * blocks()) >> 64);
  }
  static uint64_t Bits(uint64_t h) { return Mix64(h ^ 0x5851F42D4C957F2DULL, 0xD6E8FEB86659FD93ULL); }

  // Read and written through std::atomic_ref (the pages start as zeros, none written at
  // construction: a spare mapping's unused tail is never faulted in).
  mutable HugeArray<uint64_t> words_;
  uint64_t capacity_ = 0;
  bool avx2_ = ActiveSimdLevel() >= SimdLevel::kAvx2;
  // Changed by Reset while a late reader may still compute a block of it: every value it takes
  // is within capacity_, so the read stays in the mapping.
  std::atomic<uint64_t> blocks_{0};
};

// A walk's adds to a filter, each made kDepth keys after its block was prefetched: a walk meets
// the keys in head order, each in a random block, and the locked RMW of Add would wait out one
// DRAM miss per key (a locked instruction overlaps no miss). Flush() before the filter is used.
// exclusive: nothing else adds to the filter meanwhile (the recovery walk, I10: writers keep
// their keys aside until its end), so its adds need no locked instruction (eight per key
// otherwise: a third of the walk's time at 10M keys).
class FilterFill {
 public:
  explicit FilterFill(BloomFilter* f, bool exclusive = false) : f_(f), exclusive_(exclusive) {}
  void Add(uint64_t h) {
    f_->Prefetch(h);
    uint64_t& slot = ring_[n_ & (kDepth - 1)];
    if (n_ >= kDepth) AddNow(slot);
    slot = h;
    n_++;
  }
  void Flush() {
    for (uint64_t i = n_ > kDepth ? n_ - kDepth : 0; i < n_; i++) AddNow(ring_[i & (kDepth - 1)]);
    n_ = 0;
  }

 private:
  void AddNow(uint64_t h) { exclusive_ ? f_->Add<true>(h) : f_->Add(h); }
  static constexpr uint64_t kDepth = 16;
  BloomFilter* f_;
  bool exclusive_;
  uint64_t ring_[kDepth] = {};
  uint64_t n_ = 0;
};

// The pool properties, as stored in the pool header (src/index/descriptor.h).
// Layout version 2: linear hashing over segments (version 1, a doubled array, is refused).
struct PersistentParams : index::LayoutWords<sizeof(PmBucket), kSlots, 2> {
  uint32_t head_bits = 0;
  uint32_t max_head_bits = 0;
  uint32_t split_batch = 0;
  uint32_t records = 0;           // 1: smartht-kv
  uint32_t max_record_bytes = 0;  // smartht-kv only
};

// What an open index runs with: the pool's properties and this open's options.
struct Config : PersistentParams, index::CommonOpenOptions {
  uint32_t filter_bits_per_key = 24;
  double grow_keys_per_head = 3.0;
  double rebuild_erased_ratio = 0.25;
  bool tear_safe = false;
  uint64_t save_filter_min_keys = 1024;
  bool lazy_recovery = true;
  void SetOpenOptions(const Options& o) {
    filter_bits_per_key = std::clamp<uint32_t>(o.smartht.filter_bits_per_key, 1, 256);
    grow_keys_per_head = o.smartht.grow_keys_per_head;
    rebuild_erased_ratio = o.smartht.rebuild_erased_ratio;
    tear_safe = o.smartht.tear_safe;
    save_filter_min_keys = o.smartht.save_filter_min_keys;
    lazy_recovery = o.smartht.lazy_recovery;
  }
};

template <pm::PersistPolicy P, bool kRecords>
class SmartHt;

// The registry's words for smartht and smartht-kv (pmhash list; src/index/descriptor.h).
inline constexpr index::KindTexts kTexts{
    "smartht", "smartht-kv", "smartht.max_record_bytes",
    "Xiao, Jiang, Feng et al.: Accelerating Persistent Hash Indexes via Reducing "
    "Negative Searches (SmartHT)",
    "chained 64 B PM buckets, DRAM Bloom filter for negative searches, growing head array"};

// kRecords = false: "smartht" (8 B inline keys and values). kRecords = true: "smartht-kv"
// (variable-size records: the slot holds [hash | record offset], src/index/records.h).
template <bool kRecords>
struct DescriptorFor
    : index::FlaggedDescriptorTypes<SmartHtParams, &Options::smartht, PersistentParams, SmartHt,
                                    kRecords, kTexts> {
  static constexpr auto kProperties = std::tuple{
      index::PoolProperty{"smartht.head_bits", &SmartHtParams::head_bits,
                          &PersistentParams::head_bits, 0u},
      index::PoolProperty{"smartht.max_head_bits", &SmartHtParams::max_head_bits,
                          &PersistentParams::max_head_bits, 28u},
      index::PoolProperty{"smartht.split_batch", &SmartHtParams::split_batch,
                          &PersistentParams::split_batch, 16u},
  };
  static std::string Check(const PersistentParams& s) {
    if (s.max_head_bits < kMinHeadBits || s.max_head_bits > kMaxHeadBitsLimit) {
      return "max_head_bits must be in [1, 31]";
    }
    if (s.head_bits != 0 && (s.head_bits < kMinHeadBits || s.head_bits > s.max_head_bits ||
                             s.head_bits > 26)) {
      return "head_bits must be 0 (from the pool size) or in [1, min(max_head_bits, 26)]";
    }
    if (s.split_batch < 1 || s.split_batch > 1024 || !std::has_single_bit(s.split_batch)) {
      return "split_batch must be a power of two in [1, 1024]";
    }
    return "";
  }
  static index::PoolLayout Layout(const PersistentParams& s) {
    return {sizeof(PmBucket), kDirChunks + (s.head_bits ? uint64_t{1} << s.head_bits : 64)};
  }
  // Three slots per 64 B bucket; at grow_keys_per_head = 3 the table averages about half full
  // (heads + chained buckets), and the next segment is allocated whole when a level starts.
  // Plan for 0.2, plus the filter saved at Close (4 B per key and 64 KiB).
  static constexpr double kPoolBytesPerKey =
      sizeof(PmBucket) / static_cast<double>(kSlots) / 0.2 + 4;
  static constexpr uint64_t kPoolFixedBytes = uint64_t{64} << 10;
};

template <pm::PersistPolicy P, bool kRecords = false>
class SmartHt : public index::EngineBase<SmartHt<P, kRecords>, P, Config> {
  PMHASH_ENGINE(SmartHt, P, Config, DescriptorFor<kRecords>);  // Open, Find, Erase, ..., ~SmartHt()

 public:
  // Live pairs. After a lazy crash open (I10) it waits for the recovery walk (in manual mode it
  // runs the walk on the calling thread).
  uint64_t Size() const {
    WaitRecovered();
    return Base::Size();
  }

  // Variable-size API (BytesIndex, src/index/records.h). NotSupported on "smartht".
  PMHASH_PROBE_RECORDS_API(kRecords);

  // For tests, tools and the crash harness.
  pm::BackgroundWork& background() { return background_; }
  // Level L of the table (2^L + s heads in use) and the heads in use.
  uint32_t head_bits() const { return GeoBits(geo_.load(std::memory_order_acquire)); }
  uint64_t heads() const { return HeadsInUse(geo_.load(std::memory_order_acquire)); }
  // True if the filter is complete (every live key in it): negative searches skip PM.
  bool filter_complete() const { return complete_.load(std::memory_order_acquire); }
  // True if the open took the filter saved at the last Close (loaded by a background task;
  // false again if its checksum failed there).
  bool filter_loaded() const { return filter_loaded_.load(std::memory_order_acquire); }
  // Whether the live filter may contain key k (tests: false-positive rate, no false negative).
  bool FilterMayContain(Key k) const;
  // Rebuilds the filter now, on the calling thread (tests; the index schedules it itself).
  Status RebuildFilter() { return RebuildFilterTask(); }
  // True while the recovery walk of a lazy crash open (I10) has not ended.
  bool recovering() const { return recovering_.load(std::memory_order_acquire); }
  // Tests: fn(i) runs on the recovery walk's thread after the walk has passed head i (no lock
  // held), so that a test can write on both sides of it. Set before the walk runs.
  void SetWalkHookForTest(std::function<void(uint64_t)> fn) { walk_hook_ = std::move(fn); }
  // Tests: fn(ctx) runs in every search's lock-free filter check (FilterCheck) between its
  // load of the live filter and its read of the key's block. Set while no search runs.
  void SetFilterReadHookForTest(void (*fn)(void*), void* ctx) {
    filter_read_hook_ = fn;
    filter_read_ctx_ = ctx;
  }
  // Tests: the epoch smartht-kv's readers enter (FindBytes) while they copy a record.
  EpochManager& RecordEpochForTest() const
    requires(kRecords)
  {
    return *epoch_;
  }

 private:
  using WriteMode = index::WriteMode;

  struct alignas(64) Stripe {
    mutable RwSpinLock lock;
    // The hashes of the keys written while a filter is filled privately that it will not see:
    // during the saved filter's load every key, during the recovery walk those of heads it had
    // passed (I7, I10; PublishFilter adds them). Guarded by `lock`.
    std::vector<uint64_t> late;
  };

  SmartHt(std::unique_ptr<pm::Pool> pool, const Config& config);

  PmBucket* At(uint64_t off) const { return pool_->template At<PmBucket>(off); }
  // Head i (< HeadsInUse(geometry)). REQUIRES: its stripe locked, or no concurrent split.
  PmBucket* HeadAt(uint64_t i) const {
    const uint32_t k = SegmentOf(base_bits_, i);
    return seg_[k].load(std::memory_order_relaxed) + (i - SegmentFirst(base_bits_, k));
  }
  // The head of hash h. REQUIRES: h's stripe locked (the geometry may move on, but not for h).
  PmBucket* HeadFor(uint64_t h) const { return HeadAt(HeadIndex(h)); }
  uint64_t HeadIndex(uint64_t h) const {
    return AddressOf(h, geo_.load(std::memory_order_acquire));
  }
  // The stripe of a hash or of a head index: address bits [g, g + S), g = stripe_shift_. Bit L
  // is never among them, so a head and the heads split from it share a stripe; and 2^g
  // consecutive heads (a split batch) share one.
  size_t StripeOf(uint64_t h) const { return (h >> stripe_shift_) & (stripes_.size() - 1); }
  RwSpinLock& StripeLock(uint64_t h) const { return stripes_[StripeOf(h)].lock; }
  // Calls fn(i) for every head i in use, in address order (the segments are read front to
  // back), each under its stripe's lock shared; heads added meanwhile are visited too. A split
  // moves keys only to a higher head, so a key present throughout is seen at least once;
  // exactly once if no split runs (hold resize_mu_). then() runs after each head, unlocked.
  template <class Fn, class Then = void (*)()>
  void WalkHeads(Fn&& fn, Then&& then = [] {}) const {
    for (uint64_t i = 0;; i++) {
      RwSpinLock& l = stripes_[StripeOf(i)].lock;
      l.lock_shared();
      if (i >= HeadsInUse(geo_.load(std::memory_order_acquire))) {
        l.unlock_shared();
        return;
      }
      fn(i);
      l.unlock_shared();
      then();
    }
  }
  // The bucket after b in its chain, or nullptr at the end. Every reader bounds the links
  // itself (I9: an open that loaded the saved state walked none): a link that is not a bucket
  // of the heap, or a hop past the heap's bucket count (a cycle), ends the chain and is counted
  // (bad_links_, "smartht.bad_links"; CheckInvariants reports such a chain). *hops counts the
  // hops of one traversal.
  PMHASH_ALWAYS_INLINE const PmBucket* Next(const PmBucket* b, uint64_t* hops) const {
    const uint64_t next = b->next.load(std::memory_order_acquire);
    if (next == 0) return nullptr;
    const uint64_t rel = next - heap_lo_;  // wraps above link_span_ below the heap
    if (rel > link_span_ || (rel & (sizeof(PmBucket) - 1)) != 0 || ++*hops > max_hops_)
        [[unlikely]] {
      bad_links_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    return At(next);
  }
  PmBucket* Next(PmBucket* b, uint64_t* hops) const {
    return const_cast<PmBucket*>(Next(static_cast<const PmBucket*>(b), hops));
  }
  // The recovery walks read the heads in order (the hardware prefetches them); a head's first
  // chained bucket is a random line, prefetched 16 heads early (a bound on the offset, not a
  // validation: a prefetch never faults, and the walk validates the link when it reaches it).
  void PrefetchChainAhead(uint64_t i, uint64_t n) const {
    if (i + 16 >= n) return;
    const uint64_t ahead = HeadAt(i + 16)->next.load(std::memory_order_relaxed);
    if (ahead != 0 && ahead - heap_lo_ <= link_span_) PrefetchLine(At(ahead));
  }
  // The walks that recover smartht-kv's records also ask for each live slot's record
  // (Records::Recover reads its first line, another random line) 8 heads early, from the head
  // and its first chained bucket, whose lines have arrived by then. A link is followed only if
  // it is a bucket of the heap (Next's bound); a record offset is only prefetched, which never
  // faults. Unlocked, beside the writers of a lazy walk (I10): the link is read with acquire, so
  // a bucket a writer has just linked is read after its copy, and slots are read as atomics.
  void PrefetchRecordsAhead(uint64_t i, uint64_t n) const {
    if constexpr (kRecords) {
      if (i + 8 >= n) return;
      auto records_of = [&](const PmBucket* b) {
        for (int j = 0; j < kSlots; j++) {
          if (b->tokens[j].load(std::memory_order_relaxed) != 0) {
            records_->Prefetch(b->slots[j].value.load(std::memory_order_relaxed));
          }
        }
      };
      const PmBucket* h = HeadAt(i + 8);
      records_of(h);
      const uint64_t next = h->next.load(std::memory_order_acquire);
      const uint64_t rel = next - heap_lo_;  // wraps above link_span_ below the heap
      if (next != 0 && rel <= link_span_ && (rel & (sizeof(PmBucket) - 1)) == 0) {
        records_of(At(next));
      }
    }
  }
  // Calls fn(bucket) for every bucket of head i's chain, head first.
  template <class Fn>
  void ForChain(uint64_t i, Fn&& fn) const {
    uint64_t hops = 0;
    for (const PmBucket* b = HeadAt(i); b != nullptr; b = Next(b, &hops)) fn(b);
  }
  // Calls fn(slot) for every live slot of head i's chain.
  template <class Fn>
  void ForLiveSlots(uint64_t i, Fn&& fn) const {
    ForChain(i, [&](const PmBucket* b) {
      for (int j = 0; j < kSlots; j++) {
        if (b->tokens[j].load(std::memory_order_relaxed) != 0) fn(b->slots[j]);
      }
    });
  }
  // A key as the search compares it: the inline key, or hash + bytes (smartht-kv).
  using Probe = index::KeyProbe;
  using Keys = index::ProbeKeys<kRecords>;  // src/index/records.h
  PMHASH_ALWAYS_INLINE Probe MakeProbe(Key k) const { return Keys::Make(hash_, k); }
  Probe MakeProbe(std::string_view s) const { return Keys::Make(hash_, s); }
  // The hash a slot's key word stands for (smartht-kv: the word is the hash).
  PMHASH_ALWAYS_INLINE uint64_t SlotHash(uint64_t key_word) const {
    return Keys::SlotHash(hash_, key_word);
  }
  // Locates p in the chain of head `head`. REQUIRES: its stripe locked.
  PMHASH_ALWAYS_INLINE bool Locate(const PmBucket* head, const Probe& p, PmBucket** bucket,
                                   int* slot) const;
  // Batched finds (src/index/batch.h; smartht only, smartht-kv copies records): stage 0 asks
  // for the filter block (a filter swapped out meanwhile stays mapped); stage 1 reads it and,
  // unless it rules the key out, asks for the stripe's lock and the head bucket, so that a
  // negative search of a batch costs one overlapped DRAM miss and no PM line.
  static constexpr int kBatchStages = kRecords ? 0 : 2;
  template <int kStage>
  PMHASH_ALWAYS_INLINE void BatchPrefetch(const Probe& p) const {
    static_assert(kStage == 0 || kStage == 1);
    if constexpr (kStage == 0) {
      serving_.load(std::memory_order_acquire)->Prefetch(p.h);
    } else if (!FilterRulesOut(p.h)) {
      PrefetchLine(&StripeLock(p.h));
      PrefetchLine(HeadFor(p.h));
    }
  }
  PMHASH_ALWAYS_INLINE Status BatchFind(const Probe& p, Value* v) const {
    return Search(p, v) ? Status::OK() : Status::NotFound();
  }
  // Calls take(slot) for every live slot, one head's chain at a time under its stripe's lock,
  // and done() after each head, unlocked (ForEach, ForEachBytes).
  template <class Take, class Done>
  void WalkLiveSlots(Take&& take, Done&& done) const;
  EpochManager& RecordEpoch() const { return *epoch_; }  // smartht-kv
  static int FreeSlot(const PmBucket* b) {
    for (int j = 0; j < kSlots; j++) {
      if (b->tokens[j].load(std::memory_order_relaxed) == 0) return j;
    }
    return -1;
  }
  void LockAll() const PMHASH_NO_THREAD_SAFETY_ANALYSIS;
  void UnlockAll() const PMHASH_NO_THREAD_SAFETY_ANALYSIS;
  void WaitStopTheWorld() const PMHASH_NO_THREAD_SAFETY_ANALYSIS;
  // The lock of h's stripe, after waiting out a stop-the-world phase that is under way.
  RwSpinLock& StripeLockFor(uint64_t h) const {
    if (stw_.load(std::memory_order_relaxed)) [[unlikely]] WaitStopTheWorld();
    return StripeLock(h);
  }
  // Filter capacity (keys) for a table holding `keys` keys.
  uint64_t FilterKeysFor(uint64_t keys) const;
  // REQUIRES: h's stripe locked; a its head.
  void AddToFilters(uint64_t h, uint64_t a);

  // The value stored is `value` (smartht) or a new record of p.s and value_bytes (smartht-kv).
  Status Write(const Probe& p, std::string_view value_bytes, Value value, WriteMode mode);
  Status EraseProbe(const Probe& p);
  void MaybeGrow();
  // True if `size` keys are more than factor x grow_keys_per_head per head in use (and the table
  // may still grow).
  bool Over(uint64_t size, double factor) const;
  // Splits up to `batches` batches while the table is over its threshold; true if it still is
  // after them. REQUIRES: resize_mu_ held.
  bool SplitWhileOver(int batches) PMHASH_REQUIRES(resize_mu_);
  Status GrowTask();
  // Splits the next batch of heads (Growth in the design note). REQUIRES: resize_mu_ held.
  Status SplitBatch() PMHASH_REQUIRES(resize_mu_);
  // Allocates segment k and persists its directory word. REQUIRES: resize_mu_ held.
  Status AddSegment(uint32_t k) PMHASH_REQUIRES(resize_mu_);
  void MaybeScheduleRebuild();
  void ScheduleRebuild();
  // Swaps a filled filter in, every stripe locked: complete from then on, none being built,
  // rebuild_pending_ cleared. built_keys: a filter filled from the chains, with that many keys
  // and none stale; nullopt: a loaded copy, whose counts were set at open.
  void InstallFilter(std::unique_ptr<BloomFilter> nf, std::optional<uint64_t> built_keys);
  // An empty filter of `blocks` blocks: a spare mapping that holds it (the smallest), or a new
  // one (null-equivalent on failure: check operator bool).
  std::unique_ptr<BloomFilter> NewFilter(uint64_t blocks) PMHASH_EXCLUDES(spare_mu_);
  // A filter no search trusts any more, or one never swapped in: kept mapped (a reader that
  // loaded it in an earlier use of its mapping may still read it), its pages given back, a
  // spare for NewFilter. Every filter that leaves the index while it is open goes here.
  void RetireFilter(std::unique_ptr<BloomFilter> f) PMHASH_EXCLUDES(spare_mu_);
  // What the filter says of h's key without a lock (FilterCheck): absent for certain; maybe
  // present (the chain must be searched); or nothing (incomplete, or swapped during the read:
  // ask again under the stripe's lock).
  enum class Filtered { kAbsent, kMaybe, kAsk };
  // Takes no lock and no locked instruction (a negative search's whole cost is then the block's
  // miss): the live filter's block is read as it is, and the answer trusted only if no swap came
  // between the filter's load and the read (filter_gen_), since a filter swapped out is zeroed
  // and may be refilled meanwhile (its mapping stays: spare_filters_). Linearizable as the
  // locked check: an insert sets its key's bits under its stripe's lock before it persists and
  // returns, an erase clears none, and a swapped-in filter holds every live key (InstallFilter:
  // every stripe locked, then the swap counted).
  PMHASH_ALWAYS_INLINE Filtered FilterCheck(uint64_t h) const {
    if (!complete_.load(std::memory_order_acquire)) return Filtered::kAsk;
    const uint64_t gen = filter_gen_.load(std::memory_order_acquire);
    const BloomFilter* f = serving_.load(std::memory_order_acquire);
    if (filter_read_hook_) [[unlikely]] filter_read_hook_(filter_read_ctx_);
    const bool maybe = f->MayContain(h);
    std::atomic_thread_fence(std::memory_order_acquire);  // (the read before the re-check)
    if (maybe) return Filtered::kMaybe;  // (whatever a swap did: the chain is searched)
    return filter_gen_.load(std::memory_order_relaxed) == gen ? Filtered::kAbsent
                                                               : Filtered::kAsk;
  }
  // True if h's key is certainly absent (FilterCheck).
  PMHASH_ALWAYS_INLINE bool FilterRulesOut(uint64_t h) const {
    return FilterCheck(h) == Filtered::kAbsent;
  }
  // p's value word (smartht-kv: its record's offset), under its stripe's lock shared; false if
  // absent. The filter's "no" inline (no call, no lock, no PM line); the rest out of line.
  // REQUIRES (smartht-kv): an epoch guard while the caller reads the record.
  PMHASH_ALWAYS_INLINE bool Search(const Probe& p, uint64_t* word) const {
    const Filtered f = FilterCheck(p.h);
    if (f == Filtered::kAbsent) return false;  // the paper's point: no PM access (and no lock)
    return SearchAfterFilter(p, f, word);
  }
  // Search past FilterCheck's answer f (kMaybe or kAsk): the chain, under the stripe's lock.
  bool SearchAfterFilter(const Probe& p, Filtered f, uint64_t* word) const;
  // smartht-kv's uint64 Find (its 8-byte record: index::ProbeCalls::Find), out of line.
  Status FindRecord(Key k, Value* v) const;
  // The same question under h's stripe lock, where FilterCheck's answer was f: asked of the
  // filter again only if the check could not answer (kAsk). REQUIRES: h's stripe locked.
  PMHASH_ALWAYS_INLINE bool FilterRulesOutLocked(Filtered f, uint64_t h) const {
    return f == Filtered::kAsk && complete_.load(std::memory_order_acquire) &&
           !filter_->MayContain(h);
  }
  Status RebuildFilterTask();

  Status Create();
  Status Recover();
  // I10: root 3 raised (persisted) to cover chunks [off, off + n buckets) before they are linked.
  void CoverChunks(uint64_t off, uint64_t n);
  // A root 3 the heap can hold: past the heap's start, at most its end, chunk-aligned.
  bool ValidBound(uint64_t b) const {
    return b > heap_lo_ && b - heap_lo_ <= link_span_ + sizeof(PmBucket) &&
           (b - heap_lo_) % sizeof(PmBucket) == 0;
  }
  // bound_ from root 3, raised over every chunk in use if it does not cover them.
  void EstablishBound();
  // I10: the open after a crash that serves at once: root 0 and the directory checked, the cut
  // batch cleaned (I8), the chunks below root 3 claimed; RecoverTask walks the chains.
  Status RecoverLazily(uint64_t geo);
  Status RecoverTask();
  // Waits for (manual mode: runs) the recovery walk of a lazy open. REQUIRES: not from a task.
  void WaitRecovered() const { WaitWhile(recovering_); }
  // smartht-kv (I10): from a lazy open to the recovery walk's end (for good if the walk fails),
  // a record below the bound it marks under (one the crash left) is freed only after the
  // walk's end, and only if the walk has marked it (its head a is behind the walk): one the walk
  // has not marked never will (its slot is no longer live), so its slot is free after the
  // walk anyway, once the readers that may hold it have left (the walk's end waits for them).
  // True if the record is taken care of so (deferred, or dropped); false: the caller retires it
  // now. REQUIRES: a's stripe lock held (the walk passes a head under it).
  PMHASH_ALWAYS_INLINE bool DeferFree([[maybe_unused]] uint64_t a,
                                      [[maybe_unused]] uint64_t off) {
    if constexpr (kRecords) {
      if (deferring_.load(std::memory_order_acquire) &&
          off < heap_lo_ + claimed_ * sizeof(PmBucket)) [[unlikely]] {
        return DeferFreeSlow(a, off);
      }
    }
    return false;
  }
  bool DeferFreeSlow(uint64_t a, uint64_t off) PMHASH_EXCLUDES(defer_mu_);
  // The walk's end: the deferred frees run (Retire); later ones run at once.
  void RetireDeferred() PMHASH_EXCLUDES(defer_mu_);
  // Publishes nf (null: none) as the filter being built, every stripe locked, so that writers
  // add to it themselves from then on; stops the collection of late keys and adds those the
  // writers kept aside while nf was filled privately (AddToFilters; I7, I10).
  void PublishFilter(BloomFilter* nf) PMHASH_NO_THREAD_SAFETY_ANALYSIS;
  // Waits until `busy` is false, running queued tasks meanwhile (manual mode runs them only so).
  void WaitWhile(const std::atomic<bool>& busy) const;
  // The size counter's share of a write to head a: during the recovery walk, only a head it
  // has passed counts (it counts the others itself). REQUIRES: a's stripe locked.
  PMHASH_ALWAYS_INLINE void CountLive(uint64_t a, int64_t d) {
    if (recovering_.load(std::memory_order_relaxed) &&
        a >= walked_.load(std::memory_order_relaxed)) [[unlikely]] {
      return;
    }
    size_.Add(d);
  }
  // A clean open (I9): the image of the last Close vouches for the chains; nothing is walked.
  // smartht-kv: then the record heap's (record_heap.h, "Clean shutdown").
  void SaveState(pm::StateWriter& w) const;
  Status LoadState(pm::StateReader& r);
  // Recovery, its steps: root 0 checked; the directory validated and the segments marked
  // reachable (I6); the chains walked; the DRAM structures built.
  struct WalkCounts {
    uint64_t live = 0;     // live pairs
    uint64_t chained = 0;  // chained buckets
    uint64_t cleaned = 0;  // I8 movers and second copies cleared
  };
  // The last split batch (I8): its sources [first, first + n), split at level `level`.
  struct Cut {
    uint64_t first = 0, n = 0;
    uint32_t level = 0;
    bool Has(uint64_t i) const { return i - first < n; }
  };
  Cut LastBatch(uint64_t geo) const;
  // Head i's chain: every live slot checked (I1) and counted, add(hash, key word, value word)
  // called for it (a Status: smartht-kv recovers the slot's record there); in a source of `cut`,
  // its movers and second copies cleared instead (I8; *seen: scratch); every link's Status from
  // link(next) (which counts it) before it is followed.
  template <class Link, class Add>
  Status WalkHead(uint64_t i, uint64_t geo, const Cut& cut, std::unordered_set<uint64_t>* seen,
                  WalkCounts* c, Link&& link, Add&& add);
  // What a walk that rebuilds the record heap does for a live slot (key word kw, value word vw):
  // smartht-kv's Records::Recover of its record (reachable, in bounds, its key of the slot's
  // hash); nothing for smartht.
  Status RecoverRecord([[maybe_unused]] uint64_t kw, [[maybe_unused]] uint64_t vw) {
    if constexpr (kRecords) return records_->Recover(vw, kw, hash_);
    return Status::OK();
  }
  Status CheckGeometry(uint64_t geo) const;
  // mark(offset, chunks): MarkReachable (the walk), or a load's check of the loaded allocator.
  template <class Mark>
  Status RecoverDirectory(uint64_t geo, Mark&& mark);
  Status WalkChains(uint64_t geo, WalkCounts* c);
  // lazy: the chains are still to be walked (RecoverTask), c counts only the cleaned pairs.
  Status Serve(uint64_t geo, const WalkCounts& c, bool lazy = false);
  Status Quiesce();
  // Takes the filter saved at root 1 if its header matches this table: its chunks held (named
  // by the loaded image, *held; or marked now), its counts; LoadFilterTask reads the blocks.
  bool HoldSavedFilter(uint64_t off, uint64_t live, uint64_t* held);
  Status LoadFilterTask();
  Status SaveFilter();

  // Table. geo_ mirrors root 0; it moves on only under the stripes of the heads it adds (read it
  // under any stripe lock, or with none for statistics). seg_[k] is set before any head of
  // segment k is in use and stays until the index closes.
  std::atomic<uint64_t> geo_{0};
  uint32_t base_bits_ = 0;  // L0
  uint64_t dir_off_ = 0;
  std::atomic<PmBucket*> seg_[kMaxSegments] = {};
  uint64_t seg_off_[kMaxSegments] = {};  // written at open and under resize_mu_
  // Next(): a link is a bucket of the heap iff link - heap_lo_ <= link_span_ and is a multiple
  // of the bucket size (heap_lo_ the heap's offset, link_span_ the last bucket's distance).
  uint64_t heap_lo_ = 0, link_span_ = 0, max_hops_ = 0;  // max_hops_: the heap's chunks
  HugeArray<Stripe> stripes_;  // a power of two of them, fixed for the life of the open
  uint32_t stripe_shift_ = 0;  // StripeOf; S + stripe_shift_ <= L at open (L only grows)

  // Filter: replaced only with every stripe locked; added to under any stripe lock; read under
  // one, or with none by FilterCheck (through serving_, the same filter).
  std::unique_ptr<BloomFilter> filter_;
  std::atomic<const BloomFilter*> serving_{nullptr};
  std::atomic<uint64_t> filter_gen_{0};  // filter swaps since the open (InstallFilter)
  // The filters swapped out: kept mapped until the index is destroyed (a reader without a lock
  // may still read one), their pages given back, reused by NewFilter. A new mapping is made only
  // for a filter larger than every spare (sizes are powers of two of blocks), so the spares are
  // few (one or two of each size at most in the tests' churn): their memory is none, their
  // address space a small multiple of the largest filter's.
  mutable SpinLock spare_mu_;
  std::vector<std::unique_ptr<BloomFilter>> spare_filters_ PMHASH_GUARDED_BY(spare_mu_);
  // Tests: runs in FilterCheck between its load of the filter and its read of the block.
  void (*filter_read_hook_)(void*) = nullptr;
  void* filter_read_ctx_ = nullptr;
  std::atomic<BloomFilter*> building_{nullptr};  // being filled by a rebuild, or null
  std::atomic<bool> complete_{false};
  std::atomic<bool> rebuild_pending_{false};
  std::atomic<bool> grow_pending_{false};
  std::atomic<int64_t> stale_{0};         // keys erased since the filter was built
  std::atomic<uint64_t> filter_keys_{0};  // keys added since the filter was built
  std::atomic<uint64_t> filter_capacity_{0};  // keys the live filter was sized for
  std::atomic<bool> filter_loaded_{false};
  // The saved filter of a clean open: its offset and chunks (LoadState: the chunks its image
  // named), held until LoadFilterTask has read them; filter_pending_: the chunks are still held
  // (CheckInvariants waits).
  uint64_t saved_filter_ = 0, saved_filter_chunks_ = 0;
  // A filter is filled privately (the saved filter's copy, or the recovery walk's, without
  // locked instructions): writers keep the keys it will not see in their stripe's `late` list
  // meanwhile (AddToFilters). Set before serving, cleared under LockAll (PublishFilter).
  std::atomic<bool> collect_late_{false};
  mutable std::atomic<bool> filter_pending_{false};

  Mutex resize_mu_;   // split batches, one at a time
  Mutex rebuild_mu_;  // filter rebuilds, one at a time
  mutable Mutex stw_mu_;                  // held with every stripe (LockAll)
  mutable std::atomic<bool> stw_{false};  // a LockAll is under way
  std::atomic<uint64_t> chained_{0};       // chained buckets (not heads)
  std::atomic<uint64_t> links_{0};         // head insertions since open
  mutable std::atomic<uint64_t> bad_links_{0};  // links Next() refused (a damaged pool)
  std::atomic<uint64_t> rebuilds_{0};      // filter rebuilds since open
  std::atomic<uint64_t> batches_{0};       // split batches since open
  std::atomic<uint64_t> split_cleanups_{0};  // movers of a cut batch cleared at open (I8)
  std::atomic<uint64_t> grow_failures_{0};
  std::atomic<uint64_t> no_grow_below_{0};  // after a failed growth: retry past this size
  mutable StripedCounter false_positives_;  // filter said maybe, PM said no (Find)

  // I10: root 3's mirror (every chunk the table links ends at or below it), raised under
  // bound_mu_ by bound_step_ bytes at a time (smartht only).
  std::atomic<uint64_t> bound_{0};
  SpinLock bound_mu_;
  uint64_t bound_step_ = 0;
  std::atomic<uint64_t> bound_raises_{0};
  // The recovery walk of a lazy crash open (I10): the chunks below claimed_ (a chunk index) are
  // held in the allocator until it ends; reach_ collects what it reaches; walked_ heads passed
  // (UINT64_MAX while the saved filter loads: AddToFilters keeps every key).
  mutable std::atomic<bool> recovering_{false};
  std::atomic<uint64_t> walked_{0};
  std::atomic<bool> failed_{false};  // the walk found the pool damaged: failure_ says how
  Status failure_;                   // (written before failed_, read after it)
  std::unique_ptr<pm::ChunkSet> reach_;
  std::unique_ptr<pm::ChunkRanges> dir_chunks_;  // the open's directory and segments, for reach_
  uint64_t claimed_ = 0;
  // smartht-kv: the frees DeferFree took, until the walk's end (RetireDeferred).
  SpinLock defer_mu_;
  bool defer_frees_ PMHASH_GUARDED_BY(defer_mu_) = false;
  std::atomic<bool> deferring_{false};  // defer_frees_, for DeferFree's unlocked test
  std::vector<uint64_t> deferred_ PMHASH_GUARDED_BY(defer_mu_);
  std::atomic<uint64_t> deferred_frees_{0};  // deferred, then freed (stats)
  std::atomic<uint64_t> dropped_frees_{0};   // of records the walk never marked (stats)
  std::atomic<uint64_t> late_keys_{0};  // keys kept aside for a private filter (stats)
  std::atomic<uint64_t> write_waits_{0};  // writes that found no room above root 3 (stats)
  std::function<void(uint64_t)> walk_hook_;  // tests: after each head the walk passed
  bool lazy_ = false;  // this open recovered lazily
  std::chrono::steady_clock::time_point served_at_{};
  double walk_seconds_ = 0;  // open to the walk's end (read after recovering_ is false)

  std::unique_ptr<index::Records> records_;  // smartht-kv only (src/index/records.h)
  // smartht-kv only, after pool_ and records_: its destructor frees into them.
  std::unique_ptr<EpochManager> epoch_;

  // Last: destroyed (joined) first. Mutable: Size() (const) may run the recovery walk.
  mutable pm::BackgroundWork background_;
};

// ============================================================================================
// Implementation
// ============================================================================================

template <pm::PersistPolicy P, bool R>
SmartHt<P, R>::SmartHt(std::unique_ptr<pm::Pool> pool, const Config& config)
    : Base(std::move(pool), config),
      background_(pm::BackgroundOptions{config.background_threads, pool_->sim_hook()}) {
  static_assert(sizeof(PmBucket) == 64, "a bucket is one allocator chunk (Layout)");
  const pm::ChunkAllocator& alloc = pool_->allocator();
  if (alloc.chunk_count() != 0) {  // (else every link but 0 is refused: heap_lo_ = span = 0)
    heap_lo_ = alloc.heap_offset();
    link_span_ = (alloc.chunk_count() - 1) * alloc.chunk_size();
    max_hops_ = alloc.chunk_count();
  }
  bound_step_ = std::max<uint64_t>(64, alloc.chunk_count() / 32) * sizeof(PmBucket);
  if constexpr (R) {
    index::MakeRecords(*pool_, config.reclaim_batch, config.max_record_bytes, kKindName, &epoch_,
                       &records_);
    // I10: root 3 covers every slab and large record before a record in it is published.
    records_->heap().SetChunkHook([this](uint64_t off, uint64_t n) { CoverChunks(off, n); });
  }
}

// Twice the keys: a growing table rebuilds its filter once per doubling of its keys.
template <pm::PersistPolicy P, bool R>
uint64_t SmartHt<P, R>::FilterKeysFor(uint64_t keys) const {
  return std::max<uint64_t>(64, 2 * keys);
}

// Stop-the-world: operations that see stw_ wait on stw_mu_ (asleep) instead of spinning on a
// stripe lock the whole time a doubling runs.
template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::LockAll() const {
  stw_mu_.lock();
  stw_.store(true, std::memory_order_relaxed);
  for (size_t s = 0; s < stripes_.size(); s++) stripes_[s].lock.lock();
}
template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::UnlockAll() const {
  for (size_t s = stripes_.size(); s-- > 0;) stripes_[s].lock.unlock();
  stw_.store(false, std::memory_order_relaxed);
  stw_mu_.unlock();
}
template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::WaitStopTheWorld() const {
  stw_mu_.lock();
  stw_mu_.unlock();
}

template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::AddToFilters(uint64_t h, uint64_t a) {
  filter_->Add(h);
  if (BloomFilter* b = building_.load(std::memory_order_acquire)) {
    b->Add(h);
  } else if (collect_late_.load(std::memory_order_relaxed)) [[unlikely]] {
    // A filter filled privately will not see this key: the recovery walk's if it has passed
    // head a (I10), the saved filter's copy ever (walked_ is then past every head, I7).
    if (a < walked_.load(std::memory_order_relaxed)) stripes_[StripeOf(h)].late.push_back(h);
  }
  filter_keys_.fetch_add(1, std::memory_order_relaxed);
}

template <pm::PersistPolicy P, bool R>
bool SmartHt<P, R>::FilterMayContain(Key k) const {
  const uint64_t h = R ? hash_(index::U64Bytes(k).view()) : hash_(k);
  RwSpinLock& l = StripeLock(h);
  l.lock_shared();
  const bool r = filter_->MayContain(h);
  l.unlock_shared();
  return r;
}

// The initial table: the directory and segment 0, 2^head_bits empty heads (every byte written:
// the media may be dirty).
template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::Create() {
  uint32_t bits = params_.head_bits;
  if (bits == 0) {
    const uint64_t heads = pool_->allocator().chunk_count() / 16;
    bits = std::min<uint32_t>(
        std::max<uint32_t>(heads ? static_cast<uint32_t>(std::bit_width(heads)) - 1 : 0, 6),
        std::min<uint32_t>(24, params_.max_head_bits));
  }
  const uint64_t n = uint64_t{1} << bits;
  auto dir = pool_->allocator().Allocate(kDirChunks);
  if (!dir.ok()) return dir.status();
  auto off = pool_->allocator().Allocate(static_cast<uint32_t>(n));
  if (!off.ok()) return off.status();
  alignas(64) PmBucket zero[16];
  std::memset(static_cast<void*>(zero), 0, sizeof(zero));
  for (uint64_t i = 0; i < n; i += 16) {
    const uint64_t m = std::min<uint64_t>(16, n - i);
    persist_.NtCopy(At(off.value() + i * sizeof(PmBucket)), zero, m * sizeof(PmBucket));
  }
  alignas(64) DirBlock d{};
  d.base_bits = bits;
  d.seg[0].store(off.value(), std::memory_order_relaxed);
  persist_.NtCopy(pool_->base() + dir.value(), &d, sizeof(d));
  persist_.Fence();
  pool_->SetRoot(0, PackGeo(bits, 0));
  pool_->SetRoot(1, 0);
  pool_->SetRoot(2, dir.value());
  CoverChunks(dir.value(), kDirChunks);
  CoverChunks(off.value(), n);
  return pool_->CommitCreate();
}

// Root 2: L0, the segments holding heads in use (present, each a whole reachable block), at
// most the next one allocated ahead, none past it (I5, I6).
template <pm::PersistPolicy P, bool R>
template <class Mark>
Status SmartHt<P, R>::RecoverDirectory(uint64_t geo, Mark&& mark) {
  const uint64_t dir = pool_->root(2);
  if (dir == 0) return Status::Corruption("smartht: pool has no directory (root 2 is empty)");
  if (Status s = mark(dir, kDirChunks); !s.ok()) {
    return Status::Corruption("smartht: directory: " + std::string(s.message()));
  }
  const auto* d = pool_->template At<DirBlock>(dir);
  const uint32_t bits = GeoBits(geo);
  if (d->base_bits < kMinHeadBits || d->base_bits > bits) {
    return Status::Corruption("smartht: directory names 2^" + std::to_string(d->base_bits) +
                              " first heads, table at level " + std::to_string(bits));
  }
  const auto l0 = static_cast<uint32_t>(d->base_bits);
  const uint32_t in_use = bits - l0 + 1 + (GeoSplit(geo) ? 1 : 0);  // segments with heads in use
  const uint32_t ahead = bits < params_.max_head_bits ? bits - l0 + 1 : bits - l0;
  for (uint32_t k = 0; k < static_cast<uint32_t>(kMaxSegments); k++) {
    const uint64_t off = d->seg[k];
    const std::string what = "smartht: directory segment " + std::to_string(k);
    if (off == 0) {
      if (k < in_use) return Status::Corruption(what + " is missing");
      continue;
    }
    if (k > ahead) return Status::Corruption(what + " is past the next level");
    if (Status s = mark(off, static_cast<uint32_t>(SegmentHeads(l0, k))); !s.ok()) {
      return Status::Corruption(what + ": " + std::string(s.message()));
    }
    seg_off_[k] = off;
    seg_[k].store(At(off), std::memory_order_relaxed);
  }
  base_bits_ = l0;
  dir_off_ = dir;
  return Status::OK();
}

// Root 0: a level in [1, max_head_bits], a split pointer below 2^L on a batch boundary.
template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::CheckGeometry(uint64_t geo) const {
  const uint32_t bits = GeoBits(geo);
  const uint64_t split = GeoSplit(geo);
  if (geo == 0) return Status::Corruption("smartht: pool has no geometry (root 0 is empty)");
  if (bits < kMinHeadBits || bits > params_.max_head_bits) {
    return Status::Corruption("smartht: table at level " + std::to_string(bits) +
                              " (max_head_bits " + std::to_string(params_.max_head_bits) + ")");
  }
  const uint64_t batch = std::min<uint64_t>(params_.split_batch, uint64_t{1} << bits);
  if (split >= (uint64_t{1} << bits) || split % batch != 0 ||
      (split != 0 && bits == params_.max_head_bits)) {
    return Status::Corruption("smartht: split pointer " + std::to_string(split) +
                              " at level " + std::to_string(bits));
  }
  return Status::OK();
}

// I8: the last batch is [s - B, s) at level L, or the last batch of level L - 1 if s = 0 (none
// on a table that never split).
template <pm::PersistPolicy P, bool R>
typename SmartHt<P, R>::Cut SmartHt<P, R>::LastBatch(uint64_t geo) const {
  const uint32_t bits = GeoBits(geo);
  const uint64_t split = GeoSplit(geo);
  Cut cut;
  cut.level = bits;
  if (split != 0) {
    cut.n = std::min<uint64_t>(params_.split_batch, uint64_t{1} << bits);
    cut.first = split - cut.n;
  } else if (bits > base_bits_) {
    cut.level = bits - 1;
    cut.n = std::min<uint64_t>(params_.split_batch, uint64_t{1} << cut.level);
    cut.first = (uint64_t{1} << cut.level) - cut.n;
  }
  return cut;
}

template <pm::PersistPolicy P, bool R>
template <class Link, class Add>
Status SmartHt<P, R>::WalkHead(uint64_t i, uint64_t geo, const Cut& cut,
                               std::unordered_set<uint64_t>* seen, WalkCounts* c, Link&& link,
                               Add&& add) {
  // The pairs of a cut source's chain (I8: a stayer may be there twice), by key word (smartht)
  // or record offset (smartht-kv: a stayer's copies name one record).
  const bool cut_source = cut.Has(i);
  if (cut_source) seen->clear();  // (only cut sources use it; clear() costs its buckets)
  const uint32_t k = SegmentOf(base_bits_, i);
  uint64_t steps = 0;
  for (uint64_t b_off = seg_off_[k] + (i - SegmentFirst(base_bits_, k)) * sizeof(PmBucket);
       b_off != 0;) {
    PmBucket* b = At(b_off);
    for (int j = 0; j < kSlots; j++) {
      const uint8_t t = b->tokens[j].load(std::memory_order_relaxed);
      if (t == 0) continue;
      const uint64_t kw = b->slots[j].key.load(std::memory_order_relaxed);
      const uint64_t vw = b->slots[j].value.load(std::memory_order_relaxed);
      const uint64_t h = SlotHash(kw);
      const uint64_t a = AddressOf(h, geo);
      if (t == Token(h) && cut_source &&
          (a == i + (uint64_t{1} << cut.level) ||
           (a == i && !seen->insert(R ? vw : kw).second))) {
        // I8: a mover (its new head holds it) or a stayer's second copy (the head holds it).
        b->tokens[j].store(0, std::memory_order_relaxed);
        persist_.Persist(&b->tokens[j], 1);
        c->cleaned++;
        continue;
      }
      if (t != Token(h) || a != i) {
        return Status::Corruption("smartht: bucket at offset " + std::to_string(b_off) +
                                  " slot " + std::to_string(j) + ": token " + std::to_string(t) +
                                  " does not match a key of head " + std::to_string(i));
      }
      PMHASH_RETURN_IF_ERROR(add(h, kw, vw));
      c->live++;
    }
    const uint64_t next = b->next.load(std::memory_order_relaxed);
    if (next != 0) {
      if (++steps > pool_->allocator().chunk_count()) {
        return Status::Corruption("smartht: chain of head " + std::to_string(i) +
                                  " does not end");
      }
      if (Status s = link(next); !s.ok()) {
        return Status::Corruption("smartht: chain of head " + std::to_string(i) + ": " +
                                  std::string(s.message()));
      }
    }
    b_off = next;
  }
  return Status::OK();
}

// Walks every chain of the heads in use (WalkHead): reachability (cycles, shared and stray
// chunks are rejected by MarkReachable), the slots checked, the cut batch cleaned.
template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::WalkChains(uint64_t geo, WalkCounts* c) {
  pm::ChunkAllocator& alloc = pool_->allocator();
  const Cut cut = LastBatch(geo);
  const uint64_t n = HeadsInUse(geo);
  std::unordered_set<uint64_t> seen;
  auto link = [&](uint64_t next) {
    c->chained++;
    return alloc.MarkReachable(next);
  };
  for (uint64_t i = 0; i < n; i++) {
    PrefetchChainAhead(i, n);
    PrefetchRecordsAhead(i, n);
    PMHASH_RETURN_IF_ERROR(WalkHead(i, geo, cut, &seen, c, link,
                                    [this](uint64_t, uint64_t kw, uint64_t vw) {
                                      return RecoverRecord(kw, vw);
                                    }));
  }
  return Status::OK();
}

// The walk of every chain (WalkChains with the slot checks), then the DRAM side (Serve); or,
// after a crash, the lazy open (I10) when root 3 bounds the chains.
template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::Recover() {
  saved_filter_chunks_ = 0;  // (a failed LoadState's: the allocator starts empty)
  const uint64_t geo = pool_->root(0);
  PMHASH_RETURN_IF_ERROR(CheckGeometry(geo));
  // (A pool whose root 3 covers nothing, e.g. a smartht-kv pool of a version before its
  // records were covered, is walked at once; EstablishBound then sets root 3.)
  if (params_.lazy_recovery && !pool_->created() && ValidBound(pool_->root(3))) {
    return RecoverLazily(geo);
  }
  PMHASH_RETURN_IF_ERROR(RecoverDirectory(geo, [this](uint64_t off, uint32_t n) {
    return pool_->allocator().MarkReachable(off, n);
  }));
  if constexpr (R) records_->Reset();
  WalkCounts c;
  PMHASH_RETURN_IF_ERROR(WalkChains(geo, &c));
  return Serve(geo, c);
}

// I10. The directory and the segments are checked (below root 3, named once) and kept for the
// walk's reach_; the cut batch's sources are cleaned now (their links only bounded: the walk
// checks them later), so that every chain holds what I1 says before the first request; the
// chunks below root 3 are held in the allocator until the walk settles them.
template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::RecoverLazily(uint64_t geo) {
  pm::ChunkAllocator& alloc = pool_->allocator();
  const uint64_t bound = pool_->root(3);
  auto dir = std::make_unique<pm::ChunkRanges>(alloc);
  PMHASH_RETURN_IF_ERROR(RecoverDirectory(geo, [&](uint64_t off, uint32_t n) {
    return dir->Add(off, n) && off + uint64_t{n} * sizeof(PmBucket) <= bound
               ? Status::OK()
               : Status::Corruption("not heap chunks below root 3: " + std::to_string(off));
  }));
  if (!dir->Disjoint()) {
    return Status::Corruption("smartht: the directory names a chunk twice");
  }
  dir_chunks_ = std::move(dir);
  if constexpr (R) records_->Reset();  // (the walk marks what it reaches: RecoverTask)
  const Cut cut = LastBatch(geo);
  std::unordered_set<uint64_t> seen;
  WalkCounts c;
  auto bounded = [&](uint64_t next) {
    return alloc.ValidChunk(next) ? Status::OK()
                                  : Status::Corruption(std::to_string(next) + " is not a bucket");
  };
  for (uint64_t i = cut.first; i < cut.first + cut.n; i++) {
    PMHASH_RETURN_IF_ERROR(WalkHead(i, geo, cut, &seen, &c, bounded, [](auto...) {
      return Status::OK();  // (the walk checks and counts these heads again)
    }));
  }
  claimed_ = (bound - heap_lo_) / sizeof(PmBucket);
  alloc.ClaimBelow(claimed_);
  if constexpr (R) {
    LockGuard<SpinLock> d(defer_mu_);
    defer_frees_ = true;
    deferring_.store(true, std::memory_order_release);
  }
  return Serve(geo, WalkCounts{0, 0, c.cleaned}, /*lazy=*/true);
}

// The recovery walk of a lazy open (I10), on the background executor while the index serves:
// each head's chain under its stripe's lock shared (WalkHead: the checks of the eager walk), its
// keys into a new filter that only it fills (a writer keeps the key it writes to a head the walk
// has passed in its stripe's `late` list), its links into reach_ (a link below the claimed
// chunks is counted as chained; one past them must be a chunk a writer allocated since the
// open); smartht-kv: each record below root 3 marked in the record heap. Then the heap's slabs
// binned, the allocator settled, the deferred frees run, the counts added; the filter published
// (writers add to it from then on), the late keys added, the filter swapped in. No split runs
// meanwhile (MaybeGrow waits for the walk's end). Persists nothing.
template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::RecoverTask() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  LockGuard<Mutex> g(rebuild_mu_);
  pm::ChunkAllocator& alloc = pool_->allocator();
  const uint64_t geo = geo_.load(std::memory_order_acquire);
  const uint64_t n = HeadsInUse(geo);
  const uint64_t bound = heap_lo_ + claimed_ * sizeof(PmBucket);
  auto nf = NewFilter(BloomFilter::BlocksFor(filter_capacity_.load(std::memory_order_relaxed),
                                             params_.filter_bits_per_key));
  Status st = *nf ? Status::OK() : Status::OutOfMemory("smartht: Bloom filter");
  // The chunk set starts with the directory and the segments (checked at the open: disjoint,
  // below root 3); made here, not at the open, which it would cost a heap-sized allocation.
  reach_ = std::make_unique<pm::ChunkSet>(alloc);
  if (st.ok() && !(reach_->ok() && dir_chunks_ && dir_chunks_->AddTo(*reach_))) {
    st = Status::OutOfMemory("smartht: the recovery walk's chunk set");
  }
  dir_chunks_.reset();
  if constexpr (R) {
    // smartht-kv: the heap names its slabs' and large records' chunks into reach_, below the
    // bound (a record past it is a writer's since the open: CheckWritten).
    records_->heap().BeginLazyRecovery([this, bound](uint64_t off, uint32_t n) {
      return off + uint64_t{n} * sizeof(PmBucket) <= bound && reach_->Add(off, n)
                 ? Status::OK()
                 : Status::Corruption("chunks shared, or past root 3, at " + std::to_string(off));
    });
  }
  WalkCounts c;
  std::unordered_set<uint64_t> seen;
  FilterFill fill(nf.get(), /*exclusive=*/true);  // (writers add to no filter it fills: late)
  auto link = [&](uint64_t next) {
    if (!reach_->Add(next)) {
      return Status::Corruption(std::to_string(next) + " is not a bucket, or is reached twice");
    }
    if (next < bound) {
      c.chained++;
      return Status::OK();
    }
    return alloc.IsUsed(next) ? Status::OK()
                              : Status::Corruption(std::to_string(next) + " is past root 3");
  };
  for (uint64_t i = 0; i < n && st.ok(); i++) {
    PrefetchChainAhead(i, n);
    PrefetchRecordsAhead(i, n);
    RwSpinLock& l = stripes_[StripeOf(i)].lock;
    l.lock_shared();
    st = WalkHead(i, geo, Cut{}, &seen, &c, link, [&](uint64_t h, uint64_t kw, uint64_t vw) {
      fill.Add(h);
      if constexpr (R) {
        if (vw >= bound) return records_->CheckWritten(vw, kw, hash_);
      }
      return RecoverRecord(kw, vw);
    });
    walked_.store(i + 1, std::memory_order_relaxed);  // (under the lock: CountLive)
    l.unlock_shared();
    if (walk_hook_) [[unlikely]] walk_hook_(i);
  }
  fill.Flush();
  if (st.ok()) {
    // smartht-kv: the slots of the records writes dropped (DeferFree) become free below, so
    // the readers that may still copy one leave first; then the slabs the walk rebuilt take
    // writers' records (every record in them is marked), the allocator is settled, and the
    // deferred frees run (I10).
    if constexpr (R) {
      if (dropped_frees_.load(std::memory_order_relaxed) != 0) epoch_->Synchronize();
      records_->heap().EndLazyRecovery(bound);
    }
    alloc.SettleBelow(claimed_, reach_->words());
    if constexpr (R) RetireDeferred();
    size_.Add(static_cast<int64_t>(c.live));
    chained_.fetch_add(c.chained, std::memory_order_relaxed);
  }
  reach_.reset();
  // The keys written to heads the walk had passed (AddToFilters) are added once the filter is
  // published; then it is swapped in.
  PublishFilter(st.ok() ? nf.get() : nullptr);
  if (st.ok()) {
    InstallFilter(std::move(nf), c.live);
  } else {
    RetireFilter(std::move(nf));
  }
  walk_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - served_at_).count();
  if (!st.ok()) {
    failure_ = st;  // (rebuild_pending_ stays set: no rebuild of a damaged pool)
    failed_.store(true, std::memory_order_release);
  } else {
    rebuilds_.fetch_add(1, std::memory_order_relaxed);
  }
  recovering_.store(false, std::memory_order_release);
  recovering_.notify_all();
  if (st.ok()) MaybeGrow();  // (the filter's capacity was a guess; growth was held back)
  return st;
}

template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::PublishFilter(BloomFilter* nf) {
  std::vector<std::vector<uint64_t>> late;
  LockAll();
  if (nf) building_.store(nf, std::memory_order_release);
  collect_late_.store(false, std::memory_order_relaxed);
  for (size_t x = 0; x < stripes_.size(); x++) {
    if (!stripes_[x].late.empty()) late.push_back(std::exchange(stripes_[x].late, {}));
  }
  UnlockAll();
  if (!nf) return;
  FilterFill fill(nf);  // (writers add to nf too now)
  for (const std::vector<uint64_t>& l : late) {
    for (const uint64_t h : l) fill.Add(h);
    late_keys_.fetch_add(l.size(), std::memory_order_relaxed);
  }
  fill.Flush();
}

template <pm::PersistPolicy P, bool R>
bool SmartHt<P, R>::DeferFreeSlow(uint64_t a, uint64_t off) {
  LockGuard<SpinLock> g(defer_mu_);
  if (!defer_frees_) return false;
  if (a < walked_.load(std::memory_order_relaxed)) {
    deferred_.push_back(off);
  } else {
    dropped_frees_.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::RetireDeferred() {
  std::vector<uint64_t> offs;
  {
    LockGuard<SpinLock> g(defer_mu_);
    defer_frees_ = false;
    deferring_.store(false, std::memory_order_release);
    offs.swap(deferred_);
  }
  for (const uint64_t off : offs) records_->Retire(off);
  deferred_frees_.fetch_add(offs.size(), std::memory_order_relaxed);
}

template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::WaitWhile(const std::atomic<bool>& busy) const {
  while (busy.load(std::memory_order_acquire) && !background_.InTask()) {
    if (!background_.RunOne()) busy.wait(true, std::memory_order_acquire);
  }
}

template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::CoverChunks(uint64_t off, uint64_t n) {
  const uint64_t end = off + n * sizeof(PmBucket);
  if (end <= bound_.load(std::memory_order_acquire)) [[likely]] return;
  LockGuard<SpinLock> g(bound_mu_);
  if (end <= bound_.load(std::memory_order_relaxed)) return;
  const uint64_t steps = (end - heap_lo_ + bound_step_ - 1) / bound_step_;
  const uint64_t raised = std::min(heap_lo_ + link_span_ + sizeof(PmBucket),
                                   heap_lo_ + steps * bound_step_);
  pool_->SetRoot(3, raised);  // persisted before the caller links the chunks
  bound_.store(raised, std::memory_order_release);
  bound_raises_.fetch_add(1, std::memory_order_relaxed);
}

template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::EstablishBound() {
  const uint64_t hw = pool_->allocator().high_water();
  const uint64_t root = pool_->root(3);
  if (ValidBound(root)) bound_.store(root, std::memory_order_relaxed);
  if (hw != 0) CoverChunks(heap_lo_, hw);  // (an older pool, or a damaged root 3)
}

// I9: root 0, live keys, chained buckets, and the filter Close saved (its offset and chunks).
template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::SaveState(pm::StateWriter& w) const {
  w.Put<uint64_t>(geo_.load(std::memory_order_acquire));
  w.Put<uint64_t>(Size());
  w.Put<uint64_t>(chained_.load(std::memory_order_relaxed));
  const uint64_t filter = pool_->root(1);  // SaveFilter (Quiesce) ran before this
  w.Put<uint64_t>(filter);
  w.Put<uint64_t>(filter ? 1 + pool_->template At<SavedFilterHeader>(filter)->blocks : 0);
  if constexpr (R) records_->SaveState(w);
}

// I9: the walk of Recover is not made. The image vouches for the chains (no reader follows a
// link it does not bound: Next); the loaded allocator is checked against what the image and the
// directory name: the directory, the segments and the saved filter inside the heap, named once
// and in use, and the used chunks exactly those plus the chained buckets. The live count must be
// the saved filter's, if one was saved. The saved filter's chunks stay in use until the
// background task that loads the filter has read them (Serve, LoadFilterTask). smartht-kv: the
// record heap's slabs are named too, the used chunks include the large records' chunks, and the
// heap's records must be the live pairs.
template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::LoadState(pm::StateReader& r) {
  const Status bad = Status::Corruption(std::string(kKindName) + ": saved state");
  uint64_t geo = 0, live = 0, chained = 0, filter = 0, filter_chunks = 0;
  if (!r.Get(&geo) || !r.Get(&live) || !r.Get(&chained) || !r.Get(&filter) ||
      !r.Get(&filter_chunks) || (!R && r.remaining() != 0) || geo != pool_->root(0) ||
      filter != pool_->root(1) || (filter == 0) != (filter_chunks == 0) ||
      filter_chunks > std::numeric_limits<uint32_t>::max()) {
    return bad;  // (the whole section checked before Serve starts the background work)
  }
  pm::ChunkAllocator& alloc = pool_->allocator();
  pm::ChunkRanges named(alloc);  // (a few ranges: no heap-sized ChunkSet)
  auto name = [&](uint64_t off, uint32_t n) { return named.Add(off, n) ? Status::OK() : bad; };
  PMHASH_RETURN_IF_ERROR(CheckGeometry(geo));
  PMHASH_RETURN_IF_ERROR(RecoverDirectory(geo, name));
  if (filter != 0) {
    PMHASH_RETURN_IF_ERROR(name(filter, static_cast<uint32_t>(filter_chunks)));
    if (pool_->template At<SavedFilterHeader>(filter)->keys != live) return bad;
  }
  uint64_t large = 0;  // chunks of records too large for a slab
  if constexpr (R) {
    if (!records_->LoadState(r, live,
                             [&named](uint64_t o, uint32_t n) { return named.Add(o, n); }) ||
        r.remaining() != 0) {
      return bad;
    }
    large = records_->large_chunks();
  }
  if (!named.Disjoint() || !named.AllUsed() ||
      alloc.used_chunks() != named.count() + chained + large) {
    return bad;
  }
  saved_filter_chunks_ = filter_chunks;
  return Serve(geo, WalkCounts{live, chained, 0});
}

// The DRAM side of an open, after the walk: lock stripes, counts, and the filter — the saved
// one (I7) or an incomplete one and a rebuild task.
template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::Serve(uint64_t geo, const WalkCounts& c, bool lazy) {
  const uint32_t bits = GeoBits(geo);
  const uint64_t live = c.live;
  geo_.store(geo, std::memory_order_release);
  // 256 heads per stripe (the paper) on large tables, at most 2^16 stripes, at least
  // min(heads, 64) so small tables still run writers in parallel. A stripe takes address bits
  // [g, g + S) with g + S <= L, so that a head and every head split from it (a + 2^L, ...)
  // share a stripe, and g = log2(split_batch) where the level allows, so that a split batch
  // locks one stripe (writers collide with it 1 in 2^S, not split_batch in 2^S).
  const uint32_t sb = bits <= 6 ? bits : bits <= 14 ? 6 : std::min<uint32_t>(16, bits - 8);
  stripes_ = HugeArray<Stripe>(size_t{1} << sb);
  stripe_shift_ = std::min<uint32_t>(static_cast<uint32_t>(std::countr_zero(params_.split_batch)),
                                     bits - sb);
  if (!stripes_) return Status::OutOfMemory("smartht: lock stripes");
  chained_.store(c.chained, std::memory_order_relaxed);
  split_cleanups_.store(c.cleaned, std::memory_order_relaxed);
  size_.Reset(static_cast<int64_t>(live));
  EstablishBound();
  lazy_ = lazy;

  // I7: the filter saved at the last Close, if this open may trust it; its blocks are loaded in
  // the background (LoadFilterTask), the chunks held until then.
  const uint64_t saved = pool_->root(1);
  uint64_t held = saved_filter_chunks_;  // (LoadState: named and in use)
  saved_filter_chunks_ = 0;
  const bool use_saved = !lazy && !pool_->created() && pool_->was_clean() && saved != 0 &&
                         HoldSavedFilter(saved, live, &held);
  if (!use_saved && held != 0) pool_->allocator().Free(saved, static_cast<uint32_t>(held));
  filter_loaded_.store(use_saved, std::memory_order_release);
  if (saved != 0) pool_->SetRoot(1, 0);  // I7: durable before any write of this open
  if (use_saved) {
    filter_ = std::make_unique<BloomFilter>(64);  // (a placeholder: see below)
    if (!*filter_) return Status::OutOfMemory("smartht: Bloom filter");
  } else {
    // A lazy open knows no count yet: the filter is sized for the table at its growth
    // threshold (the walk's end rebuilds it larger if the keys are more).
    const double per_head = params_.grow_keys_per_head > 0 ? params_.grow_keys_per_head : kSlots;
    filter_capacity_.store(FilterKeysFor(
        lazy ? static_cast<uint64_t>(per_head * static_cast<double>(HeadsInUse(geo))) : live));
    // An incomplete filter is never read (searches go to PM until the rebuild swaps a whole
    // one in): then a placeholder of 64 blocks takes the writers' adds, not a filter of the
    // table's size whose pages the open would have to fault in (60 MB at 10M keys).
    const bool empty = live == 0 && !lazy;  // (complete at once)
    filter_ = std::make_unique<BloomFilter>(
        empty ? BloomFilter::BlocksFor(filter_capacity_.load(), params_.filter_bits_per_key)
              : 64);
    if (!*filter_) return Status::OutOfMemory("smartht: Bloom filter");
    stale_.store(0);
    filter_keys_.store(0);
  }
  const bool complete = live == 0 && !lazy && !use_saved;
  serving_.store(filter_.get(), std::memory_order_release);
  complete_.store(complete, std::memory_order_release);
  if (!complete) {
    rebuild_pending_.store(true);
    if (use_saved) {
      walked_.store(UINT64_MAX, std::memory_order_relaxed);  // (AddToFilters: keep every key)
      collect_late_.store(true, std::memory_order_relaxed);
      filter_pending_.store(true, std::memory_order_release);
      PMHASH_RETURN_IF_ERROR(background_.Schedule([this] { return LoadFilterTask(); }));
    } else if (lazy) {
      served_at_ = std::chrono::steady_clock::now();
      collect_late_.store(true, std::memory_order_relaxed);
      recovering_.store(true, std::memory_order_release);
      PMHASH_RETURN_IF_ERROR(background_.Schedule([this] { return RecoverTask(); }));
    } else {
      PMHASH_RETURN_IF_ERROR(background_.Schedule([this] { return RebuildFilterTask(); }));
    }
  }
  return background_.Start();
}

template <pm::PersistPolicy P, bool R>
bool SmartHt<P, R>::HoldSavedFilter(uint64_t off, uint64_t live, uint64_t* held) {
  pm::ChunkAllocator& alloc = pool_->allocator();
  if (!alloc.ValidChunk(off, 1)) return false;
  const auto* hdr = pool_->template At<SavedFilterHeader>(off);
  const uint64_t blocks = hdr->blocks;
  if (hdr->magic != kSavedFilterMagic || hdr->geometry != geo_.load() || hdr->keys != live ||
      blocks == 0 || blocks >= alloc.chunk_count() ||
      !alloc.ValidChunk(off, static_cast<uint32_t>(blocks + 1))) {
    return false;
  }
  // In use until the task has read them: named by the image, or marked now (after a walk,
  // which reaches no saved filter).
  if (*held != 0 ? *held != blocks + 1
                 : !alloc.MarkReachable(off, static_cast<uint32_t>(blocks + 1)).ok()) {
    return false;
  }
  *held = blocks + 1;
  saved_filter_ = off;
  saved_filter_chunks_ = blocks + 1;
  filter_capacity_.store(blocks * BloomFilter::kBlockBits / params_.filter_bits_per_key);
  stale_.store(static_cast<int64_t>(hdr->stale));
  filter_keys_.store(live + hdr->stale);
  return true;
}

// The saved filter of a clean open, loaded while the index serves (its blocks are tens of MB
// at millions of keys: checksum, copy and page faults were most of a clean open). Until it is
// swapped in, searches go to PM (the filter is incomplete) and writers keep their keys aside;
// once the copy is published as the filter being built (writers add to it), those keys are
// added (PublishFilter). A copy that fails its checksum is replaced by a rebuild from the
// chains. Persists nothing; frees the saved chunks.
template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::LoadFilterTask() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  bool ok = false;
  {
    LockGuard<Mutex> g(rebuild_mu_);
    const auto* hdr = pool_->template At<SavedFilterHeader>(saved_filter_);
    const uint64_t blocks = saved_filter_chunks_ - 1;
    const char* data = pool_->base() + saved_filter_ + sizeof(SavedFilterHeader);
    SavedFilterHeader h = *hdr;
    h.checksum = 0;
    auto nf = NewFilter(blocks);
    ok = *nf && XXH3_64bits_withSeed(data, blocks * 64, XXH3_64bits(&h, sizeof(h))) ==
                    hdr->checksum;
    if (ok) {
      const auto* words = reinterpret_cast<const uint64_t*>(data);
      for (uint64_t i = 0; i < blocks * 8; i++) nf->SetWord(i, words[i]);
    }
    PublishFilter(ok ? nf.get() : nullptr);
    pool_->allocator().Free(saved_filter_, static_cast<uint32_t>(saved_filter_chunks_));
    filter_pending_.store(false, std::memory_order_release);
    filter_pending_.notify_all();
    if (ok) {
      InstallFilter(std::move(nf), std::nullopt);
    } else {
      filter_loaded_.store(false, std::memory_order_release);
      RetireFilter(std::move(nf));
    }
  }
  return ok ? Status::OK() : RebuildFilterTask();  // (rebuild_pending_ still set)
}

// Close: the filter (complete: the background work has been drained) into fresh chunks, then
// root 1 names it; the clean mark follows (Lifecycle). Out of space only skips the save.
template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::SaveFilter() {
  if (!P::kPersistent || !filter_ || !complete_.load() || Size() < params_.save_filter_min_keys) {
    return Status::OK();
  }
  const uint64_t blocks = filter_->blocks();
  if (blocks + 1 > UINT32_MAX) return Status::OK();
  auto off = pool_->allocator().Allocate(static_cast<uint32_t>(blocks + 1));
  if (!off.ok()) return Status::OK();  // the next open rebuilds the filter
  char* dst = pool_->base() + off.value();
  SavedFilterHeader h{};
  h.magic = kSavedFilterMagic;
  h.geometry = geo_.load();
  h.blocks = blocks;
  h.keys = Size();
  h.stale = static_cast<uint64_t>(std::max<int64_t>(0, stale_.load()));
  h.checksum = 0;
  uint64_t buf[64];
  XXH3_state_t* st = XXH3_createState();
  if (!st) return Status::OK();
  XXH3_64bits_reset_withSeed(st, XXH3_64bits(&h, sizeof(h)));
  for (uint64_t i = 0; i < blocks * 8; i += 64) {
    const uint64_t m = std::min<uint64_t>(64, blocks * 8 - i);
    for (uint64_t w = 0; w < m; w++) buf[w] = filter_->Word(i + w);
    XXH3_64bits_update(st, buf, m * 8);
    persist_.NtCopy(dst + 64 + i * 8, buf, m * 8);
  }
  h.checksum = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  persist_.NtCopy(dst, &h, sizeof(h));
  persist_.Fence();
  pool_->SetRoot(1, off.value());
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::Quiesce() {
  PMHASH_RETURN_IF_ERROR(background_.Shutdown());
  if constexpr (R) {
    epoch_->Drain();  // retired records are freed
    records_->ReleaseEmptySlabs();  // (before the image: I9)
  }
  return SaveFilter();
}

template <pm::PersistPolicy P, bool R>
bool SmartHt<P, R>::Locate(const PmBucket* head, const Probe& p, PmBucket** bucket,
                           int* slot) const {
  const uint8_t t = Token(p.h);
  uint64_t hops = 0;
  for (const PmBucket* b = head;;) {
    for (int j = 0; j < kSlots; j++) {
      if (b->tokens[j].load(std::memory_order_acquire) == t &&
          Keys::Matches(records_.get(), b->slots[j], p)) {
        *bucket = const_cast<PmBucket*>(b);
        *slot = j;
        return true;
      }
    }
    if ((b = Next(b, &hops)) == nullptr) return false;
  }
}

template <pm::PersistPolicy P, bool R>
bool SmartHt<P, R>::SearchAfterFilter(const Probe& p, Filtered f, uint64_t* word) const {
  // The head's miss starts before the lock's locked instruction, which no later load passes: as
  // when the lock came first, it overlaps the filter block's (the branch above is predicted).
  // (Located again under the lock: a split may move the key's head meanwhile.)
  PrefetchLine(HeadFor(p.h));
  RwSpinLock& l = StripeLockFor(p.h);
  l.lock_shared();
  if (FilterRulesOutLocked(f, p.h)) {
    l.unlock_shared();
    return false;
  }
  PmBucket* b;
  int j;
  const bool found = Locate(HeadFor(p.h), p, &b, &j);
  if (found) *word = b->slots[j].value.load(std::memory_order_relaxed);
  l.unlock_shared();
  if (!found) false_positives_.Add(1);
  return found;
}

template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::Write(const Probe& p, std::string_view value_bytes, Value value,
                            WriteMode mode) {
  const uint64_t h = p.h;
  const uint8_t t = Token(h);
  // (Read before any allocation: one that fails while the walk holds the chunks below root 3
  // waits for its end and runs again, even if the walk has ended by the time it fails.)
  const bool walk_holds = recovering_.load(std::memory_order_acquire);
  if (failed_.load(std::memory_order_acquire)) [[unlikely]] return failure_;
  RwSpinLock& l = StripeLockFor(h);
  l.lock();
  const uint64_t a = HeadIndex(h);
  PmBucket* head = HeadAt(a);
  // Every write reads the head bucket (a search, or a free slot) and the filter block: start the
  // bucket's miss before the filter's, so that the two overlap.
  __builtin_prefetch(head, 1);
  PmBucket* b = nullptr;
  int j = -1;
  // The value word to store: the value, or a new record's offset, flushed and fenced before the
  // store that publishes it.
  uint64_t w = 0;
  auto value_word = [&] {
    return index::ValueWord<R>(records_.get(), p.s, value_bytes, value, persist_, &w);
  };
  // smartht-kv: the heap is full above root 3 while the chunks below it are held until the
  // recovery walk ends (I10): the write waits for the walk, then runs again.
  auto after_walk = [&](const Status& st) {
    if (!st.IsOutOfSpace() || !walk_holds) return st;
    write_waits_.fetch_add(1, std::memory_order_relaxed);
    WaitRecovered();
    return Write(p, value_bytes, value, mode);
  };
  const bool maybe = !complete_.load(std::memory_order_acquire) || filter_->MayContain(h);
  if (maybe && Locate(head, p, &b, &j)) {
    Status st = mode == WriteMode::kInsert ? Status::Exists() : value_word();
    if (!st.ok()) {
      l.unlock();
      return after_walk(st);
    }
    const uint64_t old = b->slots[j].value.load(std::memory_order_relaxed);
    b->slots[j].value.store(w, std::memory_order_release);  // I4
    persist_.Persist(&b->slots[j].value, sizeof(Value));
    const bool deferred = DeferFree(a, old);
    l.unlock();
    if (R && !deferred) records_->Retire(old);
    return Status::OK();
  }
  if (mode == WriteMode::kUpdate) {
    l.unlock();
    return Status::NotFound();
  }
  if (Status st = value_word(); !st.ok()) {
    l.unlock();
    return after_walk(st);
  }
  // A free slot of the head or of its first chained bucket (Algorithm 1, line 7).
  b = head;
  j = FreeSlot(head);
  uint64_t hops = 0;
  if (j < 0) {
    if (PmBucket* first = Next(head, &hops)) {
      b = first;
      j = FreeSlot(b);
    }
  }
  std::optional<Result<uint64_t>> fresh;
  if (j < 0) {
    fresh = pool_->allocator().Allocate(1);
    if (!fresh->ok() && walk_holds) {
      // The chunks below root 3 are held until the recovery walk ends (I10): wait for it.
      l.unlock();
      if constexpr (R) records_->Retire(w);  // never published: nothing to defer
      write_waits_.fetch_add(1, std::memory_order_relaxed);
      WaitRecovered();
      return Write(p, value_bytes, value, mode);
    }
    if (!fresh->ok()) {
      // Out of space: any free slot further down the chain (erased keys leave them).
      hops = 0;
      for (PmBucket* c = head; c != nullptr; c = Next(c, &hops)) {
        if ((j = FreeSlot(c)) >= 0) {
          b = c;
          break;
        }
      }
      if (j < 0) {
        l.unlock();
        if constexpr (R) records_->Retire(w);  // never published
        return fresh->status();
      }
    }
  }
  // The filters and the size before the persists (readers wait on the stripe lock we hold):
  // their locked adds after a fence would wait for its write-backs, which the next operation's
  // misses can otherwise overlap (REH, docs/results.md "Batched writes").
  AddToFilters(h, a);
  CountLive(a, 1);
  if (j >= 0) {
    PmSlot& s = b->slots[j];
    // I2: the pair, then its token, one line. (smartht-kv: the record was fenced before.)
    s.key.store(Keys::KeyWord(p), std::memory_order_relaxed);
    s.value.store(w, std::memory_order_relaxed);
    if (params_.tear_safe) persist_.Persist(&s, sizeof(PmSlot));
    b->tokens[j].store(t, std::memory_order_release);
    persist_.Persist(b, sizeof(PmBucket));
  } else {
    // Head insertion of a new bucket (Algorithm 1, lines 16-29; I3).
    const uint64_t off = fresh->value();
    CoverChunks(off, 1);  // I10
    alignas(64) PmBucket img;
    const Pair pair{Keys::KeyWord(p), w, t};
    FillBucket(&img, &pair, 1, head->next.load(std::memory_order_relaxed));
    persist_.NtCopy(At(off), &img, sizeof(img));
    persist_.Fence();
    head->next.store(off, std::memory_order_release);  // the commit point
    persist_.Persist(&head->next, sizeof(uint64_t));
    chained_.fetch_add(1, std::memory_order_relaxed);
    links_.fetch_add(1, std::memory_order_relaxed);
  }
  l.unlock();
  // The growth check sums the size counter: done when a chain grew, and on one insert in 64
  // otherwise (by hash bits), not on every insert.
  if (j < 0 || ((h >> 50) & 63) == 0) MaybeGrow();
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::EraseProbe(const Probe& p) {
  if (failed_.load(std::memory_order_acquire)) [[unlikely]] return failure_;
  const Filtered f = FilterCheck(p.h);  // (no lock, as a search)
  if (f == Filtered::kAbsent) return Status::NotFound();
  __builtin_prefetch(HeadFor(p.h), 1);  // (as in Search)
  RwSpinLock& l = StripeLockFor(p.h);
  l.lock();
  if (FilterRulesOutLocked(f, p.h)) {
    l.unlock();
    return Status::NotFound();
  }
  PmBucket* b;
  int j;
  const uint64_t a = HeadIndex(p.h);
  if (!Locate(HeadAt(a), p, &b, &j)) {
    l.unlock();
    return Status::NotFound();
  }
  const uint64_t record = b->slots[j].value.load(std::memory_order_relaxed);  // smartht-kv
  b->tokens[j].store(0, std::memory_order_release);  // I4: lazy deletion
  stale_.fetch_add(1, std::memory_order_relaxed);  // before the persist, as in Write
  CountLive(a, -1);
  persist_.Persist(&b->tokens[j], 1);
  const bool deferred = DeferFree(a, record);
  l.unlock();
  if (R && !deferred) records_->Retire(record);
  MaybeScheduleRebuild();
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::ScheduleRebuild() {
  // (A load first: writers call this on every growth check while a rebuild is pending.)
  if (rebuild_pending_.load(std::memory_order_relaxed) || rebuild_pending_.exchange(true)) return;
  if (!background_.Schedule([this] { return RebuildFilterTask(); }).ok()) {
    rebuild_pending_.store(false);
  }
}

template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::MaybeScheduleRebuild() {
  const int64_t stale = stale_.load(std::memory_order_relaxed);
  // Against the filter's capacity, not the live keys: a table being emptied rebuilds its
  // filter a few times, not once per quarter of what is left.
  const double capacity = static_cast<double>(filter_capacity_.load(std::memory_order_relaxed));
  if (stale < 4 || static_cast<double>(stale) <= params_.rebuild_erased_ratio * capacity) return;
  ScheduleRebuild();
}

// A new filter filled from PM while the live one serves (writers add to both), then swapped in
// with every stripe locked. Persists nothing. The walk runs in address order (WalkHeads: every
// key present throughout is seen; a key seen twice sets its bits twice).
template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::RebuildFilterTask() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  WaitRecovered();  // (RebuildFilter() from a test: Size() below would run the walk, which
                    // takes rebuild_mu_)
  if (failed_.load(std::memory_order_acquire)) return failure_;
  LockGuard<Mutex> g(rebuild_mu_);
  const uint64_t capacity = FilterKeysFor(Size());
  auto nf = NewFilter(BloomFilter::BlocksFor(capacity, params_.filter_bits_per_key));
  if (!*nf) return Status::OutOfMemory("smartht: Bloom filter rebuild");
  filter_keys_.store(0);
  building_.store(nf.get(), std::memory_order_release);
  uint64_t added = 0;
  FilterFill fill(nf.get());
  WalkHeads([&](uint64_t i) {
    PrefetchChainAhead(i, HeadsInUse(geo_.load(std::memory_order_acquire)));
    ForLiveSlots(i, [&](const PmSlot& sl) {
      fill.Add(SlotHash(sl.key.load(std::memory_order_relaxed)));
      added++;
    });
  });
  fill.Flush();
  filter_capacity_.store(capacity, std::memory_order_relaxed);
  InstallFilter(std::move(nf), added);  // (erases during the walk are forgotten with stale_)
  rebuilds_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::InstallFilter(std::unique_ptr<BloomFilter> nf,
                                  std::optional<uint64_t> built_keys) {
  LockAll();
  std::unique_ptr<BloomFilter> old = std::exchange(filter_, std::move(nf));
  serving_.store(filter_.get(), std::memory_order_release);
  // After the swap, before old is zeroed: a lock-free reader that loaded old and read it after
  // this sees the count moved (FilterCheck).
  filter_gen_.fetch_add(1, std::memory_order_release);
  building_.store(nullptr, std::memory_order_relaxed);
  if (built_keys) {
    stale_.store(0, std::memory_order_relaxed);
    filter_keys_.fetch_add(*built_keys, std::memory_order_relaxed);
  }
  complete_.store(true, std::memory_order_release);
  UnlockAll();
  rebuild_pending_.store(false);
  RetireFilter(std::move(old));
}

template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::RetireFilter(std::unique_ptr<BloomFilter> f) {
  if (!f || !*f) return;  // (never mapped: nothing can read it)
  f->Discard();
  LockGuard<SpinLock> g(spare_mu_);
  spare_filters_.push_back(std::move(f));
}

template <pm::PersistPolicy P, bool R>
std::unique_ptr<BloomFilter> SmartHt<P, R>::NewFilter(uint64_t blocks) {
  {
    LockGuard<SpinLock> g(spare_mu_);
    auto best = spare_filters_.end();
    for (auto it = spare_filters_.begin(); it != spare_filters_.end(); ++it) {
      if ((*it)->capacity() >= blocks &&
          (best == spare_filters_.end() || (*it)->capacity() < (*best)->capacity())) {
        best = it;
      }
    }
    if (best != spare_filters_.end()) {
      std::unique_ptr<BloomFilter> f = std::move(*best);
      spare_filters_.erase(best);
      f->Reset(blocks);
      return f;
    }
  }
  return std::make_unique<BloomFilter>(blocks);
}

template <pm::PersistPolicy P, bool R>
bool SmartHt<P, R>::Over(uint64_t size, double factor) const {
  const uint64_t g = geo_.load(std::memory_order_acquire);
  return GeoBits(g) < params_.max_head_bits &&
         static_cast<double>(size) >
             factor * params_.grow_keys_per_head * static_cast<double>(HeadsInUse(g));
}

// Growth runs on the background executor (the writer that notices only schedules it), so no
// writer pays for a split batch; a writer splits itself only in manual mode (tests, the crash
// suite), while a filter rebuild is pending, or when the task has fallen a quarter behind.
template <pm::PersistPolicy P, bool R>
void SmartHt<P, R>::MaybeGrow() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  // No split while the recovery walk runs (I10: it walks a fixed set of heads, and a split
  // would free chunks below root 3); its end calls this.
  if (recovering_.load(std::memory_order_acquire)) return;
  const uint64_t size = Size();
  // The filter keeps its false-positive rate: past its capacity it is rebuilt larger.
  if (size > filter_capacity_.load(std::memory_order_relaxed)) ScheduleRebuild();
  if (params_.grow_keys_per_head <= 0 || size <= no_grow_below_.load(std::memory_order_relaxed) ||
      !Over(size, 1.0)) {
    return;
  }
  // (A filter rebuild ahead of it in the executor's queue would hold growth back for a whole walk
  // of the table: writers split themselves meanwhile.)
  if (!background_.manual() && !rebuild_pending_.load(std::memory_order_relaxed) &&
      !Over(size, 1.25)) {
    if (!grow_pending_.load(std::memory_order_relaxed) && !grow_pending_.exchange(true) &&
        !background_.Schedule([this] { return GrowTask(); }).ok()) {
      grow_pending_.store(false);
    }
    return;
  }
  if (!resize_mu_.try_lock()) return;  // (another thread is splitting)
  // A few batches: a writer checks once in 64 inserts, or when a chain grew.
  SplitWhileOver(8);
  resize_mu_.unlock();
}

template <pm::PersistPolicy P, bool R>
bool SmartHt<P, R>::SplitWhileOver(int batches) PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  for (int n = 0; n < batches; n++) {
    const uint64_t size = Size();
    if (size <= no_grow_below_.load(std::memory_order_relaxed) || !Over(size, 1.0)) return false;
    if (Status s = SplitBatch(); !s.ok()) {
      // Out of space (or memory): the table keeps working with longer chains; retry once it
      // has grown by half again.
      grow_failures_.fetch_add(1, std::memory_order_relaxed);
      no_grow_below_.store(size + size / 2, std::memory_order_relaxed);
      return false;
    }
  }
  return true;
}

// The background growth task: split until the table is under its threshold, releasing
// resize_mu_ every 64 batches.
template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::GrowTask() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  for (bool more = true; more;) {
    resize_mu_.lock();
    more = SplitWhileOver(64);
    resize_mu_.unlock();
  }
  grow_pending_.store(false);
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::AddSegment(uint32_t k) {
  const uint64_t heads = SegmentHeads(base_bits_, k);
  if (heads > UINT32_MAX) return Status::OutOfSpace("smartht: head segment of 2^32 buckets");
  auto off = pool_->allocator().Allocate(static_cast<uint32_t>(heads));
  if (!off.ok()) return off.status();
  CoverChunks(off.value(), heads);  // I10
  // Its heads are written when they are split into (every byte); none is read before.
  auto* d = pool_->template At<DirBlock>(dir_off_);
  d->seg[k].store(off.value(), std::memory_order_release);
  persist_.Persist(&d->seg[k], sizeof(uint64_t));  // I5: before any head of it is in use
  seg_off_[k] = off.value();
  seg_[k].store(At(off.value()), std::memory_order_release);
  return Status::OK();
}

// One batch of linear hashing (Growth in the design note: build, commit, clean up).
template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::SplitBatch() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  const auto started = ResizeLog::Now();
  pm::ChunkAllocator& alloc = pool_->allocator();
  const uint64_t geo = geo_.load(std::memory_order_relaxed);  // moves only under resize_mu_
  const uint32_t level = GeoBits(geo);
  const uint64_t first = GeoSplit(geo);
  const uint64_t half = uint64_t{1} << level;
  const uint64_t nb = std::min<uint64_t>(params_.split_batch, half);
  const uint32_t k = level - base_bits_ + 1;  // the segment of heads [2^L, 2^(L+1))
  if (level >= params_.max_head_bits) return Status::OK();
  if (seg_[k].load(std::memory_order_relaxed) == nullptr) PMHASH_RETURN_IF_ERROR(AddSegment(k));

  // The sources' chains, fetched before their stripes are locked (racy reads of the next words:
  // only prefetches follow them), so that writers wait for the batch's stores, not its misses.
  for (uint64_t i = first; i < first + nb; i++) PrefetchLine(HeadAt(i));
  for (uint64_t i = first; i < first + nb; i++) {
    const uint64_t next = HeadAt(i)->next.load(std::memory_order_relaxed);
    if (next != 0 && alloc.ValidChunk(next)) PrefetchLine(At(next));
  }
  // The sources' stripes (their new heads share them), ascending like LockAll.
  std::vector<size_t> locks;
  locks.reserve(nb);
  for (uint64_t i = first; i < first + nb; i++) locks.push_back(StripeOf(i));
  std::sort(locks.begin(), locks.end());
  locks.erase(std::unique(locks.begin(), locks.end()), locks.end());
  for (const size_t x : locks) stripes_[x].lock.lock();

  struct Source {
    bool chained = false;  // had chained buckets: H.next becomes `next`
    uint64_t next = 0;     // the compact chain of the stayers that H cannot take (0: none)
    uint8_t clear = 0;     // head slots whose pair moves
    uint8_t fill = 0;      // head slots that take a stayer of the chained buckets
    Pair put[kSlots] = {};
  };
  std::vector<PmBucket> img(nb);  // the new heads 2^L+first.., written in one NtCopy
  std::vector<Source> src(nb);
  std::vector<uint64_t> fresh;  // new chained buckets (freed again on failure)
  std::vector<uint64_t> old;    // the sources' chained buckets (freed after the commit)
  std::vector<Pair> movers, stayers;
  // Fresh chained buckets holding pairs[from..], back to front; *link = the first (0: none).
  auto chain = [&](const std::vector<Pair>& pairs, size_t from, uint64_t* link) -> Status {
    uint64_t next = 0;
    for (size_t end = pairs.size(); end > from;) {
      const size_t beg = end - std::min<size_t>(kSlots, end - from);
      auto c = alloc.Allocate(1);
      if (!c.ok()) return c.status();
      fresh.push_back(c.value());
      CoverChunks(c.value(), 1);  // I10
      alignas(64) PmBucket b;
      FillBucket(&b, &pairs[beg], end - beg, next);
      persist_.NtCopy(At(c.value()), &b, sizeof(b));
      next = c.value();
      end = beg;
    }
    *link = next;
    return Status::OK();
  };
  Status st;
  for (uint64_t n = 0; n < nb && st.ok(); n++) {
    movers.clear();
    stayers.clear();
    const PmBucket* head = HeadAt(first + n);
    uint8_t open = 0;  // head slots free once the movers are gone
    ForChain(first + n, [&](const PmBucket* b) {
      if (b != head) old.push_back(pool_->OffsetOf(b));
      for (int j = 0; j < kSlots; j++) {
        const uint8_t t = b->tokens[j].load(std::memory_order_relaxed);
        if (t == 0) {
          if (b == head) open |= static_cast<uint8_t>(1u << j);
          continue;
        }
        const Pair p{b->slots[j].key.load(std::memory_order_relaxed),
                     b->slots[j].value.load(std::memory_order_relaxed), t};
        if ((SlotHash(p.k) >> level) & 1) {
          movers.push_back(p);
          if (b == head) src[n].clear |= static_cast<uint8_t>(1u << j);
        } else if (b != head) {
          stayers.push_back(p);
        }
      }
    });
    src[n].chained = head->next.load(std::memory_order_relaxed) != 0;
    uint64_t link = 0;
    st = chain(movers, std::min<size_t>(kSlots, movers.size()), &link);
    if (!st.ok()) break;
    FillBucket(&img[n], movers.data(), std::min<size_t>(kSlots, movers.size()), link);
    if (!src[n].chained) continue;
    // The chained buckets' stayers fill H's open slots first, the rest go to a compact chain.
    open |= src[n].clear;
    size_t used = 0;
    for (int j = 0; j < kSlots && used < stayers.size(); j++) {
      if (open & (1u << j)) {
        src[n].fill |= static_cast<uint8_t>(1u << j);
        src[n].put[j] = stayers[used++];
      }
    }
    st = chain(stayers, used, &src[n].next);
  }
  if (!st.ok()) {
    for (const uint64_t c : fresh) alloc.Free(c);
    for (size_t x = locks.size(); x-- > 0;) stripes_[locks[x]].lock.unlock();
    return st;
  }
  persist_.NtCopy(HeadAt(half + first), img.data(), nb * sizeof(PmBucket));
  persist_.Fence();
  const uint64_t next_geo = first + nb == half ? PackGeo(level + 1, 0) : PackGeo(level, first + nb);
  pool_->SetRoot(0, next_geo);  // the commit point (persisted; I5)
  geo_.store(next_geo, std::memory_order_release);
  // Clean up (I8), in each source's line in this order: the movers' tokens cleared, the stayers
  // that H takes written, then their tokens, then H.next. A line is written back whole, so an
  // image holds a prefix of these stores: at worst a stayer twice in the chain (in H and in
  // the old chained bucket), which recovery drops. With tear_safe (8-byte atomicity) each step
  // is fenced before the next. One fence per batch otherwise.
  auto step = [&](uint64_t n, int phase) {
    const Source& c = src[n];
    PmBucket* h = HeadAt(first + n);
    for (int j = 0; j < kSlots && phase < 3; j++) {
      if (phase == 0 && (c.clear & (1u << j))) h->tokens[j].store(0, std::memory_order_release);
      if (!(c.fill & (1u << j))) continue;
      if (phase == 1) {
        h->slots[j].key.store(c.put[j].k, std::memory_order_relaxed);
        h->slots[j].value.store(c.put[j].v, std::memory_order_relaxed);
      } else if (phase == 2) {
        h->tokens[j].store(c.put[j].t, std::memory_order_release);
      }
    }
    if (phase == 3 && c.chained) h->next.store(c.next, std::memory_order_release);
  };
  const int phases = params_.tear_safe ? 4 : 1;
  for (int p = 0; p < phases; p++) {
    for (uint64_t n = 0; n < nb; n++) {
      if (!src[n].chained && src[n].clear == 0) continue;
      for (int q = p; q < (phases == 1 ? 4 : p + 1); q++) step(n, q);
      persist_.Flush(HeadAt(first + n), sizeof(PmBucket));
    }
    persist_.Fence();
  }
  for (const uint64_t c : old) alloc.Free(c);
  for (size_t x = locks.size(); x-- > 0;) stripes_[locks[x]].lock.unlock();
  chained_.fetch_add(fresh.size() - old.size(), std::memory_order_relaxed);
  splits_.fetch_add(nb, std::memory_order_relaxed);
  batches_.fetch_add(1, std::memory_order_relaxed);
  if (GeoBits(next_geo) != level) doublings_.fetch_add(1, std::memory_order_relaxed);
  resize_log_.Record(started);
  return Status::OK();
}

template <pm::PersistPolicy P, bool R>
template <class Take, class Done>
void SmartHt<P, R>::WalkLiveSlots(Take&& take, Done&& done) const
    PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  // Splits are held off for the whole walk (resize_mu_), so a key present throughout is visited
  // exactly once; a growth that the caller's fn triggers is skipped (MaybeGrow only try-locks
  // resize_mu_). done() hands a head's pairs out outside its stripe's lock (fn may call the
  // index).
  LockGuard<Mutex> g(const_cast<Mutex&>(resize_mu_));
  WalkHeads(
      [&](uint64_t i) { ForLiveSlots(i, take); },
      done);
}

template <pm::PersistPolicy P, bool R>
IndexStats SmartHt<P, R>::Stats() const PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  IndexStats s;
  this->FillCommonStats(&s);
  // Chain lengths (buckets per head, 1 = the head alone), one stripe at a time.
  uint64_t heads = 0, buckets = 0, max_chain = 0, filter_bytes = 0, filter_blocks = 0;
  WalkHeads([&](uint64_t i) {
    uint64_t len = 0;
    ForChain(i, [&](const PmBucket*) { len++; });
    heads++;
    buckets += len;
    max_chain = std::max(max_chain, len);
    if (i == 0) {  // (a filter swap takes every stripe: this one is held)
      filter_bytes = filter_->bytes();
      filter_blocks = filter_->blocks();
    }
  });
  const uint64_t geo = geo_.load();
  s.buckets = buckets;
  s.capacity_slots = buckets * kSlots;
  s.load_factor = s.capacity_slots ? static_cast<double>(s.size) / s.capacity_slots : 0;
  s.pm_bytes = buckets * sizeof(PmBucket) + pm::kHeaderBytes + (R ? records_->pm_bytes() : 0);
  s.dram_bytes = filter_bytes + stripes_.bytes() + pool_->allocator().dram_bytes() +
                 (R ? records_->dram_bytes() : 0);
  s.global_depth = GeoBits(geo);
  auto add = [&](const char* name, double value) { s.details.push_back({name, value}); };
  add("smartht.heads", static_cast<double>(heads));
  add("smartht.level", static_cast<double>(GeoBits(geo)));
  add("smartht.split_pointer", static_cast<double>(GeoSplit(geo)));
  add("smartht.split_batches", static_cast<double>(batches_.load()));
  add("smartht.split_cleanups", static_cast<double>(split_cleanups_.load()));
  add("smartht.chained_buckets", static_cast<double>(buckets - heads));
  add("smartht.chain.mean", heads ? static_cast<double>(buckets) / heads : 0);
  add("smartht.chain.max", static_cast<double>(max_chain));
  add("smartht.chain.links", static_cast<double>(links_.load()));
  add("smartht.bad_links", static_cast<double>(bad_links_.load()));
  add("smartht.stripes", static_cast<double>(stripes_.size()));
  add("smartht.filter.blocks", static_cast<double>(filter_blocks));
  add("smartht.filter.bits_per_key",
      s.size ? static_cast<double>(filter_blocks * 512) / static_cast<double>(s.size) : 0);
  add("smartht.filter.complete", complete_.load() ? 1 : 0);
  add("smartht.filter.loaded", filter_loaded_.load() ? 1 : 0);
  add("smartht.filter.rebuilds", static_cast<double>(rebuilds_.load()));
  add("smartht.filter.swaps", static_cast<double>(filter_gen_.load()));
  {
    LockGuard<SpinLock> g(spare_mu_);
    add("smartht.filter.spares", static_cast<double>(spare_filters_.size()));
  }
  add("smartht.filter.stale", static_cast<double>(std::max<int64_t>(0, stale_.load())));
  add("smartht.filter.false_positives", static_cast<double>(false_positives_.Sum()));
  add("smartht.grow_failures", static_cast<double>(grow_failures_.load()));
  add("smartht.recovery.lazy", lazy_ ? 1 : 0);
  add("smartht.recovery.walk_ms", lazy_ ? walk_seconds_ * 1e3 : 0);  // (Size() waited for it)
  add("smartht.recovery.late_keys", static_cast<double>(late_keys_.load()));
  add("smartht.recovery.write_waits", static_cast<double>(write_waits_.load()));
  if constexpr (R) {  // I10: frees of the crash's records by writes during the walk
    add("smartht.recovery.deferred_frees", static_cast<double>(deferred_frees_.load()));
    add("smartht.recovery.dropped_frees", static_cast<double>(dropped_frees_.load()));
  }
  add("smartht.bound_raises", static_cast<double>(bound_raises_.load()));
  add("alloc.reused", static_cast<double>(pool_->allocator().reused_allocations()));
  background_.stats().AppendTo(&s.details, "smartht.bg");
  if constexpr (R) records_->AddDetails(&s);
  return s;
}

// REQUIRES: no concurrent writers.
template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::CheckInvariants() const PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  const index::InvariantFailure fail{kKindName};
  WaitRecovered();
  WaitWhile(filter_pending_);  // (the saved filter's chunks are held until it is read)
  if (failed_.load(std::memory_order_acquire)) return failure_;
  // No split, and no filter swap (a rebuild task may still run: it writes nothing to PM).
  LockGuard<Mutex> g(const_cast<Mutex&>(resize_mu_));
  LockGuard<Mutex> r(const_cast<Mutex&>(rebuild_mu_));
  if constexpr (R) epoch_->Drain();  // smartht-kv: retired records are back in the heap
  const pm::ChunkAllocator& alloc = pool_->allocator();
  const uint64_t geo = geo_.load();
  if (pool_->root(0) != geo) return fail("root 0 is not the table's geometry");
  if (pool_->root(2) != dir_off_) return fail("root 2 does not name the directory");
  if (stripes_.size() > (uint64_t{1} << GeoBits(geo))) return fail("more stripes than heads");
  const auto* d = pool_->template At<DirBlock>(dir_off_);
  if (d->base_bits != base_bits_) return fail("directory's first heads");
  uint64_t seg_chunks = 0;
  for (uint32_t k = 0; k < static_cast<uint32_t>(kMaxSegments); k++) {
    if (d->seg[k].load() != seg_off_[k] ||
        seg_[k].load() != (seg_off_[k] ? At(seg_off_[k]) : nullptr)) {
      return fail("directory segment " + std::to_string(k));
    }
    if (seg_off_[k] != 0) seg_chunks += SegmentHeads(base_bits_, k);
    if (seg_off_[k] != 0 &&
        seg_off_[k] + SegmentHeads(base_bits_, k) * sizeof(PmBucket) > bound_.load()) {
      return fail("segment " + std::to_string(k) + " past root 3");
    }
  }
  // I10: root 3 is its mirror and covers the directory (the segments above, the buckets and
  // the records below).
  if ((pool_->root(3) != bound_.load() || dir_off_ + sizeof(DirBlock) > bound_.load())) {
    return fail("root 3 does not cover the directory");
  }
  const uint64_t n = HeadsInUse(geo);
  if (SegmentOf(base_bits_, n - 1) >= static_cast<uint32_t>(kMaxSegments) ||
      seg_off_[SegmentOf(base_bits_, n - 1)] == 0) {
    return fail("heads in use past the segments");
  }
  const bool complete = complete_.load();
  index::LiveKeys keys(records_.get(), hash_);  // (records_: null unless R)
  uint64_t chained = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t steps = 0;
    for (uint64_t off = pool_->OffsetOf(HeadAt(i)); off != 0; steps++) {
      if (steps > alloc.chunk_count()) return fail("chain of head " + std::to_string(i) + " cycles");
      if (!alloc.IsUsed(off)) return fail("bucket not marked allocated: " + std::to_string(off));
      if (off + sizeof(PmBucket) > bound_.load()) {
        return fail("bucket past root 3: " + std::to_string(off));
      }
      if (steps > 0) chained++;
      const PmBucket* b = At(off);
      for (int j = 0; j < kSlots; j++) {
        const uint8_t t = b->tokens[j].load(std::memory_order_relaxed);
        if (t == 0) continue;
        const Key k = b->slots[j].key.load(std::memory_order_relaxed);
        const uint64_t h = SlotHash(k);
        if (t != Token(h)) return fail("token does not match key " + std::to_string(k));
        if (AddressOf(h, geo) != i) return fail("key " + std::to_string(k) + " in the wrong chain");
        const uint64_t v = b->slots[j].value.load(std::memory_order_relaxed);
        if (std::string e = keys.Add(k, v, h); !e.empty()) return fail(e);
        if (R && records_->ChunksEnd(v) > bound_.load()) {
          return fail("record past root 3: " + std::to_string(v));
        }
        if (complete && !filter_->MayContain(h)) {
          return fail("filter false negative for key " + std::to_string(k));
        }
      }
      off = b->next.load(std::memory_order_relaxed);
    }
  }
  if (chained != chained_.load()) return fail("chained bucket count");
  uint64_t saved = 0;
  if (const uint64_t r1 = pool_->root(1); r1 != 0) {
    saved = 1 + pool_->template At<SavedFilterHeader>(r1)->blocks;
  }
  // The directory, the segments, the chained buckets, the saved filter (and the records).
  uint64_t chunks = kDirChunks + seg_chunks + chained + saved;
  if (std::string e = keys.Finish(&chunks); !e.empty()) return fail(e);
  if (std::string e = this->CheckAccounting(chunks, keys.size()); !e.empty()) return fail(e);
  return Status::OK();
}

PMHASH_PROBE_ENGINE_CALLS((template <pm::PersistPolicy P, bool R>), SmartHt<P, R>);

// Find is the one engine call defined inline (the extern template below leaves inline functions
// to every caller): a negative search is the filter's probe and nothing more, and the fewer
// instructions each search keeps in flight, the more searches' filter misses the CPU overlaps.
// Out of line, the call, its frame and a Status returned through memory cost more than the
// probe itself (docs/results.md, "SmartHT: find− inline"). The chain search stays out of line.
template <pm::PersistPolicy P, bool R>
PMHASH_ALWAYS_INLINE Status SmartHt<P, R>::Find(Key k, Value* v) const {
  if constexpr (R) {
    return FindRecord(k, v);
  } else {
    return index::ProbeCalls::Find(*this, k, v);  // Search: FilterCheck, then out of line
  }
}

template <pm::PersistPolicy P, bool R>
Status SmartHt<P, R>::FindRecord(Key k, Value* v) const {
  return index::ProbeCalls::Find(*this, k, v);
}

// Instantiated once, in the library (smartht.cc).
PMHASH_ENGINE_INSTANTIATIONS(extern, SmartHt, false);
PMHASH_ENGINE_INSTANTIATIONS(extern, SmartHt, true);

}  // namespace pmhash::smartht
