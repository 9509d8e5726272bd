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

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/histogram.h"
#include "bench/keys.h"
#include "common/attributes.h"
#include "pmhash/index.h"
#include "pmhash/status.h"

namespace pmhash::bench {

enum class Op : uint8_t {
  kInsert,    // Insert(key, ValueOf(key)) must return OK (keys are fresh)
  kFindHit,   // Find(key) must return OK with ValueOf(key)
  kFindMiss,  // Find(key) must return NotFound
  kUpdate,    // Update(key, ValueOf(key)) must return OK (the value is rewritten unchanged, so
              // reads in the same or a later phase still check it)
  kErase,     // Erase(key) must return OK
  kReadModifyWrite,  // Find(key) then Update(key, ValueOf(key)) (YCSB F)
  kMixed,            // a phase of per-thread (operation, key) lists: PhaseSpec::mixed
};

// One operation of a mixed phase.
struct OpKey {
  uint64_t key = 0;
  Op op = Op::kFindHit;
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
  // kMixed: thread t runs mixed[t] (mixed.size() == threads); the reference row runs them all
  // in sequence. size_delta: the phase's net change of Size().
  std::vector<std::span<const OpKey>> mixed;
  int64_t size_delta = 0;
  // kFindHit / kFindMiss: 0 finds one key per call; B > 0 calls the table's FindBatch with B keys
  // at a time (phase names "find+@B", "find-@B"; a table without FindBatch, such as the absl
  // reference, loops Find over the B keys). kInsert / kUpdate / kErase: B > 0 calls WriteBatch
  // with B ops ("insert@B", ...; without it, one call per op). Batched phases record no latency.
  uint32_t batch = 0;
  // A warm-up phase runs and is checked like any other, but is not reported (its result is
  // dropped from the row): it touches caches and TLBs before the measured phases.
  bool warmup = false;
};

// A phase applying `op` to every key of `keys`.
inline PhaseSpec KeyPhase(std::string name, Op op, std::span<const uint64_t> keys) {
  PhaseSpec p;
  p.name = std::move(name);
  p.op = op;
  p.keys = keys;
  return p;
}

struct RunnerOptions {
  int threads = 1;
  bool pin = false;  // pin thread i to the i-th CPU of the process's affinity mask (wrapping)
  // Latency: 0 off; 1 every operation is timed; k > 1 one operation in k (sampled mode).
  uint32_t latency_every = 0;
};

struct PhaseResult {
  std::string name;
  Op op = Op::kInsert;
  int threads = 1;
  uint64_t ops = 0;    // operations completed (all of them unless a failure stopped a thread)
  double seconds = 0;  // wall time from the start barrier to the end of the last thread
  Status failure;      // the first unexpected result, OK if none
  // With rounds (BenchConfig::repeat), ops/seconds give the median round's Mops/s and this holds
  // the Mops/s of every round, in order. Empty for a single run.
  std::vector<double> samples;
  // Per-operation latency (ns) of the timed operations, all threads merged (RunnerOptions::
  // latency_every); count() == 0 when latency was off. Includes the clock overhead
  // (MachineInfo::clock_overhead_ns).
  LatencyHistogram latency;

  bool ok() const { return failure.ok(); }
  double mops() const { return seconds > 0 ? static_cast<double>(ops) / seconds / 1e6 : 0; }
};

// What one thread of a phase reports.
struct ThreadOutcome {
  uint64_t ops = 0;
  Status failure;
  LatencyHistogram latency;
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

inline uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// One checked operation; false (and out->failure set) on an unexpected result. Always inlined
// into the hot loop, whatever the table: a call frame per operation is harness cost, and a
// table whose operation inlines (absl's, SmartHT's Find) would otherwise pay it for the harness.
template <Op kOp, BenchTable T>
PMHASH_ALWAYS_INLINE bool DoOp(T& table, uint64_t k, ThreadOutcome* out) {
  if constexpr (kOp == Op::kInsert || kOp == Op::kUpdate || kOp == Op::kErase) {
    Status s = kOp == Op::kInsert   ? table.Insert(k, ValueOf(k))
               : kOp == Op::kUpdate ? table.Update(k, ValueOf(k))
                                    : table.Erase(k);
    if (!s.ok()) [[unlikely]] {
      out->failure = Unexpected(kOp, k, s);
      return false;
    }
    return true;
  } else if constexpr (kOp == Op::kFindHit || kOp == Op::kReadModifyWrite) {
    uint64_t v = 0;
    Status s = std::as_const(table).Find(k, &v);
    if (!s.ok() || v != ValueOf(k)) [[unlikely]] {
      out->failure = s.ok() ? WrongValue(k, v) : Unexpected(kOp, k, s);
      return false;
    }
    if constexpr (kOp == Op::kReadModifyWrite) return DoOp<Op::kUpdate>(table, k, out);
    return true;
  } else {
    static_assert(kOp == Op::kFindMiss);
    uint64_t v = 0;
    Status s = std::as_const(table).Find(k, &v);
    if (!s.IsNotFound()) [[unlikely]] {
      out->failure = s.ok() ? UnexpectedHit(k) : Unexpected(kOp, k, s);
      return false;
    }
    return true;
  }
}

template <BenchTable T>
inline bool DoMixedOp(T& table, const OpKey& ok, ThreadOutcome* out) {
  switch (ok.op) {
    case Op::kInsert:
      return DoOp<Op::kInsert>(table, ok.key, out);
    case Op::kFindHit:
      return DoOp<Op::kFindHit>(table, ok.key, out);
    case Op::kFindMiss:
      return DoOp<Op::kFindMiss>(table, ok.key, out);
    case Op::kUpdate:
      return DoOp<Op::kUpdate>(table, ok.key, out);
    case Op::kErase:
      return DoOp<Op::kErase>(table, ok.key, out);
    case Op::kReadModifyWrite:
      return DoOp<Op::kReadModifyWrite>(table, ok.key, out);
    case Op::kMixed:
      break;
  }
  out->failure = Status::InvalidArgument("nested mixed operation");
  return false;
}

// The hot loop, one instantiation per (operation, table type). `every`: latency sampling.
template <Op kOp, BenchTable T, class Item>
void RunSlice(T& table, std::span<const Item> items, uint32_t every, ThreadOutcome* out) {
  const size_t n = items.size();
  auto one = [&](const Item& it) PMHASH_LAMBDA_INLINE {
    if constexpr (kOp == Op::kMixed) {
      return DoMixedOp(table, it, out);
    } else {
      return DoOp<kOp>(table, it, out);
    }
  };
  if (every == 0) {
    for (size_t i = 0; i < n; i++) {
      if (!one(items[i])) [[unlikely]] {
        out->ops = i;
        return;
      }
    }
  } else {
    uint32_t countdown = 1;
    for (size_t i = 0; i < n; i++) {
      bool ok;
      if (--countdown == 0) {
        countdown = every;
        const uint64_t t0 = NowNs();
        ok = one(items[i]);
        out->latency.Add(NowNs() - t0);
      } else {
        ok = one(items[i]);
      }
      if (!ok) [[unlikely]] {
        out->ops = i;
        return;
      }
    }
  }
  out->ops = n;
}

// The batched finds of kFindHit / kFindMiss: `batch` keys per call, every result checked.
template <Op kOp, BenchTable T>
void RunBatchSlice(T& table, std::span<const uint64_t> keys, size_t batch, ThreadOutcome* out) {
  static_assert(kOp == Op::kFindHit || kOp == Op::kFindMiss);
  std::vector<uint64_t> values(batch);
  std::vector<Status> statuses(batch);
  const T& ct = table;
  for (size_t first = 0; first < keys.size(); first += batch) {
    const auto group = keys.subspan(first, std::min(batch, keys.size() - first));
    if constexpr (requires { ct.FindBatch(group, std::span(values), std::span(statuses)); }) {
      if (Status s = ct.FindBatch(group, values, statuses); !s.ok()) [[unlikely]] {
        out->ops = first;
        out->failure = s;
        return;
      }
    } else {
      for (size_t i = 0; i < group.size(); i++) statuses[i] = ct.Find(group[i], &values[i]);
    }
    for (size_t i = 0; i < group.size(); i++) {
      const uint64_t k = group[i];
      const Status& s = statuses[i];
      const bool ok = kOp == Op::kFindHit ? s.ok() && values[i] == ValueOf(k) : s.IsNotFound();
      if (!ok) [[unlikely]] {
        out->ops = first + i;
        out->failure = s.ok() ? (kOp == Op::kFindHit ? WrongValue(k, values[i]) : UnexpectedHit(k))
                              : Unexpected(kOp, k, s);
        return;
      }
    }
  }
  out->ops = keys.size();
}

// The batched writes of kInsert / kUpdate / kErase: `batch` ops per WriteBatch call, every status
// checked.
template <Op kOp, BenchTable T>
void RunWriteBatchSlice(T& table, std::span<const uint64_t> keys, size_t batch,
                        ThreadOutcome* out) {
  static_assert(kOp == Op::kInsert || kOp == Op::kUpdate || kOp == Op::kErase);
  constexpr WriteKind kKind = kOp == Op::kInsert   ? WriteKind::kInsert
                              : kOp == Op::kUpdate ? WriteKind::kUpdate
                                                   : WriteKind::kErase;
  std::vector<WriteOp> ops(batch);
  std::vector<Status> statuses(batch);
  constexpr bool kHasWriteBatch =
      requires { table.WriteBatch(std::span<const WriteOp>(ops), std::span(statuses)); };
  if constexpr (!kHasWriteBatch) {
    RunSlice<kOp>(table, keys, 0, out);  // the reference: its one-at-a-time loop, as is
  } else {
    for (size_t first = 0; first < keys.size(); first += batch) {
      const size_t n = std::min(batch, keys.size() - first);
      for (size_t i = 0; i < n; i++) ops[i] = {kKind, keys[first + i], ValueOf(keys[first + i])};
      if (Status s = table.WriteBatch(std::span<const WriteOp>(ops.data(), n), statuses);
          !s.ok()) [[unlikely]] {
        out->ops = first;
        out->failure = s;
        return;
      }
      for (size_t i = 0; i < n; i++) {
        if (!statuses[i].ok()) [[unlikely]] {
          out->ops = first + i;
          out->failure = Unexpected(kOp, ops[i].key, statuses[i]);
          return;
        }
      }
    }
    out->ops = keys.size();
  }
}

}  // namespace detail

// Runs one phase of `spec` on `table` with ro.threads threads.
// REQUIRES: table is safe for ro.threads concurrent callers.
template <BenchTable T>
PhaseResult RunPhase(T& table, const PhaseSpec& spec, const RunnerOptions& ro) {
  return RunOnThreads(spec, ro, [&](int t, ThreadOutcome* out) {
    const uint32_t every = ro.latency_every;
    if (spec.op == Op::kMixed) {
      // One thread (the reference row) runs every list in turn; T threads run one list each.
      if (ro.threads == 1) {
        for (const auto& list : spec.mixed) {
          ThreadOutcome part;
          detail::RunSlice<Op::kMixed>(table, list, every, &part);
          out->ops += part.ops;
          out->latency.Merge(part.latency);
          if (!part.failure.ok()) {
            out->failure = part.failure;
            return;
          }
        }
        return;
      }
      const auto& list = spec.mixed[static_cast<size_t>(t) % spec.mixed.size()];
      return detail::RunSlice<Op::kMixed>(table, list, every, out);
    }
    const auto keys = detail::Slice(spec.keys, t, ro.threads);
    if (spec.batch > 0 && spec.op == Op::kFindHit) {
      return detail::RunBatchSlice<Op::kFindHit>(table, keys, spec.batch, out);
    }
    if (spec.batch > 0 && spec.op == Op::kFindMiss) {
      return detail::RunBatchSlice<Op::kFindMiss>(table, keys, spec.batch, out);
    }
    if (spec.batch > 0 && spec.op == Op::kInsert) {
      return detail::RunWriteBatchSlice<Op::kInsert>(table, keys, spec.batch, out);
    }
    if (spec.batch > 0 && spec.op == Op::kUpdate) {
      return detail::RunWriteBatchSlice<Op::kUpdate>(table, keys, spec.batch, out);
    }
    if (spec.batch > 0 && spec.op == Op::kErase) {
      return detail::RunWriteBatchSlice<Op::kErase>(table, keys, spec.batch, out);
    }
    switch (spec.op) {
      case Op::kInsert:
        return detail::RunSlice<Op::kInsert>(table, keys, every, out);
      case Op::kFindHit:
        return detail::RunSlice<Op::kFindHit>(table, keys, every, out);
      case Op::kFindMiss:
        return detail::RunSlice<Op::kFindMiss>(table, keys, every, out);
      case Op::kUpdate:
        return detail::RunSlice<Op::kUpdate>(table, keys, every, out);
      case Op::kErase:
        return detail::RunSlice<Op::kErase>(table, keys, every, out);
      case Op::kReadModifyWrite:
        return detail::RunSlice<Op::kReadModifyWrite>(table, keys, every, out);
      case Op::kMixed:
        break;
    }
  });
}

}  // namespace pmhash::bench
