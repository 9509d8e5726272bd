// The out-of-line part of src/index/records.h: recovery, invariant checks and statistics.
#include "index/records.h"

namespace pmhash::index {

Status Records::Recover(uint64_t off, uint64_t h, const Hasher& hash) {
  // Called for every live record at open: the messages are built only on failure.
  auto corrupt = [&](std::string_view what) {
    return Status::Corruption(std::string(kind_) + ": record at " + std::to_string(off) + " " +
                              std::string(what));
  };
  if (!heap_.PlausibleRecord(off, kRecordHeader)) {
    return corrupt("is outside the heap or misaligned");
  }
  const uint64_t bytes = Bytes(off);
  if (bytes > max_bytes_) return corrupt("has bad lengths");
  // In the heap, in a valid slab of its size class (or its own chunks), on a slot boundary, not
  // shared: only then are its key bytes read.
  if (Status st = heap_.MarkReachable(off, bytes); !st.ok()) {
    return Status::Corruption(std::string(kind_) + ": " + std::string(st.message()));
  }
  if (hash(Key(off)) != h) return corrupt("does not match its slot's hash");
  return Status::OK();
}

std::string Records::Check(uint64_t off, uint64_t h, const Hasher& hash, Tally* t) const {
  const uint64_t bytes = Bytes(off);
  if (!heap_.IsAllocated(off, bytes)) return "record not marked allocated";
  if (hash(Key(off)) != h) return "record hash mismatch";
  if (const uint64_t slab = heap_.SlabOf(off, bytes)) {
    t->slabs.insert(slab);
  } else {
    const uint64_t chunk = pool_.allocator().chunk_size();
    t->large_chunks += (bytes + chunk - 1) / chunk;
  }
  return "";
}

std::string Records::Finish(const Tally& t, uint64_t live, uint64_t* chunks) const {
  // Reachable slabs, plus the empty ones the heap keeps for reuse (H4 in record_heap.h); every
  // allocated slot is a reachable record.
  if (Status st = heap_.Check(); !st.ok()) return std::string(st.message());
  const pm::RecordHeapStats rs = heap_.stats();
  if (rs.slabs != t.slabs.size() + rs.empty_slabs) {
    return "live slabs (" + std::to_string(rs.slabs) + ") != slabs with a reachable record (" +
           std::to_string(t.slabs.size()) + ") + empty slabs kept (" +
           std::to_string(rs.empty_slabs) + "): leak";
  }
  if (rs.large_chunks != t.large_chunks) return "large record chunks differ";
  if (rs.slab_records + rs.large_records != live) {
    return "allocated records (" + std::to_string(rs.slab_records + rs.large_records) +
           ") != reachable records (" + std::to_string(live) + "): leak";
  }
  *chunks += rs.slabs * heap_.slab_chunks() + t.large_chunks;
  return "";
}

void Records::AddDetails(IndexStats* s) const {
  // PM the record heap holds (slabs, including their free slots, and large records' chunks).
  const pm::RecordHeapStats rs = heap_.stats();
  s->details.push_back({"records.bytes", static_cast<double>(rs.bytes)});
  s->details.push_back({"records.slabs", static_cast<double>(rs.slabs)});
  s->details.push_back({"records.empty_slabs", static_cast<double>(rs.empty_slabs)});
  s->details.push_back({"records.large_chunks", static_cast<double>(rs.large_chunks)});
  s->details.push_back({"records.reused_slots", static_cast<double>(rs.reused_slots)});
}

}  // namespace pmhash::index
