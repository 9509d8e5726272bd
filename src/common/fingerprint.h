// src/common/fingerprint.h — SIMD match of one tag byte against a bucket's tag array.
//
// Match16 is the hot path of REH, Pea Hash and TurboHash (<= 16 tags per bucket): one SSE2
// compare + movemask, always inlined. Match16Wide is the same for sixteen 2-byte tags (ElimDA's
// 16-bit fingerprints). Match32/Match64 serve multi-bucket probes (e.g. a 2-choice
// pair, a probe window); they dispatch once at startup to AVX-512BW, AVX2 or SSE2. Every
// implementation returns the identical bit mask (bit i set iff tags[i] == tag); the tests check
// that on every implementation the CPU offers.
#pragma once

#include <emmintrin.h>

#include <atomic>
#include <cstdint>

namespace pmhash {

inline uint32_t Match16(const uint8_t* tags, uint8_t tag) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tags));
  return static_cast<uint32_t>(
      _mm_movemask_epi8(_mm_cmpeq_epi8(t, _mm_set1_epi8(static_cast<char>(tag)))));
}
// Same on a 16-byte tag vector already in a register (e.g. loaded from two atomic words).
inline uint32_t Match16(__m128i tags, uint8_t tag) {
  return static_cast<uint32_t>(
      _mm_movemask_epi8(_mm_cmpeq_epi8(tags, _mm_set1_epi8(static_cast<char>(tag)))));
}

// Sixteen 2-byte tags: bit i set iff tags[i] == tag. Two SSE2 compares, packed (each lane is
// 0 or -1, so signed saturation keeps it) into one byte mask. Reads 32 bytes at tags.
inline uint32_t Match16Wide(const uint16_t* tags, uint16_t tag) {
  const __m128i t = _mm_set1_epi16(static_cast<short>(tag));
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tags));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tags + 8));
  return static_cast<uint32_t>(
      _mm_movemask_epi8(_mm_packs_epi16(_mm_cmpeq_epi16(lo, t), _mm_cmpeq_epi16(hi, t))));
}

enum class SimdLevel : uint8_t { kSse2, kAvx2, kAvx512 };
SimdLevel ActiveSimdLevel();  // best level of this CPU, chosen once
const char* SimdLevelName(SimdLevel l);

uint32_t Match32(const uint8_t* tags, uint8_t tag);  // dispatched
uint64_t Match64(const uint8_t* tags, uint8_t tag);  // dispatched

// Explicit implementations, for tests and benchmarks. Calling a level the CPU lacks is UB;
// check ActiveSimdLevel() first.
uint32_t Match32With(SimdLevel l, const uint8_t* tags, uint8_t tag);
uint64_t Match64With(SimdLevel l, const uint8_t* tags, uint8_t tag);

// The probe of a split-block Bloom filter (SmartHT's: one 64 B block of eight words per key):
// true iff, for every i < 8, bit (bits >> 8i) & 63 of block[i] is set. Other threads may set
// bits of the block meanwhile: each word is read once, as by a relaxed atomic load.
//
// BlockBitsSet reads the words one by one (std::atomic_ref); BlockBitsSetAvx2 with two 32-byte
// loads. The two answer alike, but not at the same speed where the block misses the cache: a
// negative search is one such miss, and the eight loads of the first each hold a load-queue
// entry for the whole miss, so fewer searches' misses overlap (measured: 2.5-3x the rate of the
// word-by-word check over a 16-64 MiB array of blocks, one thread). BlockBitsSetAvx2 is one
// block of inline assembly, loads included: opaque to the compiler (and to the sanitizers) as
// the atomic loads are to its optimizer, and inlined into callers built without -mavx2 (a
// function with target("avx2") cannot be), so that a negative search runs no call at all: the
// fewer instructions each search keeps in flight, the more searches' misses the CPU overlaps
// (a scratch loop over a 40 MB filter: the probe called out of line ran at 0.66-0.85x the rate
// of the inlined one; docs/results.md, "SmartHT: find− inline"). It ends with vzeroupper, as
// the SSE code around it expects. Were a vector load to tear a word, each part would still hold
// every bit set before the probe began (bits are only set while a filter serves), which is all a
// probe promises.
// REQUIRES: block 8-byte aligned; BlockBitsSetAvx2 only where ActiveSimdLevel() >= kAvx2.
inline bool BlockBitsSet(const uint64_t* block, uint64_t bits) {
  bool all = true;
  for (int i = 0; i < 8; i++) {
    const uint64_t m = uint64_t{1} << ((bits >> (i * 8)) & 63);
    // (a load only: atomic_ref<const T> is C++26)
    std::atomic_ref<uint64_t> w(const_cast<uint64_t&>(block[i]));
    all &= (w.load(std::memory_order_relaxed) & m) != 0;
  }
  return all;
}
[[gnu::always_inline]] inline bool BlockBitsSetAvx2(const uint64_t* block, uint64_t bits) {
  struct Half {
    uint64_t w[4];
  };
  bool all;
  // Word i's bit number n_i is byte i of bits (mod 64): the bytes widened to four 64-bit lanes
  // per half, each lane's mask 1 << n_i; all set iff no mask bit is clear in its word.
  asm volatile(
      "vmovq %[bits], %%xmm0\n\t"
      "vpmovzxbq %%xmm0, %%ymm1\n\t"       // n_0..n_3
      "vpsrlq $32, %%xmm0, %%xmm0\n\t"
      "vpmovzxbq %%xmm0, %%ymm2\n\t"       // n_4..n_7
      "vpcmpeqq %%ymm3, %%ymm3, %%ymm3\n\t"
      "vpsrlq $63, %%ymm3, %%ymm3\n\t"     // 1 in every lane
      "vpsllvq %%ymm1, %%ymm3, %%ymm1\n\t" // masks 0..3
      "vpsllvq %%ymm2, %%ymm3, %%ymm2\n\t" // masks 4..7
      "vmovdqu %[lo], %%ymm4\n\t"          // words 0..3
      "vmovdqu %[hi], %%ymm5\n\t"          // words 4..7
      "vpandn %%ymm1, %%ymm4, %%ymm1\n\t"  // mask bits clear in the word
      "vpandn %%ymm2, %%ymm5, %%ymm2\n\t"
      "vpor %%ymm1, %%ymm2, %%ymm1\n\t"
      "vptest %%ymm1, %%ymm1\n\t"
      "sete %[all]\n\t"
      "vzeroupper"
      : [all] "=r"(all)
      : [bits] "r"(bits & 0x3F3F3F3F3F3F3F3FULL), [lo] "m"(*reinterpret_cast<const Half*>(block)),
        [hi] "m"(*reinterpret_cast<const Half*>(block + 4))
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "cc");
  return all;
}

}  // namespace pmhash
