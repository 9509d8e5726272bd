#include "bench/report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include "bench/targets.h"

namespace pmhash::bench {

namespace {

std::string Fixed(double v, int precision) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
  return buf;
}

// Mops/s with three significant digits' worth of decimals.
std::string FormatMops(double v) {
  if (!std::isfinite(v) || v <= 0) return "-";
  return Fixed(v, v >= 100 ? 1 : v >= 10 ? 2 : 3);
}

std::string PadRight(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}
std::string PadLeft(std::string s, size_t w) {
  if (s.size() < w) s.insert(0, w - s.size(), ' ');
  return s;
}

std::string Mib(uint64_t bytes) {
  return Fixed(static_cast<double>(bytes) / (1 << 20), 1) + " MiB";
}

// ", pool 142.5 MiB resident, 140.0 MiB on huge pages" ("" when smaps told nothing).
std::string PagesNote(const PageUse& p, std::string_view what) {
  if (!p.known) return "";
  return ", " + std::string(what) + " " + Mib(p.resident) + " resident, " + Mib(p.huge) +
         " on huge pages";
}

std::string ShortCommit(const BuildInfo& b) {
  std::string c = b.git_commit.size() > 12 ? b.git_commit.substr(0, 12) : b.git_commit;
  if (b.git_dirty) c += " (dirty)";
  return c;
}

std::string Join(const std::vector<std::string>& v, std::string_view sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : std::string(sep)) + x;
  return s;
}

std::string RowLabel(const RowResult& row) {
  if (row.kind == RowKind::kReference) {
    return row.index + " (" + std::to_string(row.threads) +
           (row.threads == 1 ? " thread)" : " threads)");
  }
  std::string s = row.Label();
  if (row.kind == RowKind::kFacade) s += " (facade)";
  return s;
}

// ---- JSON ------------------------------------------------------------------------------------

class JsonWriter {
 public:
  std::string Take() { return std::move(out_); }

  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  void Key(std::string_view k) {
    Separator();
    Quoted(k);
    out_ += ": ";
    after_key_ = true;
  }
  void String(std::string_view s) {
    Value();
    Quoted(s);
  }
  void Number(double v) {
    Value();
    if (!std::isfinite(v)) {
      out_ += "null";
      return;
    }
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.12g", v);
    out_ += buf;
  }
  void Uint(uint64_t v) {
    Value();
    out_ += std::to_string(v);
  }
  void Bool(bool v) {
    Value();
    out_ += v ? "true" : "false";
  }
  void Null() {
    Value();
    out_ += "null";
  }
  void StatusOrNull(const Status& s) {
    if (s.ok()) {
      Null();
    } else {
      String(s.ToString());
    }
  }

  void UintMember(std::string_view k, uint64_t v) {
    Key(k);
    Uint(v);
  }
  void NumberMember(std::string_view k, double v) {
    Key(k);
    Number(v);
  }
  void StringMember(std::string_view k, std::string_view v) {
    Key(k);
    String(v);
  }
  void BoolMember(std::string_view k, bool v) {
    Key(k);
    Bool(v);
  }
  void StatusOrNullMember(std::string_view k, const Status& s) {
    Key(k);
    StatusOrNull(s);
  }
  void UintOrNullMember(std::string_view k, std::optional<uint64_t> v) {
    Key(k);
    if (v) {
      Uint(*v);
    } else {
      Null();
    }
  }

 private:
  void Separator() {
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
      out_ += '\n';
      out_.append(2 * first_.size(), ' ');
    }
  }
  void Quoted(std::string_view s) {
    out_ += '"';
    for (const char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\t':
          out_ += "\\t";
          break;
        case '\r':
          out_ += "\\r";
          break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out_ += buf;
          } else {
            out_ += ch;
          }
      }
    }
    out_ += '"';
  }
  // A value either follows a key, or is an array element / the root.
  void Value() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    Separator();
  }
  void Open(char c) {
    Value();
    out_ += c;
    first_.push_back(true);
  }
  void Close(char c) {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) {
      out_ += '\n';
      out_.append(2 * first_.size(), ' ');
    }
    out_ += c;
  }

  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

void JsonTraffic(JsonWriter& j, const TrafficPerOp& t) {
  j.BeginObject();
  j.UintMember("ops", t.ops);
  j.NumberMember("persists", t.persists);
  j.NumberMember("fences", t.fences);
  j.NumberMember("flushed_lines", t.flushed_lines);
  j.NumberMember("nt_bytes", t.nt_bytes);
  j.NumberMember("media_writes", t.media_writes);
  j.UintMember("media_block_bytes", t.media_block_bytes);
  j.UintMember("media_cache_bytes", t.media_cache_bytes);
  j.UintMember("cached_dirty_lines", t.cached_dirty_lines);
  j.NumberMember("write_amplification", t.write_amplification);
  j.EndObject();
}

void JsonLatency(JsonWriter& j, const LatencyHistogram& h, uint32_t every) {
  if (h.count() == 0) {
    j.Null();
    return;
  }
  j.BeginObject();
  j.UintMember("count", h.count());
  j.UintMember("sample_every", every);
  j.NumberMember("mean_ns", h.mean());
  j.UintMember("min_ns", h.min());
  j.NumberMember("p50_ns", h.Percentile(0.5));
  j.NumberMember("p90_ns", h.Percentile(0.9));
  j.NumberMember("p99_ns", h.Percentile(0.99));
  j.NumberMember("p999_ns", h.Percentile(0.999));
  j.NumberMember("p9999_ns", h.Percentile(0.9999));
  j.UintMember("max_ns", h.max());
  j.Key("buckets");  // [upper bound ns, count] of every non-empty bucket: the CDF
  j.BeginArray();
  for (const auto& [ns, n] : h.NonEmptyBuckets()) {
    j.BeginArray();
    j.Uint(ns);
    j.Uint(n);
    j.EndArray();
  }
  j.EndArray();
  j.EndObject();
}

void JsonResize(JsonWriter& j, const DurationSummary& r) {
  j.BeginObject();
  j.UintMember("count", r.count);
  j.UintMember("min_ns", r.min_ns);
  j.UintMember("p50_ns", r.p50_ns);
  j.UintMember("p90_ns", r.p90_ns);
  j.UintMember("p99_ns", r.p99_ns);
  j.UintMember("max_ns", r.max_ns);
  j.UintMember("total_ns", r.total_ns);
  j.EndObject();
}

void JsonRow(JsonWriter& j, const TableResult& t, const RowResult& row, uint32_t every) {
  j.BeginObject();
  j.StringMember("index", row.index);
  j.StringMember("durability", row.durability);
  j.StringMember("kind", RowKindName(row.kind));
  j.UintMember("threads", static_cast<uint64_t>(row.threads));
  j.UintMember("pool_size", row.pool_size);
  j.Key("kept_pool");
  if (row.kept_pool.empty()) {
    j.Null();
  } else {
    j.String(row.kept_pool);
  }
  j.StatusOrNullMember("error", row.error);
  j.NumberMember("load_factor", row.load_factor);
  j.UintMember("dram_bytes", row.dram_bytes);
  // After the insert phase: the table's resident bytes and those on huge pages (null: unknown).
  const auto known = [&](uint64_t v) { return row.pages.known ? std::optional(v) : std::nullopt; };
  j.UintOrNullMember("resident_bytes", known(row.pages.resident));
  j.UintOrNullMember("huge_page_bytes", known(row.pages.huge));
  j.Key("phases");
  j.BeginArray();
  for (const auto& p : row.phases) {
    j.BeginObject();
    j.StringMember("name", p.name);
    j.StringMember("op", OpName(p.op));
    j.UintMember("threads", static_cast<uint64_t>(p.threads));
    j.UintMember("ops", p.ops);
    j.NumberMember("seconds", p.seconds);
    j.NumberMember("mops", p.ok() ? p.mops() : NAN);
    j.NumberMember("ratio", row.kind == RowKind::kReference ? NAN : t.Ratio(p));
    j.NumberMember("ratio_absl", row.kind == RowKind::kReference ? NAN : t.RatioAbsl(p));
    const auto [ratio_min, ratio_max] =
        row.kind == RowKind::kReference ? std::pair<double, double>{NAN, NAN} : t.RatioSpread(p);
    j.NumberMember("ratio_min", ratio_min);
    j.NumberMember("ratio_max", ratio_max);
    j.StatusOrNullMember("error", p.failure);
    j.Key("samples_mops");
    j.BeginArray();
    for (const double m : p.samples) j.Number(m);
    j.EndArray();
    j.Key("latency");
    JsonLatency(j, p.latency, every);
    j.EndObject();
  }
  j.EndArray();
  j.Key("stats");
  if (row.stats) {
    const IndexStats& s = *row.stats;
    j.BeginObject();
    j.UintMember("size", s.size);
    j.UintMember("capacity_slots", s.capacity_slots);
    j.NumberMember("load_factor", s.load_factor);
    j.UintMember("pm_bytes", s.pm_bytes);
    j.UintMember("dram_bytes", s.dram_bytes);
    j.UintMember("pool_bytes", s.pool_bytes);
    j.UintMember("global_depth", s.global_depth);
    j.UintMember("buckets", s.buckets);
    j.UintMember("splits", s.splits);
    j.UintMember("doublings", s.doublings);
    j.UintMember("resize_events_logged", s.resize_ns.size());
    j.Key("details");
    j.BeginObject();
    for (const auto& d : s.details) j.NumberMember(d.name, d.value);
    j.EndObject();
    j.EndObject();
  } else {
    j.Null();
  }
  j.Key("resize");
  if (row.resize) {
    JsonResize(j, *row.resize);
  } else {
    j.Null();
  }
  j.Key("counting");
  if (row.counting) {
    const CountingPass& c = *row.counting;
    j.BeginObject();
    j.UintMember("keys", c.keys);
    j.StatusOrNullMember("error", c.failure);
    j.Key("insert");
    JsonTraffic(j, c.insert);
    j.Key("erase");
    JsonTraffic(j, c.erase);
    j.EndObject();
  } else {
    j.Null();
  }
  j.EndObject();
}

// ---- CSV -------------------------------------------------------------------------------------

std::string CsvField(std::string_view s) {
  if (s.find_first_of(",\"\n") == std::string_view::npos) return std::string(s);
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + '"';
}

std::string CsvNumber(double v) {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.10g", v);
  return buf;
}

}  // namespace

void WriteBanner(std::ostream& os, const BenchReport& r) {
  const BenchConfig& c = r.config;
  std::vector<std::string> durs, threads;
  for (const auto d : c.durabilities) durs.emplace_back(DurabilityName(d));
  for (const int t : c.threads) threads.push_back(std::to_string(t));
  char seed[32];
  std::snprintf(seed, sizeof(seed), "%llu", static_cast<unsigned long long>(c.seed));
  os << "pmhash bench: " << c.keys << " keys, seed " << seed << ", indexes " << Join(c.indexes, ",")
     << ", durability " << Join(durs, ",") << ", threads " << Join(threads, ",")
     << (c.pin ? ", pinned" : "")
     << (c.repeat > 1 ? ", medians of " + std::to_string(c.repeat) + " interleaved rounds" : "")
     << "\n";
  const MachineInfo& m = r.machine;
  os << "machine: " << m.cpu_model << " | " << m.logical_cpus << " CPUs | flush "
     << m.flush_instruction << " | simd " << m.simd << " | " << m.kernel << "\n";
  os << "pool:    " << c.pool_path << " (" << m.pool_fs << ")"
     << (c.keep_pool ? ", kept" : ", removed at exit") << "\n";
  os << "pages:   " << (c.huge_pages ? "huge pages asked (--huge-pages)" : "default")
     << (m.huge_pages.empty() ? "" : " | " + m.huge_pages) << "\n";
  os << "build:   pmhash " << r.build.version << " " << ShortCommit(r.build) << ", "
     << r.build.build_type << ", " << r.build.compiler << "\n";
  os << "started: " << r.started_at << "\n";
  if (!c.experiment.empty()) os << "experiment: " << c.experiment << "\n";
  if (c.table) {
    os << "phases:  " << Join(c.phases, ",") << " | keys of find+/update/mixes: " << c.dist.Name();
    if (c.mix.Total() > 0) os << " | mix " << c.mix.Name();
    if (c.warmup_ops > 0) os << " | warm-up " << c.warmup_ops << " find+";
    if (c.key_bytes > 0) os << " | items " << c.key_bytes << " B key + " << c.value_bytes << " B";
    os << " | latency: "
       << (c.latency_every == 0   ? std::string("off")
           : c.latency_every == 1 ? std::string("every op")
                                  : "1 op in " + std::to_string(c.latency_every))
       << "\n";
  }
  for (const auto& n : r.notes) os << "note:    " << n << "\n";
}

void WriteTable(std::ostream& os, const BenchReport& r, const TableResult& t) {
  const size_t label_w = 38, col_w = 16;
  std::vector<std::string> phase_names;
  auto collect = [&](const RowResult& row) {
    for (const auto& p : row.phases) {
      if (std::find(phase_names.begin(), phase_names.end(), p.name) == phase_names.end()) {
        phase_names.push_back(p.name);
      }
    }
  };
  if (t.reference) collect(*t.reference);
  if (t.concurrent_reference) collect(*t.concurrent_reference);
  for (const auto& row : t.rows) collect(row);

  os << "\n== " << t.threads << (t.threads == 1 ? " thread" : " threads") << ", " << r.config.keys
     << " keys: Mops/s, ratio = row / "
     << (t.RatioBase() ? RowLabel(*t.RatioBase()) : std::string("reference")) << " ==\n";
  std::string h1 = PadRight("", label_w), h2 = PadRight("", label_w);
  for (const auto& n : phase_names) {
    h1 += PadRight(n, col_w);
    h2 += PadRight("Mops   ratio", col_w);
  }
  h1 += "load";
  h2 += "factor";
  os << h1 << "\n" << h2 << "\n";

  auto print_row = [&](const RowResult& row) {
    std::string line = PadRight(RowLabel(row), label_w - 1) + " ";
    for (const auto& n : phase_names) {
      const PhaseResult* p = row.Phase(n);
      std::string cell;
      if (!p) {
        cell = "-";
      } else if (!p->ok()) {
        cell = "FAILED";
      } else {
        cell = PadRight(FormatMops(p->mops()), 7);
        cell += row.kind == RowKind::kReference ? "" : Fixed(t.Ratio(*p), 2);
      }
      line += PadRight(cell, col_w);
    }
    line += row.phases.empty() ? "-" : Fixed(row.load_factor, 3);
    os << line << "\n";
  };
  if (t.reference) print_row(*t.reference);
  if (t.concurrent_reference) print_row(*t.concurrent_reference);
  for (const auto& row : t.rows) print_row(row);

  // With rounds: the spread of every ratio (lowest..highest per-round ratio).
  if (r.config.repeat > 1 && !t.rows.empty()) {
    os << "\nratio spread over " << r.config.repeat << " rounds (lowest..highest):\n";
    for (const auto& row : t.rows) {
      std::string line = PadRight(RowLabel(row), label_w - 1) + " ";
      for (const auto& n : phase_names) {
        const PhaseResult* p = row.Phase(n);
        const auto [lo, hi] = p ? t.RatioSpread(*p) : std::pair<double, double>{NAN, NAN};
        line += PadRight(std::isnan(lo) ? std::string("-") : Fixed(lo, 2) + ".." + Fixed(hi, 2),
                         col_w);
      }
      os << line << "\n";
    }
  }

  // The one-persist limit, and the durable rows as a fraction of it.
  if (!t.persist_limits.empty()) {
    os << "\npersist limit (store + flush + fence on random 64 B lines, " << t.threads
       << (t.threads == 1 ? " thread" : " threads") << "):\n";
    for (const auto& p : t.persist_limits) {
      const std::string mode(DurabilityName(p.durability));
      os << "  " << PadRight(mode, label_w - 2);
      if (!p.failure.ok()) {
        os << "FAILED: " << p.failure.ToString() << "\n";
        continue;
      }
      os << FormatMops(p.mops()) << " Mops/s over " << Mib(p.region_bytes);
      for (const auto& row : t.rows) {
        if (row.durability != mode) continue;
        for (const char* phase : {"insert", "erase"}) {
          const PhaseResult* pr = row.Phase(phase);
          if (!pr || !pr->ok()) continue;
          os << "; " << row.index << " " << phase << " " << Fixed(pr->mops() / p.mops(), 2) << "x";
        }
      }
      os << "\n";
    }
  }

  // Structure after the insert phase.
  bool any_stats = false;
  for (const auto& row : t.rows) any_stats |= row.stats.has_value();
  if (any_stats) {
    os << "\nafter insert:\n";
    for (const auto& row : t.rows) {
      if (!row.stats) continue;
      const IndexStats& s = *row.stats;
      os << "  " << PadRight(row.Label(), label_w - 2) << "PM " << Mib(s.pm_bytes) << ", DRAM "
         << Mib(s.dram_bytes) << ", " << s.buckets << " buckets, depth " << s.global_depth << ", "
         << s.splits << " splits, " << s.doublings << " doublings" << PagesNote(row.pages, "pool")
         << "\n";
    }
    if (t.reference && t.reference->error.ok()) {
      os << "  " << PadRight(t.reference->index, label_w - 2) << "DRAM "
         << Mib(t.reference->dram_bytes) << PagesNote(t.reference->pages, "array") << "\n";
    }
  }

  // Persistence counters from the counting pass.
  bool any_counting = false;
  for (const auto& row : t.rows) any_counting |= row.counting && row.counting->failure.ok();
  if (any_counting) {
    os << "\npersistence per operation (separate counting pass: counters on, 1 thread, "
       << *r.config.count_keys << " keys):\n";
    os << "  " << PadRight("", label_w - 2) << PadRight("op", 8) << PadLeft("persists", 10)
       << PadLeft("fences", 10) << PadLeft("flushed", 10) << PadLeft("nt bytes", 10)
       << PadLeft("media wr", 10) << PadLeft("write amp", 10) << "\n";
    for (const auto& row : t.rows) {
      if (!row.counting || !row.counting->failure.ok()) continue;
      const CountingPass& c = *row.counting;
      for (const auto& [name, tr] :
           {std::pair<const char*, const TrafficPerOp*>{"insert", &c.insert},
            {"erase", &c.erase}}) {
        os << "  " << PadRight(row.Label(), label_w - 2) << PadRight(name, 8)
           << PadLeft(Fixed(tr->persists, 3), 10) << PadLeft(Fixed(tr->fences, 3), 10)
           << PadLeft(Fixed(tr->flushed_lines, 3), 10) << PadLeft(Fixed(tr->nt_bytes, 1), 10)
           << PadLeft(Fixed(tr->media_writes, 3), 10)
           << PadLeft(Fixed(tr->write_amplification, 1), 10) << "\n";
      }
    }
    uint32_t block = 256;
    uint64_t cache = 0;
    for (const auto& row : t.rows) {
      if (!row.counting) continue;
      block = row.counting->insert.media_block_bytes;
      cache = std::max(cache, row.counting->insert.media_cache_bytes);
    }
    os << "  (flushed: 64 B lines written back; nt bytes: non-temporal stores; media wr: estimated "
       << block << " B media-block writes;\n   write amp: media bytes / "
       << (r.config.key_bytes > 0 ? r.config.key_bytes + r.config.value_bytes : 16)
       << " B of key+value"
       << (cache > 0 ? ";\n   eADR: a persisted line is a media write when a " +
                           std::to_string(cache >> 20) +
                           " MiB cache model evicts it (--media-cache)"
                     : std::string())
       << ")\n";
  }

  // Latency percentiles (sampled).
  bool any_latency = false;
  for (const auto& row : t.rows) {
    for (const auto& p : row.phases) any_latency |= p.latency.count() > 0;
  }
  if (any_latency) {
    os << "\nlatency, ns ("
       << (r.config.latency_every == 1 ? std::string("every operation")
                                       : "1 operation in " + std::to_string(r.config.latency_every))
       << " timed, incl. " << Fixed(r.machine.clock_overhead_ns, 0) << " ns of clock reads):\n";
    os << "  " << PadRight("", label_w - 2) << PadRight("phase", 8);
    for (const char* h : {"p50", "p90", "p99", "p99.9", "p99.99"}) os << PadLeft(h, 9);
    os << PadLeft("max", 12);
    os << "\n";
    auto lat_rows = [&](const RowResult& row) {
      for (const auto& p : row.phases) {
        if (p.latency.count() == 0) continue;
        os << "  " << PadRight(RowLabel(row), label_w - 2) << PadRight(p.name, 8);
        for (const double q : {0.5, 0.9, 0.99, 0.999, 0.9999}) {
          os << PadLeft(Fixed(p.latency.Percentile(q), 0), 9);
        }
        os << PadLeft(std::to_string(p.latency.max()), 12) << "\n";
      }
    };
    if (t.reference) lat_rows(*t.reference);
    if (t.concurrent_reference) lat_rows(*t.concurrent_reference);
    for (const auto& row : t.rows) lat_rows(row);
  }

  // Resize events and index-specific details.
  bool any_resize = false;
  for (const auto& row : t.rows) any_resize |= row.resize.has_value() && row.resize->count > 0;
  if (any_resize) {
    os << "\nresize events during insert (splits + doublings; latency of the logged ones):\n";
    os << "  " << PadRight("", label_w - 2) << PadLeft("count", 9) << PadLeft("min us", 10)
       << PadLeft("p50 us", 10) << PadLeft("p90 us", 10) << PadLeft("p99 us", 10)
       << PadLeft("max us", 10) << PadLeft("total ms", 10) << "\n";
    for (const auto& row : t.rows) {
      if (!row.resize) continue;
      const DurationSummary& z = *row.resize;
      os << "  " << PadRight(row.Label(), label_w - 2) << PadLeft(std::to_string(z.count), 9);
      for (const uint64_t v : {z.min_ns, z.p50_ns, z.p90_ns, z.p99_ns, z.max_ns}) {
        os << PadLeft(Fixed(static_cast<double>(v) / 1e3, 1), 10);
      }
      os << PadLeft(Fixed(static_cast<double>(z.total_ns) / 1e6, 1), 10) << "\n";
    }
  }
  for (const auto& row : t.rows) {
    if (!row.stats || row.stats->details.empty()) continue;
    os << "  " << PadRight(row.Label() + " details", label_w - 2);
    std::string d;
    for (const auto& nv : row.stats->details)
      d += (d.empty() ? "" : ", ") + nv.name + " " +
           Fixed(nv.value, nv.value == std::floor(nv.value) ? 0 : 3);
    os << d << "\n";
  }

  // Failures.
  auto print_error = [&](const RowResult& row) {
    if (!row.error.ok()) os << "ERROR " << RowLabel(row) << ": " << row.error.ToString() << "\n";
  };
  if (t.reference) print_error(*t.reference);
  if (t.concurrent_reference) print_error(*t.concurrent_reference);
  for (const auto& row : t.rows) print_error(row);
  for (const auto& row : t.rows) {
    if (!row.kept_pool.empty()) os << "kept pool " << row.Label() << ": " << row.kept_pool << "\n";
  }
}

void WriteSeries(std::ostream& os, const BenchReport& r, const Series& s) {
  (void)r;
  os << "\n== " << s.experiment << ": " << s.Label() << " ==\n";
  if (!s.error.ok()) os << "ERROR " << s.Label() << ": " << s.error.ToString() << "\n";
  if (s.experiment == "growth") {
    os << "  inserted   load   PM MiB  resizes  ins ns  era ns  find+ ns  find- ns  (mean of "
       << r.config.sample_ops << " samples)\n";
    const size_t n = s.points.size();
    const size_t every = std::max<size_t>(1, n / 10);
    for (size_t i = 0; i < n; i++) {
      if (i % every != every - 1 && i + 1 != n) continue;
      const SeriesPoint& p = s.points[i];
      os << "  " << PadLeft(Fixed(p.Get("inserted"), 0), 8)
         << PadLeft(Fixed(p.Get("load_factor"), 3), 7)
         << PadLeft(Fixed(p.Get("pm_bytes") / (1 << 20), 1), 9)
         << PadLeft(Fixed(p.Get("resizes"), 0), 9) << PadLeft(Fixed(p.Get("insert_mean_ns"), 0), 8)
         << PadLeft(Fixed(p.Get("erase_mean_ns"), 0), 8)
         << PadLeft(Fixed(p.Get("find+_mean_ns"), 0), 10)
         << PadLeft(Fixed(p.Get("find-_mean_ns"), 0), 10) << "\n";
    }
  } else if (s.experiment == "recovery") {
    // Each time from the start of Open: to the first answered Find, to an exact Size() (the
    // like-for-like figure: some kinds recount lazily), and the index's own recovery time;
    // "(saved state)": the clean open loaded the DRAM state Close saved instead of walking.
    os << "  keys        after SIGKILL: first request / exact Size() / index recovery    after "
          "Close: first request / exact Size()\n";
    for (const SeriesPoint& p : s.points) {
      os << "  " << PadRight(Fixed(p.Get("keys"), 0), 12)
         << PadLeft(Fixed(p.Get("crash_first_request_ms"), 3) + " ms", 26)
         << PadLeft(Fixed(p.Get("crash_exact_size_ms"), 3) + " ms", 14)
         << PadLeft(Fixed(p.Get("crash_index_recovery_ms"), 3) + " ms", 14)
         << (p.Get("crash_recovered") > 0 ? " (recovered)" : " (NOT flagged as recovered)")
         << PadLeft(Fixed(p.Get("clean_first_request_ms"), 3) + " ms", 14)
         << PadLeft(Fixed(p.Get("clean_exact_size_ms"), 3) + " ms", 14)
         << (p.Get("clean_state_loaded") > 0 ? " (saved state)" : "") << "\n";
    }
  } else if (s.experiment == "duplicates") {
    // Throughputs are medians of the rounds; ratios (paper-design rows) are medians of per-round
    // ratios to the baseline row of the same round, with their min-max.
    os << "  dataset            pairs     keys   insert Mops  search-skew  search-uniq    "
          "erase  (M entries/s)  utility  PM MiB\n";
    const bool ratios = !s.points.empty() && s.points[0].Has("insert_ratio");
    for (const SeriesPoint& p : s.points) {
      const auto di = static_cast<size_t>(p.Get("dataset"));
      const std::string name = di < r.config.dup_datasets.size() ? r.config.dup_datasets[di] : "?";
      os << "  " << PadRight(name, 16) << PadLeft(Fixed(p.Get("pairs"), 0), 9)
         << PadLeft(Fixed(p.Get("distinct_keys"), 0), 9)
         << PadLeft(Fixed(p.Get("insert_mops"), 2), 14)
         << PadLeft(Fixed(p.Get("search_skew_meps"), 2), 13)
         << PadLeft(Fixed(p.Get("search_unique_meps"), 2), 13)
         << PadLeft(Fixed(p.Get("erase_meps"), 2), 9) << PadLeft(Fixed(p.Get("avg_utility"), 3), 24)
         << PadLeft(Fixed(p.Get("pm_bytes") / (1 << 20), 1), 8) << "\n";
      os << "    per pair: insert " << Fixed(p.Get("insert_fences_per_pair"), 2) << " fences "
         << Fixed(p.Get("insert_lines_per_pair"), 2) << " lines, erase "
         << Fixed(p.Get("erase_fences_per_pair"), 2) << " fences "
         << Fixed(p.Get("erase_lines_per_pair"), 2) << " lines\n";
      if (!ratios) continue;
      os << "    vs baseline:";
      for (const char* m : {"insert", "search_skew", "search_unique", "erase"}) {
        const std::string k = m;
        os << " " << k << " " << Fixed(p.Get(k + "_ratio"), 2) << "x ("
           << Fixed(p.Get(k + "_ratio_min"), 2) << "-" << Fixed(p.Get(k + "_ratio_max"), 2) << ")";
      }
      os << "\n";
    }
  }
  if (!s.summary.empty()) {
    os << "  summary:";
    for (const auto& v : s.summary) {
      const bool ns = v.name.size() > 3 && v.name.substr(v.name.size() - 3) == "_ns";
      os << " " << v.name << "="
         << (ns ? Fixed(v.value / 1e3, 1) + "us"
                : Fixed(v.value, v.value == std::floor(v.value) ? 0 : 3));
    }
    os << "\n";
  }
}

std::string ToJson(const BenchReport& r) {
  JsonWriter j;
  const BenchConfig& c = r.config;
  j.BeginObject();
  j.StringMember("schema", kJsonSchema);
  j.StringMember("started_at", r.started_at);
  j.NumberMember("key_generation_seconds", r.key_generation_seconds);
  j.Key("build");
  j.BeginObject();
  j.StringMember("version", r.build.version);
  j.StringMember("git_commit", r.build.git_commit);
  j.BoolMember("git_dirty", r.build.git_dirty);
  j.StringMember("build_type", r.build.build_type);
  j.StringMember("compiler", r.build.compiler);
  j.EndObject();
  j.Key("machine");
  j.BeginObject();
  j.StringMember("cpu_model", r.machine.cpu_model);
  j.UintMember("logical_cpus", static_cast<uint64_t>(r.machine.logical_cpus));
  j.StringMember("flush_instruction", r.machine.flush_instruction);
  j.StringMember("simd", r.machine.simd);
  j.StringMember("kernel", r.machine.kernel);
  j.StringMember("pool_fs", r.machine.pool_fs);
  j.StringMember("huge_pages", r.machine.huge_pages);
  j.NumberMember("clock_overhead_ns", r.machine.clock_overhead_ns);
  j.EndObject();
  j.Key("config");
  j.BeginObject();
  j.Key("indexes");
  j.BeginArray();
  for (const auto& i : c.indexes) j.String(i);
  j.EndArray();
  j.Key("durabilities");
  j.BeginArray();
  for (const auto d : c.durabilities) j.String(DurabilityName(d));
  j.EndArray();
  j.UintMember("keys", c.keys);
  j.Key("threads");
  j.BeginArray();
  for (const int t : c.threads) j.Uint(static_cast<uint64_t>(t));
  j.EndArray();
  j.UintMember("seed", c.seed);
  j.StringMember("pool_path", c.pool_path);
  j.BoolMember("keep_pool", c.keep_pool);
  j.UintMember("pool_size", c.pool_size);
  j.BoolMember("pin", c.pin);
  j.BoolMember("huge_pages", c.huge_pages);
  j.UintMember("media_block_bytes", c.media_block_bytes);
  j.UintMember("media_cache_bytes", c.media_cache_bytes);
  if (!c.elimda_logs.empty()) j.UintMember("elimda_logs", c.elimda_logs.front());
  if (c.elimda_batch) j.UintMember("elimda_batch", *c.elimda_batch);
  if (c.elimda_writer_logs) j.UintMember("elimda_writer_logs", *c.elimda_writer_logs);
  if (c.smartht_keys_per_head) j.NumberMember("smartht_keys_per_head", *c.smartht_keys_per_head);
  if (c.background_threads) j.UintMember("background_threads", *c.background_threads);
  j.BoolMember("reference", c.reference);
  j.UintMember("key_bytes", c.key_bytes);
  j.UintMember("value_bytes", c.value_bytes);
  j.UintMember("count_keys", c.count_keys.value_or(0));
  j.BoolMember("check", c.check);
  j.BoolMember("persist_probe", c.persist_probe);
  j.UintMember("repeat", static_cast<uint64_t>(c.repeat));
  j.StringMember("experiment", c.experiment);
  j.Key("phases");
  j.BeginArray();
  for (const auto& p : c.phases) j.String(p);
  j.EndArray();
  j.StringMember("distribution", c.dist.Name());
  j.StringMember("mix", c.mix.Name());
  j.UintMember("ops", c.ops ? c.ops : c.keys);
  j.UintMember("warmup_ops", c.warmup_ops);
  j.UintMember("latency_every", c.latency_every);
  j.BoolMember("table", c.table);
  j.BoolMember("growth", c.growth);
  j.UintMember("growth_steps", c.growth_steps);
  j.UintMember("sample_ops", c.sample_ops);
  j.Key("recovery_keys");
  j.BeginArray();
  for (const uint64_t n : c.recovery_keys) j.Uint(n);
  j.EndArray();
  j.Key("dup_datasets");
  j.BeginArray();
  for (const auto& d : c.dup_datasets) j.String(d);
  j.EndArray();
  j.EndObject();
  j.Key("notes");
  j.BeginArray();
  for (const auto& n : r.notes) j.String(n);
  j.EndArray();
  j.Key("tables");
  j.BeginArray();
  for (const auto& t : r.tables) {
    j.BeginObject();
    j.UintMember("threads", static_cast<uint64_t>(t.threads));
    j.Key("reference");
    if (t.reference) {
      JsonRow(j, t, *t.reference, c.latency_every);
    } else {
      j.Null();
    }
    j.Key("concurrent_reference");
    if (t.concurrent_reference) {
      JsonRow(j, t, *t.concurrent_reference, c.latency_every);
    } else {
      j.Null();
    }
    j.Key("rows");
    j.BeginArray();
    for (const auto& row : t.rows) JsonRow(j, t, row, c.latency_every);
    j.EndArray();
    j.Key("persist_limits");
    j.BeginArray();
    for (const auto& p : t.persist_limits) {
      j.BeginObject();
      j.StringMember("durability", DurabilityName(p.durability));
      j.UintMember("threads", static_cast<uint64_t>(p.threads));
      j.UintMember("region_bytes", p.region_bytes);
      j.UintMember("ops", p.ops);
      j.NumberMember("seconds", p.seconds);
      j.NumberMember("mops", p.failure.ok() ? p.mops() : NAN);
      j.StatusOrNullMember("error", p.failure);
      j.EndObject();
    }
    j.EndArray();
    j.EndObject();
  }
  j.EndArray();
  j.Key("series");
  j.BeginArray();
  for (const Series& se : r.series) {
    j.BeginObject();
    j.StringMember("experiment", se.experiment);
    j.StringMember("index", se.index);
    j.StringMember("durability", se.durability);
    j.StatusOrNullMember("error", se.error);
    j.Key("summary");
    j.BeginObject();
    for (const auto& v : se.summary) j.NumberMember(v.name, v.value);
    j.EndObject();
    j.Key("points");
    j.BeginArray();
    for (const auto& p : se.points) {
      j.BeginObject();
      for (const auto& v : p.values) j.NumberMember(v.name, v.value);
      j.EndObject();
    }
    j.EndArray();
    j.EndObject();
  }
  j.EndArray();
  j.EndObject();
  return j.Take() + "\n";
}

std::string ToCsv(const BenchReport& r) {
  std::ostringstream os;
  os << "git_commit,git_dirty,started_at,cpu_model,flush_instruction,seed,keys,table_threads,"
        "index,durability,kind,threads,phase,ops,seconds,mops,ratio,load_factor,"
        "persists_per_insert,fences_per_insert,flushed_lines_per_insert,media_writes_per_insert,"
        "write_amp_insert,write_amp_erase,pm_bytes,dram_bytes,resize_count,resize_p50_ns,"
        "resize_max_ns,resize_total_ns,distribution,latency_every,experiment,pin,repeat,mix,lat_"
        "count,lat_p50_ns,lat_p90_ns,"
        "lat_p99_ns,lat_p999_ns,lat_p9999_ns,lat_max_ns,details,error\n";
  for (const auto& t : r.tables) {
    auto line = [&](const RowResult& row) {
      for (const auto& p : row.phases) {
        const CountingPass* cp = row.counting ? &*row.counting : nullptr;
        const double ratio = row.kind == RowKind::kReference ? NAN : t.Ratio(p);
        const Status& err = p.ok() ? row.error : p.failure;
        os << CsvField(r.build.git_commit) << ',' << (r.build.git_dirty ? "true" : "false") << ','
           << CsvField(r.started_at) << ',' << CsvField(r.machine.cpu_model) << ','
           << CsvField(r.machine.flush_instruction) << ',' << r.config.seed << ',' << r.config.keys
           << ',' << t.threads << ',' << CsvField(row.index) << ',' << row.durability << ','
           << RowKindName(row.kind) << ',' << p.threads << ',' << CsvField(p.name) << ',' << p.ops
           << ',' << CsvNumber(p.seconds) << ',' << CsvNumber(p.ok() ? p.mops() : NAN) << ','
           << CsvNumber(ratio) << ',' << CsvNumber(row.load_factor) << ','
           << (cp ? CsvNumber(cp->insert.persists) : "") << ','
           << (cp ? CsvNumber(cp->insert.fences) : "") << ','
           << (cp ? CsvNumber(cp->insert.flushed_lines) : "") << ','
           << (cp ? CsvNumber(cp->insert.media_writes) : "") << ','
           << (cp ? CsvNumber(cp->insert.write_amplification) : "") << ','
           << (cp ? CsvNumber(cp->erase.write_amplification) : "") << ','
           << (row.stats ? std::to_string(row.stats->pm_bytes) : "") << ',' << row.dram_bytes << ','
           << (row.resize ? std::to_string(row.resize->count) : "") << ','
           << (row.resize ? std::to_string(row.resize->p50_ns) : "") << ','
           << (row.resize ? std::to_string(row.resize->max_ns) : "") << ','
           << (row.resize ? std::to_string(row.resize->total_ns) : "") << ','
           << CsvField(r.config.dist.Name()) << ',' << r.config.latency_every << ','
           << CsvField(r.config.experiment) << ',' << (r.config.pin ? "true" : "false") << ','
           << r.config.repeat << ',' << CsvField(r.config.mix.Name()) << ',' << p.latency.count();
        for (const double q : {0.5, 0.9, 0.99, 0.999, 0.9999}) {
          os << ',' << (p.latency.count() ? CsvNumber(p.latency.Percentile(q)) : "");
        }
        os << ',' << (p.latency.count() ? std::to_string(p.latency.max()) : "") << ',';
        std::string details;
        if (row.stats) {
          for (const auto& d : row.stats->details) {
            details += (details.empty() ? "" : ";") + d.name + "=" + CsvNumber(d.value);
          }
        }
        os << CsvField(details) << ',' << (err.ok() ? "" : CsvField(err.ToString())) << '\n';
      }
    };
    if (t.reference) line(*t.reference);
    if (t.concurrent_reference) line(*t.concurrent_reference);
    for (const auto& row : t.rows) line(row);
    for (const auto& p : t.persist_limits) {
      os << CsvField(r.build.git_commit) << ',' << (r.build.git_dirty ? "true" : "false") << ','
         << CsvField(r.started_at) << ',' << CsvField(r.machine.cpu_model) << ','
         << CsvField(r.machine.flush_instruction) << ',' << r.config.seed << ',' << r.config.keys
         << ',' << t.threads << ",persist-limit," << DurabilityName(p.durability) << ",probe,"
         << p.threads << ",persist," << p.ops << ',' << CsvNumber(p.seconds) << ','
         << CsvNumber(p.failure.ok() ? p.mops() : NAN) << ",,,,,,," << std::string(22, ',')
         << (p.failure.ok() ? "" : CsvField(p.failure.ToString())) << '\n';
    }
  }
  return os.str();
}

std::string ToSeriesCsv(const BenchReport& r) {
  std::ostringstream os;
  os << "git_commit,started_at,cpu_model,seed,experiment,index,durability,point,metric,value\n";
  for (const Series& s : r.series) {
    auto line = [&](const std::string& point, const NamedValue& v) {
      os << CsvField(r.build.git_commit) << ',' << CsvField(r.started_at) << ','
         << CsvField(r.machine.cpu_model) << ',' << r.config.seed << ',' << s.experiment << ','
         << CsvField(s.index) << ',' << s.durability << ',' << point << ',' << CsvField(v.name)
         << ',' << CsvNumber(v.value) << '\n';
    };
    for (const auto& v : s.summary) line("summary", v);
    for (size_t i = 0; i < s.points.size(); i++) {
      for (const auto& v : s.points[i].values) line(std::to_string(i), v);
    }
  }
  return os.str();
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return Status::IOError("cannot write " + path + ": " + std::strerror(errno));
  f << text;
  f.close();
  if (!f) return Status::IOError("error writing " + path);
  return Status::OK();
}

}  // namespace pmhash::bench
