#include "bench/driver.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bench/concurrent_reference.h"
#include "bench/duplicates.h"
#include "bench/experiments.h"
#include "bench/keys.h"
#include "bench/machine.h"
#include "bench/persist_probe.h"
#include "bench/pool_files.h"
#include "bench/targets.h"
#include "bench/workload.h"
#include "pmhash/index.h"

namespace pmhash::bench {

namespace {

constexpr int kMaxThreads = 1024;
constexpr uint64_t kMaxKeys = uint64_t{1} << 36;
constexpr uint32_t kMaxBatch = 1024;

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
// The pool of a row: the kind's estimate, plus room for records larger than the 24 B one it
// plans for (header, key, value, in a slot up to twice as large; the file is sparse).
uint64_t PoolBytes(std::string_view index, uint64_t keys, ItemBytes items) {
  const uint64_t records = items.on() ? keys * 2 * (items.key + items.value + 16) : 0;
  return EstimatePoolBytes(index, keys) + records;
}

uint64_t ProbeOps(uint64_t keys) { return std::clamp<uint64_t>(keys / 4, 200000, 2000000); }

// Whether the phase `name` writes with Update: update, rmw, and the mixed phases whose mix has
// update or rmw operations. A multimap kind (Capabilities::multi) has no Update (which of a key's
// values would it replace?), so its rows leave these phases out: the table shows "-", and a note
// says why. (Every other phase means the same on a multimap whose keys each have one value:
// insert of a fresh key adds its only pair, find+ finds it, erase removes it.)
bool PhaseUpdates(const std::string& name, const OpMix& mix) {
  if (name == "update" || name.starts_with("update@") || name == "rmw") return true;
  if (name == "mix") return mix.update > 0 || mix.rmw > 0;
  Workload w;
  if (name.starts_with("ycsb-") && YcsbWorkload(name, &w).ok()) {
    return w.mix.update > 0 || w.mix.rmw > 0;
  }
  return false;
}

// "find+@B" / "find-@B": the find phase with B keys per FindBatch call; "insert@B",
// "update@B", "erase@B": the write phase with B ops per WriteBatch call; B in [1, 1024].
// False for every other name; true and *batch = 0 for a malformed B.
bool ParseBatchPhase(std::string_view name, Op* op, uint32_t* batch) {
  const size_t at = name.find('@');
  if (at == std::string_view::npos) return false;
  const std::string_view base = name.substr(0, at);
  if (base == "find+") {
    *op = Op::kFindHit;
  } else if (base == "find-") {
    *op = Op::kFindMiss;
  } else if (base == "insert") {
    *op = Op::kInsert;
  } else if (base == "update") {
    *op = Op::kUpdate;
  } else if (base == "erase") {
    *op = Op::kErase;
  } else {
    return false;
  }
  *batch = 0;
  const std::string_view digits = name.substr(at + 1);
  uint32_t b = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), b);
  if (ec == std::errc() && end == digits.data() + digits.size() && b >= 1 && b <= kMaxBatch) {
    *batch = b;
  }
  return true;
}

bool IsMultiKind(const std::string& index) {
  const auto caps = KindCapabilities(index);
  return caps.ok() && caps.value().multi;
}

// Repetitions are interleaved rounds (reference, row, row, ..., reference, row, ...; the rows
// in reverse order in odd rounds): the first round starts the per-phase samples, later rounds
// add theirs, and after the last round every phase reports its median round (UseMedianRound).
// Stats and the counting pass come from the first round. Ratios are then the median of the
// per-round ratios (TableResult::RatioTo), so that a slow round of the reference and a fast
// round of a row are never paired.
void StartSamples(RowResult* row) {
  if (row == nullptr) return;
  for (auto& p : row->phases) p.samples = {p.ok() ? p.mops() : 0.0};
}

// Adds `run`'s samples to `first`, the same row's first round; kCorruption (of the results: a
// defect of the driver) if they are not the same row (index and durability).
Status AddRound(RowResult* first, const RowResult& run) {
  if (first->index != run.index || first->durability != run.durability) {
    return Status::Corruption("bench: a round of " + run.index + " would land in the row of " +
                              first->index);
  }
  if (first->error.ok() && !run.error.ok()) first->error = run.error;
  for (size_t i = 0; i < first->phases.size() && i < run.phases.size(); i++) {
    PhaseResult& b = first->phases[i];
    const PhaseResult& r = run.phases[i];
    b.samples.push_back(r.ok() ? r.mops() : 0.0);
    if (!r.ok() && b.ok()) b.failure = r.failure;
  }
  return Status::OK();
}

// Each phase's timing becomes that of its median round (the latency histogram stays the first
// round's).
void UseMedianRound(RowResult* row) {
  if (row == nullptr) return;
  for (auto& p : row->phases) {
    if (p.samples.size() < 2 || !p.ok() || p.ops == 0) continue;
    const double m = Median(p.samples);
    if (m > 0) p.seconds = static_cast<double>(p.ops) / (m * 1e6);
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
  if (c->phases.empty()) c->phases = {"insert", "find+", "find-", "erase"};
  for (size_t i = 0; i < c->phases.size(); i++) {
    const std::string& p = c->phases[i];
    static constexpr std::string_view kKnown[] = {"insert", "find+",  "find-",  "update",
                                                  "rmw",    "erase",  "ycsb-a", "ycsb-b",
                                                  "ycsb-c", "ycsb-d", "ycsb-f", "mix"};
    if (p == "ycsb-e") {
      return Status::NotSupported("ycsb-e needs range scans, which hash indexes do not offer");
    }
    Op batch_op;
    uint32_t batch = 0;
    if (ParseBatchPhase(p, &batch_op, &batch)) {
      if (batch == 0) {
        return Status::InvalidArgument("phase '" + p + "': the batch size must be in [1, " +
                                       std::to_string(kMaxBatch) + "]");
      }
    } else if (std::find(std::begin(kKnown), std::end(kKnown), p) == std::end(kKnown)) {
      return Status::InvalidArgument("unknown phase '" + p +
                                     "' (insert, find+, find-, update, erase, rmw, their @B "
                                     "forms but rmw's, ycsb-a|b|c|d|f, mix)");
    }
    const bool batched = p.find('@') != std::string::npos;
    if (i == 0 && p != "insert" && !(batched && p.starts_with("insert@"))) {
      return Status::InvalidArgument("the first phase must be insert (or insert@B)");
    }
    if (i > 0 && p.starts_with("insert")) {
      return Status::InvalidArgument("insert (of every key) must be the first phase only");
    }
    if (p.starts_with("erase") && i + 1 != c->phases.size()) {
      return Status::InvalidArgument("erase (of every key) must be the last phase");
    }
    if (p == "mix" && c->mix.Total() <= 0) {
      return Status::InvalidArgument("phase 'mix' needs --mix OP=WEIGHT,...");
    }
  }
  if (c->latency_every > 1000000) return Status::InvalidArgument("latency sampling too sparse");
  if (c->growth && (c->growth_steps < 1 || c->growth_steps > 100000)) {
    return Status::InvalidArgument("growth steps must be in [1, 100000]");
  }
  for (uint64_t n : c->recovery_keys) {
    if (n == 0 || n > kMaxKeys) return Status::InvalidArgument("recovery key counts in [1, 2^36]");
  }
  if (c->key_bytes != 0 || c->value_bytes != 0) {
    if (c->key_bytes == 0) c->key_bytes = kMinItemBytes;
    if (c->value_bytes == 0) c->value_bytes = kMinItemBytes;
    if (c->key_bytes < kMinItemBytes || c->key_bytes > kMaxItemBytes ||
        c->value_bytes < kMinItemBytes || c->value_bytes > kMaxItemBytes) {
      return Status::InvalidArgument(
          "--key-bytes and --value-bytes must be in [8, 65536] (an item starts with its "
          "generator key or value)");
    }
    if (c->growth || !c->recovery_keys.empty() || !c->dup_datasets.empty()) {
      return Status::InvalidArgument(
          "--key-bytes / --value-bytes apply to the throughput table, not to the growth, "
          "recovery or duplicate-key experiments");
    }
  }
  if (!c->dup_datasets.empty()) {
    const bool any = std::any_of(c->indexes.begin(), c->indexes.end(), [](const std::string& k) {
      auto caps = KindCapabilities(k);
      return caps.ok() && caps.value().multi;
    });
    if (!any) {
      const std::string offer = KindsWith(&Capabilities::multi);
      return Status::NotSupported(
          "the duplicate-key experiment needs a kind with the multi-value API" +
          (offer.empty() ? std::string() : " (these have: " + offer + ")"));
    }
    for (const std::string& d : c->dup_datasets) {
      if (d.empty()) return Status::InvalidArgument("an empty dataset name");
    }
  }
  if (!c->count_keys) c->count_keys = c->table ? c->keys : 0;
  if (*c->count_keys > c->keys) {
    return Status::InvalidArgument("the counting pass cannot use more keys than --keys");
  }
  return Status::OK();
}

Status RunBench(const BenchConfig& config, BenchListener* listener, BenchReport* report,
                const std::vector<std::string>& notes) {
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
  const ItemBytes items{c.key_bytes, c.value_bytes};
  std::vector<std::string> skipped;  // kinds without the bytes API (items.on())
  if (items.on()) {
    std::vector<std::string> runnable;
    for (const auto& index : c.indexes) {
      auto caps = KindCapabilities(index);
      if (!caps.ok()) return caps.status();
      (caps.value().bytes ? runnable : skipped).push_back(index);
    }
    if (runnable.empty()) {
      const std::string offer = KindsWith(&Capabilities::bytes);
      return Status::NotSupported(
          "--key-bytes / --value-bytes: no chosen index kind has variable-size keys" +
          (offer.empty() ? std::string() : " (these have: " + offer + ")"));
    }
    c.indexes = std::move(runnable);
  }
  const size_t total_rows = c.threads.size() * c.indexes.size() * c.durabilities.size();
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
  report->notes = notes;
  if (items.on()) {
    report->notes.push_back("variable-size items: " + std::to_string(items.key) + " B keys, " +
                            std::to_string(items.value) +
                            " B values (the generator's keys expanded), through the bytes API; "
                            "reference absl::flat_hash_map<string,string>");
    for (const auto& index : skipped) {
      report->notes.push_back("kind '" + index + "' skipped: it has no variable-size keys");
    }
  }
  // Multimap kinds: the phases that Update are not applicable (PhaseUpdates).
  std::string updating;
  for (const auto& p : c.phases) {
    if (PhaseUpdates(p, c.mix)) updating += (updating.empty() ? "" : ", ") + p;
  }
  if (!updating.empty()) {
    for (const auto& index : c.indexes) {
      if (!IsMultiKind(index)) continue;
      report->notes.push_back("kind '" + index + "' has several values per key and no Update: " +
                              updating + " not applicable, not run on it (shown as '-')");
    }
  }
  const bool concurrent_reference = !items.on();
  if (c.table && c.reference) {
    bool multi = false;
    for (int t : c.threads) multi |= t > 1;
    if (multi && items.on()) {
      report->notes.push_back(
          "T > 1: no concurrent reference for variable-size items: ratios compare T index "
          "threads with one absl::flat_hash_map<string,string> thread");
    } else if (multi) {
      report->notes.push_back("T > 1: ratios are against " +
                              std::string(kConcurrentReferenceName) +
                              " with the same T threads (absl::flat_hash_map, one thread, is "
                              "shown too)");
    }
  }
  l.OnStart(*report);

  const auto k0 = std::chrono::steady_clock::now();
  const KeySet keys = MakeKeySet(c.keys, c.seed);
  report->key_generation_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - k0).count();

  // Keys of the find+ / update / rmw phases under a skewed distribution (drawn once).
  std::vector<uint64_t> drawn;
  if (c.dist.kind != DistKind::kUniform) drawn = DrawKeys(c.dist, c.keys, keys, c.seed);
  const std::span<const uint64_t> present_keys =
      drawn.empty() ? std::span<const uint64_t>(keys.find_order) : std::span<const uint64_t>(drawn);
  const std::span<const uint64_t> count_keys(keys.insert_order.data(), *c.count_keys);

  size_t row_number = 0;
  for (const int threads : c.threads) {
    if (!c.table) break;
    // Phases for this thread count (mixed phases are generated per thread count).
    std::vector<PhaseSpec> phases;
    std::vector<OpStream> streams;
    streams.reserve(c.phases.size());
    uint64_t fresh_base = 2 * c.keys;
    const uint64_t mixed_ops = c.ops ? c.ops : c.keys;
    for (const std::string& name : c.phases) {
      PhaseSpec p;
      p.name = name;
      if (name == "insert") {
        p = KeyPhase(name, Op::kInsert, keys.insert_order);
      } else if (Op op; ParseBatchPhase(name, &op, &p.batch)) {
        const uint32_t batch = p.batch;
        std::span<const uint64_t> phase_keys = present_keys;
        if (op == Op::kFindMiss) phase_keys = keys.negative_order;
        if (op == Op::kInsert) phase_keys = keys.insert_order;
        if (op == Op::kErase) phase_keys = keys.find_order;
        p = KeyPhase(name, op, phase_keys);
        p.batch = batch;
      } else if (name == "find+") {
        p = KeyPhase(name, Op::kFindHit, present_keys);
      } else if (name == "find-") {
        p = KeyPhase(name, Op::kFindMiss, keys.negative_order);
      } else if (name == "update") {
        p = KeyPhase(name, Op::kUpdate, present_keys);
      } else if (name == "rmw") {
        p = KeyPhase(name, Op::kReadModifyWrite, present_keys);
      } else if (name == "erase") {
        p = KeyPhase(name, Op::kErase, keys.find_order);
      } else {
        Workload w;
        if (name == "mix") {
          w.name = "mix";
          w.mix = c.mix;
          w.dist = c.dist;
        } else {
          PMHASH_RETURN_IF_ERROR(YcsbWorkload(name, &w));
        }
        streams.push_back(
            GenerateOps(w, mixed_ops, threads, keys, fresh_base, c.seed + streams.size()));
        fresh_base += mixed_ops * static_cast<uint64_t>(threads);
        p.op = Op::kMixed;
        for (const auto& list : streams.back().per_thread) p.mixed.emplace_back(list);
        p.size_delta = streams.back().size_delta;
      }
      phases.push_back(std::move(p));
      if (phases.size() == 1 && c.warmup_ops > 0) {
        PhaseSpec w = KeyPhase(
            "warmup", Op::kFindHit,
            std::span<const uint64_t>(keys.find_order).first(std::min(c.warmup_ops, c.keys)));
        w.warmup = true;
        phases.push_back(std::move(w));
      }
    }
    // The same phases without those that Update, for the multimap kinds.
    std::vector<PhaseSpec> multi_phases;
    for (const PhaseSpec& p : phases) {
      if (!PhaseUpdates(p.name, c.mix)) multi_phases.push_back(p);
    }
    TableResult table;
    table.threads = threads;
    const RunnerOptions ro{threads, c.pin, c.latency_every};
    std::vector<std::vector<double>> probe_rounds;  // per persist limit: Mops/s of every round
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
            probe_rounds.emplace_back();
          }
          probe_rounds[slot].push_back(p.failure.ok() ? p.mops() : 0.0);
          slot++;
        }
      }
      if (c.reference) {
        const std::string prefix = tag + "absl: ";
        RowResult ref = RunReferenceRow(
            phases, ro, [&](std::string_view what) { l.OnProgress(prefix + std::string(what)); },
            items, c.huge_pages);
        if (rep == 0) {
          table.reference = std::move(ref);
          StartSamples(&*table.reference);
        } else {
          PMHASH_RETURN_IF_ERROR(AddRound(&*table.reference, ref));
        }
      }
      const bool any_multi =
          std::any_of(c.threads.begin(), c.threads.end(), [](int t) { return t > 1; });
      if (c.reference && any_multi && concurrent_reference) {
        const std::string prefix = tag + std::string(kConcurrentReferenceName) + ": ";
        RowResult ref = RunConcurrentReferenceRow(
            phases, ro, [&](std::string_view what) { l.OnProgress(prefix + std::string(what)); });
        if (rep == 0) {
          table.concurrent_reference = std::move(ref);
          StartSamples(&*table.concurrent_reference);
        } else {
          PMHASH_RETURN_IF_ERROR(AddRound(&*table.concurrent_reference, ref));
        }
      }
      // Rows in order in even rounds, in reverse in odd ones (the samples still go to each row's
      // slot): a row's place in the round biases it (pools created one after another in one
      // file; `--index pea,pea,pea`: the first row's splits took 17% less time), so over an
      // even number of rounds every row has each place equally often.
      std::vector<std::pair<size_t, Durability>> order;
      for (size_t x = 0; x < c.indexes.size(); x++) {
        for (const Durability d : c.durabilities) order.emplace_back(x, d);
      }
      for (size_t n = 0; n < order.size(); n++) {
        const size_t slot = rep % 2 == 0 ? n : order.size() - 1 - n;
        const std::string& index = c.indexes[order[slot].first];
        const Durability d = order[slot].second;
        RowConfig rc;
        rc.index = index;
        rc.durability = d;
        rc.options.path = main_file->path();
        rc.options.mode = OpenMode::kOpenOrCreate;  // the file is empty: a new pool
        rc.options.pool_size = c.pool_size ? c.pool_size : PoolBytes(index, c.keys, items);
        // Pools get a random hash seed by default; a benchmark derives it from its own seed,
        // so a run (and its printed seed) is reproducible.
        rc.options.hash_seed = c.seed * 0x9E3779B97F4A7C15ULL + 1;
        rc.options.huge_pages = c.huge_pages;
        rc.options.media_block_bytes = c.media_block_bytes;
        rc.options.media_cache_bytes = c.media_cache_bytes;
        ApplyKindOptions(c, &rc.options);
        rc.runner = ro;
        rc.phases = IsMultiKind(index) ? std::span<const PhaseSpec>(multi_phases)
                                       : std::span<const PhaseSpec>(phases);
        rc.check = c.check;
        rc.items = items;
        if (count_file && rep == 0) {
          rc.count_path = count_file->path();
          rc.count_pool_size =
              c.pool_size ? c.pool_size : PoolBytes(index, count_keys.size(), items);
          rc.count_keys = count_keys;
        }
        row_number++;
        const std::string prefix = "[row " + std::to_string(row_number) + "/" +
                                   std::to_string(total_rows * static_cast<size_t>(c.repeat)) +
                                   "] " + tag + index + "/" + std::string(DurabilityName(d)) +
                                   ": ";
        rc.progress = [&](std::string_view what) { l.OnProgress(prefix + std::string(what)); };

        PMHASH_RETURN_IF_ERROR(main_file->Truncate());
        if (count_file) PMHASH_RETURN_IF_ERROR(count_file->Truncate());
        RowResult row = RunIndexRow(rc);
        // An estimated pool too small for an index the estimate does not know well: retry
        // with a larger (sparse) file.
        for (int attempt = 0; attempt < 3 && !c.pool_size && row.error.IsOutOfSpace();
             attempt++) {
          rc.options.pool_size *= 4;
          rc.count_pool_size *= 4;
          PMHASH_RETURN_IF_ERROR(main_file->Truncate());
          if (count_file) PMHASH_RETURN_IF_ERROR(count_file->Truncate());
          row = RunIndexRow(rc);
        }
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
          PMHASH_RETURN_IF_ERROR(AddRound(&table.rows[slot], row));
          table.rows[slot].kept_pool = row.kept_pool;
        }
      }
    }
    if (c.repeat > 1) {
      if (table.reference) UseMedianRound(&*table.reference);
      if (table.concurrent_reference) UseMedianRound(&*table.concurrent_reference);
      for (auto& row : table.rows) UseMedianRound(&row);
      for (size_t i = 0; i < table.persist_limits.size(); i++) {
        PersistProbeResult& p = table.persist_limits[i];
        const double m = Median(probe_rounds[i]);
        if (p.failure.ok() && m > 0) p.seconds = static_cast<double>(p.ops) / (m * 1e6);
      }
    }
    l.OnTable(*report, table);
    report->tables.push_back(std::move(table));
  }
  if (c.growth) {
    for (Series& s : RunGrowth(c, keys, main_file.get(), &l)) {
      l.OnSeries(*report, s);
      report->series.push_back(std::move(s));
    }
  }
  if (!c.recovery_keys.empty()) {
    for (Series& s : RunRecovery(c, main_file.get(), &l)) {
      l.OnSeries(*report, s);
      report->series.push_back(std::move(s));
    }
  }
  if (!c.dup_datasets.empty()) {
    for (Series& s : RunDuplicates(c, main_file.get(), &l)) {
      l.OnSeries(*report, s);
      report->series.push_back(std::move(s));
    }
  }
  if (c.keep_pool && total_rows == 1) main_file->Keep();
  return Status::OK();
}

}  // namespace pmhash::bench
