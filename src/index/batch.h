// src/index/batch.h — batched finds: the cache misses of many keys overlapped.
//
// A find on a table larger than the cache is a chain of dependent misses: the directory entry
// (or shard word), then the bucket (REH: its DRAM metadata, then the PM slot line). Out-of-order
// execution overlaps little of one find with the next, because each find's loads wait on its own
// earlier ones. A batched find software-pipelines the keys instead (Chen, Ailamaki, Gibbons,
// Mowry, "Improving Hash Join Performance through Prefetching", ICDE 2004, section 4): a key's
// chain is cut into stages, and step i of the loop runs stage 0 of key i (hash it, prefetch the
// first line of its chain), stage 1 of key i - D (read that line, cached by now, and prefetch
// the next), ..., and the ordinary find of key i - S*D, whose lines are cached or on their way.
// Between two stages of one key lie D steps of other keys' work: about 200 ns with D = 8,
// longer than a DRAM miss, so the loads of one stage rarely wait on the prefetches of the last.
// (Group prefetching, every key's stage s before any key's stage s + 1, spent two thirds of its
// time in the stages' loads in a profile of REH: 16 keys' worth of a stage is shorter than a
// miss, so each stage waited on the last one's prefetches.)
//
// The stages only read to compute addresses and only prefetch: a line they read may change at
// once (a split, a resize), and nothing is kept from them but the hashed key. The find that
// follows is the engine's own validated read, so each key's result is linearizable exactly as a
// Find of it is; the batch as a whole is not a snapshot. What the stages read must stay mapped:
// directory entries, metadata and bucket addresses that a concurrent resize may retire are either
// kept until Close (REH's metadata and directories, Pea's directories) or only prefetched, never
// dereferenced (a prefetch of a retired segment reads pool memory, which stays mapped).
//
// An engine opts in with these members (private; PMHASH_ENGINE befriends BatchCalls):
//   static constexpr int kBatchStages;                 // 1..3 prefetch stages
//   template <int kStage> void BatchPrefetch(const Probe&) const;   // kStage in [0, kBatchStages)
//   Status BatchFind(const Probe&, Value*) const;      // the uint64 Find of a hashed key
// and optionally `static constexpr size_t kBatchDistance` (D, below),
// and `auto BatchGuard() const` if its finds need one: an object held across kBatchChunk keys
// (Pea: one epoch guard per 256 keys instead of one per key). Records kinds and engines without
// the hooks find one key at a time (a multimap with the hooks, pea-multi, answers one of a key's
// values, as its Find does).
//
// Batched writes (WriteBatch, include/pmhash/index.h). An engine whose writes can share one fence
// opts in with
//   void BatchWrite(std::span<const WriteOp>, std::span<Status>);   // sizes checked here
// (REH: src/index/reh/reh.h, which also prefetches ahead). An engine with the find hooks above
// runs each op as its own call (own fences, own locks) behind the same pipeline of prefetches:
// a write's first misses are a find's. The others run the ops one call each.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>

#include "common/attributes.h"
#include "index/lifecycle.h"
#include "pmhash/index.h"
#include "pmhash/status.h"

namespace pmhash::index {

// D: the steps between two stages of one key, unless the engine names its own kBatchDistance. A
// core keeps 10-20 L1 misses in flight (its fill buffers). Measured (2M keys, A/B in interleaved
// rounds): D = 16 made REH's find+@64 1.30x faster than D = 8 (one line per stage), and Pea's
// 0.89x (its stage 1 asks for five lines: 16 keys' worth overflow the fill buffers).
inline constexpr size_t kBatchDistance = 8;
// A BatchGuard is held for this many keys at a time (the pipeline drains at each boundary), so
// that a long batch does not hold back epoch reclamation for its whole run.
inline constexpr size_t kBatchChunk = 256;

// The mode of an engine's `Write(probe, value_bytes, value, mode)` (EngineBase, ProbeCalls).
enum class WriteMode { kInsert, kUpdate, kUpsert };

// Uninitialized room for N probes (each is written before it is read). A std::array of them is
// zeroed at every call (a probe holds a string_view): for REH's 64-entry ring, 2 KiB of stores
// that queue behind the previous write's fence and stall the next operation's loads.
template <class T, size_t N>
struct ProbeRing {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);
  ProbeRing() {}  // NOLINT: no member initialisation, on purpose
  T& operator[](size_t i) { return slots[i]; }
  union {
    T slots[N];
  };
};

struct BatchCalls {
  template <class E>
  static Status Find(const E& e, std::span<const Key> keys, std::span<Value> values,
                     std::span<Status> statuses) {
    if (values.size() < keys.size() || statuses.size() < keys.size()) {
      return Status::InvalidArgument("FindBatch: fewer values or statuses than keys");
    }
    if constexpr (kPrefetched<E>) {
      FindPrefetched(e, keys, values, statuses);
    } else {
      for (size_t i = 0; i < keys.size(); i++) statuses[i] = e.Find(keys[i], &values[i]);
    }
    return Status::OK();
  }

  template <class E>
  static Status Write(E& e, std::span<const WriteOp> ops, std::span<Status> statuses) {
    if (statuses.size() < ops.size()) {
      return Status::InvalidArgument("WriteBatch: fewer statuses than ops");
    }
    if (e.life_.closed()) [[unlikely]] {  // every op refused (src/index/lifecycle.h)
      std::fill_n(statuses.begin(), ops.size(), Lifecycle::ClosedError(E::kKindName));
      return Status::OK();
    }
    if constexpr (requires { e.BatchWrite(ops, statuses); }) {
      e.BatchWrite(ops, statuses);
    } else if constexpr (kPrefetched<E>) {
      // The find stages bring in the lines a write reads first (directory entry, bucket), so a
      // loop of single writes overlaps its misses as FindBatch does; each write is still its own
      // call, with its own fences, on the probe the stages hashed (no BatchGuard: the stages
      // need none, and a write that resizes must not wait on a guard of its own thread).
      Pipeline(
          e, ops.size(), [&](size_t i) PMHASH_LAMBDA_INLINE { return ops[i].key; },
          [&](size_t j, const auto& probe) PMHASH_LAMBDA_INLINE {
            statuses[j] = WriteProbe(e, ops[j], probe);
          });
    } else {
      for (size_t i = 0; i < ops.size(); i++) statuses[i] = WriteOne(e, ops[i]);
    }
    return Status::OK();
  }

  // One op as the engine's own write of a hashed key (the engines with the find hooks).
  template <class E, class Probe>
  PMHASH_ALWAYS_INLINE static Status WriteProbe(E& e, const WriteOp& op, const Probe& p) {
    switch (op.kind) {
      case WriteKind::kInsert:
        return e.Write(p, {}, op.value, WriteMode::kInsert);
      case WriteKind::kUpdate:
        return e.Write(p, {}, op.value, WriteMode::kUpdate);
      case WriteKind::kUpsert:
        return e.Write(p, {}, op.value, WriteMode::kUpsert);
      case WriteKind::kErase:
        return e.EraseProbe(p);
    }
    return UnknownKind(op);
  }

  // One op as its own call.
  template <class E>
  static Status WriteOne(E& e, const WriteOp& op) {
    switch (op.kind) {
      case WriteKind::kInsert:
        return e.Insert(op.key, op.value);
      case WriteKind::kUpdate:
        return e.Update(op.key, op.value);
      case WriteKind::kUpsert:
        return e.Upsert(op.key, op.value);
      case WriteKind::kErase:
        return e.Erase(op.key);
    }
    return UnknownKind(op);
  }
  static Status UnknownKind(const WriteOp& op) {
    return Status::InvalidArgument("WriteBatch: unknown WriteKind " +
                                   std::to_string(static_cast<int>(op.kind)));
  }

 private:
  // The engine has the hooks (kBatchStages 0: not for this instance of its template) and its
  // uint64 keys are inline (a records kind's Find copies a record: one at a time).
  template <class E>
  static constexpr bool kPrefetched = requires {
    requires E::kBatchStages > 0;
    requires !E::kRecordsKind;
  };

  template <class E>
  static constexpr size_t DistanceOf() {
    if constexpr (requires { E::kBatchDistance; }) {
      return E::kBatchDistance;
    } else {
      return kBatchDistance;
    }
  }

  template <class E>
  static void FindPrefetched(const E& e, std::span<const Key> keys, std::span<Value> values,
                             std::span<Status> statuses) {
    for (size_t first = 0; first < keys.size(); first += kBatchChunk) {
      const size_t n = std::min(kBatchChunk, keys.size() - first);
      auto chunk = [&] {
        // (Inlined by force: a call between the stages and the find costs their overlap.)
        Pipeline(
            e, n, [&](size_t i) PMHASH_LAMBDA_INLINE { return keys[first + i]; },
            [&](size_t j, const auto& probe) PMHASH_LAMBDA_INLINE {
              statuses[first + j] = e.BatchFind(probe, &values[first + j]);
            });
      };
      if constexpr (requires { e.BatchGuard(); }) {
        [[maybe_unused]] const auto guard = e.BatchGuard();
        chunk();
      } else {
        chunk();
      }
    }
  }

  // Runs finish(j, probe of key j) for j in [0, n), in order, each after the stages of key j
  // (key_at(i): the i-th key).
  template <class E, class KeyAt, class Finish>
  PMHASH_ALWAYS_INLINE static void Pipeline(const E& e, size_t n, KeyAt&& key_at,
                                            Finish&& finish) {
    constexpr size_t S = std::remove_cvref_t<E>::kBatchStages;
    static_assert(S >= 1 && S <= 3);
    constexpr size_t D = DistanceOf<std::remove_cvref_t<E>>();
    constexpr size_t kRing = std::bit_ceil(S * D + 1);  // keys i - S*D .. i
    if (n == 1) {  // nothing to overlap with: the stages would only add work
      finish(0, e.MakeProbe(key_at(0)));
      return;
    }
    // A short batch keeps the same D. Spreading its keys over the stages (D = n / S) was slower
    // (A/B: REH find+@8 0.69x, find+@16 0.81x): the stages of one key then follow too closely.
    using Probe = decltype(e.MakeProbe(Key{}));
    ProbeRing<Probe, kRing> ring;
    for (size_t i = 0; i < n + S * D; i++) {
      if (i < n) {
        ring[i % kRing] = e.MakeProbe(key_at(i));
        e.template BatchPrefetch<0>(ring[i % kRing]);
      }
      if constexpr (S > 1) {
        if (i >= D && i - D < n) e.template BatchPrefetch<1>(ring[(i - D) % kRing]);
      }
      if constexpr (S > 2) {
        if (i >= 2 * D && i - 2 * D < n) e.template BatchPrefetch<2>(ring[(i - 2 * D) % kRing]);
      }
      if (i >= S * D) {
        const size_t j = i - S * D;
        finish(j, ring[j % kRing]);
      }
    }
  }
};

}  // namespace pmhash::index
