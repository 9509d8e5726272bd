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
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pmhash/options.h"
#include "pmhash/stats.h"
#include "pmhash/status.h"

namespace pmhash {

using Key = uint64_t;
using Value = uint64_t;

// One write of a WriteBatch: the call of its kind, on key (and value: ignored by kErase).
enum class WriteKind : uint8_t { kInsert, kUpdate, kUpsert, kErase };
struct WriteOp {
  WriteKind kind = WriteKind::kUpsert;
  Key key = 0;
  Value value = 0;
};

// The contract of every concrete index.
//   Insert: kExists if the key is present (value unchanged).
//   Update: kNotFound if absent.  Upsert: insert or overwrite.
//   Find:   OK and *value set, or kNotFound.
//   Erase:  kNotFound if absent.
//   ForEach visits every live pair once; concurrent writers may or may not be observed. It
//   returns OK when it visited every live pair; an index that holds pairs the uint64 API cannot
//   express (turbo-kv: a key or value that is not 8 bytes) visits the others and then returns
//   kNotSupported saying how many it skipped (the bytes API visits them).
//   CheckInvariants walks the whole structure (persistent and volatile parts) and reports the
//   first violation as kCorruption; it is meant for tests and `pmhash check`.
//   Close marks a clean shutdown (idempotent); writes after it return kInvalidArgument. The
//   destructor closes an index that was not closed, unless Abandon() was called: then the pool
//   is left as a crash at that instant would leave it (crash tests, tools).
//   FindBatch sets statuses[i] = Find(keys[i], &values[i]) for every i (values[i] is written
//   only when statuses[i] is OK) and returns OK; kInvalidArgument, with nothing done, if values
//   or statuses are shorter than keys. Each key's find is linearizable as a Find is; the batch
//   is not a snapshot. Engines may overlap the keys' cache misses (src/index/batch.h).
//   WriteBatch applies ops[i] as Insert/Update/Upsert/Erase would, in order, sets statuses[i] to
//   its status and returns OK (a failed op, kOutOfSpace say, does not stop the others);
//   kInvalidArgument, with nothing done, if statuses is shorter than ops. Each op is
//   linearizable as its call is, and no other thread observes it before it is durable. What a
//   batch saves is fences: it is acknowledged as a whole, when WriteBatch returns, and a crash
//   during the call may keep any subset of its ops (of one key's ops, a prefix). Engines may
//   persist many ops under one fence (REH: up to 16 buckets' writes); the others run the calls.
template <class T>
concept HashIndex = requires(T& t, const T& ct, Key k, Value v, Value* out,
                             const std::function<void(Key, Value)>& fn,
                             std::span<const Key> keys, std::span<Value> values,
                             std::span<Status> statuses, std::span<const WriteOp> ops) {
  { T::kKindName } -> std::convertible_to<std::string_view>;
  { T::Open(Options{}) } -> std::same_as<Result<std::unique_ptr<T>>>;
  { t.Insert(k, v) } -> std::same_as<Status>;
  { t.Update(k, v) } -> std::same_as<Status>;
  { t.Upsert(k, v) } -> std::same_as<Status>;
  { ct.Find(k, out) } -> std::same_as<Status>;
  { ct.FindBatch(keys, values, statuses) } -> std::same_as<Status>;
  { t.WriteBatch(ops, statuses) } -> std::same_as<Status>;
  { t.Erase(k) } -> std::same_as<Status>;
  { ct.Size() } -> std::same_as<uint64_t>;
  { ct.ForEach(fn) } -> std::same_as<Status>;
  { ct.Stats() } -> std::same_as<IndexStats>;
  { ct.CheckInvariants() } -> std::same_as<Status>;
  { t.ResetCounters() } -> std::same_as<void>;
  { t.Close() } -> std::same_as<Status>;
  { t.Abandon() } -> std::same_as<void>;
};

// Variable-size keys and values (optional; the contract mirrors the uint64 one above).
//   Keys and values are arbitrary byte strings (zero bytes allowed, empty allowed); an index may
//   bound their size (kInvalidArgument beyond it). Byte keys and uint64 keys of the same pool live
//   in one key space: an index that offers both stores a uint64 key as its 8 little-endian bytes.
//   SupportsBytes() says whether this instance (this kind / pool layout) offers them; when it is
//   false every *Bytes call returns kNotSupported and ForEachBytes visits nothing.
//   FindBytes assigns the value to *value (its previous contents are discarded).
//   Engines keep these members; the facade offers them through Index::bytes() (BytesApi).
//   Today: "reh-kv", "pea-kv" and "turbo-kv" (records).
template <class T>
concept BytesIndex = HashIndex<T> &&
    requires(T& t, const T& ct, std::string_view k, std::string_view v, std::string* out,
             const std::function<void(std::string_view, std::string_view)>& fn) {
  { ct.SupportsBytes() } -> std::same_as<bool>;
  { t.InsertBytes(k, v) } -> std::same_as<Status>;
  { t.UpdateBytes(k, v) } -> std::same_as<Status>;
  { t.UpsertBytes(k, v) } -> std::same_as<Status>;
  { ct.FindBytes(k, out) } -> std::same_as<Status>;
  { t.EraseBytes(k) } -> std::same_as<Status>;
  { ct.ForEachBytes(fn) } -> std::same_as<void>;
};

// Several values per key (optional): a multimap of uint64 keys and values. Today: "pea-multi".
//   Insert(k, v) adds the pair (k, v); an exact duplicate pair is kept (std::unordered_multimap
//   semantics: secondary indexes and hash joins insert (key, row id) pairs that the caller knows
//   to be distinct, and checking would cost a read of all of k's values per insert).
//   FindAll assigns every value of k to *values (kNotFound and an empty vector if none), in no
//   particular order; ForEachValue calls fn once per value (after the read is complete, never
//   during a retry); Count is their number. Erase(k, v) removes one pair (k, v) (kNotFound if
//   none); EraseAll(k) removes every pair of k in one durable step (kNotFound if none).
//   On such an index the uint64 API means: Insert adds a pair (never kExists), Find gives one
//   of k's values, Erase is EraseAll, ForEach visits every pair and Size counts pairs; Update
//   and Upsert return kNotSupported (which of k's values would they replace?).
template <class T>
concept MultiIndex = HashIndex<T> && requires(T& t, const T& ct, Key k, Value v,
                                              std::vector<Value>* out,
                                              const std::function<void(Value)>& fn) {
  { ct.SupportsMulti() } -> std::same_as<bool>;
  { ct.FindAll(k, out) } -> std::same_as<Status>;
  { ct.ForEachValue(k, fn) } -> std::same_as<Status>;
  { ct.Count(k) } -> std::same_as<uint64_t>;
  { t.Erase(k, v) } -> std::same_as<Status>;
  { t.EraseAll(k) } -> std::same_as<Status>;
};

// What an open index offers beyond the uint64 API (Index::capabilities()). Each optional API is
// one flag here and one accessor on Index that returns nullptr when the flag is false, so a new
// optional API adds a flag and an interface, not a set of NotSupported virtuals on Index.
struct Capabilities {
  bool bytes = false;  // variable-size keys and values: Index::bytes() is not null (BytesApi)
  bool multi = false;  // several values per key: Index::multi() is not null (MultiApi)

  friend bool operator==(const Capabilities&, const Capabilities&) = default;
};

// The variable-size API of an Index (BytesIndex's contract, without the "Bytes" suffixes).
// Obtained from Index::bytes(); owned by that Index and valid as long as it is. After the
// Index's Close() every call returns kInvalidArgument (ForEach visits nothing).
class BytesApi {
 public:
  virtual Status Insert(std::string_view key, std::string_view value) = 0;
  virtual Status Update(std::string_view key, std::string_view value) = 0;
  virtual Status Upsert(std::string_view key, std::string_view value) = 0;
  // *value is assigned (its previous contents are discarded).
  virtual Status Find(std::string_view key, std::string* value) const = 0;
  virtual Status Erase(std::string_view key) = 0;
  // Visits every live pair once, uint64 ones included (as their 8 little-endian bytes).
  virtual Status ForEach(
      const std::function<void(std::string_view key, std::string_view value)>& fn) const = 0;

 protected:
  ~BytesApi() = default;  // not deleted through this interface: the Index owns it
};

// The multi-value API of an Index (MultiIndex's contract). Obtained from Index::multi(); owned by
// that Index and valid as long as it is. After the Index's Close() every call returns
// kInvalidArgument (Count and Size: 0; ForEach visits nothing).
class MultiApi {
 public:
  virtual Status Insert(Key key, Value value) = 0;
  virtual Status FindAll(Key key, std::vector<Value>* values) const = 0;
  virtual Status ForEachValue(Key key, const std::function<void(Value)>& fn) const = 0;
  virtual uint64_t Count(Key key) const = 0;
  virtual Status Erase(Key key, Value value) = 0;
  virtual Status EraseAll(Key key) = 0;
  // Every pair once.
  virtual Status ForEach(const std::function<void(Key, Value)>& fn) const = 0;
  virtual uint64_t Size() const = 0;  // pairs

 protected:
  ~MultiApi() = default;  // not deleted through this interface: the Index owns it
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
  // Many finds in one call (the HashIndex contract above). On reh, pea and turbo the keys' cache
  // misses overlap, 16 keys at a time: several times the throughput of a loop of Find on a table
  // larger than the cache. Use it wherever keys come in groups (MGET, joins, a list of ids).
  virtual Status FindBatch(std::span<const Key> keys, std::span<Value> values,
                           std::span<Status> statuses) const = 0;
  virtual Status Erase(Key k) = 0;
  // Many writes, acknowledged together (the HashIndex contract above): statuses[i] is ops[i]'s.
  // Nothing is durable-for-sure until it returns; then all of it is. On reh the ops share their
  // fences (one per up to 16 buckets written) instead of one each.
  virtual Status WriteBatch(std::span<const WriteOp> ops, std::span<Status> statuses) = 0;
  virtual uint64_t Size() const = 0;
  virtual Status ForEach(const std::function<void(Key, Value)>& fn) const = 0;
  virtual IndexStats Stats() const = 0;
  virtual Status CheckInvariants() const = 0;
  virtual void ResetCounters() = 0;
  // Clean shutdown (idempotent). Every call after it but Close, kind, durability and
  // capabilities returns kInvalidArgument (Size: 0; ForEach visits nothing). The destructor
  // closes unless Abandon()ed.
  virtual Status Close() = 0;
  // The destructor will leave the pool as a crash would (no clean mark): for crash tests.
  virtual void Abandon() = 0;

  // Optional APIs (see Capabilities). Defaults: none offered.
  virtual Capabilities capabilities() const { return {}; }
  // The variable-size API, or nullptr when capabilities().bytes is false.
  virtual BytesApi* bytes() { return nullptr; }
  virtual const BytesApi* bytes() const { return nullptr; }
  // The multi-value API, or nullptr when capabilities().multi is false.
  virtual MultiApi* multi() { return nullptr; }
  virtual const MultiApi* multi() const { return nullptr; }
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
// options.durability (unset: the durability an existing pool was created with, else kAdr).
// kInvalidArgument for an unknown kind, or for a pool that holds another kind. Per-index pool
// properties left unset in options are the pool's (see options.h).
Result<std::unique_ptr<Index>> Open(std::string_view kind, const Options& options);

// Opens the existing pool at options.path, whatever kind it holds (read from its header).
// kNotFound if there is no pool there; a pool is only created by naming its kind.
Result<std::unique_ptr<Index>> Open(const Options& options);

// The capabilities of `kind`, from its descriptor (a table lookup; no pool is opened). Every
// pool of the kind offers them (tests check the registry against opened instances).
// kInvalidArgument for an unknown kind.
Result<Capabilities> KindCapabilities(std::string_view kind);

// The registered kinds whose new pools offer capability `has` (e.g. &Capabilities::bytes), as
// "a, b" for messages ("" if none).
std::string KindsWith(bool Capabilities::*has);

}  // namespace pmhash
