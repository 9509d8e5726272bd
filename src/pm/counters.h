// src/pm/counters.h — persistence traffic counters and a media write-combining model.
//
// Compiled into every build, off by default: Persister<P> checks enabled() (one relaxed load)
// before calling in here. When on, each thread counts into one of kStripes cache-line-sized
// stripes, chosen from the address of a thread_local, so threads rarely share a stripe.
//
// Media model. Optane (and CXL memory) writes the media in blocks (256 B XPLines on Optane; 64 B
// is a reasonable CXL setting). The DIMM merges adjacent line write-backs that fall in a block it
// still buffers. We model that buffer per stripe as a FIFO of the last kWcEntries block ids: a
// written-back line whose block is in the FIFO is merged, otherwise it costs one media write and
// enters the FIFO. Non-temporal bytes go through the same model, a line at a time. This makes
// write amplification (media bytes / payload bytes) comparable across indexes without PM.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/locks.h"
#include "pmhash/stats.h"

namespace pmhash::pm {

class TrafficCounters {
 public:
  static constexpr uint32_t kStripes = 16;
  static constexpr int kWcEntries = 8;

  explicit TrafficCounters(uint32_t media_block_bytes = 256);

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }

  // A persist request over [addr, addr+len). `writes_back`: the policy really writes lines back
  // (Adr, Sim); under eADR the lines are counted for the media model but not as flushed.
  void OnFlush(const void* addr, size_t len, bool writes_back);
  void OnFence();
  void OnNtCopy(const void* dst, size_t len);

  TrafficStats Snapshot() const;
  void Reset();

 private:
  struct alignas(64) Stripe {
    SpinLock mu;
    uint64_t persists = 0;
    uint64_t fences = 0;
    uint64_t flushed_lines = 0;
    uint64_t nt_bytes = 0;
    uint64_t media_writes = 0;
    std::array<uint64_t, kWcEntries> wc{};  // block id + 1 (0 = empty)
    uint32_t wc_next = 0;
  };
  Stripe& MyStripe();
  void MediaLine(Stripe& s, uintptr_t line_addr);

  std::atomic<bool> enabled_{false};
  uint32_t block_shift_;
  std::array<Stripe, kStripes> stripes_;
};

}  // namespace pmhash::pm
