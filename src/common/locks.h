// src/common/locks.h — the small locks every index shares.
//
//   SpinLock      test-and-test-and-set byte lock; for short critical sections (allocator,
//                 counters stripes, per-shard writers).
//   RwSpinLock    reader-writer spin lock, writer-preferring; REH's directory lock.
//   VersionLock   32-bit optimistic lock (Dash/REH section III-F): bit 0 = locked, bits 1..31 =
//                 version. Writers lock/unlock (unlock bumps the version); readers take a
//                 snapshot, read without writing anything, and validate that the word is unchanged.
//
// None of them allocate or touch persistent memory: locks live in DRAM, so a crash can never
// leave one held. Their waits spin with Backoff (a pause per step, a yield every 128 steps).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "common/thread_annotations.h"

namespace pmhash {

inline void CpuRelax() { __builtin_ia32_pause(); }

// One step of a spin-wait: a pause, and every 128th step a yield of the CPU, so that a waiter
// does not burn the time slice of a holder that was preempted (more runnable threads than CPUs:
// a 2-vCPU machine running two workers and a background task).
class Backoff {
 public:
  void Pause() {
    if ((++n_ & 127) == 0) {
      std::this_thread::yield();
    } else {
      CpuRelax();
    }
  }

 private:
  uint32_t n_ = 0;
};

class PMHASH_CAPABILITY("mutex") SpinLock {
 public:
  void lock() PMHASH_ACQUIRE() {
    Backoff b;
    while (flag_.exchange(true, std::memory_order_acquire)) {
      while (flag_.load(std::memory_order_relaxed)) b.Pause();
    }
  }
  bool try_lock() PMHASH_TRY_ACQUIRE(true) {
    return !flag_.load(std::memory_order_relaxed) &&
           !flag_.exchange(true, std::memory_order_acquire);
  }
  void unlock() PMHASH_RELEASE() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

class PMHASH_CAPABILITY("shared mutex") RwSpinLock {
 public:
  void lock() PMHASH_ACQUIRE() {
    // Announce the writer first so new readers back off, then wait for readers to drain.
    Backoff b;
    uint32_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      if ((s & kWriter) == 0 &&
          state_.compare_exchange_weak(s, s | kWriter, std::memory_order_acquire)) {
        break;
      }
      b.Pause();
      s = state_.load(std::memory_order_relaxed);
    }
    while ((state_.load(std::memory_order_acquire) & ~kWriter) != 0) b.Pause();
  }
  void unlock() PMHASH_RELEASE() { state_.fetch_and(~kWriter, std::memory_order_release); }
  void lock_shared() PMHASH_ACQUIRE_SHARED() {
    Backoff b;
    for (;;) {
      uint32_t s = state_.load(std::memory_order_relaxed);
      if ((s & kWriter) == 0 && state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire)) {
        return;
      }
      b.Pause();
    }
  }
  void unlock_shared() PMHASH_RELEASE_SHARED() { state_.fetch_sub(1, std::memory_order_release); }

 private:
  static constexpr uint32_t kWriter = 1u << 31;
  std::atomic<uint32_t> state_{0};
};

class VersionLock {
 public:
  static constexpr uint32_t kLocked = 1;

  void Lock() {
    Backoff b;
    for (;;) {
      uint32_t v = word_.load(std::memory_order_relaxed);
      if ((v & kLocked) == 0 &&
          word_.compare_exchange_weak(v, v | kLocked, std::memory_order_acquire)) {
        // Seqlock writer: the data stores that follow must not become visible before the locked
        // word, or a reader could see new data and still validate its old version.
        std::atomic_thread_fence(std::memory_order_release);
        return;
      }
      b.Pause();
    }
  }
  bool TryLock() {
    uint32_t v = word_.load(std::memory_order_relaxed);
    if ((v & kLocked) != 0 ||
        !word_.compare_exchange_strong(v, v | kLocked, std::memory_order_acquire)) {
      return false;
    }
    std::atomic_thread_fence(std::memory_order_release);  // as in Lock()
    return true;
  }
  // Releases and bumps the version in one store (readers that overlapped will retry).
  void Unlock() {
    uint32_t v = word_.load(std::memory_order_relaxed);
    word_.store((v & ~kLocked) + 2, std::memory_order_release);
  }
  // Releases without a version change: nothing was modified under the lock.
  void UnlockUnchanged() {
    word_.store(word_.load(std::memory_order_relaxed) & ~kLocked, std::memory_order_release);
  }
  // Sets the lock bit without waiting. REQUIRES: no other thread holds or takes the lock (a
  // structure not yet published, or one no longer reachable).
  void MarkLocked() {
    word_.fetch_or(kLocked, std::memory_order_acquire);
    std::atomic_thread_fence(std::memory_order_release);  // as in Lock()
  }
  bool IsLocked() const { return word_.load(std::memory_order_relaxed) & kLocked; }

  // Optimistic read without waiting: the version to validate against, or a locked one
  // (IsLockedVersion) that the caller handles itself (retries from further up, say).
  uint32_t Snapshot() const { return word_.load(std::memory_order_acquire); }
  static bool IsLockedVersion(uint32_t v) { return v & kLocked; }

  // Optimistic read: spin until unlocked, return the version to validate against.
  uint32_t BeginRead() const {
    Backoff b;
    for (;;) {
      uint32_t v = word_.load(std::memory_order_acquire);
      if ((v & kLocked) == 0) return v;
      b.Pause();
    }
  }
  // True if no writer locked the word since BeginRead returned `v`. The acquire fence orders the
  // (relaxed) data loads of the read section before the re-check.
  bool Validate(uint32_t v) const {
    std::atomic_thread_fence(std::memory_order_acquire);
    return word_.load(std::memory_order_relaxed) == v;
  }

 private:
  std::atomic<uint32_t> word_{0};
};
static_assert(sizeof(VersionLock) == 4, "the paper's 32-bit lock");

// RAII guards (std::lock_guard does not carry the clang annotations for our types).
template <class L>
class PMHASH_SCOPED_CAPABILITY LockGuard {
 public:
  explicit LockGuard(L& l) PMHASH_ACQUIRE(l) : l_(l) { l_.lock(); }
  ~LockGuard() PMHASH_RELEASE() { l_.unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  L& l_;
};

}  // namespace pmhash
