// bench/targets.h — which code runs a benchmark row, and the row itself.
//
// A row is one (index, durability) pair run through every phase with T threads. The fast path
// is a small table from (index name, durability) to a function instantiated for the concrete
// index type, e.g. ("reh", kAdr) -> RunTemplateRow<reh::Reh<pm::Adr>>: the phase runner then
// calls Reh<Adr>::Find directly (HashIndex concept, inlined, no virtual call). An index that is
// registered (pmhash::RegisteredIndexes()) but has no entry here still runs, through the
// pmhash::Open facade, and its row is marked "facade". The table is derived from the list of
// kinds (src/index/kinds.h), and pool sizes from each kind's descriptor.
//
// Every row runs the same generic code (RunRowWith below), whatever the table type.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "bench/bytes_table.h"
#include "bench/results.h"
#include "bench/runner.h"
#include "pmhash/options.h"

namespace pmhash::bench {

struct RowConfig {
  std::string index;
  Durability durability = Durability::kAdr;
  Options options;  // path, pool_size, mode; durability and counters are set per pass
  RunnerOptions runner;
  std::span<const PhaseSpec> phases;
  bool check = false;  // CheckInvariants after each insert phase (untimed)
  // Variable-size items through the bytes API (bytes_table.h); off: the uint64 API. A kind
  // without the bytes API gives a row failed with NoBytesApi (the driver skips such kinds).
  ItemBytes items;

  // The counting pass (CountingPass in results.h): skipped when count_keys is empty.
  std::string count_path;
  uint64_t count_pool_size = 0;
  std::span<const uint64_t> count_keys;

  // Called before each phase with a short description; may be empty.
  std::function<void(std::string_view)> progress;
};

using RowFn = RowResult (*)(const RowConfig&);

struct Target {
  std::string_view index;
  Durability durability;
  RowFn run;
};

// The template fast-path table.
std::span<const Target> TemplateTargets();
const Target* FindTemplateTarget(std::string_view index, Durability d);

// Pool bytes a fresh `index` pool needs for `keys` keys, with a generous margin (pool files are
// sparse on tmpfs and ordinary file systems: unused space costs nothing).
uint64_t EstimatePoolBytes(std::string_view index, uint64_t keys);

// Runs a row through its template target, or through the facade when there is none.
RowResult RunIndexRow(const RowConfig& c);

// The reference row: absl::flat_hash_map, one thread (pinned if ro.pin), same phases; with
// items.on(), AbslBytesReference (string keys and values of those sizes). `huge_pages`: the
// uint64 table's array on 2 MiB pages (BenchConfig::huge_pages).
RowResult RunReferenceRow(std::span<const PhaseSpec> phases, const RunnerOptions& ro,
                          const std::function<void(std::string_view)>& progress,
                          ItemBytes items = {}, bool huge_pages = false);

}  // namespace pmhash::bench
