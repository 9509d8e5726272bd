// src/index/records.h — the records of the kinds with variable-size keys and values.
//
// A records kind (turbo-kv, reh-kv, pea-kv, smartht-kv, elimda-kv) keeps its design's 16 B slot
// and stores in it
//
//     slot   = [ hash(key):64 | record offset:64 ]
//     record = [ klen:32 | vlen:32 | key bytes | value bytes ]   (8 + klen + vlen bytes)
//     checked record (format 2, elimda-kv):
//              [ klen:32 | vlen:32 | check:64 | key bytes | value bytes ]   (16 + klen + vlen)
//
// A plain record must be durable before the store that publishes it (its own fence: two per
// insert). A checked record carries check = XXH3-64 of its key and value bytes, seeded with its
// lengths, so that recovery can tell a record that reached the media whole from one a crash
// tore: an engine may then publish it under the same fence that persists it (NewChecked), if its
// recovery drops a slot whose record is not Intact() wherever an unfenced publish can be found
// (elimda-kv: the first line of a log's active block), as an insert that was never acknowledged.
//
// with the record in the pool's record heap (src/pm/record_heap.h: a slot of the smallest size
// class that holds it, or whole chunks). This file is what such a kind needs of its records,
// written once: create (flushed; the caller's fence orders it before the slot that publishes
// it), read, retire (epoch-deferred: readers may hold it), rebuild by reachability at open
// (every field read from PM is validated before it is trusted), and the invariant check that
// proves every allocated record reachable. Its engine decides when a record becomes reachable.
//
// The uint64 API of a records kind maps a key and a value to their 8 little-endian bytes
// (U64Bytes); its uint64 ForEach visits the records of exactly 8 + 8 bytes and reports how many
// others it skipped (ForEachBytes visits all).
//
// Thread safety: New and Retire may run concurrently (the heap's bins are striped and locked);
// Key/Value reads of a published record need the epoch guard of the engine's readers, or the
// lock that keeps it published. Reset, Recover and the Check* calls REQUIRE quiescence.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/attributes.h"
#include "common/epoch.h"
#include "common/hash.h"
#include "index/descriptor.h"
#include "index/engine_base.h"
#include "index/lifecycle.h"
#include "pm/persist.h"
#include "pm/pool.h"
#include "pm/record_heap.h"
#include "pm/slot.h"
#include "pmhash/stats.h"
#include "pmhash/status.h"

namespace pmhash::index {

inline constexpr uint64_t kRecordHeader = 8;
inline constexpr uint64_t kCheckedRecordHeader = 16;  // the header and the check word
struct RecordHeader {
  uint32_t key_len;
  uint32_t value_len;
};
static_assert(sizeof(RecordHeader) == kRecordHeader);
static_assert(kCheckedRecordHeader == kRecordHeader + sizeof(uint64_t));

static_assert(pm::kRecordAlign % alignof(RecordHeader) == 0, "read in place at any record start");

// A uint64 key or value as the 8 little-endian bytes a records kind stores.
class U64Bytes {
 public:
  explicit U64Bytes(uint64_t x) { std::memcpy(b_, &x, sizeof(b_)); }
  std::string_view view() const { return {b_, sizeof(b_)}; }
  // *x from exactly 8 bytes; false for any other length.
  static bool Read(std::string_view s, uint64_t* x) {
    if (s.size() != sizeof(uint64_t)) return false;
    std::memcpy(x, s.data(), sizeof(uint64_t));
    return true;
  }

 private:
  char b_[8];
};

// ---- What a records kind's descriptor and engine share (every *-kv kind).

// A key as a search compares it: the inline key (p.k), or the hash and the bytes (p.s).
struct KeyProbe {
  uint64_t h;
  uint64_t k;
  std::string_view s;
};

// The bytes calls of a kind without records.
inline Status NoRecords(std::string_view kind) {
  return Status::NotSupported(std::string(kind) + ": byte keys need the " + std::string(kind) +
                              "-kv kind");
}

// The uint64 Find of a records kind: the record of the key's 8 bytes, whose value must be 8 B.
template <class Engine>
Status FindU64AsBytes(const Engine& e, uint64_t k, uint64_t* v) {
  std::string val;
  PMHASH_RETURN_IF_ERROR(e.FindBytes(U64Bytes(k).view(), &val));
  if (!U64Bytes::Read(val, v)) {
    return Status::InvalidArgument(std::string(Engine::kKindName) + ": the value is not 8 bytes");
  }
  return Status::OK();
}

struct ProbeCalls;

// The BytesIndex calls (include/pmhash/index.h) of an engine with a kRecords flag, declared once:
// the three writes over its `Status WriteBytes(std::string_view, std::string_view, WriteMode)`;
// it defines FindBytes, EraseBytes and ForEachBytes. Leaves the class body in a public section.
#define PMHASH_RECORDS_API(RECORDS)                                                            \
  PMHASH_RECORDS_API_WRITES(RECORDS);                                                          \
  ::pmhash::Status FindBytes(std::string_view k, std::string* v) const;                       \
  ::pmhash::Status EraseBytes(std::string_view k);                                             \
  void ForEachBytes(const std::function<void(std::string_view, std::string_view)>& fn) const

// The same for an engine written over ProbeCalls (below): every bytes call, and its uint64
// Write and WriteBytes, defined here; the engine defines Find, Erase and ForEach as calls of
// ProbeCalls::Find, ProbeCalls::Erase and ProbeCalls::ForEach.
#define PMHASH_PROBE_RECORDS_API(RECORDS)                                                      \
  PMHASH_RECORDS_API_WRITES(RECORDS);                                                          \
  ::pmhash::Status FindBytes(std::string_view k, std::string* v) const {                      \
    return ::pmhash::index::ProbeCalls::FindBytes(*this, k, v);                                \
  }                                                                                            \
  ::pmhash::Status EraseBytes(std::string_view k) {                                            \
    return ::pmhash::index::ProbeCalls::EraseBytes(*this, k);                                  \
  }                                                                                            \
  void ForEachBytes(const std::function<void(std::string_view, std::string_view)>& fn) const { \
    ::pmhash::index::ProbeCalls::ForEachBytes(*this, fn);                                      \
  }                                                                                            \
                                                                                               \
 private:                                                                                      \
  ::pmhash::Status Write(::pmhash::Key k, ::pmhash::Value v, ::pmhash::index::WriteMode m) {   \
    return ::pmhash::index::ProbeCalls::Write(*this, k, v, m);                                 \
  }                                                                                            \
  ::pmhash::Status WriteBytes(std::string_view k, std::string_view v,                          \
                              ::pmhash::index::WriteMode m) {                                  \
    return ::pmhash::index::ProbeCalls::WriteBytes(*this, k, v, m);                            \
  }                                                                                            \
                                                                                               \
 public:                                                                                       \
  static_assert(true)

// (The part both share.)
#define PMHASH_RECORDS_API_WRITES(RECORDS)                                                     \
 public:                                                                                       \
  static constexpr bool kRecordsKind = RECORDS;                                                \
  friend struct ::pmhash::index::ProbeCalls;                                                   \
  bool SupportsBytes() const { return RECORDS; }                                               \
  ::pmhash::Status InsertBytes(std::string_view k, std::string_view v) {                       \
    return WriteBytes(k, v, ::pmhash::index::WriteMode::kInsert);                              \
  }                                                                                            \
  ::pmhash::Status UpdateBytes(std::string_view k, std::string_view v) {                       \
    return WriteBytes(k, v, ::pmhash::index::WriteMode::kUpdate);                              \
  }                                                                                            \
  ::pmhash::Status UpsertBytes(std::string_view k, std::string_view v) {                       \
    return WriteBytes(k, v, ::pmhash::index::WriteMode::kUpsert);                              \
  }                                                                                            \
  static_assert(true)

class Records {
 public:
  // `kind` names the engine in errors; the heap lies over the pool's chunk allocator.
  // `checked`: the records carry a check word (kCheckedRecords).
  Records(pm::Pool& pool, EpochManager& epoch, uint64_t max_record_bytes, std::string_view kind,
          bool checked = false)
      : pool_(pool),
        epoch_(epoch),
        heap_(pool.base(), &pool.allocator(), &epoch),
        max_bytes_(max_record_bytes),
        kind_(kind),
        hdr_(checked ? kCheckedRecordHeader : kRecordHeader) {}

  // The record at `off` is aligned (pm::kRecordAlign) and lies inside the pool, header and bytes,
  // whatever its offset and lengths say. Every read below checks it, so none reads outside the
  // pool (or a misaligned header) when an open trusted an image instead of validating each record
  // (a records kind's LoadState: H5 of record_heap.h holds for the records a walk reached, not
  // for a file edited after a clean Close).
  bool Fits(uint64_t off) const {
    if (off == 0 || off % pm::kRecordAlign != 0 || off > pool_.size() - hdr_) return false;
    const RecordHeader* r = Header(off);
    return uint64_t{r->key_len} + r->value_len <= pool_.size() - hdr_ - off;
  }
  // Its key and value; empty if it does not fit in the pool.
  std::string_view Key(uint64_t off) const {
    if (!Fits(off)) return {};
    const RecordHeader* r = Header(off);
    return {reinterpret_cast<const char*>(r) + hdr_, r->key_len};
  }
  std::string_view Value(uint64_t off) const {
    if (!Fits(off)) return {};
    const RecordHeader* r = Header(off);
    return {reinterpret_cast<const char*>(r) + hdr_ + r->key_len, r->value_len};
  }
  // Key(off) == s, for a lock-free reader that may hold a stale offset (its version check comes
  // after): reads no byte outside the pool whatever the header says.
  bool KeyEquals(uint64_t off, std::string_view s) const {
    if (off == 0 || off % pm::kRecordAlign != 0 || s.size() > pool_.size() - hdr_ ||
        off > pool_.size() - hdr_ - s.size()) {
      return false;
    }
    const RecordHeader* r = Header(off);
    return r->key_len == s.size() &&
           (s.empty() ||
            std::memcmp(reinterpret_cast<const char*>(r) + hdr_, s.data(), s.size()) == 0);
  }
  // *out = Value(off), for a lock-free reader whose version check comes after: false, and
  // nothing read outside the pool, if the header does not fit in it (a stale offset).
  bool ReadValue(uint64_t off, std::string* out) const {
    if (!Fits(off)) return false;
    const RecordHeader* r = Header(off);
    out->assign(reinterpret_cast<const char*>(r) + hdr_ + r->key_len, r->value_len);
    return true;
  }
  // Its length (0 if it does not fit in the pool: Retire then frees nothing).
  uint64_t Bytes(uint64_t off) const {
    if (!Fits(off)) return 0;
    const RecordHeader* r = Header(off);
    return hdr_ + uint64_t{r->key_len} + r->value_len;
  }

  // A new record of k and v, flushed but not fenced: the fence of the slot write that publishes
  // it orders both. kInvalidArgument over max_record_bytes; kOutOfSpace when the heap is full
  // even after the erased records waiting for the epoch have been freed.
  template <pm::PersistPolicy P>
  Result<uint64_t> New(std::string_view k, std::string_view v, const pm::Persister<P>& persist) {
    Result<uint64_t> off = Allocate(k, v, persist);
    if (off.ok()) Write(off.value(), k, v, persist);
    return off;
  }
  // A new checked record of k (whose slot hash is h) and v, flushed, that the caller may publish
  // before the fence that persists both, if its recovery drops a slot whose record is not
  // Intact() there. Fenced here (then the caller's fence orders nothing more) when a torn copy
  // could still pass for it: a large record (whole chunks), or a slot whose old bytes do not
  // fit it or hold a key of hash h. Those old bytes are what the media holds (every record
  // written here was persisted before it was freed), so without that fence any mix of them
  // with the new bytes that a crash leaves either fails the check or names another key hash.
  // REQUIRES: checked records.
  template <pm::PersistPolicy P>
  Result<uint64_t> NewChecked(std::string_view k, std::string_view v, uint64_t h,
                              const Hasher& hash, const pm::Persister<P>& persist) {
    Result<uint64_t> off = Allocate(k, v, persist);
    if (!off.ok()) return off;
    const uint64_t bytes = hdr_ + k.size() + v.size();
    const RecordHeader* old = Header(off.value());
    const uint32_t c = heap_.ClassOf(bytes);
    const uint64_t room = c == pm::RecordHeap::kLarge ? 0 : heap_.class_bytes(c);
    const bool fence = room == 0 || hdr_ + uint64_t{old->key_len} + old->value_len > room ||
                       hash(Key(off.value())) == h;
    Write(off.value(), k, v, persist);
    if (fence) persist.Fence();
    return off;
  }
  // Recovery of a slot that NewChecked may have published unfenced: true if its record at `off`
  // reached the media whole (lengths inside the heap and max_record_bytes, key hash h, check
  // word); false for a record a crash tore, and for an offset that is not Plausible (a caller
  // that must tell an impossible offset, which no tear makes, from a torn record checks
  // Plausible first). Reads nothing outside the pool. REQUIRES: checked records.
  bool Intact(uint64_t off, uint64_t h, const Hasher& hash) const;
  // The offset lies inside the heap, aligned, with room for a header: its lengths may be read.
  bool Plausible(uint64_t off) const { return heap_.PlausibleRecord(off, hdr_); }

  // Frees the record once no epoch reader can hold it. REQUIRES: it is no longer reachable.
  void Retire(uint64_t off) { heap_.Retire(off, Bytes(off)); }

  // Recovery. Reset() first (after the chunk allocator's), then Recover() for the record of
  // every live slot: `h` is the hash the slot holds. Validates, in this order, what a crash or
  // a hostile file could have left: the offset (in the heap, aligned) before the header is
  // read, the lengths, the slot (a valid slab of the record's size class, on a slot boundary,
  // not reached before) before the key is read, and the key's hash against the slot's.
  void Reset() { heap_.Reset(); }
  Status Recover(uint64_t off, uint64_t h, const Hasher& hash);
  // A lazy recovery's walk (record_heap.h, "Lazy recovery"; SmartHT's I10) meets a slot whose
  // record lies past the bound below which it marks records: only a write since the open can
  // have published one (its record fenced first). OK if the record fits in the pool, its
  // chunks are in use and its key has hash h; kCorruption otherwise. Safe beside writers.
  Status CheckWritten(uint64_t off, uint64_t h, const Hasher& hash) const;
  // [offset, end) of the chunks that hold the record at `off` (its slab's, or its own), 0 if
  // it does not fit in the pool.
  uint64_t ChunksEnd(uint64_t off) const;
  pm::RecordHeap& heap() { return heap_; }  // (lazy recovery, the chunk hook)
  // During recovery (REQUIRES quiescence): the record at `off` takes whole chunks (a large
  // record); it is a slab record whose slot a Recover() since Reset() marked. (A large record's
  // chunks, once marked, do not tell a record from another owner of them: ElimDA keeps those
  // it recovered itself.) Both false for an offset that is not Plausible; read nothing outside
  // the pool.
  bool Large(uint64_t off) const {
    return Plausible(off) && heap_.ClassOf(Bytes(off)) == pm::RecordHeap::kLarge;
  }
  bool SlotMarked(uint64_t off) const {
    if (!Plausible(off)) return false;
    const uint64_t bytes = Bytes(off);
    return heap_.ClassOf(bytes) != pm::RecordHeap::kLarge && heap_.IsAllocated(off, bytes);
  }
  // A clean Close's image of the heap's DRAM state, instead of Recover for every record
  // (record_heap.h, "Clean shutdown"): SaveState (quiescent, after ReleaseEmptySlabs), and
  // LoadState, which resets the heap, loads it (each slab is named) and requires its records to
  // be the engine's `live` pairs (one record per live slot); false otherwise.
  void ReleaseEmptySlabs() { heap_.ReleaseEmptySlabs(); }
  void SaveState(pm::StateWriter& w) const { heap_.SaveState(w); }
  bool LoadState(pm::StateReader& r, uint64_t live,
                 const std::function<bool(uint64_t, uint32_t)>& name) {
    heap_.Reset();
    if (!heap_.LoadState(r, name)) return false;
    const pm::RecordHeapStats rs = heap_.stats();
    return rs.slab_records + rs.large_records == live;
  }
  uint64_t large_chunks() const { return heap_.large_chunks(); }
  // Asks for the first line of the record at `off` and its slab's DRAM state ahead of its
  // Recover (each is a random miss: recovery that overlaps them runs several times faster).
  // Never faults, whatever `off` is.
  void Prefetch(uint64_t off) const {
    PrefetchLine(pool_.base() + (off < pool_.size() ? off : 0));
    heap_.PrefetchSlab(off);
  }

  // CheckInvariants of the engine: Tally() for every live record (its slot holds hash `h`),
  // then Finish() with the number of live records; Finish() adds the chunks the heap holds to
  // *chunks (for EngineBase::CheckAccounting). Each returns "" or what is wrong.
  struct Tally {
    std::unordered_set<uint64_t> slabs;  // slabs holding a live record
    uint64_t large_chunks = 0;           // chunks of records too big for a slab
  };
  std::string Check(uint64_t off, uint64_t h, const Hasher& hash, Tally* t) const;
  std::string Finish(const Tally& t, uint64_t live, uint64_t* chunks) const;

  // IndexStats: the PM the records take, and the "records.*" details.
  uint64_t pm_bytes() const { return heap_.stats().bytes; }
  uint64_t dram_bytes() const { return heap_.dram_bytes(); }
  void AddDetails(IndexStats* s) const;

  // The uint64 view of a record: its key and value if both are 8 bytes, else false.
  bool AsU64(uint64_t off, uint64_t* k, uint64_t* v) const {
    return U64Bytes::Read(Key(off), k) && U64Bytes::Read(Value(off), v);
  }
  // What a uint64 ForEach returns after skipping `skipped` records AsU64 refused.
  Status SkippedError(uint64_t skipped) const {
    if (skipped == 0) return Status::OK();
    return Status::NotSupported(std::string(kind_) + ": " + std::to_string(skipped) +
                                " records have keys or values that are not 8 bytes; use the "
                                "bytes API's ForEach");
  }

 private:
  const RecordHeader* Header(uint64_t off) const { return pool_.At<RecordHeader>(off); }
  // The check word of the record at `off` as its bytes say it should be.
  uint64_t CheckOf(uint64_t off) const;
  bool CheckMatches(uint64_t off) const {
    uint64_t c;
    std::memcpy(&c, pool_.At<char>(off) + kRecordHeader, sizeof(c));
    return c == CheckOf(off);
  }

  // A slot for a record of k and v (New's checks: max_record_bytes, a full heap).
  template <pm::PersistPolicy P>
  Result<uint64_t> Allocate(std::string_view k, std::string_view v,
                            const pm::Persister<P>& persist) {
    const uint64_t bytes = hdr_ + k.size() + v.size();
    if (k.size() > UINT32_MAX || v.size() > UINT32_MAX || bytes > max_bytes_) {
      return Status::InvalidArgument(std::string(kind_) +
                                     ": key + value exceed max_record_bytes (" +
                                     std::to_string(max_bytes_) + ")");
    }
    auto off = heap_.Allocate(bytes, persist);
    if (!off.ok() && off.status().IsOutOfSpace() && epoch_.pending() != 0) {
      epoch_.Reclaim();  // erased records may be waiting for the epoch to move
      epoch_.Reclaim();
      off = heap_.Allocate(bytes, persist);
    }
    return off;
  }
  // Writes the record (and its check word) at `off` and flushes it; no fence.
  template <pm::PersistPolicy P>
  void Write(uint64_t off, std::string_view k, std::string_view v,
             const pm::Persister<P>& persist) {
    char* dst = pool_.At<char>(off);
    const RecordHeader h{static_cast<uint32_t>(k.size()), static_cast<uint32_t>(v.size())};
    std::memcpy(dst, &h, sizeof(h));
    if (!k.empty()) std::memcpy(dst + hdr_, k.data(), k.size());
    if (!v.empty()) std::memcpy(dst + hdr_ + k.size(), v.data(), v.size());
    if (hdr_ == kCheckedRecordHeader) {
      const uint64_t c = CheckOf(off);
      std::memcpy(dst + kRecordHeader, &c, sizeof(c));
    }
    persist.Flush(dst, hdr_ + k.size() + v.size());
  }

  pm::Pool& pool_;
  EpochManager& epoch_;
  pm::RecordHeap heap_;
  const uint64_t max_bytes_;
  const std::string_view kind_;
  const uint64_t hdr_;  // kRecordHeader, or kCheckedRecordHeader
};

// The epoch and the records of a records kind's engine (reh-kv, smartht-kv, elimda-kv), made at
// construction: its readers copy a record after leaving its locks, so replaced and erased records
// are retired through the epoch, `reclaim_batch` at a time (Options::reclaim_batch).
inline void MakeRecords(pm::Pool& pool, uint32_t reclaim_batch, uint64_t max_record_bytes,
                        std::string_view kind, std::unique_ptr<EpochManager>* epoch,
                        std::unique_ptr<Records>* records, bool checked = false) {
  *epoch = std::make_unique<EpochManager>();
  (*epoch)->set_reclaim_batch(reclaim_batch);
  *records = std::make_unique<Records>(pool, **epoch, max_record_bytes, kind, checked);
}

// CheckInvariants' census of an engine's live pairs: each key once and, in a records design,
// each record checked against its slot (Records::Check, with the engine's `hash`) and tallied
// for Finish. `records` is null in an inline design.
class LiveKeys {
 public:
  LiveKeys(const Records* records, const Hasher& hash) : records_(records), hash_(hash) {}

  // One live slot: key word `k` (an inline design's key; a records design names its key only in
  // the message), value word `v` (a records design's record offset), the key's hash `h`.
  // "" or what is wrong: a record that fails its check, a key stored twice.
  std::string Add(uint64_t k, uint64_t v, uint64_t h) {
    std::string key;
    if (records_ != nullptr) {
      if (std::string e = records_->Check(v, h, hash_, &tally_); !e.empty()) return e;
      key = records_->Key(v);
    } else {
      key = U64Bytes(k).view();
    }
    if (!keys_.insert(std::move(key)).second) return "duplicate key " + std::to_string(k);
    return "";
  }
  uint64_t size() const { return keys_.size(); }
  // After the last Add: the records' Finish over the keys added, which adds the chunks the
  // records hold to *chunks. "" in an inline design.
  std::string Finish(uint64_t* chunks) const {
    return records_ == nullptr ? "" : records_->Finish(tally_, keys_.size(), chunks);
  }

 private:
  const Records* const records_;
  const Hasher& hash_;
  Records::Tally tally_;
  std::unordered_set<std::string> keys_;
};

// How an engine whose slots hold inline items (kRecords false) or [hash | record offset] compares
// keys: a probe of a uint64 or byte key, the hash a slot's key word stands for, the key word a
// new slot of a probe holds, and whether a slot holds the probe's key.
template <bool kRecords>
struct ProbeKeys {
  PMHASH_ALWAYS_INLINE static KeyProbe Make(const Hasher& hash, Key k) { return {hash(k), k, {}}; }
  static KeyProbe Make(const Hasher& hash, std::string_view s) { return {hash(s), 0, s}; }
  PMHASH_ALWAYS_INLINE static uint64_t SlotHash(const Hasher& hash, uint64_t key_word) {
    if constexpr (kRecords) {
      return key_word;  // the word is the hash
    } else {
      return hash(key_word);
    }
  }
  static uint64_t KeyWord(const KeyProbe& p) { return kRecords ? p.h : p.k; }
  // REQUIRES (kRecords): an epoch guard or the slot's lock. A lock-free reader may hold a stale
  // slot: KeyEquals reads nothing outside the pool whatever its offset names.
  PMHASH_ALWAYS_INLINE static bool Matches(const Records* records, const pm::PmSlot& s,
                                           const KeyProbe& p) {
    if constexpr (kRecords) {
      // Acquire: a record's bytes were written before the release store of its offset.
      if (s.key.load(std::memory_order_acquire) != p.h) return false;
      return records->KeyEquals(s.value.load(std::memory_order_acquire), p.s);
    } else {
      (void)records;
      return s.key.load(std::memory_order_relaxed) == p.k;
    }
  }
};

// The value word a write of a records kind's engine stores: `value` (an inline kind), or the
// offset of a new record of k and value_bytes, flushed and fenced: durable before the 8-byte store
// that publishes it, whatever line that store shares (reh-kv's key store, pea-kv's header store).
template <bool kRecords, pm::PersistPolicy P>
PMHASH_ALWAYS_INLINE Status ValueWord(Records* records, std::string_view k,
                                      std::string_view value_bytes, uint64_t value,
                                      const pm::Persister<P>& persist, uint64_t* word) {
  if constexpr (kRecords) {
    Result<uint64_t> rec = records->New(k, value_bytes, persist);
    if (!rec.ok()) return rec.status();
    persist.Fence();
    *word = rec.value();
  } else {
    *word = value;
  }
  return Status::OK();
}

// The uint64 and bytes entry points of an engine whose slots hold either inline items or
// [hash | record offset] (reh, pea, smartht, elimda and their -kv kinds), written once over what
// the engine provides (privately; PMHASH_RECORDS_API makes this its friend):
//   Probe MakeProbe(Key) / MakeProbe(std::string_view)
//   Status Write(const Probe&, std::string_view value_bytes, Value value, WriteMode)
//   Status EraseProbe(const Probe&)
//   bool Search(const Probe&, uint64_t* value_word)       (under the epoch guard)
//   EpochManager& RecordEpoch() const                      (records kinds)
//   void WalkLiveSlots(take(const PmSlot&), done())        take under the locks, done outside
//   std::unique_ptr<Records> records_                      (records kinds)
// A records kind's uint64 key and value are their 8 little-endian bytes (U64Bytes).
//
// The writes here (Write, WriteBytes, Erase, EraseBytes) and BatchCalls::Write are the gate of
// Close (src/index/lifecycle.h): after it they return kInvalidArgument, so an engine's own Write
// and EraseProbe, reached only through them, need no check of their own.
struct ProbeCalls {
  template <class E>
  PMHASH_ALWAYS_INLINE static Status Write(E& e, Key k, Value v, WriteMode mode) {
    if (e.life_.closed()) [[unlikely]] return Lifecycle::ClosedError(E::kKindName);
    if constexpr (E::kRecordsKind) {
      return WriteBytes(e, U64Bytes(k).view(), U64Bytes(v).view(), mode);
    } else {
      return e.Write(e.MakeProbe(k), {}, v, mode);
    }
  }
  template <class E>
  static Status WriteBytes(E& e, std::string_view k, std::string_view v, WriteMode mode) {
    if constexpr (E::kRecordsKind) {
      if (e.life_.closed()) [[unlikely]] return Lifecycle::ClosedError(E::kKindName);
      return e.Write(e.MakeProbe(k), v, 0, mode);
    } else {
      return NoRecords(E::kKindName);
    }
  }
  // The uint64 Find: Search of the key (a records kind: the record of its 8 bytes, whose value
  // must be 8 bytes).
  template <class E>
  PMHASH_ALWAYS_INLINE static Status Find(const E& e, Key k, Value* v) {
    if constexpr (E::kRecordsKind) {
      return FindU64AsBytes(e, k, v);
    } else {
      return e.Search(e.MakeProbe(k), v) ? Status::OK() : Status::NotFound();
    }
  }
  template <class E>
  PMHASH_ALWAYS_INLINE static Status Erase(E& e, Key k) {
    if (e.life_.closed()) [[unlikely]] return Lifecycle::ClosedError(E::kKindName);
    if constexpr (E::kRecordsKind) {
      return EraseBytes(e, U64Bytes(k).view());
    } else {
      return e.EraseProbe(e.MakeProbe(k));
    }
  }
  template <class E>
  static Status EraseBytes(E& e, std::string_view k) {
    if constexpr (E::kRecordsKind) {
      if (e.life_.closed()) [[unlikely]] return Lifecycle::ClosedError(E::kKindName);
      return e.EraseProbe(e.MakeProbe(k));
    } else {
      return NoRecords(E::kKindName);
    }
  }
  template <class E>
  static Status FindBytes(const E& e, std::string_view k, std::string* v) {
    if constexpr (E::kRecordsKind) {
      EpochManager::Guard guard(e.RecordEpoch());  // the record stays allocated while we copy
      uint64_t ro = 0;
      if (!e.Search(e.MakeProbe(k), &ro)) return Status::NotFound();
      const std::string_view val = e.records_->Value(ro);
      v->assign(val.data(), val.size());
      return Status::OK();
    } else {
      return NoRecords(E::kKindName);
    }
  }
  // fn runs outside the engine's locks, one locked unit's pairs at a time.
  template <class E>
  static Status ForEach(const E& e, const std::function<void(Key, Value)>& fn) {
    std::vector<std::pair<Key, Value>> pairs;
    uint64_t skipped = 0;  // records the uint64 API cannot express
    e.WalkLiveSlots(
        [&](const pm::PmSlot& sl) {
          Key k = sl.key.load(std::memory_order_relaxed);
          Value v = sl.value.load(std::memory_order_relaxed);
          if constexpr (E::kRecordsKind) {
            if (!e.records_->AsU64(v, &k, &v)) {
              skipped++;
              return;
            }
          }
          pairs.emplace_back(k, v);
        },
        [&] {
          for (const auto& [k, v] : pairs) fn(k, v);
          pairs.clear();
        });
    if constexpr (E::kRecordsKind) return e.records_->SkippedError(skipped);
    return Status::OK();
  }
  template <class E>
  static void ForEachBytes(const E& e,
                           const std::function<void(std::string_view, std::string_view)>& fn) {
    if constexpr (E::kRecordsKind) {
      std::vector<std::pair<std::string, std::string>> pairs;
      e.WalkLiveSlots(
          [&](const pm::PmSlot& sl) {
            const uint64_t ro = sl.value.load(std::memory_order_relaxed);
            pairs.emplace_back(std::string(e.records_->Key(ro)),
                               std::string(e.records_->Value(ro)));
          },
          [&] {
            for (const auto& [k, v] : pairs) fn(k, v);
            pairs.clear();
          });
    } else {
      (void)e;
      (void)fn;
    }
  }
};

}  // namespace pmhash::index
