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
    if (t < 1 || t > kMaxThreads) return Status::InvalidArgument("thread counts must be in [1, 1024]");
  }
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
    if (c.persist_probe) {
      for (const Durability d : c.durabilities) {
        if (d != Durability::kAdr && d != Durability::kEadr) continue;
        l.OnProgress("t=" + std::to_string(threads) + " persist limit (" +
                     std::string(DurabilityName(d)) + ")");
        PMHASH_RETURN_IF_ERROR(main_file->Truncate());
        table.persist_limits.push_back(
            RunPersistProbe(main_file->path(), ProbeRegionBytes(c.keys), d, ro,
                            ProbeOps(c.keys), c.seed));
      }
    }
    if (c.reference) {
      const std::string prefix = "t=" + std::to_string(threads) + " absl: ";
      table.reference = RunReferenceRow(phases, ro, [&](std::string_view what) {
        l.OnProgress(prefix + std::string(what));
      });
    }
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
        if (count_file) {
          rc.count_path = count_file->path();
          rc.count_pool_size =
              c.pool_size ? c.pool_size : EstimatePoolBytes(index, count_keys.size());
          rc.count_keys = count_keys;
        }
        const std::string prefix =
            "t=" + std::to_string(threads) + " " + index + "/" + std::string(DurabilityName(d)) + ": ";
        rc.progress = [&](std::string_view what) { l.OnProgress(prefix + std::string(what)); };

        PMHASH_RETURN_IF_ERROR(main_file->Truncate());
        if (count_file) PMHASH_RETURN_IF_ERROR(count_file->Truncate());
        RowResult row = RunIndexRow(rc);
        if (count_file) PMHASH_RETURN_IF_ERROR(count_file->Truncate());
        if (c.keep_pool) {
          if (total_rows == 1) {
            row.kept_pool = main_file->path();
          } else {
            row.kept_pool = main_file->path() + "." + index + "-" +
                            std::string(DurabilityName(d)) + "-t" + std::to_string(threads);
            PMHASH_RETURN_IF_ERROR(main_file->MoveTo(row.kept_pool));
          }
        }
        table.rows.push_back(std::move(row));
      }
    }
    l.OnTable(*report, table);
    report->tables.push_back(std::move(table));
  }
  if (c.keep_pool && total_rows == 1) main_file->Keep();
  return Status::OK();
}

}  // namespace pmhash::bench
