// bench/results.h — what a benchmark run produces: configuration, machine, and figures.
//
// The data model shared by the driver (which fills it) and the writers (report.h: terminal
// table, JSON, CSV). A run is a list of tables, one per thread count; a table holds the
// reference row (absl::flat_hash_map, one thread) and one row per (index, durability).
// Later workloads and metrics (issue 4) add fields here, never printing code.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/histogram.h"
#include "bench/pages.h"
#include "bench/persist_probe.h"
#include "bench/runner.h"
#include "bench/workload.h"
#include "pmhash/options.h"
#include "pmhash/stats.h"
#include "pmhash/status.h"

namespace pmhash::bench {

// The median of `v` (the mean of the two middle values for an even count); 0 if empty.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double hi = v[mid];
  return (*std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid)) + hi) / 2;
}

struct BenchConfig {
  std::vector<std::string> indexes;  // registered index names; empty: all
  std::vector<Durability> durabilities = {Durability::kAdr};
  uint64_t keys = 10'000'000;
  std::vector<int> threads = {1};  // one table per entry
  uint64_t seed = 1;
  std::string pool_path;   // empty: a temporary file in DefaultPoolDir()
  bool keep_pool = false;  // keep the pool file(s) after the run
  uint64_t pool_size = 0;  // bytes; 0: estimated from the key count per index
  bool pin = false;
  bool reference = true;  // run the absl::flat_hash_map row
  // Back every table with 2 MiB pages where the system allows (bench/pages.h): the pools open with
  // Options::huge_pages, the reference's array is advised MADV_HUGEPAGE. A pool file still needs
  // a tmpfs that allows huge pages (mount -o huge=always or huge=advise).
  bool huge_pages = false;
  // The counting pass's media model (Options::media_block_bytes, Options::media_cache_bytes;
  // src/pm/counters.h): block size, and the eADR last-level-cache model's capacity (0: off).
  uint32_t media_block_bytes = 256;
  uint64_t media_cache_bytes = uint64_t{16} << 20;
  // ElimDA's collecting logs in the pools this run creates (Options::elimda.logs); empty: the
  // index's default. The driver takes one value; `pmhash bench` runs once per value of a list.
  std::vector<uint32_t> elimda_logs;
  // ElimDA's Options::elimda.empty_block_batch in the pools this run creates; unset: the default.
  std::optional<uint32_t> elimda_batch;
  // ElimDA's Options::elimda.writer_logs in the pools this run creates; unset: the default.
  std::optional<uint32_t> elimda_writer_logs;
  // SmartHT's Options::smartht.grow_keys_per_head in the pools this run opens (the table grows
  // while it holds more keys per head bucket than this: a longer chain for a higher load
  // factor); unset: the default (3).
  std::optional<double> smartht_keys_per_head;
  // Options::background_threads of the indexes this run opens (SmartHT's head growth and filter
  // rebuild, ElimDA's background work); 0: manual mode, where writers split SmartHT's heads
  // themselves, so load factors and table shapes no longer depend on thread timing, but queued
  // tasks (SmartHT's filter rebuilds) wait for Close: its negative searches read PM once the
  // filter is past the keys it was sized for. Unset: the default (1).
  std::optional<uint32_t> background_threads;
  // Variable-size items (bench/bytes_table.h): keys of key_bytes and values of value_bytes
  // bytes, expanded from the generator's 64-bit keys, through the bytes API of the kinds whose
  // Capabilities have `bytes` (the others are skipped with a note); the reference row is then
  // absl::flat_hash_map<std::string, std::string>. Both 0: the uint64 API. Setting one sets the
  // other to 8 if it is 0; each in [8, 65536].
  uint32_t key_bytes = 0;
  uint32_t value_bytes = 0;
  // Keys inserted (then erased) by the separate persistence-counting pass; 0 skips it.
  // The driver's default is `keys`, so the counters describe the same table size.
  std::optional<uint64_t> count_keys;
  bool check = false;         // CheckInvariants after the insert phase (untimed)
  bool persist_probe = true;  // measure the one-persist limit (adr / eadr rows)
  // Interleaved rounds: every timed row (reference, indexes, probe) runs this many times, each on
  // a fresh table, in rounds (reference, row, row, ..., reference, row, ...); each phase reports
  // its median round and ratios are medians of per-round ratios (a best-of-N or a single run can
  // be off by 2x on a shared machine). The counting pass runs once.
  int repeat = 1;

  // ---- issue 4: workloads, metrics, experiments ----
  std::string experiment;  // the preset that filled this config ("" : none)
  // Phases of the throughput table, in order. Names: insert, find+, find-, update, rmw, erase
  // (each over all keys), ycsb-a|b|c|d|f, mix (mixed phases of `ops` operations). The first
  // must be insert; erase, if present, last. Empty: insert, find+, find-, erase.
  std::vector<std::string> phases;
  Distribution dist;  // keys of find+ / update / rmw phases and of mixes (not insert/erase)
  OpMix mix;          // the "mix" phase
  uint64_t ops = 0;   // operations of each mixed phase; 0: keys
  // Untimed, unreported find+ operations (uniform over the loaded keys) run after the first
  // phase (the load) and before the measured ones; 0: none.
  uint64_t warmup_ops = 0;
  uint32_t latency_every = 32;  // latency sampling: 0 off, 1 every op, k one op in k
  bool table = true;            // run the throughput tables (false: experiments only)
  // Growth ("sawtooth") experiment: insert `keys` keys in growth_steps steps; after each, the
  // load factor, bytes, and the latency of sample_ops timed operations of each kind.
  bool growth = false;
  uint32_t growth_steps = 50;
  uint32_t sample_ops = 1000;
  // Recovery experiment: for each size, build a pool, SIGKILL the builder (fork), time
  // reopen-to-first-request; then the same after a clean Close. Empty: not run.
  std::vector<uint64_t> recovery_keys;
  // Duplicate-key experiment (bench/duplicates.h: Pea Hash Figures 8-10) on the chosen kinds
  // with the multi-value API: datasets "zipf:S", "wiki-talk", "cit-patents", "file:PATH" of
  // about `keys` pairs each. Empty: not run.
  std::vector<std::string> dup_datasets;
};

struct BuildInfo {
  std::string version;
  std::string git_commit;  // "unknown" without git
  bool git_dirty = false;
  std::string build_type;
  std::string compiler;
};

struct MachineInfo {
  std::string cpu_model;
  int logical_cpus = 0;  // CPUs this process may run on
  std::string flush_instruction;
  std::string simd;
  std::string kernel;
  std::string pool_fs;           // file system of the pool directory ("tmpfs", "ext4", ...)
  std::string huge_pages;        // THP settings and the pool tmpfs's huge= (HugePageSettings)
  double clock_overhead_ns = 0;  // two steady_clock reads: included in each latency sample
};

// Persistence traffic averaged per operation (TrafficStats / operations).
struct TrafficPerOp {
  uint64_t ops = 0;
  double persists = 0;
  double fences = 0;
  double flushed_lines = 0;
  double nt_bytes = 0;
  double media_writes = 0;
  uint32_t media_block_bytes = 256;
  uint64_t media_cache_bytes = 0;    // eADR rows: the cache model's capacity (0: none, or ADR)
  uint64_t cached_dirty_lines = 0;   // eADR: persisted lines not yet evicted at the phase's end
  // Media bytes / payload bytes: media_writes * media_block_bytes / 16 (an 8 B key + 8 B value
  // per operation; ElimDA Figure 4, TurboHash Figure 6), or / (key_bytes + value_bytes) in a
  // run of variable-size items.
  double write_amplification = 0;
};
constexpr double kPayloadBytes = 16;

// The separate counting pass: the index reopened on a fresh pool with Options::counters = true,
// one thread, `keys` inserts then `keys` erases. Kept apart from the timed phases so that those
// run with the counters off (their cost is then one predictable branch per persist).
struct CountingPass {
  uint64_t keys = 0;
  TrafficPerOp insert;
  TrafficPerOp erase;
  Status failure;
};

enum class RowKind : uint8_t {
  kReference,  // absl::flat_hash_map
  kTemplate,   // concrete index type through the HashIndex concept (no virtual calls)
  kFacade,     // pmhash::Open() facade (virtual calls): an index without a template entry
};
std::string_view RowKindName(RowKind k);

struct RowResult {
  std::string index;       // "reh", or "absl::flat_hash_map"
  std::string durability;  // "adr", "eadr", "dram" (the reference: "dram")
  RowKind kind = RowKind::kTemplate;
  int threads = 1;
  uint64_t pool_size = 0;  // bytes (0 for the reference)
  std::string kept_pool;   // path of the pool kept with --keep-pool
  std::vector<PhaseResult> phases;
  // After the insert phase. Index rows fill `stats`; the reference fills load_factor and
  // dram_bytes only.
  double load_factor = 0;
  std::optional<IndexStats> stats;
  uint64_t dram_bytes = 0;
  // How much of the table was resident on huge pages after the insert phase (bench/pages.h): the
  // pool file's mappings for an index row, the table's backing array for the reference.
  PageUse pages;
  // Resize events during the row's phases (IndexStats::resize_ns after the last insert phase).
  std::optional<DurationSummary> resize;
  std::optional<CountingPass> counting;
  Status error;  // why the row stopped (open failure, wrong result, wrong size, ...)

  std::string Label() const { return index + "/" + durability; }
  const PhaseResult* Phase(std::string_view name) const {
    for (const auto& p : phases) {
      if (p.name == name) return &p;
    }
    return nullptr;
  }
};

struct TableResult {
  int threads = 1;
  std::optional<RowResult> reference;
  std::vector<RowResult> rows;
  // The one-persist limit with this table's thread count, per persistent durability mode run.
  std::vector<PersistProbeResult> persist_limits;

  const PersistProbeResult* PersistLimit(std::string_view durability) const {
    for (const auto& p : persist_limits) {
      if (p.failure.ok() && DurabilityName(p.durability) == durability) return &p;
    }
    return nullptr;
  }

  // When any table has T > 1: the sharded absl map run by this table's T threads
  // (concurrent_reference.h); ratios use it for T > 1 (at T = 1 it is shown
  // as the start of its scaling curve, and ratios stay against absl).
  std::optional<RowResult> concurrent_reference;

  // The row ratios are taken against: the concurrent reference when there is one that
  // completed, else the absl row.
  const RowResult* RatioBase() const {
    if (threads > 1 && concurrent_reference && concurrent_reference->error.ok()) {
      return &*concurrent_reference;
    }
    return reference ? &*reference : nullptr;
  }
  // With interleaved rounds (BenchConfig::repeat), the per-round ratios phase/base of round i;
  // empty for a single run.
  static std::vector<double> RoundRatios(const RowResult* base, const PhaseResult& phase) {
    std::vector<double> r;
    if (!base || !phase.ok()) return r;
    const PhaseResult* ref = base->Phase(phase.name);
    if (!ref || phase.samples.size() < 2 || ref->samples.size() != phase.samples.size()) return r;
    for (size_t i = 0; i < phase.samples.size(); i++) {
      if (ref->samples[i] > 0) r.push_back(phase.samples[i] / ref->samples[i]);
    }
    return r;
  }
  // phase / base: the median of the per-round ratios with rounds, else the one ratio.
  static double RatioTo(const RowResult* base, const PhaseResult& phase) {
    if (!base || !phase.ok()) return NAN;
    const PhaseResult* ref = base->Phase(phase.name);
    if (!ref || !ref->ok() || ref->mops() <= 0) return NAN;
    if (std::vector<double> r = RoundRatios(base, phase); !r.empty()) return Median(std::move(r));
    return phase.mops() / ref->mops();
  }
  // The lowest and highest per-round ratio (NaN, NaN without rounds).
  std::pair<double, double> RatioSpread(const PhaseResult& phase) const {
    const std::vector<double> r = RoundRatios(RatioBase(), phase);
    if (r.empty()) return {NAN, NAN};
    const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
    return {*lo, *hi};
  }
  // phase's Mops over RatioBase()'s Mops for the phase of the same name; NaN if either is
  // missing or failed.
  double Ratio(const PhaseResult& phase) const { return RatioTo(RatioBase(), phase); }
  // The same against the single-threaded absl row.
  double RatioAbsl(const PhaseResult& phase) const {
    return RatioTo(reference ? &*reference : nullptr, phase);
  }
};

// A curve of an experiment (growth, recovery): points with named values, plus summary figures.
struct NamedValue {
  std::string name;
  double value = 0;
};
struct SeriesPoint {
  std::vector<NamedValue> values;
  double Get(std::string_view name) const {
    for (const auto& v : values) {
      if (v.name == name) return v.value;
    }
    return NAN;
  }
  bool Has(std::string_view name) const { return !std::isnan(Get(name)); }
};
struct Series {
  std::string experiment;  // "growth", "recovery", "duplicates"
  std::string index;       // "reh", "absl::flat_hash_map"
  std::string durability;
  std::vector<NamedValue> summary;
  std::vector<SeriesPoint> points;
  Status error;
  std::string Label() const { return index + "/" + durability; }
};

struct BenchReport {
  BenchConfig config;  // as run: defaults resolved (indexes, count_keys, pool path)
  BuildInfo build;
  MachineInfo machine;
  std::string started_at;  // UTC, ISO 8601
  double key_generation_seconds = 0;
  std::vector<TableResult> tables;
  std::vector<Series> series;      // experiments (growth, recovery)
  std::vector<std::string> notes;  // e.g. presets' skipped parts, unsupported workloads

  // True if every row of every table completed without error.
  bool ok() const {
    for (const auto& t : tables) {
      if (t.reference && !t.reference->error.ok()) return false;
      if (t.concurrent_reference && !t.concurrent_reference->error.ok()) return false;
      for (const auto& r : t.rows) {
        if (!r.error.ok()) return false;
      }
    }
    for (const auto& s : series) {
      if (!s.error.ok()) return false;
    }
    return true;
  }
};

}  // namespace pmhash::bench
