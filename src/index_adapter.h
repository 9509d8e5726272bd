// src/index_adapter.h — wraps any HashIndex in the virtual Index facade.
#pragma once

#include <memory>

#include "index/lifecycle.h"
#include "pm/pool.h"
#include "pmhash/index.h"

namespace pmhash {

// After Close every call but Close/kind/durability returns kInvalidArgument, also on the
// reads the engine itself would still answer (its pool stays mapped until destruction).
template <HashIndex T>
class IndexAdapter final : public Index {
 public:
  explicit IndexAdapter(std::unique_ptr<T> impl) : impl_(std::move(impl)) {}
  std::string_view kind() const override { return T::kKindName; }
  Durability durability() const override { return T::Policy::kDurability; }
  Status Insert(Key k, Value v) override { return Live() ? impl_->Insert(k, v) : Closed(); }
  Status Update(Key k, Value v) override { return Live() ? impl_->Update(k, v) : Closed(); }
  Status Upsert(Key k, Value v) override { return Live() ? impl_->Upsert(k, v) : Closed(); }
  Status Find(Key k, Value* v) const override { return Live() ? impl_->Find(k, v) : Closed(); }
  Status Erase(Key k) override { return Live() ? impl_->Erase(k) : Closed(); }
  uint64_t Size() const override { return Live() ? impl_->Size() : 0; }
  void ForEach(const std::function<void(Key, Value)>& fn) const override {
    if (Live()) impl_->ForEach(fn);
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

  bool SupportsBytes() const override {
    if constexpr (BytesIndex<T>) return impl_->SupportsBytes();
    return false;
  }
  Status InsertBytes(std::string_view k, std::string_view v) override {
    if (!Live()) return Closed();
    if constexpr (BytesIndex<T>) return impl_->InsertBytes(k, v);
    return Index::InsertBytes(k, v);
  }
  Status UpdateBytes(std::string_view k, std::string_view v) override {
    if (!Live()) return Closed();
    if constexpr (BytesIndex<T>) return impl_->UpdateBytes(k, v);
    return Index::UpdateBytes(k, v);
  }
  Status UpsertBytes(std::string_view k, std::string_view v) override {
    if (!Live()) return Closed();
    if constexpr (BytesIndex<T>) return impl_->UpsertBytes(k, v);
    return Index::UpsertBytes(k, v);
  }
  Status FindBytes(std::string_view k, std::string* v) const override {
    if (!Live()) return Closed();
    if constexpr (BytesIndex<T>) return impl_->FindBytes(k, v);
    return Index::FindBytes(k, v);
  }
  Status EraseBytes(std::string_view k) override {
    if (!Live()) return Closed();
    if constexpr (BytesIndex<T>) return impl_->EraseBytes(k);
    return Index::EraseBytes(k);
  }
  void ForEachBytes(
      const std::function<void(std::string_view, std::string_view)>& fn) const override {
    if (!Live()) return;
    if constexpr (BytesIndex<T>) impl_->ForEachBytes(fn);
  }

  T& impl() { return *impl_; }

 private:
  bool Live() const { return !closed_; }
  static Status Closed() { return index::Lifecycle::ClosedError(T::kKindName); }

  std::unique_ptr<T> impl_;
  bool closed_ = false;
};

// Opens T and wraps it.
template <HashIndex T>
Result<std::unique_ptr<Index>> OpenWrapped(const Options& o) {
  auto r = T::Open(o);
  if (!r.ok()) return r.status();
  return std::unique_ptr<Index>(new IndexAdapter<T>(std::move(r).value()));
}

}  // namespace pmhash
