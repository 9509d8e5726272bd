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
// Each acquisition makes one attempt inline and waits in a separate, never-inlined function:
// the wait's yield (a call into libstdc++) in the inline body made GCC stop inlining the lock
// calls into the engines' hot paths, and REH lost 12-25% of its insert and find speed at 10M
// keys (docs/results.md, "The lock waits out of line"). The few instructions of each fast path
// are always inlined: GCC had also left VersionLock::Unlock out of line in 163 places.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "common/attributes.h"
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
  PMHASH_ALWAYS_INLINE void lock() PMHASH_ACQUIRE() {
    if (!flag_.exchange(true, std::memory_order_acquire)) [[likely]] return;
    LockSlow();
  }
  bool try_lock() PMHASH_TRY_ACQUIRE(true) {
    return !flag_.load(std::memory_order_relaxed) &&
           !flag_.exchange(true, std::memory_order_acquire);
  }
  PMHASH_ALWAYS_INLINE void unlock() PMHASH_RELEASE() {
    flag_.store(false, std::memory_order_release);
  }

 private:
  [[gnu::noinline]] void LockSlow() {
    Backoff b;
    do {
      while (flag_.load(std::memory_order_relaxed)) b.Pause();
    } while (flag_.exchange(true, std::memory_order_acquire));
  }

  std::atomic<bool> flag_{false};
};

class PMHASH_CAPABILITY("shared mutex") RwSpinLock {
 public:
  PMHASH_ALWAYS_INLINE void lock() PMHASH_ACQUIRE() {
    // Announce the writer first so new readers back off, then wait for readers to drain.
    uint32_t s = 0;
    if (!state_.compare_exchange_strong(s, kWriter, std::memory_order_acquire)) [[unlikely]] {
      LockSlow();
    }
  }
  // A plain store, not an RMW: while a writer holds the lock the word is exactly kWriter (readers
  // and other writers change it only by a CAS from a word without kWriter, and lock() returned
  // once the readers' count had drained). A locked RMW here would wait for the write-backs of a
  // persist just before it (docs/results.md, "Batched writes").
  PMHASH_ALWAYS_INLINE void unlock() PMHASH_RELEASE() {
    state_.store(0, std::memory_order_release);
  }
  PMHASH_ALWAYS_INLINE void lock_shared() PMHASH_ACQUIRE_SHARED() {
    uint32_t s = state_.load(std::memory_order_relaxed);
    if ((s & kWriter) == 0 && state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire))
        [[likely]] {
      return;
    }
    LockSharedSlow();
  }
  PMHASH_ALWAYS_INLINE void unlock_shared() PMHASH_RELEASE_SHARED() {
    state_.fetch_sub(1, std::memory_order_release);
  }

 private:
  [[gnu::noinline]] void LockSlow() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
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
  [[gnu::noinline]] void LockSharedSlow() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
    Backoff b;
    for (;;) {
      b.Pause();
      uint32_t s = state_.load(std::memory_order_relaxed);
      if ((s & kWriter) == 0 && state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire)) {
        return;
      }
    }
  }

  static constexpr uint32_t kWriter = 1u << 31;
  std::atomic<uint32_t> state_{0};
};

class VersionLock {
 public:
  static constexpr uint32_t kLocked = 1;

  PMHASH_ALWAYS_INLINE void Lock() {
    uint32_t v = word_.load(std::memory_order_relaxed);
    if ((v & kLocked) == 0 &&
        word_.compare_exchange_weak(v, v | kLocked, std::memory_order_acquire)) [[likely]] {
      // Seqlock writer: the data stores that follow must not become visible before the locked
      // word, or a reader could see new data and still validate its old version.
      std::atomic_thread_fence(std::memory_order_release);
      return;
    }
    LockSlow();
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
  PMHASH_ALWAYS_INLINE void Unlock() {
    uint32_t v = word_.load(std::memory_order_relaxed);
    word_.store((v & ~kLocked) + 2, std::memory_order_release);
  }
  // Releases without a version change: nothing was modified under the lock.
  PMHASH_ALWAYS_INLINE void UnlockUnchanged() {
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
  PMHASH_ALWAYS_INLINE uint32_t Snapshot() const { return word_.load(std::memory_order_acquire); }
  static bool IsLockedVersion(uint32_t v) { return v & kLocked; }

  // Optimistic read: spin until unlocked, return the version to validate against.
  PMHASH_ALWAYS_INLINE uint32_t BeginRead() const {
    const uint32_t v = word_.load(std::memory_order_acquire);
    if ((v & kLocked) == 0) [[likely]] return v;
    return BeginReadSlow();
  }
  // True if no writer locked the word since BeginRead returned `v`. The acquire fence orders the
  // (relaxed) data loads of the read section before the re-check.
  PMHASH_ALWAYS_INLINE bool Validate(uint32_t v) const {
    std::atomic_thread_fence(std::memory_order_acquire);
    return word_.load(std::memory_order_relaxed) == v;
  }

 private:
  [[gnu::noinline]] void LockSlow() {
    Backoff b;
    for (;;) {
      b.Pause();
      uint32_t v = word_.load(std::memory_order_relaxed);
      if ((v & kLocked) == 0 &&
          word_.compare_exchange_weak(v, v | kLocked, std::memory_order_acquire)) {
        std::atomic_thread_fence(std::memory_order_release);  // as in Lock()
        return;
      }
    }
  }
  [[gnu::noinline]] uint32_t BeginReadSlow() const {
    Backoff b;
    for (;;) {
      b.Pause();
      const uint32_t v = word_.load(std::memory_order_acquire);
      if ((v & kLocked) == 0) return v;
    }
  }

  std::atomic<uint32_t> word_{0};
};
static_assert(sizeof(VersionLock) == 4, "the paper's 32-bit lock");

// RAII guards (std::lock_guard and std::shared_lock do not carry the clang annotations for our
// types): exclusive, and shared (L::lock_shared / L::unlock_shared).
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

template <class L>
class PMHASH_SCOPED_CAPABILITY SharedLockGuard {
 public:
  explicit SharedLockGuard(L& l) PMHASH_ACQUIRE_SHARED(l) : l_(l) { l_.lock_shared(); }
  ~SharedLockGuard() PMHASH_RELEASE() { l_.unlock_shared(); }
  SharedLockGuard(const SharedLockGuard&) = delete;
  SharedLockGuard& operator=(const SharedLockGuard&) = delete;

 private:
  L& l_;
};

}  // namespace pmhash
