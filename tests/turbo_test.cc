// tests/turbo_test.cc — TurboHash specifics: the variable-size (bytes) API against a model,
// near-place update / erase persist counts, garbage collection and probe statistics, and the
// lock-free read protocol under concurrent updates, erases and rehashes (*Concurrent*: TSan).
#include "index/turbo/turbo.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "crash/crash_harness.h"
#include "index_adapter.h"
#include "pmhash/pmhash.h"
#include "test_util.h"

namespace pmhash::testing {
namespace {

using turbo::Turbo;
using turbo::TurboKv;

Options Small(const std::string& path, Durability d, HashMode mode = HashMode::kStrong) {
  Options o;
  o.path = path;
  o.pool_size = uint64_t{256} << 20;
  o.durability = d;
  o.hash_mode = mode;
  o.turbo.shard_bits = 2;
  o.turbo.initial_buckets = 2;
  o.turbo.probe_scope = 16;
  return o;
}

double Detail(const IndexStats& s, std::string_view name) {
  for (const auto& d : s.details) {
    if (d.name == name) return d.value;
  }
  ADD_FAILURE() << "no detail " << name;
  return -1;
}

// Binary strings of 1 B .. 4 KB (mostly short), with zero bytes.
std::string RandomBytes(std::mt19937_64& rng, bool allow_long) {
  const uint64_t r = rng();
  size_t len = 1 + r % 24;
  if (allow_long && r % 16 == 0) len = 1 + (r >> 8) % 4096;
  std::string s(len, '\0');
  for (size_t i = 0; i < len; i++) s[i] = static_cast<char>(rng() % 4 == 0 ? 0 : rng());
  return s;
}

// ============================================================================================
// Bytes conformance (turbo-kv) against std::unordered_map<std::string, std::string>
// ============================================================================================

template <class T>
class BytesConformance : public ::testing::Test {
 protected:
  using Model = std::unordered_map<std::string, std::string>;
  void SetUp() override {
    path_ = TempPoolPath(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override {
    idx_.reset();
    unlink(path_.c_str());
  }
  void OpenIdx(const Options& o) {
    idx_.reset();
    auto r = T::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    idx_ = std::move(r).value();
  }
  void ExpectMatches(const Model& m) {
    Status inv = idx_->CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv.ToString();
    ASSERT_EQ(idx_->Size(), m.size());
    Model seen;
    idx_->ForEachBytes([&](std::string_view k, std::string_view v) {
      EXPECT_TRUE(seen.emplace(std::string(k), std::string(v)).second) << "visited twice";
    });
    ASSERT_EQ(seen, m);
    std::string v;
    for (const auto& [k, val] : m) {
      ASSERT_TRUE(idx_->FindBytes(k, &v).ok());
      ASSERT_EQ(v, val);
    }
  }
  void RandomOps(HashMode mode, uint64_t seed) {
    SCOPED_TRACE(SeedTrace(seed));
    const Options o = Small(path_, T::Policy::kDurability, mode);
    ASSERT_NO_FATAL_FAILURE(OpenIdx(o));
    std::mt19937_64 rng(seed);
    Model model;
    std::vector<std::string> keys;
    for (int i = 0; i < 600; i++) keys.push_back(RandomBytes(rng, true));
    keys.push_back(std::string());           // the empty key
    keys.push_back(std::string(8, '\0'));    // looks like uint64 key 0
    keys.push_back(std::string("a\0b", 3));  // embedded zero
    const uint64_t ops = Scaled(6000, 4);
    std::string got;
    for (uint64_t i = 0; i < ops; i++) {
      const std::string& k = keys[rng() % keys.size()];
      const std::string v = RandomBytes(rng, true);
      const bool present = model.count(k) != 0;
      switch (rng() % 6) {
        case 0: {
          Status s = idx_->InsertBytes(k, v);
          ASSERT_EQ(s.IsExists(), present) << s.ToString();
          if (!present) {
            ASSERT_TRUE(s.ok()) << s.ToString();
            model[k] = v;
          }
          break;
        }
        case 1: {
          Status s = idx_->UpdateBytes(k, v);
          ASSERT_EQ(s.IsNotFound(), !present) << s.ToString();
          if (present) model[k] = v;
          break;
        }
        case 2:
          ASSERT_TRUE(idx_->UpsertBytes(k, v).ok());
          model[k] = v;
          break;
        case 3: {
          Status s = idx_->EraseBytes(k);
          ASSERT_EQ(s.IsNotFound(), !present) << s.ToString();
          model.erase(k);
          break;
        }
        default: {
          Status s = idx_->FindBytes(k, &got);
          ASSERT_EQ(s.ok(), present) << s.ToString();
          if (present) {
            ASSERT_EQ(got, model[k]);
          }
        }
      }
    }
    ASSERT_NO_FATAL_FAILURE(ExpectMatches(model));
    const IndexStats st = idx_->Stats();
    EXPECT_GT(st.splits, 0u);
    if constexpr (T::Policy::kPersistent) {
      idx_->Abandon();  // crash of the process state
      idx_.reset();
      Options r = o;
      r.mode = OpenMode::kOpenExisting;
      ASSERT_NO_FATAL_FAILURE(OpenIdx(r));
      EXPECT_TRUE(idx_->Stats().recovered);
      ASSERT_NO_FATAL_FAILURE(ExpectMatches(model));
      ASSERT_TRUE(idx_->Close().ok());
      ASSERT_NO_FATAL_FAILURE(OpenIdx(r));
      EXPECT_FALSE(idx_->Stats().recovered);
      ASSERT_NO_FATAL_FAILURE(ExpectMatches(model));
    }
  }

  std::string path_;
  std::unique_ptr<T> idx_;
};

using KvTypes = ::testing::Types<TurboKv<pm::Dram>, TurboKv<pm::Adr>, TurboKv<pm::Eadr>>;
TYPED_TEST_SUITE(BytesConformance, KvTypes);

TYPED_TEST(BytesConformance, RandomOpsStrong) { this->RandomOps(HashMode::kStrong, TestSeed(61)); }
TYPED_TEST(BytesConformance, RandomOpsCollide) {
  this->RandomOps(HashMode::kCollide, TestSeed(62));
}

TYPED_TEST(BytesConformance, LimitsAndUint64View) {
  Options o = Small(this->path_, TypeParam::Policy::kDurability);
  o.turbo.max_record_bytes = 1024;
  ASSERT_NO_FATAL_FAILURE(this->OpenIdx(o));
  auto& ix = *this->idx_;
  EXPECT_TRUE(ix.SupportsBytes());
  EXPECT_TRUE(ix.InsertBytes("k", std::string(1100, 'x')).IsInvalidArgument());
  std::string v;
  EXPECT_TRUE(ix.FindBytes("k", &v).IsNotFound());
  // A uint64 key is its 8 little-endian bytes.
  ASSERT_TRUE(ix.Insert(0x0102030405060708ULL, 42).ok());
  const uint64_t k = 0x0102030405060708ULL;
  ASSERT_TRUE(ix.FindBytes(std::string_view(reinterpret_cast<const char*>(&k), 8), &v).ok());
  uint64_t val = 0;
  ASSERT_EQ(v.size(), 8u);
  std::memcpy(&val, v.data(), 8);
  EXPECT_EQ(val, 42u);
  // A byte value that is not 8 bytes is not a uint64 value.
  ASSERT_TRUE(ix.UpsertBytes(std::string_view(reinterpret_cast<const char*>(&k), 8), "abc").ok());
  Value out;
  EXPECT_TRUE(ix.Find(k, &out).IsInvalidArgument());
  EXPECT_TRUE(ix.CheckInvariants().ok());
}

TEST(TurboFacade, BytesThroughOpenAndAbsentElsewhere) {
  ScopedPath p("facade_kv");
  Options o = Small(p.path(), Durability::kAdr);
  {
    auto r = pmhash::Open("turbo-kv", o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Index& ix = *r.value();
    EXPECT_EQ(ix.capabilities(), (Capabilities{.bytes = true}));
    BytesApi* kv = ix.bytes();
    ASSERT_NE(kv, nullptr);
    EXPECT_EQ(std::as_const(ix).bytes(), kv);
    ASSERT_TRUE(kv->Insert(std::string("\0key", 4), "value").ok());
    EXPECT_TRUE(kv->Insert(std::string("\0key", 4), "other").IsExists());
    std::string v;
    ASSERT_TRUE(kv->Find(std::string("\0key", 4), &v).ok());
    EXPECT_EQ(v, "value");
    ASSERT_TRUE(kv->Update(std::string("\0key", 4), "v2").ok());
    int n = 0;
    ASSERT_TRUE(kv->ForEach([&](std::string_view, std::string_view val) {
                    EXPECT_EQ(val, "v2");
                    n++;
                  }).ok());
    EXPECT_EQ(n, 1);
    ASSERT_TRUE(kv->Erase(std::string("\0key", 4)).ok());
    EXPECT_TRUE(kv->Find(std::string("\0key", 4), &v).IsNotFound());
    ASSERT_TRUE(kv->Upsert("k", "v").ok());
    ASSERT_TRUE(ix.Close().ok());
    // After Close the bytes API refuses like the uint64 one.
    EXPECT_TRUE(kv->Find("k", &v).IsInvalidArgument());
    EXPECT_TRUE(kv->Upsert("k", "w").IsInvalidArgument());
    n = 0;
    EXPECT_TRUE(kv->ForEach([&](std::string_view, std::string_view) { n++; }).IsInvalidArgument());
    EXPECT_EQ(n, 0);
    EXPECT_TRUE(ix.ForEach([&](Key, Value) { n++; }).IsInvalidArgument());
    EXPECT_EQ(n, 0);
  }
  for (const char* kind : {"turbo", "reh", "pea"}) {
    ScopedPath q(std::string("facade_") + kind);
    Options oq = Small(q.path(), Durability::kDram);
    auto r = pmhash::Open(kind, oq);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Index& ix = *r.value();
    EXPECT_EQ(ix.capabilities(), Capabilities{}) << kind;
    EXPECT_EQ(ix.bytes(), nullptr) << kind;
    EXPECT_EQ(std::as_const(ix).bytes(), nullptr) << kind;
  }
  // The registry answers without a pool of one's own.
  auto caps = KindCapabilities("turbo-kv");
  ASSERT_TRUE(caps.ok()) << caps.status().ToString();
  EXPECT_TRUE(caps.value().bytes);
  EXPECT_FALSE(KindCapabilities("reh").value().bytes);
  EXPECT_TRUE(KindCapabilities("no-such-kind").status().IsInvalidArgument());
  EXPECT_EQ(KindsWith(&Capabilities::bytes), "turbo-kv");
  EXPECT_EQ(KindsWith(&Capabilities::multi), "");
}

// turbo-kv's uint64 ForEach visits the 8-byte records and says how many others it skipped.
TEST(TurboFacade, Uint64ForEachReportsRecordsItCannotExpress) {
  ScopedPath p("foreach_kv");
  auto r = pmhash::Open("turbo-kv", Small(p.path(), Durability::kDram));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Index& ix = *r.value();
  BytesApi* kv = ix.bytes();
  ASSERT_NE(kv, nullptr);
  for (Key k = 1; k <= 10; k++) ASSERT_TRUE(ix.Insert(k, k * 100).ok());
  uint64_t visited = 0;
  ASSERT_TRUE(ix.ForEach([&](Key, Value) { visited++; }).ok());  // all 8-byte: OK
  EXPECT_EQ(visited, 10u);
  ASSERT_TRUE(kv->Insert("a longer key", "v").ok());     // key of 12 bytes
  ASSERT_TRUE(kv->Insert("12345678", "short").ok());     // 8-byte key, 5-byte value
  ASSERT_TRUE(kv->Insert("", "").ok());                  // empty key and value
  visited = 0;
  std::map<Key, Value> seen;
  const Status s = ix.ForEach([&](Key k, Value v) {
    visited++;
    seen.emplace(k, v);
  });
  EXPECT_TRUE(s.IsNotSupported()) << s.ToString();
  EXPECT_NE(s.ToString().find("turbo-kv: 3 records have keys or values that are not 8 bytes"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.ToString().find("bytes API's ForEach"), std::string::npos) << s.ToString();
  EXPECT_EQ(visited, 10u);  // every 8-byte pair was still visited
  for (Key k = 1; k <= 10; k++) EXPECT_EQ(seen[k], k * 100);
  uint64_t all = 0;
  ASSERT_TRUE(kv->ForEach([&](std::string_view, std::string_view) { all++; }).ok());
  EXPECT_EQ(all, 13u);
  EXPECT_EQ(ix.Size(), 13u);
  // Erasing the odd ones makes the uint64 view complete again.
  ASSERT_TRUE(kv->Erase("a longer key").ok());
  ASSERT_TRUE(kv->Erase("12345678").ok());
  ASSERT_TRUE(kv->Erase("").ok());
  EXPECT_TRUE(ix.ForEach([](Key, Value) {}).ok());

  // The engine's own ForEach (HashIndex) reports the same; inline turbo has nothing to skip.
  ScopedPath q("foreach_kv_engine");
  auto e = TurboKv<pm::Dram>::Open(Small(q.path(), Durability::kDram));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_TRUE((*e)->Insert(1, 2).ok());
  ASSERT_TRUE((*e)->InsertBytes("abc", "x").ok());
  const Status es = (*e)->ForEach([](Key, Value) {});
  EXPECT_TRUE(es.IsNotSupported()) << es.ToString();
  EXPECT_NE(es.ToString().find(": 1 records"), std::string::npos) << es.ToString();
}

// ============================================================================================
// Persists per operation, GC and probe statistics
// ============================================================================================

TEST(Turbo, PersistsPerOperation) {
  ScopedPath p("persists");
  Options o = Small(p.path(), Durability::kAdr);
  o.turbo.initial_buckets = 1024;  // no rehash during the measurement
  o.counters = true;
  auto r = Turbo<pm::Adr>::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto& ix = *r.value();
  const uint64_t n = 2000;
  ix.ResetCounters();
  for (uint64_t i = 0; i < n; i++) ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
  EXPECT_EQ(ix.Stats().splits, 0u);
  TrafficStats t = ix.Stats().traffic;
  EXPECT_EQ(t.fences, 2 * n) << "insert: slot, then meta word";
  ix.ResetCounters();
  for (uint64_t i = 0; i < n; i++) ASSERT_TRUE(ix.Update(SplitMix64(i), i + 1).ok());
  t = ix.Stats().traffic;
  EXPECT_EQ(t.fences, 2 * n) << "near-place update: new slot, then meta word";
  ix.ResetCounters();
  for (uint64_t i = 0; i < n; i++) ASSERT_TRUE(ix.Erase(SplitMix64(i)).ok());
  t = ix.Stats().traffic;
  EXPECT_EQ(t.fences, n) << "erase: the meta word only";
  EXPECT_EQ(t.flushed_lines, n);
}

TEST(Turbo, GarbageCollectionShortensPaths) {
  for (bool kv : {false, true}) {
    SCOPED_TRACE(kv ? "turbo-kv" : "turbo");
    ScopedPath p("gc");
    Options o = Small(p.path(), Durability::kEadr);
    o.turbo.gc_deleted_ratio = 1.0;  // no automatic GC: we call GarbageCollect()
    auto run = [&](auto& ix) {
      const uint64_t n = 3000;
      for (uint64_t i = 0; i < n; i++) ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
      const IndexStats loaded = ix.Stats();
      EXPECT_GT(Detail(loaded, "turbo.probe.mean"), 0.99);
      EXPECT_GE(Detail(loaded, "turbo.probe.neg_mean"), 1.0);
      // Delete everything and load another set to the same size (paper 4.6).
      for (uint64_t i = 0; i < n; i++) ASSERT_TRUE(ix.Erase(SplitMix64(i)).ok());
      EXPECT_GT(Detail(ix.Stats(), "turbo.deleted_slots"), 0);
      for (uint64_t i = n; i < 2 * n / 3 + n; i++) ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
      auto gcd = ix.GarbageCollect();
      ASSERT_TRUE(gcd.ok()) << gcd.status().ToString();
      EXPECT_EQ(gcd.value(), 0u) << "ratio 1.0: nothing qualifies";
      ASSERT_TRUE(ix.CheckInvariants().ok());
    };
    auto gc = [&](auto& ix) {
      const IndexStats before = ix.Stats();
      auto gcd = ix.GarbageCollect();
      ASSERT_TRUE(gcd.ok()) << gcd.status().ToString();
      EXPECT_GT(gcd.value(), 0u);
      const IndexStats after = ix.Stats();
      EXPECT_EQ(Detail(after, "turbo.deleted_slots"), 0);
      EXPECT_EQ(after.size, before.size);
      EXPECT_EQ(Detail(after, "turbo.gc.count"), static_cast<double>(gcd.value()));
      EXPECT_LE(Detail(after, "turbo.gc.probe_after"), Detail(after, "turbo.gc.probe_before"));
      EXPECT_LE(Detail(after, "turbo.probe.neg_mean"), Detail(before, "turbo.probe.neg_mean"));
      EXPECT_EQ(after.buckets, before.buckets) << "GC keeps the shard size";
      ASSERT_TRUE(ix.CheckInvariants().ok());
      for (uint64_t i = 3000; i < 5000; i++) {
        Value v;
        ASSERT_TRUE(ix.Find(SplitMix64(i), &v).ok());
        ASSERT_EQ(v, i);
      }
    };
    if (kv) {
      auto r = TurboKv<pm::Eadr>::Open(o);
      ASSERT_TRUE(r.ok());
      ASSERT_NO_FATAL_FAILURE(run(*r.value()));
      r.value().reset();
      o.turbo.gc_deleted_ratio = 0.01;
      o.mode = OpenMode::kOpenExisting;
      r = TurboKv<pm::Eadr>::Open(o);  // the ratio is not a pool property
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_NO_FATAL_FAILURE(gc(*r.value()));
    } else {
      auto r = Turbo<pm::Eadr>::Open(o);
      ASSERT_TRUE(r.ok());
      ASSERT_NO_FATAL_FAILURE(run(*r.value()));
      r.value().reset();
      o.turbo.gc_deleted_ratio = 0.01;
      o.mode = OpenMode::kOpenExisting;
      r = Turbo<pm::Eadr>::Open(o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_NO_FATAL_FAILURE(gc(*r.value()));
    }
  }
}

TEST(Turbo, AutomaticGcWhenARehashFindsDeletedSlots) {
  ScopedPath p("gc_auto");
  Options o = Small(p.path(), Durability::kDram);
  o.turbo.gc_deleted_ratio = 0;  // any deleted slot makes the next rehash of its shard a GC
  auto r = Turbo<pm::Dram>::Open(o);
  ASSERT_TRUE(r.ok());
  auto& ix = *r.value();
  std::unordered_map<Key, Value> model;
  for (uint64_t i = 0; i < 5000; i++) {
    ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
    model[SplitMix64(i)] = i;
  }
  const IndexStats s0 = ix.Stats();
  for (uint64_t i = 0; i < 5000; i += 10) {
    ASSERT_TRUE(ix.Erase(SplitMix64(i)).ok());
    model.erase(SplitMix64(i));
  }
  for (uint64_t i = 5000; i < 15000; i++) {
    ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
    model[SplitMix64(i)] = i;
  }
  const IndexStats s = ix.Stats();
  EXPECT_GT(Detail(s, "turbo.gc.count"), 0);
  EXPECT_GT(s.doublings, s0.doublings) << "after a GC, a shard still out of room doubles";
  EXPECT_EQ(s.splits, s.doublings + static_cast<uint64_t>(Detail(s, "turbo.gc.count")));
  ASSERT_TRUE(ix.CheckInvariants().ok());
  ASSERT_EQ(ix.Size(), model.size());
  for (const auto& [k, v] : model) {
    Value got;
    ASSERT_TRUE(ix.Find(k, &got).ok());
    ASSERT_EQ(got, v);
  }
}

TEST(Turbo, InvalidParams) {
  ScopedPath p("params");
  for (auto mutate : std::vector<void (*)(TurboParams*)>{
           [](TurboParams* t) { t->shard_bits = 21; },
           [](TurboParams* t) { t->initial_buckets = 3; },
           [](TurboParams* t) { t->initial_buckets = 64, t->max_shard_buckets = 32; },
           [](TurboParams* t) { t->probe_scope = 0; },
           [](TurboParams* t) { t->probe_scope = 5000; },
       }) {
    Options o = Small(p.path(), Durability::kDram);
    mutate(&o.turbo);
    auto r = Turbo<pm::Dram>::Open(o);
    EXPECT_TRUE(!r.ok() && r.status().IsInvalidArgument());
  }
}

// An open-time option (not a pool property) is refused before any file is created.
TEST(Turbo, InvalidOptionCreatesNoFile) {
  ScopedPath p("gc-ratio");
  Options o = Small(p.path(), Durability::kAdr);
  o.turbo.gc_deleted_ratio = -0.5;
  auto r = Turbo<pm::Adr>::Open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  EXPECT_FALSE(FileExists(p.path())) << "the refused open created " << p.path();
}

// ============================================================================================
// Record space (issue 11): records live in the record heap's size-class slabs
// ============================================================================================

// An 8 B key + 8 B value record is 24 B with its header: a 32 B slot of a 4 KiB slab. Done-when
// of issue 11: at most 64 B of record space per key at 2M keys (PMHASH_TEST_SCALE=10 runs 2M).
TEST(TurboKvRecords, FootprintPerKey) {
  ScopedPath p("footprint");
  const uint64_t n = Scaled(200000, 20);
  Options o;
  o.path = p.path();
  o.pool_size = (uint64_t{64} << 20) + n * 256;
  o.durability = Durability::kEadr;
  auto r = TurboKv<pm::Eadr>::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto& ix = *r.value();
  for (uint64_t k = 0; k < n; k++) ASSERT_TRUE(ix.Insert(k, k * 3).ok()) << k;
  IndexStats st = ix.Stats();
  const double per_key = Detail(st, "records.bytes") / static_cast<double>(n);
  std::cout << "turbo-kv record space at " << n << " keys: " << Detail(st, "records.bytes")
            << " B in " << Detail(st, "records.slabs") << " slabs = " << per_key
            << " B per 16 B key+value record; pm_bytes per key "
            << static_cast<double>(st.pm_bytes) / static_cast<double>(n) << "\n";
  EXPECT_LE(per_key, 64.0);
  EXPECT_GE(per_key, 32.0) << "a 24 B record takes a 32 B slot";
  EXPECT_EQ(Detail(st, "records.large_chunks"), 0);
  // Every chunk the allocator holds is a bucket, the directory or a slab (once the retired
  // shards have been reclaimed: CheckInvariants drains the epoch).
  ASSERT_TRUE(ix.CheckInvariants().ok()) << ix.CheckInvariants().ToString();
  st = ix.Stats();
  const uint64_t dir_chunks = (uint64_t{ix.shard_count()} * sizeof(turbo::PmShardDesc) + 255) / 256;
  EXPECT_EQ(ix.pool().allocator().used_chunks(),
            st.buckets + dir_chunks + static_cast<uint64_t>(Detail(st, "records.bytes")) / 256);
  // Erase every other key and insert as many new ones: freed slots are reused, no new slabs.
  for (uint64_t k = 0; k < n; k += 2) ASSERT_TRUE(ix.Erase(k).ok());
  for (uint64_t k = n; k < n + n / 2; k++) ASSERT_TRUE(ix.Insert(k, k).ok());
  ASSERT_TRUE(ix.CheckInvariants().ok()) << ix.CheckInvariants().ToString();
  st = ix.Stats();
  EXPECT_LE(Detail(st, "records.bytes") / static_cast<double>(st.size), 64.0);
  EXPECT_GT(Detail(st, "records.reused_slots"), 0);
  // A reopen rebuilds the same slabs from the reachable records.
  const double bytes = Detail(st, "records.bytes");
  ASSERT_TRUE(ix.Close().ok());
  r.value().reset();
  auto again = TurboKv<pm::Eadr>::Open(o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto& ix2 = *again.value();
  ASSERT_TRUE(ix2.CheckInvariants().ok()) << ix2.CheckInvariants().ToString();
  EXPECT_LE(Detail(ix2.Stats(), "records.bytes"), bytes);
  EXPECT_EQ(ix2.Size(), n);
}

// Records of every size class and large ones, inserted, updated to other sizes and erased: the
// heap's slabs of every class fill, empty and are reused; the index stays equal to a model, and
// survives a reopen (recovery rebuilds every slab from the reachable records).
TEST(TurboKvRecords, EverySizeClassAndReopen) {
  ScopedPath p("classes");
  Options o = Small(p.path(), Durability::kAdr);
  o.turbo.max_record_bytes = 4096;
  std::map<std::string, std::string> model;
  std::mt19937_64 rng(TestSeed(8));
  SCOPED_TRACE(SeedTrace(TestSeed(8)));
  {
    auto r = TurboKv<pm::Adr>::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto& ix = *r.value();
    // Key + value lengths so that 8 + k + v covers every class boundary of 16..224 and beyond.
    for (uint64_t total = 9; total <= 600; total++) {
      const std::string key = "k" + std::to_string(total);
      if (8 + key.size() > total) continue;
      const std::string val(total - 8 - key.size(), static_cast<char>('a' + total % 26));
      ASSERT_TRUE(ix.InsertBytes(key, val).ok());
      model[key] = val;
    }
    for (int round = 0; round < 3; round++) {
      for (auto& [k, v] : model) {
        if (rng() % 3 == 0) continue;
        std::string nv(rng() % 400, static_cast<char>(rng()));
        ASSERT_TRUE(ix.UpdateBytes(k, nv).ok());
        v = nv;
      }
    }
    for (auto it = model.begin(); it != model.end();) {
      if (rng() % 2) {
        ASSERT_TRUE(ix.EraseBytes(it->first).ok());
        it = model.erase(it);
      } else {
        ++it;
      }
    }
    ASSERT_TRUE(ix.CheckInvariants().ok()) << ix.CheckInvariants().ToString();
    const IndexStats st = ix.Stats();
    EXPECT_GT(Detail(st, "records.slabs"), 5);
    EXPECT_GT(Detail(st, "records.large_chunks"), 0);
    EXPECT_GT(Detail(st, "records.reused_slots"), 0);
    // Abandon without Close: the reopen recovers.
  }
  auto r = TurboKv<pm::Adr>::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto& ix = *r.value();
  ASSERT_TRUE(ix.CheckInvariants().ok()) << ix.CheckInvariants().ToString();
  EXPECT_EQ(ix.Size(), model.size());
  for (const auto& [k, v] : model) {
    std::string got;
    ASSERT_TRUE(ix.FindBytes(k, &got).ok()) << k;
    EXPECT_EQ(got, v);
  }
  // And keeps working: new records of every class after recovery.
  for (int i = 0; i < 500; i++) {
    const std::string k = "n" + std::to_string(i);
    ASSERT_TRUE(ix.InsertBytes(k, std::string(i % 300, 'x')).ok());
  }
  ASSERT_TRUE(ix.CheckInvariants().ok()) << ix.CheckInvariants().ToString();
}

// A turbo-kv pool written before the record heap (layout 1: a chunk per record) is refused.
TEST(TurboKvRecords, OldLayoutIsRefused) {
  ScopedPath p("old_layout");
  Options o = Small(p.path(), Durability::kAdr);
  {
    auto r = TurboKv<pm::Adr>::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r.value()->Insert(1, 2).ok());
    ASSERT_TRUE(r.value()->Close().ok());
  }
  // The params image starts with layout_version: make it 1 and fix the header checksum.
  {
    auto bytes = ReadFile(p.path());
    ASSERT_GE(bytes.size(), pm::kHeaderBytes);
    auto* h = reinterpret_cast<pm::PoolHeader*>(bytes.data());
    turbo::PersistentParams pp;
    std::memcpy(&pp, h->params, sizeof(pp));
    EXPECT_EQ(pp.layout_version, turbo::kLayoutRecordHeap);
    pp.layout_version = 1;
    std::memcpy(h->params, &pp, sizeof(pp));
    h->checksum = pm::HeaderChecksum(h);
    const int fd = open(p.path().c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, bytes.data(), pm::kHeaderBytes, 0),
              static_cast<ssize_t>(pm::kHeaderBytes));
    close(fd);
  }
  auto r = TurboKv<pm::Adr>::Open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsNotSupported()) << r.status().ToString();
}

// ============================================================================================
// Lock-free reads against concurrent updates, erases and rehashes (label: concurrent)
// ============================================================================================

// Values carry their key: a reader can tell a torn or misattributed value.
uint64_t Encode(uint64_t key, uint64_t version) {
  return (SplitMix64(key) & ~0xFFFFFULL) | (version & 0xFFFFF);
}
bool Plausible(uint64_t key, uint64_t v) {
  return (v & ~0xFFFFFULL) == (SplitMix64(key) & ~0xFFFFFULL);
}

template <class T>
void HammerReaders(Durability d) {
  ScopedPath p("concurrent");
  Options o = Small(p.path(), d, HashMode::kCollide);
  o.turbo.shard_bits = 1;
  o.turbo.initial_buckets = 1;
  o.turbo.gc_deleted_ratio = 0.05;
  auto r = T::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  T& ix = *r.value();
  // Stable keys: always present, updated over and over. Churn keys: inserted and erased, which
  // drives rehashes (doubling and GC) of the same shards under the readers.
  const uint64_t stable = 200, churn = 4000;
  for (uint64_t k = 0; k < stable; k++) ASSERT_TRUE(ix.Insert(k, Encode(k, 0)).ok());
  const uint64_t rounds = Scaled(6, 3);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> errors{0}, reads{0};
  auto reader = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    while (!stop.load(std::memory_order_relaxed)) {
      const uint64_t k = rng() % stable;
      Value v = 0;
      Status s = ix.Find(k, &v);
      if (!s.ok() || !Plausible(k, v)) errors.fetch_add(1);
      // Churn keys may or may not be there, but if found their value must be theirs.
      const uint64_t c = stable + rng() % churn;
      s = ix.Find(c, &v);
      if (s.ok() && !Plausible(c, v)) errors.fetch_add(1);
      reads.fetch_add(1, std::memory_order_relaxed);
    }
  };
  auto updater = [&] {
    for (uint64_t round = 1; round <= rounds * 20; round++) {
      for (uint64_t k = 0; k < stable; k++) {
        if (!ix.Update(k, Encode(k, round)).ok()) errors.fetch_add(1);
      }
    }
  };
  auto churner = [&] {
    for (uint64_t round = 0; round < rounds; round++) {
      for (uint64_t k = stable; k < stable + churn; k++) {
        if (!ix.Insert(k, Encode(k, round)).ok()) errors.fetch_add(1);
      }
      for (uint64_t k = stable; k < stable + churn; k++) {
        if (!ix.Erase(k).ok()) errors.fetch_add(1);
      }
    }
  };
  std::vector<std::thread> readers;
  for (int i = 0; i < 2; i++) readers.emplace_back(reader, TestSeed(77) + i);
  std::thread u(updater), c(churner);
  u.join();
  c.join();
  stop.store(true);
  for (auto& t : readers) t.join();
  EXPECT_EQ(errors.load(), 0u) << "torn value, missing live key, or failed write";
  EXPECT_GT(reads.load(), 0u);
  const IndexStats s = ix.Stats();
  EXPECT_GT(s.splits, 0u) << "the test must rehash under the readers";
  EXPECT_EQ(s.size, stable);
  ASSERT_TRUE(ix.CheckInvariants().ok());
  for (uint64_t k = 0; k < stable; k++) {
    Value v;
    ASSERT_TRUE(ix.Find(k, &v).ok());
    EXPECT_EQ(v, Encode(k, rounds * 20));
  }
}

// Writers on disjoint keys insert, update (to other sizes) and erase records of every size
// class and large ones, while readers check that every value they find belongs to its key: the
// record heap's slots are never handed to two records at once, and a retired record is not
// reused under a reader.
TEST(TurboConcurrent, MixedSizeRecords) {
  ScopedPath p("concurrent_records");
  Options o = Small(p.path(), Durability::kAdr);
  o.turbo.shard_bits = 1;
  o.turbo.initial_buckets = 1;
  o.reclaim_batch = 1;  // freed slots are reused at once, under the readers
  auto r = TurboKv<pm::Adr>::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto& ix = *r.value();
  const int writers = 3;
  const uint64_t keys = 300, ops = Scaled(20000, 10);
  // A value is its key's first byte repeated, then the version: any mix-up is visible.
  auto value_of = [](const std::string& k, uint64_t len, uint64_t version) {
    std::string v(len, k[1]);
    if (len >= 8) std::memcpy(v.data(), &version, 8);
    return v;
  };
  auto plausible = [](const std::string& k, const std::string& v) {
    for (size_t i = v.size() >= 8 ? 8 : 0; i < v.size(); i++) {
      if (v[i] != k[1]) return false;
    }
    return true;
  };
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> errors{0}, reads{0};
  std::vector<std::map<std::string, std::string>> models(writers);
  auto key_of = [](int t, uint64_t i) {
    return std::string(1, static_cast<char>('A' + t)) + static_cast<char>('a' + i % 26) +
           std::to_string(i);
  };
  auto writer = [&](int t) {
    std::mt19937_64 rng(TestSeed(40) + t);
    auto& model = models[t];
    for (uint64_t i = 0; i < ops; i++) {
      const std::string k = key_of(t, rng() % keys);
      uint64_t len = rng() % 64;
      if (rng() % 8 == 0) len = rng() % 700;
      const bool present = model.count(k) != 0;
      if (present && rng() % 3 == 0) {
        if (!ix.EraseBytes(k).ok()) errors.fetch_add(1);
        model.erase(k);
      } else {
        const std::string v = value_of(k, len, i);
        if (!ix.UpsertBytes(k, v).ok()) errors.fetch_add(1);
        model[k] = v;
      }
    }
  };
  auto reader = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::string v;
    while (!stop.load(std::memory_order_relaxed)) {
      const std::string k = key_of(static_cast<int>(rng() % writers), rng() % keys);
      if (ix.FindBytes(k, &v).ok() && !plausible(k, v)) errors.fetch_add(1);
      reads.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> rs, ws;
  for (int i = 0; i < 2; i++) rs.emplace_back(reader, TestSeed(41) + i);
  for (int t = 0; t < writers; t++) ws.emplace_back(writer, t);
  for (auto& t : ws) t.join();
  stop.store(true);
  for (auto& t : rs) t.join();
  EXPECT_EQ(errors.load(), 0u) << "a failed write, or a value that is not its key's";
  EXPECT_GT(reads.load(), 0u);
  ASSERT_TRUE(ix.CheckInvariants().ok()) << ix.CheckInvariants().ToString();
  uint64_t n = 0;
  for (const auto& m : models) {
    n += m.size();
    for (const auto& [k, v] : m) {
      std::string got;
      ASSERT_TRUE(ix.FindBytes(k, &got).ok()) << k;
      EXPECT_EQ(got, v);
    }
  }
  EXPECT_EQ(ix.Size(), n);
  EXPECT_GT(Detail(ix.Stats(), "records.reused_slots"), 0);
}

TEST(TurboConcurrent, ReadersVsUpdatesErasesRehashesInline) {
  HammerReaders<Turbo<pm::Adr>>(Durability::kAdr);
}
TEST(TurboConcurrent, ReadersVsUpdatesErasesRehashesKv) {
  HammerReaders<TurboKv<pm::Eadr>>(Durability::kEadr);
}

// ============================================================================================
// Crash simulator: TurboHash never relies on whole-line write-back (I2: a slot, or a record, is
// persisted and fenced before the 8-byte meta word makes it live), so every persisted image with
// 8-byte torn lines must recover, for inline items and for records (inserts, updates, erases).
// ============================================================================================

template <class P>
using TurboInline = Turbo<P, false>;

Options CrashSmall() {
  Options o;
  o.pool_size = 1 << 20;
  o.turbo.shard_bits = 1;
  o.turbo.initial_buckets = 1;
  o.turbo.probe_scope = 2;
  o.turbo.max_shard_buckets = 1u << 12;
  return o;
}

TEST(TurboCrash, TornWordsInline) {
  crashtest::Config c;
  c.seed = 21;
  c.ops = 80;
  c.tear_words = true;
  c.random_images = 6;
  const crashtest::Report r =
      crashtest::Harness<TurboInline>(c.WithEnv(), CrashSmall(), "TurboTornInline").Run();
  EXPECT_TRUE(r.failure.empty()) << r.failure;
  EXPECT_GT(r.images_checked, 0u);
}

TEST(TurboCrash, TornWordsRecords) {
  crashtest::Config c;
  c.seed = 22;
  c.ops = 80;
  c.tear_words = true;
  c.random_images = 6;
  const crashtest::Report r =
      crashtest::Harness<TurboKv>(c.WithEnv(), CrashSmall(), "TurboTornRecords").Run();
  EXPECT_TRUE(r.failure.empty()) << r.failure;
  EXPECT_GT(r.images_checked, 0u);
}

}  // namespace
}  // namespace pmhash::testing
