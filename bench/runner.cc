#include "bench/runner.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

namespace pmhash::bench {

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kInsert:
      return "insert";
    case Op::kFindHit:
      return "find+";
    case Op::kFindMiss:
      return "find-";
    case Op::kUpdate:
      return "update";
    case Op::kErase:
      return "erase";
    case Op::kReadModifyWrite:
      return "rmw";
    case Op::kMixed:
      return "mixed";
  }
  return "?";
}

std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; c++) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  if (cpus.empty()) {
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned c = 0; c < n; c++) cpus.push_back(static_cast<int>(c));
  }
  return cpus;
}

bool PinThisThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

namespace detail {

namespace {
std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%#018llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace

Status WrongValue(uint64_t key, uint64_t got) {
  return Status::Corruption("find of key " + Hex(key) + " returned value " + Hex(got) +
                            ", expected " + Hex(ValueOf(key)));
}
Status UnexpectedHit(uint64_t key) {
  return Status::Corruption("negative find of key " + Hex(key) +
                            " succeeded: the key was never inserted");
}
Status Unexpected(Op op, uint64_t key, const Status& s) {
  return Status(s.code(), std::string(OpName(op)) + " of key " + Hex(key) + ": " + s.ToString());
}

}  // namespace detail

PhaseResult RunOnThreads(const PhaseSpec& spec, const RunnerOptions& ro,
                         const std::function<void(int, ThreadOutcome*)>& body) {
  PhaseResult r;
  r.name = spec.name;
  r.op = spec.op;
  r.threads = ro.threads;
  const int n = ro.threads;
  std::vector<ThreadOutcome> outcomes(static_cast<size_t>(n));
  std::vector<Status> pin_failures(static_cast<size_t>(n));
  const std::vector<int> cpus = ro.pin ? AllowedCpus() : std::vector<int>{};

  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int t = 0; t < n; t++) {
    threads.emplace_back([&, t] {
      if (ro.pin) {
        const int cpu = cpus[static_cast<size_t>(t) % cpus.size()];
        if (!PinThisThread(cpu)) {
          pin_failures[static_cast<size_t>(t)] = Status::IOError(
              "cannot pin thread " + std::to_string(t) + " to CPU " + std::to_string(cpu));
        }
      }
      ready.fetch_add(1, std::memory_order_acq_rel);
      while (!go.load(std::memory_order_acquire)) {
        // Spin briefly (the release is imminent once every thread is here), but yield so that
        // more threads than CPUs still all arrive.
        std::this_thread::yield();
      }
      body(t, &outcomes[static_cast<size_t>(t)]);
    });
  }
  while (ready.load(std::memory_order_acquire) < n) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (auto& th : threads) th.join();
  const auto t1 = std::chrono::steady_clock::now();

  r.seconds = std::chrono::duration<double>(t1 - t0).count();
  for (int t = 0; t < n; t++) {
    const auto& o = outcomes[static_cast<size_t>(t)];
    r.ops += o.ops;
    r.latency.Merge(o.latency);
    if (r.failure.ok() && !o.failure.ok()) r.failure = o.failure;
    if (r.failure.ok() && !pin_failures[static_cast<size_t>(t)].ok()) {
      r.failure = pin_failures[static_cast<size_t>(t)];
    }
  }
  return r;
}

}  // namespace pmhash::bench
