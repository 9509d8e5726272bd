#include "common/huge_array.h"

#include <sys/mman.h>

#include <cstdint>

namespace pmhash {

namespace {
constexpr size_t kHuge = size_t{2} << 20;
constexpr size_t kPage = 4096;

size_t MappedBytes(size_t bytes) {
  return bytes >= kHuge ? (bytes + kHuge - 1) / kHuge * kHuge : (bytes + kPage - 1) / kPage * kPage;
}
}  // namespace

void* AllocateHugeZeroed(size_t bytes, bool huge) noexcept {
  if (bytes == 0) return nullptr;
  const size_t len = MappedBytes(bytes);  // (also without `huge`: FreeHuge unmaps this length)
  if (len < kHuge || !huge) {
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  // Over-map by 2 MiB and trim to a 2 MiB-aligned window.
  void* raw =
      mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHuge - 1) & ~(kHuge - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + len + kHuge;
  if (end > aligned + len) munmap(reinterpret_cast<void*>(aligned + len), end - (aligned + len));
  madvise(reinterpret_cast<void*>(aligned), len, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void FreeHuge(void* p, size_t bytes) noexcept {
  if (p) munmap(p, MappedBytes(bytes));
}

bool DiscardHuge(void* p, size_t bytes) noexcept {
  return !p || madvise(p, MappedBytes(bytes), MADV_DONTNEED) == 0;
}

}  // namespace pmhash
