// src/index_adapter.h — wraps any HashIndex in the virtual Index facade.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "index/lifecycle.h"
#include "pm/pool.h"
#include "pmhash/index.h"

namespace pmhash {

// The BytesApi of an engine that satisfies BytesIndex and offers it (SupportsBytes()), for
// IndexAdapter. `closed` is the adapter's flag: after Close every call returns kInvalidArgument.
template <BytesIndex T>
class BytesAdapter final : public BytesApi {
 public:
  BytesAdapter(T* impl, const bool* closed) : impl_(impl), closed_(closed) {}
  Status Insert(std::string_view k, std::string_view v) override {
    return *closed_ ? Closed() : impl_->InsertBytes(k, v);
  }
  Status Update(std::string_view k, std::string_view v) override {
    return *closed_ ? Closed() : impl_->UpdateBytes(k, v);
  }
  Status Upsert(std::string_view k, std::string_view v) override {
    return *closed_ ? Closed() : impl_->UpsertBytes(k, v);
  }
  Status Find(std::string_view k, std::string* v) const override {
    return *closed_ ? Closed() : impl_->FindBytes(k, v);
  }
  Status Erase(std::string_view k) override { return *closed_ ? Closed() : impl_->EraseBytes(k); }
  Status ForEach(
      const std::function<void(std::string_view, std::string_view)>& fn) const override {
    if (*closed_) return Closed();
    impl_->ForEachBytes(fn);
    return Status::OK();
  }

 private:
  static Status Closed() { return index::Lifecycle::ClosedError(T::kKindName); }

  T* impl_;
  const bool* closed_;
};

// Where IndexAdapter<T> keeps its BytesAdapter: nothing for an engine without the bytes API.
template <class T>
struct BytesSlot {
  struct type {};
};
template <BytesIndex T>
struct BytesSlot<T> {
  using type = std::optional<BytesAdapter<T>>;
};

// The MultiApi of an engine that satisfies MultiIndex and offers it (SupportsMulti()).
template <MultiIndex T>
class MultiAdapter final : public MultiApi {
 public:
  MultiAdapter(T* impl, const bool* closed) : impl_(impl), closed_(closed) {}
  Status Insert(Key k, Value v) override { return *closed_ ? Closed() : impl_->Insert(k, v); }
  Status FindAll(Key k, std::vector<Value>* out) const override {
    if (*closed_) {
      out->clear();
      return Closed();
    }
    return impl_->FindAll(k, out);
  }
  Status ForEachValue(Key k, const std::function<void(Value)>& fn) const override {
    return *closed_ ? Closed() : impl_->ForEachValue(k, fn);
  }
  uint64_t Count(Key k) const override { return *closed_ ? 0 : impl_->Count(k); }
  Status Erase(Key k, Value v) override { return *closed_ ? Closed() : impl_->Erase(k, v); }
  Status EraseAll(Key k) override { return *closed_ ? Closed() : impl_->EraseAll(k); }
  Status ForEach(const std::function<void(Key, Value)>& fn) const override {
    return *closed_ ? Closed() : impl_->ForEach(fn);
  }
  uint64_t Size() const override { return *closed_ ? 0 : impl_->Size(); }

 private:
  static Status Closed() { return index::Lifecycle::ClosedError(T::kKindName); }

  T* impl_;
  const bool* closed_;
};

template <class T>
struct MultiSlot {
  struct type {};
};
template <MultiIndex T>
struct MultiSlot<T> {
  using type = std::optional<MultiAdapter<T>>;
};

// After Close every call but Close/kind/durability/capabilities returns kInvalidArgument, also
// on the reads the engine itself would still answer (its pool stays mapped until destruction).
// Optional APIs: bytes() when T satisfies BytesIndex and this instance SupportsBytes(); multi()
// likewise (MultiIndex, SupportsMulti()).
template <HashIndex T>
class IndexAdapter final : public Index {
 public:
  explicit IndexAdapter(std::unique_ptr<T> impl) : impl_(std::move(impl)) {
    if constexpr (BytesIndex<T>) {
      if (impl_->SupportsBytes()) bytes_api_ = &bytes_.emplace(impl_.get(), &closed_);
    }
    if constexpr (MultiIndex<T>) {
      if (impl_->SupportsMulti()) multi_api_ = &multi_.emplace(impl_.get(), &closed_);
    }
  }
  IndexAdapter(const IndexAdapter&) = delete;  // bytes_ and multi_ point at closed_
  IndexAdapter& operator=(const IndexAdapter&) = delete;
  std::string_view kind() const override { return T::kKindName; }
  Durability durability() const override { return T::Policy::kDurability; }
  Status Insert(Key k, Value v) override { return Live() ? impl_->Insert(k, v) : Closed(); }
  Status Update(Key k, Value v) override { return Live() ? impl_->Update(k, v) : Closed(); }
  Status Upsert(Key k, Value v) override { return Live() ? impl_->Upsert(k, v) : Closed(); }
  Status Find(Key k, Value* v) const override { return Live() ? impl_->Find(k, v) : Closed(); }
  Status FindBatch(std::span<const Key> keys, std::span<Value> values,
                   std::span<Status> statuses) const override {
    return Live() ? impl_->FindBatch(keys, values, statuses) : Closed();
  }
  Status Erase(Key k) override { return Live() ? impl_->Erase(k) : Closed(); }
  Status WriteBatch(std::span<const WriteOp> ops, std::span<Status> statuses) override {
    return Live() ? impl_->WriteBatch(ops, statuses) : Closed();
  }
  uint64_t Size() const override { return Live() ? impl_->Size() : 0; }
  Status ForEach(const std::function<void(Key, Value)>& fn) const override {
    return Live() ? impl_->ForEach(fn) : Closed();
  }
  IndexStats Stats() const override {
    IndexStats s = impl_->Stats();
    if constexpr (requires { impl_->pool().mapping(); }) {
      if (s.mapping.empty()) s.mapping = std::string(pm::MappingName(impl_->pool().mapping()));
    }
    return s;
  }
  Status CheckInvariants() const override { return Live() ? impl_->CheckInvariants() : Closed(); }
  void ResetCounters() override { impl_->ResetCounters(); }
  Status Close() override {
    closed_ = true;
    return impl_->Close();
  }
  void Abandon() override { impl_->Abandon(); }

  Capabilities capabilities() const override {
    return {.bytes = bytes_api_ != nullptr, .multi = multi_api_ != nullptr};
  }
  BytesApi* bytes() override { return bytes_api_; }
  const BytesApi* bytes() const override { return bytes_api_; }
  MultiApi* multi() override { return multi_api_; }
  const MultiApi* multi() const override { return multi_api_; }

  T& impl() { return *impl_; }

 private:
  bool Live() const { return !closed_; }
  static Status Closed() { return index::Lifecycle::ClosedError(T::kKindName); }

  std::unique_ptr<T> impl_;
  bool closed_ = false;
  [[no_unique_address]] typename BytesSlot<T>::type bytes_;
  BytesApi* bytes_api_ = nullptr;  // &*bytes_ when this instance offers the bytes API
  [[no_unique_address]] typename MultiSlot<T>::type multi_;
  MultiApi* multi_api_ = nullptr;  // &*multi_ when this instance offers the multi-value API
};

// Opens T and wraps it.
template <HashIndex T>
Result<std::unique_ptr<Index>> OpenWrapped(const Options& o) {
  auto r = T::Open(o);
  if (!r.ok()) return r.status();
  return std::unique_ptr<Index>(new IndexAdapter<T>(std::move(r).value()));
}

}  // namespace pmhash
