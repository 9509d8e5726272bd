// src/pm/record_heap.h — a size-class allocator for small persistent records (keys, values,
// key-value records), built on the pool's chunk heap; shared by every index that stores records.
//
// ============================================================================================
// Why
// ============================================================================================
// The chunk heap (chunk_allocator.h) hands out whole chunks: 256 B for TurboHash and REH. A
// 24 B record (8 B header + 8 B key + 8 B value) in a chunk of its own wastes 90% of it. The
// record heap packs small records into slabs of equal slots (a size class per slab), and keeps
// the property that makes the chunk heap crash-safe: which slots are in use is kept in DRAM only
// and rebuilt at every open from what the index can reach. Nothing about a slot's occupancy is
// ever written to PM, so allocating and freeing a record costs no persist at all; the only
// persistent write of the heap is a slab's header, once per slab.
//
// ============================================================================================
// Layout
// ============================================================================================
// A slab is slab_chunks() contiguous chunks (4 KiB, or one chunk if chunks are larger), aligned to
// its own size from the heap start, so the slab of any offset is found by rounding down:
//
//   heap_offset                 heap_offset + slab_bytes        heap_offset + 2 x slab_bytes
//   |-- slab 0 ----------------------|-- slab 1 ------------------|-- ...
//
//   slab (slab_bytes, e.g. 4096 = 16 chunks of 256 B):
//     +0    SlabHeader, 64 B (one cache line):
//             [ magic "RSLB":32 | slot_bytes:32 | slots:32 | slab_bytes:32 ]
//             [ self: pool offset of this slab:64 ][ reserved: 40 zero bytes ]
//     +64   slot 0   (slot_bytes)
//     +64 + slot_bytes      slot 1
//     ...   slot slots-1; the tail (< slot_bytes) is unused
//
//   Size classes (slot_bytes): 16, 32, ..., 128 in steps of 16, then 4 per doubling up to 64 KiB
//   (kClassBytes). A class is active in a heap if it is smaller than a chunk and a slab holds at
//   least 8 of its slots: for 256 B chunks, 16..224 B; for Pea's 512 KB segment chunks, 16 B..56
//   KiB. A record of `bytes` lives in the smallest
//   active class >= bytes; a record larger than every active class takes ceil(bytes / chunk)
//   whole chunks of its own ("large", exactly as before the record heap) and starts on a chunk.
//   16-chunk slab of a 256 B-chunk heap: 126 slots of 32 B (32.5 B of PM per 24 B record),
//   252 of 16 B, 84 of 48 B, 63 of 64 B, 21 of 192 B, 18 of 224 B.
//
//   DRAM, rebuilt at open: a table with one pointer per slab position (8 B per slab_bytes of
//   heap), for each live slab a descriptor with an occupancy bitmap (one bit per slot), and per
//   (class, stripe) a bin: the list of its slabs that have a free slot. Each class also has an
//   "orphan" bin, where recovery puts the slabs it rebuilds: a stripe whose bin runs dry adopts
//   an orphan slab (moves it into its own bin) before it carves a new one, so the free slots
//   that a crash or a reopen leaves behind are used first, by whichever threads allocate.
//
// ============================================================================================
// Invariants
// ============================================================================================
//   H1  A slab's header is written and persisted (Persister::Persist: flush + fence) before any
//       slot of the slab is handed out, so before any record in it can be published. Hence a
//       record that a crash can find reachable lies in a slab whose header is durable and names
//       the record's size class. (Commit point: the fence of that Persist.)
//   H2  The size class of a record is a function of its length alone (ClassOf): the index
//       reports the same length at recovery that it allocated with, and the heap refuses any
//       record whose slab header names another class.
//   H3  Slot occupancy is DRAM only. The index publishes a record (makes it reachable, durably)
//       only after the record is allocated, and frees it only after it is durably unreachable
//       (Retire: after the epoch's readers have left). A record allocated but not yet published
//       when the process dies is simply not reported at recovery: its slot is free again, and a
//       slab with no reported record is not marked in the chunk allocator: free too. No crash
//       leaks PM.
//   H4  A slab lives until its last slot is freed. Each (class, stripe) keeps at most one empty
//       slab (hysteresis: allocate/free of one record must not rewrite a header each time);
//       any other slab that becomes empty (an orphan, or one whose bin has another slab with
//       room) goes back to the chunk allocator, from which it may become anything (a shard,
//       another class's slab, a large record). That is safe because none of its slots is
//       reachable any more (H3), and a new owner's header or contents are persisted before they
//       are published.
//   H5  Every record offset read from PM is validated at recovery (MarkReachable) before the index
//       reads past its first 8 bytes (which it may read once PlausibleRecord says they are
//       inside the heap and aligned): inside the heap; for a slab record, inside a slab position,
//       the slab header valid (magic, class == ClassOf(bytes), slot count, slab size, self
//       offset, reserved zero), on a slot boundary, not reachable twice, and the slab's chunks
//       not shared with anything else the index marked; for a large record, chunk-aligned and
//       its chunks not shared. A violation is kCorruption, never an out-of-bounds read.
//
// ============================================================================================
// Recovery (the index drives it)
// ============================================================================================
//   1. ChunkAllocator::Reset(), then RecordHeap::Reset(): everything is free.
//   2. The index marks its own structure in the chunk allocator and calls
//      MarkReachable(offset, bytes) for every record a live entry points at. The first record of
//      a slab validates its header and marks the slab's chunks; later ones set their slot's bit.
//   3. Nothing else: every slab not reached is free, every slot not reported is free, and the
//      rebuilt slabs with a free slot are on their class's orphan list, ready to be adopted.
//
// Lazy recovery (an index that serves writes while its walk runs, SmartHT's I10): the index
// holds every chunk below a bound in the chunk allocator (ClaimBelow), so that new slabs and
// large records come from above it, and calls BeginLazyRecovery(mark) after Reset(). Then
// MarkReachable names a slab's or large record's chunks through `mark` (the index's set of
// reached chunks, which refuses any past the bound) instead of the allocator, and leaves the
// slabs it rebuilds out of every bin, so that no writer takes a slot of one before the walk has
// marked all of its records; their counts are the walk's alone. The index frees no record of
// those slabs meanwhile (it defers those frees). EndLazyRecovery(bound) puts the rebuilt slabs
// with a free slot on their orphan bins; only then may the index settle the allocator below the
// bound and free what it deferred. ChunkHook: the index learns of every chunk the heap takes
// from the allocator (a new slab's, a large record's) before any record in it is handed out,
// so that it can raise its bound over them before it publishes one.
//
// Thread safety: Allocate, Free and Retire may run concurrently from any threads. Allocation
// takes the lock of one (class, stripe) bin, the stripe chosen by the calling thread
// (thread_stripe.h), so writers of different threads rarely share one (adopting an orphan also
// takes the class's orphan bin lock, always after a stripe's); a new slab is carved and its
// header persisted outside any heap lock. Free locks the bin its slab is in (a slab's stripe
// changes only under both locks, so Free re-checks it once locked). Reset, MarkReachable, Check
// and IsAllocated require quiescence (open / invariant checks).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "common/attributes.h"
#include "common/epoch.h"
#include "common/locks.h"
#include "common/thread_stripe.h"
#include "pm/chunk_allocator.h"
#include "pm/persist.h"
#include "pm/saved_state.h"
#include "pmhash/status.h"

namespace pmhash::pm {

inline constexpr uint32_t kSlabMagic = 0x424C5352;  // "RSLB" in little-endian byte order
inline constexpr uint32_t kSlabHeaderBytes = 64;
inline constexpr uint32_t kSlabTargetBytes = 4096;
inline constexpr uint32_t kMinSlotsPerSlab = 8;
// Every record starts on this boundary (slots are multiples of 16 B after a 64 B header; large
// records start on a chunk), so an index may read a record's fixed header in place.
inline constexpr uint64_t kRecordAlign = 16;
inline constexpr std::array<uint32_t, 44> kClassBytes = {
    16,    32,    48,    64,    80,    96,    112,   128,   160,   192,   224,
    256,   320,   384,   448,   512,   640,   768,   896,   1024,  1280,  1536,
    1792,  2048,  2560,  3072,  3584,  4096,  5120,  6144,  7168,  8192,  10240,
    12288, 14336, 16384, 20480, 24576, 28672, 32768, 40960, 49152, 57344, 65536};

struct SlabHeader {
  uint32_t magic;       // kSlabMagic
  uint32_t slot_bytes;  // the slab's size class
  uint32_t slots;       // (slab_bytes - kSlabHeaderBytes) / slot_bytes
  uint32_t slab_bytes;  // RecordHeap::slab_bytes() of the heap that wrote it
  uint64_t self;        // pool offset of this header: a header copied elsewhere is invalid
  uint8_t reserved[40];
};
static_assert(sizeof(SlabHeader) == kSlabHeaderBytes, "a slab header is one cache line");
static_assert(offsetof(SlabHeader, self) == 16, "self follows the four 32-bit fields");
static_assert(kClassBytes[0] == 16 && kClassBytes[0] % 16 == 0,
              "slots are 16-aligned: a record's 8-byte header is never split");
static_assert(kSlabHeaderBytes % kRecordAlign == 0, "slot 0 is aligned");
static_assert(kRecordAlign == 16 && kClassBytes[1] % kRecordAlign == 0,
              "every class is a multiple of 16 B, so every slot is aligned");

// What Stats() reports about the heap.
struct RecordHeapStats {
  uint64_t slabs = 0;          // live slabs (each slab_chunks() chunks)
  uint64_t empty_slabs = 0;    // of which empty, kept for reuse (H4)
  uint64_t slab_records = 0;   // records in slab slots
  uint64_t large_records = 0;  // records in whole chunks
  uint64_t large_chunks = 0;   // chunks they take
  uint64_t chunks = 0;         // slabs * slab_chunks + large_chunks
  uint64_t bytes = 0;          // chunks * chunk size: the PM the records take
  uint64_t reused_slots = 0;   // slot allocations that reused a freed slot (since open)
};

class RecordHeap {
 public:
  static constexpr uint32_t kStripes = 8;
  static constexpr uint32_t kOrphan = kStripes;  // the bin of slabs rebuilt by recovery
  static constexpr uint32_t kLarge = UINT32_MAX;  // ClassOf: whole chunks

  // `base` is the pool's base address (offsets are from it); the heap is the chunk allocator's.
  // `epoch` defers Retire()d frees until lock-free readers have left.
  RecordHeap(char* base, ChunkAllocator* chunks, EpochManager* epoch);
  ~RecordHeap();
  RecordHeap(const RecordHeap&) = delete;
  RecordHeap& operator=(const RecordHeap&) = delete;

  // Offset of a free block for a record of `bytes` (>= 1) bytes: a slot of ClassOf(bytes), or
  // whole chunks. The caller writes the record and persists it before publishing it (H3).
  // kOutOfSpace if neither a slot nor chunks are left (nothing changed); kInvalidArgument for 0
  // bytes or more than the heap. A new slab's header is persisted through `persist` (H1).
  template <PersistPolicy P>
  Result<uint64_t> Allocate(uint64_t bytes, const Persister<P>& persist);
  // Frees at once. REQUIRES: the record is allocated, and no reader can still reach it. (A
  // second Free of a slab slot is detected and ignored.)
  void Free(uint64_t offset, uint64_t bytes) PMHASH_NO_THREAD_SAFETY_ANALYSIS;
  // Frees once every epoch reader that may still hold the record has left.
  void Retire(uint64_t offset, uint64_t bytes);

  // Recovery (see above). REQUIRES: quiescence, no Retire()d free pending, and the chunk
  // allocator Reset() first.
  void Reset();
  Status MarkReachable(uint64_t offset, uint64_t bytes) PMHASH_NO_THREAD_SAFETY_ANALYSIS;
  // Lazy recovery (above). `mark(offset, n)` names n chunks at offset: kCorruption if they are
  // shared or past the index's bound. REQUIRES: Reset() just before, the chunks below the bound
  // claimed; MarkReachable from one thread, concurrent with Allocate/Free of records above the
  // bound only, until EndLazyRecovery, which runs on that thread after the last MarkReachable.
  void BeginLazyRecovery(std::function<Status(uint64_t, uint32_t)> mark) {
    lazy_mark_ = std::move(mark);
  }
  void EndLazyRecovery(uint64_t bound);
  // Called with (offset, n) for every range of chunks the heap takes from the allocator, before
  // any record in it is handed out (see above). Set before the first Allocate.
  void SetChunkHook(std::function<void(uint64_t, uint64_t)> hook) { chunk_hook_ = std::move(hook); }
  // Asks for the DRAM state MarkReachable will touch for a record at `offset` (its slab's first
  // line; nothing for an offset outside the slabs, or the first record of a slab, which has none
  // yet). Recovery walks call it ahead of MarkReachable: the slabs' states are random lines of
  // DRAM, one miss per record otherwise. Never faults; only prefetches (a lazy walk calls it
  // beside writers).
  void PrefetchSlab(uint64_t offset) const {
    if (offset - heap_offset_ >= heap_end_ - heap_offset_) return;
    const uint64_t idx = SlabIndex(offset);
    if (idx >= nslabs_) return;
    if (const Slab* s = table_[idx].load(std::memory_order_relaxed)) PrefetchLine(s);
  }

  // Clean shutdown (src/pm/saved_state.h; the index calls these from its SaveState/LoadState).
  // ReleaseEmptySlabs returns every empty slab to the chunk allocator (Close, before the image:
  // a loaded slab is never empty, H4). SaveState appends the heap's DRAM state: the large
  // records' counts, then per live slab its offset, class and occupancy bitmap. LoadState
  // rebuilds it after Reset(), reading no PM: every slab at a slab position, of an active class,
  // at most once, with its bitmap's padding bits set and at least one slot in use, is named
  // (name(offset, chunks) false refuses it: the caller checks the slabs disjoint from its own
  // structures and in use, and the chunk allocator's used chunks against them plus
  // large_chunks()); false if anything is off.
  // Slab headers are not read: `Check()` compares them with PM. REQUIRES quiescence.
  void ReleaseEmptySlabs();
  void SaveState(StateWriter& w) const;
  bool LoadState(StateReader& r, const std::function<bool(uint64_t, uint32_t)>& name);
  uint64_t large_chunks() const { return large_chunks_.load(std::memory_order_relaxed); }

  // True if [offset, offset + len) lies inside the heap.
  bool Contains(uint64_t offset, uint64_t len) const;
  // True if [offset, offset + len) lies inside the heap and offset is kRecordAlign-aligned: what
  // an index checks before it reads a record's length from PM (to pass it to MarkReachable).
  bool PlausibleRecord(uint64_t offset, uint64_t len) const {
    return offset % kRecordAlign == 0 && Contains(offset, len);
  }
  // REQUIRES quiescence. True if a record of `bytes` at `offset` is allocated (its slot's bit, or
  // its chunks).
  bool IsAllocated(uint64_t offset, uint64_t bytes) const;
  // The slab holding a record of `bytes` at `offset` (its pool offset), or 0 for a large record.
  uint64_t SlabOf(uint64_t offset, uint64_t bytes) const;
  // REQUIRES quiescence. The heap's own invariants: bitmaps agree with counts, free lists hold
  // exactly the slabs with a free slot, slab chunks marked in the chunk allocator, at most one
  // empty slab per bin.
  Status Check() const;

  // Geometry.
  uint32_t ClassOf(uint64_t bytes) const;  // class index, or kLarge
  uint32_t class_count() const { return nclasses_; }
  uint32_t class_bytes(uint32_t c) const { return kClassBytes[c]; }
  uint32_t slots_per_slab(uint32_t c) const { return SlotsOf(c); }
  // PM a record of `bytes` occupies: its slot, or its whole chunks.
  uint64_t SpaceFor(uint64_t bytes) const;
  uint64_t slab_bytes() const { return slab_bytes_; }
  uint32_t slab_chunks() const { return slab_chunks_; }
  uint32_t max_slot_bytes() const { return nclasses_ ? kClassBytes[nclasses_ - 1] : 0; }

  RecordHeapStats stats() const;
  uint64_t dram_bytes() const;

 private:
  // A slab's DRAM state. The first line holds what recovery's MarkReachable, Allocate and Free
  // touch (class, bin, counts and, for slabs of at most kInlineWords x 64 slots — every 4 KiB
  // slab — the bitmap itself), so that one prefetch (PrefetchSlab) covers a record's marking.
  static constexpr uint32_t kInlineWords = 5;
  struct alignas(64) Slab {
    uint32_t cls = 0;
    // The bin the slab is in: [0, kStripes) or kOrphan. Changes only under the locks of both
    // bins (adoption); Free reads it, locks that bin and reads it again.
    std::atomic<uint32_t> stripe{0};
    // Guarded by the lock of bin (cls, stripe).
    uint32_t used = 0;
    uint32_t high = 0;  // 1 + highest slot handed out since the slab was created or recovered
    uint64_t* bits = inline_bits;  // 1 = in use; bits past `slots` are set
    uint64_t inline_bits[kInlineWords] = {};
    // Second line.
    uint64_t offset = 0;  // pool offset of the header
    bool listed = false;  // on its bin's list of slabs with a free slot
    Slab* prev = nullptr;
    Slab* next = nullptr;
    std::unique_ptr<uint64_t[]> big_bits;  // the bitmap of a slab of more slots
  };
  static_assert(sizeof(Slab) == 128 && alignof(Slab) == 64, "two lines, the hot one first");
  struct alignas(64) Bin {
    mutable SpinLock mu;
    Slab* free_list PMHASH_GUARDED_BY(mu) = nullptr;  // slabs with a free slot
  };

  uint32_t SlotsOf(uint32_t c) const { return slots_[c]; }
  uint32_t Words(uint32_t c) const { return (SlotsOf(c) + 63) / 64; }
  static constexpr uint32_t kBinsPerClass = kStripes + 1;
  uint32_t BinCount() const { return std::max<uint32_t>(nclasses_, 1) * kBinsPerClass; }
  Bin& BinOf(uint32_t c, uint32_t stripe) const { return bins_[c * kBinsPerClass + stripe]; }
  uint64_t SlabIndex(uint64_t offset) const { return (offset - heap_offset_) >> slab_shift_; }

  Result<uint64_t> AllocateChunks(uint64_t bytes);
  // Recovery names a slab's or a large record's chunks: in the allocator, or (lazy) to the index.
  Status MarkChunks(uint64_t offset, uint32_t n) {
    return lazy_mark_ ? lazy_mark_(offset, n) : chunks_->MarkReachable(offset, n);
  }
  // A slot of class c from bin (c, stripe), adopting an orphan slab if the bin has none; 0 if
  // there is no free slot there.
  uint64_t TakeSlot(uint32_t c, uint32_t stripe);
  uint64_t TakeSlotLocked(Bin& b, Slab* s) PMHASH_REQUIRES(b.mu);
  // Carves a slab for class c and writes its header (not yet durable). Out of space: a slot of
  // class c from any bin instead (*slot), or the error.
  Result<uint64_t> NewSlab(uint32_t c, uint64_t* slot);
  // Makes a slab whose header is durable visible, and returns its slot 0 for the caller.
  uint64_t PublishSlab(uint64_t slab, uint32_t c, uint32_t stripe);
  Slab* MakeSlab(uint64_t slab, uint32_t c, uint32_t stripe) const;
  static void Link(Bin& b, Slab* s) PMHASH_REQUIRES(b.mu);
  static void Unlink(Bin& b, Slab* s) PMHASH_REQUIRES(b.mu);
  void DeleteAllSlabs();

  char* const base_;
  ChunkAllocator* const chunks_;
  EpochManager* const epoch_;
  const uint64_t heap_offset_;
  const uint64_t heap_end_;
  const uint32_t chunk_size_;
  uint32_t slab_chunks_ = 1;
  uint64_t slab_bytes_ = 0;  // a power of two (so is the chunk size: Pool checks it)
  uint32_t slab_shift_ = 0;  // log2(slab_bytes_)
  uint64_t nslabs_ = 0;    // slab positions in the heap
  uint32_t nclasses_ = 0;  // active classes: kClassBytes[0, nclasses_)
  std::array<uint32_t, kClassBytes.size()> slots_{};  // slots per slab of each class
  std::unique_ptr<uint8_t[]> class_of_;  // (bytes + 15) / 16 -> class, up to max_slot_bytes()
  std::unique_ptr<std::atomic<Slab*>[]> table_;  // slab position -> live slab or nullptr
  std::unique_ptr<Bin[]> bins_;

  std::atomic<uint64_t> slabs_{0};
  std::atomic<uint64_t> empty_slabs_{0};
  std::atomic<uint64_t> slab_records_{0};
  std::atomic<uint64_t> large_records_{0};
  std::atomic<uint64_t> large_chunks_{0};
  std::atomic<uint64_t> reused_slots_{0};
  std::function<void(uint64_t, uint64_t)> chunk_hook_;
  // Lazy recovery: the index's marking of chunks (set: the lazy walk runs), and the records it
  // has marked in slabs (its thread only; added to slab_records_ at its end).
  std::function<Status(uint64_t, uint32_t)> lazy_mark_;
  uint64_t lazy_records_ = 0;
};

template <PersistPolicy P>
Result<uint64_t> RecordHeap::Allocate(uint64_t bytes, const Persister<P>& persist) {
  const uint32_t c = ClassOf(bytes);
  if (bytes == 0 || c == kLarge) return AllocateChunks(bytes);
  const uint32_t stripe = ThreadStripe<kStripes>();
  if (const uint64_t off = TakeSlot(c, stripe)) return off;
  uint64_t slot = 0;
  Result<uint64_t> slab = NewSlab(c, &slot);
  if (!slab.ok()) return slab.status();
  if (slot != 0) return slot;  // heap full, but another stripe had room
  // H1, the commit point of a slab: its header is durable before any slot in it is handed out.
  persist.Persist(base_ + slab.value(), sizeof(SlabHeader));
  return PublishSlab(slab.value(), c, stripe);
}

}  // namespace pmhash::pm
