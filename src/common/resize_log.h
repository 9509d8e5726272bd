// common/resize_log.h — durations of an index's structural resize events (splits, rehashes,
// doublings), for IndexStats::resize_ns.
//
// Record() is called by the thread that finished the event, outside the hot path (an event costs
// microseconds; the log adds one uncontended lock). The log keeps the first kCap durations; the
// event count lives in the index's own counters.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "common/locks.h"

namespace pmhash {

class ResizeLog {
 public:
  static constexpr size_t kCap = size_t{1} << 20;

  using Clock = std::chrono::steady_clock;
  static Clock::time_point Now() { return Clock::now(); }

  void Record(Clock::time_point start) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Now() - start).count();
    LockGuard<SpinLock> g(mu_);
    if (ns_.size() < kCap) ns_.push_back(static_cast<uint64_t>(ns));
  }

  std::vector<uint64_t> Snapshot() const {
    LockGuard<SpinLock> g(mu_);
    return ns_;
  }

  void Clear() {
    LockGuard<SpinLock> g(mu_);
    ns_.clear();
  }

 private:
  mutable SpinLock mu_;
  std::vector<uint64_t> ns_ PMHASH_GUARDED_BY(mu_);
};

}  // namespace pmhash
