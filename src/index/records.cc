// The out-of-line part of src/index/records.h: recovery, invariant checks and statistics.
#include "index/records.h"

#include <xxhash.h>

namespace pmhash::index {

uint64_t Records::CheckOf(uint64_t off) const {
  // XXH3-64 of the key and value bytes, seeded with the lengths word (so that a record cut
  // short or stretched by a torn length does not keep its check); never the configured Hasher,
  // whose collision-heavy test mode would make a weak check.
  const RecordHeader* r = Header(off);
  const uint64_t lengths = (uint64_t{r->value_len} << 32) | r->key_len;
  return XXH3_64bits_withSeed(reinterpret_cast<const char*>(r) + kCheckedRecordHeader,
                              uint64_t{r->key_len} + r->value_len,
                              lengths ^ 0x9E3779B97F4A7C15ULL);
}

bool Records::Intact(uint64_t off, uint64_t h, const Hasher& hash) const {
  if (!Plausible(off)) return false;
  const uint64_t bytes = Bytes(off);
  return bytes <= max_bytes_ && heap_.Contains(off, bytes) && hash(Key(off)) == h &&
         CheckMatches(off);
}

Status Records::Recover(uint64_t off, uint64_t h, const Hasher& hash) {
  // Called for every live record at open: the messages are built only on failure.
  auto corrupt = [&](std::string_view what) {
    return Status::Corruption(std::string(kind_) + ": record at " + std::to_string(off) + " " +
                              std::string(what));
  };
  if (!Plausible(off)) {
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
  if (hdr_ == kCheckedRecordHeader && !CheckMatches(off)) return corrupt("fails its check word");
  return Status::OK();
}

Status Records::CheckWritten(uint64_t off, uint64_t h, const Hasher& hash) const {
  const pm::ChunkAllocator& a = pool_.allocator();
  if (!Plausible(off) || !Fits(off) ||
      !a.IsUsed(off - (off - a.heap_offset()) % a.chunk_size()) || hash(Key(off)) != h) {
    return Status::Corruption(std::string(kind_) + ": record at " + std::to_string(off) +
                              " past the recovery bound that no write since the open made");
  }
  return Status::OK();
}

uint64_t Records::ChunksEnd(uint64_t off) const {
  if (!Plausible(off) || !Fits(off)) return 0;
  const uint64_t bytes = Bytes(off);
  if (const uint64_t slab = heap_.SlabOf(off, bytes)) return slab + heap_.slab_bytes();
  const uint64_t chunk = pool_.allocator().chunk_size();
  return off + (bytes + chunk - 1) / chunk * chunk;
}

std::string Records::Check(uint64_t off, uint64_t h, const Hasher& hash, Tally* t) const {
  if (!Plausible(off) || !Fits(off)) return "record outside the heap or misaligned";
  const uint64_t bytes = Bytes(off);
  if (!heap_.IsAllocated(off, bytes)) return "record not marked allocated";
  if (hash(Key(off)) != h) return "record hash mismatch";
  if (hdr_ == kCheckedRecordHeader && !CheckMatches(off)) return "record check word mismatch";
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
