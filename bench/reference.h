// bench/reference.h — the DRAM reference table every benchmark row is compared with.
//
// absl::flat_hash_map<uint64_t, uint64_t> (SwissTable), default hash, starting empty with no
// reserve(), so it grows by rehashing exactly as an index starting small has to. It is not
// thread-safe and is always run by one thread; the ratio index / reference is the figure that
// stays comparable across machines and across noisy runs.
//
// Its array comes from PageAllocator: the default heap, or (huge_pages, BenchConfig::huge_pages)
// 2 MiB-aligned anonymous memory advised MADV_HUGEPAGE, so that a run with every pool on huge
// pages compares against absl on huge pages too, not against a table paying TLB misses the pools
// no longer pay. Pages() says what the kernel gave it.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/hash/hash.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <string_view>
#include <utility>

#include "bench/pages.h"
#include "common/huge_array.h"
#include "pmhash/status.h"

namespace pmhash::bench {

// A stateful allocator: arrays of at least 2 MiB from AllocateHugeZeroed when `huge`, everything
// else from operator new. It remembers its latest large array (the table's current one) for
// Pages().
struct PageAllocatorState {
  bool huge = false;
  const void* last = nullptr;  // the latest array of at least PageAllocator::kLarge bytes
  size_t last_bytes = 0;
};

template <class T>
class PageAllocator {
 public:
  using value_type = T;
  using State = PageAllocatorState;
  static constexpr size_t kLarge = size_t{2} << 20;

  explicit PageAllocator(State* state) : state_(state) {}
  template <class U>
  PageAllocator(const PageAllocator<U>& other) : state_(other.state()) {}  // NOLINT: rebind

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    void* p = state_->huge && bytes >= kLarge ? AllocateHugeZeroed(bytes) : nullptr;
    if (p == nullptr) p = ::operator new(bytes);
    if (bytes >= kLarge) *state_ = State{state_->huge, p, bytes};
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (state_->huge && bytes >= kLarge) {
      FreeHuge(p, bytes);
    } else {
      ::operator delete(p);
    }
  }
  State* state() const { return state_; }
  template <class U>
  bool operator==(const PageAllocator<U>& o) const {
    return state_ == o.state();
  }

 private:
  State* state_;
};

class AbslReference {
 public:
  static constexpr std::string_view kName = "absl::flat_hash_map";

  explicit AbslReference(bool huge_pages = false)
      : state_(std::make_unique<PageAllocatorState>(PageAllocatorState{huge_pages, nullptr, 0})),
        map_(0, absl::Hash<uint64_t>(), std::equal_to<uint64_t>(), Alloc(state_.get())) {}

  Status Insert(uint64_t k, uint64_t v) {
    return map_.try_emplace(k, v).second ? Status::OK() : Status::Exists();
  }
  Status Update(uint64_t k, uint64_t v) {
    auto it = map_.find(k);
    if (it == map_.end()) return Status::NotFound();
    it->second = v;
    return Status::OK();
  }
  Status Find(uint64_t k, uint64_t* v) const {
    auto it = map_.find(k);
    if (it == map_.end()) return Status::NotFound();
    *v = it->second;
    return Status::OK();
  }
  Status Erase(uint64_t k) { return map_.erase(k) ? Status::OK() : Status::NotFound(); }

  uint64_t Size() const { return map_.size(); }
  double LoadFactor() const { return map_.load_factor(); }
  uint64_t Capacity() const { return map_.bucket_count(); }
  // Approximate DRAM footprint: one slot (16 B) and one control byte per bucket.
  uint64_t DramBytes() const { return map_.bucket_count() * (sizeof(uint64_t) * 2 + 1); }
  // The pages of the table's current array (reads /proc/self/smaps; not for timed code).
  PageUse Pages() const { return PagesOfRange(state_->last, state_->last_bytes); }

 private:
  using Alloc = PageAllocator<std::pair<const uint64_t, uint64_t>>;
  std::unique_ptr<PageAllocatorState> state_;  // first: the map's allocator points into it
  using Map =
      absl::flat_hash_map<uint64_t, uint64_t, absl::Hash<uint64_t>, std::equal_to<uint64_t>, Alloc>;
  Map map_;
};

}  // namespace pmhash::bench
