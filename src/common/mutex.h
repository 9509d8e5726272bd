// src/common/mutex.h — a blocking mutex and condition variable that carry clang's thread-safety
// annotations (libstdc++'s std::mutex has none, so PMHASH_GUARDED_BY(a std::mutex) is not checked).
//
// For slow paths where a thread may sleep: background work queues (pm/background.h), waiting for
// idleness. Hot paths keep the spin locks of common/locks.h. Like them, these live in DRAM only.
#pragma once

#include <condition_variable>
#include <mutex>

#include "common/thread_annotations.h"

namespace pmhash {

class PMHASH_CAPABILITY("mutex") Mutex {
 public:
  void lock() PMHASH_ACQUIRE() { m_.lock(); }
  bool try_lock() PMHASH_TRY_ACQUIRE(true) { return m_.try_lock(); }
  void unlock() PMHASH_RELEASE() { m_.unlock(); }

 private:
  friend class CondVar;
  std::mutex m_;
};

// Waits release `mu` while asleep and hold it again when they return (spurious wake-ups
// included: callers wait in a loop on their condition).
class CondVar {
 public:
  void Wait(Mutex& mu) PMHASH_REQUIRES(mu) {
    std::unique_lock<std::mutex> lk(mu.m_, std::adopt_lock);
    cv_.wait(lk);
    lk.release();  // still held: ownership stays with the caller
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace pmhash
