// src/common/thread_stripe.h — which of 2^bits stripes the calling thread uses.
//
// Striped structures (size counters, traffic counters, epoch reader slots) spread threads over
// cache-line-padded cells without registering threads: the stripe is a hash of the address of a
// thread_local, which differs per thread and is stable for the thread's life. Two threads may
// share a stripe, so stripes must still be safe for concurrent use (atomics or a lock).
#pragma once

#include <bit>
#include <cstdint>

namespace pmhash {

// The calling thread's stripe in [0, kStripes).
template <uint32_t kStripes>
inline uint32_t ThreadStripe() {
  static_assert(kStripes >= 2 && std::has_single_bit(kStripes), "a power of two");
  static thread_local char marker;
  const uint64_t a = reinterpret_cast<uintptr_t>(&marker) >> 12;
  return static_cast<uint32_t>((a * 0x9E3779B97F4A7C15ULL) >> (64 - std::countr_zero(kStripes)));
}

}  // namespace pmhash
