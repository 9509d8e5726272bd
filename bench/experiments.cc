#include "bench/experiments.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>

#include "bench/reference.h"
#include "bench/targets.h"
#include "pmhash/index.h"

namespace pmhash::bench {

namespace {

struct Footprint {
  uint64_t size = 0, capacity = 0, bytes = 0, pm = 0, dram = 0, resizes = 0;
};

void AddLatency(SeriesPoint* p, const std::string& op, const LatencyHistogram& h) {
  p->values.push_back({op + "_mean_ns", h.mean()});
  p->values.push_back({op + "_p50_ns", h.Percentile(0.5)});
  p->values.push_back({op + "_p99_ns", h.Percentile(0.99)});
}

// The growth loop over any table; `fp` reads its footprint.
template <class T, class FootprintFn>
Status GrowthLoop(T& table, FootprintFn fp, const BenchConfig& c, const KeySet& keys,
                  const std::string& tag, BenchListener* l, Series* out) {
  const uint64_t n = keys.size();
  const uint32_t steps = static_cast<uint32_t>(std::min<uint64_t>(c.growth_steps, n));
  SplitMix64 rng(Mixer::Finalize(c.seed ^ 0x9a0f3c1d));
  double sum_payload = 0, sum_space = 0, sum_size = 0, sum_cap = 0, max_lf = 0;
  uint64_t done = 0;
  ThreadOutcome out_ok;
  auto check = [&](bool ok) -> Status { return ok ? Status::OK() : out_ok.failure; };
  for (uint32_t s = 1; s <= steps; s++) {
    const uint64_t end = n * s / steps;
    const uint64_t k = std::min<uint64_t>(c.sample_ops, end - done);
    LatencyHistogram ins, hit, miss, era;
    const auto t0 = Clock::now();
    for (uint64_t i = done; i < end; i++) {
      const uint64_t key = keys.insert_order[i];
      if (i < done + k) {
        const uint64_t a = detail::NowNs();
        const bool ok = detail::DoOp<Op::kInsert>(table, key, &out_ok);
        ins.Add(detail::NowNs() - a);
        PMHASH_RETURN_IF_ERROR(check(ok));
      } else {
        PMHASH_RETURN_IF_ERROR(check(detail::DoOp<Op::kInsert>(table, key, &out_ok)));
      }
    }
    const double step_s = Seconds(t0, Clock::now());
    const Footprint f = fp();
    // Average utility: N(k) summed over the step's inserts, S(k) = space at the step's end.
    const double a = static_cast<double>(done), b = static_cast<double>(end);
    sum_payload += kPayloadBytes * ((b * (b + 1) - a * (a + 1)) / 2);
    sum_space += (b - a) * static_cast<double>(f.bytes);
    sum_size += (b * (b + 1) - a * (a + 1)) / 2;
    sum_cap += (b - a) * static_cast<double>(f.capacity);
    const double lf =
        f.capacity ? static_cast<double>(f.size) / static_cast<double>(f.capacity) : 0;
    max_lf = std::max(max_lf, lf);
    // Samples on the table of `end` keys.
    for (uint64_t j = 0; j < c.sample_ops; j++) {
      const uint64_t key = keys.insert_order[rng.Below(end)];
      const uint64_t t = detail::NowNs();
      const bool ok = detail::DoOp<Op::kFindHit>(table, key, &out_ok);
      hit.Add(detail::NowNs() - t);
      PMHASH_RETURN_IF_ERROR(check(ok));
    }
    for (uint64_t j = 0; j < c.sample_ops; j++) {
      const uint64_t key = keys.negative_order[rng.Below(n)];
      const uint64_t t = detail::NowNs();
      const bool ok = detail::DoOp<Op::kFindMiss>(table, key, &out_ok);
      miss.Add(detail::NowNs() - t);
      PMHASH_RETURN_IF_ERROR(check(ok));
    }
    const uint64_t ke = std::min<uint64_t>(c.sample_ops, end);
    const uint64_t offset = rng.Below(end), stride = end / std::max<uint64_t>(ke, 1);
    for (uint64_t j = 0; j < ke; j++) {
      const uint64_t key = keys.insert_order[(offset + j * stride) % end];
      const uint64_t t = detail::NowNs();
      const bool ok = detail::DoOp<Op::kErase>(table, key, &out_ok);
      era.Add(detail::NowNs() - t);
      PMHASH_RETURN_IF_ERROR(check(ok));
    }
    for (uint64_t j = 0; j < ke; j++) {
      const uint64_t key = keys.insert_order[(offset + j * stride) % end];
      PMHASH_RETURN_IF_ERROR(check(detail::DoOp<Op::kInsert>(table, key, &out_ok)));
    }
    SeriesPoint p;
    p.values = {{"inserted", b},
                {"load_factor", lf},
                {"capacity_slots", static_cast<double>(f.capacity)},
                {"pm_bytes", static_cast<double>(f.pm)},
                {"dram_bytes", static_cast<double>(f.dram)},
                {"resizes", static_cast<double>(f.resizes)},
                {"step_insert_mops", step_s > 0 ? (b - a) / step_s / 1e6 : NAN}};
    AddLatency(&p, "insert", ins);
    AddLatency(&p, "find+", hit);
    AddLatency(&p, "find-", miss);
    AddLatency(&p, "erase", era);
    out->points.push_back(std::move(p));
    done = end;
    if (l && (s % std::max<uint32_t>(1, steps / 20) == 0 || s == steps)) {
      l->OnProgress(tag + "growth " + std::to_string(s) + "/" + std::to_string(steps));
    }
  }
  out->summary.push_back({"keys", static_cast<double>(n)});
  out->summary.push_back({"max_load_factor", max_lf});
  out->summary.push_back({"average_utility", sum_space > 0 ? sum_payload / sum_space : NAN});
  out->summary.push_back({"average_load_factor", sum_cap > 0 ? sum_size / sum_cap : NAN});
  return Status::OK();
}

void AddResizeSummary(const IndexStats& s, Series* out) {
  DurationSummary r = Summarize(s.resize_ns);
  out->summary.push_back({"resize_count", static_cast<double>(s.splits + s.doublings)});
  out->summary.push_back({"resize_logged", static_cast<double>(r.count)});
  out->summary.push_back({"resize_min_ns", static_cast<double>(r.min_ns)});
  out->summary.push_back({"resize_p50_ns", static_cast<double>(r.p50_ns)});
  out->summary.push_back({"resize_p90_ns", static_cast<double>(r.p90_ns)});
  out->summary.push_back({"resize_p99_ns", static_cast<double>(r.p99_ns)});
  out->summary.push_back({"resize_max_ns", static_cast<double>(r.max_ns)});
  out->summary.push_back({"resize_total_ns", static_cast<double>(r.total_ns)});
}

Options PoolOptions(const BenchConfig& c, const std::string& path, Durability d,
                    uint64_t size) {
  Options o;
  o.path = path;
  o.mode = OpenMode::kOpenOrCreate;
  o.durability = d;
  o.pool_size = size;
  ApplyKindOptions(c, &o);
  return o;
}

}  // namespace

void ApplyKindOptions(const BenchConfig& c, Options* o) {
  if (!c.elimda_logs.empty()) o->elimda.logs = c.elimda_logs.front();
  if (c.elimda_batch) o->elimda.empty_block_batch = *c.elimda_batch;
  if (c.elimda_writer_logs) o->elimda.writer_logs = *c.elimda_writer_logs;
  if (c.smartht_keys_per_head) o->smartht.grow_keys_per_head = *c.smartht_keys_per_head;
  if (c.background_threads) o->background_threads = *c.background_threads;
}

std::vector<Series> RunGrowth(const BenchConfig& c, const KeySet& keys, PoolFile* file,
                              BenchListener* l) {
  std::vector<Series> all;
  if (c.reference) {
    Series s;
    s.experiment = "growth";
    s.index = std::string(AbslReference::kName);
    s.durability = "dram";
    AbslReference table;
    s.error = GrowthLoop(
        table,
        [&] {
          Footprint f;
          f.size = table.Size();
          f.capacity = table.Capacity();
          f.bytes = f.dram = table.DramBytes();
          return f;
        },
        c, keys, "absl: ", l, &s);
    all.push_back(std::move(s));
  }
  for (const auto& index : c.indexes) {
    for (const Durability d : c.durabilities) {
      const std::string tag = index + "/" + std::string(DurabilityName(d)) + ": ";
      uint64_t size = c.pool_size ? c.pool_size : EstimatePoolBytes(index, keys.size());
      for (int attempt = 0;; attempt++) {
        Series s;
        s.experiment = "growth";
        s.index = index;
        s.durability = std::string(DurabilityName(d));
        if (Status t = file->Truncate(); !t.ok()) {
          s.error = t;
          all.push_back(std::move(s));
          break;
        }
        auto opened = pmhash::Open(index, PoolOptions(c, file->path(), d, size));
        if (!opened.ok()) {
          s.error = opened.status();
        } else {
          Index& table = *opened.value();
          s.error = GrowthLoop(
              table,
              [&] {
                const IndexStats st = table.Stats();
                Footprint f;
                f.size = st.size;
                f.capacity = st.capacity_slots;
                f.bytes = f.pm = st.pm_bytes;
                f.dram = st.dram_bytes;
                f.resizes = st.splits + st.doublings;
                return f;
              },
              c, keys, tag, l, &s);
          if (s.error.ok()) AddResizeSummary(table.Stats(), &s);
          if (Status cl = table.Close(); s.error.ok() && !cl.ok()) s.error = cl;
        }
        // An estimated pool that was too small (an index the estimate does not know): retry
        // with a larger sparse file.
        if (s.error.IsOutOfSpace() && !c.pool_size && attempt < 3) {
          size *= 4;
          continue;
        }
        all.push_back(std::move(s));
        break;
      }
      (void)file->Truncate();
    }
  }
  return all;
}

namespace {

// Builds n keys in a fresh pool at `o.path`; the child never returns.
[[noreturn]] void BuildAndWait(const std::string& index, const Options& o, uint64_t n,
                               uint64_t seed, int fd) {
  char byte = 'f';
  {
    auto opened = pmhash::Open(index, o);
    if (opened.ok()) {
      Index& t = *opened.value();
      const Mixer mix(seed);
      bool ok = true;
      for (uint64_t i = 0; i < n && ok; i++) ok = t.Insert(mix(i), ValueOf(mix(i))).ok();
      if (ok) byte = 'k';
      if (write(fd, &byte, 1) != 1) _exit(2);
      // Wait for SIGKILL: no Close, no destructor, no clean-shutdown mark.
      for (;;) pause();
    }
  }
  if (write(fd, &byte, 1) != 1) _exit(2);
  _exit(1);
}

// Times of one reopen, each from the start of Open: until Open returns, until the first Find has
// answered, and until Size() is exact (Open plus the first Size() call, timed apart from the Find:
// some kinds recount lazily, Pea at its first Size() after a crash, so "open" alone is not
// like-for-like); index_recovery_s is the index's own Stats().recovery_seconds.
struct ReopenTiming {
  double open_s = 0, first_request_s = 0, exact_size_s = 0, index_recovery_s = 0;
  bool recovered = false;
  bool state_loaded = false;  // the open loaded the DRAM state a clean Close saved
  Status error;
};

ReopenTiming TimeReopen(const std::string& index, Options o, uint64_t n, uint64_t seed) {
  ReopenTiming r;
  o.mode = OpenMode::kOpenExisting;
  const Mixer mix(seed);
  const auto t0 = Clock::now();
  auto opened = pmhash::Open(index, o);
  const auto t1 = Clock::now();
  if (!opened.ok()) {
    r.error = opened.status();
    return r;
  }
  Index& t = *opened.value();
  uint64_t v = 0;
  const Status first = t.Find(mix(0), &v);
  const auto t2 = Clock::now();
  const uint64_t size = t.Size();  // before Stats(), which may recount as well
  const auto t3 = Clock::now();
  r.open_s = Seconds(t0, t1);
  r.first_request_s = Seconds(t0, t2);
  r.exact_size_s = r.open_s + Seconds(t2, t3);
  const IndexStats st = t.Stats();
  r.index_recovery_s = st.recovery_seconds;
  r.recovered = st.recovered;
  r.state_loaded = st.state_loaded;
  if (!first.ok() || v != ValueOf(mix(0))) {
    r.error = Status::Corruption("first key missing or wrong after reopen");
  } else if (size != n) {
    r.error = Status::Corruption("size after reopen " + std::to_string(size) + ", expected " +
                                 std::to_string(n));
  } else {
    SplitMix64 rng(seed);
    for (int i = 0; i < 1000 && r.error.ok(); i++) {
      const uint64_t k = mix(rng.Below(n));
      if (!t.Find(k, &v).ok() || v != ValueOf(k)) {
        r.error = Status::Corruption("a key is missing after reopen");
      }
    }
  }
  if (Status cl = t.Close(); r.error.ok() && !cl.ok()) r.error = cl;
  return r;
}

}  // namespace

std::vector<Series> RunRecovery(const BenchConfig& c, PoolFile* file, BenchListener* l) {
  std::vector<Series> all;
  std::vector<Durability> modes;
  for (Durability d : c.durabilities) {
    if (d == Durability::kAdr || d == Durability::kEadr) modes.push_back(d);
  }
  if (modes.empty()) modes.push_back(Durability::kAdr);
  for (const auto& index : c.indexes) {
    for (const Durability d : modes) {
      Series s;
      s.experiment = "recovery";
      s.index = index;
      s.durability = std::string(DurabilityName(d));
      const std::string tag = s.Label() + ": ";
      for (const uint64_t n : c.recovery_keys) {
        const uint64_t size = c.pool_size ? c.pool_size : 4 * EstimatePoolBytes(index, n);
        const Options o = PoolOptions(c, file->path(), d, size);
        SeriesPoint p;
        p.values.push_back({"keys", static_cast<double>(n)});
        // 1. Killed builder.
        if (l) l->OnProgress(tag + "build " + std::to_string(n) + " keys in a child, SIGKILL");
        if (Status t = file->Truncate(); !t.ok()) {
          s.error = t;
          break;
        }
        int fds[2];
        if (pipe(fds) != 0) {
          s.error = Status::IOError("pipe failed");
          break;
        }
        const auto b0 = Clock::now();
        const pid_t pid = fork();
        if (pid < 0) {
          close(fds[0]);
          close(fds[1]);
          s.error = Status::IOError("fork failed");
          break;
        }
        if (pid == 0) {
          close(fds[0]);
          BuildAndWait(index, o, n, c.seed, fds[1]);
        }
        close(fds[1]);
        char byte = 0;
        const bool got = read(fds[0], &byte, 1) == 1;
        const double build_s = Seconds(b0, Clock::now());
        close(fds[0]);
        kill(pid, SIGKILL);
        int wstatus = 0;
        waitpid(pid, &wstatus, 0);
        if (!got || byte != 'k') {
          s.error = Status::IOError("the child could not build the pool");
          break;
        }
        if (l) l->OnProgress(tag + "reopen after SIGKILL (" + std::to_string(n) + " keys)");
        const ReopenTiming crash = TimeReopen(index, o, n, c.seed);
        if (!crash.error.ok()) {
          s.error = Status(crash.error.code(), "after SIGKILL: " + crash.error.ToString());
          break;
        }
        // 2. Clean shutdown: the pool the crash run recovered was closed cleanly by TimeReopen.
        if (l) l->OnProgress(tag + "reopen after clean shutdown (" + std::to_string(n) + " keys)");
        const ReopenTiming clean = TimeReopen(index, o, n, c.seed);
        if (!clean.error.ok()) {
          s.error = Status(clean.error.code(), "after Close: " + clean.error.ToString());
          break;
        }
        p.values.push_back({"build_mops", static_cast<double>(n) / build_s / 1e6});
        p.values.push_back({"crash_first_request_ms", crash.first_request_s * 1e3});
        p.values.push_back({"crash_open_ms", crash.open_s * 1e3});
        p.values.push_back({"crash_exact_size_ms", crash.exact_size_s * 1e3});
        p.values.push_back({"crash_index_recovery_ms", crash.index_recovery_s * 1e3});
        p.values.push_back({"crash_recovered", crash.recovered ? 1.0 : 0.0});
        p.values.push_back({"clean_first_request_ms", clean.first_request_s * 1e3});
        p.values.push_back({"clean_open_ms", clean.open_s * 1e3});
        p.values.push_back({"clean_exact_size_ms", clean.exact_size_s * 1e3});
        p.values.push_back({"clean_index_recovery_ms", clean.index_recovery_s * 1e3});
        p.values.push_back({"clean_recovered", clean.recovered ? 1.0 : 0.0});
        p.values.push_back({"clean_state_loaded", clean.state_loaded ? 1.0 : 0.0});
        s.points.push_back(std::move(p));
      }
      (void)file->Truncate();
      all.push_back(std::move(s));
    }
  }
  return all;
}

}  // namespace pmhash::bench
