// src/common/striped_counter.h — a contention-free signed counter (index sizes).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "common/thread_stripe.h"

namespace pmhash {

class StripedCounter {
 public:
  static constexpr uint32_t kStripes = 32;
  void Add(int64_t d) { Mine().fetch_add(d, std::memory_order_relaxed); }
  int64_t Sum() const {
    int64_t s = 0;
    for (const auto& c : cells_) s += c.v.load(std::memory_order_relaxed);
    return s;
  }
  void Reset(int64_t value = 0) {
    for (auto& c : cells_) c.v.store(0, std::memory_order_relaxed);
    cells_[0].v.store(value, std::memory_order_relaxed);
  }

 private:
  struct alignas(64) Cell {
    std::atomic<int64_t> v{0};
  };
  std::atomic<int64_t>& Mine() { return cells_[ThreadStripe<kStripes>()].v; }
  std::array<Cell, kStripes> cells_;
};

}  // namespace pmhash
