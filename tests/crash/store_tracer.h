// tests/crash/store_tracer.h — reports every plain store into a simulated pool to the crash
// simulator, so that the order of stores inside one cache line is tested.
//
// The Sim policy sees flushes, fences and non-temporal copies, but not the stores between them:
// two stores to one line covered by a single flush look the same whichever comes first, yet a
// cache may evict the line between them. The tracer closes that gap without touching index
// code. It is a SimHook that forwards everything to a CrashSimulator and, while a pool is
// mapped, keeps the mapping read-only:
//
//   store to the pool  -> SIGSEGV: make that page writable, set the trap flag (EFLAGS.TF)
//   the store retires  -> SIGTRAP: report the line(s) to CrashSimulator::OnStore, make the page
//                         read-only again, clear the trap flag
//
// OnStore records the line's new bytes as one more version that may reach the media (ADR), or
// is a crash point (eADR: a crash right after this store). Non-temporal copies (OnNtCopyBegin
// .. OnNtCopy) run with their pages writable and are snapshotted whole, as before.
//
// Limits (test infrastructure, x86-64 Linux only): one tracer at a time per process (the signal
// handlers are process-wide), and only the thread that maps the pool may store into it while it
// is traced (a page made writable for one thread's store is writable for all until the trap).
// Faults outside the traced range go to the handler that was installed before.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pm/crash_sim.h"

namespace pmhash::crashtest {

class StoreTracer final : public pm::SimHook {
 public:
  explicit StoreTracer(pm::CrashSimulator* sim);
  ~StoreTracer() override;
  StoreTracer(const StoreTracer&) = delete;
  StoreTracer& operator=(const StoreTracer&) = delete;

  // Stores reported so far.
  uint64_t stores() const { return stores_; }

  // SimHook: forwarded to the simulator; OnMap/OnUnmap also start/stop tracing the range.
  void OnMap(void* base, size_t len) override;
  void OnUnmap(void* base, size_t len) override;
  void OnFlush(const void* addr, size_t len) override { sim_->OnFlush(addr, len); }
  void OnFence() override { sim_->OnFence(); }
  void OnNtCopyBegin(void* dst, size_t len) override;
  void OnNtCopy(void* dst, size_t len) override;

  // Called from the signal handlers.
  bool Contains(const void* p) const;
  void Stored(const void* addr);
  void Protect(void* page, bool writable) const;

 private:
  void Protect(void* addr, size_t len, bool writable) const;

  pm::CrashSimulator* sim_;
  char* base_ = nullptr;
  size_t len_ = 0;
  uint64_t stores_ = 0;
};

}  // namespace pmhash::crashtest
