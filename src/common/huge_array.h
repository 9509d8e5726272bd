// src/common/huge_array.h — DRAM arrays backed by transparent huge pages.
//
// The volatile halves of the indexes (REH's directory and bucket metadata, later Pea Hash's lock
// table or ElimDA's DRAM mirror) are probed at random, one or two lines per operation. With 4 KiB
// pages almost every probe of a table larger than the STLB reach (~6 MiB) also misses the TLB;
// 2 MiB pages remove most of those walks. Arrays of at least 2 MiB are mmap'ed 2 MiB-aligned and
// advised MADV_HUGEPAGE (honoured when THP is in "madvise" or "always" mode); smaller arrays are
// ordinary zeroed mappings. Elements are value-initialised in place (an atomic must be constructed
// before use, not taken from zero bytes), and destroyed with the array; trivial types (integers)
// are taken from the mapping's zero bytes as they are, so that an array's pages are mapped when
// first used, not all at construction (a pool's allocator bitmap: 2.4 MiB at 10M keys, most of
// it never touched by an open that loads a few hundred KiB of it).
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace pmhash {

// nullptr on failure.
// `huge`: advised MADV_HUGEPAGE (if at least 2 MiB). Without it, 4 KiB pages: for arrays that
// are touched sparsely or once (the allocator's bitmap), where a first touch should not fault
// in (and zero, and under THP's "madvise" defrag, compact memory for) a 2 MiB page.
void* AllocateHugeZeroed(size_t bytes, bool huge = true) noexcept;
void FreeHuge(void* p, size_t bytes) noexcept;
// Gives the pages of an allocation back to the kernel (MADV_DONTNEED) and keeps the mapping:
// every byte reads zero again, and a racing reader reads the old bytes or zeros, never unmapped
// memory. False if the kernel refused (the bytes are then unchanged).
bool DiscardHuge(void* p, size_t bytes) noexcept;

enum class Pages { kHuge, kSmall };

// A fixed-size array of value-initialised T (atomics, integers, pointers, small structs of them).
template <class T>
class HugeArray {
  static_assert(std::is_nothrow_default_constructible_v<T>, "no exceptions in the library");

 public:
  HugeArray() = default;
  explicit HugeArray(size_t n, Pages pages = Pages::kHuge) : n_(n) {
    data_ = static_cast<T*>(AllocateHugeZeroed(n * sizeof(T), pages == Pages::kHuge));
    if (!data_) {
      n_ = 0;
      return;
    }
    // Start every element's lifetime: the mapping is zero already, which for a trivial type is
    // its value-initialised value (nothing to write, no page touched); atomics and the like are
    // constructed (the same zeros written).
    if constexpr (!kZeroIsValue) std::uninitialized_value_construct_n(data_, n_);
  }
  ~HugeArray() {
    if constexpr (!kZeroIsValue) {
      if (data_) std::destroy_n(data_, n_);
    }
    FreeHuge(data_, n_ * sizeof(T));
  }
  HugeArray(HugeArray&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  HugeArray& operator=(HugeArray&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(n_, o.n_);
    return *this;
  }

  explicit operator bool() const { return data_ != nullptr; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  // Every element zero again, its pages given back (DiscardHuge). REQUIRES: T is an integer
  // (its zero bytes are its value-initialised value).
  bool Discard() {
    static_assert(kZeroIsValue);
    return DiscardHuge(data_, bytes());
  }

 private:
  static constexpr bool kZeroIsValue =
      std::is_trivially_default_constructible_v<T> && std::is_trivially_destructible_v<T> &&
      std::is_arithmetic_v<T>;
  T* data_ = nullptr;
  size_t n_ = 0;
};

}  // namespace pmhash
