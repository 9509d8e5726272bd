// src/common/hash.h — seeded 64-bit hashing shared by every index.
//
// Fixed-size keys (8 bytes) use a 128-bit multiply-xorshift mixer (the wyhash/mum construction):
// two multiplications, full avalanche, passes SMHasher-style bit-independence for 8-byte inputs,
// and inlines into the probe loop. Variable-size keys use XXH3-64 from libxxhash.
//
// HashMode::kCollide (tests only) makes hashing deliberately bad while keeping every index
// correct-by-construction:
//   h = (Strong(k >> 3) & ~0xFF) | (k & 3)
// so the 8 consecutive keys 8j..8j+7 share all bits above the low byte, and the low byte (every
// index's fingerprint/tag byte) takes only 4 values. Keys k and k+4 of a group have identical
// 64-bit hashes. Tests drawing keys from a dense range therefore hit fingerprint false positives
// on nearly every probe, same-bucket clusters, and equal-hash pairs, without ever putting more
// than 2 keys on one full hash (which no bounded-bucket design could store).
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <string_view>

#include "common/attributes.h"
#include "pmhash/options.h"

namespace pmhash {

inline uint64_t Mix64(uint64_t a, uint64_t b) {
  __uint128_t r = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

class Hasher {
 public:
  Hasher() = default;
  Hasher(HashMode mode, uint64_t seed) : mode_(mode), seed_(seed) {}

  // Always inlined: the first step of every operation, before its first cache miss.
  PMHASH_ALWAYS_INLINE uint64_t operator()(uint64_t key) const {
    if (mode_ == HashMode::kCollide) [[unlikely]] {
      return (Strong(key >> 3) & ~uint64_t{0xFF}) | (key & 3);
    }
    return Strong(key);
  }
  uint64_t operator()(std::string_view key) const {
    const uint64_t h = XXH3_64bits_withSeed(key.data(), key.size(), seed_);
    if (mode_ == HashMode::kCollide) [[unlikely]]
      return (h & ~uint64_t{0xFF}) | (h & 3);
    return h;
  }

  HashMode mode() const { return mode_; }
  uint64_t seed() const { return seed_; }

 private:
  PMHASH_ALWAYS_INLINE uint64_t Strong(uint64_t key) const {
    return Mix64(key ^ seed_ ^ 0xa0761d6478bd642fULL, 0xe7037ed1a0b428dbULL ^ (seed_ >> 1)) ^
           Mix64(key, 0x8ebc6af09c88c6e3ULL);
  }

  HashMode mode_ = HashMode::kStrong;
  uint64_t seed_ = 0;
};

}  // namespace pmhash
