// bench/row.h — the generic row: open a table, run the phases, collect stats, count traffic.
//
// One template for every table type: a concrete HashIndex (template fast path) and the
// pmhash::Index facade both go through RunRowWith; only `open` differs.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "bench/results.h"
#include "bench/runner.h"
#include "bench/targets.h"
#include "pmhash/index.h"

namespace pmhash::bench {

namespace detail {

inline TrafficPerOp PerOp(const TrafficStats& t, uint64_t ops, uint32_t payload_bytes) {
  TrafficPerOp r;
  r.ops = ops;
  r.media_block_bytes = t.media_block_bytes;
  r.media_cache_bytes = t.media_cache_bytes;
  r.cached_dirty_lines = t.cached_dirty_lines;
  if (ops == 0) return r;
  const double n = static_cast<double>(ops);
  r.persists = static_cast<double>(t.persists) / n;
  r.fences = static_cast<double>(t.fences) / n;
  r.flushed_lines = static_cast<double>(t.flushed_lines) / n;
  r.nt_bytes = static_cast<double>(t.nt_bytes) / n;
  r.media_writes = static_cast<double>(t.media_writes) / n;
  r.write_amplification = r.media_writes * t.media_block_bytes / payload_bytes;
  return r;
}

inline void Progress(const RowConfig& c, const std::string& what) {
  if (c.progress) c.progress(what);
}

// Size expected after `phase` given the size before it.
inline int64_t SizeDelta(const PhaseResult& p) {
  switch (p.op) {
    case Op::kInsert:
      return static_cast<int64_t>(p.ops);
    case Op::kErase:
      return -static_cast<int64_t>(p.ops);
    default:
      return 0;
  }
}

}  // namespace detail

// The phases of a reference table (no pool, no counters) into `row`: one RunPhase per spec,
// warm-up phases dropped from the results, stop at the first failure; `after_insert(table)` runs
// after each insert phase (load factor, memory).
template <class Table, class AfterInsert>
void RunReferencePhases(Table& table, std::span<const PhaseSpec> phases, const RunnerOptions& ro,
                        const std::function<void(std::string_view)>& progress, RowResult* row,
                        AfterInsert&& after_insert) {
  for (const PhaseSpec& spec : phases) {
    if (progress) progress(spec.name);
    row->phases.push_back(RunPhase(table, spec, ro));
    if (!row->phases.back().ok()) {
      row->error = row->phases.back().failure;
      break;
    }
    if (spec.warmup) {
      row->phases.pop_back();
      continue;
    }
    if (spec.op == Op::kInsert) after_insert(table);
  }
}

// The counting pass: a fresh pool with Options::counters = true, one thread, insert then erase
// c.count_keys. Its timing is discarded.
template <class OpenFn>
CountingPass RunCountingPass(OpenFn&& open, const RowConfig& c) {
  CountingPass cp;
  cp.keys = c.count_keys.size();
  Options o = c.options;
  o.path = c.count_path;
  o.pool_size = c.count_pool_size;
  o.durability = c.durability;
  o.counters = true;
  auto opened = open(o);
  if (!opened.ok()) {
    cp.failure = opened.status();
    return cp;
  }
  auto& table = *opened.value();
  const RunnerOptions one{1, c.runner.pin, 0};
  const PhaseSpec phases[2] = {KeyPhase("insert", Op::kInsert, c.count_keys),
                               KeyPhase("erase", Op::kErase, c.count_keys)};
  for (const PhaseSpec& spec : phases) {
    detail::Progress(c, "counting pass: " + spec.name);
    table.ResetCounters();
    const PhaseResult pr = RunPhase(table, spec, one);
    if (!pr.ok()) {
      cp.failure = pr.failure;
      break;
    }
    const TrafficPerOp t = detail::PerOp(table.Stats().traffic, pr.ops, c.items.payload());
    (spec.op == Op::kInsert ? cp.insert : cp.erase) = t;
  }
  if (Status s = table.Close(); !s.ok() && cp.failure.ok()) cp.failure = s;
  return cp;
}

// Opens the table with `open(options)` (a Result<std::unique_ptr<T>>), runs c.phases, then the
// counting pass.
template <class OpenFn>
RowResult RunRowWith(OpenFn&& open, RowKind kind, const RowConfig& c) {
  RowResult row;
  row.index = c.index;
  row.durability = std::string(DurabilityName(c.durability));
  row.kind = kind;
  row.threads = c.runner.threads;
  row.pool_size = c.options.pool_size;

  Options o = c.options;
  o.durability = c.durability;
  o.counters = false;
  auto opened = open(o);
  if (!opened.ok()) {
    row.error = opened.status();
    return row;
  }
  auto& table = *opened.value();
  int64_t expected_size = static_cast<int64_t>(table.Size());
  for (const PhaseSpec& spec : c.phases) {
    detail::Progress(c, spec.name);
    row.phases.push_back(RunPhase(table, spec, c.runner));
    const PhaseResult& pr = row.phases.back();
    if (!pr.ok()) {
      row.error = pr.failure;
      break;
    }
    expected_size += spec.op == Op::kMixed ? spec.size_delta : detail::SizeDelta(pr);
    if (const uint64_t size = table.Size(); size != static_cast<uint64_t>(expected_size)) {
      row.error = Status::Corruption("after " + spec.name + ": Size() = " + std::to_string(size) +
                                     ", expected " + std::to_string(expected_size));
      break;
    }
    if (spec.warmup) {
      row.phases.pop_back();
      continue;
    }
    if (spec.op == Op::kInsert) {
      IndexStats s = table.Stats();
      row.load_factor = s.load_factor;
      row.dram_bytes = s.dram_bytes;
      row.resize = Summarize(s.resize_ns);
      row.resize->count = s.splits + s.doublings;  // exact even when resize_ns is capped
      row.stats = s;
      row.pages = PagesOfFile(o.path);
      if (c.check) {
        detail::Progress(c, "CheckInvariants");
        if (Status st = table.CheckInvariants(); !st.ok()) {
          row.error = st;
          break;
        }
      }
    }
  }
  if (Status s = table.Close(); !s.ok() && row.error.ok()) row.error = s;
  opened.value().reset();  // unmap before the counting pass maps its own pool

  if (row.error.ok() && !c.count_keys.empty()) {
    row.counting = RunCountingPass(open, c);
    if (!row.counting->failure.ok()) {
      row.error = Status(row.counting->failure.code(),
                         "counting pass: " + row.counting->failure.ToString());
    }
  }
  return row;
}

// A failed row that ran nothing (the table cannot run this configuration).
inline RowResult RefusedRow(const RowConfig& c, RowKind kind, Status why) {
  RowResult row;
  row.index = c.index;
  row.durability = std::string(DurabilityName(c.durability));
  row.kind = kind;
  row.threads = c.runner.threads;
  row.error = std::move(why);
  return row;
}

// The template fast path for a concrete index type; with c.items.on(), its bytes API
// (BytesIndex) through a BytesView, still without a virtual call.
template <HashIndex I>
RowResult RunTemplateRow(const RowConfig& c) {
  if (!c.items.on()) {
    return RunRowWith([](const Options& o) { return I::Open(o); }, RowKind::kTemplate, c);
  }
  if constexpr (BytesIndex<I>) {
    using View = BytesView<I>;
    const ItemBytes items = c.items;
    return RunRowWith(
        [items](const Options& o) -> Result<std::unique_ptr<View>> {
          auto r = I::Open(o);
          if (!r.ok()) return r.status();
          if (!r.value()->SupportsBytes()) return NoBytesApi(I::kKindName);
          I* api = r.value().get();
          return std::make_unique<View>(std::move(r).value(), api, items);
        },
        RowKind::kTemplate, c);
  } else {
    return RefusedRow(c, RowKind::kTemplate, NoBytesApi(I::kKindName));
  }
}

// The facade (pmhash::Open) for a kind without a template target; with c.items.on(), its
// BytesApi (Index::bytes()).
inline RowResult RunFacadeRow(const RowConfig& c) {
  const std::string kind = c.index;
  if (!c.items.on()) {
    return RunRowWith([&kind](const Options& o) { return pmhash::Open(kind, o); },
                      RowKind::kFacade, c);
  }
  using View = BytesView<Index, BytesApi>;
  const ItemBytes items = c.items;
  return RunRowWith(
      [&kind, items](const Options& o) -> Result<std::unique_ptr<View>> {
        auto r = pmhash::Open(kind, o);
        if (!r.ok()) return r.status();
        BytesApi* api = r.value()->bytes();
        if (api == nullptr) return NoBytesApi(kind);
        return std::make_unique<View>(std::move(r).value(), api, items);
      },
      RowKind::kFacade, c);
}

}  // namespace pmhash::bench
