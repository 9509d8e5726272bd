// bench/keys.h — reproducible key sets for the benchmark.
//
// Keys are N distinct, uniformly distributed 64-bit integers derived from a seed:
//
//   key(i) = Mixer(seed)(i),  i in [0, N)        positive keys (inserted)
//   key(i) = Mixer(seed)(i),  i in [N, 2N)       negative keys (never inserted)
//
// Mixer is a bijection of the 64-bit integers (a seed-dependent offset followed by the
// murmur3/splitmix64 finaliser, whose xor-shifts and odd multiplications are each invertible),
// so distinct indices give distinct keys: no duplicate among the positives, and every negative
// key is guaranteed absent. Dense or sequential keys, which flatter hash tables, never appear.
//
// Access orders are separate permutations (Fisher-Yates with a seeded generator), so a find
// phase does not walk the table in insertion order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pmhash::bench {

// A seeded bijection on uint64_t.
class Mixer {
 public:
  explicit Mixer(uint64_t seed) : offset_(Finalize(seed ^ 0x6a09e667f3bcc909ULL)) {}
  uint64_t operator()(uint64_t i) const { return Finalize(i + offset_); }

  // murmur3 fmix64: a bijection (each step is invertible).
  static uint64_t Finalize(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
  }

 private:
  uint64_t offset_;
};

// A small, fast, seeded generator (splitmix64) for shuffles and sampling.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) by Lemire's multiply-shift (bias at most n / 2^64: irrelevant here).
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<__uint128_t>(Next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

// The keys of one benchmark run.
struct KeySet {
  uint64_t seed = 0;
  std::vector<uint64_t> insert_order;    // key(0..N-1): insertion order
  std::vector<uint64_t> find_order;      // a permutation of insert_order: finds and erases
  std::vector<uint64_t> negative_order;  // key(N..2N-1): all absent

  uint64_t size() const { return insert_order.size(); }
};

// Builds the key set of N keys for `seed`. Deterministic: the same (n, seed) gives the same
// keys and orders on every machine.
KeySet MakeKeySet(uint64_t n, uint64_t seed);

// Shuffles `v` in place with a generator seeded by `seed`.
void Shuffle(std::span<uint64_t> v, uint64_t seed);

// The value stored with `key` by every benchmark phase (finds verify it).
inline uint64_t ValueOf(uint64_t key) { return key ^ 0x5851f42d4c957f2dULL; }

}  // namespace pmhash::bench
