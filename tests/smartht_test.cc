// tests/smartht_test.cc — SmartHT specifics (src/index/smartht/smartht.h): the Bloom filter never
// gives a false negative (after erase + reinsert, after a crash before the filter is rebuilt,
// during a rebuild), its false-positive rate, the filter saved at Close (reopen, corrupt copy),
// hostile pools (chain cycles), head-array growth. The typed conformance, stress and crash
// suites cover the rest.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "index/smartht/smartht.h"
#include "pm/pool_format.h"
#include "test_util.h"

namespace pmhash::smartht {
namespace {

using testing::Detail;
using testing::Scaled;
using testing::TempPoolPath;

class SmartHtTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = TempPoolPath(std::string("smartht_") + info->name());
  }
  void TearDown() override { unlink(path_.c_str()); }

  Options MakeOptions(uint32_t background_threads = 0) const {
    Options o;
    o.path = path_;
    o.pool_size = uint64_t{64} << 20;
    o.hash_seed = 0x5eed;
    o.smartht.head_bits = 4;
    o.smartht.save_filter_min_keys = 0;
    o.background_threads = background_threads;
    return o;
  }
  template <class P = pm::Adr>
  std::unique_ptr<SmartHt<P>> OpenOk(const Options& o) {
    auto r = SmartHt<P>::Open(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  // Every key of `model` is found with its value and is in the filter; `absent` keys are not.
  template <class T>
  void ExpectContents(T& ix, const std::unordered_map<Key, Value>& model,
                      const std::vector<Key>& absent) {
    for (const auto& [k, v] : model) {
      Value got = 0;
      ASSERT_TRUE(ix.Find(k, &got).ok()) << k;
      ASSERT_EQ(got, v) << k;
      if (ix.filter_complete()) {
        ASSERT_TRUE(ix.FilterMayContain(k)) << "false negative " << k;
      }
    }
    for (const Key k : absent) {
      Value got;
      ASSERT_TRUE(ix.Find(k, &got).IsNotFound()) << k;
    }
    ASSERT_EQ(ix.Size(), model.size());
    Status s = ix.CheckInvariants();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // Offset of root i in the pool file.
  static uint64_t RootAt(int i) { return offsetof(pm::PoolHeader, roots) + 8 * i; }
  uint64_t ReadWord(uint64_t off) const {
    uint64_t w = 0;
    const int fd = ::open(path_.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(pread(fd, &w, 8, static_cast<off_t>(off)), 8);
    close(fd);
    return w;
  }
  void WriteWord(uint64_t off, uint64_t w) const {
    const int fd = ::open(path_.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, &w, 8, static_cast<off_t>(off)), 8);
    close(fd);
  }

  std::string path_;
};

TEST_F(SmartHtTest, LayoutIsPinned) {
  EXPECT_EQ(sizeof(PmBucket), 64u);
  EXPECT_EQ(offsetof(PmBucket, slots), 8u);
  EXPECT_EQ(offsetof(PmBucket, next), 56u);
}

// Erase leaves stale bits, reinsert sets them again: no false negative at any point, and a
// rebuild (scheduled by the erases, run here by hand) drops the erased keys.
TEST_F(SmartHtTest, NoFalseNegativeAfterEraseAndReinsert) {
  auto ix = OpenOk<pm::Dram>([&] {
    Options o = MakeOptions();
    o.path.clear();
    return o;
  }());
  ASSERT_TRUE(ix);
  const uint64_t n = Scaled(20000, 4);
  std::unordered_map<Key, Value> model;
  std::mt19937_64 rng(1);
  for (uint64_t i = 0; i < n; i++) {
    const Key k = rng();
    ASSERT_TRUE(ix->Insert(k, i).ok());
    model[k] = i;
  }
  std::vector<Key> erased;
  for (auto it = model.begin(); it != model.end();) {
    if (rng() % 2) {
      ASSERT_TRUE(ix->Erase(it->first).ok());
      erased.push_back(it->first);
      it = model.erase(it);
    } else {
      ++it;
    }
  }
  ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, erased));
  EXPECT_GT(ix->background().pending(), 0u) << "half the keys erased: a rebuild is due";
  // Reinsert a third of the erased keys before the rebuild runs.
  std::vector<Key> still_absent;
  for (size_t i = 0; i < erased.size(); i++) {
    if (i % 3 == 0) {
      ASSERT_TRUE(ix->Insert(erased[i], i).ok());
      model[erased[i]] = i;
    } else {
      still_absent.push_back(erased[i]);
    }
  }
  ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, still_absent));
  ix->background().RunPending();
  ASSERT_TRUE(ix->background().status().ok());
  EXPECT_GE(Detail(ix->Stats(), "smartht.filter.rebuilds"), 1);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, still_absent));
  uint64_t stale_hits = 0;
  for (const Key k : still_absent) stale_hits += ix->FilterMayContain(k);
  EXPECT_LT(stale_hits, still_absent.size() / 100 + 5) << "the rebuilt filter dropped erased keys";
}

// The paper's sizing: about 1e-4 false positives at 24 bits per key.
TEST_F(SmartHtTest, FalsePositiveRate) {
  Options o = MakeOptions();
  o.path.clear();
  o.smartht.head_bits = 12;
  auto ix = OpenOk<pm::Dram>(o);
  ASSERT_TRUE(ix);
  const uint64_t n = Scaled(100000, 10);
  std::mt19937_64 rng(2);
  std::unordered_map<Key, Value> model;
  for (uint64_t i = 0; i < n; i++) {
    const Key k = rng() | 1;  // odd keys present, even keys absent
    if (ix->Insert(k, i).ok()) model[k] = i;
  }
  // The filter grows by background rebuilds (manual mode here): before them it is overfull.
  EXPECT_GE(ix->background().RunPending(), 1u);
  const uint64_t probes = Scaled(1000000, 20);
  uint64_t fp = 0;
  for (uint64_t i = 0; i < probes; i++) fp += ix->FilterMayContain(rng() & ~Key{1});
  const double rate = static_cast<double>(fp) / static_cast<double>(probes);
  const IndexStats s = ix->Stats();
  std::printf("keys %zu, filter bits/key %.1f, false-positive rate %.2e (%lu of %lu)\n",
              model.size(), Detail(s, "smartht.filter.bits_per_key"), rate,
              static_cast<unsigned long>(fp), static_cast<unsigned long>(probes));
  EXPECT_LT(rate, 1e-3);
  for (const auto& [k, v] : model) ASSERT_TRUE(ix->FilterMayContain(k));
}

// The filter alone at the paper's sizing: 24 bits per key, about 1e-4 false positives.
TEST_F(SmartHtTest, BloomFilterAt24BitsPerKey) {
  const uint64_t n = Scaled(200000, 10);
  BloomFilter f(BloomFilter::BlocksFor(n, 24));
  ASSERT_TRUE(f);
  std::mt19937_64 rng(4);
  std::vector<uint64_t> in(n);
  for (auto& h : in) f.Add(h = rng());
  for (const uint64_t h : in) ASSERT_TRUE(f.MayContain(h));
  const uint64_t probes = Scaled(2000000, 20);
  uint64_t fp = 0;
  for (uint64_t i = 0; i < probes; i++) fp += f.MayContain(rng());
  const double rate = static_cast<double>(fp) / static_cast<double>(probes);
  std::printf("24 bits/key: false-positive rate %.2e (%lu of %lu)\n", rate,
              static_cast<unsigned long>(fp), static_cast<unsigned long>(probes));
  EXPECT_LT(rate, 3e-4);
}

// A table that cannot grow (growth off) rebuilds its filter larger as keys arrive, so the
// false-positive rate stays low.
TEST_F(SmartHtTest, FilterGrowsWithoutTableGrowth) {
  Options o = MakeOptions();
  o.path.clear();
  o.smartht.head_bits = 8;
  o.smartht.grow_keys_per_head = 0;
  auto ix = OpenOk<pm::Dram>(o);
  ASSERT_TRUE(ix);
  const uint64_t n = Scaled(30000, 4);
  for (uint64_t i = 0; i < n; i++) {
    ASSERT_TRUE(ix->Insert(i * 0x9E3779B97F4A7C15ULL + 1, i).ok());
    ix->background().RunPending();
  }
  const IndexStats s = ix->Stats();
  EXPECT_EQ(s.doublings, 0u);
  EXPECT_GE(Detail(s, "smartht.filter.rebuilds"), 2);
  EXPECT_GE(Detail(s, "smartht.filter.bits_per_key"), 10);
  uint64_t fp = 0;
  for (uint64_t i = 0; i < 100000; i++) fp += ix->FilterMayContain(i * 0x9E3779B97F4A7C15ULL + 2);
  EXPECT_LT(fp, 300u) << "false positives of 100000";
  Status st = ix->CheckInvariants();
  ASSERT_TRUE(st.ok()) << st.ToString();
}

// Every key of `model` is found with its value, `absent` keys are not (Find only: Size() would
// end a lazy recovery).
template <class T>
void ExpectFinds(T& ix, const std::unordered_map<Key, Value>& model,
                 const std::vector<Key>& absent) {
  for (const auto& [k, v] : model) {
    Value got = 0;
    ASSERT_TRUE(ix.Find(k, &got).ok()) << k;
    ASSERT_EQ(got, v) << k;
  }
  for (const Key k : absent) {
    Value got;
    ASSERT_TRUE(ix.Find(k, &got).IsNotFound()) << k;
  }
}

// A crash, then an open in manual mode: the filter is empty and incomplete until the recovery
// walk (I10; the rebuild task with lazy_recovery off) runs, and meanwhile every read, insert,
// erase and reinsert still answers exactly; after it, Size() and the invariants hold.
TEST_F(SmartHtTest, CrashBeforeFilterRebuildHasNoFalseNegative) {
  for (const bool lazy : {true, false}) {
    SCOPED_TRACE(lazy ? "lazy recovery" : "eager recovery");
    Options o = MakeOptions();
    o.smartht.lazy_recovery = lazy;
    std::unordered_map<Key, Value> model;
    std::vector<Key> absent;
    std::mt19937_64 rng(3);
    const uint64_t n = Scaled(5000, 4);
    {
      auto ix = OpenOk(MakeOptions());
      ASSERT_TRUE(ix);
      for (uint64_t i = 0; i < n; i++) {
        const Key k = rng();
        ASSERT_TRUE(ix->Insert(k, i).ok());
        model[k] = i;
      }
      ix->Abandon();  // crash
    }
    for (int i = 0; i < 1000; i++) absent.push_back(rng());
    auto ix = OpenOk(o);
    ASSERT_TRUE(ix);
    EXPECT_FALSE(ix->filter_complete());
    EXPECT_FALSE(ix->filter_loaded());
    EXPECT_EQ(ix->recovering(), lazy);
    ASSERT_NO_FATAL_FAILURE(ExpectFinds(*ix, model, absent));
    // Writes before the rebuild: erase some, reinsert some, insert new ones.
    int j = 0;
    for (auto it = model.begin(); it != model.end() && j < 500; j++) {
      ASSERT_TRUE(ix->Erase(it->first).ok());
      if (j % 2) {
        ASSERT_TRUE(ix->Insert(it->first, 7).ok());
        it->second = 7;
        ++it;
      } else {
        absent.push_back(it->first);
        it = model.erase(it);
      }
    }
    for (int i = 0; i < 500; i++) {
      const Key k = rng();
      ASSERT_TRUE(ix->Insert(k, 9).ok());
      model[k] = 9;
    }
    ASSERT_NO_FATAL_FAILURE(ExpectFinds(*ix, model, absent));
    EXPECT_FALSE(ix->filter_complete());
    EXPECT_EQ(ix->recovering(), lazy);
    if (!lazy) {
      ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, absent));
    }
    ix->background().RunPending();
    ASSERT_TRUE(ix->background().status().ok());
    EXPECT_TRUE(ix->filter_complete());
    EXPECT_FALSE(ix->recovering());
    ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, absent));
    const IndexStats st = ix->Stats();
    EXPECT_TRUE(st.recovered);
    EXPECT_EQ(Detail(st, "smartht.recovery.lazy"), lazy ? 1 : 0);
    ix.reset();
    unlink(path_.c_str());
    model.clear();
    absent.clear();
  }
}

// I10, smartht-kv: after a crash the open serves reads and writes at once. Before the walk
// (manual mode: nothing runs it) every read answers exactly, byte keys of many lengths (slab
// records and large ones), present and absent, and inserts, updates and erases land without
// it: their records come from above root 3, and the records they replace stay allocated. Then
// either the walk runs (the pool checks out: nothing leaked, the replaced records freed), or
// the process crashes again before it: root 3 must cover the records written since the first
// open (a second lazy open claims only what root 3 covers, and its walk refuses a record past
// it that no write made), checked once with slab records only and once with large records only
// (the heap's two ways of taking chunks). Either way a clean reopen holds the same pairs.
TEST_F(SmartHtTest, KvCrashOpenServesWritesBeforeTheWalk) {
  using Kv = SmartHt<pm::Adr, true>;
  const uint64_t n = Scaled(3000, 4);
  auto key = [](uint64_t i) { return "key-" + std::to_string(i) + std::string(i % 40, 'k'); };
  // The record of key(i) with value v: header, key and value (a slab slot up to 48 B here).
  enum Pass { kWalk, kCrashSlabRecords, kCrashLargeRecords };
  for (const Pass pass : {kWalk, kCrashSlabRecords, kCrashLargeRecords}) {
    const bool crash_again = pass != kWalk;
    SCOPED_TRACE(pass == kWalk ? "walk" : pass == kCrashSlabRecords ? "crash, slab records"
                                                                    : "crash, large records");
    unlink(path_.c_str());
    std::map<std::string, std::string> model;
    {
      auto r = Kv::Open(MakeOptions());
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      for (uint64_t i = 0; i < n; i++) {
        const std::string v = std::string(i % 100, 'v') + std::to_string(i);
        ASSERT_TRUE((*r)->InsertBytes(key(i), v).ok());
        model[key(i)] = v;
      }
      (*r)->Abandon();  // crash
    }
    auto expect_model = [&](Kv& ix) {
      std::string got;
      for (const auto& [k, v] : model) {
        ASSERT_TRUE(ix.FindBytes(k, &got).ok()) << k;
        ASSERT_EQ(got, v) << k;
      }
      for (uint64_t i = 0; i < 200; i++) {
        ASSERT_TRUE(ix.FindBytes("absent-" + std::to_string(i), &got).IsNotFound());
      }
    };
    {
      auto r = Kv::Open(MakeOptions());
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      Kv& ix = **r;
      EXPECT_TRUE(ix.recovering());
      ASSERT_NO_FATAL_FAILURE(expect_model(ix));
      // Writes before the walk: updates (short and long values: slab records, large records;
      // before a second crash only one kind, and no new key, whose bucket would raise root 3
      // too), erases, and new keys, some updated again.
      for (uint64_t i = 0; i < n; i += 3) {
        if (pass == kCrashSlabRecords && key(i).size() > 12) continue;  // (a 32 or 48 B slot)
        const std::string v = pass == kCrashSlabRecords    ? std::string("u")
                              : pass == kCrashLargeRecords ? std::string(100, 'u')
                                                           : std::string((i * 7) % 150, 'u');
        ASSERT_TRUE(ix.UpdateBytes(key(i), v).ok()) << i;
        model[key(i)] = v;
      }
      for (uint64_t i = 1; i < n; i += 5) {
        ASSERT_TRUE(ix.EraseBytes(key(i)).ok()) << i;
        model.erase(key(i));
      }
      if (!crash_again) {
        for (uint64_t i = 0; i < 300; i++) {
          const std::string k = "new-" + std::to_string(i);
          ASSERT_TRUE(ix.InsertBytes(k, std::string(i % 90, 'n')).ok());
          if (i % 2) {
            ASSERT_TRUE(ix.UpdateBytes(k, "again").ok());
          }
          model[k] = i % 2 ? "again" : std::string(i % 90, 'n');
        }
      }
      EXPECT_TRUE(ix.recovering()) << "a write waited for the walk";
      ASSERT_NO_FATAL_FAILURE(expect_model(ix));
      if (crash_again) {
        ix.Abandon();
      } else {
        ix.background().RunPending();  // the walk
        ASSERT_TRUE(ix.background().status().ok()) << ix.background().status().ToString();
        EXPECT_FALSE(ix.recovering());
        ASSERT_NO_FATAL_FAILURE(expect_model(ix));
        EXPECT_EQ(ix.Size(), model.size());
        const Status s = ix.CheckInvariants();
        ASSERT_TRUE(s.ok()) << s.ToString();
        const IndexStats st = ix.Stats();
        EXPECT_EQ(Detail(st, "smartht.recovery.lazy"), 1);
        // Every write above went to a head the walk had not passed: no record was marked, so
        // none was deferred, each was dropped (its slot free after the walk).
        EXPECT_EQ(Detail(st, "smartht.recovery.deferred_frees"), 0);
        EXPECT_GT(Detail(st, "smartht.recovery.dropped_frees"), 0);
        ASSERT_TRUE(ix.Close().ok());
      }
    }
    if (crash_again) {
      auto r = Kv::Open(MakeOptions());
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      Kv& ix = **r;
      EXPECT_TRUE(ix.recovering());
      ASSERT_NO_FATAL_FAILURE(expect_model(ix));
      ix.background().RunPending();
      ASSERT_TRUE(ix.background().status().ok()) << ix.background().status().ToString();
      EXPECT_EQ(ix.Size(), model.size());
      const Status s = ix.CheckInvariants();
      ASSERT_TRUE(s.ok()) << s.ToString();
      ASSERT_TRUE(ix.Close().ok());
    }
    auto r = Kv::Open(MakeOptions());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE((*r)->recovering());
    ASSERT_NO_FATAL_FAILURE(expect_model(**r));
    EXPECT_EQ((*r)->Size(), model.size());
    const Status s = (*r)->CheckInvariants();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

// I10, smartht-kv: readers, updaters, erasers and inserters run before and while the recovery
// walk (on this thread, once they have made a tenth of their writes) rebuilds the record heap,
// on heads it has passed (the replaced records are freed after its end) and heads it has not
// (dropped); every answer is exact, Size() counts each write once, and the pool checks out
// after the walk: no record leaked or freed twice (TSan: the writers touch no heap state the
// walk builds).
TEST_F(SmartHtTest, KvConcurrentWritesDuringTheRecoveryWalk) {
  using Kv = SmartHt<pm::Adr, true>;
  const uint64_t n = Scaled(20000, 10);
  auto key = [](uint64_t i) { return "k" + std::to_string(i * 7919); };
  auto value = [](uint64_t i) { return std::string(i % 70, 'v') + std::to_string(i); };
  {
    auto r = Kv::Open(MakeOptions());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (uint64_t i = 0; i < n; i++) ASSERT_TRUE((*r)->InsertBytes(key(i), value(i)).ok());
    (*r)->Abandon();  // crash
  }
  auto r = Kv::Open(MakeOptions());  // (manual mode: the walk runs below)
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Kv& ix = **r;
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> writes{0};
  std::vector<std::thread> ts;
  // Keys i % 4 == 0 are read (never written), 1 updated, 2 erased.
  ts.emplace_back([&] {
    std::string got;
    for (uint64_t i = 0; i < n; i += 4) {
      if (!ix.FindBytes(key(i), &got).ok() || got != value(i)) failed = true;
      if (!ix.FindBytes("absent" + std::to_string(i), &got).IsNotFound()) failed = true;
    }
  });
  for (uint64_t t = 1; t <= 2; t++) {
    ts.emplace_back([&, t] {
      // From both ends of the key range, so that writes meet heads on both sides of the walk.
      for (uint64_t m = 0; m < n / 4; m++) {
        const uint64_t i = 4 * (m % 2 ? m / 2 : n / 4 - 1 - m / 2) + t;
        const Status st = t == 1 ? ix.UpdateBytes(key(i), value(i + 1)) : ix.EraseBytes(key(i));
        if (!st.ok()) failed = true;
        writes.fetch_add(1, std::memory_order_relaxed);
        if (m % 8 == 0 && !ix.InsertBytes("new" + std::to_string(i), value(i)).ok()) {
          failed = true;
        }
      }
    });
  }
  while (writes.load(std::memory_order_relaxed) < n / 20) std::this_thread::yield();
  EXPECT_TRUE(ix.recovering());
  ix.background().RunPending();  // the walk, beside the writers
  for (auto& th : ts) th.join();
  EXPECT_FALSE(failed.load());
  ASSERT_TRUE(ix.background().status().ok()) << ix.background().status().ToString();
  EXPECT_FALSE(ix.recovering());
  std::string got;
  uint64_t expect = 0;
  for (uint64_t i = 0; i < n; i++) {
    const Status st = ix.FindBytes(key(i), &got);
    if (i % 4 == 2) {
      EXPECT_TRUE(st.IsNotFound()) << i;
      continue;
    }
    expect++;
    ASSERT_TRUE(st.ok()) << i;
    EXPECT_EQ(got, value(i % 4 == 1 ? i + 1 : i)) << i;
  }
  uint64_t inserted = 0;
  for (uint64_t i = 0; i < n; i++) {
    if (ix.FindBytes("new" + std::to_string(i), &got).ok()) inserted++;
  }
  EXPECT_EQ(ix.Size(), expect + inserted);
  const IndexStats st = ix.Stats();
  EXPECT_EQ(Detail(st, "smartht.recovery.lazy"), 1);
  std::printf("deferred frees %.0f, dropped %.0f of %" PRIu64 " replaced or erased\n",
              Detail(st, "smartht.recovery.deferred_frees"),
              Detail(st, "smartht.recovery.dropped_frees"), n / 2);
  const Status s = ix.CheckInvariants();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// I10, deterministic: writes made on the walk's own thread once it has passed half the heads
// (SetWalkHookForTest), to heads on both sides of it. Updates and erases of the crash's records:
// those behind the walk deferred and freed at its end, those ahead dropped (never marked);
// inserts: those behind the walk kept aside in their stripe's late list and added to the filter
// at its end. Afterwards every key is found through the complete filter, Size() is exact and the
// pool checks out (no record leaked or freed twice, no filter false negative). A reader inside
// the records' epoch from before the writes (as one copying a record it found) holds the walk's
// end: the slots of the dropped records are not free before it has left.
TEST_F(SmartHtTest, KvWritesOnBothSidesOfTheRecoveryWalk) {
  using Kv = SmartHt<pm::Adr, true>;
  const uint64_t n = Scaled(4000, 4);
  auto key = [](uint64_t i) { return "key-" + std::to_string(i); };
  std::map<std::string, std::string> model;
  {
    auto r = Kv::Open(MakeOptions());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (uint64_t i = 0; i < n; i++) {
      ASSERT_TRUE((*r)->InsertBytes(key(i), "v" + std::to_string(i)).ok());
      model[key(i)] = "v" + std::to_string(i);
    }
    (*r)->Abandon();  // crash
  }
  const uint64_t heads = HeadsInUse(ReadWord(RootAt(0)));
  auto r = Kv::Open(MakeOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Kv& ix = **r;
  bool wrote = false;
  ix.SetWalkHookForTest([&](uint64_t i) {
    if (wrote || i + 1 < heads / 2) return;
    wrote = true;
    for (uint64_t j = 0; j < n; j += 2) {
      if (j % 4 == 0) {
        ASSERT_TRUE(ix.EraseBytes(key(j)).ok()) << j;
        model.erase(key(j));
      } else {
        const std::string v = std::string(j % 60, 'w');  // slab and large records
        ASSERT_TRUE(ix.UpdateBytes(key(j), v).ok()) << j;
        model[key(j)] = v;
      }
    }
    for (uint64_t j = 0; j < n / 2; j++) {
      ASSERT_TRUE(ix.InsertBytes("new-" + std::to_string(j), "n").ok()) << j;
      model["new-" + std::to_string(j)] = "n";
    }
  });
  std::atomic<int> reader{0};  // 1: inside the epoch; 2: left it
  std::thread slow([&] {
    {
      EpochManager::Guard g(ix.RecordEpochForTest());
      reader.store(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    reader.store(2);
  });
  while (reader.load() == 0) std::this_thread::yield();
  ix.background().RunPending();  // the walk, and the writes from its hook
  EXPECT_EQ(reader.load(), 2) << "the walk ended while a reader that may copy a dropped record "
                                 "was inside the epoch";
  slow.join();
  ASSERT_TRUE(ix.background().status().ok()) << ix.background().status().ToString();
  EXPECT_TRUE(wrote);
  EXPECT_FALSE(ix.recovering());
  EXPECT_TRUE(ix.filter_complete());
  const IndexStats st = ix.Stats();
  EXPECT_GT(Detail(st, "smartht.recovery.deferred_frees"), 0);
  EXPECT_GT(Detail(st, "smartht.recovery.dropped_frees"), 0);
  EXPECT_GT(Detail(st, "smartht.recovery.late_keys"), 0);
  std::string got;
  for (const auto& [k, v] : model) {
    ASSERT_TRUE(ix.FindBytes(k, &got).ok()) << k;
    ASSERT_EQ(got, v) << k;
  }
  for (uint64_t j = 0; j < n; j += 4) EXPECT_TRUE(ix.FindBytes(key(j), &got).IsNotFound()) << j;
  EXPECT_EQ(ix.Size(), model.size());
  const Status s = ix.CheckInvariants();
  ASSERT_TRUE(s.ok()) << s.ToString();
}

// I10, smartht-kv, a hostile pool: a crash cannot leave a slot naming a record past root 3
// (root 3 covers every slab and large record before a record in it is published), so the lazy
// walk, which takes such a record for a write's since the open, checks that one is (in use,
// its key of the slot's hash): a forged one is kCorruption, after which writes fail too.
TEST_F(SmartHtTest, KvRecordPastRootThreeIsCorruption) {
  using Kv = SmartHt<pm::Adr, true>;
  {
    auto r = Kv::Open(MakeOptions());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (int i = 0; i < 200; i++) {
      ASSERT_TRUE((*r)->InsertBytes("key" + std::to_string(i), "value").ok());
    }
    (*r)->Abandon();  // crash
  }
  const uint64_t heads = ReadWord(ReadWord(RootAt(2)) + 8);  // segment 0
  uint64_t head = heads;
  while ((ReadWord(head) & 0xff) == 0) head += 64;  // a head whose slot 0 is live
  const uint64_t bound = ReadWord(RootAt(3));
  ASSERT_NE(bound, 0u) << "root 3 covers the records";
  WriteWord(head + 8 + 8, bound + 4096);  // slot 0's record, past root 3
  auto r = Kv::Open(MakeOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Kv& ix = **r;
  EXPECT_TRUE(ix.recovering());
  ASSERT_TRUE(ix.InsertBytes("before the walk", "v").ok());
  (void)ix.Size();  // runs the walk
  EXPECT_TRUE(ix.background().status().IsCorruption()) << ix.background().status().ToString();
  EXPECT_TRUE(ix.InsertBytes("after the walk", "v").IsCorruption());
  EXPECT_TRUE(ix.CheckInvariants().IsCorruption());
  EXPECT_TRUE(ix.Close().IsCorruption());
}

// I10: writers and erasers run while the recovery walk does (one worker thread), on heads it
// has passed and heads it has not: Size() counts each write once, the chunks they take come
// from above root 3, and the pool checks out after the walk.
TEST_F(SmartHtTest, ConcurrentWritesDuringTheRecoveryWalkAreCountedOnce) {
  std::unordered_map<Key, Value> model;
  const uint64_t n = Scaled(60000, 10);
  Options o = MakeOptions();
  o.smartht.grow_keys_per_head = 6;  // (longer chains: writers link new buckets)
  {
    auto ix = OpenOk(o);
    ASSERT_TRUE(ix);
    for (uint64_t k = 1; k <= n; k++) {
      ASSERT_TRUE(ix->Insert(k * 7919, k).ok());
      model[k * 7919] = k;
    }
    ix->Abandon();
  }
  auto ix = OpenOk(MakeOptions(/*background_threads=*/1));
  ASSERT_TRUE(ix);
  std::vector<std::thread> ts;
  std::atomic<bool> failed{false};
  for (int t = 0; t < 2; t++) {
    ts.emplace_back([&, t] {
      for (uint64_t k = 1 + t; k <= n; k += 2) {
        if (k % 3 == 0 && !ix->Erase(k * 7919).ok()) failed = true;           // old keys
        if (k % 5 == 0 && !ix->Insert(k * 7919 + 1, k).ok()) failed = true;  // new keys
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_FALSE(failed.load());
  for (uint64_t k = 1; k <= n; k++) {
    if (k % 3 == 0) model.erase(k * 7919);
    if (k % 5 == 0) model[k * 7919 + 1] = k;
  }
  ASSERT_TRUE(ix->background().Drain().ok());
  EXPECT_FALSE(ix->recovering());
  EXPECT_TRUE(ix->filter_complete());
  EXPECT_EQ(Detail(ix->Stats(), "smartht.recovery.lazy"), 1);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, {7919 * 3, 1}));
}

// A clean open with a worker thread: writers insert while the saved filter is loaded (before
// and after the copy is published); none of their keys is missing from the loaded filter.
TEST_F(SmartHtTest, ConcurrentWritesDuringTheSavedFilterLoad) {
  std::unordered_map<Key, Value> model;
  const uint64_t n = Scaled(60000, 10);
  {
    auto ix = OpenOk(MakeOptions());
    ASSERT_TRUE(ix);
    for (uint64_t k = 1; k <= n; k++) {
      ASSERT_TRUE(ix->Insert(k * 7919, k).ok());
      model[k * 7919] = k;
    }
    ASSERT_TRUE(ix->Close().ok());
  }
  auto ix = OpenOk(MakeOptions(/*background_threads=*/1));
  ASSERT_TRUE(ix);
  EXPECT_TRUE(ix->filter_loaded());
  std::vector<std::thread> ts;
  std::atomic<bool> failed{false};
  for (int t = 0; t < 2; t++) {
    ts.emplace_back([&, t] {
      for (uint64_t k = 1 + t; k <= n / 4; k += 2) {
        if (!ix->Insert(k * 7919 + 1, k).ok()) failed = true;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_FALSE(failed.load());
  for (uint64_t k = 1; k <= n / 4; k++) model[k * 7919 + 1] = k;
  ASSERT_TRUE(ix->background().Drain().ok());
  EXPECT_TRUE(ix->filter_loaded());
  EXPECT_TRUE(ix->filter_complete());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, {1, 2}));
}

// A crash, then an open with a worker thread: readers running while the background task fills
// the filter find every key.
TEST_F(SmartHtTest, ConcurrentReadsDuringRebuild) {
  std::unordered_map<Key, Value> model;
  const uint64_t n = Scaled(50000, 10);
  {
    auto ix = OpenOk(MakeOptions());
    ASSERT_TRUE(ix);
    for (uint64_t k = 1; k <= n; k++) {
      ASSERT_TRUE(ix->Insert(k * 7919, k).ok());
      model[k * 7919] = k;
    }
    ix->Abandon();
  }
  auto ix = OpenOk(MakeOptions(/*background_threads=*/1));
  ASSERT_TRUE(ix);
  std::atomic<uint64_t> misses{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 2; t++) {
    ts.emplace_back([&, t] {
      for (int round = 0; round < 2; round++) {
        for (uint64_t k = 1 + t; k <= n; k += 2) {
          Value v;
          if (!ix->Find(k * 7919, &v).ok() || v != k) misses++;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(misses.load(), 0u);
  ASSERT_TRUE(ix->background().Drain().ok());
  EXPECT_TRUE(ix->filter_complete());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, {}));
}

// A search's filter check takes no lock (FilterRulesOut): it reads the live filter's block and
// trusts a "no" only if no filter swap came between its load of the filter and that read. Here
// the swap comes exactly there (the test hook runs a rebuild on the reader's own thread): the
// reader reads the swapped-out filter, zeroed by then, and must fall back to the stripe's lock
// and find the key (Find, FindBatch) or erase it. Swapped-out filters stay mapped and are reused:
// repeated rebuilds of one size keep at most two spares.
TEST_F(SmartHtTest, LockFreeFilterCheckRetriesAcrossASwap) {
  auto ix = OpenOk(MakeOptions());
  ASSERT_TRUE(ix);
  const uint64_t n = 3000;
  for (uint64_t k = 1; k <= n; k++) ASSERT_TRUE(ix->Insert(k * 7919, k).ok());
  ix->background().RunPending();
  ASSERT_TRUE(ix->background().status().ok());
  ASSERT_TRUE(ix->filter_complete());
  struct Ctx {
    SmartHt<pm::Adr>* ix;
    int armed = 0;  // rebuilds still to run from inside a search
    int ran = 0;
  } ctx{ix.get()};
  ix->SetFilterReadHookForTest(
      [](void* c) {
        auto* x = static_cast<Ctx*>(c);
        if (x->armed == 0) return;
        x->armed--;
        ASSERT_TRUE(x->ix->RebuildFilter().ok());
        x->ran++;
      },
      &ctx);
  const double swaps = Detail(ix->Stats(), "smartht.filter.swaps");
  for (uint64_t k = 1; k <= 50; k++) {
    ctx.armed = 1;
    Value v = 0;
    ASSERT_TRUE(ix->Find(k * 7919, &v).ok()) << "key " << k << ": a swapped-out filter's no";
    EXPECT_EQ(v, k);
  }
  EXPECT_EQ(ctx.ran, 50);
  ctx.armed = 1;
  std::vector<Key> keys = {51 * 7919, 52 * 7919, 3, 5};  // two present, two absent
  std::vector<Value> vals(keys.size());
  std::vector<Status> sts(keys.size());
  ASSERT_TRUE(ix->FindBatch(keys, vals, sts).ok());
  EXPECT_TRUE(sts[0].ok() && sts[1].ok()) << sts[0].ToString() << " " << sts[1].ToString();
  EXPECT_TRUE(sts[2].IsNotFound() && sts[3].IsNotFound());
  ctx.armed = 1;
  EXPECT_TRUE(ix->Erase(53 * 7919).ok()) << "an erase trusts the same check";
  ctx.armed = 0;
  Value d = 0;
  EXPECT_TRUE(ix->Find(53 * 7919, &d).IsNotFound());
  const auto st = ix->Stats();
  EXPECT_GE(Detail(st, "smartht.filter.swaps"), swaps + 52);
  EXPECT_GE(Detail(st, "smartht.filter.spares"), 1);
  EXPECT_LE(Detail(st, "smartht.filter.spares"), 2) << "spares of one size are reused";
  ix->SetFilterReadHookForTest(nullptr, nullptr);
  for (uint64_t k = 1; k <= n; k++) {
    Value v = 0;
    ASSERT_EQ(ix->Find(k * 7919, &v).ok(), k != 53) << k;
  }
  for (uint64_t k = 1; k <= 1000; k++) EXPECT_TRUE(ix->Find(k * 7919 + 1, &d).IsNotFound());
}

// Readers (Find, FindBatch, Erase of absent keys) without the stripe lock while the filter is
// swapped again and again and writers insert: no present key is ever missed. (TSan set.)
TEST_F(SmartHtTest, ConcurrentLockFreeReadsAcrossFilterSwaps) {
  auto ix = OpenOk(MakeOptions(/*background_threads=*/1));
  ASSERT_TRUE(ix);
  const uint64_t n = Scaled(20000, 10);
  for (uint64_t k = 1; k <= n; k++) ASSERT_TRUE(ix->Insert(k * 7919, k).ok());
  ASSERT_TRUE(ix->background().Drain().ok());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> misses{0}, reads{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 2; t++) {
    ts.emplace_back([&, t] {
      std::vector<Key> keys(64);
      std::vector<Value> vals(64);
      std::vector<Status> sts(64);
      for (uint64_t k = 1 + t; !stop.load(std::memory_order_relaxed); k = k % n + 1) {
        Value v = 0;
        if (!ix->Find(k * 7919, &v).ok() || v != k) misses++;
        if (!ix->Erase(k * 7919 + 1).IsNotFound()) misses++;
        if (k % 64 == 0) {
          for (size_t i = 0; i < 64; i++) keys[i] = (k - i) * 7919 + (i % 2);
          if (!ix->FindBatch(keys, vals, sts).ok()) misses++;
          for (size_t i = 0; i < 64; i++) {
            if (sts[i].ok() != (i % 2 == 0)) misses++;
          }
        }
        reads++;
      }
    });
  }
  // The inserter's keys (multiples of 7919 past the range) are found once their insert returned.
  ts.emplace_back([&] {
    for (uint64_t k = 1; !stop.load(std::memory_order_relaxed) && k < 4 * n; k++) {
      const Key key = (n + k) * 7919;
      if (!ix->Insert(key, k).ok()) misses++;
      Value v = 0;
      if (!ix->Find(key, &v).ok() || v != k) misses++;
    }
  });
  for (int r = 0; r < 20; r++) EXPECT_TRUE(ix->RebuildFilter().ok());  // (threads to join)
  stop = true;
  for (auto& t : ts) t.join();
  EXPECT_EQ(misses.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
  ASSERT_TRUE(ix->background().Drain().ok());
  EXPECT_GE(Detail(ix->Stats(), "smartht.filter.swaps"), 20);
  ASSERT_TRUE(ix->CheckInvariants().ok());
}

// Close saves the filter; a clean reopen loads it (no rebuild) in a background task, a crash
// reopen does not. Keys written before the task has published the copy (writers mark their
// stripe; the task walks those chains) are in the loaded filter.
TEST_F(SmartHtTest, SavedFilterReopens) {
  std::unordered_map<Key, Value> model;
  {
    auto ix = OpenOk(MakeOptions());
    ASSERT_TRUE(ix);
    for (Key k = 1; k <= Scaled(3000, 2); k++) {
      ASSERT_TRUE(ix->Insert(k, k + 1).ok());
      model[k] = k + 1;
    }
    ASSERT_TRUE(ix->Close().ok());
  }
  {
    auto ix = OpenOk(MakeOptions());
    ASSERT_TRUE(ix);
    EXPECT_TRUE(ix->filter_loaded());
    EXPECT_FALSE(ix->filter_complete()) << "loaded in the background";
    EXPECT_EQ(ix->background().pending(), 1u);
    EXPECT_EQ(ReadWord(RootAt(1)), 0u) << "root 1 is cleared at open (I7)";
    ASSERT_NO_FATAL_FAILURE(ExpectFinds(*ix, model, {0, 100000, 100001}));
    for (Key k = 200000; k < 200300; k++) {  // before the load: in dirty stripes
      ASSERT_TRUE(ix->Insert(k, k).ok());
      model[k] = k;
    }
    EXPECT_EQ(ix->background().RunPending(), 1u);
    EXPECT_TRUE(ix->filter_loaded());
    EXPECT_TRUE(ix->filter_complete());
    ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, {0, 100000, 100001}));
    ASSERT_TRUE(ix->Insert(100000, 5).ok());
    model[100000] = 5;
    ix->Abandon();  // crash after a write: the saved filter must not be used
  }
  auto ix = OpenOk(MakeOptions());
  ASSERT_TRUE(ix);
  EXPECT_FALSE(ix->filter_loaded());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, {0, 100001}));
}

// A saved filter whose bytes were damaged fails its checksum: the open rebuilds it.
TEST_F(SmartHtTest, CorruptSavedFilterIsRebuilt) {
  std::unordered_map<Key, Value> model;
  {
    auto ix = OpenOk(MakeOptions());
    ASSERT_TRUE(ix);
    for (Key k = 1; k <= 2000; k++) {
      ASSERT_TRUE(ix->Insert(k, k).ok());
      model[k] = k;
    }
    ASSERT_TRUE(ix->Close().ok());
  }
  const uint64_t saved = ReadWord(RootAt(1));
  ASSERT_NE(saved, 0u);
  // Clear one word of the first block: a false negative if it were trusted.
  WriteWord(saved + 64 + 8, ReadWord(saved + 64 + 8) ^ 0x0101010101010101ULL);
  auto ix = OpenOk(MakeOptions());
  ASSERT_TRUE(ix);
  EXPECT_TRUE(ix->filter_loaded()) << "its header matches: taken, then checked by the task";
  EXPECT_FALSE(ix->filter_complete());
  ASSERT_NO_FATAL_FAILURE(ExpectFinds(*ix, model, {0, 5000}));
  ix->background().RunPending();
  EXPECT_FALSE(ix->filter_loaded());
  EXPECT_TRUE(ix->filter_complete());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, {0, 5000}));
}

// Hostile pools: a chain that loops (onto itself, onto a head) and a root naming an impossible
// table are kCorruption at open (lazy recovery: at open, or from the recovery walk), never a
// hang or a crash.
TEST_F(SmartHtTest, HostileChainCycleIsCorruption) {
  Options o = MakeOptions();
  o.smartht.lazy_recovery = false;
  o.smartht.head_bits = 1;
  o.smartht.grow_keys_per_head = 0;  // long chains
  {
    auto ix = OpenOk(o);
    ASSERT_TRUE(ix);
    for (Key k = 1; k <= 100; k++) ASSERT_TRUE(ix->Insert(k, k).ok());
    EXPECT_GE(Detail(ix->Stats(), "smartht.chain.max"), 10);
    ix->Abandon();  // a crash: every open of this image walks the chains
  }
  const std::vector<uint8_t> good = testing::ReadFile(path_);
  std::vector<uint8_t> clean;  // the same pool closed cleanly: the open loads the saved state
  {
    auto ix = OpenOk(o);
    ASSERT_TRUE(ix);
    ASSERT_TRUE(ix->Close().ok());
    clean = testing::ReadFile(path_);
  }
  const uint64_t dir = ReadWord(RootAt(2));
  const uint64_t heads = ReadWord(dir + 8);  // segment 0
  const uint64_t first = ReadWord(heads + 56);  // head 0's first chained bucket
  ASSERT_NE(first, 0u);
  const uint64_t second = ReadWord(first + 56);
  ASSERT_NE(second, 0u);
  auto restore = [&](const std::vector<uint8_t>& image = {}) {
    const std::vector<uint8_t>& img = image.empty() ? good : image;
    const int fd = ::open(path_.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, img.data(), img.size(), 0), static_cast<ssize_t>(img.size()));
    close(fd);
  };
  struct Case {
    const char* what;
    uint64_t at, value;
  };
  const Case cases[] = {
      {"self loop", first + 56, first},
      {"loop back to the first chained bucket", second + 56, first},
      {"link into the head array", second + 56, heads + 64},
      {"offset outside the heap", first + 56, uint64_t{1} << 40},
      {"unaligned offset", first + 56, second + 8},
      {"root with 2^40 heads", RootAt(0), PackGeo(40, 0)},
      {"split pointer inside a batch", RootAt(0), PackGeo(1, 1)},
      {"split pointer past the level", RootAt(0), PackGeo(1, 2)},
      {"no directory", RootAt(2), 0},
      {"directory off the heap", RootAt(2), uint64_t{1} << 45},
      {"directory on a bucket", RootAt(2), first},
      {"first heads past the level", dir, 2},
      {"segment 0 missing", dir + 8, 0},
      {"segment 0 on the directory", dir + 8, dir},
      {"segment past the next level", dir + 8 + 5 * 8, first},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_NO_FATAL_FAILURE(restore());
    WriteWord(c.at, c.value);
    auto r = SmartHt<pm::Adr>::Open(o);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
  }
  // Lazy recovery (I10): a damaged root or directory is refused at open; a damaged link opens,
  // readers and writers bound it until the recovery walk (run by Size() here, in manual mode)
  // finds it; then writes, CheckInvariants and Close report it, and the pool stays unclean.
  Options lazy = o;
  lazy.smartht.lazy_recovery = true;
  int served = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("lazy: ") + c.what);
    ASSERT_NO_FATAL_FAILURE(restore());
    WriteWord(c.at, c.value);
    auto r = SmartHt<pm::Adr>::Open(lazy);
    if (!r.ok()) {
      EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
      continue;
    }
    served++;
    SmartHt<pm::Adr>& ix = *r.value();
    EXPECT_TRUE(ix.recovering());
    for (Key k = 1; k <= 30; k++) {
      Value v = 0;
      (void)ix.Find(k, &v);
      (void)ix.Upsert(k, k + 1);
    }
    (void)ix.Size();  // runs the walk
    EXPECT_FALSE(ix.recovering());
    EXPECT_TRUE(ix.background().status().IsCorruption()) << ix.background().status().ToString();
    EXPECT_TRUE(ix.Insert(1000, 1).IsCorruption());
    EXPECT_TRUE(ix.Erase(1).IsCorruption());
    EXPECT_TRUE(ix.CheckInvariants().IsCorruption());
    EXPECT_TRUE(ix.Close().IsCorruption());
  }
  EXPECT_EQ(served, 5) << "the five damaged links open and fail in the walk";
  // After a clean Close (I9) the open walks no chain: a damaged root or directory is refused by
  // the load's checks and then by the walk; a damaged link opens, every reader bounds it
  // (finds, writes and ForEach end the chain there and count it), and CheckInvariants
  // (`pmhash check`) reports it.
  int opened = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("clean: ") + c.what);
    ASSERT_NO_FATAL_FAILURE(restore(clean));
    WriteWord(c.at, c.value);
    auto r = SmartHt<pm::Adr>::Open(o);
    if (!r.ok()) {
      EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
      continue;
    }
    opened++;
    SmartHt<pm::Adr>& ix = *r.value();
    EXPECT_TRUE(ix.Stats().state_loaded);
    for (Key k = 1; k <= 30; k++) {  // (a cycle costs a heap's worth of hops per chain walk)
      Value v = 0;
      (void)ix.Find(k, &v);
      (void)ix.Upsert(k, k + 1);
    }
    EXPECT_TRUE(ix.ForEach([](Key, Value) {}).ok());
    // (A link into the head array names a bucket of the heap: the chain goes on into another
    // head's, and only CheckInvariants sees it.)
    if (std::string_view(c.what) != "link into the head array") {
      EXPECT_GT(Detail(ix.Stats(), "smartht.bad_links"), 0);
    }
    EXPECT_TRUE(ix.CheckInvariants().IsCorruption());
    ix.Abandon();
  }
  EXPECT_EQ(opened, 5) << "the five damaged links open after a clean Close";
  ASSERT_NO_FATAL_FAILURE(restore());
  auto r = SmartHt<pm::Adr>::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r.value()->CheckInvariants().ok());
}

// Every split batch size grows the table alike: one head at a time, 4, and batches larger than
// a level (a whole level per batch); each reopens after a crash with every key.
TEST_F(SmartHtTest, SplitBatchSizes) {
  for (const uint32_t batch : {1u, 4u, 1024u}) {
    SCOPED_TRACE(batch);
    unlink(path_.c_str());
    Options o = MakeOptions();
    o.smartht.head_bits = 1;
    o.smartht.split_batch = batch;
    std::unordered_map<Key, Value> model;
    {
      auto ix = OpenOk(o);
      ASSERT_TRUE(ix);
      for (uint64_t i = 0; i < 5000; i++) {
        ASSERT_TRUE(ix->Insert(i * 0x9E3779B97F4A7C15ULL + 7, i).ok());
        model[i * 0x9E3779B97F4A7C15ULL + 7] = i;
        if (i % 7 == 3) {
          ASSERT_TRUE(ix->Erase((i - 3) * 0x9E3779B97F4A7C15ULL + 7).ok());
          model.erase((i - 3) * 0x9E3779B97F4A7C15ULL + 7);
        }
      }
      const IndexStats s = ix->Stats();
      EXPECT_GE(ix->heads(), model.size() / 3);
      EXPECT_GE(s.splits, 500u);
      EXPECT_LE(Detail(s, "smartht.chain.max"), 8);
      ASSERT_TRUE(ix->CheckInvariants().ok());
      ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, {1, 2, 3}));
      ix->Abandon();
    }
    auto ix = OpenOk(o);
    ASSERT_TRUE(ix);
    EXPECT_TRUE(ix->CheckInvariants().ok());
    ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, {1, 2, 3}));
  }
  Options o = MakeOptions();
  o.smartht.split_batch = 3;
  auto r = SmartHt<pm::Adr>::Open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
}

// The heads grow as keys arrive (linear hashing); chains stay short; a crash after growth
// recovers.
TEST_F(SmartHtTest, HeadArrayGrows) {
  Options o = MakeOptions();
  o.smartht.head_bits = 2;
  std::unordered_map<Key, Value> model;
  const uint64_t n = Scaled(40000, 8);
  {
    auto ix = OpenOk(o);
    ASSERT_TRUE(ix);
    for (uint64_t i = 0; i < n; i++) {
      ASSERT_TRUE(ix->Upsert(i * 0x9E3779B97F4A7C15ULL, i).ok());
      model[i * 0x9E3779B97F4A7C15ULL] = i;
    }
    const IndexStats s = ix->Stats();
    std::printf("keys %lu: 2^%u heads, chain mean %.2f max %.0f, load factor %.2f, %lu doublings\n",
                static_cast<unsigned long>(n), ix->head_bits(), Detail(s, "smartht.chain.mean"),
                Detail(s, "smartht.chain.max"), s.load_factor,
                static_cast<unsigned long>(s.doublings));
    EXPECT_GE(s.doublings, 8u);
    EXPECT_GE(static_cast<double>(uint64_t{1} << ix->head_bits()) * 3, static_cast<double>(n) / 2);
    EXPECT_LT(Detail(s, "smartht.chain.mean"), 3);
    EXPECT_TRUE(ix->filter_complete());
    ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, {1, 2, 3}));
    ix->Abandon();
  }
  auto ix = OpenOk(o);
  ASSERT_TRUE(ix);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, {1, 2, 3}));
  ix->background().RunPending();
  ASSERT_NO_FATAL_FAILURE(ExpectContents(*ix, model, {1, 2, 3}));
}

// Concurrent writers with growth and filter rebuilds on worker threads: every thread's keys are
// found afterwards, and no reader ever misses a key that was inserted before it started.
TEST_F(SmartHtTest, ConcurrentGrowthAndRebuild) {
  Options o = MakeOptions(/*background_threads=*/1);
  o.smartht.head_bits = 1;
  o.smartht.rebuild_erased_ratio = 0.05;
  auto ix = OpenOk(o);
  ASSERT_TRUE(ix);
  const uint64_t stable = 2000;
  for (Key k = 0; k < stable; k++) ASSERT_TRUE(ix->Insert(k, k).ok());
  const int nt = 3;
  const uint64_t per = Scaled(20000, 10);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> misses{0};
  std::thread reader([&] {
    while (!stop.load()) {
      for (Key k = 0; k < stable; k++) {
        Value v;
        if (!ix->Find(k, &v).ok() || v != k) misses++;
      }
    }
  });
  std::vector<std::thread> ts;
  for (int t = 0; t < nt; t++) {
    ts.emplace_back([&, t] {
      for (uint64_t i = 0; i < per; i++) {
        const Key k = (uint64_t{1} << 40) + i * nt + t;
        (void)ix->Insert(k, i);
        if (i % 2) (void)ix->Erase(k - nt);
      }
    });
  }
  for (auto& t : ts) t.join();
  stop = true;
  reader.join();
  EXPECT_EQ(misses.load(), 0u);
  ASSERT_TRUE(ix->background().Drain().ok());
  Status s = ix->CheckInvariants();
  ASSERT_TRUE(s.ok()) << s.ToString();
  const IndexStats st = ix->Stats();
  EXPECT_GE(st.doublings, 1u);
  // Growth ran as background tasks too (every task that is not a rebuild is a growth task).
  EXPECT_GT(Detail(st, "smartht.bg.run"), Detail(st, "smartht.filter.rebuilds"));
  std::printf("rebuilds %.0f, doublings %lu\n", Detail(st, "smartht.filter.rebuilds"),
              static_cast<unsigned long>(st.doublings));
}

}  // namespace
}  // namespace pmhash::smartht
