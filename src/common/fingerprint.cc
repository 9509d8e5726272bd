#include "common/fingerprint.h"

#include <immintrin.h>

namespace pmhash {

namespace {

uint32_t M32Sse2(const uint8_t* t, uint8_t tag) {
  return Match16(t, tag) | (Match16(t + 16, tag) << 16);
}
uint64_t M64Sse2(const uint8_t* t, uint8_t tag) {
  return uint64_t{M32Sse2(t, tag)} | (uint64_t{M32Sse2(t + 32, tag)} << 32);
}

__attribute__((target("avx2"))) uint32_t M32Avx2(const uint8_t* t, uint8_t tag) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t));
  return static_cast<uint32_t>(
      _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(static_cast<char>(tag)))));
}
__attribute__((target("avx2"))) uint64_t M64Avx2(const uint8_t* t, uint8_t tag) {
  return uint64_t{M32Avx2(t, tag)} | (uint64_t{M32Avx2(t + 32, tag)} << 32);
}

__attribute__((target("avx512bw,avx512vl"))) uint32_t M32Avx512(const uint8_t* t, uint8_t tag) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t));
  return _mm256_cmpeq_epi8_mask(v, _mm256_set1_epi8(static_cast<char>(tag)));
}
__attribute__((target("avx512bw,avx512vl"))) uint64_t M64Avx512(const uint8_t* t, uint8_t tag) {
  const __m512i v = _mm512_loadu_si512(t);
  return _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(static_cast<char>(tag)));
}

SimdLevel Detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return SimdLevel::kAvx512;
  if (__builtin_cpu_supports("avx2")) return SimdLevel::kAvx2;
  return SimdLevel::kSse2;
}

}  // namespace

SimdLevel ActiveSimdLevel() {
  static const SimdLevel kLevel = Detect();
  return kLevel;
}

const char* SimdLevelName(SimdLevel l) {
  switch (l) {
    case SimdLevel::kSse2:
      return "sse2";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512bw+vl";
  }
  return "?";
}

uint32_t Match32With(SimdLevel l, const uint8_t* tags, uint8_t tag) {
  switch (l) {
    case SimdLevel::kAvx512:
      return M32Avx512(tags, tag);
    case SimdLevel::kAvx2:
      return M32Avx2(tags, tag);
    case SimdLevel::kSse2:
      break;
  }
  return M32Sse2(tags, tag);
}

uint64_t Match64With(SimdLevel l, const uint8_t* tags, uint8_t tag) {
  switch (l) {
    case SimdLevel::kAvx512:
      return M64Avx512(tags, tag);
    case SimdLevel::kAvx2:
      return M64Avx2(tags, tag);
    case SimdLevel::kSse2:
      break;
  }
  return M64Sse2(tags, tag);
}

uint32_t Match32(const uint8_t* tags, uint8_t tag) {
  static const auto fn = [] {
    switch (ActiveSimdLevel()) {
      case SimdLevel::kAvx512:
        return &M32Avx512;
      case SimdLevel::kAvx2:
        return &M32Avx2;
      case SimdLevel::kSse2:
        break;
    }
    return &M32Sse2;
  }();
  return fn(tags, tag);
}

uint64_t Match64(const uint8_t* tags, uint8_t tag) {
  static const auto fn = [] {
    switch (ActiveSimdLevel()) {
      case SimdLevel::kAvx512:
        return &M64Avx512;
      case SimdLevel::kAvx2:
        return &M64Avx2;
      case SimdLevel::kSse2:
        break;
    }
    return &M64Sse2;
  }();
  return fn(tags, tag);
}

}  // namespace pmhash
