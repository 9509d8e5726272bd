// bench/bytes_table.h — variable-size items (`pmhash bench --key-bytes N --value-bytes M`).
//
// The phases, the runner and every check stay those of the uint64 benchmark: the key generator
// (keys.h) still draws 64-bit keys, and BytesView maps each one to an N-byte key and each value
// to an M-byte value, then calls the table's bytes API. So the same key set, orders and mixes
// run at any item size, and the reference row (AbslBytesReference, string keys and values)
// does exactly the same work per operation as the index rows.
//
//   ExpandItem(x, n):  bytes [0, 8)  = x, little-endian (distinct x give distinct items)
//                      bytes [8, n)  = Mixer::Finalize(x + i * golden), i = 1, 2, ... (truncated)
//
// N and M are at least 8 (kMinItemBytes), so the expansion stays a bijection and a found value
// decodes back to the uint64 the runner checks (ValueOf(key)); Find also checks its length.
// TurboHash's TURBO30 (Figure 6) is --key-bytes 15 --value-bytes 15.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/strings/string_view.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "bench/keys.h"
#include "pmhash/index.h"
#include "pmhash/status.h"

namespace pmhash::bench {

constexpr uint32_t kMinItemBytes = 8;
constexpr uint32_t kMaxItemBytes = 1 << 16;

// Item sizes of a run; key == 0: the uint64 API (8-byte keys and values).
struct ItemBytes {
  uint32_t key = 0;
  uint32_t value = 0;
  bool on() const { return key != 0; }
  uint32_t payload() const { return on() ? key + value : 16; }  // bytes one item carries
};

// Writes the n-byte expansion of x into *out (see the file comment). REQUIRES: n >= 8.
inline void ExpandItem(uint64_t x, uint32_t n, std::string* out) {
  out->resize(n);
  char* p = out->data();
  std::memcpy(p, &x, 8);
  for (uint32_t at = 8, i = 1; at < n; at += 8, i++) {
    const uint64_t w = Mixer::Finalize(x + i * 0x9e3779b97f4a7c15ULL);
    std::memcpy(p + at, &w, std::min<uint32_t>(8, n - at));
  }
}

// The reference of a bytes run: absl::flat_hash_map<std::string, std::string>, one thread.
class AbslBytesReference {
 public:
  static constexpr std::string_view kName = "absl<string,string>";  // short: a table label

  Status Insert(std::string_view k, std::string_view v) {
    return map_.try_emplace(Absl(k), v).second ? Status::OK() : Status::Exists();
  }
  Status Update(std::string_view k, std::string_view v) {
    auto it = map_.find(Absl(k));
    if (it == map_.end()) return Status::NotFound();
    it->second.assign(v);
    return Status::OK();
  }
  Status Find(std::string_view k, std::string* v) const {
    auto it = map_.find(Absl(k));
    if (it == map_.end()) return Status::NotFound();
    v->assign(it->second);
    return Status::OK();
  }
  Status Erase(std::string_view k) {
    auto it = map_.find(Absl(k));
    if (it == map_.end()) return Status::NotFound();
    map_.erase(it);
    return Status::OK();
  }
  uint64_t Size() const { return map_.size(); }
  double LoadFactor() const { return map_.load_factor(); }
  // Slots (two std::string each), control bytes, and the heap of strings too long for SSO.
  uint64_t DramBytes() const {
    uint64_t heap = 0;
    for (const auto& [k, v] : map_) {
      if (k.capacity() > kSso) heap += k.capacity() + 1;
      if (v.capacity() > kSso) heap += v.capacity() + 1;
    }
    return map_.bucket_count() * (sizeof(std::string) * 2 + 1) + heap;
  }

 private:
  // Heterogeneous lookup takes absl::string_view (not std::string_view in every absl build).
  static absl::string_view Absl(std::string_view s) { return {s.data(), s.size()}; }
  static inline const size_t kSso = std::string().capacity();  // not constexpr in clang 14
  absl::flat_hash_map<std::string, std::string> map_;
};

// The uint64 benchmark interface (BenchTable) over the bytes API of `Api`: an engine satisfying
// BytesIndex (InsertBytes, ...), the facade's BytesApi, or AbslBytesReference (Insert(k, v)
// over string_views). `Owner` is what keeps it alive (the engine, the Index, the reference) and
// answers Size / Stats / CheckInvariants / ResetCounters / Close for the row.
template <class Owner, class Api = Owner>
class BytesView {
 public:
  BytesView(std::unique_ptr<Owner> owner, Api* api, ItemBytes sizes)
      : owner_(std::move(owner)), api_(api), sizes_(sizes) {}

  Status Insert(uint64_t k, uint64_t v) { return Write(/*insert=*/true, k, v); }
  Status Update(uint64_t k, uint64_t v) { return Write(/*insert=*/false, k, v); }
  // The value's first 8 bytes (the runner checks them against ValueOf(k)); a value of another
  // length is kCorruption.
  Status Find(uint64_t k, uint64_t* v) const {
    Buffers& b = Local();
    ExpandItem(k, sizes_.key, &b.key);
    Status s;
    if constexpr (BytesIndex<Api>) {
      s = api_->FindBytes(b.key, &b.value);
    } else {
      s = std::as_const(*api_).Find(b.key, &b.value);
    }
    if (!s.ok()) return s;
    if (b.value.size() != sizes_.value) {
      return Status::Corruption("a value of " + std::to_string(b.value.size()) + " bytes, expected " +
                                std::to_string(sizes_.value));
    }
    std::memcpy(v, b.value.data(), 8);
    return Status::OK();
  }
  Status Erase(uint64_t k) {
    Buffers& b = Local();
    ExpandItem(k, sizes_.key, &b.key);
    if constexpr (BytesIndex<Api>) {
      return api_->EraseBytes(b.key);
    } else {
      return api_->Erase(b.key);
    }
  }

  uint64_t Size() const { return owner_->Size(); }
  IndexStats Stats() const { return owner_->Stats(); }
  Status CheckInvariants() const { return owner_->CheckInvariants(); }
  void ResetCounters() { owner_->ResetCounters(); }
  Status Close() { return owner_->Close(); }
  Owner& owner() const { return *owner_; }

 private:
  struct Buffers {
    std::string key, value;
  };
  Status Write(bool insert, uint64_t k, uint64_t v) {
    Buffers& b = Local();
    ExpandItem(k, sizes_.key, &b.key);
    ExpandItem(v, sizes_.value, &b.value);
    if constexpr (BytesIndex<Api>) {
      return insert ? api_->InsertBytes(b.key, b.value) : api_->UpdateBytes(b.key, b.value);
    } else {
      return insert ? api_->Insert(b.key, b.value) : api_->Update(b.key, b.value);
    }
  }
  // Per thread: the runner calls one table from T threads.
  static Buffers& Local() {
    thread_local Buffers b;
    return b;
  }

  std::unique_ptr<Owner> owner_;
  Api* api_;
  ItemBytes sizes_;
};

// Why a kind cannot run a bytes row.
inline Status NoBytesApi(std::string_view kind) {
  return Status::NotSupported("kind '" + std::string(kind) +
                              "' has no variable-size keys (--key-bytes / --value-bytes)");
}

}  // namespace pmhash::bench
