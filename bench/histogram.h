// bench/histogram.h — a log-bucketed latency histogram (nanoseconds), one per thread, merged.
//
// Values below 32 ns have a bucket each; above, every power of two [2^e, 2^(e+1)) is cut into
// 16 equal sub-buckets, so a bucket's width is at most 1/16 of its lower bound: a percentile is
// reported as the midpoint of its bucket, within 3.2% of the exact order statistic (the exact
// minimum and maximum are kept). 976 buckets of 8 bytes cover the whole uint64_t range; Add is
// a few instructions (no allocation, no branch on the value's size beyond a clz).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace pmhash::bench {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 4;
  static constexpr int kSub = 1 << kSubBits;               // 16 sub-buckets per power of two
  static constexpr uint64_t kLinear = uint64_t{2} * kSub;  // 0..31: one bucket per value
  static constexpr int kBuckets = static_cast<int>(kLinear) + (64 - kSubBits - 1) * kSub;

  static int BucketOf(uint64_t v) {
    if (v < kLinear) return static_cast<int>(v);
    const int e = 63 - std::countl_zero(v);  // >= kSubBits + 1
    const int sub = static_cast<int>((v >> (e - kSubBits)) & (kSub - 1));
    return static_cast<int>(kLinear) + (e - kSubBits - 1) * kSub + sub;
  }
  // [lo, hi] of bucket b (inclusive).
  static std::pair<uint64_t, uint64_t> BucketRange(int b) {
    if (b < static_cast<int>(kLinear)) return {static_cast<uint64_t>(b), static_cast<uint64_t>(b)};
    const int i = b - static_cast<int>(kLinear);
    const int e = i / kSub + kSubBits + 1;
    const uint64_t sub = static_cast<uint64_t>(i % kSub);
    const uint64_t width = uint64_t{1} << (e - kSubBits);
    const uint64_t lo = (uint64_t{1} << e) + sub * width;
    return {lo, lo + (width - 1)};
  }

  void Add(uint64_t ns) {
    counts_[static_cast<size_t>(BucketOf(ns))]++;
    count_++;
    sum_ += ns;
    if (ns < min_) min_ = ns;
    if (ns > max_) max_ = ns;
  }
  void Merge(const LatencyHistogram& o) {
    for (size_t i = 0; i < counts_.size(); i++) counts_[i] += o.counts_[i];
    count_ += o.count_;
    sum_ += o.sum_;
    if (o.min_ < min_) min_ = o.min_;
    if (o.max_ > max_) max_ = o.max_;
  }
  void Clear() { *this = LatencyHistogram(); }

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  double mean() const {
    return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0;
  }

  // The q-quantile (0 <= q <= 1): the value of rank ceil(q * count) (1-based), as its bucket's
  // midpoint clamped to [min, max]. 0 when empty.
  double Percentile(double q) const;

  // Non-empty buckets as (upper bound ns, count), in increasing order: a CDF for plotting.
  std::vector<std::pair<uint64_t, uint64_t>> NonEmptyBuckets() const;

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
};

// Summary of a list of durations (exact, from a sorted copy): resize events (Pea Hash Table 3).
struct DurationSummary {
  uint64_t count = 0;
  uint64_t min_ns = 0, p50_ns = 0, p90_ns = 0, p99_ns = 0, max_ns = 0;
  uint64_t total_ns = 0;
};
DurationSummary Summarize(std::vector<uint64_t> ns);

}  // namespace pmhash::bench
