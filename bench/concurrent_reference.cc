#include "bench/concurrent_reference.h"

#include <absl/container/flat_hash_map.h>
#include <absl/hash/hash.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "bench/row.h"

namespace pmhash::bench {

namespace {

class ShardedAbslReference {
 public:
  static constexpr int kShardBits = 8;  // kConcurrentReferenceName says 256

  Status Insert(uint64_t k, uint64_t v) {
    Shard& s = ShardOf(k);
    std::lock_guard l(s.mu);
    return s.map.try_emplace(k, v).second ? Status::OK() : Status::Exists();
  }
  Status Update(uint64_t k, uint64_t v) {
    Shard& s = ShardOf(k);
    std::lock_guard l(s.mu);
    auto it = s.map.find(k);
    if (it == s.map.end()) return Status::NotFound();
    it->second = v;
    return Status::OK();
  }
  Status Find(uint64_t k, uint64_t* v) const {
    const Shard& s = ShardOf(k);
    std::shared_lock l(s.mu);
    auto it = s.map.find(k);
    if (it == s.map.end()) return Status::NotFound();
    *v = it->second;
    return Status::OK();
  }
  Status Erase(uint64_t k) {
    Shard& s = ShardOf(k);
    std::lock_guard l(s.mu);
    return s.map.erase(k) ? Status::OK() : Status::NotFound();
  }
  // REQUIRES: no other call in flight (between phases).
  double LoadFactor() const {
    uint64_t size = 0, buckets = 0;
    for (const Shard& s : shards_) {
      std::shared_lock l(s.mu);
      size += s.map.size();
      buckets += s.map.bucket_count();
    }
    return buckets ? static_cast<double>(size) / static_cast<double>(buckets) : 0;
  }

 private:
  struct alignas(64) Shard {
    mutable std::shared_mutex mu;
    absl::flat_hash_map<uint64_t, uint64_t> map;
  };
  // The top bits of absl's own hash: its tables place keys by the low bits (H1 = hash >> 7, H2
  // = the low 7), so the keys of one shard stay spread over its table.
  static size_t Index(uint64_t k) { return absl::Hash<uint64_t>{}(k) >> (64 - kShardBits); }
  Shard& ShardOf(uint64_t k) { return shards_[Index(k)]; }
  const Shard& ShardOf(uint64_t k) const { return shards_[Index(k)]; }

  std::array<Shard, size_t{1} << kShardBits> shards_;
};

}  // namespace

RowResult RunConcurrentReferenceRow(std::span<const PhaseSpec> phases, const RunnerOptions& ro,
                                    const std::function<void(std::string_view)>& progress) {
  RowResult row;
  row.index = std::string(kConcurrentReferenceName);
  row.durability = "dram";
  row.kind = RowKind::kReference;
  row.threads = ro.threads;
  auto table = std::make_unique<ShardedAbslReference>();
  RunReferencePhases(*table, phases, ro, progress, &row,
                     [&row](const ShardedAbslReference& t) { row.load_factor = t.LoadFactor(); });
  return row;
}

}  // namespace pmhash::bench
