// tests/oracle_index.h — a trivially correct HashIndex for proving the conformance suite itself.
//
// A mutex-protected std::unordered_map. It mirrors the observable contract of a pmhash index
// closely enough that every conformance test runs on it:
//   * Options::path empty: volatile. Otherwise the pairs are saved to that file by Close() (clean,
//     also from the destructor) and by destruction after Abandon() (the "crash": every
//     acknowledged operation is durable, as the HashIndex contract promises), and loaded by the
//     next Open (recovered = !clean).
//   * OpenMode: kOpenExisting on a missing file -> kNotFound; kCreateExclusive on an existing
//     file -> kInvalidArgument; a file that is not an oracle image -> kCorruption.
//   * Capacity: (pool_size - 4096) / 16 pairs (one 16 B slot per pair after a 4 KiB header, like
//     a pool); Insert/Upsert of a new key beyond it -> kOutOfSpace.
//   * Stats().splits / doublings count the rehashes of the unordered_map (its structural growth).
#pragma once

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pm/persist.h"
#include "pmhash/index.h"

namespace pmhash::testing {

class OracleIndex {
 public:
  static constexpr std::string_view kKindName = "oracle";
  using Policy = pm::Dram;  // what the IndexAdapter facade reports as durability()

  static Result<std::unique_ptr<OracleIndex>> Open(const Options& o) {
    std::unique_ptr<OracleIndex> idx(new OracleIndex(o));
    idx->closed_ = true;  // a failed open writes nothing
    if (o.pool_size < 4096 + 16) return Status::InvalidArgument("oracle: pool_size too small");
    if (!o.path.empty()) {
      std::FILE* f = std::fopen(o.path.c_str(), "rb");
      if (!f) {
        if (o.mode == OpenMode::kOpenExisting) return Status::NotFound("no oracle file");
      } else {
        if (o.mode == OpenMode::kCreateExclusive) {
          std::fclose(f);
          return Status::InvalidArgument("oracle file exists");
        }
        Status s = idx->Load(f);
        std::fclose(f);
        if (!s.ok()) return s;
      }
    }
    idx->closed_ = false;
    if (!idx->Save(/*clean=*/false)) return Status::IOError("oracle: cannot create " + o.path);
    return idx;
  }

  ~OracleIndex() {  // like an engine: closes unless abandoned ("crash": saved unclean)
    if (closed_) return;
    if (abandoned_) {
      Save(/*clean=*/false);
    } else {
      (void)Close();
    }
  }
  void Abandon() { abandoned_ = true; }
  OracleIndex(const OracleIndex&) = delete;
  OracleIndex& operator=(const OracleIndex&) = delete;

  Status Insert(Key k, Value v) {
    if (closed_) return ClosedError();
    std::lock_guard<std::mutex> g(mu_);
    if (map_.count(k)) return Status::Exists();
    if (map_.size() >= capacity_) return Status::OutOfSpace("oracle full");
    map_.emplace(k, v);
    NoteGrowth();
    return Status::OK();
  }
  Status Update(Key k, Value v) {
    if (closed_) return ClosedError();
    std::lock_guard<std::mutex> g(mu_);
    auto it = map_.find(k);
    if (it == map_.end()) return Status::NotFound();
    it->second = v;
    return Status::OK();
  }
  Status Upsert(Key k, Value v) {
    if (closed_) return ClosedError();
    std::lock_guard<std::mutex> g(mu_);
    auto it = map_.find(k);
    if (it != map_.end()) {
      it->second = v;
      return Status::OK();
    }
    if (map_.size() >= capacity_) return Status::OutOfSpace("oracle full");
    map_.emplace(k, v);
    NoteGrowth();
    return Status::OK();
  }
  Status Find(Key k, Value* v) const {
    std::lock_guard<std::mutex> g(mu_);
    auto it = map_.find(k);
    if (it == map_.end()) return Status::NotFound();
    *v = it->second;
    return Status::OK();
  }
  Status FindBatch(std::span<const Key> keys, std::span<Value> values,
                   std::span<Status> statuses) const {
    if (values.size() < keys.size() || statuses.size() < keys.size()) {
      return Status::InvalidArgument("oracle: FindBatch spans shorter than the keys");
    }
    for (size_t i = 0; i < keys.size(); i++) statuses[i] = Find(keys[i], &values[i]);
    return Status::OK();
  }
  Status Erase(Key k) {
    if (closed_) return ClosedError();
    std::lock_guard<std::mutex> g(mu_);
    return map_.erase(k) ? Status::OK() : Status::NotFound();
  }
  Status WriteBatch(std::span<const WriteOp> ops, std::span<Status> statuses) {
    if (statuses.size() < ops.size()) {
      return Status::InvalidArgument("oracle: WriteBatch statuses shorter than the ops");
    }
    for (size_t i = 0; i < ops.size(); i++) {
      const WriteOp& op = ops[i];
      switch (op.kind) {
        case WriteKind::kInsert: statuses[i] = Insert(op.key, op.value); break;
        case WriteKind::kUpdate: statuses[i] = Update(op.key, op.value); break;
        case WriteKind::kUpsert: statuses[i] = Upsert(op.key, op.value); break;
        case WriteKind::kErase: statuses[i] = Erase(op.key); break;
      }
    }
    return Status::OK();
  }
  uint64_t Size() const {
    std::lock_guard<std::mutex> g(mu_);
    return map_.size();
  }
  Status ForEach(const std::function<void(Key, Value)>& fn) const {
    std::vector<std::pair<Key, Value>> copy;
    {
      std::lock_guard<std::mutex> g(mu_);
      copy.assign(map_.begin(), map_.end());
    }
    for (const auto& [k, v] : copy) fn(k, v);
    return Status::OK();
  }
  IndexStats Stats() const {
    std::lock_guard<std::mutex> g(mu_);
    IndexStats s;
    s.size = map_.size();
    s.capacity_slots = capacity_;
    s.load_factor = capacity_ ? static_cast<double>(map_.size()) / capacity_ : 0;
    s.pool_bytes = pool_size_;
    s.buckets = map_.bucket_count();
    s.splits = splits_;
    s.doublings = splits_;
    s.recovered = recovered_;
    return s;
  }
  Status CheckInvariants() const {
    std::lock_guard<std::mutex> g(mu_);
    if (map_.size() > capacity_) return Status::Corruption("oracle over capacity");
    return Status::OK();
  }
  void ResetCounters() {}
  // After Close writes are refused and reads answer, as in the engines (src/index/lifecycle.h).
  Status Close() {
    if (closed_) return Status::OK();
    closed_ = true;
    return Save(/*clean=*/true) ? Status::OK() : Status::IOError("oracle: cannot save");
  }

 private:
  static Status ClosedError() { return Status::InvalidArgument("oracle: the index is closed"); }

  static constexpr char kMagic[8] = {'P', 'M', 'O', 'R', 'A', 'C', 'L', 'E'};

  explicit OracleIndex(const Options& o)
      : path_(o.path),
        pool_size_(o.pool_size),
        capacity_(o.pool_size > 4096 ? (o.pool_size - 4096) / 16 : 0) {}

  void NoteGrowth() {
    if (map_.bucket_count() != last_buckets_) {
      last_buckets_ = map_.bucket_count();
      splits_++;
    }
  }

  Status Load(std::FILE* f) {
    char magic[8];
    uint64_t clean = 0, n = 0;
    if (std::fread(magic, 1, 8, f) != 8 || std::memcmp(magic, kMagic, 8) != 0 ||
        std::fread(&clean, sizeof(clean), 1, f) != 1 || std::fread(&n, sizeof(n), 1, f) != 1) {
      return Status::Corruption("not an oracle image");
    }
    for (uint64_t i = 0; i < n; i++) {
      uint64_t kv[2];
      if (std::fread(kv, sizeof(kv), 1, f) != 1) return Status::Corruption("oracle: truncated");
      map_[kv[0]] = kv[1];
    }
    recovered_ = clean != 1;
    return Status::OK();
  }

  bool Save(bool clean) {
    if (path_.empty()) return true;
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f) return false;
    const uint64_t c = clean ? 1 : 0, n = map_.size();
    bool ok = std::fwrite(kMagic, 1, 8, f) == 8 && std::fwrite(&c, sizeof(c), 1, f) == 1 &&
              std::fwrite(&n, sizeof(n), 1, f) == 1;
    for (const auto& [k, v] : map_) {
      const uint64_t kv[2] = {k, v};
      ok = ok && std::fwrite(kv, sizeof(kv), 1, f) == 1;
    }
    return std::fclose(f) == 0 && ok;
  }

  const std::string path_;
  const uint64_t pool_size_;
  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<Key, Value> map_;
  size_t last_buckets_ = 0;
  uint64_t splits_ = 0;
  bool recovered_ = false;
  bool closed_ = false;
  bool abandoned_ = false;
};

static_assert(HashIndex<OracleIndex>);

}  // namespace pmhash::testing
