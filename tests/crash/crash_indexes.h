// tests/crash/crash_indexes.h — every index of the library, as the crash suite runs it.
//
// Adding an index to the library means adding its traits here (CrashSuite.CoversEveryRegistered
// Index fails until then). Small() must give a geometry where a few hundred operations drive
// every growth path (splits, doublings, rehashes) and a pool small enough that images are cheap.
// TearSafe() adds what the index needs on a platform with only 8-byte failure atomicity (a 64 B
// line may reach the media torn, 8 bytes at a time): the crash suite runs it under tear_words.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <vector>
#include <utility>

#include "index/elimda/elimda.h"
#include "index/pea/pea.h"
#include "index/reh/reh.h"
#include "index/smartht/smartht.h"
#include "index/turbo/turbo.h"
#include "pmhash/options.h"

namespace pmhash::crashtest {

// A path a crash workload must reach: Stats() figure `stat` (a details name, or "splits" /
// "doublings") at least `min` by the end of the run.
struct CoverageTarget {
  std::string_view stat;
  double min;
  std::string_view why;
};

inline double StatValue(const IndexStats& s, std::string_view name) {
  if (name == "splits") return static_cast<double>(s.splits);
  if (name == "doublings") return static_cast<double>(s.doublings);
  for (const NamedStat& d : s.details) {
    if (d.name == name) return d.value;
  }
  return -1;  // not reported: fails any target
}

struct RehTraits {
  static constexpr std::string_view kName = "reh";
  static constexpr bool kLockFreeReads = false;  // readers wait for a locked bucket
  template <class P>
  using Index = reh::Reh<P>;
  static Options Small(HashMode mode) {
    Options o;
    o.pool_size = 512 << 10;
    o.reh.initial_depth = 1;  // splits and doublings from the first operations
    o.reh.max_depth = 24;
    o.hash_mode = mode;
    return o;
  }
  static Options Deep(HashMode mode) {
    Options o = Small(mode);
    o.pool_size = 1 << 20;
    return o;
  }
  static Options TearSafe(Options o) {
    o.reh.tear_safe = true;  // I4' in reh.h
    return o;
  }
  static std::vector<CoverageTarget> Coverage(bool skewed) {
    if (skewed) return {{"doublings", 4, "a deep directory on one side"}};
    return {{"splits", 1, "bucket splits"}, {"doublings", 1, "directory doubling"}};
  }
};

// The traits of a records kind (reh-kv, smartht-kv, elimda-kv: src/index/records.h) over those of
// its inline kind: the same geometry (pools of at least kMinSmall and kMinDeep bytes), with a
// record per insert and update in the record heap; retired records are reused at once, and a
// reused record slot is one more coverage target. The kind adds kName and Index.
template <class Inline, uint64_t kMinSmall = 0, uint64_t kMinDeep = 0>
struct RecordsTraitsOf {
  static constexpr bool kLockFreeReads = Inline::kLockFreeReads;
  static Options Small(HashMode mode) { return WithRecords(Inline::Small(mode), kMinSmall); }
  static Options Deep(HashMode mode) { return WithRecords(Inline::Deep(mode), kMinDeep); }
  static Options TearSafe(Options o) { return Inline::TearSafe(std::move(o)); }
  static std::vector<CoverageTarget> Coverage(bool skewed) {
    std::vector<CoverageTarget> t = Inline::Coverage(skewed);
    if (!skewed) t.push_back({"records.reused_slots", 1, "a freed record slot reused"});
    return t;
  }

 private:
  static Options WithRecords(Options o, uint64_t min_pool) {
    o.reclaim_batch = 1;  // retired records are reused at once
    o.pool_size = std::max<uint64_t>(o.pool_size, min_pool);
    return o;
  }
};

struct RehKvTraits : RecordsTraitsOf<RehTraits> {
  static constexpr std::string_view kName = "reh-kv";
  template <class P>
  using Index = reh::Reh<P, true>;
};

struct PeaTraits {
  static constexpr std::string_view kName = "pea";
  static constexpr bool kLockFreeReads = false;  // readers wait for a locked bucket
  template <class P>
  using Index = pea::Pea<P>;
  static Options Small(HashMode mode) {
    Options o;
    o.pool_size = 512 << 10;
    o.pea.segment_buckets = 4;  // 60 slots per segment: transitions, 4-way splits and directory
    o.pea.initial_depth = 0;    // expansions within the first hundred inserts
    o.pea.max_depth = 24;
    o.hash_mode = mode;
    o.reclaim_batch = 1;  // freed segments are reused at once (stale stash buckets, I5)
    return o;
  }
  static Options Deep(HashMode mode) {
    Options o = Small(mode);
    o.pool_size = 1 << 20;
    return o;
  }
  static Options TearSafe(Options o) {
    o.pea.tear_safe = true;  // I2' in pea.h
    return o;
  }
  static std::vector<CoverageTarget> Coverage(bool skewed) {
    if (skewed) {
      return {{"pea.directory.max_stride", 16, "a two-step directory update over several lines"},
              {"pea.splits.stash", 1, "a split of a segment in the stash strategy"},
              {"alloc.reused", 1, "a freed segment chunk reused"}};
    }
    return {{"splits", 1, "4-way splits"},
            {"doublings", 1, "directory expansion"},
            {"pea.transitions.two_choice", 1, "single -> 2-choice"},
            {"pea.transitions.stash", 1, "2-choice -> stash"},
            {"pea.splits.stash", 1, "a split of a segment in the stash strategy"}};
  }
};

// Pea Hash with records (pea-kv): the same geometry (4-bucket segments: 1 KB chunks, 4 KB
// slabs), with a record per insert and update in the record heap (src/index/records.h), which
// shares the segments' chunk allocator; freed records are reused at once.
struct PeaKvTraits {
  static constexpr std::string_view kName = "pea-kv";
  static constexpr bool kLockFreeReads = false;
  template <class P>
  using Index = pea::Pea<P, true>;
  static Options Small(HashMode mode) { return PeaTraits::Small(mode); }
  static Options Deep(HashMode mode) { return PeaTraits::Deep(mode); }
  static Options TearSafe(Options o) { return PeaTraits::TearSafe(std::move(o)); }
  static std::vector<CoverageTarget> Coverage(bool skewed) {
    std::vector<CoverageTarget> t = PeaTraits::Coverage(skewed);
    if (!skewed) t.push_back({"records.reused_slots", 1, "a freed record slot reused"});
    return t;
  }
};

// TurboHash, 8 B inline items: 2 shards of 1 bucket and a 2-bucket scope, so the first dozen
// inserts rehash (doubling), and erases + inserts garbage-collect.
struct TurboTraits {
  static constexpr std::string_view kName = "turbo";
  static constexpr bool kLockFreeReads = true;  // sequence-validated reads, no lock
  template <class P>
  using Index = turbo::Turbo<P, false>;
  static Options Small(HashMode mode) {
    Options o;
    o.pool_size = 512 << 10;
    o.turbo.shard_bits = 1;
    o.turbo.initial_buckets = 1;
    o.turbo.probe_scope = 2;
    o.turbo.max_shard_buckets = 1u << 12;
    o.turbo.gc_deleted_ratio = 0;  // a full shard with a deleted slot is garbage-collected
    o.hash_mode = mode;
    o.reclaim_batch = 1;  // freed shards and records are reused at once
    return o;
  }
  static Options Deep(HashMode mode) {
    Options o = Small(mode);
    o.pool_size = 1 << 20;
    o.turbo.shard_bits = 2;
    return o;
  }
  // Items and records are persisted before the 8-byte meta store that makes them live (I2 in
  // turbo.h): nothing to add.
  static Options TearSafe(Options o) { return o; }
  // (Inline items: a doubled shard never fits where the old one was, and this mix of
  // operations leaves no deleted slot in a full shard, so no GC: turbo-kv reaches both.)
  static std::vector<CoverageTarget> Coverage(bool) { return {{"doublings", 1, "shard rehash"}}; }
};

// TurboHash with records (turbo-kv): same geometry and pool; every insert/update allocates a
// record (a 32 B slot of a 4 KiB record-heap slab here, src/pm/record_heap.h; the first one
// carves the slab and persists its header).
struct TurboKvTraits {
  static constexpr std::string_view kName = "turbo-kv";
  static constexpr bool kLockFreeReads = true;
  template <class P>
  using Index = turbo::Turbo<P, true>;
  static Options Small(HashMode mode) { return TurboTraits::Small(mode); }
  static Options Deep(HashMode mode) { return TurboTraits::Deep(mode); }
  static Options TearSafe(Options o) { return TurboTraits::TearSafe(std::move(o)); }
  static std::vector<CoverageTarget> Coverage(bool) {
    return {{"doublings", 1, "shard rehash"},
            {"turbo.gc.count", 1, "garbage collection (same-size rehash)"},
            {"alloc.reused", 1, "freed chunks (old shards) reused"},
            {"records.reused_slots", 1, "a freed record slot reused"}};
  }
};

// SmartHT: 2 heads, growing at 3 keys per head, so the first operations chain buckets (head
// insertion) and split heads (linear hashing, batches of up to 16, new segments); erases make
// the filter stale enough to be rebuilt by a background task, which the harness runs between
// operations (manual mode), as it runs the rebuilds that grow the filter.
struct SmartHtTraits {
  static constexpr std::string_view kName = "smartht";
  static constexpr bool kLockFreeReads = false;  // readers wait for the stripe's writer
  template <class P>
  using Index = smartht::SmartHt<P>;
  static Options Small(HashMode mode) {
    Options o;
    o.pool_size = 512 << 10;
    o.smartht.head_bits = 1;
    o.smartht.max_head_bits = 20;
    o.smartht.grow_keys_per_head = 3;
    o.smartht.rebuild_erased_ratio = 0.02;  // a rebuild after a few erases
    o.smartht.save_filter_min_keys = 0;     // every Close saves the filter: crashes inside it
    o.hash_mode = mode;
    return o;
  }
  // (The skewed run's few hundred live keys fit the small pool; a larger pool would only make
  // every image dearer. The other runs cover the filter save.)
  static Options Deep(HashMode mode) {
    Options o = Small(mode);
    o.smartht.save_filter_min_keys = 1024;  // the default: small tables rebuild at open
    return o;
  }
  static Options TearSafe(Options o) {
    o.smartht.tear_safe = true;  // I2 in smartht.h
    return o;
  }
  static std::vector<CoverageTarget> Coverage(bool) {
    return {{"doublings", 1, "a level of linear hashing completed (a new segment)"},
            {"smartht.split_batches", 4, "split batches (build, commit, clean up)"},
            {"smartht.chain.links", 1, "a new chained bucket (head insertion)"},
            {"smartht.filter.rebuilds", 1, "a filter rebuild by the background task"}};
  }
};

// SmartHT with records (smartht-kv): the records share the buckets' chunk allocator.
struct SmartHtKvTraits : RecordsTraitsOf<SmartHtTraits> {
  static constexpr std::string_view kName = "smartht-kv";
  template <class P>
  using Index = smartht::SmartHt<P, true>;
};

// ElimDA: 2 collecting logs of 15 items, D-buckets of 16, 2 P-buckets of 32 per segment: log
// swaps from the 16th insert, relocations and segment splits within the first few hundred ops.
struct ElimdaTraits {
  static constexpr std::string_view kName = "elimda";
  static constexpr bool kLockFreeReads = false;  // readers take the key's log lock
  template <class P>
  using Index = elimda::ElimDA<P>;
  static Options Small(HashMode mode) {
    Options o;
    o.pool_size = 128 << 10;  // the workloads use ~40 KiB; a small image is a cheap check
    o.elimda.bucket_items = 32;
    o.elimda.dbucket_items = 16;
    o.elimda.segment_buckets = 2;
    o.elimda.logs = 2;
    o.elimda.initial_depth = 1;
    o.elimda.max_depth = 24;
    o.hash_mode = mode;
    return o;
  }
  static Options Deep(HashMode mode) {
    Options o = Small(mode);
    o.pool_size = 256 << 10;
    return o;
  }
  // tear_safe: every item is persisted before the 8-byte word (bit, count, pointer) that makes
  // it live (I3' in elimda.h needs whole lines).
  static Options TearSafe(Options o) {
    o.elimda.tear_safe = true;
    return o;
  }
  static std::vector<CoverageTarget> Coverage(bool skewed) {
    if (skewed) return {{"doublings", 3, "a deep directory on one side"}};
    return {{"elimda.log_swaps", 4, "collecting logs sealed and swapped"},
            {"elimda.first_line_moves", 1, "first-line items moved for an append (I3')"},
            {"elimda.relocations", 2, "D-buckets relocated to P-buckets"},
            {"elimda.blocks_freed", 1, "an emptied sealed log block unlinked"},
            {"elimda.shadows_cleared", 1, "a relocated item's log bit cleared by its erase (I13)"},
            {"splits", 1, "segment splits"},
            {"doublings", 1, "directory doubling"}};
  }
};

// ElimDA with records (elimda-kv): the records share the segments' and logs' chunk allocator,
// in 4 KiB slabs, so the pools are twice ElimDA's.
struct ElimdaKvTraits : RecordsTraitsOf<ElimdaTraits, 256 << 10, 512 << 10> {
  static constexpr std::string_view kName = "elimda-kv";
  template <class P>
  using Index = elimda::ElimDA<P, true>;
};

// Pea Hash with duplicate keys (pea-multi): Pea's geometry. The harness gives a multi-value
// index four hot keys (tens of values each: bucket compaction, value buffers, chains of 1 KB
// nodes) beside a wide key range (transitions, splits, expansions). 4-bucket segments leave one
// buffer type (256 B: a 4 KiB slab holds too few 512 B slots); PeaMultiCrash.BufferGrowth
// covers growth between types.
struct PeaMultiTraits {
  static constexpr std::string_view kName = "pea-multi";
  static constexpr bool kLockFreeReads = false;
  template <class P>
  using Index = pea::PeaMulti<P>;
  static Options Small(HashMode mode) { return PeaTraits::Small(mode); }
  static Options Deep(HashMode mode) { return PeaTraits::Deep(mode); }
  static Options TearSafe(Options o) { return PeaTraits::TearSafe(std::move(o)); }
  static std::vector<CoverageTarget> Coverage(bool skewed) {
    if (skewed) return {{"pea.directory.max_stride", 4, "a directory update over a wide stride"}};
    return {{"splits", 1, "4-way splits"},
            {"pea.transitions.two_choice", 1, "single -> 2-choice"},
            {"pea.multi.compactions", 1, "data-aware bucket compaction"},
            {"pea.multi.chain_nodes", 1, "a value chain node"},
            {"pea.multi.logged_commits", 1, "a redo-logged commit"}};
  }
};

// (New kinds go last: scripts/mutate names the suites by their position here.)
using AllIndexes = std::tuple<RehTraits, RehKvTraits, PeaTraits, TurboTraits, TurboKvTraits,
                              SmartHtTraits, ElimdaTraits, PeaKvTraits, PeaMultiTraits,
                              SmartHtKvTraits, ElimdaKvTraits>;

}  // namespace pmhash::crashtest
