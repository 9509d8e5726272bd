// src/index/pea/pea_layout.h — Pea Hash, the persistent layout: bucket and segment formats, the
// directory entry and descriptor words, the DRAM lock line, and the pool's parameter block.
//
// The ASCII layout and the crash invariants are in src/index/pea/pea.h, which includes this.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <vector>
#include "common/epoch.h"
#include "common/fingerprint.h"
#include "common/hash.h"
#include "common/huge_array.h"
#include "common/locks.h"
#include "common/resize_log.h"
#include "common/striped_counter.h"
#include "index/descriptor.h"
#include "index/engine_base.h"
#include "index/lifecycle.h"
#include "pm/persist.h"
#include "pm/pool.h"
#include "pm/slot.h"
#include "pmhash/index.h"

namespace pmhash::pea {

inline constexpr int kSlots = 15;
inline constexpr int kFpSlots = 14;           // slot 14 has no fingerprint
inline constexpr uint32_t kOccMask = 0x7FFF;  // occupancy bits (bitmap >> 1)
inline constexpr uint64_t kKvFormat = 1;      // bitmap bit 0: all slots are key/value
inline constexpr uint64_t kSidMask = (uint64_t{1} << 48) - 1;
inline constexpr uint64_t kDescOffsetMask = (uint64_t{1} << 56) - 1;
inline constexpr uint32_t kMaxDepthLimit = 48;
inline constexpr int kBucketLocks = 8;

enum Strategy : uint32_t { kSingleHash = 0, kTwoChoice = 1, kStash = 2 };

using pm::PmSlot;  // src/pm/slot.h

struct alignas(256) PmBucket {
  std::atomic<uint64_t> hdr[2];  // [bitmap:16 | fp0..fp5], [fp6..fp13]
  PmSlot slots[kSlots];
};
static_assert(sizeof(PmBucket) == 256, "a bucket is one 256 B Optane XPLine");
static_assert(offsetof(PmBucket, slots) == 16, "16 B header, then 15 slots");

// The same bytes as a plain image, for building segments in DRAM before NtCopy.
struct alignas(256) BucketImage {
  uint64_t hdr[2];
  uint64_t kv[2 * kSlots];
};
static_assert(sizeof(BucketImage) == sizeof(PmBucket));

// Line of slot j (0..3): slots 0..2 share line 0 with the header.
inline constexpr int SlotLine(int j) { return (16 + 16 * j) / 64; }
inline constexpr uint32_t kLine0Slots = 0x7;  // slots 0..2
inline constexpr uint32_t kLineSlots[4] = {0x7, 0x78, 0x780, 0x7800};

inline constexpr uint64_t PackEntry(uint64_t sid, uint32_t ld, uint32_t strategy) {
  return (sid & kSidMask) | (uint64_t{ld & 0xFF} << 48) | (uint64_t{strategy & 0xFF} << 56);
}
inline constexpr uint64_t EntrySid(uint64_t e) { return e & kSidMask; }
inline constexpr uint32_t EntryDepth(uint64_t e) { return static_cast<uint32_t>(e >> 48) & 0xFF; }
inline constexpr uint32_t EntryStrategy(uint64_t e) { return static_cast<uint32_t>(e >> 56); }
inline constexpr uint64_t PackDesc(uint32_t g, uint64_t off) {
  return (uint64_t{g} << 56) | (off & kDescOffsetMask);
}
inline constexpr uint32_t DescDepth(uint64_t d) { return static_cast<uint32_t>(d >> 56); }
inline constexpr uint64_t DescOffset(uint64_t d) { return d & kDescOffsetMask; }

// Strategy range [first, last] of each ablation mode.
inline constexpr uint32_t FirstStrategy(PeaStrategies m) {
  switch (m) {
    case PeaStrategies::kTwoChoice:
      return kTwoChoice;
    case PeaStrategies::kTwoChoiceStash:
      return kStash;
    default:
      return kSingleHash;
  }
}
inline constexpr uint32_t LastStrategy(PeaStrategies m) {
  switch (m) {
    case PeaStrategies::kSingle:
      return kSingleHash;
    case PeaStrategies::kTwoChoice:
    case PeaStrategies::kSingleTwoChoice:
      return kTwoChoice;
    default:
      return kStash;
  }
}

// Per-segment DRAM lock line: segment lock + kBucketLocks bucket locks (VersionLock,
// src/common/locks.h: [version:31 | locked:1]); bucket b takes lock b mod kBucketLocks.
struct alignas(64) SegLocks {
  VersionLock seg;
  VersionLock bucket[kBucketLocks];
  // pea-multi, DRAM only: 1 while every key of the segment has all its slots in one bucket, so
  // that FindAll and EraseAll may stop at the first candidate holding the key. Set for a new
  // pool's segments and by the split that writes a segment keeping each key together; cleared,
  // under the bucket locks and before they are released, by an insert that gives a key a slot
  // in a second bucket. 0 after a reopen (not known: every candidate is read).
  std::atomic<uint8_t> together{0};
};
static_assert(sizeof(SegLocks) == 64, "one cache line per segment");
// The lock table lives in a HugeArray (raw mapped storage): Recover() constructs the lines in
// place, and the array unmaps them without running destructors.
static_assert(std::is_trivially_destructible_v<SegLocks>, "HugeArray never destroys elements");

// pea-multi (pea_multi.h): a value node, in the record heap (kRecordAlign-aligned), 32 B header
// then `capacity` 8-byte values:
//   [ key:64 ][ state = count:20 | next node offset / 16 : 44 ][ capacity:32 | type:8 | 0:24 ]
//   [ 0:64 ][ v0 ][ v1 ] ... [ v(capacity-1) ]
// type 0..10: a value buffer of 2^type x 256 B (the paper's value segment types; baseline mode:
// 4 x 2^type values); kChainType: a node of the chain (paper's type 11), one whole chunk.
struct ValueNode {
  std::atomic<uint64_t> key;
  std::atomic<uint64_t> state;
  uint64_t geom;
  uint64_t reserved;
};
static_assert(sizeof(ValueNode) == 32, "a value node's header is 32 B");
inline constexpr uint32_t kChainType = 11;
inline constexpr uint32_t kCountBits = 20;
inline constexpr uint64_t kMaxNodeValues = (uint64_t{1} << kCountBits) - 1;
inline constexpr uint64_t NodeCount(uint64_t state) { return state & kMaxNodeValues; }
inline constexpr uint64_t NodeNext(uint64_t state) { return (state >> kCountBits) << 4; }
inline constexpr uint64_t PackState(uint64_t count, uint64_t next) {
  return count | ((next >> 4) << kCountBits);
}
inline constexpr uint32_t NodeCapacity(uint64_t geom) { return static_cast<uint32_t>(geom); }
inline constexpr uint32_t NodeType(uint64_t geom) { return static_cast<uint32_t>(geom >> 32) & 0xFF; }
inline constexpr uint64_t PackGeom(uint32_t capacity, uint32_t type) {
  return capacity | (uint64_t{type} << 32);
}

// pea-multi: a redo log of up to kLogWords 8-byte stores that must land together (a bucket
// compaction, an EraseAll over several words). Committed by the store of n (> 0) after the
// pairs are durable; recovery applies a committed log and clears n.
inline constexpr uint32_t kLogWords = 64;
struct MultiLog {
  std::atomic<uint64_t> n;
  uint64_t pad[7];
  uint64_t w[2 * kLogWords];  // (pool offset, value) pairs
};
static_assert(sizeof(MultiLog) == 64 + 16 * kLogWords, "a log is a header line and its pairs");
inline constexpr uint32_t kMultiLogs = 64;  // logs in use at once (threads compacting at once)
inline constexpr uint64_t kMultiLogBytes = uint64_t{kMultiLogs} * sizeof(MultiLog);

// The pool properties, as stored in the pool header (src/index/descriptor.h).
struct PersistentParams : index::LayoutWords<sizeof(PmBucket), kSlots> {
  uint32_t segment_buckets = 0;
  uint32_t initial_depth = 0;
  uint32_t max_depth = 0;
  uint32_t strategies = 0;
  uint32_t records = 0;           // 1: pea-kv
  uint32_t max_record_bytes = 0;  // pea-kv only
  uint32_t multi = 0;             // 1: pea-multi
  uint32_t adaptive_buckets = 0;  // pea-multi only: 1 = data-aware buckets, 0 = baseline
};

// What an open index runs with: the pool's properties and this open's options.
struct Config : PersistentParams, index::CommonOpenOptions {
  bool entry_moving = true;
  bool tear_safe = false;
  void SetOpenOptions(const Options& o) {
    entry_moving = o.pea.entry_moving;
    tear_safe = o.pea.tear_safe;
  }
};

template <pm::PersistPolicy P, bool kRecords, bool kMulti>
class Pea;

// The engine of (kRecords, kMulti) as the template of the policy alone (DescriptorTypes).
template <bool kRecords, bool kMulti>
struct PeaEngine {
  template <class P>  // unconstrained, as index::FlaggedEngine's
  using Of = Pea<P, kRecords, kMulti>;
};

// pea-multi's own pool property (adaptive_buckets, default 1) after the others.
template <bool kMulti, class... Props>
constexpr auto WithMultiPropertyOf(std::tuple<Props...> props) {
  if constexpr (kMulti) {
    return std::tuple_cat(props, std::tuple{index::PoolProperty{
                                     "pea.adaptive_buckets", &PeaParams::adaptive_buckets,
                                     &PersistentParams::adaptive_buckets, 1u}});
  } else {
    return props;
  }
}

// "pea" (8 B inline items), "pea-kv" (kRecords: records), "pea-multi" (kMulti: several values
// per key, paper 3.3).
template <bool kRecords, bool kMulti = false>
struct DescriptorFor
    : index::RecordsDescriptorTypes<PeaParams, &Options::pea, PersistentParams,
                                    PeaEngine<kRecords, kMulti>::template Of,
                                    kRecords ? index::kPlainRecords : index::kNoRecords> {
  static_assert(!(kRecords && kMulti), "pea-multi stores 8 B keys and values inline");
  static constexpr std::string_view kName = kMulti ? "pea-multi" : kRecords ? "pea-kv" : "pea";
  static constexpr std::string_view kPaper =
      kMulti ? "Liu, Chen: Pea Hash (SIGMOD 2023), data-aware adaptive buckets (3.3)"
             : "Liu, Chen: Pea Hash: A Performant Extendible Adaptive Hashing Index (SIGMOD 2023)";
  static constexpr std::string_view kSummary =
      kMulti ? "Pea Hash with duplicate keys: (key, value) slots, compaction into (key, pointer) "
               "slots, value buffers of 2^k x 256 B and chains"
      : kRecords ? index::kRecordsSummary
                 : "extendible hashing, 512 KB segments, adaptive single/2-choice/stash strategy, "
                   "4-way split";
  static constexpr Capabilities kCapabilities{.multi = kMulti};
  static constexpr std::string_view kRecordProperty = "pea.max_record_bytes";
  static constexpr auto kProperties = WithMultiPropertyOf<kMulti>(std::tuple{
      index::PoolProperty{"pea.segment_buckets", &PeaParams::segment_buckets,
                          &PersistentParams::segment_buckets, 2048u},
      index::PoolProperty{"pea.initial_depth", &PeaParams::initial_depth,
                          &PersistentParams::initial_depth, 2u},
      index::PoolProperty{"pea.max_depth", &PeaParams::max_depth, &PersistentParams::max_depth,
                          32u},
      index::PoolProperty{"pea.strategies", &PeaParams::strategies,
                          &PersistentParams::strategies, PeaStrategies::kAdaptive},
  });
  static PersistentParams Base() {
    PersistentParams s;
    s.multi = kMulti ? 1 : 0;
    return s;
  }
  static std::string Check(const PersistentParams& s) {
    if (s.multi != (kMulti ? 1u : 0u)) {
      return "multi = " + std::to_string(s.multi) + " in a '" + std::string(kName) + "' pool";
    }
    if (kMulti ? s.adaptive_buckets > 1 : s.adaptive_buckets != 0) {
      return kMulti ? "adaptive_buckets must be 0 or 1"
                    : "adaptive_buckets set in a '" + std::string(kName) + "' pool";
    }
    if (s.segment_buckets < 4 || s.segment_buckets > 65536 ||
        !std::has_single_bit(s.segment_buckets)) {
      return "segment_buckets must be a power of two in [4, 65536]";
    }
    if (s.max_depth < 2 || s.max_depth > kMaxDepthLimit) return "max_depth must be in [2, 48]";
    if (s.initial_depth > s.max_depth || s.initial_depth > 20) {
      return "initial_depth must be in [0, min(max_depth, 20)]";
    }
    if (s.strategies > static_cast<uint32_t>(PeaStrategies::kSingleTwoChoice)) {
      return "strategies: unknown strategy sequence " + std::to_string(s.strategies);
    }
    return "";
  }
  // Initial segments, directory, StashSid array and one stash segment at least.
  static index::PoolLayout Layout(const PersistentParams& s) {
    const uint32_t chunk = s.segment_buckets * static_cast<uint32_t>(sizeof(PmBucket));
    const uint64_t dir_bytes = uint64_t{8} << s.initial_depth;
    const uint64_t log_chunks = s.multi ? (kMultiLogBytes + chunk - 1) / chunk : 0;
    return {chunk,
            (uint64_t{1} << s.initial_depth) + (dir_bytes + chunk - 1) / chunk + 2 + log_chunks};
  }
  // 256 B bucket per 15 slots; a 4-way split leaves segments near 0.22 load and uniform keys
  // fill them in waves, so the whole table can dip that low. Plan for 0.2 (the directory,
  // retired directories and stash segments are well under 1% on top).
  static constexpr double kPoolBytesPerKey = sizeof(PmBucket) / static_cast<double>(kSlots) / 0.2;
};

}  // namespace pmhash::pea
