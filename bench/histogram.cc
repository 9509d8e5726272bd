#include "bench/histogram.h"

#include <algorithm>
#include <cmath>

namespace pmhash::bench {

double LatencyHistogram::Percentile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const auto rank =
      std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_))));
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; b++) {
    seen += counts_[static_cast<size_t>(b)];
    if (seen >= rank) {
      const auto [lo, hi] = BucketRange(b);
      const double mid = (static_cast<double>(lo) + static_cast<double>(hi)) / 2;
      return std::clamp(mid, static_cast<double>(min()), static_cast<double>(max_));
    }
  }
  return static_cast<double>(max_);
}

std::vector<std::pair<uint64_t, uint64_t>> LatencyHistogram::NonEmptyBuckets() const {
  std::vector<std::pair<uint64_t, uint64_t>> v;
  for (int b = 0; b < kBuckets; b++) {
    if (counts_[static_cast<size_t>(b)]) {
      v.emplace_back(BucketRange(b).second, counts_[static_cast<size_t>(b)]);
    }
  }
  return v;
}

DurationSummary Summarize(std::vector<uint64_t> ns) {
  DurationSummary s;
  if (ns.empty()) return s;
  std::sort(ns.begin(), ns.end());
  s.count = ns.size();
  auto at = [&](double q) {
    const auto rank = std::max<size_t>(1, static_cast<size_t>(std::ceil(q * ns.size())));
    return ns[rank - 1];
  };
  s.min_ns = ns.front();
  s.p50_ns = at(0.5);
  s.p90_ns = at(0.9);
  s.p99_ns = at(0.99);
  s.max_ns = ns.back();
  for (uint64_t v : ns) s.total_ns += v;
  return s;
}

}  // namespace pmhash::bench
