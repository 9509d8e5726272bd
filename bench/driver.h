// bench/driver.h — `pmhash bench`: the default comparison of indexes against the reference.
//
// For each thread count T (one table each):
//   0. the one-persist limit (persist_probe.h) for each persistent durability mode, T threads;
//   1. the reference row: absl::flat_hash_map, one thread, phases insert / find+ / find- / erase;
//   2. for each index x durability: a fresh pool, the same phases with T threads (timed, counters
//      off), Stats() after insert (load factor, bytes), then the counting pass (a second fresh
//      pool, counters on, one thread: persists / fences / flushed lines / media writes per insert
//      and per erase).
// Every table is handed to the listener as soon as it is complete. The library part never
// prints: the CLI's listener does.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "bench/results.h"
#include "pmhash/status.h"

namespace pmhash::bench {

class BenchListener {
 public:
  virtual ~BenchListener() = default;
  // The configuration is resolved and the machine described; nothing measured yet.
  virtual void OnStart(const BenchReport&) {}
  // A phase is about to start ("t=1 reh/adr: insert").
  virtual void OnProgress(std::string_view) {}
  virtual void OnTable(const BenchReport&, const TableResult&) {}
  // An experiment's curve (growth, recovery) is complete.
  virtual void OnSeries(const BenchReport&, const Series&) {}
};

// Fills defaults (all registered indexes, count_keys = keys) and rejects what cannot run
// (unknown index, zero keys or threads, count_keys > keys, ...).
Status ResolveConfig(BenchConfig* c);

// Runs the whole benchmark. A non-OK Status means the run could not start or continue (bad
// configuration, no pool file); a row that fails is recorded in its RowResult::error and the run
// goes on. `listener` may be null.
// `notes` are copied into report->notes (a preset's remarks).
Status RunBench(const BenchConfig& config, BenchListener* listener, BenchReport* report,
                const std::vector<std::string>& notes = {});

}  // namespace pmhash::bench
