#include "pm/counters.h"

#include <algorithm>
#include <bit>

#include "common/thread_stripe.h"

namespace pmhash::pm {

TrafficCounters::TrafficCounters(uint32_t media_block_bytes, uint64_t media_cache_bytes) {
  if (media_block_bytes < 64 || !std::has_single_bit(media_block_bytes)) media_block_bytes = 256;
  block_shift_ = static_cast<uint32_t>(std::countr_zero(media_block_bytes));
  const uint64_t sets = media_cache_bytes / (64 * kCacheWays);
  cache_.sets = sets == 0 ? 0 : std::bit_floor(sets);
}

TrafficCounters::Stripe& TrafficCounters::MyStripe() { return stripes_[ThreadStripe<kStripes>()]; }

namespace {
// Calls fn(line address) for every 64 B line of [addr, addr + len).
template <class Fn>
void ForEachLine(const void* addr, size_t len, Fn&& fn) {
  const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + len;
  for (uintptr_t p = reinterpret_cast<uintptr_t>(addr) & ~uintptr_t{63}; p < end; p += 64) fn(p);
}
}  // namespace

void TrafficCounters::MediaStream::Line(uint64_t block) {
  for (uint64_t b : wc) {
    if (b == block) return;  // merged in the write-combining buffer
  }
  writes++;
  wc[next] = block;
  next = (next + 1) % kWcEntries;
}

uint64_t* TrafficCounters::CacheSet(uintptr_t line_addr) {
  if (!cache_.tags) {
    cache_.tags = std::make_unique<uint64_t[]>(cache_.sets * kCacheWays);  // zeroed: empty
  }
  // Fibonacci hashing of the line number: power-of-two strides (log blocks, buckets) spread
  // over every set instead of aliasing into a few.
  const uint64_t h = (static_cast<uint64_t>(line_addr) >> 6) * 0x9E3779B97F4A7C15ULL;
  const int bits = std::countr_zero(cache_.sets);
  const uint64_t set = bits == 0 ? 0 : h >> (64 - bits);
  return cache_.tags.get() + set * kCacheWays;
}

void TrafficCounters::CacheLine(uintptr_t line_addr) {
  LockGuard<SpinLock> g(cache_.mu);
  uint64_t* ways = CacheSet(line_addr);
  const uint64_t tag = static_cast<uint64_t>(line_addr) + 1;
  uint32_t i = 0;
  while (i < kCacheWays && ways[i] != tag && ways[i] != 0) i++;
  if (i == kCacheWays) {
    // Miss in a full set: the least recently written line (the last way) is written back.
    i = kCacheWays - 1;
    cache_.evictions.Line(BlockOf(ways[i] - 1));
  } else if (ways[i] == 0) {
    cache_.resident++;
  }
  // ways[i] is the hit, the free way or the victim: move everything before it down one, and
  // put the line first (most recently written).
  std::copy_backward(ways, ways + i, ways + i + 1);
  ways[0] = tag;
}

bool TrafficCounters::UncacheLine(uintptr_t line_addr) {
  LockGuard<SpinLock> g(cache_.mu);
  if (!cache_.tags) return false;
  uint64_t* ways = CacheSet(line_addr);
  const uint64_t tag = static_cast<uint64_t>(line_addr) + 1;
  for (uint32_t i = 0; i < kCacheWays && ways[i] != 0; i++) {
    if (ways[i] != tag) continue;
    std::copy(ways + i + 1, ways + kCacheWays, ways + i);
    ways[kCacheWays - 1] = 0;
    cache_.resident--;
    return true;
  }
  return false;
}

void TrafficCounters::OnFlush(const void* addr, size_t len, bool writes_back) {
  Stripe& s = MyStripe();
  const bool cached = !writes_back && cache_.sets != 0;
  {
    LockGuard<SpinLock> g(s.mu);
    s.persists++;
    if (!cached) {
      ForEachLine(addr, len, [&](uintptr_t p) {
        if (writes_back) s.flushed_lines++;
        s.media.Line(BlockOf(p));
      });
      return;
    }
  }
  ForEachLine(addr, len, [&](uintptr_t p) { CacheLine(p); });
}

void TrafficCounters::OnFence() {
  Stripe& s = MyStripe();
  LockGuard<SpinLock> g(s.mu);
  s.fences++;
}

void TrafficCounters::OnNtCopy(const void* dst, size_t len, bool writes_back) {
  Stripe& s = MyStripe();
  {
    LockGuard<SpinLock> g(s.mu);
    s.nt_bytes += len;
    ForEachLine(dst, len, [&](uintptr_t p) { s.media.Line(BlockOf(p)); });
  }
  if (!writes_back && cache_.sets != 0) ForEachLine(dst, len, [&](uintptr_t p) { UncacheLine(p); });
}

void TrafficCounters::OnWriteBack(const void* addr, size_t len) {
  // Only a line the model holds dirty is written: a clean one (evicted already, or charged at
  // once with the model off) costs nothing, as clwb of a clean line writes nothing.
  if (cache_.sets == 0) return;
  Stripe& s = MyStripe();
  ForEachLine(addr, len, [&](uintptr_t p) {
    if (!UncacheLine(p)) return;
    LockGuard<SpinLock> g(s.mu);
    s.flushed_lines++;
    s.media.Line(BlockOf(p));
  });
}

TrafficStats TrafficCounters::Snapshot() const {
  TrafficStats t;
  t.media_block_bytes = 1u << block_shift_;
  t.media_cache_bytes = cache_.sets * kCacheWays * 64;
  for (const Stripe& s : stripes_) {
    auto& m = const_cast<SpinLock&>(s.mu);
    LockGuard<SpinLock> g(m);
    t.persists += s.persists;
    t.fences += s.fences;
    t.flushed_lines += s.flushed_lines;
    t.nt_bytes += s.nt_bytes;
    t.media_writes += s.media.writes;
  }
  Cache& c = const_cast<Cache&>(cache_);
  LockGuard<SpinLock> g(c.mu);
  t.media_writes += c.evictions.writes;
  t.cached_dirty_lines = c.resident;
  return t;
}

void TrafficCounters::Reset() {
  for (Stripe& s : stripes_) {
    LockGuard<SpinLock> g(s.mu);
    s.persists = s.fences = s.flushed_lines = s.nt_bytes = 0;
    s.media = MediaStream{};
  }
  // The cache model keeps its lines: they are the machine's state, not a count. A phase is
  // charged with the evictions that happen during it.
  LockGuard<SpinLock> g(cache_.mu);
  cache_.evictions.writes = 0;
}

}  // namespace pmhash::pm
