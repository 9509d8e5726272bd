// bench/runner.h — the phase runner: T threads over a partition of the keys, timed as a whole.
//
// A phase is one operation applied to every key of a span (insert all keys, find all keys, ...).
// The span is cut into T contiguous slices, one per thread. Every thread is created (and pinned,
// if asked) before the clock starts; the threads then wait at a start barrier, the clock starts
// when the barrier opens, and stops when the last thread has finished. Throughput is
// ops / wall time of the whole phase: a straggler counts, and nothing is averaged per thread.
//
// The per-operation loop is a template over the table type (RunPhase<T>), so a concrete index
// (e.g. reh::Reh<pm::Adr>) is called directly, with inlining and no virtual dispatch. The same
// template runs the type-erased pmhash::Index facade and the absl reference table: one runner
// for every row of a result table.
//
// Every operation's result is checked (insert: OK; positive find: OK and the value stored by
// ValueOf(key); negative find: NotFound; erase: OK). A thread stops at its first unexpected
// result and the phase reports it: a benchmark of a wrong answer is not a result.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/keys.h"
#include "pmhash/status.h"

namespace pmhash::bench {

enum class Op : uint8_t {
  kInsert,    // Insert(key, ValueOf(key)) must return OK (keys are fresh)
  kFindHit,   // Find(key) must return OK with ValueOf(key)
  kFindMiss,  // Find(key) must return NotFound
  kUpdate,    // Update(key, ~ValueOf(key)) must return OK (not in the default phases)
  kErase,     // Erase(key) must return OK
};
std::string_view OpName(Op op);

// What a table must offer to be benchmarked (every HashIndex, the Index facade, the reference).
template <class T>
concept BenchTable = requires(T& t, const T& ct, uint64_t k, uint64_t* out) {
  { t.Insert(k, k) } -> std::same_as<Status>;
  { t.Update(k, k) } -> std::same_as<Status>;
  { ct.Find(k, out) } -> std::same_as<Status>;
  { t.Erase(k) } -> std::same_as<Status>;
};

struct PhaseSpec {
  std::string name;  // column label: "insert", "find+", "find-", "erase"
  Op op = Op::kInsert;
  std::span<const uint64_t> keys;  // every key is used once, split among the threads
};

struct RunnerOptions {
  int threads = 1;
  bool pin = false;  // pin thread i to the i-th CPU of the process's affinity mask (wrapping)
};

struct PhaseResult {
  std::string name;
  Op op = Op::kInsert;
  int threads = 1;
  uint64_t ops = 0;    // operations completed (all of them unless a failure stopped a thread)
  double seconds = 0;  // wall time from the start barrier to the end of the last thread
  Status failure;      // the first unexpected result, OK if none
  // With repetitions (BenchConfig::repeat), ops/seconds are those of the fastest repetition and
  // this holds the Mops/s of every repetition, in order. Empty for a single run.
  std::vector<double> samples;

  bool ok() const { return failure.ok(); }
  double mops() const { return seconds > 0 ? static_cast<double>(ops) / seconds / 1e6 : 0; }
};

// What one thread of a phase reports.
struct ThreadOutcome {
  uint64_t ops = 0;
  Status failure;
};

// The thread harness (not a template): starts `threads` threads, pins them if asked, releases
// them together, runs body(thread_index, outcome) on each, and times the whole.
PhaseResult RunOnThreads(const PhaseSpec& spec, const RunnerOptions& ro,
                         const std::function<void(int, ThreadOutcome*)>& body);

// The CPUs this process may run on (sched_getaffinity), in increasing order.
std::vector<int> AllowedCpus();
// Pins the calling thread to `cpu`. False if the OS refused.
bool PinThisThread(int cpu);

namespace detail {

// Keys of thread `t` of `n`: a contiguous slice, sizes differ by at most one.
inline std::span<const uint64_t> Slice(std::span<const uint64_t> keys, int t, int n) {
  const size_t begin = keys.size() * static_cast<size_t>(t) / static_cast<size_t>(n);
  const size_t end = keys.size() * static_cast<size_t>(t + 1) / static_cast<size_t>(n);
  return keys.subspan(begin, end - begin);
}

Status WrongValue(uint64_t key, uint64_t got);
Status UnexpectedHit(uint64_t key);
Status Unexpected(Op op, uint64_t key, const Status& s);

// The hot loop, one instantiation per (operation, table type).
template <Op kOp, BenchTable T>
void RunSlice(T& table, std::span<const uint64_t> keys, ThreadOutcome* out) {
  const size_t n = keys.size();
  for (size_t i = 0; i < n; i++) {
    const uint64_t k = keys[i];
    if constexpr (kOp == Op::kInsert) {
      Status s = table.Insert(k, ValueOf(k));
      if (!s.ok()) [[unlikely]] {
        out->ops = i;
        out->failure = Unexpected(kOp, k, s);
        return;
      }
    } else if constexpr (kOp == Op::kUpdate) {
      Status s = table.Update(k, ~ValueOf(k));
      if (!s.ok()) [[unlikely]] {
        out->ops = i;
        out->failure = Unexpected(kOp, k, s);
        return;
      }
    } else if constexpr (kOp == Op::kFindHit) {
      uint64_t v = 0;
      Status s = std::as_const(table).Find(k, &v);
      if (!s.ok() || v != ValueOf(k)) [[unlikely]] {
        out->ops = i;
        out->failure = s.ok() ? WrongValue(k, v) : Unexpected(kOp, k, s);
        return;
      }
    } else if constexpr (kOp == Op::kFindMiss) {
      uint64_t v = 0;
      Status s = std::as_const(table).Find(k, &v);
      if (!s.IsNotFound()) [[unlikely]] {
        out->ops = i;
        out->failure = s.ok() ? UnexpectedHit(k) : Unexpected(kOp, k, s);
        return;
      }
    } else {
      static_assert(kOp == Op::kErase);
      Status s = table.Erase(k);
      if (!s.ok()) [[unlikely]] {
        out->ops = i;
        out->failure = Unexpected(kOp, k, s);
        return;
      }
    }
  }
  out->ops = n;
}

}  // namespace detail

// Runs one phase of `spec` on `table` with ro.threads threads.
// REQUIRES: table is safe for ro.threads concurrent callers.
template <BenchTable T>
PhaseResult RunPhase(T& table, const PhaseSpec& spec, const RunnerOptions& ro) {
  return RunOnThreads(spec, ro, [&](int t, ThreadOutcome* out) {
    const auto keys = detail::Slice(spec.keys, t, ro.threads);
    switch (spec.op) {
      case Op::kInsert:
        return detail::RunSlice<Op::kInsert>(table, keys, out);
      case Op::kFindHit:
        return detail::RunSlice<Op::kFindHit>(table, keys, out);
      case Op::kFindMiss:
        return detail::RunSlice<Op::kFindMiss>(table, keys, out);
      case Op::kUpdate:
        return detail::RunSlice<Op::kUpdate>(table, keys, out);
      case Op::kErase:
        return detail::RunSlice<Op::kErase>(table, keys, out);
    }
  });
}

}  // namespace pmhash::bench
