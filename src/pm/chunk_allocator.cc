#include "pm/chunk_allocator.h"

#include <algorithm>
#include <bit>
#include <string>

namespace pmhash::pm {

ChunkAllocator::ChunkAllocator(uint64_t heap_offset, uint32_t chunk_size, uint64_t chunk_count)
    : heap_offset_(heap_offset),
      chunk_size_(chunk_size),
      chunk_shift_(static_cast<uint32_t>(std::countr_zero(chunk_size))),
      chunk_count_(chunk_count),
      bits_(std::max<uint64_t>(1, (chunk_count + 63) / 64), Pages::kSmall),
      full_(std::max<uint64_t>(1, ((chunk_count + 63) / 64 + 63) / 64), Pages::kSmall) {}

void ChunkAllocator::SetLocked(uint64_t i, uint64_t n, bool used) {
  // A word at a time: the bits of [i, i + n) in word w, counted (a double Free changes nothing).
  for (uint64_t j = i; j < i + n;) {
    const uint64_t w = j >> 6;
    const uint64_t changed = (used ? ~bits_[w] : bits_[w]) & BitmapWordMask(&j, i + n);
    bits_[w] ^= changed;
    const auto c = static_cast<uint64_t>(std::popcount(changed));
    used_ = used ? used_ + c : used_ - c;
    const uint64_t f = uint64_t{1} << (w & 63);
    full_[w >> 6] = bits_[w] == ~uint64_t{0} ? full_[w >> 6] | f : full_[w >> 6] & ~f;
  }
}

uint64_t ChunkAllocator::NextNonFullWord(uint64_t w) const {
  while (w < bitmap_words()) {
    const uint64_t open = ~full_[w >> 6] & (~uint64_t{0} << (w & 63));
    if (open != 0) {
      return std::min<uint64_t>(bitmap_words(), (w & ~uint64_t{63}) + std::countr_zero(open));
    }
    w = (w | 63) + 1;
  }
  return bitmap_words();
}

Result<uint64_t> ChunkAllocator::Allocate(uint32_t n) {
  if (n == 0) return Status::InvalidArgument("Allocate(0)");
  LockGuard<SpinLock> g(mu_);
  // No free run of n chunks starts below this (a lower bound when n is not a hint length).
  const uint32_t h = HintIndex(n);
  const bool exact = HintLength(h) == n;
  uint64_t i = hints_[h];
  while (i + n <= chunk_count_) {
    scan_steps_++;
    // Skip full words quickly: the summary jumps over 64 of them at a time.
    if ((i & 63) == 0 && bits_[i >> 6] == ~uint64_t{0}) {
      i = NextNonFullWord(i >> 6) << 6;
      continue;
    }
    if (TestLocked(i)) {
      // Skip the rest of this run of used chunks within the word (fragmented heaps: shards
      // freed after a rehash leave holes that the first-fit scan would otherwise walk bit by bit).
      i += static_cast<uint64_t>(std::countr_one(bits_[i >> 6] >> (i & 63)));
      continue;
    }
    // Length of the free run at i (word at a time), up to n or the first used chunk.
    uint64_t run = 0;
    while (run < n) {
      const uint64_t j = i + run;
      const uint64_t avail = 64 - (j & 63);
      const uint64_t w = bits_[j >> 6] >> (j & 63);
      const uint64_t z = w ? std::min<uint64_t>(std::countr_zero(w), avail) : avail;
      run += z;
      if (z < avail) break;  // a used chunk ends the run
    }
    if (run >= n) {
      SetLocked(i, n, true);
      // Every start in [hint, i) was passed over (a used chunk, or a free run shorter than n),
      // and the starts in [i, i+n) now hold a used chunk.
      if (exact) hints_[h] = i + n;
      if (i < high_water_) reused_++;
      high_water_ = std::max(high_water_, i + n);
      return heap_offset_ + i * chunk_size_;
    }
    i += run;
  }
  if (exact) hints_[h] = i;
  return Status::OutOfSpace("pool heap exhausted: " + std::to_string(used_) + " of " +
                            std::to_string(chunk_count_) + " chunks of " +
                            std::to_string(chunk_size_) + " B in use");
}

Result<uint64_t> ChunkAllocator::AllocateAligned(uint32_t n) {
  if (n == 0 || !std::has_single_bit(n)) {
    return Status::InvalidArgument("AllocateAligned(" + std::to_string(n) + ")");
  }
  if (n == 1) return Allocate(1);
  LockGuard<SpinLock> g(mu_);
  if (aligned_n_ != n) {
    aligned_n_ = n;
    aligned_hint_ = 0;
  }
  // No free run of n chunks starts below hints_[HintIndex(n)] (n is a power of two, a hint
  // length); no free aligned block of n below aligned_hint_.
  const uint64_t start = std::max(hints_[HintIndex(n)], aligned_hint_);
  uint64_t i = (start + n - 1) & ~uint64_t{n - 1};
  while (i + n <= chunk_count_) {
    scan_steps_++;
    bool free = true;
    if (n <= 64) {
      const uint64_t w = bits_[i >> 6];
      if (w == ~uint64_t{0}) {  // a full word: no block of it is free; the summary jumps over
        i = NextNonFullWord(i >> 6) << 6;  // 64 full words at a time (n divides 64: aligned)
        continue;
      }
      const uint64_t mask = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
      free = ((w >> (i & 63)) & mask) == 0;
    } else {
      for (uint64_t j = i >> 6; j < (i + n) >> 6 && free; j++) free = bits_[j] == 0;
    }
    if (free) {
      SetLocked(i, n, true);
      aligned_hint_ = i + n;
      if (i < high_water_) reused_++;
      high_water_ = std::max(high_water_, i + n);
      return heap_offset_ + i * chunk_size_;
    }
    i += n;
  }
  aligned_hint_ = i;
  return Status::OutOfSpace("pool heap exhausted: no free run of " + std::to_string(n) +
                            " aligned chunks (" + std::to_string(used_) + " of " +
                            std::to_string(chunk_count_) + " chunks of " +
                            std::to_string(chunk_size_) + " B in use)");
}

void ChunkAllocator::Free(uint64_t offset, uint32_t n) {
  if (!ValidChunk(offset, n)) return;
  const uint64_t i = ChunkIndex(offset);
  LockGuard<SpinLock> g(mu_);
  SetLocked(i, n, false);
  // A run of k chunks that is free now and was not before holds one of the freed chunks, so it
  // starts at i - k + 1 or later.
  for (uint32_t h = 1; h < kHints; h++) {
    const uint64_t k = HintLength(h);
    hints_[h] = std::min(hints_[h], i + 1 > k ? i + 1 - k : 0);
  }
  if (aligned_n_ != 0) aligned_hint_ = std::min(aligned_hint_, i & ~(aligned_n_ - 1));
}

void ChunkAllocator::Reset() {
  LockGuard<SpinLock> g(mu_);
  std::fill_n(bits_.data(), HighWaterWords(), 0);
  std::fill_n(full_.data(), full_.size(), 0);
  used_ = 0;
  hints_.fill(0);
  aligned_hint_ = 0;
  high_water_ = 0;
}

void ChunkAllocator::ClaimBelow(uint64_t end) {
  end = std::min(end, chunk_count_);
  LockGuard<SpinLock> g(mu_);
  // Whole words first, without SetLocked's per-word masks (a lazy open waits for this: 2.4 MB
  // of bitmap at 20M chunks), then the last partial word.
  const uint64_t whole = end >> 6;
  uint64_t had = 0;  // (counted only in non-empty words: popcount may be a library call)
  for (uint64_t w = 0; w < whole; w++) {
    if (bits_[w] != 0) had += static_cast<uint64_t>(std::popcount(bits_[w]));
    bits_[w] = ~uint64_t{0};
  }
  used_ += 64 * whole - had;
  for (uint64_t w = 0; w < whole;) {
    if ((w & 63) == 0 && w + 64 <= whole) {
      full_[w >> 6] = ~uint64_t{0};
      w += 64;
    } else {
      full_[w >> 6] |= uint64_t{1} << (w & 63);
      w++;
    }
  }
  if (end & 63) SetLocked(whole << 6, end & 63, true);
  high_water_ = std::max(high_water_, end);
}

void ChunkAllocator::SettleBelow(uint64_t end, const uint64_t* words) {
  end = std::min(end, chunk_count_);
  LockGuard<SpinLock> g(mu_);
  for (uint64_t j = 0; j < end;) {
    const uint64_t w = j >> 6;
    const uint64_t mask = BitmapWordMask(&j, end);
    const uint64_t next = (bits_[w] & ~mask) | (words[w] & mask);
    used_ = used_ - static_cast<uint64_t>(std::popcount(bits_[w])) +
            static_cast<uint64_t>(std::popcount(next));
    bits_[w] = next;
    const uint64_t f = uint64_t{1} << (w & 63);
    full_[w >> 6] = next == ~uint64_t{0} ? full_[w >> 6] | f : full_[w >> 6] & ~f;
  }
  hints_.fill(0);  // (lower bounds: 0 is always one)
  aligned_hint_ = 0;
}

uint64_t ChunkAllocator::high_water() const {
  LockGuard<SpinLock> g(mu_);
  return high_water_;
}

uint64_t ChunkAllocator::UsedWords() const {
  LockGuard<SpinLock> g(mu_);
  // No bit at or past high_water_ is set (Reset and LoadBitmap set it, every marking raises it).
  uint64_t w = HighWaterWords();
  while (w > 0 && bits_[w - 1] == 0) w--;
  return w;
}

void ChunkAllocator::CopyBitmap(uint64_t* dst, uint64_t words) const {
  LockGuard<SpinLock> g(mu_);
  std::copy_n(bits_.data(), std::min<uint64_t>(words, bitmap_words()), dst);
}

bool ChunkAllocator::BitmapEquals(const uint64_t* words) const {
  LockGuard<SpinLock> g(mu_);
  return std::equal(bits_.data(), bits_.data() + bitmap_words(), words);
}

bool ChunkAllocator::BitmapCovers(const uint64_t* words) const {
  LockGuard<SpinLock> g(mu_);
  for (size_t w = 0; w < bitmap_words(); w++) {
    if ((words[w] & ~bits_[w]) != 0) return false;
  }
  return true;
}

bool ChunkAllocator::LoadBitmap(const uint64_t* src, uint64_t words) {
  if (words > bitmap_words()) return false;
  const uint64_t tail = chunk_count_ & 63;
  if (words != 0 && words == bitmap_words() && tail != 0 && (src[words - 1] >> tail) != 0) {
    return false;
  }
  LockGuard<SpinLock> g(mu_);
  // The words past `words` that may be set: those below the old high water (none past it).
  if (const uint64_t hw = HighWaterWords(); hw > words) {
    std::fill_n(bits_.data() + words, hw - words, 0);
  }
  std::fill_n(full_.data(), full_.size(), 0);
  used_ = 0;
  high_water_ = 0;
  for (uint64_t w = 0; w < words; w++) {
    bits_[w] = src[w];
    if (src[w] == 0) continue;
    if (src[w] == ~uint64_t{0}) {  // (most words of a used heap: no popcount, a library call)
      used_ += 64;
      full_[w >> 6] |= uint64_t{1} << (w & 63);
    } else {
      used_ += static_cast<uint64_t>(std::popcount(src[w]));
    }
    high_water_ = w * 64 + 64 - static_cast<uint64_t>(std::countl_zero(src[w]));
  }
  hints_.fill(0);
  aligned_hint_ = 0;
  return true;
}

bool ChunkAllocator::RangeUsed(uint64_t offset, uint32_t n) const {
  if (!ValidChunk(offset, n)) return false;
  const uint64_t i = ChunkIndex(offset);
  LockGuard<SpinLock> g(mu_);
  for (uint64_t j = i; j < i + n;) {
    const uint64_t w = j >> 6;
    const uint64_t mask = BitmapWordMask(&j, i + n);
    if ((bits_[w] & mask) != mask) return false;
  }
  return true;
}

bool ChunkAllocator::ValidChunk(uint64_t offset, uint32_t n) const {
  if (offset < heap_offset_ || n == 0) return false;
  const uint64_t rel = offset - heap_offset_;
  if ((rel & (chunk_size_ - 1)) != 0) return false;
  const uint64_t i = rel >> chunk_shift_;
  return i < chunk_count_ && n <= chunk_count_ - i;
}

Status ChunkAllocator::MarkReachable(uint64_t offset, uint32_t n) {
  if (!ValidChunk(offset, n)) {
    return Status::Corruption("offset " + std::to_string(offset) + " is not a heap chunk");
  }
  const uint64_t i = ChunkIndex(offset);
  LockGuard<SpinLock> g(mu_);
  for (uint64_t j = i; j < i + n; j++) {
    if (TestLocked(j)) {
      return Status::Corruption("chunk at offset " +
                                std::to_string(heap_offset_ + j * chunk_size_) +
                                " is reachable twice");
    }
  }
  SetLocked(i, n, true);
  high_water_ = std::max(high_water_, i + n);
  return Status::OK();
}

bool ChunkAllocator::IsUsed(uint64_t offset) const {
  if (!ValidChunk(offset)) return false;
  LockGuard<SpinLock> g(mu_);
  return TestLocked(ChunkIndex(offset));
}

uint64_t ChunkAllocator::scan_steps() const {
  LockGuard<SpinLock> g(mu_);
  return scan_steps_;
}

uint64_t ChunkAllocator::reused_allocations() const {
  LockGuard<SpinLock> g(mu_);
  return reused_;
}

uint64_t ChunkAllocator::used_chunks() const {
  LockGuard<SpinLock> g(mu_);
  return used_;
}

}  // namespace pmhash::pm
