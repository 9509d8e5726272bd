// src/common/epoch.h — epoch-based deferred reclamation (for readers that take no lock).
//
// A reader brackets its access with an EpochGuard; a writer that unlinks an object Retire()s it
// with a deleter; the object is destroyed only once every reader that might still see it has left.
//
// Scheme: a global epoch E and kSlots reader slots (cache-line padded, chosen from the thread's
// identity so unrelated threads rarely share one). Each slot holds two counters, one per epoch
// parity. Entering increments counter[E & 1] of the thread's slot (and re-checks E, retrying if
// it moved, so a reader is never counted under a stale parity without noticing); leaving
// decrements the same counter. Retire() queues under the current epoch. Reclaim() flips E to E+1
// only when no reader remains in parity (E+1)&1 (those are readers of E-1); then everything
// retired at E-1 or before is unreachable by any reader and is freed.
//
// No thread registration is needed (the library cannot know its callers' threads), nothing is
// global: each index owns its EpochManager.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/locks.h"

namespace pmhash {

class EpochManager {
 public:
  static constexpr uint32_t kSlots = 64;

  EpochManager() = default;
  ~EpochManager();  // frees everything still retired
  EpochManager(const EpochManager&) = delete;
  EpochManager& operator=(const EpochManager&) = delete;

  class Guard {
   public:
    explicit Guard(EpochManager& m) : m_(m) { m_.Enter(&slot_, &parity_); }
    ~Guard() { m_.Leave(slot_, parity_); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    EpochManager& m_;
    uint32_t slot_ = 0;
    uint32_t parity_ = 0;
  };

  // Defers fn() until no reader that entered before this call remains. Thread-safe.
  void Retire(std::function<void()> fn) PMHASH_EXCLUDES(mu_);
  // The same for fn(ctx, a, b), kept without allocating: the form for frees that happen on
  // every operation (a record or a chunk per erase), where a capturing closure would not fit
  // std::function's small buffer.
  using FreeFn = void (*)(void* ctx, uint64_t a, uint64_t b);
  void Retire(FreeFn fn, void* ctx, uint64_t a, uint64_t b) PMHASH_EXCLUDES(mu_);
  // Retire() tries to reclaim once this many objects wait (default 64; tests use 1 so that
  // freed space is reused at once and the paths that reuse it are exercised).
  void set_reclaim_batch(size_t n) { batch_.store(n == 0 ? 1 : n, std::memory_order_relaxed); }
  // Advances the epoch if possible and runs deleters that became safe. Returns how many ran.
  // Called by Retire() opportunistically; may be called by anyone.
  size_t Reclaim() PMHASH_EXCLUDES(mu_);
  // Blocks until everything retired so far has been freed (readers must eventually leave).
  void Drain() PMHASH_EXCLUDES(mu_);
  // Blocks until every reader that entered before this call has left (a grace period), however
  // much others retire meanwhile. REQUIRES: the caller holds no Guard.
  void Synchronize() PMHASH_EXCLUDES(mu_);

  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  size_t pending() const PMHASH_EXCLUDES(mu_);

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> active[2] = {0, 0};
  };
  struct Retired {
    uint64_t epoch = 0;
    FreeFn free_fn = nullptr;  // if set: free_fn(ctx, a, b), else fn()
    void* ctx = nullptr;
    uint64_t a = 0, b = 0;
    std::function<void()> fn;
    void Run() {
      if (free_fn) {
        free_fn(ctx, a, b);
      } else {
        fn();
      }
    }
  };
  void Push(Retired r) PMHASH_EXCLUDES(mu_);

  void Enter(uint32_t* slot, uint32_t* parity);
  void Leave(uint32_t slot, uint32_t parity) {
    slots_[slot].active[parity].fetch_sub(1, std::memory_order_release);
  }
  static uint32_t MySlot();

  std::atomic<uint64_t> epoch_{2};
  std::array<Slot, kSlots> slots_;
  mutable SpinLock mu_;
  std::vector<Retired> retired_ PMHASH_GUARDED_BY(mu_);
  std::atomic<size_t> batch_{64};
};

}  // namespace pmhash
