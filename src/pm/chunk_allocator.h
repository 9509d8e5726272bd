// src/pm/chunk_allocator.h — fixed-size chunk allocator over the pool heap.
//
// The heap is chunk_count chunks of chunk_size bytes starting at heap_offset. Which chunks are in
// use is kept only in a DRAM bitmap, never persisted: at open the index walks its persistent
// structure and reports every reachable chunk (MarkReachable), and whatever it did not report is
// free. A chunk allocated but not yet linked into the structure when the process dies is
// therefore reclaimed by the next open: no crash can leak persistent memory.
//
// Allocate(n) returns n contiguous chunks (first fit from a hint per run length).
// AllocateAligned(n) returns n chunks whose first chunk index (counted from heap_offset) is a
// multiple of n, for owners that find the start of a block by rounding an offset down
// (record_heap.h's slabs).
// Out of space is a Status, never an abort; the caller's structure is unchanged.
//
// Thread safety: all methods are safe to call concurrently (one internal spin lock; allocation is
// rare compared with index operations: one per bucket/segment split).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "common/huge_array.h"
#include "common/locks.h"
#include "pmhash/status.h"

namespace pmhash::pm {

// Walks the chunks [j, end) of a bitmap a word at a time: the mask of their bits in word j >> 6,
// with *j moved past them. for (j = i; j < end;) { w = j >> 6; mask = BitmapWordMask(&j, end); }
inline uint64_t BitmapWordMask(uint64_t* j, uint64_t end) {
  const uint64_t k = std::min<uint64_t>(64 - (*j & 63), end - *j);
  const uint64_t mask = (k == 64 ? ~uint64_t{0} : (uint64_t{1} << k) - 1) << (*j & 63);
  *j += k;
  return mask;
}

class ChunkAllocator {
 public:
  // REQUIRES: chunk_size a power of two (Pool checks it; ok() is false otherwise).
  ChunkAllocator(uint64_t heap_offset, uint32_t chunk_size, uint64_t chunk_count);
  // False if the bitmap could not be allocated (the owner must not use the allocator).
  bool ok() const PMHASH_NO_THREAD_SAFETY_ANALYSIS {
    return bits_ && full_ && std::has_single_bit(chunk_size_);
  }

  // Offset (from the pool base) of n free contiguous chunks, now marked used.
  Result<uint64_t> Allocate(uint32_t n = 1) PMHASH_EXCLUDES(mu_);
  // Same, with the first chunk's index a multiple of n. REQUIRES: n is a power of two.
  Result<uint64_t> AllocateAligned(uint32_t n) PMHASH_EXCLUDES(mu_);
  void Free(uint64_t offset, uint32_t n = 1) PMHASH_EXCLUDES(mu_);

  // Recovery protocol: Reset() frees everything, then the index marks what it can reach.
  // MarkReachable fails with kCorruption for an offset outside the heap, not chunk-aligned, or
  // already marked (a cycle or a shared chunk in a corrupt pool).
  void Reset() PMHASH_EXCLUDES(mu_);
  Status MarkReachable(uint64_t offset, uint32_t n = 1) PMHASH_EXCLUDES(mu_);

  // Lazy recovery (an owner that serves before its walk ends: SmartHT after a crash, I10 of
  // smartht.h). ClaimBelow(end) takes every chunk below chunk index `end` as used, so that
  // nothing below it is handed out while the walk runs; SettleBelow(end, words) then makes the
  // chunks below `end` exactly those set in `words` (bitmap_words() words: the walk's findings)
  // and leaves the rest as they are. REQUIRES: no Free below `end` in between.
  void ClaimBelow(uint64_t end) PMHASH_EXCLUDES(mu_);
  void SettleBelow(uint64_t end, const uint64_t* words) PMHASH_EXCLUDES(mu_);
  // 1 + the highest chunk marked or allocated since the last Reset/LoadBitmap (0: none).
  uint64_t high_water() const PMHASH_EXCLUDES(mu_);

  // The bitmap as words (bit i of word w: chunk 64w + i in use), for the image a clean Close
  // saves (saved_state.h): its first UsedWords() words hold every used chunk (the rest are
  // zero), so an image costs the heap in use, not the pool's size. CopyBitmap copies the first
  // `words`; LoadBitmap replaces the bitmap with `words` such words and zeros after them, as
  // Reset() + MarkReachable of every set bit would, and fails (changing nothing) if `words` is
  // more than bitmap_words() or a bit past the last chunk is set.
  uint64_t bitmap_words() const { return (chunk_count_ + 63) / 64; }
  uint64_t UsedWords() const PMHASH_EXCLUDES(mu_);
  void CopyBitmap(uint64_t* dst, uint64_t words) const PMHASH_EXCLUDES(mu_);
  bool LoadBitmap(const uint64_t* src, uint64_t words) PMHASH_EXCLUDES(mu_);
  // True if the bitmap equals these bitmap_words() words; Covers: if it has every bit they have.
  bool BitmapEquals(const uint64_t* words) const PMHASH_EXCLUDES(mu_);
  bool BitmapCovers(const uint64_t* words) const PMHASH_EXCLUDES(mu_);
  // True if [offset, offset + n chunks) is ValidChunk and every chunk of it is in use.
  bool RangeUsed(uint64_t offset, uint32_t n) const PMHASH_EXCLUDES(mu_);

  // True if [offset, offset + n*chunk) is inside the heap and chunk-aligned.
  bool ValidChunk(uint64_t offset, uint32_t n = 1) const;
  bool IsUsed(uint64_t offset) const PMHASH_EXCLUDES(mu_);

  uint64_t used_chunks() const PMHASH_EXCLUDES(mu_);
  // Loop steps Allocate() has taken so far (for tests: allocation must stay O(1) amortised).
  uint64_t scan_steps() const PMHASH_EXCLUDES(mu_);
  // Allocations that started below the highest chunk used since open: space freed earlier
  // being reused (the crash suite asserts that its workloads reach this case).
  uint64_t reused_allocations() const PMHASH_EXCLUDES(mu_);
  uint64_t chunk_count() const { return chunk_count_; }
  uint32_t chunk_size() const { return chunk_size_; }
  uint64_t heap_offset() const { return heap_offset_; }
  // The index of the chunk at `offset` (a shift: the chunk size is a power of two).
  // REQUIRES: offset >= heap_offset().
  uint64_t ChunkIndex(uint64_t offset) const { return (offset - heap_offset_) >> chunk_shift_; }
  uint64_t dram_bytes() const {
    return ((chunk_count_ + 63) / 64 + (chunk_count_ + 4095) / 4096) * sizeof(uint64_t);
  }

 private:
  bool TestLocked(uint64_t i) const PMHASH_REQUIRES(mu_) { return (bits_[i >> 6] >> (i & 63)) & 1; }
  void SetLocked(uint64_t i, uint64_t n, bool used) PMHASH_REQUIRES(mu_);
  // The first word of bits_ at or after w with a free chunk (bits_.size() if none).
  uint64_t NextNonFullWord(uint64_t w) const PMHASH_REQUIRES(mu_);
  // The words that may have a bit set: those below high_water_.
  uint64_t HighWaterWords() const PMHASH_REQUIRES(mu_) {
    return std::min<uint64_t>(bitmap_words(), (high_water_ + 63) / 64);
  }

  const uint64_t heap_offset_;
  const uint32_t chunk_size_;
  const uint32_t chunk_shift_;  // log2(chunk_size_): offsets to indexes without a division
  const uint64_t chunk_count_;
  mutable SpinLock mu_;
  // Fresh zero mappings of 4 KiB pages (HugeArray, Pages::kSmall): an open faults in only the
  // words it loads or marks, and never waits for a 2 MiB page. No bit at or past high_water_ is
  // set, so Reset and LoadBitmap clear only the words below it.
  HugeArray<uint64_t> bits_ PMHASH_GUARDED_BY(mu_);
  // Bit w: bits_[w] is full (every chunk used). First-fit scans skip 64 full words per step.
  HugeArray<uint64_t> full_ PMHASH_GUARDED_BY(mu_);
  uint64_t used_ PMHASH_GUARDED_BY(mu_) = 0;
  // hints_[HintIndex(k)]: no run of HintLength(...) free chunks starts below this index (for
  // length 1: no free chunk below it). One per run length up to 64, then one per power of two,
  // so that a free gap too short for one request does not pin the scan of every later request
  // of that length at the gap (slabs, shards and large records leave such gaps).
  static constexpr uint32_t kExactHints = 64;
  static constexpr uint32_t kHints = kExactHints + 32 - 6;  // + 2^7 .. 2^31
  static uint32_t HintIndex(uint64_t n) {  // n >= 1; for n > 64, the largest power of two <= n
    return n <= kExactHints ? static_cast<uint32_t>(n)
                            : kExactHints + static_cast<uint32_t>(std::bit_width(n)) - 7;
  }
  static uint64_t HintLength(uint32_t idx) {
    return idx <= kExactHints ? idx : uint64_t{1} << (idx - kExactHints + 6);
  }
  std::array<uint64_t, kHints> hints_ PMHASH_GUARDED_BY(mu_) = {};
  // No free aligned block of aligned_n_ chunks starts below aligned_hint_ (0 when unused).
  uint64_t aligned_hint_ PMHASH_GUARDED_BY(mu_) = 0;
  uint64_t aligned_n_ PMHASH_GUARDED_BY(mu_) = 0;
  uint64_t scan_steps_ PMHASH_GUARDED_BY(mu_) = 0;
  uint64_t high_water_ PMHASH_GUARDED_BY(mu_) = 0;  // 1 + highest chunk used since open
  uint64_t reused_ PMHASH_GUARDED_BY(mu_) = 0;
};

// A set of heap chunks in the allocator's bitmap format: a loader of a saved image
// (saved_state.h, S3/S4) adds every chunk its image names, refusing one outside the heap,
// misaligned or named twice, and at the end requires the set to be exactly the loaded bitmap
// (nothing named that the allocator lacks, nothing allocated that is unnamed).
class ChunkSet {
 public:
  // The words are a fresh anonymous mapping of 4 KiB pages (AllocateHugeZeroed; not calloc,
  // which reuses and clears heap memory once glibc has raised its mmap threshold): zero pages
  // the kernel maps as they are first touched, so a set over a large heap costs its owner
  // little until it names chunks.
  explicit ChunkSet(const ChunkAllocator& a)
      : a_(a),
        bytes_(std::max<uint64_t>(1, a.bitmap_words()) * sizeof(uint64_t)),
        words_(static_cast<uint64_t*>(AllocateHugeZeroed(bytes_, /*huge=*/false)), Free{bytes_}) {}
  // False if the words could not be allocated: every Add then fails.
  bool ok() const { return words_ != nullptr; }
  // Adds [offset, offset + n chunks). False (the set unchanged but for a prefix of the range)
  // if the range is not ValidChunk or one of its chunks is already in the set.
  bool Add(uint64_t offset, uint32_t n = 1) {
    // Bounds first: the index below stays inside.
    if (!words_ || !a_.ValidChunk(offset, n)) return false;
    // A word at a time: a range can be large (SmartHT's segment of 2^L heads, 2^L chunks).
    const uint64_t first = a_.ChunkIndex(offset);
    for (uint64_t j = first; j < first + n;) {
      uint64_t& w = words_[j >> 6];
      const uint64_t mask = BitmapWordMask(&j, first + n);
      if (w & mask) return false;
      w |= mask;
      count_ += static_cast<uint64_t>(std::popcount(mask));
    }
    return true;
  }
  uint64_t count() const { return count_; }
  const uint64_t* words() const { return words_.get(); }  // bitmap_words(); REQUIRES: ok()
  bool EqualsAllocator() const { return words_ && a_.BitmapEquals(words_.get()); }
  bool AllocatorHasAll() const { return words_ && a_.BitmapCovers(words_.get()); }

 private:
  const ChunkAllocator& a_;
  struct Free {
    size_t bytes;
    void operator()(uint64_t* p) const { FreeHuge(p, bytes); }
  };
  size_t bytes_;
  std::unique_ptr<uint64_t[], Free> words_;
  uint64_t count_ = 0;
};

// A few ranges of heap chunks named by an open that checks them without a ChunkSet (a bitmap
// the size of the heap, and a scan of it): SmartHT's directory, segments and saved filter.
// Add bounds each range (ValidChunk); Disjoint requires that no chunk is named twice, AllUsed
// that the allocator has every chunk named, count() is the chunks named.
class ChunkRanges {
 public:
  explicit ChunkRanges(const ChunkAllocator& a) : a_(a) {}
  bool Add(uint64_t offset, uint32_t n = 1) {
    if (!a_.ValidChunk(offset, n)) return false;
    ranges_.push_back({offset, n});
    count_ += n;
    return true;
  }
  bool Disjoint() {
    std::sort(ranges_.begin(), ranges_.end());
    for (size_t i = 1; i < ranges_.size(); i++) {
      const Range& p = ranges_[i - 1];
      if (p.offset + uint64_t{p.n} * a_.chunk_size() > ranges_[i].offset) return false;
    }
    return true;
  }
  bool AllUsed() const {
    return std::all_of(ranges_.begin(), ranges_.end(),
                       [this](const Range& r) { return a_.RangeUsed(r.offset, r.n); });
  }
  uint64_t count() const { return count_; }
  // Adds every range to `set` (false if one is there already).
  bool AddTo(ChunkSet& set) const {
    return std::all_of(ranges_.begin(), ranges_.end(),
                       [&set](const Range& r) { return set.Add(r.offset, r.n); });
  }

 private:
  struct Range {
    uint64_t offset;
    uint32_t n;
    bool operator<(const Range& o) const { return offset < o.offset; }
  };
  const ChunkAllocator& a_;
  std::vector<Range> ranges_;
  uint64_t count_ = 0;
};

}  // namespace pmhash::pm
