// bench/workload.h — key distributions and mixed operation streams (YCSB-style workloads).
//
// Distributions pick a RANK in [0, n); the rank is mapped to a key of the loaded set through a
// fixed permutation (KeySet::find_order), so hot keys are scattered over the table, as in YCSB's
// "scrambled" zipfian:
//   uniform                      every rank equally likely
//   zipfian(theta)               P(rank r) ~ 1 / (r+1)^theta, 0 <= theta <= 0.99 (Gray et al.,
//                                "Quickly generating billion-record synthetic databases", the
//                                generator YCSB uses); theta 0 is uniform
//   self-similar(h)              a fraction 1-h of the accesses go to a fraction h of the keys,
//                                recursively (h = 0.2: 80/20); Gray et al. again
//   latest                       zipfian(0.99) over recency: rank 0 is the most recently
//                                inserted key (YCSB workload D)
//
// A workload is a mix of operations by ratio over a loaded table of N keys. Its operations are
// generated before the clock starts, per thread, so that they are valid in any interleaving:
//   find+ / update / rmw : a key drawn from the distribution over keys that stay present (the
//                          loaded keys, and the thread's own inserts not yet erased)
//   insert               : a fresh key never used elsewhere (disjoint per thread)
//   erase                : the oldest of the thread's own live inserts (so reads never miss); if
//                          it has none, the operation becomes an insert
//   find-                : a key that is never inserted
// Update writes ValueOf(key) again, so every read can still check its value. RMW (YCSB F) is a
// Find followed by an Update of the same key.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bench/keys.h"
#include "bench/runner.h"
#include "pmhash/status.h"

namespace pmhash::bench {

enum class DistKind : uint8_t { kUniform, kZipfian, kSelfSimilar, kLatest };

struct Distribution {
  DistKind kind = DistKind::kUniform;
  double param = 0;  // zipfian theta, self-similar h; latest: theta (0.99)
  std::string Name() const;
};
// "uniform", "zipf" / "zipfian" (theta 0.99), "zipf:0.8", "selfsimilar" (0.2),
// "selfsimilar:0.1", "latest".
Status ParseDistribution(std::string_view s, Distribution* out);

// Zipfian ranks in [0, n), Gray et al.'s constant-time method after an O(n) zeta computation.
class ZipfianGenerator {
 public:
  ZipfianGenerator(uint64_t n, double theta);
  uint64_t Next(SplitMix64& rng) const;
  uint64_t n() const { return n_; }

 private:
  uint64_t n_;
  double theta_, alpha_, zetan_, eta_, half_pow_theta_;
};

// Any of the distributions over ranks [0, n) (latest: rank 0 = newest).
class RankGenerator {
 public:
  RankGenerator(const Distribution& d, uint64_t n);
  uint64_t Next(SplitMix64& rng) const;

 private:
  Distribution d_;
  uint64_t n_;
  ZipfianGenerator zipf_;
  double self_exp_ = 1;
};

struct OpMix {
  // Weights (any scale) of insert, find+, find-, update, erase, rmw.
  double insert = 0, find_hit = 0, find_miss = 0, update = 0, erase = 0, rmw = 0;
  double Total() const { return insert + find_hit + find_miss + update + erase + rmw; }
  std::string Name() const;  // "insert=5,find+=95"
};
// "insert=5,find+=95" (names: insert, find+/read, find-, update, erase/delete, rmw).
Status ParseMix(std::string_view s, OpMix* out);

struct Workload {
  std::string name;  // "ycsb-a", "mix", ...
  OpMix mix;
  Distribution dist;
};
// ycsb-a (50 read / 50 update, zipfian), ycsb-b (95/5), ycsb-c (read only), ycsb-d (95 read /
// 5 insert, latest), ycsb-f (50 read / 50 rmw); ycsb-e is kNotSupported (it needs scans).
Status YcsbWorkload(std::string_view name, Workload* out);

// The generated operations of one mixed phase.
struct OpStream {
  std::vector<std::vector<OpKey>> per_thread;
  int64_t size_delta = 0;  // inserts - erases
  uint64_t ops() const {
    uint64_t n = 0;
    for (const auto& v : per_thread) n += v.size();
    return n;
  }
};

// `ops` operations of `w` split among `threads`, over the loaded keys ks.find_order (all
// present). Fresh insert keys come from Mixer(seed) indices [fresh_base, ...), disjoint per
// thread (thread t uses fresh_base + t * ops + i); find- keys from ks.negative_order.
// Deterministic in (w, ops, threads, ks, seed).
OpStream GenerateOps(const Workload& w, uint64_t ops, int threads, const KeySet& ks,
                     uint64_t fresh_base, uint64_t seed);

// `n` keys of the loaded set drawn from `d` (with repetition): the key list of a find+ or
// update phase under a skewed distribution.
std::vector<uint64_t> DrawKeys(const Distribution& d, uint64_t n, const KeySet& ks, uint64_t seed);

}  // namespace pmhash::bench
