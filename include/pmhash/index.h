// pmhash/index.h — the HashIndex concept and the type-erased Index facade.
//
// Two ways to use an index:
//   * Templated callers (benchmarks, tests) use a concrete type such as
//     pmhash::reh::Reh<pmhash::pm::Adr> directly; the HashIndex concept below states what every
//     concrete index offers, at zero abstraction cost.
//   * Everyone else (the CLI, bindings) calls pmhash::Open("reh", options) and gets an Index, a
//     virtual facade over the same object.
//
// Thread safety: every operation of an open index may be called concurrently from any number of
// threads. Close() and destruction require that no other call is in flight.
//
// Durability (persistent policies Adr/Eadr): when Insert/Update/Upsert/Erase returns, its effect
// survives any crash; a crash at any instant recovers to a state where every returned operation
// is applied and the in-flight ones are each either fully applied or absent.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "pmhash/options.h"
#include "pmhash/stats.h"
#include "pmhash/status.h"

namespace pmhash {

using Key = uint64_t;
using Value = uint64_t;

// The contract of every concrete index.
//   Insert: kExists if the key is present (value unchanged).
//   Update: kNotFound if absent.  Upsert: insert or overwrite.
//   Find:   OK and *value set, or kNotFound.
//   Erase:  kNotFound if absent.
//   ForEach visits every live pair once; concurrent writers may or may not be observed.
//   CheckInvariants walks the whole structure (persistent and volatile parts) and reports the
//   first violation as kCorruption; it is meant for tests and `pmhash check`.
//   Close marks a clean shutdown; after it only destruction is allowed.
template <class T>
concept HashIndex = requires(T& t, const T& ct, Key k, Value v, Value* out,
                             const std::function<void(Key, Value)>& fn) {
  { T::kKindName } -> std::convertible_to<std::string_view>;
  { T::Open(Options{}) } -> std::same_as<Result<std::unique_ptr<T>>>;
  { t.Insert(k, v) } -> std::same_as<Status>;
  { t.Update(k, v) } -> std::same_as<Status>;
  { t.Upsert(k, v) } -> std::same_as<Status>;
  { ct.Find(k, out) } -> std::same_as<Status>;
  { t.Erase(k) } -> std::same_as<Status>;
  { ct.Size() } -> std::same_as<uint64_t>;
  { ct.ForEach(fn) } -> std::same_as<void>;
  { ct.Stats() } -> std::same_as<IndexStats>;
  { ct.CheckInvariants() } -> std::same_as<Status>;
  { t.ResetCounters() } -> std::same_as<void>;
  { t.Close() } -> std::same_as<Status>;
};

// Type-erased facade. Obtain one from pmhash::Open().
class Index {
 public:
  virtual ~Index() = default;
  virtual std::string_view kind() const = 0;
  virtual Durability durability() const = 0;
  virtual Status Insert(Key k, Value v) = 0;
  virtual Status Update(Key k, Value v) = 0;
  virtual Status Upsert(Key k, Value v) = 0;
  virtual Status Find(Key k, Value* v) const = 0;
  virtual Status Erase(Key k) = 0;
  virtual uint64_t Size() const = 0;
  virtual void ForEach(const std::function<void(Key, Value)>& fn) const = 0;
  virtual IndexStats Stats() const = 0;
  virtual Status CheckInvariants() const = 0;
  virtual void ResetCounters() = 0;
  virtual Status Close() = 0;
};

// One row of the registry.
struct IndexInfo {
  std::string_view name;         // "reh"
  std::string_view paper;        // short citation
  std::string_view description;  // one line
};

// Every index kind this build offers.
const std::vector<IndexInfo>& RegisteredIndexes();

// Opens (or creates, per options.mode) a pool holding an index of `kind`, instantiated for
// options.durability. kInvalidArgument for an unknown kind.
Result<std::unique_ptr<Index>> Open(std::string_view kind, const Options& options);

}  // namespace pmhash
