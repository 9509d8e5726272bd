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

}  // namespace pmhash
