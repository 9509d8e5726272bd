// tests/multi_test.cc — the multi-value API (MultiIndex, include/pmhash/index.h) of every kind
// that offers it (Capabilities::multi; today pea-multi), typed over MultiEngines
// (tests/engine_types.h), so that a new multimap kind is tested without editing this file:
//
//   MultiConformance.RandomOps   random Insert / Erase(k, v) / EraseAll / FindAll / Count over a
//                                small key range (so keys have 1..thousands of values) in a tiny
//                                geometry, for every durability policy and both bucket modes
//                                (data-aware and the baseline); op by op against an
//                                unordered_multimap, then the whole content, the invariants, and
//                                the same after a reopen. Stats() must show that every mechanism
//                                ran: compaction and redo-logged commits (data-aware buckets),
//                                buffer growth, chain nodes, the single -> 2-choice and
//                                2-choice -> stash transitions, splits.
//   MultiConformance.RandomOpsCollidingHashes  the same with HashMode::kCollide.
//   MultiFacade.*                the type-erased facade (pmhash::Open("pea-multi")): capabilities,
//                                MultiApi, the uint64 API's multimap meaning, Close, reopening by
//                                path alone; every multimap kind of the registry is tested here.
//   MultiConcurrent.InsertEraseFind  (label "concurrent") writers own disjoint keys with hundreds
//                                of values each, following a fixed script of inserts and erases;
//                                readers' FindAll must always return exactly one state of that
//                                script, never going back; then the final content is checked.
//   MultiConcurrent.SharedKeysAppendAndErase  (label "concurrent") every writer appends to and
//                                then erases from the same few keys; per key and writer, a read
//                                sees one contiguous range of its sequence, never going back.
//   MultiKill.AcknowledgedPairsSurviveSigkill  a child inserts and erases pairs, reporting each
//                                acknowledged one through a pipe (kill_util.h), is SIGKILLed at a
//                                random moment; the reopened pool holds exactly the acknowledged
//                                pairs, plus or minus the one operation in flight.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine_types.h"
#include "kill_util.h"
#include "pmhash/pmhash.h"
#include "test_util.h"

namespace pmhash::testing {
namespace {

// A geometry that makes every mechanism happen within a few thousand pairs: 64 buckets per
// segment (16 KB chunks: buffer types 0..2, then chain nodes of one chunk), one segment at first.
Options MultiOptions(const std::string& path, Durability d, uint32_t adaptive,
                     HashMode mode = HashMode::kStrong) {
  Options o;
  o.path = path;
  o.pool_size = uint64_t{256} << 20;
  o.durability = d;
  o.hash_mode = mode;
  o.pea.segment_buckets = 64;
  o.pea.initial_depth = 0;
  o.pea.adaptive_buckets = adaptive;
  o.hash_seed = TestSeed(0x3017);
  return o;
}

using Oracle = std::unordered_multimap<Key, Value>;

std::vector<Value> OracleValues(const Oracle& m, Key k) {
  std::vector<Value> v;
  auto [a, b] = m.equal_range(k);
  for (auto it = a; it != b; ++it) v.push_back(it->second);
  std::sort(v.begin(), v.end());
  return v;
}

// Find (the uint64 API) answers one of k's values, whichever.
template <class T>
void ExpectOneOf(const T& ix, Key k, const std::vector<Value>& want) {
  Value one = 0;
  const Status s = ix.Find(k, &one);
  ASSERT_EQ(s.ok(), !want.empty()) << "key " << k << ": " << s.ToString();
  if (s.ok()) {
    ASSERT_TRUE(std::binary_search(want.begin(), want.end(), one)) << "key " << k << ": " << one;
  }
}

template <class T>
void ExpectSame(const T& ix, const Oracle& m, const std::vector<Key>& keys) {
  ASSERT_EQ(ix.Size(), m.size());
  for (Key k : keys) {
    std::vector<Value> got;
    const Status s = ix.FindAll(k, &got);
    std::sort(got.begin(), got.end());
    const std::vector<Value> want = OracleValues(m, k);
    ASSERT_EQ(s.ok(), !want.empty()) << "key " << k << ": " << s.ToString();
    ASSERT_EQ(got, want) << "key " << k;
    ASSERT_EQ(ix.Count(k), want.size());
    ASSERT_NO_FATAL_FAILURE(ExpectOneOf(ix, k, want));
  }
  // FindBatch answers as Find does, in batches of up to 300 keys (pipelined prefetches), and
  // leaves an absent key's value as it was.
  constexpr Value kUntouched = ~Value{0};
  std::vector<Value> values(keys.size(), kUntouched);
  std::vector<Status> statuses(keys.size());
  for (size_t first = 0; first < keys.size(); first += 300) {
    const size_t n = std::min<size_t>(300, keys.size() - first);
    ASSERT_TRUE(ix.FindBatch(std::span<const Key>(keys).subspan(first, n),
                             std::span<Value>(values).subspan(first, n),
                             std::span<Status>(statuses).subspan(first, n))
                    .ok());
  }
  for (size_t i = 0; i < keys.size(); i++) {
    const std::vector<Value> want = OracleValues(m, keys[i]);
    ASSERT_EQ(statuses[i].ok(), !want.empty()) << "FindBatch, key " << keys[i];
    if (want.empty()) {
      ASSERT_EQ(values[i], kUntouched) << "FindBatch, key " << keys[i];
    } else {
      ASSERT_TRUE(std::binary_search(want.begin(), want.end(), values[i]))
          << "FindBatch, key " << keys[i] << ": " << values[i];
    }
  }
  // ForEach visits every pair once.
  std::map<std::pair<Key, Value>, int64_t> pairs;
  for (const auto& [k, v] : m) pairs[{k, v}]++;
  ASSERT_TRUE(ix.ForEach([&](Key k, Value v) { pairs[{k, v}]--; }).ok());
  for (const auto& [kv, n] : pairs) ASSERT_EQ(n, 0) << kv.first << " -> " << kv.second;
}

// ============================================================================================
// Typed: every multimap kind under every policy
// ============================================================================================

template <class T>
class MultiConformance : public ::testing::Test {
 protected:
  // `ops` random operations on a heavy-headed key range of 3000 keys (a few keys get thousands
  // of values, most one or two), checked op by op against an unordered_multimap; then the whole
  // content, the invariants, and (persistent policies) the same after a clean reopen. *stats:
  // the statistics at the end of the run (before the reopen).
  void RandomRun(const Options& o, uint64_t ops, IndexStats* stats) {
    auto r = T::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto ix = std::move(r).value();
    Oracle m;
    const uint64_t seed = TestSeed(7);
    SCOPED_TRACE(SeedTrace(seed));
    std::mt19937_64 rng(seed);
    auto draw_key = [&]() -> Key {
      const double u = std::uniform_real_distribution<double>(0, 1)(rng);
      return SplitMix64(static_cast<uint64_t>(std::pow(u, 3.0) * 3000));
    };
    std::vector<Key> keys;
    for (uint64_t i = 0; i < 3000; i++) keys.push_back(SplitMix64(i));
    for (uint64_t i = 0; i < ops; i++) {
      const Key k = draw_key();
      const int op = static_cast<int>(rng() % 100);
      if (op < 70) {
        const Value v = rng() % 1000;
        ASSERT_TRUE(ix->Insert(k, v).ok()) << "op " << i;
        m.emplace(k, v);
      } else if (op < 85) {
        const Value v = rng() % 1000;
        const Status s = ix->Erase(k, v);
        auto [a, b] = m.equal_range(k);
        auto it = std::find_if(a, b, [&](const auto& p) { return p.second == v; });
        ASSERT_EQ(s.ok(), it != b) << "op " << i << ": " << s.ToString();
        if (it != b) m.erase(it);
      } else if (op < 88) {
        const Status s = ix->EraseAll(k);
        ASSERT_EQ(s.ok(), m.count(k) > 0) << "op " << i << ": " << s.ToString();
        m.erase(k);
      } else {
        std::vector<Value> got;
        (void)ix->FindAll(k, &got);
        std::sort(got.begin(), got.end());
        ASSERT_EQ(got, OracleValues(m, k)) << "op " << i;
        ASSERT_NO_FATAL_FAILURE(ExpectOneOf(*ix, k, got)) << "op " << i;
      }
    }
    ASSERT_NO_FATAL_FAILURE(ExpectSame(*ix, m, keys));
    ASSERT_TRUE(ix->CheckInvariants().ok()) << ix->CheckInvariants().ToString();
    *stats = ix->Stats();
    if (!T::Policy::kPersistent) return;
    ASSERT_TRUE(ix->Close().ok());
    ix.reset();
    Options again = o;
    again.mode = OpenMode::kOpenExisting;
    auto re = T::Open(again);
    ASSERT_TRUE(re.ok()) << re.status().ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectSame(**re, m, keys));
    ASSERT_TRUE((*re)->CheckInvariants().ok()) << (*re)->CheckInvariants().ToString();
  }
};

using MultiTypes =
    GtestTypes<MultiEngines<pm::Dram, pm::Adr, pm::Eadr, pm::Sim>>::type;
TYPED_TEST_SUITE(MultiConformance, MultiTypes);

// Conformance, and every mechanism of the multimap happens in this tiny geometry, in both bucket
// modes (compaction and its redo-logged bucket rewrite only in the data-aware one: the baseline
// never compacts).
TYPED_TEST(MultiConformance, RandomOps) {
  for (uint32_t adaptive : {1u, 0u}) {
    SCOPED_TRACE("adaptive_buckets=" + std::to_string(adaptive));
    ScopedPath path("multi_random");
    const Options o = MultiOptions(path.path(), TypeParam::Policy::kDurability, adaptive);
    IndexStats s;
    // At least 60000 operations whatever the scale: the hot keys then pass the largest buffer
    // type (chains need about a thousand values on one key).
    ASSERT_NO_FATAL_FAILURE(
        this->RandomRun(o, std::max<uint64_t>(60000, Scaled(100000, 4)), &s));
    EXPECT_GT(s.splits, 0u);
    EXPECT_GT(Detail(s, "pea.multi.buffer_grows"), 0);
    EXPECT_GT(Detail(s, "pea.multi.chain_nodes"), 0);
    EXPECT_GT(Detail(s, "pea.transitions.two_choice"), 0);
    EXPECT_GT(Detail(s, "pea.transitions.stash"), 0);
    if (adaptive) {
      EXPECT_GT(Detail(s, "pea.multi.compactions"), 0);
      EXPECT_GT(Detail(s, "pea.multi.logged_commits"), 0);
    } else {
      EXPECT_EQ(Detail(s, "pea.multi.compactions"), 0);
    }
  }
}

// Pure 2-choice hashing: splits place items into two candidates, so keeping a key's slots in
// one bucket (the segment flag `together`, which lets FindAll and EraseAll stop early) is the
// split's choice, not the hash's.
TYPED_TEST(MultiConformance, RandomOpsTwoChoice) {
  ScopedPath path("multi_two_choice");
  Options o = MultiOptions(path.path(), TypeParam::Policy::kDurability, 1);
  o.pea.strategies = PeaStrategies::kTwoChoice;
  IndexStats s;
  ASSERT_NO_FATAL_FAILURE(this->RandomRun(o, Scaled(30000, 4), &s));
  EXPECT_GT(s.splits, 0u);
  EXPECT_GT(Detail(s, "pea.multi.compactions"), 0);
}

// The same with colliding hashes (HashMode::kCollide: shared fingerprints, clustered buckets).
TYPED_TEST(MultiConformance, RandomOpsCollidingHashes) {
  for (uint32_t adaptive : {1u, 0u}) {
    SCOPED_TRACE("adaptive_buckets=" + std::to_string(adaptive));
    ScopedPath path("multi_collide");
    const Options o = MultiOptions(path.path(), TypeParam::Policy::kDurability, adaptive,
                                   HashMode::kCollide);
    IndexStats s;
    ASSERT_NO_FATAL_FAILURE(this->RandomRun(o, Scaled(50000, 4), &s));
    EXPECT_GT(s.splits, 0u);
  }
}

// Keys of two values each into a new pool (whose buckets all have room: the second value goes
// beside the first), then keys of one value (never spilled into a second bucket), so that every
// segment still holds each key in one bucket when it splits (flag `together`); pure 2-choice,
// so that the split chooses between two buckets for each slot and must put a key's second slot
// beside its first.
TYPED_TEST(MultiConformance, SplitsKeepTwoValueKeysTogether) {
  ScopedPath path("multi_pairs");
  Options o = MultiOptions(path.path(), TypeParam::Policy::kDurability, 1);
  o.pea.strategies = PeaStrategies::kTwoChoice;
  auto r = TypeParam::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto ix = std::move(r).value();
  Oracle m;
  std::vector<Key> keys;
  for (uint64_t i = 0; i < Scaled(8000, 4); i++) {
    const Key k = SplitMix64(i);
    keys.push_back(k);
    for (Value v = 0; v < (i < 200 ? 2u : 1u); v++) {
      ASSERT_TRUE(ix->Insert(k, i + v).ok()) << i;
      m.emplace(k, i + v);
    }
  }
  ASSERT_NO_FATAL_FAILURE(ExpectSame(*ix, m, keys));
  ASSERT_TRUE(ix->CheckInvariants().ok()) << ix->CheckInvariants().ToString();
  EXPECT_GT(ix->Stats().splits, 0u);
}

// WriteBatch (prefetched for pea-multi, whose finds have the batch hooks) applies each op as the
// single call would: the same statuses and the same contents as a twin index written one call
// at a time. Inserts over 4000 keys (some get several values; the table splits), erases of a key
// (all its values), and the ops a multimap refuses (Update, Upsert), in batches of 1 to 64.
TYPED_TEST(MultiConformance, WriteBatchAsSingleCalls) {
  ScopedPath pa("multi_batch_a"), pb("multi_batch_b");
  auto ra = TypeParam::Open(MultiOptions(pa.path(), TypeParam::Policy::kDurability, 1));
  auto rb = TypeParam::Open(MultiOptions(pb.path(), TypeParam::Policy::kDurability, 1));
  ASSERT_TRUE(ra.ok() && rb.ok());
  auto a = std::move(ra).value();
  auto b = std::move(rb).value();
  std::mt19937_64 rng(TestSeed(0xba7c));
  std::vector<Key> keys;
  for (uint64_t i = 0; i < 4000; i++) keys.push_back(SplitMix64(i));
  for (int round = 0; round < 300; round++) {
    std::vector<WriteOp> ops(1 + rng() % 64);
    for (WriteOp& op : ops) {
      const uint64_t r = rng() % 100;
      op.kind = r < 75 ? WriteKind::kInsert
                : r < 95 ? WriteKind::kErase
                : r < 98 ? WriteKind::kUpdate
                         : WriteKind::kUpsert;
      op.key = keys[rng() % keys.size()];
      op.value = rng() % 8;
    }
    std::vector<Status> got(ops.size());
    ASSERT_TRUE(a->WriteBatch(ops, got).ok());
    for (size_t i = 0; i < ops.size(); i++) {
      const WriteOp& op = ops[i];
      const Status want = op.kind == WriteKind::kInsert   ? b->Insert(op.key, op.value)
                          : op.kind == WriteKind::kErase  ? b->Erase(op.key)
                          : op.kind == WriteKind::kUpdate ? b->Update(op.key, op.value)
                                                          : b->Upsert(op.key, op.value);
      ASSERT_EQ(got[i].code(), want.code()) << "round " << round << ", op " << i;
    }
  }
  ASSERT_EQ(a->Size(), b->Size());
  for (Key k : keys) {
    std::vector<Value> va, vb;
    (void)a->FindAll(k, &va);
    (void)b->FindAll(k, &vb);
    std::sort(va.begin(), va.end());
    std::sort(vb.begin(), vb.end());
    ASSERT_EQ(va, vb) << "key " << k;
  }
  EXPECT_GT(a->Stats().splits, 0u);
}

// ============================================================================================
// The facade
// ============================================================================================

// The registry's multimap kinds are exactly those the typed suites run (MultiEngines).
std::vector<std::string> MultiKinds() {
  std::vector<std::string> kinds;
  for (const IndexInfo& i : RegisteredIndexes()) {
    if (KindCapabilities(i.name).value().multi) kinds.emplace_back(i.name);
  }
  return kinds;
}

TEST(MultiFacade, RegistryKindsAreTheTypedOnes) {
  std::vector<std::string> typed;
  for (std::string_view n : KindNamesOf<MultiEngines<pm::Dram>>::Get()) typed.emplace_back(n);
  EXPECT_EQ(MultiKinds(), typed);
  ASSERT_FALSE(typed.empty());
  std::string joined;
  for (const auto& k : typed) joined += (joined.empty() ? "" : ", ") + k;
  EXPECT_EQ(KindsWith(&Capabilities::multi), joined);
}

// Sorted values of k through the MultiApi.
std::vector<Value> All(const MultiApi& m, Key k) {
  std::vector<Value> v{12345};  // FindAll replaces what was there
  const Status s = m.FindAll(k, &v);
  EXPECT_EQ(s.ok(), !v.empty()) << s.ToString();
  if (!s.ok()) {
    EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  }
  std::sort(v.begin(), v.end());
  return v;
}

TEST(MultiFacade, MultiApiAndUint64Semantics) {
  for (const std::string& kind : MultiKinds()) {
    for (uint32_t adaptive : {1u, 0u}) {
      SCOPED_TRACE(kind + ", adaptive_buckets=" + std::to_string(adaptive));
      ScopedPath p("multi_facade");
      Options o = MultiOptions(p.path(), Durability::kAdr, adaptive);
      o.mode = OpenMode::kCreateExclusive;
      auto r = pmhash::Open(kind, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      Index& ix = *r.value();
      EXPECT_EQ(ix.kind(), kind);
      EXPECT_EQ(ix.capabilities(), (Capabilities{.multi = true}));
      EXPECT_EQ(ix.capabilities(), KindCapabilities(kind).value());
      EXPECT_EQ(ix.bytes(), nullptr);
      EXPECT_EQ(std::as_const(ix).bytes(), nullptr);
      MultiApi* m = ix.multi();
      ASSERT_NE(m, nullptr);
      EXPECT_EQ(std::as_const(ix).multi(), m);

      // Insert adds pairs; an exact duplicate is kept.
      ASSERT_TRUE(m->Insert(1, 10).ok());
      ASSERT_TRUE(m->Insert(1, 11).ok());
      ASSERT_TRUE(m->Insert(1, 10).ok());
      ASSERT_TRUE(m->Insert(2, 20).ok());
      EXPECT_EQ(All(*m, 1), (std::vector<Value>{10, 10, 11}));
      EXPECT_EQ(All(*m, 2), (std::vector<Value>{20}));
      EXPECT_EQ(All(*m, 3), std::vector<Value>{});
      EXPECT_EQ(m->Count(1), 3u);
      EXPECT_EQ(m->Count(3), 0u);
      EXPECT_EQ(m->Size(), 4u);
      std::vector<Value> seen;
      ASSERT_TRUE(m->ForEachValue(1, [&](Value v) { seen.push_back(v); }).ok());
      std::sort(seen.begin(), seen.end());
      EXPECT_EQ(seen, (std::vector<Value>{10, 10, 11}));
      seen.clear();
      EXPECT_TRUE(m->ForEachValue(3, [&](Value v) { seen.push_back(v); }).IsNotFound());
      EXPECT_TRUE(seen.empty());

      // Erase(k, v) removes one pair.
      ASSERT_TRUE(m->Erase(1, 10).ok());
      EXPECT_EQ(All(*m, 1), (std::vector<Value>{10, 11}));
      EXPECT_TRUE(m->Erase(1, 12).IsNotFound());
      EXPECT_TRUE(m->Erase(3, 10).IsNotFound());
      EXPECT_EQ(m->Size(), 3u);

      // The uint64 API: Insert adds a pair (never kExists), Find gives one of the values,
      // Update / Upsert are not defined, Erase is EraseAll, ForEach and Size count pairs.
      ASSERT_TRUE(ix.Insert(1, 12).ok());
      ASSERT_TRUE(ix.Insert(1, 12).ok());
      EXPECT_EQ(All(*m, 1), (std::vector<Value>{10, 11, 12, 12}));
      Value v = 0;
      ASSERT_TRUE(ix.Find(1, &v).ok());
      EXPECT_TRUE(v == 10 || v == 11 || v == 12) << v;
      EXPECT_TRUE(ix.Find(3, &v).IsNotFound());
      EXPECT_TRUE(ix.Update(1, 13).IsNotSupported());
      EXPECT_TRUE(ix.Upsert(1, 13).IsNotSupported());
      EXPECT_TRUE(ix.Update(3, 13).IsNotSupported());
      EXPECT_TRUE(ix.Upsert(3, 13).IsNotSupported());
      EXPECT_EQ(All(*m, 1), (std::vector<Value>{10, 11, 12, 12}));
      EXPECT_EQ(All(*m, 3), std::vector<Value>{});
      EXPECT_EQ(ix.Size(), 5u);
      EXPECT_EQ(m->Size(), 5u);
      std::multiset<std::pair<Key, Value>> pairs, pairs2;
      ASSERT_TRUE(ix.ForEach([&](Key k, Value x) { pairs.insert({k, x}); }).ok());
      ASSERT_TRUE(m->ForEach([&](Key k, Value x) { pairs2.insert({k, x}); }).ok());
      const std::multiset<std::pair<Key, Value>> want = {{1, 10}, {1, 11}, {1, 12}, {1, 12},
                                                          {2, 20}};
      EXPECT_EQ(pairs, want);
      EXPECT_EQ(pairs2, want);
      ASSERT_TRUE(ix.Erase(1).ok());  // every pair of 1
      EXPECT_EQ(All(*m, 1), std::vector<Value>{});
      EXPECT_TRUE(ix.Erase(1).IsNotFound());
      EXPECT_TRUE(m->EraseAll(1).IsNotFound());
      EXPECT_EQ(ix.Size(), 1u);
      ASSERT_TRUE(m->EraseAll(2).ok());
      EXPECT_EQ(m->Size(), 0u);

      // Enough values on one key for buffers and chains, and some keys beside it.
      for (Value x = 0; x < 3000; x++) ASSERT_TRUE(m->Insert(7, x).ok());
      for (Key k = 100; k < 400; k++) ASSERT_TRUE(m->Insert(k, k * 2).ok());
      for (Value x = 0; x < 3000; x += 3) ASSERT_TRUE(m->Erase(7, x).ok());
      EXPECT_EQ(m->Count(7), 2000u);
      EXPECT_EQ(m->Size(), 2300u);
      ASSERT_TRUE(ix.CheckInvariants().ok()) << ix.CheckInvariants().ToString();
      ASSERT_TRUE(ix.Close().ok());

      // After Close every MultiApi call refuses.
      std::vector<Value> out{1, 2};
      EXPECT_TRUE(m->Insert(7, 1).IsInvalidArgument());
      EXPECT_TRUE(m->FindAll(7, &out).IsInvalidArgument());
      EXPECT_TRUE(out.empty());
      int calls = 0;
      EXPECT_TRUE(m->ForEachValue(7, [&](Value) { calls++; }).IsInvalidArgument());
      EXPECT_EQ(m->Count(7), 0u);
      EXPECT_TRUE(m->Erase(7, 1).IsInvalidArgument());
      EXPECT_TRUE(m->EraseAll(7).IsInvalidArgument());
      EXPECT_TRUE(m->ForEach([&](Key, Value) { calls++; }).IsInvalidArgument());
      EXPECT_EQ(m->Size(), 0u);
      EXPECT_EQ(calls, 0);
      EXPECT_TRUE(ix.Insert(7, 1).IsInvalidArgument());
      EXPECT_TRUE(ix.Find(7, &v).IsInvalidArgument());
      r = Status::NotFound("closed");

      // Reopened by path alone: the pool says what it is (kind, durability, adaptive_buckets).
      Options bare;
      bare.path = p.path();
      bare.mode = OpenMode::kOpenExisting;
      auto re = pmhash::Open(bare);
      ASSERT_TRUE(re.ok()) << re.status().ToString();
      Index& iy = *re.value();
      EXPECT_EQ(iy.kind(), kind);
      EXPECT_EQ(iy.durability(), Durability::kAdr);
      EXPECT_FALSE(iy.Stats().recovered);
      EXPECT_EQ(iy.capabilities(), (Capabilities{.multi = true}));
      MultiApi* n = iy.multi();
      ASSERT_NE(n, nullptr);
      EXPECT_EQ(n->Size(), 2300u);
      EXPECT_EQ(iy.Size(), 2300u);
      std::vector<Value> want7;
      for (Value x = 0; x < 3000; x++) {
        if (x % 3 != 0) want7.push_back(x);
      }
      EXPECT_EQ(All(*n, 7), want7);
      for (Key k = 100; k < 400; k++) ASSERT_EQ(All(*n, k), std::vector<Value>{k * 2}) << k;
      ASSERT_TRUE(iy.CheckInvariants().ok()) << iy.CheckInvariants().ToString();
      ASSERT_TRUE(iy.Close().ok());
      re = Status::NotFound("closed");

      // The bucket mode is a pool property: the other one is refused, by name.
      Options other = bare;
      other.pea.adaptive_buckets = 1 - adaptive;
      auto refused = pmhash::Open(kind, other);
      ASSERT_FALSE(refused.ok());
      EXPECT_TRUE(refused.status().IsInvalidArgument()) << refused.status().ToString();
      EXPECT_NE(refused.status().ToString().find("adaptive_buckets"), std::string::npos)
          << refused.status().ToString();
    }
  }
}

// A crash (no Close) keeps every pair, through the facade.
TEST(MultiFacade, AbandonedPoolRecovers) {
  for (const std::string& kind : MultiKinds()) {
    SCOPED_TRACE(kind);
    ScopedPath p("multi_abandon");
    const Options o = MultiOptions(p.path(), Durability::kAdr, 1);
    Oracle m;
    {
      auto r = pmhash::Open(kind, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      MultiApi& api = *(*r)->multi();
      for (uint64_t i = 0; i < 5000; i++) {
        const Key k = SplitMix64(i % 97);
        ASSERT_TRUE(api.Insert(k, i).ok());
        m.emplace(k, i);
      }
      for (uint64_t i = 0; i < 5000; i += 7) {
        const Key k = SplitMix64(i % 97);
        ASSERT_TRUE(api.Erase(k, i).ok());
        auto [a, b] = m.equal_range(k);
        m.erase(std::find_if(a, b, [&](const auto& kv) { return kv.second == i; }));
      }
      ASSERT_TRUE(api.EraseAll(SplitMix64(5)).ok());
      m.erase(SplitMix64(5));
      (*r)->Abandon();
    }
    Options again = o;
    again.mode = OpenMode::kOpenExisting;
    auto r = pmhash::Open(again);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE((*r)->Stats().recovered);
    ASSERT_TRUE((*r)->CheckInvariants().ok()) << (*r)->CheckInvariants().ToString();
    MultiApi& api = *(*r)->multi();
    EXPECT_EQ(api.Size(), m.size());
    for (uint64_t i = 0; i < 97; i++) {
      EXPECT_EQ(All(api, SplitMix64(i)), OracleValues(m, SplitMix64(i))) << i;
    }
  }
}

// ============================================================================================
// Concurrency
// ============================================================================================

// The script of every key (its writer runs it, in order, and nobody else writes the key):
//   for i in 0 .. n-1:  Insert(k, V(i));  if i % 4 == 3: Erase(k, V(i - 2))
// then, for odd key ids, EraseAll(k). V(i) = id << 32 | i, so a value of another key shows.
// (Before each step i the writer also inserts a few keys of one value each, "fillers", so that
// the segments keep splitting while the script runs.)
// A state of the script is its position: 0 before the first insert; 2a after the a-th insert;
// 2a + 1 after the erase that follows it (a % 4 == 0); kErasedAll after EraseAll. A read of the
// key (FindAll) must return exactly the values of one position, and the positions one reader
// sees of one key never decrease (linearizability of single-key reads and writes).
struct Script {
  uint64_t n;  // inserts per key
  static constexpr uint64_t kErasedAll = uint64_t{1} << 62;

  static Value V(uint64_t id, uint64_t i) { return id << 32 | i; }
  // Whether value i is live after a inserts (`erased`: and the erase that follows the a-th).
  static bool Live(uint64_t i, uint64_t a, bool erased) {
    if (i >= a) return false;
    if (i % 4 != 1) return true;
    const uint64_t by = i + 2;  // the insert after which it is erased
    return !(by + 1 < a || (by + 1 == a && erased));
  }
  static std::vector<Value> State(uint64_t id, uint64_t a, bool erased) {
    std::vector<Value> v;
    for (uint64_t i = 0; i < a; i++) {
      if (Live(i, a, erased)) v.push_back(V(id, i));
    }
    return v;
  }
  // The position of `got` (sorted) for key `id`, or an error message.
  std::optional<std::string> Position(uint64_t id, const std::vector<Value>& got,
                                      uint64_t* pos) const {
    if (got.empty()) {
      *pos = 0;  // or kErasedAll: the caller decides from the previous position
      return std::nullopt;
    }
    for (size_t x = 0; x < got.size(); x++) {
      if ((got[x] >> 32) != id || (got[x] & 0xFFFFFFFF) >= n) {
        return "value " + std::to_string(got[x]) + " is no value of key id " + std::to_string(id);
      }
      if (x > 0 && got[x] == got[x - 1]) return "value " + std::to_string(got[x]) + " twice";
    }
    const uint64_t a = (got.back() & 0xFFFFFFFF) + 1;
    for (bool erased : {false, true}) {
      if (erased && (a - 1) % 4 != 3) break;
      if (got == State(id, a, erased)) {
        *pos = 2 * a + (erased ? 1 : 0);
        return std::nullopt;
      }
    }
    std::string s = "no state of the script: " + std::to_string(got.size()) + " values up to " +
                    std::to_string(a - 1) + ", missing";
    int shown = 0;
    for (uint64_t i = 0; i < a && shown < 8; i++) {
      if (Live(i, a, false) && !std::binary_search(got.begin(), got.end(), V(id, i))) {
        s += " " + std::to_string(i);
        shown++;
      }
    }
    return s;
  }
};

template <class T>
class MultiConcurrent : public ::testing::Test {};

using MultiConcurrentTypes = GtestTypes<MultiEngines<pm::Dram, pm::Adr>>::type;
TYPED_TEST_SUITE(MultiConcurrent, MultiConcurrentTypes);

TYPED_TEST(MultiConcurrent, InsertEraseFind) {
  const int writers = TestThreads();
  const int readers = 2;
  const uint64_t keys_per_writer = 128;
  // At least 48 inserts per key: 37+ live values, past the 28 of a 256 B buffer.
  const Script script{std::max<uint64_t>(48, Scaled(160, 4))};
  const uint64_t nkeys = keys_per_writer * static_cast<uint64_t>(writers);
  for (uint32_t adaptive : {1u, 0u}) {
    SCOPED_TRACE("adaptive_buckets=" + std::to_string(adaptive));
    ScopedPath path("multi_concurrent");
    Options o = MultiOptions(path.path(), TypeParam::Policy::kDurability, adaptive);
    // 16 buckets (4 KB chunks: one buffer type, then chain nodes): the keys alone make the
    // segments split, transition and split again while values are appended and read.
    o.pea.segment_buckets = 16;
    auto r = TypeParam::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto ix = std::move(r).value();
    auto key_of = [](uint64_t id) { return SplitMix64(id ^ 0x6d756c7469ULL); };
    constexpr uint64_t kFillers = 4;  // per writer and step
    auto filler_id = [&](int t, uint64_t i, uint64_t f) {
      return nkeys + (static_cast<uint64_t>(t) * script.n + i) * kFillers + f;
    };
    Errors errors;
    std::atomic<int> writing{writers};
    std::atomic<uint64_t> reads{0}, nonempty_reads{0};

    std::atomic<int> started{0};  // readers run before the writers start
    auto writer = [&](int t) {
      while (started.load() < readers) std::this_thread::yield();
      const uint64_t first = static_cast<uint64_t>(t) * keys_per_writer;
      std::vector<Value> got;
      for (uint64_t i = 0; i < script.n && !errors.any(); i++) {
        // Keys of one value each, so that segments keep splitting while the script runs.
        for (uint64_t f = 0; f < kFillers; f++) {
          const uint64_t id = filler_id(t, i, f);
          if (Status s = ix->Insert(key_of(id), id); !s.ok()) {
            errors.Add("Insert(filler " + std::to_string(id) + "): " + s.ToString());
          }
        }
        for (uint64_t id = first; id < first + keys_per_writer; id++) {
          const Key k = key_of(id);
          if (Status s = ix->Insert(k, Script::V(id, i)); !s.ok()) {
            errors.Add("Insert(id " + std::to_string(id) + ", " + std::to_string(i) +
                       "): " + s.ToString());
            break;
          }
          if (i % 4 == 3) {
            if (Status s = ix->Erase(k, Script::V(id, i - 2)); !s.ok()) {
              errors.Add("Erase(id " + std::to_string(id) + ", " + std::to_string(i - 2) +
                         "): " + s.ToString());
              break;
            }
          }
          // The writer owns the key: its own read is exact.
          if ((i + id) % 16 == 0) {
            (void)ix->FindAll(k, &got);
            std::sort(got.begin(), got.end());
            if (got != Script::State(id, i + 1, true)) {
              errors.Add("writer's FindAll(id " + std::to_string(id) + ") after insert " +
                         std::to_string(i) + ": " + std::to_string(got.size()) + " values");
            }
          }
        }
      }
      for (uint64_t id = first + 1; id < first + keys_per_writer && !errors.any(); id += 2) {
        if (Status s = ix->EraseAll(key_of(id)); !s.ok()) {
          errors.Add("EraseAll(id " + std::to_string(id) + "): " + s.ToString());
        }
      }
      writing.fetch_sub(1);
    };

    auto reader = [&](int t) {
      std::vector<uint64_t> last(nkeys, 0);
      std::mt19937_64 rng(TestSeed(0x5ead) + static_cast<uint64_t>(t));
      std::vector<Value> got;
      uint64_t n = 0, nonempty = 0;
      started.fetch_add(1);
      while (writing.load() > 0 && !errors.any()) {
        const uint64_t id = rng() % nkeys;
        const Key k = key_of(id);
        const int how = static_cast<int>(rng() % 8);
        got.clear();
        Status s;
        if (how == 0) {
          s = ix->ForEachValue(k, [&](Value v) { got.push_back(v); });
        } else {
          s = ix->FindAll(k, &got);
        }
        n++;
        if (s.ok() == got.empty() || (!s.ok() && !s.IsNotFound())) {
          errors.Add("read of id " + std::to_string(id) + ": " + s.ToString() + " with " +
                     std::to_string(got.size()) + " values");
          break;
        }
        std::sort(got.begin(), got.end());
        uint64_t pos = 0;
        if (auto e = script.Position(id, got, &pos)) {
          errors.Add("reader " + std::to_string(t) + ", key id " + std::to_string(id) + ": " + *e);
          break;
        }
        if (got.empty()) {
          if (last[id] != 0) {
            if (id % 2 == 0) {
              errors.Add("key id " + std::to_string(id) + " (never erased whole) read empty after " +
                         "position " + std::to_string(last[id]));
              break;
            }
            pos = Script::kErasedAll;
          }
        } else {
          nonempty++;
        }
        if (pos < last[id]) {
          errors.Add("reader " + std::to_string(t) + ", key id " + std::to_string(id) +
                     ": position " + std::to_string(pos) + " after " + std::to_string(last[id]) +
                     " (a read went back in time)");
          break;
        }
        last[id] = pos;
        // One of k's values through the uint64 API.
        Value v = 0;
        if (how == 1 && ix->Find(k, &v).ok() && ((v >> 32) != id || (v & 0xFFFFFFFF) >= script.n)) {
          errors.Add("Find(id " + std::to_string(id) + ") gave " + std::to_string(v));
          break;
        }
      }
      reads.fetch_add(n);
      nonempty_reads.fetch_add(nonempty);
    };

    std::vector<std::thread> threads;
    for (int t = 0; t < writers; t++) threads.emplace_back(writer, t);
    for (int t = 0; t < readers; t++) threads.emplace_back(reader, t);
    for (auto& th : threads) th.join();
    ASSERT_FALSE(errors.any()) << errors.Report();
    std::cout << "[ info ] " << reads.load() << " concurrent reads, " << nonempty_reads.load()
              << " non-empty\n";
    EXPECT_GT(nonempty_reads.load(), 0u);

    // The final content: even ids hold the script's last state, odd ids nothing.
    auto check = [&](const auto& index) {
      Oracle m;
      for (uint64_t id = 0; id < nkeys; id += 2) {
        for (Value v : Script::State(id, script.n, true)) m.emplace(key_of(id), v);
      }
      std::vector<Key> keys;
      for (uint64_t id = 0; id < nkeys; id++) keys.push_back(key_of(id));
      for (int t = 0; t < writers; t++) {
        for (uint64_t i = 0; i < script.n; i++) {
          for (uint64_t f = 0; f < kFillers; f++) {
            const uint64_t id = filler_id(t, i, f);
            m.emplace(key_of(id), id);
            keys.push_back(key_of(id));
          }
        }
      }
      ASSERT_NO_FATAL_FAILURE(ExpectSame(index, m, keys));
      const Status inv = index.CheckInvariants();
      ASSERT_TRUE(inv.ok()) << inv.ToString();
    };
    ASSERT_NO_FATAL_FAILURE(check(*ix));
    const IndexStats s = ix->Stats();
    std::cout << "[ info ] " << s.splits << " splits, "
              << Detail(s, "pea.multi.compactions") << " compactions, "
              << Detail(s, "pea.multi.chain_nodes") << " chain nodes\n";
    EXPECT_GT(s.splits, 0u);
    if (adaptive) {
      EXPECT_GT(Detail(s, "pea.multi.compactions"), 0);
    }
    // Chain nodes: past the data-aware buffer (28 values) at any script length, past the
    // baseline's largest buffer (it doubles from 4) with the default one.
    if (adaptive || script.n >= 160) {
      EXPECT_GT(Detail(s, "pea.multi.chain_nodes"), 0);
    }
    if (!TypeParam::Policy::kPersistent) continue;
    ASSERT_TRUE(ix->Close().ok());
    ix.reset();
    Options again = o;
    again.mode = OpenMode::kOpenExisting;
    auto re = TypeParam::Open(again);
    ASSERT_TRUE(re.ok()) << re.status().ToString();
    ASSERT_NO_FATAL_FAILURE(check(**re));
  }
}

// Every thread appends its own values to the same few keys (contention on one value list), then
// erases them in the order it appended them. Per key and thread, the values present always form
// one contiguous range [lo, hi) of that thread's sequence, and neither end ever goes back for a
// reader: a read that misses a value between two present ones, or sees one twice, or sees an
// erased one again, fails.
TYPED_TEST(MultiConcurrent, SharedKeysAppendAndErase) {
  const int writers = TestThreads();
  const int readers = 2;
  constexpr uint64_t kKeys = 6;
  const uint64_t n = Scaled(1500, 8);  // values per thread and key
  for (uint32_t adaptive : {1u, 0u}) {
    SCOPED_TRACE("adaptive_buckets=" + std::to_string(adaptive));
    ScopedPath path("multi_shared");
    Options o = MultiOptions(path.path(), TypeParam::Policy::kDurability, adaptive);
    auto r = TypeParam::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto ix = std::move(r).value();
    auto key_of = [](uint64_t x) { return SplitMix64(x ^ 0x5ba7edULL); };
    Errors errors;
    std::atomic<int> writing{writers};
    std::atomic<uint64_t> reads{0};
    auto writer = [&](int t) {
      const uint64_t tag = static_cast<uint64_t>(t + 1) << 32;
      for (uint64_t i = 0; i < n && !errors.any(); i++) {
        for (uint64_t x = 0; x < kKeys; x++) {
          if (Status s = ix->Insert(key_of(x), tag | i); !s.ok()) {
            errors.Add("Insert: " + s.ToString());
            break;
          }
        }
      }
      for (uint64_t i = 0; i < n && !errors.any(); i++) {
        for (uint64_t x = 0; x < kKeys; x++) {
          if (x % 2 == 1 && i >= n / 2) continue;  // odd keys keep the second half
          if (Status s = ix->Erase(key_of(x), tag | i); !s.ok()) {
            errors.Add("Erase(thread " + std::to_string(t) + ", " + std::to_string(i) +
                       "): " + s.ToString());
            break;
          }
        }
      }
      writing.fetch_sub(1);
    };
    auto reader = [&](int rd) {
      // lo/hi per key and writer thread, as last seen.
      std::vector<uint64_t> lo(kKeys * writers, 0), hi(kKeys * writers, 0);
      std::mt19937_64 rng(TestSeed(0x5a7ed) + static_cast<uint64_t>(rd));
      std::vector<Value> got;
      uint64_t count = 0;
      while (writing.load() > 0 && !errors.any()) {
        const uint64_t x = rng() % kKeys;
        got.clear();
        const Status s = ix->FindAll(key_of(x), &got);
        count++;
        if (!s.ok() && !s.IsNotFound()) {
          errors.Add("FindAll: " + s.ToString());
          break;
        }
        std::sort(got.begin(), got.end());
        // Values are sorted by thread, then sequence: walk each thread's run.
        std::vector<uint64_t> first(writers, 0), end(writers, 0);
        std::vector<bool> seen(writers, false);
        std::string bad;
        for (size_t y = 0; y < got.size() && bad.empty(); y++) {
          const uint64_t t = (got[y] >> 32) - 1, i = got[y] & 0xFFFFFFFF;
          if (t >= static_cast<uint64_t>(writers) || i >= n) {
            bad = "foreign value " + std::to_string(got[y]);
          } else if (!seen[t]) {
            seen[t] = true;
            first[t] = i;
            end[t] = i + 1;
          } else if (i != end[t]) {
            bad = "thread " + std::to_string(t) + "'s values jump from " +
                  std::to_string(end[t] - 1) + " to " + std::to_string(i) +
                  (i < end[t] ? " (a value twice)" : " (a hole)");
          } else {
            end[t]++;
          }
        }
        for (int t = 0; t < writers && bad.empty(); t++) {
          const size_t z = x * writers + static_cast<size_t>(t);
          // Nothing of thread t: its range is empty, before its first insert or after its last
          // erase; otherwise [first, end).
          const uint64_t l = seen[t] ? first[t] : (hi[z] == 0 ? 0 : hi[z]);
          const uint64_t h = seen[t] ? end[t] : hi[z];
          if (l < lo[z] || h < hi[z]) {
            bad = "thread " + std::to_string(t) + ": range [" + std::to_string(l) + ", " +
                  std::to_string(h) + ") after [" + std::to_string(lo[z]) + ", " +
                  std::to_string(hi[z]) + ") (a read went back in time)";
          }
          lo[z] = l;
          hi[z] = h;
        }
        if (!bad.empty()) {
          errors.Add("reader " + std::to_string(rd) + ", key " + std::to_string(x) + ": " + bad);
          break;
        }
      }
      reads.fetch_add(count);
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < writers; t++) threads.emplace_back(writer, t);
    for (int t = 0; t < readers; t++) threads.emplace_back(reader, t);
    for (auto& th : threads) th.join();
    ASSERT_FALSE(errors.any()) << errors.Report();
    std::cout << "[ info ] " << reads.load() << " concurrent reads\n";
    // Even keys are empty; odd keys hold every thread's second half.
    Oracle m;
    std::vector<Key> keys;
    for (uint64_t x = 0; x < kKeys; x++) {
      keys.push_back(key_of(x));
      if (x % 2 == 0) continue;
      for (int t = 0; t < writers; t++) {
        for (uint64_t i = n / 2; i < n; i++) {
          m.emplace(key_of(x), (static_cast<uint64_t>(t + 1) << 32) | i);
        }
      }
    }
    ASSERT_NO_FATAL_FAILURE(ExpectSame(*ix, m, keys));
    const Status inv = ix->CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv.ToString();
    EXPECT_GT(Detail(ix->Stats(), "pea.multi.chain_nodes"), 0);
  }
}

// ============================================================================================
// Process crash
// ============================================================================================

enum MultiOp : uint64_t { kMultiInsert = 1, kMultiErase = 2, kMultiEraseAll = 3 };

using PairSet = std::set<std::pair<Key, Value>>;  // every value is unique: no duplicate pairs

Options KillOptions(const std::string& path, uint32_t adaptive) {
  Options o = MultiOptions(path, Durability::kAdr, adaptive);
  o.pool_size = uint64_t{1} << 30;  // sparse on tmpfs
  o.mode = OpenMode::kOpenOrCreate;
  return o;
}

// Child side (no gtest): inserts pairs with fresh values on a heavy-headed range of 2000 keys
// (80%), erases known pairs (19%) and whole keys (1%); reports INTENT and ACK of each.
[[noreturn]] void MultiChild(int fd, std::string_view kind, const Options& o, int round,
                             const PairSet& model, uint64_t seed) {
  auto r = pmhash::Open(kind, o);
  if (!r.ok() || (*r)->multi() == nullptr) {
    SendRec(fd, {kError, 0, 0, r.ok() ? 0 : static_cast<uint64_t>(r.status().code())});
    _exit(2);
  }
  MultiApi& m = *(*r)->multi();
  std::vector<std::pair<Key, Value>> live(model.begin(), model.end());
  std::mt19937_64 rng(seed);
  SendRec(fd, {kReady, 0, 0, 0});
  for (uint64_t i = 0; i < 50'000'000; i++) {
    const unsigned pick = rng() % 100;
    KillRec rec{kIntent, kMultiInsert, 0, 0};
    size_t at = 0;
    if (pick < 80 || live.empty()) {
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      rec.key = SplitMix64(static_cast<uint64_t>(u * u * u * 2000));
      rec.value = (uint64_t(round + 1) << 40) | i;
    } else {
      at = rng() % live.size();
      rec.key = live[at].first;
      rec.value = live[at].second;
      rec.op = pick < 99 ? kMultiErase : kMultiEraseAll;
    }
    SendRec(fd, rec);
    Status s;
    switch (rec.op) {
      case kMultiInsert:
        s = m.Insert(rec.key, rec.value);
        break;
      case kMultiErase:
        s = m.Erase(rec.key, rec.value);
        break;
      default:
        s = m.EraseAll(rec.key);
        break;
    }
    if (!s.ok()) {
      SendRec(fd, {kError, rec.op, rec.key, static_cast<uint64_t>(s.code())});
      _exit(3);
    }
    if (rec.op == kMultiInsert) {
      live.emplace_back(rec.key, rec.value);
    } else if (rec.op == kMultiErase) {
      live[at] = live.back();
      live.pop_back();
    } else {
      std::erase_if(live, [&](const auto& kv) { return kv.first == rec.key; });
    }
    rec.type = kAck;
    SendRec(fd, rec);
  }
  _exit(0);
}

void ApplyMulti(PairSet& m, const KillRec& r) {
  if (r.op == kMultiInsert) {
    m.insert({r.key, r.value});
  } else if (r.op == kMultiErase) {
    m.erase({r.key, r.value});
  } else {
    std::erase_if(m, [&](const auto& kv) { return kv.first == r.key; });
  }
}

template <class T>
class MultiKill : public ::testing::Test {};

using MultiKillTypes = GtestTypes<MultiEngines<pm::Adr>>::type;
TYPED_TEST_SUITE(MultiKill, MultiKillTypes);

TYPED_TEST(MultiKill, AcknowledgedPairsSurviveSigkill) {
  const std::string_view kind = TypeParam::kKindName;
  const int rounds = static_cast<int>(std::max<uint64_t>(4, Scaled(10, 2)));
  for (uint32_t adaptive : {1u, 0u}) {
    SCOPED_TRACE("adaptive_buckets=" + std::to_string(adaptive));
    const uint64_t seed = TestSeed(0x3117) + adaptive;
    SCOPED_TRACE(SeedTrace(seed));
    std::mt19937_64 rng(seed);
    ScopedPath path("multi_kill");
    const Options o = KillOptions(path.path(), adaptive);
    PairSet model;
    uint64_t total_acks = 0, inflight_applied = 0, inflight_absent = 0;
    for (int round = 0; round < rounds; round++) {
      SCOPED_TRACE("round " + std::to_string(round));
      const int delay_ms = 5 + static_cast<int>(rng() % 46);
      const uint64_t child_seed = rng();
      std::vector<KillRec> recs;
      int status = 0;
      ASSERT_NO_FATAL_FAILURE(RunChildAndKill(
          [&](int fd) { MultiChild(fd, kind, o, round, model, child_seed); }, delay_ms, &recs,
          &status));

      std::optional<KillRec> inflight;
      uint64_t acks = 0;
      ASSERT_NO_FATAL_FAILURE(ReplayAcks(
          recs, [&](const KillRec& r) { ApplyMulti(model, r); }, &inflight, &acks));
      total_acks += acks;
      ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
          << "child ended on its own (status " << status << ") before the kill";

      Options again = o;
      again.mode = OpenMode::kOpenExisting;
      auto ro = pmhash::Open(again);  // by path: the pool says what it holds
      ASSERT_TRUE(ro.ok()) << ro.status().ToString();
      Index& ix = **ro;
      ASSERT_EQ(ix.kind(), kind);
      EXPECT_TRUE(ix.Stats().recovered);
      const Status inv = ix.CheckInvariants();
      ASSERT_TRUE(inv.ok()) << inv.ToString();
      MultiApi& m = *ix.multi();
      PairSet found;
      uint64_t visits = 0;
      ASSERT_TRUE(m.ForEach([&](Key k, Value v) {
                    visits++;
                    found.insert({k, v});
                  }).ok());
      ASSERT_EQ(visits, found.size()) << "a pair twice (every value was inserted once)";
      ASSERT_EQ(m.Size(), found.size());
      if (inflight && found != model) {
        PairSet after = model;
        ApplyMulti(after, *inflight);
        ASSERT_EQ(found, after) << "in-flight op " << inflight->op << " on key " << inflight->key
                                << " left a third state";
        model = std::move(after);
        inflight_applied++;
      } else if (inflight) {
        inflight_absent++;
      }
      // Acknowledged pairs are all there, and nothing else (no pair never inserted, none erased).
      ASSERT_EQ(found.size(), model.size()) << acks << " acks this round";
      for (const auto& kv : model) {
        ASSERT_TRUE(found.count(kv)) << "acknowledged pair (" << kv.first << ", " << kv.second
                                     << ") lost";
      }
      // FindAll agrees with ForEach, key by key.
      std::map<Key, std::vector<Value>> by_key;
      for (const auto& [k, v] : model) by_key[k].push_back(v);
      for (const auto& [k, vals] : by_key) {
        std::vector<Value> got;
        ASSERT_TRUE(m.FindAll(k, &got).ok());
        std::sort(got.begin(), got.end());
        ASSERT_EQ(got, vals) << "key " << k;
      }
      size_t most = 0;
      for (const auto& [k, vals] : by_key) most = std::max(most, vals.size());
      std::cout << "[ info ] round " << round << ": killed after " << delay_ms << " ms, " << acks
                << " acked ops, " << model.size() << " pairs, " << by_key.size()
                << " keys (up to " << most << " values), " << ix.Stats().buckets << " buckets\n";
      if (round % 2 == 0) {
        ASSERT_TRUE(ix.Close().ok());
      }
    }
    EXPECT_GT(total_acks, 0u) << "the children never got to run";
    std::cout << "[ info ] " << total_acks << " acked ops; in-flight applied " << inflight_applied
              << ", absent " << inflight_absent << "\n";
  }
}

}  // namespace
}  // namespace pmhash::testing
