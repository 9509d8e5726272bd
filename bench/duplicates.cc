#include "bench/duplicates.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_set>

#include "bench/experiments.h"
#include "bench/keys.h"
#include "bench/workload.h"

namespace pmhash::bench {

namespace {

struct GraphShape {
  std::string_view name;
  uint64_t nodes, edges;
  double skew;  // of the out-degrees (Zipfian over the nodes)
};
constexpr GraphShape kGraphs[] = {
    {"wiki-talk", 2'394'385, 5'021'410, 0.99},
    {"cit-patents", 3'774'768, 16'518'948, 0.6},
};

// Pairs whose keys are Zipfian ranks (skew `theta`) over `ranks`, scrambled into 64-bit keys.
std::vector<std::pair<Key, Value>> ZipfPairs(uint64_t n, uint64_t ranks, double theta,
                                             uint64_t seed) {
  const ZipfianGenerator zipf(ranks, theta);
  SplitMix64 rng(Mixer::Finalize(seed ^ 0xd0b1e5));
  const Mixer scramble(seed ^ 0x5eed);
  std::vector<std::pair<Key, Value>> pairs(n);
  for (uint64_t i = 0; i < n; i++) pairs[i] = {scramble(zipf.Next(rng)), i};
  return pairs;
}

Status LoadEdgeList(const std::string& path, std::vector<std::pair<Key, Value>>* out) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("dataset file " + path + " cannot be read");
  std::string line;
  uint64_t lineno = 0;
  while (std::getline(in, line)) {
    lineno++;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    uint64_t a = 0, b = 0;
    if (!(ls >> a >> b)) {
      return Status::InvalidArgument(path + ":" + std::to_string(lineno) +
                                     ": expected two integers (source destination)");
    }
    out->emplace_back(a, b);
  }
  if (out->empty()) return Status::InvalidArgument(path + ": no edges");
  return Status::OK();
}

// The figures of one row on one dataset.
struct DupFigures {
  double insert_mops = 0, search_skew_meps = 0, search_unique_meps = 0, erase_meps = 0;
  double avg_utility = 0, pm_bytes = 0, compactions = 0;
  // Counting run only (Options::counters): persistence traffic per pair inserted and per pair
  // erased.
  double insert_fences = 0, insert_lines = 0, erase_fences = 0, erase_lines = 0;
};

Result<DupFigures> RunOnce(const BenchConfig& c, const DupDataset& ds,
                           const std::vector<Key>& skew_keys, const std::vector<Key>& distinct,
                           const std::string& kind, uint32_t adaptive, Durability d,
                           bool count, PoolFile* file) {
  PMHASH_RETURN_IF_ERROR(file->Truncate());
  Options o;
  o.path = file->path();
  o.mode = OpenMode::kOpenOrCreate;
  o.durability = d;
  // Baseline: a 256 B bucket slot and a buffer (>= 64 B) per key; plus slabs per size class.
  o.pool_size = c.pool_size ? c.pool_size : ds.pairs.size() * 200 + (uint64_t{256} << 20);
  o.pea.adaptive_buckets = adaptive;
  o.counters = count;
  auto opened = pmhash::Open(kind, o);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<Index> index = std::move(opened).value();
  MultiApi* mm = index->multi();
  if (!mm) return Status::InvalidArgument(kind + " offers no multi-value API");
  DupFigures f;
  // Insert, with 20 untimed utility samples.
  const uint64_t n = ds.pairs.size();
  double seconds = 0, utility = 0;
  constexpr int kSamples = 20;
  for (int s = 1; s <= kSamples; s++) {
    const uint64_t from = n * (s - 1) / kSamples, to = n * s / kSamples;
    const auto t0 = Clock::now();
    for (uint64_t i = from; i < to; i++) {
      if (Status st = mm->Insert(ds.pairs[i].first, ds.pairs[i].second); !st.ok()) return st;
    }
    seconds += Seconds(t0, Clock::now());
    const IndexStats st = index->Stats();
    if (st.pm_bytes > 0) utility += kPayloadBytes * static_cast<double>(to) / st.pm_bytes;
  }
  f.insert_mops = static_cast<double>(n) / seconds / 1e6;
  f.avg_utility = utility / kSamples;
  const IndexStats st = index->Stats();
  f.insert_fences = static_cast<double>(st.traffic.fences) / n;
  f.insert_lines = static_cast<double>(st.traffic.flushed_lines) / n;
  f.pm_bytes = static_cast<double>(st.pm_bytes);
  for (const NamedStat& x : st.details) {
    if (x.name == "pea.multi.compactions") f.compactions = x.value;
  }
  if (index->Size() != n) {
    return Status::Corruption(kind + ": Size() " + std::to_string(index->Size()) + " after " +
                              std::to_string(n) + " inserts");
  }
  std::vector<Value> vals;
  auto search = [&](const std::vector<Key>& keys, double* meps) -> Status {
    uint64_t entries = 0;
    const auto t0 = Clock::now();
    for (Key k : keys) {
      if (Status s = mm->FindAll(k, &vals); !s.ok()) return s;
      entries += vals.size();
    }
    *meps = static_cast<double>(entries) / Seconds(t0, Clock::now()) / 1e6;
    return Status::OK();
  };
  PMHASH_RETURN_IF_ERROR(search(skew_keys, &f.search_skew_meps));
  PMHASH_RETURN_IF_ERROR(search(distinct, &f.search_unique_meps));
  index->ResetCounters();
  const auto t0 = Clock::now();
  for (Key k : distinct) {
    if (Status s = mm->EraseAll(k); !s.ok()) return s;
  }
  f.erase_meps = static_cast<double>(n) / Seconds(t0, Clock::now()) / 1e6;
  if (index->Size() != 0) return Status::Corruption(kind + ": pairs left after erasing every key");
  const TrafficStats erased = index->Stats().traffic;
  f.erase_fences = static_cast<double>(erased.fences) / n;
  f.erase_lines = static_cast<double>(erased.flushed_lines) / n;
  PMHASH_RETURN_IF_ERROR(index->Close());
  return f;
}

}  // namespace

Result<DupDataset> MakeDupDataset(const std::string& spec, uint64_t pairs, uint64_t seed) {
  DupDataset ds;
  ds.name = spec;
  if (spec.rfind("zipf:", 0) == 0) {
    double theta = 0;
    const std::string v = spec.substr(5);
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), theta);
    if (ec != std::errc() || p != v.data() + v.size() || theta < 0 || theta >= 1) {
      return Status::InvalidArgument("dataset " + spec + ": the skew must be in [0, 1)");
    }
    ds.pairs = ZipfPairs(pairs, pairs, theta, seed);
  } else if (spec.rfind("file:", 0) == 0) {
    PMHASH_RETURN_IF_ERROR(LoadEdgeList(spec.substr(5), &ds.pairs));
  } else {
    const GraphShape* g = nullptr;
    for (const GraphShape& x : kGraphs) {
      if (x.name == spec) g = &x;
    }
    if (!g) {
      return Status::InvalidArgument("unknown dataset '" + spec +
                                     "' (zipf:S, wiki-talk, cit-patents, file:PATH)");
    }
    const double scale = std::min(1.0, static_cast<double>(pairs) / g->edges);
    const uint64_t nodes = std::max<uint64_t>(1, static_cast<uint64_t>(g->nodes * scale));
    const uint64_t edges = std::max<uint64_t>(1, static_cast<uint64_t>(g->edges * scale));
    ds.pairs = ZipfPairs(edges, nodes, g->skew, seed);
    // Destinations: other nodes (any; the index does not care which).
    SplitMix64 rng(seed ^ 0xde57);
    for (auto& e : ds.pairs) e.second = rng.Below(nodes);
  }
  std::unordered_set<Key> seen;
  seen.reserve(ds.pairs.size());
  for (const auto& e : ds.pairs) {
    if (seen.insert(e.first).second) ds.keys.push_back(e.first);
  }
  Shuffle(ds.keys, Mixer::Finalize(seed ^ 0x5ea7c4));
  return ds;
}

std::vector<Series> RunDuplicates(const BenchConfig& c, PoolFile* file, BenchListener* l) {
  std::vector<Series> out;
  std::vector<std::string> kinds;
  for (const std::string& k : c.indexes) {
    auto caps = KindCapabilities(k);
    if (caps.ok() && caps.value().multi) kinds.push_back(k);
  }
  for (const std::string& kind : kinds) {
    for (Durability d : c.durabilities) {
      Series paper, base;
      paper.experiment = base.experiment = "duplicates";
      paper.index = kind;
      base.index = kind + " (baseline)";
      paper.durability = base.durability = std::string(DurabilityName(d));
      for (size_t di = 0; di < c.dup_datasets.size(); di++) {
        const std::string& spec = c.dup_datasets[di];
        if (l) l->OnProgress(kind + ": dataset " + spec);
        auto made = MakeDupDataset(spec, c.keys, c.seed);
        if (!made.ok()) {
          paper.error = base.error = made.status();
          break;
        }
        const DupDataset& ds = made.value();
        // Search keys: drawn like the inserts (skew search); every key once is ds.keys.
        SplitMix64 rng(Mixer::Finalize(c.seed ^ 0x5ea7c4));
        std::vector<Key> skew_keys(std::max<size_t>(1, ds.pairs.size() / 4));
        for (Key& k : skew_keys) k = ds.pairs[rng.Below(ds.pairs.size())].first;
        const std::vector<Key>& distinct = ds.keys;
        std::vector<DupFigures> rounds[2];  // [0] baseline, [1] paper design
        DupFigures counted[2];              // an untimed run of each with the traffic counters
        Status err;
        for (uint32_t adaptive : {0u, 1u}) {
          if (l) l->OnProgress(kind + " " + spec + ": counting pass");
          auto f = RunOnce(c, ds, skew_keys, distinct, kind, adaptive, d, true, file);
          if (!f.ok()) {
            err = f.status();
            break;
          }
          counted[adaptive] = f.value();
        }
        for (int r = 0; r < std::max(1, c.repeat) && err.ok(); r++) {
          for (uint32_t adaptive : {0u, 1u}) {
            if (l) {
              l->OnProgress(kind + (adaptive ? "" : " (baseline)") + " " + spec + " round " +
                            std::to_string(r + 1));
            }
            auto f = RunOnce(c, ds, skew_keys, distinct, kind, adaptive, d, false, file);
            if (!f.ok()) {
              err = f.status();
              break;
            }
            rounds[adaptive].push_back(f.value());
          }
        }
        if (!err.ok()) {
          paper.error = base.error = err;
          break;
        }
        auto point = [&](const std::vector<DupFigures>& fs, const DupFigures& cnt,
                         bool with_ratios) {
          SeriesPoint p;
          auto med = [&](double DupFigures::*m) {
            std::vector<double> v;
            for (const DupFigures& f : fs) v.push_back(f.*m);
            return Median(v);
          };
          p.values.push_back({"dataset", static_cast<double>(di)});
          p.values.push_back({"pairs", static_cast<double>(ds.pairs.size())});
          p.values.push_back({"distinct_keys", static_cast<double>(ds.keys.size())});
          p.values.push_back({"insert_mops", med(&DupFigures::insert_mops)});
          p.values.push_back({"search_skew_meps", med(&DupFigures::search_skew_meps)});
          p.values.push_back({"search_unique_meps", med(&DupFigures::search_unique_meps)});
          p.values.push_back({"erase_meps", med(&DupFigures::erase_meps)});
          p.values.push_back({"avg_utility", med(&DupFigures::avg_utility)});
          p.values.push_back({"pm_bytes", med(&DupFigures::pm_bytes)});
          p.values.push_back({"compactions", med(&DupFigures::compactions)});
          p.values.push_back({"insert_fences_per_pair", cnt.insert_fences});
          p.values.push_back({"insert_lines_per_pair", cnt.insert_lines});
          p.values.push_back({"erase_fences_per_pair", cnt.erase_fences});
          p.values.push_back({"erase_lines_per_pair", cnt.erase_lines});
          if (with_ratios) {
            // Per-round ratios to the baseline of the same round: median, min, max.
            for (auto [name, m] : {std::pair{"insert", &DupFigures::insert_mops},
                                   std::pair{"search_skew", &DupFigures::search_skew_meps},
                                   std::pair{"search_unique", &DupFigures::search_unique_meps},
                                   std::pair{"erase", &DupFigures::erase_meps}}) {
              std::vector<double> ratios;
              for (size_t r = 0; r < fs.size(); r++) ratios.push_back(fs[r].*m / rounds[0][r].*m);
              p.values.push_back({std::string(name) + "_ratio", Median(ratios)});
              p.values.push_back({std::string(name) + "_ratio_min",
                                  *std::min_element(ratios.begin(), ratios.end())});
              p.values.push_back({std::string(name) + "_ratio_max",
                                  *std::max_element(ratios.begin(), ratios.end())});
            }
          }
          return p;
        };
        base.points.push_back(point(rounds[0], counted[0], false));
        paper.points.push_back(point(rounds[1], counted[1], true));
      }
      out.push_back(std::move(base));
      out.push_back(std::move(paper));
    }
  }
  return out;
}

}  // namespace pmhash::bench
