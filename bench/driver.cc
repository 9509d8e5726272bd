#include "bench/driver.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bench/keys.h"
#include "bench/machine.h"
#include "bench/persist_probe.h"
#include "bench/pool_files.h"
#include "bench/targets.h"
#include "pmhash/index.h"

namespace pmhash::bench {

namespace {

constexpr int kMaxThreads = 1024;
constexpr uint64_t kMaxKeys = uint64_t{1} << 36;

std::string DirOf(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The probe's lines span about as much memory as an index's buckets for `keys` keys.
uint64_t ProbeRegionBytes(uint64_t keys) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  const uint64_t bytes = std::clamp<uint64_t>(keys * 32, 64 * kMiB, 4096 * kMiB);
  return (bytes + kMiB - 1) / kMiB * kMiB;
}
uint64_t ProbeOps(uint64_t keys) { return std::clamp<uint64_t>(keys / 4, 200000, 2000000); }

// Repetitions: the first run of a row starts the per-phase samples; later runs add theirs and
// replace a phase's timing when faster. Stats and the counting pass come from the first run.
void StartSamples(RowResult* row) {
  if (row == nullptr) return;
  for (auto& p : row->phases) p.samples = {p.ok() ? p.mops() : 0.0};
}

void KeepBest(RowResult* best, const RowResult& run) {
  if (best->error.ok() && !run.error.ok()) best->error = run.error;
  for (size_t i = 0; i < best->phases.size() && i < run.phases.size(); i++) {
    PhaseResult& b = best->phases[i];
    const PhaseResult& r = run.phases[i];
    b.samples.push_back(r.ok() ? r.mops() : 0.0);
    if (!r.ok()) {
      if (b.ok()) b.failure = r.failure;
    } else if (b.ok() && r.mops() > b.mops()) {
      b.ops = r.ops;
      b.seconds = r.seconds;
    }
  }
}

}  // namespace

Status ResolveConfig(BenchConfig* c) {
  const auto& registered = RegisteredIndexes();
  if (c->indexes.empty()) {
    for (const auto& info : registered) c->indexes.emplace_back(info.name);
  }
  for (const auto& name : c->indexes) {
    const bool known = std::any_of(registered.begin(), registered.end(),
                                   [&](const IndexInfo& i) { return i.name == name; });
    if (!known) {
      std::string list;
      for (const auto& i : registered) list += (list.empty() ? "" : ", ") + std::string(i.name);
      return Status::InvalidArgument("unknown index '" + name + "' (registered: " + list + ")");
    }
  }
  if (c->durabilities.empty()) return Status::InvalidArgument("no durability mode given");
  if (c->keys == 0 || c->keys > kMaxKeys) {
    return Status::InvalidArgument("key count must be in [1, 2^36]");
  }
  if (c->threads.empty()) return Status::InvalidArgument("no thread count given");
  for (int t : c->threads) {
    if (t < 1 || t > kMaxThreads)
      return Status::InvalidArgument("thread counts must be in [1, 1024]");
  }
  if (c->repeat < 1 || c->repeat > 100)
    return Status::InvalidArgument("repeat must be in [1, 100]");
  if (!c->count_keys) c->count_keys = c->keys;
  if (*c->count_keys > c->keys) {
    return Status::InvalidArgument("the counting pass cannot use more keys than --keys");
  }
  return Status::OK();
}

Status RunBench(const BenchConfig& config, BenchListener* listener, BenchReport* report) {
  BenchListener quiet;
  BenchListener& l = listener ? *listener : quiet;
  BenchConfig c = config;
  PMHASH_RETURN_IF_ERROR(ResolveConfig(&c));

  // Pool files: one for the measured rows, one for the counting pass.
  std::unique_ptr<PoolFile> main_file;
  {
    auto f = c.pool_path.empty() ? PoolFile::CreateTemp(DefaultPoolDir(), "bench")
                                 : PoolFile::CreateAt(c.pool_path);
    if (!f.ok()) return f.status();
    main_file = std::move(f).value();
  }
  const std::string pool_dir = DirOf(main_file->path());
  std::unique_ptr<PoolFile> count_file;
  if (*c.count_keys > 0) {
    auto f = PoolFile::CreateTemp(pool_dir, "count");
    if (!f.ok()) return f.status();
    count_file = std::move(f).value();
  }
  c.pool_path = main_file->path();

  *report = BenchReport();
  report->config = c;
  report->build = CollectBuildInfo();
  report->machine = CollectMachineInfo(pool_dir);
  report->started_at = UtcTimestamp();
  l.OnStart(*report);

  const auto k0 = std::chrono::steady_clock::now();
  const KeySet keys = MakeKeySet(c.keys, c.seed);
  report->key_generation_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - k0).count();

  const std::vector<PhaseSpec> phases = {
      {"insert", Op::kInsert, keys.insert_order},
      {"find+", Op::kFindHit, keys.find_order},
      {"find-", Op::kFindMiss, keys.negative_order},
      {"erase", Op::kErase, keys.find_order},
  };
  const std::span<const uint64_t> count_keys(keys.insert_order.data(), *c.count_keys);
  const size_t total_rows = c.threads.size() * c.indexes.size() * c.durabilities.size();

  for (const int threads : c.threads) {
    TableResult table;
    table.threads = threads;
    const RunnerOptions ro{threads, c.pin};
    for (int rep = 0; rep < c.repeat; rep++) {
      const bool last = rep + 1 == c.repeat;
      const std::string tag =
          "t=" + std::to_string(threads) +
          (c.repeat > 1 ? " run " + std::to_string(rep + 1) + "/" + std::to_string(c.repeat)
                        : std::string()) +
          " ";
      if (c.persist_probe) {
        size_t slot = 0;
        for (const Durability d : c.durabilities) {
          if (d != Durability::kAdr && d != Durability::kEadr) continue;
          l.OnProgress(tag + "persist limit (" + std::string(DurabilityName(d)) + ")");
          PMHASH_RETURN_IF_ERROR(main_file->Truncate());
          PersistProbeResult p = RunPersistProbe(main_file->path(), ProbeRegionBytes(c.keys), d, ro,
                                                 ProbeOps(c.keys), c.seed);
          if (rep == 0) {
            table.persist_limits.push_back(std::move(p));
          } else if (p.failure.ok() && p.mops() > table.persist_limits[slot].mops()) {
            table.persist_limits[slot] = std::move(p);
          }
          slot++;
        }
      }
      if (c.reference) {
        const std::string prefix = tag + "absl: ";
        RowResult ref = RunReferenceRow(
            phases, ro, [&](std::string_view what) { l.OnProgress(prefix + std::string(what)); });
        if (rep == 0) {
          table.reference = std::move(ref);
          StartSamples(&*table.reference);
        } else {
          KeepBest(&*table.reference, ref);
        }
      }
      size_t slot = 0;
      for (const auto& index : c.indexes) {
        for (const Durability d : c.durabilities) {
          RowConfig rc;
          rc.index = index;
          rc.durability = d;
          rc.options.path = main_file->path();
          rc.options.mode = OpenMode::kOpenOrCreate;  // the file is empty: a new pool
          rc.options.pool_size = c.pool_size ? c.pool_size : EstimatePoolBytes(index, c.keys);
          rc.runner = ro;
          rc.phases = phases;
          rc.check = c.check;
          if (count_file && rep == 0) {
            rc.count_path = count_file->path();
            rc.count_pool_size =
                c.pool_size ? c.pool_size : EstimatePoolBytes(index, count_keys.size());
            rc.count_keys = count_keys;
          }
          const std::string prefix = tag + index + "/" + std::string(DurabilityName(d)) + ": ";
          rc.progress = [&](std::string_view what) { l.OnProgress(prefix + std::string(what)); };

          PMHASH_RETURN_IF_ERROR(main_file->Truncate());
          if (count_file) PMHASH_RETURN_IF_ERROR(count_file->Truncate());
          RowResult row = RunIndexRow(rc);
          if (count_file) PMHASH_RETURN_IF_ERROR(count_file->Truncate());
          if (c.keep_pool && last) {
            if (total_rows == 1) {
              row.kept_pool = main_file->path();
            } else {
              row.kept_pool = main_file->path() + "." + index + "-" +
                              std::string(DurabilityName(d)) + "-t" + std::to_string(threads);
              PMHASH_RETURN_IF_ERROR(main_file->MoveTo(row.kept_pool));
            }
          }
          if (rep == 0) {
            table.rows.push_back(std::move(row));
            StartSamples(&table.rows.back());
          } else {
            KeepBest(&table.rows[slot], row);
            table.rows[slot].kept_pool = row.kept_pool;
          }
          slot++;
        }
      }
    }
    l.OnTable(*report, table);
    report->tables.push_back(std::move(table));
  }
  if (c.keep_pool && total_rows == 1) main_file->Keep();
  return Status::OK();
}

}  // namespace pmhash::bench
