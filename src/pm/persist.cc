#include "pm/persist.h"

#include <cpuid.h>

namespace pmhash::pm {

namespace {
FlushInstruction Detect() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    if (b & (1u << 24)) return FlushInstruction::kClwb;
    if (b & (1u << 23)) return FlushInstruction::kClflushopt;
  }
  return FlushInstruction::kClflush;
}
}  // namespace

FlushInstruction ActiveFlushInstruction() {
  static const FlushInstruction kActive = Detect();
  return kActive;
}

const char* FlushInstructionName(FlushInstruction f) {
  switch (f) {
    case FlushInstruction::kClwb:
      return "clwb";
    case FlushInstruction::kClflushopt:
      return "clflushopt";
    case FlushInstruction::kClflush:
      return "clflush";
  }
  return "?";
}

namespace detail {
void NtCopyAdr(void* dst, const void* src, size_t n) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  // Head: up to the first 16-byte boundary of dst, a cached copy that we flush.
  size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  if (head > n) head = n;
  if (head) {
    std::memcpy(d, s, head);
    Adr::Flush(d, head);
  }
  d += head;
  s += head;
  n -= head;
  for (; n >= 16; n -= 16, d += 16, s += 16) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), v);
  }
  if (n) {
    std::memcpy(d, s, n);
    Adr::Flush(d, n);
  }
}
}  // namespace detail

}  // namespace pmhash::pm
