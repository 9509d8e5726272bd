#include "bench/workload.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <deque>

namespace pmhash::bench {

namespace {

double Unit(SplitMix64& rng) { return static_cast<double>(rng.Next() >> 11) * 0x1.0p-53; }

bool ParseDouble(std::string_view s, double* out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

}  // namespace

std::string Distribution::Name() const {
  switch (kind) {
    case DistKind::kUniform:
      return "uniform";
    case DistKind::kZipfian:
      return "zipfian:" + Num(param);
    case DistKind::kSelfSimilar:
      return "selfsimilar:" + Num(param);
    case DistKind::kLatest:
      return "latest";
  }
  return "?";
}

Status ParseDistribution(std::string_view s, Distribution* out) {
  const auto colon = s.find(':');
  const std::string_view name = s.substr(0, colon);
  double p = 0;
  const bool has_param = colon != std::string_view::npos;
  if (has_param && !ParseDouble(s.substr(colon + 1), &p)) {
    return Status::InvalidArgument("invalid distribution parameter in '" + std::string(s) + "'");
  }
  Distribution d;
  if (name == "uniform" && !has_param) {
    d.kind = DistKind::kUniform;
  } else if (name == "zipf" || name == "zipfian") {
    d.kind = DistKind::kZipfian;
    d.param = has_param ? p : 0.99;
    if (!(d.param >= 0 && d.param <= 0.99)) {
      return Status::InvalidArgument("zipfian theta must be in [0, 0.99]");
    }
  } else if (name == "selfsimilar" || name == "self-similar") {
    d.kind = DistKind::kSelfSimilar;
    d.param = has_param ? p : 0.2;
    if (!(d.param > 0 && d.param < 0.5)) {
      return Status::InvalidArgument("self-similar skew must be in (0, 0.5) (0.2 = 80/20)");
    }
  } else if (name == "latest" && !has_param) {
    d.kind = DistKind::kLatest;
    d.param = 0.99;
  } else {
    return Status::InvalidArgument("unknown distribution '" + std::string(s) +
                                   "' (uniform, zipf[:THETA], selfsimilar[:H], latest)");
  }
  *out = d;
  return Status::OK();
}

ZipfianGenerator::ZipfianGenerator(uint64_t n, double theta) : n_(std::max<uint64_t>(n, 1)) {
  theta_ = theta;
  alpha_ = 1.0 / (1.0 - theta);
  double zeta = 0;
  for (uint64_t i = 1; i <= n_; i++) zeta += std::pow(static_cast<double>(i), -theta);
  zetan_ = zeta;
  const double zeta2 = 1.0 + std::pow(2.0, -theta);
  half_pow_theta_ = std::pow(0.5, theta);
  eta_ = n_ <= 2 ? 1.0
                 : (1.0 - std::pow(2.0 / static_cast<double>(n_), 1.0 - theta)) /
                       (1.0 - zeta2 / zetan_);
}

uint64_t ZipfianGenerator::Next(SplitMix64& rng) const {
  const double u = Unit(rng);
  const double uz = u * zetan_;
  if (uz < 1.0 || n_ == 1) return 0;
  if (uz < 1.0 + half_pow_theta_) return 1;
  const auto r =
      static_cast<uint64_t>(static_cast<double>(n_) * std::pow(eta_ * u - eta_ + 1.0, alpha_));
  return std::min(r, n_ - 1);
}

RankGenerator::RankGenerator(const Distribution& d, uint64_t n)
    : d_(d),
      n_(std::max<uint64_t>(n, 1)),
      zipf_(d.kind == DistKind::kZipfian || d.kind == DistKind::kLatest ? n_ : 1, d.param) {
  if (d.kind == DistKind::kSelfSimilar) self_exp_ = std::log(d.param) / std::log(1.0 - d.param);
}

uint64_t RankGenerator::Next(SplitMix64& rng) const {
  switch (d_.kind) {
    case DistKind::kUniform:
      return rng.Below(n_);
    case DistKind::kZipfian:
    case DistKind::kLatest:
      return zipf_.Next(rng);
    case DistKind::kSelfSimilar: {
      const auto r =
          static_cast<uint64_t>(static_cast<double>(n_) * std::pow(Unit(rng), self_exp_));
      return std::min(r, n_ - 1);
    }
  }
  return 0;
}

std::string OpMix::Name() const {
  std::string s;
  auto add = [&](const char* n, double w) {
    if (w <= 0) return;
    if (!s.empty()) s += ',';
    s.append(n).append("=").append(Num(w));  // appends: gcc 12 -O3 warns on "x" + string&&
  };
  add("insert", insert);
  add("find+", find_hit);
  add("find-", find_miss);
  add("update", update);
  add("erase", erase);
  add("rmw", rmw);
  return s;
}

Status ParseMix(std::string_view s, OpMix* out) {
  OpMix m;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    const std::string_view item = s.substr(start, comma - start);
    const auto eq = item.find('=');
    double w = 0;
    if (eq == std::string_view::npos || !ParseDouble(item.substr(eq + 1), &w) || w < 0) {
      return Status::InvalidArgument("invalid mix item '" + std::string(item) +
                                     "': expected OP=WEIGHT, e.g. find+=95,insert=5");
    }
    const std::string_view op = item.substr(0, eq);
    if (op == "insert") {
      m.insert += w;
    } else if (op == "find+" || op == "read") {
      m.find_hit += w;
    } else if (op == "find-") {
      m.find_miss += w;
    } else if (op == "update") {
      m.update += w;
    } else if (op == "erase" || op == "delete") {
      m.erase += w;
    } else if (op == "rmw") {
      m.rmw += w;
    } else {
      return Status::InvalidArgument("unknown operation '" + std::string(op) +
                                     "' in mix (insert, find+, find-, update, erase, rmw)");
    }
    start = comma + 1;
  }
  if (m.Total() <= 0) return Status::InvalidArgument("mix has no operation with weight > 0");
  *out = m;
  return Status::OK();
}

Status YcsbWorkload(std::string_view name, Workload* out) {
  Workload w;
  w.name = std::string(name);
  w.dist = {DistKind::kZipfian, 0.99};
  if (name == "ycsb-a") {
    w.mix.find_hit = 50;
    w.mix.update = 50;
  } else if (name == "ycsb-b") {
    w.mix.find_hit = 95;
    w.mix.update = 5;
  } else if (name == "ycsb-c") {
    w.mix.find_hit = 100;
  } else if (name == "ycsb-d") {
    w.mix.find_hit = 95;
    w.mix.insert = 5;
    w.dist = {DistKind::kLatest, 0.99};
  } else if (name == "ycsb-f") {
    w.mix.find_hit = 50;
    w.mix.rmw = 50;
  } else if (name == "ycsb-e") {
    return Status::NotSupported("ycsb-e needs range scans, which hash indexes do not offer");
  } else {
    return Status::InvalidArgument("unknown workload '" + std::string(name) +
                                   "' (ycsb-a, ycsb-b, ycsb-c, ycsb-d, ycsb-f)");
  }
  *out = w;
  return Status::OK();
}

OpStream GenerateOps(const Workload& w, uint64_t ops, int threads, const KeySet& ks,
                     uint64_t fresh_base, uint64_t seed) {
  OpStream s;
  s.per_thread.resize(static_cast<size_t>(threads));
  const Mixer mix(ks.seed);
  const uint64_t loaded = ks.size();
  const RankGenerator ranks(w.dist, std::max<uint64_t>(loaded, 1));
  const double total = w.mix.Total();
  // Cumulative thresholds over [0, 1).
  const double c_ins = w.mix.insert / total;
  const double c_hit = c_ins + w.mix.find_hit / total;
  const double c_miss = c_hit + w.mix.find_miss / total;
  const double c_upd = c_miss + w.mix.update / total;
  const double c_era = c_upd + w.mix.erase / total;
  for (int t = 0; t < threads; t++) {
    const uint64_t begin = ops * static_cast<uint64_t>(t) / static_cast<uint64_t>(threads);
    const uint64_t end = ops * static_cast<uint64_t>(t + 1) / static_cast<uint64_t>(threads);
    auto& out = s.per_thread[static_cast<size_t>(t)];
    out.reserve(end - begin);
    SplitMix64 rng(Mixer::Finalize(seed * 1315423911ULL + static_cast<uint64_t>(t) + 7));
    std::deque<uint64_t> mine;  // this thread's live inserts, oldest first
    uint64_t fresh = fresh_base + static_cast<uint64_t>(t) * ops;
    uint64_t miss = static_cast<uint64_t>(t);
    // A key that is present: latest counts back from the thread's newest insert into the
    // loaded keys (in insertion order); the others index the loaded keys' shuffled order.
    auto present = [&]() -> uint64_t {
      const uint64_t r = ranks.Next(rng);
      if (w.dist.kind == DistKind::kLatest) {
        if (r < mine.size()) return mine[mine.size() - 1 - r];
        const uint64_t back = r - mine.size();
        return loaded ? ks.insert_order[loaded - 1 - std::min(back, loaded - 1)] : 0;
      }
      return loaded ? ks.find_order[r % loaded] : 0;
    };
    for (uint64_t i = begin; i < end; i++) {
      const double u = static_cast<double>(rng.Next() >> 11) * 0x1.0p-53;
      Op op = u < c_ins    ? Op::kInsert
              : u < c_hit  ? Op::kFindHit
              : u < c_miss ? Op::kFindMiss
              : u < c_upd  ? Op::kUpdate
              : u < c_era  ? Op::kErase
                           : Op::kReadModifyWrite;
      if ((op == Op::kFindHit || op == Op::kUpdate || op == Op::kReadModifyWrite) && loaded == 0 &&
          mine.empty()) {
        op = Op::kInsert;
      }
      if (op == Op::kErase && mine.empty()) op = Op::kInsert;
      uint64_t key = 0;
      switch (op) {
        case Op::kInsert:
          key = mix(fresh++);
          mine.push_back(key);
          s.size_delta++;
          break;
        case Op::kErase:
          key = mine.front();
          mine.pop_front();
          s.size_delta--;
          break;
        case Op::kFindMiss:
          key = ks.negative_order.empty() ? mix(~uint64_t{0} - miss)
                                          : ks.negative_order[miss % ks.negative_order.size()];
          miss += static_cast<uint64_t>(threads);
          break;
        default:
          key = loaded == 0 ? mine[rng.Below(mine.size())] : present();
          break;
      }
      out.push_back({key, op});
    }
  }
  return s;
}

std::vector<uint64_t> DrawKeys(const Distribution& d, uint64_t n, const KeySet& ks, uint64_t seed) {
  std::vector<uint64_t> keys(n);
  const uint64_t loaded = ks.size();
  if (loaded == 0) return {};
  const RankGenerator ranks(d, loaded);
  SplitMix64 rng(Mixer::Finalize(seed ^ 0xd1b54a32d192ed03ULL));
  for (uint64_t i = 0; i < n; i++) {
    const uint64_t r = ranks.Next(rng);
    keys[i] = d.kind == DistKind::kLatest ? ks.insert_order[loaded - 1 - r] : ks.find_order[r];
  }
  return keys;
}

}  // namespace pmhash::bench
