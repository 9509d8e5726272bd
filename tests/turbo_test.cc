// tests/turbo_test.cc — TurboHash specifics: the variable-size (bytes) API against a model,
// near-place update / erase persist counts, garbage collection and probe statistics, and the
// lock-free read protocol under concurrent updates, erases and rehashes (*Concurrent*: TSan).
#include "index/turbo/turbo.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
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

TEST(TurboFacade, BytesThroughOpenAndNotSupportedElsewhere) {
  ScopedPath p("facade_kv");
  Options o = Small(p.path(), Durability::kAdr);
  {
    auto r = pmhash::Open("turbo-kv", o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Index& ix = *r.value();
    EXPECT_TRUE(ix.SupportsBytes());
    ASSERT_TRUE(ix.InsertBytes(std::string("\0key", 4), "value").ok());
    std::string v;
    ASSERT_TRUE(ix.FindBytes(std::string("\0key", 4), &v).ok());
    EXPECT_EQ(v, "value");
    ASSERT_TRUE(ix.UpdateBytes(std::string("\0key", 4), "v2").ok());
    int n = 0;
    ix.ForEachBytes([&](std::string_view, std::string_view val) {
      EXPECT_EQ(val, "v2");
      n++;
    });
    EXPECT_EQ(n, 1);
    ASSERT_TRUE(ix.EraseBytes(std::string("\0key", 4)).ok());
    EXPECT_TRUE(ix.FindBytes(std::string("\0key", 4), &v).IsNotFound());
    ASSERT_TRUE(ix.Close().ok());
  }
  for (const char* kind : {"turbo", "reh"}) {
    ScopedPath q(std::string("facade_") + kind);
    Options oq = Small(q.path(), Durability::kDram);
    auto r = pmhash::Open(kind, oq);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Index& ix = *r.value();
    EXPECT_FALSE(ix.SupportsBytes()) << kind;
    std::string v;
    EXPECT_TRUE(ix.InsertBytes("a", "b").IsNotSupported()) << kind;
    EXPECT_TRUE(ix.UpsertBytes("a", "b").IsNotSupported()) << kind;
    EXPECT_TRUE(ix.UpdateBytes("a", "b").IsNotSupported()) << kind;
    EXPECT_TRUE(ix.FindBytes("a", &v).IsNotSupported()) << kind;
    EXPECT_TRUE(ix.EraseBytes("a").IsNotSupported()) << kind;
  }
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
