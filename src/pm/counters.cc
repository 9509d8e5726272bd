#include "pm/counters.h"

#include <bit>

#include "common/thread_stripe.h"

namespace pmhash::pm {

TrafficCounters::TrafficCounters(uint32_t media_block_bytes) {
  if (media_block_bytes < 64 || !std::has_single_bit(media_block_bytes)) media_block_bytes = 256;
  block_shift_ = static_cast<uint32_t>(std::countr_zero(media_block_bytes));
}

TrafficCounters::Stripe& TrafficCounters::MyStripe() { return stripes_[ThreadStripe<kStripes>()]; }

void TrafficCounters::MediaLine(Stripe& s, uintptr_t line_addr) {
  const uint64_t block = (line_addr >> block_shift_) + 1;
  for (uint64_t b : s.wc) {
    if (b == block) return;  // merged in the write-combining buffer
  }
  s.media_writes++;
  s.wc[s.wc_next] = block;
  s.wc_next = (s.wc_next + 1) % kWcEntries;
}

void TrafficCounters::OnFlush(const void* addr, size_t len, bool writes_back) {
  Stripe& s = MyStripe();
  LockGuard<SpinLock> g(s.mu);
  s.persists++;
  uintptr_t p = reinterpret_cast<uintptr_t>(addr) & ~uintptr_t{63};
  const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + len;
  for (; p < end; p += 64) {
    if (writes_back) s.flushed_lines++;
    MediaLine(s, p);
  }
}

void TrafficCounters::OnFence() {
  Stripe& s = MyStripe();
  LockGuard<SpinLock> g(s.mu);
  s.fences++;
}

void TrafficCounters::OnNtCopy(const void* dst, size_t len) {
  Stripe& s = MyStripe();
  LockGuard<SpinLock> g(s.mu);
  s.nt_bytes += len;
  uintptr_t p = reinterpret_cast<uintptr_t>(dst) & ~uintptr_t{63};
  const uintptr_t end = reinterpret_cast<uintptr_t>(dst) + len;
  for (; p < end; p += 64) MediaLine(s, p);
}

TrafficStats TrafficCounters::Snapshot() const {
  TrafficStats t;
  t.media_block_bytes = 1u << block_shift_;
  for (const Stripe& s : stripes_) {
    auto& m = const_cast<SpinLock&>(s.mu);
    LockGuard<SpinLock> g(m);
    t.persists += s.persists;
    t.fences += s.fences;
    t.flushed_lines += s.flushed_lines;
    t.nt_bytes += s.nt_bytes;
    t.media_writes += s.media_writes;
  }
  return t;
}

void TrafficCounters::Reset() {
  for (Stripe& s : stripes_) {
    LockGuard<SpinLock> g(s.mu);
    s.persists = s.fences = s.flushed_lines = s.nt_bytes = s.media_writes = 0;
    s.wc.fill(0);
    s.wc_next = 0;
  }
}

}  // namespace pmhash::pm
