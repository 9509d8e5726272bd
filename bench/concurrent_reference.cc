#include "bench/concurrent_reference.h"

#include <string>

#include "bench/row.h"

#if PMHASH_HAVE_TBB
#include <tbb/concurrent_hash_map.h>
#endif

namespace pmhash::bench {

#if PMHASH_HAVE_TBB

namespace {

class TbbReference {
 public:
  Status Insert(uint64_t k, uint64_t v) {
    Map::accessor a;
    if (!map_.insert(a, k)) return Status::Exists();
    a->second = v;
    return Status::OK();
  }
  Status Update(uint64_t k, uint64_t v) {
    Map::accessor a;
    if (!map_.find(a, k)) return Status::NotFound();
    a->second = v;
    return Status::OK();
  }
  Status Find(uint64_t k, uint64_t* v) const {
    Map::const_accessor a;
    if (!map_.find(a, k)) return Status::NotFound();
    *v = a->second;
    return Status::OK();
  }
  Status Erase(uint64_t k) { return map_.erase(k) ? Status::OK() : Status::NotFound(); }
  uint64_t Size() const { return map_.size(); }
  uint64_t Buckets() const { return map_.bucket_count(); }

 private:
  using Map = tbb::concurrent_hash_map<uint64_t, uint64_t>;
  Map map_;
};

}  // namespace

bool HaveConcurrentReference() { return true; }

RowResult RunConcurrentReferenceRow(std::span<const PhaseSpec> phases, const RunnerOptions& ro,
                                    const std::function<void(std::string_view)>& progress) {
  RowResult row;
  row.index = std::string(kConcurrentReferenceName);
  row.durability = "dram";
  row.kind = RowKind::kReference;
  row.threads = ro.threads;
  TbbReference table;
  RunReferencePhases(table, phases, ro, progress, &row, [&row](const TbbReference& t) {
    if (t.Buckets() > 0) {
      row.load_factor = static_cast<double>(t.Size()) / static_cast<double>(t.Buckets());
    }
  });
  return row;
}

#else

bool HaveConcurrentReference() { return false; }

RowResult RunConcurrentReferenceRow(std::span<const PhaseSpec>, const RunnerOptions& ro,
                                    const std::function<void(std::string_view)>&) {
  RowResult row;
  row.index = std::string(kConcurrentReferenceName);
  row.durability = "dram";
  row.kind = RowKind::kReference;
  row.threads = ro.threads;
  row.error = Status::NotSupported("built without TBB (install libtbb-dev and reconfigure)");
  return row;
}

#endif

}  // namespace pmhash::bench
