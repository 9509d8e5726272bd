#include "common/epoch.h"

#include <thread>

#include "common/thread_stripe.h"

namespace pmhash {

EpochManager::~EpochManager() {
  std::vector<Retired> left;
  {
    LockGuard<SpinLock> g(mu_);
    left.swap(retired_);
  }
  for (auto& r : left) r.Run();
}

uint32_t EpochManager::MySlot() { return ThreadStripe<kSlots>(); }

void EpochManager::Enter(uint32_t* slot, uint32_t* parity) {
  const uint32_t s = MySlot();
  for (;;) {
    const uint64_t e = epoch_.load(std::memory_order_acquire);
    const uint32_t p = static_cast<uint32_t>(e & 1);
    // seq_cst RMW: the increment is visible before our reads of shared data.
    slots_[s].active[p].fetch_add(1, std::memory_order_seq_cst);
    if (epoch_.load(std::memory_order_seq_cst) == e) {
      *slot = s;
      *parity = p;
      return;
    }
    slots_[s].active[p].fetch_sub(1, std::memory_order_release);
  }
}

void EpochManager::Retire(std::function<void()> fn) {
  Retired r;
  r.fn = std::move(fn);
  Push(std::move(r));
}

void EpochManager::Retire(FreeFn fn, void* ctx, uint64_t a, uint64_t b) {
  Retired r;
  r.free_fn = fn;
  r.ctx = ctx;
  r.a = a;
  r.b = b;
  Push(std::move(r));
}

void EpochManager::Push(Retired r) {
  // The caller unlinked the object before this call. The fence orders that store before the
  // epoch read below (store -> load needs seq_cst; it pairs with Enter's seq_cst increment and
  // re-check): a reader that Enter()s after we read epoch e cannot still find the object, and
  // one that entered before is counted under e or e-1. Not left to the spin lock's xchg.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  {
    LockGuard<SpinLock> g(mu_);
    r.epoch = epoch_.load(std::memory_order_seq_cst);
    retired_.push_back(std::move(r));
    if (retired_.size() < batch_.load(std::memory_order_relaxed)) return;
  }
  Reclaim();
}

size_t EpochManager::Reclaim() {
  std::vector<Retired> ready;
  {
    LockGuard<SpinLock> g(mu_);
    const uint64_t e = epoch_.load(std::memory_order_acquire);
    // Readers of epoch e-1 count in parity (e+1)&1; wait for none before advancing.
    const uint32_t old_parity = static_cast<uint32_t>((e + 1) & 1);
    bool quiet = true;
    for (const Slot& s : slots_) {
      if (s.active[old_parity].load(std::memory_order_seq_cst) != 0) {
        quiet = false;
        break;
      }
    }
    if (quiet) epoch_.store(e + 1, std::memory_order_seq_cst);
    const uint64_t now = epoch_.load(std::memory_order_relaxed);
    // Objects retired at epoch r are safe once the epoch reached r + 2.
    auto keep = retired_.begin();
    for (auto it = retired_.begin(); it != retired_.end(); ++it) {
      if (it->epoch + 2 <= now) {
        ready.push_back(std::move(*it));
      } else {
        *keep++ = std::move(*it);
      }
    }
    retired_.erase(keep, retired_.end());
  }
  for (auto& r : ready) r.Run();
  return ready.size();
}

void EpochManager::Drain() {
  while (pending() != 0) {
    if (Reclaim() == 0) std::this_thread::yield();
  }
}

void EpochManager::Synchronize() {
  std::atomic<bool> passed{false};
  Retire([&passed] { passed.store(true, std::memory_order_release); });
  while (!passed.load(std::memory_order_acquire)) {
    if (Reclaim() == 0) std::this_thread::yield();
  }
}

size_t EpochManager::pending() const {
  LockGuard<SpinLock> g(mu_);
  return retired_.size();
}

}  // namespace pmhash
