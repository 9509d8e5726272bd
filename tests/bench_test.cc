// bench_test: the benchmark harness's own parts — key distributions (shape checked
// statistically), mixed operation streams (valid in any order), the latency histogram
// (percentiles against a sorted array), the JSON report (parsed by python3, schema fields), and
// end-to-end runs of every registered kind (multimap kinds: the phases that update left out), and
// the duplicate-key experiment.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bytes_table.h"
#include "bench/driver.h"
#include "bench/histogram.h"
#include "bench/keys.h"
#include "bench/pages.h"
#include "bench/pool_files.h"
#include "bench/presets.h"
#include "bench/reference.h"
#include "bench/report.h"
#include "bench/runner.h"
#include "bench/workload.h"
#include "pm/pool.h"

namespace pmhash::bench {
namespace {

double ExactPercentile(std::vector<uint64_t> v, double q) {
  std::sort(v.begin(), v.end());
  const auto rank = std::max<size_t>(1, static_cast<size_t>(std::ceil(q * v.size())));
  return static_cast<double>(v[rank - 1]);
}

TEST(Histogram, BucketsCoverTheirValues) {
  SplitMix64 rng(3);
  for (int i = 0; i < 100000; i++) {
    const uint64_t v = rng.Next() >> rng.Below(64);
    const int b = LatencyHistogram::BucketOf(v);
    ASSERT_GE(b, 0);
    ASSERT_LT(b, LatencyHistogram::kBuckets);
    const auto [lo, hi] = LatencyHistogram::BucketRange(b);
    ASSERT_LE(lo, v);
    ASSERT_GE(hi, v);
    ASSERT_LE(hi - lo, std::max<uint64_t>(lo / 16, 0)) << v;
  }
  EXPECT_EQ(LatencyHistogram::BucketOf(UINT64_MAX), LatencyHistogram::kBuckets - 1);
}

TEST(Histogram, PercentilesMatchSortedArray) {
  std::mt19937_64 gen(11);
  std::lognormal_distribution<double> lat(5.5, 1.0);  // median ~245 ns, long tail
  std::vector<uint64_t> all;
  LatencyHistogram merged;
  for (int t = 0; t < 4; t++) {  // per-thread histograms, merged
    LatencyHistogram h;
    for (int i = 0; i < 50000; i++) {
      const auto v = static_cast<uint64_t>(lat(gen));
      h.Add(v);
      all.push_back(v);
    }
    merged.Merge(h);
  }
  ASSERT_EQ(merged.count(), all.size());
  for (const double q : {0.0, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0}) {
    const double exact = ExactPercentile(all, q);
    EXPECT_NEAR(merged.Percentile(q), exact, exact / 32 + 1) << "q=" << q;
  }
  EXPECT_EQ(merged.min(), *std::min_element(all.begin(), all.end()));
  EXPECT_EQ(merged.max(), *std::max_element(all.begin(), all.end()));
  double sum = 0;
  for (auto v : all) sum += static_cast<double>(v);
  EXPECT_NEAR(merged.mean(), sum / static_cast<double>(all.size()), 1e-6 * sum);
}

TEST(Histogram, SummarizeDurations) {
  std::vector<uint64_t> v;
  for (uint64_t i = 1; i <= 100; i++) v.push_back(101 - i);
  const DurationSummary s = Summarize(v);
  EXPECT_EQ(s.count, 100u);
  EXPECT_EQ(s.min_ns, 1u);
  EXPECT_EQ(s.p50_ns, 50u);
  EXPECT_EQ(s.p90_ns, 90u);
  EXPECT_EQ(s.p99_ns, 99u);
  EXPECT_EQ(s.max_ns, 100u);
  EXPECT_EQ(s.total_ns, 5050u);
}

// Empirical rank frequencies of `draws` ranks in [0, n).
std::vector<double> Frequencies(const Distribution& d, uint64_t n, int draws) {
  RankGenerator g(d, n);
  SplitMix64 rng(5);
  std::vector<double> f(n);
  for (int i = 0; i < draws; i++) f[g.Next(rng)] += 1.0 / draws;
  return f;
}

TEST(Distributions, ZipfianRankFrequenciesFollowPowerLaw) {
  for (const double theta : {0.5, 0.8, 0.99}) {
    const uint64_t n = 1000;
    const std::vector<double> f = Frequencies({DistKind::kZipfian, theta}, n, 2000000);
    double zeta = 0;
    for (uint64_t i = 1; i <= n; i++) zeta += std::pow(static_cast<double>(i), -theta);
    // Ranks 0 and 1 are exact in Gray's method; the tail is the continuous approximation.
    EXPECT_NEAR(f[0], 1 / zeta, 0.02 / zeta) << theta;
    EXPECT_NEAR(f[1], std::pow(2.0, -theta) / zeta, 0.03 / zeta) << theta;
    // Mass of the top 10% of ranks against the exact law.
    double top = 0, want = 0;
    for (uint64_t r = 0; r < n / 10; r++) {
      top += f[r];
      want += std::pow(static_cast<double>(r + 1), -theta) / zeta;
    }
    EXPECT_NEAR(top, want, 0.03) << theta;
    // Monotone on average: each decile has less mass than the previous one.
    double prev = 2;
    for (int dec = 0; dec < 10; dec++) {
      double m = 0;
      for (uint64_t r = dec * n / 10; r < (dec + 1) * n / 10; r++) m += f[r];
      EXPECT_LT(m, prev) << theta << " decile " << dec;
      prev = m;
    }
  }
}

TEST(Distributions, ZipfianThetaZeroIsUniform) {
  const uint64_t n = 100;
  const std::vector<double> f = Frequencies({DistKind::kZipfian, 0.0}, n, 1000000);
  for (uint64_t r = 0; r < n; r++) EXPECT_NEAR(f[r], 0.01, 0.0015) << r;
}

TEST(Distributions, UniformIsFlat) {
  const uint64_t n = 100;
  const std::vector<double> f = Frequencies({DistKind::kUniform, 0}, n, 1000000);
  for (uint64_t r = 0; r < n; r++) EXPECT_NEAR(f[r], 0.01, 0.0015) << r;
}

TEST(Distributions, SelfSimilarIsEightyTwenty) {
  const uint64_t n = 100000;
  RankGenerator g({DistKind::kSelfSimilar, 0.2}, n);
  SplitMix64 rng(9);
  int in20 = 0, in4 = 0;
  const int draws = 500000;
  for (int i = 0; i < draws; i++) {
    const uint64_t r = g.Next(rng);
    ASSERT_LT(r, n);
    in20 += r < n / 5;
    in4 += r < n / 25;
  }
  EXPECT_NEAR(in20 / static_cast<double>(draws), 0.80, 0.01);  // 80% on 20% of the keys
  EXPECT_NEAR(in4 / static_cast<double>(draws), 0.64, 0.01);   // and recursively: 64% on 4%
}

TEST(Distributions, LatestFavoursRecentInserts) {
  const KeySet ks = MakeKeySet(10000, 1);
  const std::vector<uint64_t> keys = DrawKeys({DistKind::kLatest, 0.99}, 200000, ks, 2);
  int last1pct = 0, newest = 0;
  for (uint64_t k : keys) {
    const auto it = std::find(ks.insert_order.end() - 100, ks.insert_order.end(), k);
    if (it != ks.insert_order.end()) {
      last1pct++;
      newest += it == ks.insert_order.end() - 1;
    }
  }
  double zeta = 0, zeta100 = 0;
  for (int i = 1; i <= 10000; i++) {
    zeta += std::pow(i, -0.99);
    if (i <= 100) zeta100 += std::pow(i, -0.99);
  }
  EXPECT_NEAR(last1pct / 200000.0, zeta100 / zeta, 0.02);
  EXPECT_NEAR(newest / 200000.0, 1 / zeta, 0.01);
}

TEST(Distributions, Parse) {
  Distribution d;
  ASSERT_TRUE(ParseDistribution("zipf:0.5", &d).ok());
  EXPECT_EQ(d.kind, DistKind::kZipfian);
  EXPECT_EQ(d.param, 0.5);
  ASSERT_TRUE(ParseDistribution("selfsimilar", &d).ok());
  EXPECT_EQ(d.param, 0.2);
  EXPECT_FALSE(ParseDistribution("zipf:1.2", &d).ok());
  EXPECT_FALSE(ParseDistribution("normal", &d).ok());
  OpMix m;
  ASSERT_TRUE(ParseMix("find+=90,insert=5,erase=5", &m).ok());
  EXPECT_EQ(m.find_hit, 90);
  EXPECT_FALSE(ParseMix("find+=x", &m).ok());
  EXPECT_FALSE(ParseMix("scan=5", &m).ok());
  Workload w;
  EXPECT_TRUE(YcsbWorkload("ycsb-e", &w).IsNotSupported());
  ASSERT_TRUE(YcsbWorkload("ycsb-d", &w).ok());
  EXPECT_EQ(w.dist.kind, DistKind::kLatest);
}

// Every generated stream is valid when its threads' lists run one after another; the mix
// ratios and the size change are as asked.
TEST(Workloads, MixedStreamsAreValidAndProportioned) {
  const KeySet ks = MakeKeySet(20000, 4);
  Workload w;
  ASSERT_TRUE(ParseMix("find+=50,insert=20,erase=10,find-=10,update=5,rmw=5", &w.mix).ok());
  for (const char* dist : {"uniform", "zipf", "selfsimilar", "latest"}) {
    ASSERT_TRUE(ParseDistribution(dist, &w.dist).ok());
    const OpStream s = GenerateOps(w, 40000, 3, ks, 2 * ks.size(), 7);
    ASSERT_EQ(s.ops(), 40000u);
    int counts[8] = {};
    for (const auto& list : s.per_thread) {
      for (const OpKey& o : list) counts[static_cast<int>(o.op)]++;
    }
    EXPECT_NEAR(counts[static_cast<int>(Op::kFindHit)] / 40000.0, 0.5, 0.02) << dist;
    EXPECT_EQ(s.size_delta,
              counts[static_cast<int>(Op::kInsert)] - counts[static_cast<int>(Op::kErase)]);
    AbslReference table;
    for (uint64_t k : ks.insert_order) ASSERT_TRUE(table.Insert(k, ValueOf(k)).ok());
    PhaseSpec p;
    p.name = "mix";
    p.op = Op::kMixed;
    for (const auto& list : s.per_thread) p.mixed.emplace_back(list);
    const PhaseResult r = RunPhase(table, p, RunnerOptions{1, false, 1});
    ASSERT_TRUE(r.ok()) << dist << ": " << r.failure.ToString();
    EXPECT_EQ(r.ops, 40000u);
    EXPECT_EQ(r.latency.count(), 40000u);
    EXPECT_EQ(static_cast<int64_t>(table.Size()), static_cast<int64_t>(ks.size()) + s.size_delta);
  }
}

// The plotting script reads what the writer produces (skipped without matplotlib).
TEST(Report, PlotScriptDrawsEveryFigure) {
  // The script runs under its shebang's interpreter, the Debian python3 with python3-matplotlib.
  if (std::system("/usr/bin/python3 -c 'import matplotlib' 2>/dev/null") != 0) {
    GTEST_SKIP() << "matplotlib not installed (scripts/install-deps --plots)";
  }
  BenchConfig c;
  c.indexes = {"reh"};
  c.keys = 2000;
  c.threads = {1, 2};
  c.growth = true;
  c.growth_steps = 4;
  c.sample_ops = 20;
  c.recovery_keys = {500, 1000};
  c.persist_probe = true;
  BenchReport report;
  ASSERT_TRUE(RunBench(c, nullptr, &report).ok());
  BenchConfig dup;  // the duplicates figure: its own run (the experiment needs a multi kind)
  dup.indexes = {"pea-multi"};
  dup.keys = 2000;
  dup.table = false;
  dup.dup_datasets = {"zipf:0", "zipf:0.8"};
  BenchReport dup_report;
  ASSERT_TRUE(RunBench(dup, nullptr, &dup_report).ok());
  for (Series& s : dup_report.series) report.series.push_back(std::move(s));
  report.config.dup_datasets = dup.dup_datasets;
  char dir[] = "/tmp/pmhash-plot-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string json = std::string(dir) + "/r.json";
  ASSERT_TRUE(WriteFile(json, ToJson(report)).ok());
  const std::string cmd =
      std::string(PMHASH_SOURCE_DIR) + "/scripts/plot " + json + " -o " + dir + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (const char* fig :
       {"throughput", "threads", "latency-cdf", "write-amp", "growth", "utility", "recovery",
        "duplicates"}) {
    const std::string png = std::string(dir) + "/r-" + fig + ".png";
    std::ifstream f(png, std::ios::binary);
    char magic[4] = {};
    f.read(magic, 4);
    EXPECT_TRUE(f && magic[1] == 'P' && magic[2] == 'N' && magic[3] == 'G') << png;
    unlink(png.c_str());
  }
  unlink(json.c_str());
  rmdir(dir);
}

TEST(Report, JsonParsesAndHasTheSchemaFields) {
  BenchConfig c;
  c.indexes = {"reh"};
  c.durabilities = {Durability::kAdr, Durability::kDram};
  c.keys = 3000;
  c.threads = {1, 2};
  c.phases = {"insert", "find+", "ycsb-a", "mix", "find-", "erase"};
  ASSERT_TRUE(ParseMix("find+=80,insert=10,erase=10", &c.mix).ok());
  c.latency_every = 4;
  c.warmup_ops = 1000;  // run and checked, absent from the phases below
  c.growth = true;
  c.growth_steps = 5;
  c.sample_ops = 50;
  c.recovery_keys = {2000};
  c.persist_probe = false;
  BenchReport report;
  const Status s = RunBench(c, nullptr, &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report.tables.size(), 2u);
  ASSERT_EQ(report.series.size(), 4u);  // growth: absl + 2 rows; recovery: adr
  const std::string json = ToJson(report);
  EXPECT_NE(json.find("\"schema\": \"pmhash-bench/2\""), std::string::npos);
  char path[] = "/tmp/pmhash-bench-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_TRUE(WriteFile(path, json).ok());
  const std::string check =
      std::string(
          "python3 -c \""
          "import json,sys\n"
          "d=json.load(open(sys.argv[1]))\n"
          "assert d['schema']=='pmhash-bench/2'\n"
          "for k in ['build','machine','config','tables','series','notes']: assert k in d, k\n"
          "for k in ['git_commit','build_type']: assert k in d['build'], k\n"
          "for k in ['cpu_model','flush_instruction']: assert k in d['machine'], k\n"
          "for k in ['seed','keys','threads','phases','distribution','latency_every']: assert k in "
          "d['config'], k\n"
          "t=d['tables'][0]; r=t['rows'][0]\n"
          "assert t['reference']['index']=='absl::flat_hash_map'\n"
          "assert [p['name'] for p in "
          "r['phases']]==['insert','find+','ycsb-a','mix','find-','erase']\n"
          "p=r['phases'][0]\n"
          "for k in ['mops','ratio','ratio_absl','latency']: assert k in p, k\n"
          "for k in ['p50_ns','p90_ns','p99_ns','p999_ns','p9999_ns','max_ns','buckets']: assert k "
          "in p['latency'], k\n"
          "assert r['resize']['count']>0 and 'total_ns' in r['resize']\n"
          "assert 'details' in r['stats'] and r['stats']['pm_bytes']>0\n"
          "assert r['counting']['insert']['write_amplification']>0\n"
          "cr=d['tables'][1]['concurrent_reference']\n"
          "assert cr['index'].startswith('sharded absl::flat_hash_map') and cr['threads']==2\n"
          "assert all(p['error'] is None and p['mops']>0 for p in cr['phases'])\n"
          "g=[s for s in d['series'] if s['experiment']=='growth']\n"
          "assert len(g)==3 and len(g[1]['points'])==5\n"
          "assert 0<g[1]['summary']['average_utility']<=1\n"
          "rc=[s for s in d['series'] if s['experiment']=='recovery'][0]\n"
          "assert rc['points'][0]['crash_recovered']==1\n"
          "assert rc['points'][0]['clean_state_loaded']==1\n"  // reh: the state Close saved
          "q=rc['points'][0]\n"
          "assert q['crash_exact_size_ms']>=q['crash_open_ms']>0 and q['clean_exact_size_ms']>0\n"
          "\" ") +
      path;
  EXPECT_EQ(std::system(check.c_str()), 0) << "python3 check of " << path << " failed";
  unlink(path);
  const std::string csv = ToCsv(report);
  const size_t header_commas = std::count(csv.begin(), csv.begin() + csv.find('\n'), ',');
  size_t line_start = 0;
  while (line_start < csv.size()) {
    const size_t end = csv.find('\n', line_start);
    const std::string line = csv.substr(line_start, end - line_start);
    if (line.find('"') == std::string::npos) {
      EXPECT_EQ(static_cast<size_t>(std::count(line.begin(), line.end(), ',')), header_commas)
          << line;
    }
    line_start = end + 1;
  }
  EXPECT_NE(ToSeriesCsv(report).find("average_utility"), std::string::npos);
}

// Rounds: a phase reports its median round, and a ratio is the median of the per-round ratios,
// never the ratio of two medians taken from different rounds.
TEST(Report, RoundsReportMediansOfPerRoundRatios) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  TableResult t;
  RowResult ref, row;
  PhaseResult rp, p;
  rp.name = p.name = "insert";
  rp.ops = p.ops = 1'000'000;
  rp.samples = {10, 2, 4};  // round 2 of the reference was disturbed
  p.samples = {5, 3, 1};    // per-round ratios 0.5, 1.5, 0.25; medians 3 / 4 = 0.75
  rp.seconds = 1.0 / Median(rp.samples);
  p.seconds = 1.0 / Median(p.samples);
  ref.phases = {rp};
  row.phases = {p};
  t.reference = ref;
  t.rows = {row};
  EXPECT_DOUBLE_EQ(t.Ratio(t.rows[0].phases[0]), 0.5);  // not the ratio of the medians, 0.75
  const auto [lo, hi] = t.RatioSpread(t.rows[0].phases[0]);
  EXPECT_DOUBLE_EQ(lo, 0.25);
  EXPECT_DOUBLE_EQ(hi, 1.5);
  // A single run: the plain ratio of the two timings (here the medians) and no spread.
  t.reference->phases[0].samples.clear();
  t.rows[0].phases[0].samples.clear();
  EXPECT_DOUBLE_EQ(t.Ratio(t.rows[0].phases[0]), 0.75);
  EXPECT_TRUE(std::isnan(t.RatioSpread(t.rows[0].phases[0]).first));
}

// An end-to-end run with rounds: every phase keeps one sample per round, its Mops is their
// median, and the report prints the spread.
TEST(Report, RepeatRunsInterleavedRounds) {
  BenchConfig c;
  c.indexes = {"reh"};
  c.durabilities = {Durability::kDram};
  c.keys = 2000;
  c.repeat = 3;
  c.persist_probe = false;
  c.count_keys = 0;
  BenchReport report;
  const Status s = RunBench(c, nullptr, &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(report.tables.size(), 1u);
  const TableResult& t = report.tables[0];
  ASSERT_TRUE(t.reference);
  ASSERT_EQ(t.rows.size(), 1u);
  for (const PhaseResult& p : t.rows[0].phases) {
    ASSERT_EQ(p.samples.size(), 3u) << p.name;
    EXPECT_NEAR(p.mops(), Median(p.samples), 1e-6 * Median(p.samples)) << p.name;
    const auto [lo, hi] = t.RatioSpread(p);
    EXPECT_LE(lo, t.Ratio(p)) << p.name;
    EXPECT_GE(hi, t.Ratio(p)) << p.name;
  }
  std::ostringstream os;
  WriteTable(os, report, t);
  EXPECT_NE(os.str().find("ratio spread over 3 rounds"), std::string::npos) << os.str();
}

// Rows run in order in even rounds and in reverse in odd ones (a row's place in a round biases
// it); each row's samples still land in its own slot.
TEST(Report, RepeatReversesTheRowsInOddRounds) {
  struct Order : BenchListener {
    std::vector<std::string> starts;  // "run R/2 KIND" at each row's first phase
    void OnProgress(std::string_view what) override {
      for (const char* kind : {"reh/dram: insert", "pea/dram: insert"}) {
        const size_t at = what.find(kind);
        const size_t run = what.find("run ");
        if (at != std::string_view::npos && run != std::string_view::npos) {
          const std::string s = std::string(what.substr(run, 8)) + std::string(kind, 3);
          if (starts.empty() || starts.back() != s) starts.push_back(s);
        }
      }
    }
  } order;
  BenchConfig c;
  c.indexes = {"reh", "pea"};
  c.durabilities = {Durability::kDram};
  c.keys = 2000;
  c.repeat = 2;
  c.reference = false;
  c.persist_probe = false;
  c.count_keys = 0;
  BenchReport report;
  const Status s = RunBench(c, &order, &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(order.starts,
            (std::vector<std::string>{"run 1/2 reh", "run 1/2 pea", "run 2/2 pea", "run 2/2 reh"}));
  const TableResult& t = report.tables.at(0);
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0].index, "reh");
  EXPECT_EQ(t.rows[1].index, "pea");
  for (const RowResult& r : t.rows) {
    for (const PhaseResult& p : r.phases) EXPECT_EQ(p.samples.size(), 2u) << r.index << p.name;
  }
}

// Variable-size items: the expansion keeps the generator's key as its prefix (distinct keys stay
// distinct) and is deterministic.
TEST(BytesItems, ExpansionIsDeterministicAndKeepsTheKey) {
  std::string a, b;
  for (uint32_t n : {8u, 15u, 16u, 30u, 1000u}) {
    ExpandItem(0x0123456789abcdefULL, n, &a);
    ASSERT_EQ(a.size(), n);
    uint64_t prefix = 0;
    std::memcpy(&prefix, a.data(), 8);
    EXPECT_EQ(prefix, 0x0123456789abcdefULL);
    ExpandItem(0x0123456789abcdefULL, n, &b);
    EXPECT_EQ(a, b);
    ExpandItem(0x0123456789abcdeeULL, n, &b);
    EXPECT_NE(a, b);
  }
  ExpandItem(7, 30, &a);
  ExpandItem(7, 15, &b);
  EXPECT_EQ(a.substr(0, 15), b);  // a shorter item is a prefix of a longer one
}

// A tiny TURBO30-style run (15 B keys, 15 B values): only the kinds with the bytes API run,
// the others are named in a note, and the reference uses string keys.
TEST(BytesItems, TinyBytesBench) {
  BenchConfig c;  // every registered kind
  c.durabilities = {Durability::kAdr, Durability::kDram};
  c.keys = 2000;
  c.threads = {1, 2};
  c.phases = {"insert", "find+", "find-", "update", "ycsb-a", "erase"};
  c.key_bytes = 15;
  c.value_bytes = 15;
  c.persist_probe = false;
  BenchReport report;
  const Status s = RunBench(c, nullptr, &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(report.ok());
  // Every kind with the bytes API, in registry order, and no other.
  std::vector<std::string> bytes_kinds;
  for (const IndexInfo& info : RegisteredIndexes()) {
    if (KindCapabilities(info.name).value().bytes) bytes_kinds.emplace_back(info.name);
  }
  ASSERT_GE(bytes_kinds.size(), 2u);
  EXPECT_EQ(report.config.indexes, bytes_kinds);
  for (const char* kind : {"reh", "pea", "turbo"}) {
    const std::string note = std::string("kind '") + kind + "' skipped";
    EXPECT_TRUE(std::any_of(report.notes.begin(), report.notes.end(),
                            [&](const std::string& n) { return n.find(note) == 0; }))
        << note;
  }
  ASSERT_EQ(report.tables.size(), 2u);
  for (const TableResult& t : report.tables) {
    ASSERT_TRUE(t.reference.has_value());
    EXPECT_EQ(t.reference->index, "absl<string,string>");
    EXPECT_FALSE(t.concurrent_reference.has_value());
    ASSERT_EQ(t.rows.size(), 2 * bytes_kinds.size());  // bytes kinds x {adr, dram}
    for (const RowResult& row : t.rows) {
      EXPECT_NE(std::find(bytes_kinds.begin(), bytes_kinds.end(), row.index), bytes_kinds.end())
          << row.index;
      EXPECT_TRUE(row.error.ok()) << row.error.ToString();
      ASSERT_EQ(row.phases.size(), c.phases.size());
      EXPECT_EQ(row.phases[0].ops, c.keys);
      EXPECT_EQ(row.stats->size, c.keys);
      ASSERT_TRUE(row.counting.has_value());
      if (row.durability == "adr") {
        EXPECT_GT(row.counting->insert.write_amplification, 0);
      }
    }
  }
  EXPECT_NE(ToJson(report).find("\"key_bytes\": 15"), std::string::npos);

  // Only kinds without the bytes API: a clear refusal naming the ones that have it.
  BenchConfig none = c;
  none.indexes = {"reh"};
  const Status refused = RunBench(none, nullptr, &report);
  EXPECT_TRUE(refused.IsNotSupported()) << refused.ToString();
  EXPECT_NE(refused.ToString().find("(these have: " + KindsWith(&Capabilities::bytes) + ")"),
            std::string::npos)
      << refused.ToString();

  BenchConfig small = c;
  small.key_bytes = 4;
  EXPECT_TRUE(ResolveConfig(&small).IsInvalidArgument());
  BenchConfig growth = c;
  growth.growth = true;
  EXPECT_TRUE(ResolveConfig(&growth).IsInvalidArgument());
  BenchConfig key_only;
  key_only.key_bytes = 30;
  ASSERT_TRUE(ResolveConfig(&key_only).ok());
  EXPECT_EQ(key_only.value_bytes, 8u);
}

// Every registered kind runs the default phases (insert, find+, find-, erase) through its row,
// the multimap kinds included (one value per key: each phase means what it means for the others).
TEST(Kinds, EveryRegisteredKindRunsTheDefaultPhases) {
  BenchConfig c;  // every registered kind
  c.durabilities = {Durability::kAdr};
  c.keys = 2000;
  c.count_keys = 500;
  c.persist_probe = false;
  c.check = true;
  BenchReport report;
  const Status s = RunBench(c, nullptr, &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(report.tables.size(), 1u);
  const TableResult& t = report.tables[0];
  ASSERT_EQ(t.rows.size(), RegisteredIndexes().size());
  for (const RowResult& row : t.rows) {
    SCOPED_TRACE(row.Label());
    EXPECT_TRUE(row.error.ok()) << row.error.ToString();
    ASSERT_EQ(row.phases.size(), 4u);
    for (const PhaseResult& p : row.phases) {
      EXPECT_TRUE(p.ok()) << p.name << ": " << p.failure.ToString();
      EXPECT_EQ(p.ops, c.keys) << p.name;
    }
    ASSERT_TRUE(row.counting.has_value());
    EXPECT_TRUE(row.counting->failure.ok()) << row.counting->failure.ToString();
  }
  EXPECT_TRUE(report.ok());
}

// --smartht-keys-per-head reaches the pools of both the table rows and the growth experiment
// (smartht-fig9): a higher threshold grows the head array later, so the same keys fill fewer,
// fuller buckets. Deterministic (the key set, the hash seed and the growth rule are).
TEST(Kinds, SmarthtKeysPerHeadRaisesTheLoadFactor) {
  auto run = [](std::optional<double> keys_per_head, double* table_lf, double* growth_lf) {
    BenchConfig c;
    c.indexes = {"smartht"};
    c.durabilities = {Durability::kAdr};
    c.keys = 40000;
    c.pool_size = 8 << 20;  // one head per KiB of pool: 8192 heads, about 5 keys per head
    c.count_keys = 0;
    c.persist_probe = false;
    c.reference = false;
    c.phases = {"insert", "find+"};
    c.growth = true;
    c.growth_steps = 4;
    c.sample_ops = 100;
    c.smartht_keys_per_head = keys_per_head;
    c.background_threads = 0;  // the writers grow the heads: no load factor set by thread timing
    BenchReport report;
    const Status s = RunBench(c, nullptr, &report);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(report.ok());
    ASSERT_EQ(report.tables.size(), 1u);
    ASSERT_EQ(report.tables[0].rows.size(), 1u);
    ASSERT_TRUE(report.tables[0].rows[0].stats.has_value());
    *table_lf = report.tables[0].rows[0].stats->load_factor;
    *growth_lf = NAN;
    for (const Series& g : report.series) {
      if (g.experiment != "growth" || g.index != "smartht") continue;
      for (const NamedValue& v : g.summary) {
        if (v.name == "max_load_factor") *growth_lf = v.value;
      }
    }
  };
  double lf3 = 0, growth3 = 0, lf12 = 0, growth12 = 0;
  run(std::nullopt, &lf3, &growth3);
  run(12.0, &lf12, &growth12);
  ASSERT_FALSE(std::isnan(growth3));
  ASSERT_FALSE(std::isnan(growth12));
  EXPECT_GT(lf12, lf3 + 0.08);
  EXPECT_GT(growth12, growth3 + 0.08);
}

// Batched find phases ("find+@B", "find-@B") run on every kind, one thread and two, with batch
// sizes that are not multiples of each other or of the key count; every result is checked by the
// runner, so a wrong FindBatch answer fails the phase. Malformed sizes are refused.
TEST(Kinds, BatchedFindPhases) {
  BenchConfig c;  // every registered kind
  c.durabilities = {Durability::kAdr};
  c.keys = 3001;
  c.threads = {1, 2};
  c.count_keys = 0;
  c.persist_probe = false;
  c.phases = {"insert", "find+@1", "find+@7", "find+@64", "find-@16", "erase"};
  BenchReport report;
  const Status s = RunBench(c, nullptr, &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(report.tables.size(), 2u);
  for (const TableResult& t : report.tables) {
    ASSERT_EQ(t.rows.size(), RegisteredIndexes().size());
    for (const RowResult& row : t.rows) {
      SCOPED_TRACE(row.Label());
      EXPECT_TRUE(row.error.ok()) << row.error.ToString();
      ASSERT_EQ(row.phases.size(), 6u);
      for (const PhaseResult& p : row.phases) {
        EXPECT_TRUE(p.ok()) << p.name << ": " << p.failure.ToString();
        EXPECT_EQ(p.ops, c.keys) << p.name;
      }
    }
  }
  for (const char* bad : {"find+@0", "find+@", "find-@1025", "find+@x", "rmw@4", "insert@4"}) {
    BenchConfig b = c;
    b.phases = {"insert", bad};
    EXPECT_TRUE(RunBench(b, nullptr, &report).IsInvalidArgument()) << bad;
  }
}

// Batched write phases ("insert@B", "update@B", "erase@B": WriteBatch) on every kind, one thread
// and two; the runner checks every op's status, and the find+ between them every value. A
// multimap leaves the update phases out (no Update). Misplaced ones are refused.
TEST(Kinds, BatchedWritePhases) {
  BenchConfig c;  // every registered kind
  c.durabilities = {Durability::kAdr};
  c.keys = 3001;
  c.threads = {1, 2};
  c.count_keys = 0;
  c.persist_probe = false;
  c.phases = {"insert@7", "update@1", "update@64", "find+", "erase@16"};
  BenchReport report;
  const Status s = RunBench(c, nullptr, &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(report.tables.size(), 2u);
  for (const TableResult& t : report.tables) {
    ASSERT_EQ(t.rows.size(), RegisteredIndexes().size());
    for (const RowResult& row : t.rows) {
      SCOPED_TRACE(row.Label());
      EXPECT_TRUE(row.error.ok()) << row.error.ToString();
      const bool multi = KindCapabilities(row.index).value().multi;
      ASSERT_EQ(row.phases.size(), multi ? 3u : 5u);
      for (const PhaseResult& p : row.phases) {
        EXPECT_TRUE(p.ok()) << p.name << ": " << p.failure.ToString();
        EXPECT_EQ(p.ops, c.keys) << p.name;
      }
      EXPECT_EQ(row.phases.front().name, "insert@7");
      EXPECT_EQ(row.phases.back().name, "erase@16");
    }
  }
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"find+", "insert@4"}, {"insert@4", "erase@4", "find+"},
        {"insert@0"}, {"insert", "update@2000"}}) {
    BenchConfig b = c;
    b.phases = bad;
    EXPECT_TRUE(RunBench(b, nullptr, &report).IsInvalidArgument()) << bad.size() << " phases";
  }
}

// A multimap kind (Capabilities::multi: pea-multi) has no Update: the phases that update (update,
// rmw, the YCSB mixes with updates, a mix with update or rmw) are left out of its rows, with a
// note, and the others run; the unique-key kinds still run every phase.
TEST(Kinds, MultiKindsSkipThePhasesThatUpdate) {
  std::vector<std::string> multi;
  for (const IndexInfo& info : RegisteredIndexes()) {
    if (KindCapabilities(info.name).value().multi) multi.emplace_back(info.name);
  }
  ASSERT_FALSE(multi.empty());
  BenchConfig c;
  c.indexes = multi;
  c.indexes.push_back("pea");
  c.durabilities = {Durability::kAdr, Durability::kDram};
  c.keys = 2000;
  c.threads = {1, 2};
  c.phases = {"insert", "find+", "update", "rmw", "ycsb-a", "ycsb-b", "ycsb-c",
              "ycsb-d", "ycsb-f", "mix",    "find-",  "erase"};
  c.mix.insert = 10;
  c.mix.find_hit = 80;
  c.mix.erase = 10;  // no update: runs on a multimap
  c.persist_probe = false;
  c.count_keys = 0;
  BenchReport report;
  const Status s = RunBench(c, nullptr, &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(report.ok());
  const std::vector<std::string> runnable = {"insert", "find+", "ycsb-c", "ycsb-d",
                                             "mix",    "find-", "erase"};
  for (const std::string& kind : multi) {
    const std::string note = "kind '" + kind +
                             "' has several values per key and no Update: update, rmw, ycsb-a, "
                             "ycsb-b, ycsb-f not applicable";
    EXPECT_TRUE(std::any_of(report.notes.begin(), report.notes.end(),
                            [&](const std::string& n) { return n.find(note) == 0; }))
        << note;
  }
  EXPECT_FALSE(std::any_of(report.notes.begin(), report.notes.end(), [](const std::string& n) {
    return n.find("kind 'pea' has") != std::string::npos;
  }));
  ASSERT_EQ(report.tables.size(), 2u);
  for (const TableResult& t : report.tables) {
    ASSERT_EQ(t.rows.size(), 2 * (multi.size() + 1));
    for (const RowResult& row : t.rows) {
      SCOPED_TRACE(row.Label() + " t=" + std::to_string(t.threads));
      EXPECT_TRUE(row.error.ok()) << row.error.ToString();
      std::vector<std::string> names;
      for (const PhaseResult& p : row.phases) {
        names.push_back(p.name);
        EXPECT_TRUE(p.ok()) << p.name << ": " << p.failure.ToString();
      }
      if (row.index == "pea") {
        EXPECT_EQ(names, c.phases);
      } else {
        EXPECT_EQ(names, runnable);
        EXPECT_EQ(row.Phase("update"), nullptr);
      }
    }
    // The table shows the phases a multimap row did not run as "-".
    std::ostringstream os;
    WriteTable(os, report, t);
    for (const std::string& kind : multi) {
      const std::string table = os.str();
      const size_t at = table.find("\n" + kind + "/adr ");
      ASSERT_NE(at, std::string::npos) << table;
      std::istringstream line(table.substr(at + 1, table.find('\n', at + 1) - at - 1));
      int dashes = 0;
      for (std::string cell; line >> cell;) dashes += cell == "-";
      EXPECT_EQ(dashes, 5) << table;  // update, rmw, ycsb-a, ycsb-b, ycsb-f
    }
  }
  // A mix with updates is not applicable either.
  BenchConfig u = c;
  u.phases = {"insert", "mix"};
  u.mix.update = 5;
  u.indexes = multi;
  u.threads = {1};
  ASSERT_TRUE(RunBench(u, nullptr, &report).ok());
  ASSERT_EQ(report.tables.size(), 1u);
  for (const RowResult& row : report.tables[0].rows) {
    EXPECT_TRUE(row.error.ok()) << row.error.ToString();
    ASSERT_EQ(row.phases.size(), 1u) << row.Label();
    EXPECT_EQ(row.phases[0].name, "insert");
  }
}

// The duplicate-key experiment (bench/duplicates.h): both rows of every multi kind on every
// dataset, their pair and key counts, ratios only in the paper-design row, compactions only there,
// a SNAP file read by path, and clear errors for what cannot run.
TEST(Duplicates, ExperimentRunsBothRowsOnEveryDataset) {
  char path[] = "/tmp/pmhash-edges-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string edges = "# FromNodeId\tToNodeId\n1\t2\n1\t3\n7 1\n\n1 2\n";
  ASSERT_EQ(write(fd, edges.data(), edges.size()), static_cast<ssize_t>(edges.size()));
  close(fd);
  BenchConfig c;
  c.indexes = {"pea-multi", "pea"};  // pea: no multi API, left out of the experiment
  c.durabilities = {Durability::kAdr, Durability::kDram};
  c.keys = 20000;
  c.table = false;
  c.repeat = 2;
  c.dup_datasets = {"zipf:0.8", "wiki-talk", std::string("file:") + path};
  BenchReport report;
  const Status s = RunBench(c, nullptr, &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(report.ok());
  ASSERT_EQ(report.series.size(), 4u);  // (baseline, paper) x 2 durabilities
  for (const Series& se : report.series) {
    SCOPED_TRACE(se.Label());
    EXPECT_EQ(se.experiment, "duplicates");
    EXPECT_TRUE(se.error.ok()) << se.error.ToString();
    const bool baseline = se.index == "pea-multi (baseline)";
    EXPECT_TRUE(baseline || se.index == "pea-multi");
    ASSERT_EQ(se.points.size(), 3u);
    EXPECT_EQ(se.points[0].Get("pairs"), 20000);
    EXPECT_LT(se.points[0].Get("distinct_keys"), 20000);  // skewed: many duplicates
    EXPECT_LE(se.points[1].Get("pairs"), 20000);           // scaled-down wiki-Talk
    EXPECT_GT(se.points[1].Get("pairs"), 19000);
    EXPECT_EQ(se.points[2].Get("pairs"), 4);  // the file: comments and blank lines skipped
    EXPECT_EQ(se.points[2].Get("distinct_keys"), 2);
    for (const SeriesPoint& p : se.points) {
      for (const char* m : {"insert_mops", "search_skew_meps", "search_unique_meps",
                            "erase_meps", "avg_utility"}) {
        EXPECT_GT(p.Get(m), 0) << m;
      }
      EXPECT_LT(p.Get("avg_utility"), 1);
      EXPECT_EQ(p.Has("insert_ratio"), !baseline);
      EXPECT_EQ(p.Has("erase_ratio_max"), !baseline);
    }
    // Compaction is the adaptive design's: never in the baseline, always under skew 0.8.
    if (baseline) {
      EXPECT_EQ(se.points[0].Get("compactions"), 0);
    } else {
      EXPECT_GT(se.points[0].Get("compactions"), 0);
    }
  }
  std::ostringstream text;
  for (const Series& se : report.series) WriteSeries(text, report, se);
  EXPECT_NE(text.str().find("wiki-talk"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("vs baseline: insert"), std::string::npos) << text.str();
  const std::string json = ToJson(report);
  const size_t at = json.find("\"dup_datasets\"");
  ASSERT_NE(at, std::string::npos);
  EXPECT_LT(at, json.find("\"wiki-talk\"", at));
  unlink(path);

  // What cannot run says why.
  BenchConfig bad = c;
  bad.repeat = 1;
  bad.dup_datasets = {"zipf:1.5"};
  ASSERT_TRUE(RunBench(bad, nullptr, &report).ok());
  ASSERT_FALSE(report.series.empty());
  EXPECT_NE(report.series[0].error.ToString().find("skew must be in [0, 1)"), std::string::npos);
  bad.dup_datasets = {std::string("file:") + path};  // removed above
  ASSERT_TRUE(RunBench(bad, nullptr, &report).ok());
  EXPECT_TRUE(report.series[0].error.IsNotFound()) << report.series[0].error.ToString();
  bad.indexes = {"pea"};
  const Status none = RunBench(bad, nullptr, &report);
  EXPECT_TRUE(none.IsNotSupported()) << none.ToString();
  EXPECT_NE(none.ToString().find("multi-value API"), std::string::npos) << none.ToString();
}

// Every listed experiment applies (a preset named in the list but missing from ApplyPreset's
// branches would run as the default table under another name) and is found by its name.
TEST(Presets, EveryPresetApplies) {
  for (const Preset& p : Presets()) {
    SCOPED_TRACE(std::string(p.name));
    BenchConfig c;
    std::vector<std::string> notes;
    bool skip = false;
    ASSERT_TRUE(ApplyPreset(p.name, &c, &notes, &skip).ok());
    EXPECT_EQ(FindPreset(p.name), &p);
    EXPECT_EQ(c.experiment, p.name);
    if (p.name != "default" && !skip) {
      BenchConfig plain;
      EXPECT_TRUE(c.keys != plain.keys || c.threads != plain.threads || c.growth ||
                  !c.recovery_keys.empty() || !c.dup_datasets.empty() || !c.phases.empty())
          << "the preset changes nothing";
    }
  }
  BenchConfig c;
  std::vector<std::string> notes;
  bool skip = false;
  EXPECT_TRUE(ApplyPreset("no-such-figure", &c, &notes, &skip).IsInvalidArgument());
  BenchConfig fig8;
  ASSERT_TRUE(ApplyPreset("smartht-fig8", &fig8, &notes, &skip).ok());
  EXPECT_EQ(fig8.latency_every, 1u);
  BenchConfig fig9;
  ASSERT_TRUE(ApplyPreset("smartht-fig9", &fig9, &notes, &skip).ok());
  EXPECT_TRUE(fig9.growth);
}

// ---- page sizes (bench/pages.h) ----

constexpr char kSmaps[] =
    "7f0000000000-7f0000400000 rw-s 00000000 00:1a 123                 /dev/shm/pool (deleted)\n"
    "Size:               4096 kB\n"
    "Rss:                4096 kB\n"
    "ShmemPmdMapped:     2048 kB\n"
    "VmFlags: rd wr sh mr mw me ms sd hg\n"
    "7f0000400000-7f0000600000 rw-p 00000000 00:00 0 \n"
    "Size:               2048 kB\n"
    "Rss:                1024 kB\n"
    "AnonHugePages:         0 kB\n"
    "VmFlags: rd wr mr mw me ac sd thg\n"
    "55d000000000-55d000100000 r-xp 00000000 08:01 42                  /usr/bin/x\n"
    "Rss:                 100 kB\n"
    "FilePmdMapped:      2048 kB\n"
    "VmFlags: rd ex mr mw me hg\n";

TEST(Pages, ParseSmapsSumsTheMatchingMappings) {
  const PageUse file = ParseSmaps(kSmaps, [](uintptr_t, uintptr_t, std::string_view path) {
    return path == "/dev/shm/pool (deleted)";
  });
  EXPECT_TRUE(file.known);
  EXPECT_EQ(file.resident, 4096u << 10);
  EXPECT_EQ(file.huge, 2048u << 10);
  EXPECT_TRUE(file.advised);

  // The anonymous mapping, by address: "thg" is not the "hg" flag.
  const PageUse anon = ParseSmaps(kSmaps, [](uintptr_t start, uintptr_t, std::string_view path) {
    return start == 0x7f0000400000u && path.empty();
  });
  EXPECT_TRUE(anon.known);
  EXPECT_EQ(anon.resident, 1024u << 10);
  EXPECT_EQ(anon.huge, 0u);
  EXPECT_FALSE(anon.advised);

  const PageUse all =
      ParseSmaps(kSmaps, [](uintptr_t, uintptr_t, std::string_view) { return true; });
  EXPECT_EQ(all.resident, (4096u + 1024u + 100u) << 10);
  EXPECT_EQ(all.huge, (2048u + 2048u) << 10);

  const PageUse none =
      ParseSmaps(kSmaps, [](uintptr_t, uintptr_t, std::string_view) { return false; });
  EXPECT_FALSE(none.known);
  EXPECT_EQ(none.resident, 0u);
}

// Whether this kernel offers transparent huge pages at all (else madvise(MADV_HUGEPAGE) fails).
bool ThpAvailable() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  return std::getline(f, line) && line.find("[never]") == std::string::npos;
}

// Options::huge_pages reaches the kernel: the pool's mapping is advised (its VmFlags show "hg"),
// and only with the option. Whether the kernel then finds 2 MiB pages is its business (memory,
// defrag settings), so that is reported by the benchmark, not asserted here.
TEST(Pages, HugePagesOptionAdvisesThePoolMapping) {
  if (!ThpAvailable()) GTEST_SKIP() << "no transparent huge pages on this kernel";
  const std::string file = DefaultPoolDir() + "/pmhash-pages-test-" + std::to_string(getpid());
  for (const bool anonymous : {true, false}) {
    for (const bool huge : {false, true}) {
      unlink(file.c_str());
      Options o;
      o.path = anonymous ? "" : file;
      o.mode = OpenMode::kCreateExclusive;
      o.durability = Durability::kDram;
      o.pool_size = 8u << 20;
      o.huge_pages = huge;
      pm::PoolSpec spec;
      spec.kind = "reh";
      spec.durability = Durability::kDram;
      auto pool = pm::Pool::Open(o, spec);
      ASSERT_TRUE(pool.ok()) << pool.status().ToString();
      const PageUse use = anonymous ? PagesOfRange((*pool)->base(), (*pool)->size())
                                    : PagesOfFile(file);
      EXPECT_TRUE(use.known) << (anonymous ? "anonymous" : "file");
      EXPECT_EQ(use.advised, huge) << (anonymous ? "anonymous" : "file") << " pool, huge_pages "
                                   << huge;
    }
  }
  unlink(file.c_str());
}

TEST(Pages, ReferenceArrayIsAdvisedWithHugePages) {
  if (!ThpAvailable()) GTEST_SKIP() << "no transparent huge pages on this kernel";
  for (const bool huge : {false, true}) {
    AbslReference table(huge);
    for (uint64_t k = 0; k < 300000; k++) ASSERT_TRUE(table.Insert(k, k).ok());
    const PageUse use = table.Pages();
    EXPECT_TRUE(use.known);
    EXPECT_GE(use.resident, 4u << 20);  // 300k slots of 16 B and their control bytes
    EXPECT_EQ(use.advised, huge);
    Value v = 0;
    ASSERT_TRUE(table.Find(299999, &v).ok());
    EXPECT_EQ(v, 299999u);
  }
}

TEST(Pages, SettingsNameThePoolFileSystemsHugeOption) {
  const std::string s = HugePageSettings(DefaultPoolDir());
  if (ThpAvailable()) {
    EXPECT_NE(s.find("THP "), std::string::npos) << s;
  }
  if (DefaultPoolDir() == "/dev/shm") {
    EXPECT_NE(s.find("pool tmpfs huge="), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace pmhash::bench
