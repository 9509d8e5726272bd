#include "crash/store_tracer.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace pmhash::crashtest {
namespace {

constexpr uint64_t kTrapFlag = 0x100;  // EFLAGS.TF: trap after the next instruction
constexpr size_t kLine = 64;

std::atomic<StoreTracer*> g_tracer{nullptr};
struct sigaction g_old_segv {};
struct sigaction g_old_trap {};

// Pages made writable for the store being single-stepped on this thread (a store that crosses
// a page boundary faults twice before it retires).
struct InFlight {
  void* pages[4];
  const void* addrs[4];
  int n = 0;
};
thread_local InFlight tl_in_flight;

uintptr_t PageSize() {
  static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

void Chain(const struct sigaction& old, int sig, siginfo_t* si, void* ctx) {
  if (old.sa_flags & SA_SIGINFO) {
    if (old.sa_sigaction) old.sa_sigaction(sig, si, ctx);
    return;
  }
  if (old.sa_handler == SIG_IGN) return;
  if (old.sa_handler == SIG_DFL) {
    // Re-executing the faulting instruction now takes the default action.
    signal(sig, SIG_DFL);
    return;
  }
  old.sa_handler(sig);
}

void OnSegv(int sig, siginfo_t* si, void* ctx) {
  StoreTracer* t = g_tracer.load(std::memory_order_acquire);
  InFlight& f = tl_in_flight;
  if (t == nullptr || si->si_code != SEGV_ACCERR || !t->Contains(si->si_addr) || f.n == 4) {
    Chain(g_old_segv, sig, si, ctx);
    return;
  }
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(si->si_addr) &
                                       ~(PageSize() - 1));
  t->Protect(page, /*writable=*/true);
  f.pages[f.n] = page;
  f.addrs[f.n] = si->si_addr;
  f.n++;
  static_cast<ucontext_t*>(ctx)->uc_mcontext.gregs[REG_EFL] |= kTrapFlag;
}

void OnTrap(int sig, siginfo_t* si, void* ctx) {
  StoreTracer* t = g_tracer.load(std::memory_order_acquire);
  InFlight& f = tl_in_flight;
  if (t == nullptr || f.n == 0) {
    Chain(g_old_trap, sig, si, ctx);
    return;
  }
  for (int i = 0; i < f.n; i++) t->Stored(f.addrs[i]);
  for (int i = 0; i < f.n; i++) t->Protect(f.pages[i], /*writable=*/false);
  f.n = 0;
  static_cast<ucontext_t*>(ctx)->uc_mcontext.gregs[REG_EFL] &= ~kTrapFlag;
}

}  // namespace

StoreTracer::StoreTracer(pm::CrashSimulator* sim) : sim_(sim) {
  StoreTracer* expected = nullptr;
  if (!g_tracer.compare_exchange_strong(expected, this)) {
    std::abort();  // test misuse: one tracer at a time (the handlers are process-wide)
  }
  struct sigaction sa {};
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sa.sa_sigaction = OnSegv;
  sigaction(SIGSEGV, &sa, &g_old_segv);
  sa.sa_sigaction = OnTrap;
  sigaction(SIGTRAP, &sa, &g_old_trap);
}

StoreTracer::~StoreTracer() {
  if (base_) Protect(base_, len_, true);
  sigaction(SIGSEGV, &g_old_segv, nullptr);
  sigaction(SIGTRAP, &g_old_trap, nullptr);
  g_tracer.store(nullptr, std::memory_order_release);
}

bool StoreTracer::Contains(const void* p) const {
  const char* c = static_cast<const char*>(p);
  return base_ != nullptr && c >= base_ && c < base_ + len_;
}

void StoreTracer::Stored(const void* addr) {
  stores_++;
  // The line written, and the next one (a vector store may cross a line boundary).
  const uintptr_t line = reinterpret_cast<uintptr_t>(addr) & ~(kLine - 1);
  sim_->OnStore(reinterpret_cast<const void*>(line), 2 * kLine);
}

void StoreTracer::Protect(void* page, bool writable) const {
  Protect(page, PageSize(), writable);
}

void StoreTracer::Protect(void* addr, size_t len, bool writable) const {
  const uintptr_t first = reinterpret_cast<uintptr_t>(addr) & ~(PageSize() - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + len;
  mprotect(reinterpret_cast<void*>(first), end - first,
           writable ? PROT_READ | PROT_WRITE : PROT_READ);
}

void StoreTracer::OnMap(void* base, size_t len) {
  sim_->OnMap(base, len);
  base_ = static_cast<char*>(base);
  len_ = len;
  Protect(base_, len_, false);
}

void StoreTracer::OnUnmap(void* base, size_t len) {
  if (base == base_) {
    Protect(base_, len_, true);
    base_ = nullptr;
    len_ = 0;
  }
  sim_->OnUnmap(base, len);
}

void StoreTracer::OnNtCopyBegin(void* dst, size_t len) {
  if (Contains(dst)) Protect(dst, len, true);
}

void StoreTracer::OnNtCopy(void* dst, size_t len) {
  sim_->OnNtCopy(dst, len);
  if (Contains(dst)) Protect(dst, len, false);
}

}  // namespace pmhash::crashtest
