#include "bench/keys.h"

#include <utility>

namespace pmhash::bench {

void Shuffle(std::span<uint64_t> v, uint64_t seed) {
  SplitMix64 rng(seed);
  for (size_t i = v.size(); i > 1; i--) {
    std::swap(v[i - 1], v[rng.Below(i)]);
  }
}

KeySet MakeKeySet(uint64_t n, uint64_t seed) {
  KeySet ks;
  ks.seed = seed;
  const Mixer mix(seed);
  ks.insert_order.resize(n);
  ks.negative_order.resize(n);
  for (uint64_t i = 0; i < n; i++) {
    ks.insert_order[i] = mix(i);
    ks.negative_order[i] = mix(n + i);
  }
  ks.find_order = ks.insert_order;
  Shuffle(ks.find_order, Mixer::Finalize(seed + 1));
  return ks;
}

}  // namespace pmhash::bench
