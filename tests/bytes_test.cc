// tests/bytes_test.cc — the variable-size (bytes) API of every kind that offers it (turbo-kv,
// reh-kv, pea-kv: src/index/records.h), typed over src/index/kinds.h so that a new bytes kind is tested
// without editing this file: conformance against a std::unordered_map<std::string, std::string>
// model (strong and colliding hashes, crash + reopen), limits and the uint64 view, the facade
// (capabilities, Close), and records of every size under concurrent readers (*Concurrent*: TSan).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine_types.h"
#include "pmhash/pmhash.h"
#include "test_util.h"

namespace pmhash::testing {
namespace {

// Small geometry for every records kind: splits, rehashes and doublings within the first
// hundreds of keys. (Each kind reads only its own parameters.)
Options Small(const std::string& path, Durability d, HashMode mode = HashMode::kStrong) {
  Options o = PoolOptions(path, d, uint64_t{256} << 20, mode);
  o.turbo.shard_bits = 2;
  o.turbo.initial_buckets = 2;
  o.turbo.probe_scope = 16;
  o.reh.initial_depth = 1;
  o.pea.segment_buckets = 4;
  o.pea.initial_depth = 0;
  o.smartht.head_bits = 2;
  o.elimda.bucket_items = 32;  // log swaps, relocations and splits within a few hundred keys
  o.elimda.dbucket_items = 16;
  o.elimda.segment_buckets = 2;
  o.elimda.logs = 4;
  return o;
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
// Bytes conformance against std::unordered_map<std::string, std::string>
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
      // After Close the engine refuses every bytes write; reads still answer.
      ASSERT_FALSE(model.empty());
      const auto& [k0, v0] = *model.begin();
      EXPECT_TRUE(idx_->InsertBytes("closed", "x").IsInvalidArgument());
      EXPECT_TRUE(idx_->UpdateBytes(k0, "x").IsInvalidArgument());
      EXPECT_TRUE(idx_->UpsertBytes(k0, "x").IsInvalidArgument());
      EXPECT_TRUE(idx_->EraseBytes(k0).IsInvalidArgument());
      std::string got;
      ASSERT_TRUE(idx_->FindBytes(k0, &got).ok());
      EXPECT_EQ(got, v0);
      ASSERT_NO_FATAL_FAILURE(OpenIdx(r));
      EXPECT_FALSE(idx_->Stats().recovered);
      ASSERT_NO_FATAL_FAILURE(ExpectMatches(model));
    }
  }

  std::string path_;
  std::unique_ptr<T> idx_;
};

// Every kind that offers the bytes API (src/index/kinds.h), under each policy.
using KvTypes = GtestTypes<BytesEngines<pm::Dram, pm::Adr, pm::Eadr>>::type;
TYPED_TEST_SUITE(BytesConformance, KvTypes);

TYPED_TEST(BytesConformance, RandomOpsStrong) { this->RandomOps(HashMode::kStrong, TestSeed(61)); }
TYPED_TEST(BytesConformance, RandomOpsCollide) {
  this->RandomOps(HashMode::kCollide, TestSeed(62));
}

TYPED_TEST(BytesConformance, LimitsAndUint64View) {
  Options o = Small(this->path_, TypeParam::Policy::kDurability);
  o.turbo.max_record_bytes = 1024;
  o.reh.max_record_bytes = 1024;
  o.pea.max_record_bytes = 1024;
  o.smartht.max_record_bytes = 1024;
  o.elimda.max_record_bytes = 1024;
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

std::vector<std::string> KindsOfferingBytes() {
  std::vector<std::string> kinds;
  for (const IndexInfo& i : RegisteredIndexes()) {
    if (KindCapabilities(i.name).value().bytes) kinds.emplace_back(i.name);
  }
  return kinds;
}

TEST(BytesFacade, BytesThroughOpenAndAbsentElsewhere) {
  for (const std::string& kind : KindsOfferingBytes()) {
    SCOPED_TRACE(kind);
    ScopedPath p("facade_kv");
    Options o = Small(p.path(), Durability::kAdr);
    auto r = pmhash::Open(kind, o);
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
  // Every other kind: no bytes API (a multimap kind, pea-multi, offers the multi-value API
  // instead: tests/multi_test.cc, MultiFacade).
  for (const IndexInfo& i : RegisteredIndexes()) {
    const std::string kind(i.name);
    if (KindCapabilities(kind).value().bytes) continue;
    ScopedPath q("facade_" + kind);
    Options oq = Small(q.path(), Durability::kDram);
    auto r = pmhash::Open(kind, oq);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Index& ix = *r.value();
    EXPECT_EQ(ix.capabilities(), KindCapabilities(kind).value()) << kind;
    EXPECT_EQ(ix.capabilities(), (Capabilities{.multi = ix.capabilities().multi})) << kind;
    EXPECT_EQ(ix.bytes(), nullptr) << kind;
    EXPECT_EQ(std::as_const(ix).bytes(), nullptr) << kind;
    EXPECT_EQ(ix.multi() != nullptr, ix.capabilities().multi) << kind;
  }
  // The registry answers without a pool of one's own.
  auto caps = KindCapabilities("turbo-kv");
  ASSERT_TRUE(caps.ok()) << caps.status().ToString();
  EXPECT_TRUE(caps.value().bytes);
  EXPECT_FALSE(KindCapabilities("reh").value().bytes);
  EXPECT_TRUE(KindCapabilities("no-such-kind").status().IsInvalidArgument());
  EXPECT_EQ(KindsWith(&Capabilities::bytes), "reh-kv, pea-kv, turbo-kv, smartht-kv, elimda-kv");
  EXPECT_EQ(KindsOfferingBytes().size(), 5u);
  EXPECT_EQ(KindsWith(&Capabilities::multi), "pea-multi");  // no kind offers both
  for (const std::string& kind : KindsOfferingBytes()) {
    EXPECT_FALSE(KindCapabilities(kind).value().multi) << kind;
  }
}

// The uint64 ForEach of a bytes kind visits the 8-byte records and says how many others it
// skipped.
TEST(BytesFacade, Uint64ForEachReportsRecordsItCannotExpress) {
  for (const std::string& kind : KindsOfferingBytes()) {
  SCOPED_TRACE(kind);
  ScopedPath p("foreach_kv");
  auto r = pmhash::Open(kind, Small(p.path(), Durability::kDram));
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
  EXPECT_NE(s.ToString().find(kind + ": 3 records have keys or values that are not 8 bytes"),
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

  }
}

// The engine's own ForEach (HashIndex) reports the same as the facade's.
TYPED_TEST(BytesConformance, EngineUint64ForEachSkipsOtherRecords) {
  ASSERT_NO_FATAL_FAILURE(this->OpenIdx(Small(this->path_, TypeParam::Policy::kDurability)));
  auto& ix = *this->idx_;
  ASSERT_TRUE(ix.Insert(1, 2).ok());
  ASSERT_TRUE(ix.InsertBytes("abc", "x").ok());
  const Status es = ix.ForEach([](Key, Value) {});
  EXPECT_TRUE(es.IsNotSupported()) << es.ToString();
  EXPECT_NE(es.ToString().find(": 1 records"), std::string::npos) << es.ToString();
}

// Writers on disjoint keys insert, update (to other sizes) and erase records of every size
// class and large ones, while readers check that every value they find belongs to its key: the
// record heap's slots are never handed to two records at once, and a retired record is not
// reused under a reader.
template <class T>
class BytesConcurrent : public ::testing::Test {};
using KvAdrTypes = GtestTypes<BytesEngines<pm::Adr>>::type;
TYPED_TEST_SUITE(BytesConcurrent, KvAdrTypes);

TYPED_TEST(BytesConcurrent, MixedSizeRecords) {
  ScopedPath p("concurrent_records");
  Options o = Small(p.path(), Durability::kAdr);
  o.turbo.shard_bits = 1;
  o.turbo.initial_buckets = 1;
  o.reclaim_batch = 1;  // freed slots are reused at once, under the readers
  auto r = TypeParam::Open(o);
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

}  // namespace
}  // namespace pmhash::testing
