// bench/reference.h — the DRAM reference table every benchmark row is compared with.
//
// absl::flat_hash_map<uint64_t, uint64_t> (SwissTable), default hash, starting empty with no
// reserve(), so it grows by rehashing exactly as an index starting small has to. It is not
// thread-safe and is always run by one thread; the ratio index / reference is the figure that
// stays comparable across machines and across noisy runs.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <cstdint>
#include <string_view>

#include "pmhash/status.h"

namespace pmhash::bench {

class AbslReference {
 public:
  static constexpr std::string_view kName = "absl::flat_hash_map";

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

 private:
  absl::flat_hash_map<uint64_t, uint64_t> map_;
};

}  // namespace pmhash::bench
