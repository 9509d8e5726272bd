// src/pm/persist.h — durability policies: the only place where pmhash flushes or fences.
//
// An index is a template over one of four policies; the "DRAM variant" of an index is the same
// code instantiated with Dram. Every policy offers the same three static operations:
//
//   Flush(addr, len)   write back every cache line of [addr, addr+len) (no ordering implied)
//   Fence()            order: every Flush/NtCopy before it is durable before any store after it
//   NtCopy(dst,src,n)  bulk copy that bypasses the cache (segment splits, rehash); durable at
//                      the next Fence()
//
// Flush and Fence are also compiler barriers, so stores are never moved across them.
//
//   policy  | Flush                              | Fence   | NtCopy
//   --------+------------------------------------+---------+---------------------------------
//   Dram    | nothing                            | nothing | memcpy
//   Adr     | clwb, else clflushopt, else clflush | sfence  | movnt stores (memcpy+flush tail)
//   Eadr    | nothing (caches are persistent)    | sfence  | memcpy
//   Sim     | SimHook::OnFlush                   | OnFence | memcpy + SimHook::OnNtCopy
//
// The flush instruction is picked once from CPUID (FlushInstruction()). Traffic counting is not
// done here but by Persister<P> (below), which binds a policy to a pool's counters.
#pragma once

#include <emmintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "pm/counters.h"
#include "pmhash/options.h"

namespace pmhash::pm {

inline constexpr size_t kCacheLine = 64;

enum class FlushInstruction : uint8_t { kClwb, kClflushopt, kClflush };
// Chosen once (thread-safe static initialisation) from CPUID leaf 7.
FlushInstruction ActiveFlushInstruction();
const char* FlushInstructionName(FlushInstruction f);

// The crash simulator's hook. A Sim-durability pool takes the hook installed on the thread that
// opens it (SetThreadSimHook) and keeps it: every Persister bound to that pool reports its
// flushes, fences and non-temporal copies to it, from whichever thread runs them (index
// workers, concurrent readers). The bare Sim::Flush/Fence/NtCopy report to the calling thread's
// hook. Without a hook, Sim behaves like Dram. Implementations must be thread-safe.
class SimHook {
 public:
  virtual ~SimHook() = default;
  virtual void OnFlush(const void* addr, size_t len) = 0;
  virtual void OnFence() = 0;
  // Called after the bytes were copied to dst: they count as flushed (pending until OnFence).
  virtual void OnNtCopy(void* dst, size_t len) = 0;
  // Called just before a non-temporal copy writes [dst, dst+len) (a store tracer lets it through
  // untraced: non-temporal stores are snapshotted whole by OnNtCopy).
  virtual void OnNtCopyBegin(void* /*dst*/, size_t /*len*/) {}
  // A plain store has just changed [addr, addr+len) (reported by a store tracer, if any): the
  // line's new bytes are one more version a cache may evict to the media at any time.
  virtual void OnStore(const void* /*addr*/, size_t /*len*/) {}
  // A Sim-durability pool mapped / about to unmap [base, base+len). At OnMap the mapped bytes
  // are, by definition, what the media holds.
  virtual void OnMap(void* /*base*/, size_t /*len*/) {}
  virtual void OnUnmap(void* /*base*/, size_t /*len*/) {}
};

namespace detail {
inline thread_local SimHook* tls_sim_hook = nullptr;

inline void CompilerBarrier() { asm volatile("" ::: "memory"); }

inline void FlushLines(const void* addr, size_t len, FlushInstruction how) {
  uintptr_t p = reinterpret_cast<uintptr_t>(addr) & ~(kCacheLine - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + len;
  switch (how) {
    case FlushInstruction::kClwb:
      for (; p < end; p += kCacheLine)
        asm volatile("clwb %0" : "+m"(*reinterpret_cast<volatile char*>(p)));
      break;
    case FlushInstruction::kClflushopt:
      for (; p < end; p += kCacheLine)
        asm volatile("clflushopt %0" : "+m"(*reinterpret_cast<volatile char*>(p)));
      break;
    case FlushInstruction::kClflush:
      for (; p < end; p += kCacheLine)
        asm volatile("clflush %0" : "+m"(*reinterpret_cast<volatile char*>(p)));
      break;
  }
}

// Non-temporal copy: 16-byte streaming stores for the aligned middle, cached copy + flush for the
// unaligned head and tail. Durable after the next sfence.
void NtCopyAdr(void* dst, const void* src, size_t n);
}  // namespace detail

// Installs `hook` for the calling thread (nullptr removes it). Returns the previous hook.
inline SimHook* SetThreadSimHook(SimHook* hook) {
  SimHook* prev = detail::tls_sim_hook;
  detail::tls_sim_hook = hook;
  return prev;
}
inline SimHook* ThreadSimHook() { return detail::tls_sim_hook; }

struct Dram {
  static constexpr Durability kDurability = Durability::kDram;
  static constexpr bool kPersistent = false;  // nothing survives the process
  static constexpr bool kWritesBack = false;  // Flush() issues no instruction
  static constexpr bool kSimulated = false;
  // No instruction, but still compiler barriers (the contract above): code written against the
  // policy may rely on stores not being moved across a Flush or Fence.
  static void Flush(const void*, size_t) { detail::CompilerBarrier(); }
  static void Fence() { detail::CompilerBarrier(); }
  static void NtCopy(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }
};

struct Adr {
  static constexpr Durability kDurability = Durability::kAdr;
  static constexpr bool kPersistent = true;
  static constexpr bool kWritesBack = true;
  static constexpr bool kSimulated = false;
  static void Flush(const void* addr, size_t len) {
    detail::CompilerBarrier();
    static const FlushInstruction how = ActiveFlushInstruction();
    detail::FlushLines(addr, len, how);
    detail::CompilerBarrier();
  }
  static void Fence() { asm volatile("sfence" ::: "memory"); }
  static void NtCopy(void* dst, const void* src, size_t n) { detail::NtCopyAdr(dst, src, n); }
};

struct Eadr {
  static constexpr Durability kDurability = Durability::kEadr;
  static constexpr bool kPersistent = true;
  static constexpr bool kWritesBack = false;  // the platform drains caches on power failure
  static constexpr bool kSimulated = false;
  static void Flush(const void*, size_t) { detail::CompilerBarrier(); }
  static void Fence() { asm volatile("sfence" ::: "memory"); }
  static void NtCopy(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }
};

struct Sim {
  static constexpr Durability kDurability = Durability::kSim;
  static constexpr bool kPersistent = true;
  static constexpr bool kWritesBack = true;
  static constexpr bool kSimulated = true;  // Persister routes to the pool's hook (FlushTo...)
  static void FlushTo(SimHook* h, const void* addr, size_t len) {
    detail::CompilerBarrier();
    if (h) h->OnFlush(addr, len);
    detail::CompilerBarrier();
  }
  static void FenceTo(SimHook* h) {
    detail::CompilerBarrier();
    if (h) h->OnFence();
    detail::CompilerBarrier();
  }
  static void NtCopyTo(SimHook* h, void* dst, const void* src, size_t n) {
    if (h) h->OnNtCopyBegin(dst, n);
    std::memcpy(dst, src, n);
    if (h) h->OnNtCopy(dst, n);
  }
  static void Flush(const void* addr, size_t len) { FlushTo(detail::tls_sim_hook, addr, len); }
  static void Fence() { FenceTo(detail::tls_sim_hook); }
  static void NtCopy(void* dst, const void* src, size_t n) {
    NtCopyTo(detail::tls_sim_hook, dst, src, n);
  }
};

template <class P>
concept PersistPolicy = requires(const void* cp, void* p, size_t n) {
  { P::kDurability } -> std::convertible_to<Durability>;
  { P::kPersistent } -> std::convertible_to<bool>;
  { P::kSimulated } -> std::convertible_to<bool>;
  P::Flush(cp, n);
  P::Fence();
  P::NtCopy(p, cp, n);
};

// What a Persister binds to: a pool's traffic counters and, for a Sim pool, the simulator hook
// the pool was opened under (reachable from every thread that persists through the pool).
struct PersistTarget {
  TrafficCounters* counters = nullptr;
  SimHook* sim_hook = nullptr;
};

// Binds a policy to a pool's traffic counters (and simulator hook). Indexes hold one and call it
// for every persist. With counters disabled the extra cost is one well-predicted branch; for
// Dram, none at all.
template <PersistPolicy P>
class Persister {
 public:
  explicit Persister(PersistTarget target) : counters_(target.counters), hook_(target.sim_hook) {}
  // Counters only: a Sim persister then reports to the constructing thread's hook.
  explicit Persister(TrafficCounters* counters)
      : Persister(PersistTarget{counters, P::kSimulated ? ThreadSimHook() : nullptr}) {}

  void Flush(const void* addr, size_t len) const {
    if constexpr (P::kSimulated) {
      P::FlushTo(hook_, addr, len);
    } else {
      P::Flush(addr, len);
    }
    if constexpr (P::kPersistent) {
      if (counters_->enabled()) counters_->OnFlush(addr, len, P::kWritesBack);
    }
  }
  void Fence() const {
    if constexpr (P::kSimulated) {
      P::FenceTo(hook_);
    } else {
      P::Fence();
    }
    if constexpr (P::kPersistent) {
      if (counters_->enabled()) counters_->OnFence();
    }
  }
  // Flush + Fence: the range is durable when this returns.
  void Persist(const void* addr, size_t len) const {
    Flush(addr, len);
    Fence();
  }
  void NtCopy(void* dst, const void* src, size_t n) const {
    if constexpr (P::kSimulated) {
      P::NtCopyTo(hook_, dst, src, n);
    } else {
      P::NtCopy(dst, src, n);
    }
    if constexpr (P::kPersistent) {
      if (counters_->enabled()) counters_->OnNtCopy(dst, n, P::kWritesBack);
    }
  }
  // A hint under eADR, where durability never needs a write-back: write the lines back now, so
  // that a block written in full (ElimDA's sealed log block) reaches the media as one block
  // instead of lines the cache evicts at unrelated times. Orders nothing and issues no fence.
  // Every other policy: nothing (ADR flushed the lines when they were written; Dram has no
  // media; Sim is ADR).
  void WriteBack(const void* addr, size_t len) const {
    if constexpr (P::kPersistent && !P::kWritesBack) {
      Adr::Flush(addr, len);  // the same instructions, issued here as a hint
      if (counters_->enabled()) counters_->OnWriteBack(addr, len);
    }
  }
  TrafficCounters* counters() const { return counters_; }

 private:
  TrafficCounters* counters_;
  SimHook* hook_;
};

// Runs `fn(policy)` with a value of the policy type matching `d` (for non-templated callers such
// as the pool header code, which persists rarely).
template <class Fn>
decltype(auto) WithPolicy(Durability d, Fn&& fn) {
  switch (d) {
    case Durability::kAdr:
      return fn(Adr{});
    case Durability::kEadr:
      return fn(Eadr{});
    case Durability::kSim:
      return fn(Sim{});
    case Durability::kDram:
      break;
  }
  return fn(Dram{});
}

}  // namespace pmhash::pm
