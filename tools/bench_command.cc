// tools/bench_command.cc — `pmhash bench`: the only translation unit of the tool that uses the
// benchmark library (bench/, target pmhash_bench). tools/CMakeLists.txt states the rule; the
// option table and help text of the subcommand stay in pmhash.cc with the other commands'.
#include "tools/bench_command.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "bench/driver.h"
#include "bench/pool_files.h"
#include "bench/presets.h"
#include "bench/report.h"
#include "bench/targets.h"
#include "pmhash/pmhash.h"
#include "tools/exit_status.h"

namespace pmhash::cli {
namespace {

void OnFatalSignal(int sig) {
  bench::RemoveRegisteredPoolFilesForSignal();
  signal(sig, SIG_DFL);
  raise(sig);
}

class CliListener final : public bench::BenchListener {
 public:
  explicit CliListener(bool progress) : progress_(progress) {}
  ~CliListener() override { ClearLine(); }
  void OnStart(const bench::BenchReport& r) override {
    start_ = std::chrono::steady_clock::now();
    bench::WriteBanner(std::cout, r);
    std::cout.flush();
  }
  // A one-line status on stderr (a TTY only), rewritten in place with the elapsed time.
  void OnProgress(std::string_view what) override {
    if (!progress_) return;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    char t[32];
    std::snprintf(t, sizeof(t), "[%5.0fs] ", s);
    std::string line = t + std::string(what);
    if (line.size() > 100) line.resize(100);
    std::cerr << "\r\033[K" << line << std::flush;
    shown_ = true;
  }
  void OnTable(const bench::BenchReport& r, const bench::TableResult& t) override {
    ClearLine();
    bench::WriteTable(std::cout, r, t);
    std::cout.flush();
  }
  void OnSeries(const bench::BenchReport& r, const bench::Series& s) override {
    ClearLine();
    bench::WriteSeries(std::cout, r, s);
    std::cout.flush();
  }

 private:
  void ClearLine() {
    if (shown_) std::cerr << "\r\033[K" << std::flush;
    shown_ = false;
  }
  bool progress_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The file name with `suffix` before its extension.
std::string Suffixed(const std::string& path, const std::string& suffix) {
  const size_t dot = path.rfind('.');
  const size_t slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) {
    return path + suffix;
  }
  return path.substr(0, dot) + suffix + path.substr(dot);
}

int RunAndWrite(const bench::BenchConfig& c, const std::vector<std::string>& notes,
                bench::BenchListener* listener, std::optional<std::string> json,
                std::optional<std::string> csv, const std::string& suffix) {
  if (json) json = Suffixed(*json, suffix);
  if (csv) csv = Suffixed(*csv, suffix);
  bench::BenchReport report;
  if (Status s = bench::RunBench(c, listener, &report, notes); !s.ok()) return Fail(s);
  int rc = report.ok() ? kExitOk : kExitFailed;
  if (json) {
    if (Status s = bench::WriteFile(*json, bench::ToJson(report)); !s.ok()) rc = Fail(s);
  }
  if (csv) {
    if (Status s = bench::WriteFile(*csv, bench::ToCsv(report)); !s.ok()) rc = Fail(s);
    if (!report.series.empty()) {
      std::string series = *csv;
      if (series.size() > 4 && series.substr(series.size() - 4) == ".csv")
        series.resize(series.size() - 4);
      series += "-series.csv";
      if (Status s = bench::WriteFile(series, bench::ToSeriesCsv(report)); !s.ok()) rc = Fail(s);
    }
  }
  return rc;
}

}  // namespace

int BenchMain(const ParsedArgs& args) {
  if (!args.positional.empty()) {
    return Usage(Status::InvalidArgument("unexpected argument '" + args.positional[0] +
                                         "' (see 'pmhash bench --help')"));
  }
  bench::BenchConfig c;
  std::vector<std::string> notes;
  bool skip = false;
  if (auto v = args.Value("index"); v && *v == "list") {
    // Which code runs each registered index's rows: the template fast path (the engine's own
    // methods, no virtual call) for the modes shown, else the pmhash::Open facade.
    for (const auto& info : RegisteredIndexes()) {
      std::string modes;
      for (Durability d : {Durability::kAdr, Durability::kEadr, Durability::kDram}) {
        if (!bench::FindTemplateTarget(info.name, d)) continue;
        if (!modes.empty()) modes += ',';
        modes += DurabilityName(d);
      }
      std::string n(info.name);
      n.resize(16, ' ');
      std::cout << n
                << (modes.empty() ? "facade (virtual calls)" : "template fast path (" + modes + ")")
                << "\n";
    }
    return kExitOk;
  }
  if (auto v = args.Value("experiment"); v && *v == "list") {
    for (const auto& p : bench::Presets()) {
      std::string n(p.name);
      n.resize(16, ' ');
      std::cout << n << p.paper_figure << ": " << p.description;
      if (p.paper_keys) std::cout << " [paper: " << p.paper_keys / 1000000 << "M keys]";
      std::cout << "\n";
    }
    return kExitOk;
  }
  auto parse = [&]() -> Status {
    if (auto v = args.Value("experiment")) {
      PMHASH_RETURN_IF_ERROR(bench::ApplyPreset(*v, &c, &notes, &skip));
      if (skip) return Status::OK();
    }
    if (auto v = args.Value("index"); v && *v != "all") {
      PMHASH_RETURN_IF_ERROR(SplitList(*v, "--index", &c.indexes));
    }
    if (auto v = args.Value("durability")) {
      c.durabilities.clear();
      std::vector<std::string> names;
      PMHASH_RETURN_IF_ERROR(SplitList(*v, "--durability", &names));
      for (const auto& n : names) {
        if (n == "all") {
          for (Durability d : {Durability::kAdr, Durability::kEadr, Durability::kDram}) {
            c.durabilities.push_back(d);
          }
          continue;
        }
        Durability d;
        if (n == "sim" || !ParseDurability(n, &d)) {
          return Status::InvalidArgument("invalid durability '" + n +
                                         "': expected adr, eadr, dram or all");
        }
        c.durabilities.push_back(d);
      }
      // Keep the first occurrence of each mode.
      std::vector<Durability> unique;
      for (Durability d : c.durabilities) {
        if (std::find(unique.begin(), unique.end(), d) == unique.end()) unique.push_back(d);
      }
      c.durabilities = unique;
    }
    if (auto v = args.Value("keys")) PMHASH_RETURN_IF_ERROR(ParseCount(*v, "--keys", &c.keys));
    if (args.Has("paper-size")) {
      const bench::Preset* p =
          args.Value("experiment") ? bench::FindPreset(*args.Value("experiment")) : nullptr;
      if (!p || p->paper_keys == 0 || args.Has("keys")) {
        return Status::InvalidArgument(
            "--paper-size needs an --experiment with a paper size (see --experiment list) and "
            "no --keys");
      }
      c.keys = p->paper_keys;
    }
    if (auto v = args.Value("threads")) {
      PMHASH_RETURN_IF_ERROR(ParseIntList(*v, "--threads", 1, 1024, &c.threads));
    }
    if (auto v = args.Value("seed")) PMHASH_RETURN_IF_ERROR(ParseU64(*v, "--seed", &c.seed));
    if (auto v = args.Value("pool")) {
      if (v->empty()) return Status::InvalidArgument("--pool needs a path");
      c.pool_path = *v;
    }
    if (args.Has("keep-pool")) c.keep_pool = true;
    if (auto v = args.Value("pool-size")) {
      PMHASH_RETURN_IF_ERROR(ParseSize(*v, "--pool-size", &c.pool_size));
      if (c.pool_size == 0) return Status::InvalidArgument("--pool-size must be positive");
    }
    if (args.Has("pin")) c.pin = true;
    if (args.Has("huge-pages")) c.huge_pages = true;
    if (auto v = args.Value("media-block")) {
      uint64_t n = 0;
      PMHASH_RETURN_IF_ERROR(ParseSize(*v, "--media-block", &n));
      if (n < 64 || n > 65536 || !std::has_single_bit(n)) {
        return Status::InvalidArgument("--media-block must be a power of two in [64, 64K]");
      }
      c.media_block_bytes = static_cast<uint32_t>(n);
    }
    if (auto v = args.Value("media-cache")) {
      PMHASH_RETURN_IF_ERROR(ParseSize(*v, "--media-cache", &c.media_cache_bytes));
    }
    if (auto v = args.Value("elimda-logs")) {
      std::vector<std::string> items;
      PMHASH_RETURN_IF_ERROR(SplitList(*v, "--elimda-logs", &items));
      c.elimda_logs.clear();
      for (const auto& item : items) {
        uint64_t n = 0;
        PMHASH_RETURN_IF_ERROR(ParseCount(item, "--elimda-logs", &n));
        if (n < 1 || n > (uint64_t{1} << 20) || !std::has_single_bit(n)) {
          return Status::InvalidArgument("--elimda-logs: each must be a power of two in [1, 2^20]");
        }
        c.elimda_logs.push_back(static_cast<uint32_t>(n));
      }
    }
    if (auto v = args.Value("elimda-batch")) {
      uint64_t n = 0;
      PMHASH_RETURN_IF_ERROR(ParseCount(*v, "--elimda-batch", &n));
      if (n > (uint64_t{1} << 20)) return Status::InvalidArgument("--elimda-batch: at most 2^20");
      c.elimda_batch = static_cast<uint32_t>(n);
    }
    if (auto v = args.Value("elimda-writer-logs")) {
      if (*v != "0" && *v != "1") return Status::InvalidArgument("--elimda-writer-logs: 0 or 1");
      c.elimda_writer_logs = *v == "1" ? 1u : 0u;
    }
    if (auto v = args.Value("smartht-keys-per-head")) {
      double x = 0;
      const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), x);
      if (ec != std::errc() || end != v->data() + v->size() || !(x >= 1.0 && x <= 1024.0)) {
        return Status::InvalidArgument("--smartht-keys-per-head: a number in [1, 1024]");
      }
      c.smartht_keys_per_head = x;
    }
    if (auto v = args.Value("background-threads")) {
      uint64_t n = 0;
      PMHASH_RETURN_IF_ERROR(ParseCount(*v, "--background-threads", &n));
      if (n > 64) return Status::InvalidArgument("--background-threads: at most 64");
      c.background_threads = static_cast<uint32_t>(n);
    }
    if (args.Has("no-reference")) c.reference = false;
    if (auto v = args.Value("count-keys")) {
      uint64_t n = 0;
      PMHASH_RETURN_IF_ERROR(ParseCount(*v, "--count-keys", &n));
      c.count_keys = n;
    }
    if (args.Has("check")) c.check = true;
    if (args.Has("no-probe")) c.persist_probe = false;
    for (const auto& [flag, field] : {std::pair{"key-bytes", &c.key_bytes},
                                      std::pair{"value-bytes", &c.value_bytes}}) {
      if (auto v = args.Value(flag)) {
        uint64_t n = 0;
        PMHASH_RETURN_IF_ERROR(ParseU64(*v, std::string("--") + flag, &n));
        *field = static_cast<uint32_t>(std::min<uint64_t>(n, UINT32_MAX));  // range: ResolveConfig
      }
    }
    if (auto v = args.Value("repeat")) {
      uint64_t r = 0;
      PMHASH_RETURN_IF_ERROR(ParseU64(*v, "--repeat", &r));
      if (r < 1 || r > 100) return Status::InvalidArgument("--repeat must be in [1, 100]");
      c.repeat = static_cast<int>(r);
    }
    if (args.Has("phases") && args.Has("workload")) {
      return Status::InvalidArgument("give --phases or --workload, not both");
    }
    if (auto v = args.Value("phases")) PMHASH_RETURN_IF_ERROR(SplitList(*v, "--phases", &c.phases));
    if (auto v = args.Value("workload")) {
      std::vector<std::string> w;
      PMHASH_RETURN_IF_ERROR(SplitList(*v, "--workload", &w));
      c.phases = {"insert"};
      c.phases.insert(c.phases.end(), w.begin(), w.end());
    }
    if (auto v = args.Value("mix")) {
      PMHASH_RETURN_IF_ERROR(bench::ParseMix(*v, &c.mix));
      if (!args.Has("phases") && !args.Has("workload")) c.phases = {"insert", "mix"};
    }
    if (auto v = args.Value("dist")) PMHASH_RETURN_IF_ERROR(bench::ParseDistribution(*v, &c.dist));
    if (auto v = args.Value("warmup")) {
      PMHASH_RETURN_IF_ERROR(ParseCount(*v, "--warmup", &c.warmup_ops));
    }
    if (auto v = args.Value("ops")) {
      PMHASH_RETURN_IF_ERROR(ParseCount(*v, "--ops", &c.ops));
      if (c.ops == 0) return Status::InvalidArgument("--ops must be positive");
    }
    if (auto v = args.Value("latency")) {
      if (*v == "off") {
        c.latency_every = 0;
      } else if (*v == "all") {
        c.latency_every = 1;
      } else if (*v == "sampled") {
        c.latency_every = 32;
      } else {
        uint64_t n = 0;
        PMHASH_RETURN_IF_ERROR(ParseU64(*v, "--latency", &n));
        if (n < 1 || n > 1000000) {
          return Status::InvalidArgument("--latency N must be in [1, 1000000]");
        }
        c.latency_every = static_cast<uint32_t>(n);
      }
    }
    if (args.Has("growth")) c.growth = true;
    if (auto v = args.Value("growth-steps")) {
      uint64_t n = 0;
      PMHASH_RETURN_IF_ERROR(ParseCount(*v, "--growth-steps", &n));
      if (n < 1 || n > 100000) return Status::InvalidArgument("--growth-steps in [1, 100000]");
      c.growth_steps = static_cast<uint32_t>(n);
    }
    if (auto v = args.Value("sample-ops")) {
      uint64_t n = 0;
      PMHASH_RETURN_IF_ERROR(ParseCount(*v, "--sample-ops", &n));
      if (n < 1 || n > 10000000) return Status::InvalidArgument("--sample-ops in [1, 10M]");
      c.sample_ops = static_cast<uint32_t>(n);
    }
    if (auto v = args.Value("recovery")) {
      std::vector<std::string> items;
      PMHASH_RETURN_IF_ERROR(SplitList(*v, "--recovery", &items));
      c.recovery_keys.clear();
      for (const auto& item : items) {
        uint64_t n = 0;
        PMHASH_RETURN_IF_ERROR(ParseCount(item, "--recovery", &n));
        c.recovery_keys.push_back(n);
      }
    }
    if (auto v = args.Value("dataset")) {
      std::vector<std::string> items;
      PMHASH_RETURN_IF_ERROR(SplitList(*v, "--dataset", &items));
      c.dup_datasets.clear();
      for (const auto& item : items) {
        const bool named = item.rfind("zipf:", 0) == 0 || item.rfind("file:", 0) == 0 ||
                           item == "wiki-talk" || item == "cit-patents";
        c.dup_datasets.push_back(named ? item : "file:" + item);  // anything else: a path
      }
    }
    if (args.Has("no-table")) c.table = false;
    // A preset's recovery sizes follow --keys when only --keys is given.
    if ((args.Has("keys") || args.Has("paper-size")) && !args.Has("recovery") &&
        !c.recovery_keys.empty()) {
      const uint64_t top = *std::max_element(c.recovery_keys.begin(), c.recovery_keys.end());
      for (auto& n : c.recovery_keys) n = std::max<uint64_t>(1, n * c.keys / top);
    }
    return bench::ResolveConfig(&c);
  };
  if (Status s = parse(); !s.ok()) return Usage(s);
  if (skip) {
    for (const auto& n : notes) std::cout << "note: " << n << "\n";
    return kExitOk;
  }
  const auto json = args.Value("json");
  const auto csv = args.Value("csv");

  struct sigaction sa = {};
  sa.sa_handler = OnFatalSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);

  CliListener listener(!args.Has("quiet") && isatty(STDERR_FILENO));
  // Several --elimda-logs values (the elimda-exp11 preset): one run each, the files of each
  // run named FILE-logsN.EXT.
  const std::vector<uint32_t> sweep = c.elimda_logs;
  if (sweep.size() <= 1) return RunAndWrite(c, notes, &listener, json, csv, "");
  int rc = kExitOk;
  for (const uint32_t logs : sweep) {
    bench::BenchConfig one = c;
    one.elimda_logs = {logs};
    std::cout << "== elimda.logs " << logs << " (log space " << (uint64_t{logs} * 256 >> 10)
              << " KiB)\n";
    const int r = RunAndWrite(one, notes, &listener, json, csv, "-logs" + std::to_string(logs));
    if (r != kExitOk) rc = r;
  }
  return rc;
}

}  // namespace pmhash::cli
