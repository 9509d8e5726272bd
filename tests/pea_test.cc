// tests/pea_test.cc — Pea Hash specifics (src/index/pea/pea.h) that the typed suites cannot see:
//
//   StrategySequence      one segment observed in each strategy in the paper's order (single ->
//                         2-choice -> 2-choice + stash -> split into four), with every key inserted
//                         under an earlier strategy still found after each switch (containment,
//                         paper Definition 3.1), and the stash really used.
//   AblationModes         the five strategy sequences of Figure 7 each keep to their strategies,
//                         stay correct, and order as the paper says by maximum load factor.
//   PersistCost           the one-flush fast path: an insert that changes no structure costs one
//                         flush + fence (slot in line 0) or two (line 0 full: entry moving);
//                         most cost one; without entry moving fewer do. Erase and update cost one,
//                         finds and failed writes none. With tear_safe: two fences per insert
//                         (2 or 3 flushes); tear_safe is not a pool property.
//   DirectoryChoice       recovery takes the directory descriptor with the larger global depth
//                         (a hand-built doubled directory in the other root is adopted), refuses an
//                         invalid larger one and two equal depths, ignores an invalid smaller one.
//   RecoveryRepairsStride a half-done two-step directory update (step 1 only) is undone.
//   PeaKv.LargeRecords    pea-kv with the paper's 512 KB segments: records of 2..56 KiB live in
//                         slab slots of their size class (not in a 512 KB chunk each), larger ones
//                         in whole chunks; all survive a reopen and the invariant check.
#include "index/pea/pea.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/hash.h"
#include "pm/pool_format.h"
#include "test_util.h"

namespace pmhash::testing {
namespace {

Options PeaOptions(const std::string& path, Durability d, uint32_t buckets) {
  Options o;
  o.path = path;
  o.pool_size = uint64_t{64} << 20;
  o.durability = d;
  o.pea.segment_buckets = buckets;
  o.pea.initial_depth = 0;
  o.pea.max_depth = 32;
  // A fixed hash seed: which buckets fill first, and so whether one insert moves a segment
  // through two strategies at once, depends on it (a random seed made the sequence test flaky).
  o.hash_seed = TestSeed(0x9ea);
  return o;
}

TEST(PeaStrategy, SequenceAndContainment) {
  ScopedPath path("pea_sequence");
  auto r = pea::Pea<pm::Adr>::Open(PeaOptions(path.path(), Durability::kAdr, 4));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto& ix = **r;
  const Key probe = SplitMix64(0);
  std::vector<std::pair<uint32_t, uint32_t>> seen;  // (local depth, strategy) of probe's segment
  std::vector<Key> keys;
  double max_stash_entries = 0;
  for (uint64_t i = 0; i < 2000; i++) {
    const Key k = SplitMix64(i);
    ASSERT_TRUE(ix.Insert(k, i).ok()) << i;
    keys.push_back(k);
    const std::pair<uint32_t, uint32_t> now{ix.LocalDepthOf(probe), ix.StrategyOf(probe)};
    if (seen.empty() || seen.back() != now) {
      seen.push_back(now);
      // Containment: every key inserted so far (under any earlier strategy) is still found.
      for (uint64_t j = 0; j < keys.size(); j++) {
        Value v;
        ASSERT_TRUE(ix.Find(keys[j], &v).ok())
            << "key " << j << " lost at state change " << seen.size() << " (insert " << i << ")";
        ASSERT_EQ(v, j);
      }
      Status s = ix.CheckInvariants();
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    max_stash_entries = std::max(max_stash_entries, Detail(ix.Stats(), "pea.stash.entries"));
  }
  // The probe's segment starts under single hashing and climbs the strategies before it splits.
  // One insert may take it through two transitions (its bucket and its 2-choice partner both
  // full): then the 2-choice state is not seen between two inserts, but the transition counters
  // show that no segment went to the stash without passing through 2-choice.
  ASSERT_GE(seen.size(), 3u);
  EXPECT_EQ(seen[0], (std::pair<uint32_t, uint32_t>{0, pea::kSingleHash}));
  size_t first_split = 1;
  while (first_split < seen.size() && seen[first_split].first == 0) first_split++;
  ASSERT_LT(first_split, seen.size()) << "the probe's segment never split";
  EXPECT_EQ(seen[first_split - 1].second, pea::kStash) << "splits only from 2-choice + stash";
  EXPECT_EQ(seen[first_split].first, 2u) << "a full 2-choice + stash segment splits into four";
  const IndexStats counts = ix.Stats();
  EXPECT_GE(Detail(counts, "pea.transitions.two_choice"), Detail(counts, "pea.transitions.stash"));
  EXPECT_GT(Detail(counts, "pea.transitions.stash"), 0);
  // Local depths only grow by splits of 2 (or 4, 6.. if a quarter needed a further split).
  for (size_t x = 1; x < seen.size(); x++) {
    EXPECT_TRUE(seen[x].first == seen[x - 1].first ? seen[x].second > seen[x - 1].second
                                                   : seen[x].first > seen[x - 1].first)
        << "state " << x;
    EXPECT_EQ(seen[x].first % 2, 0u);
  }
  const IndexStats st = ix.Stats();
  EXPECT_GT(Detail(st, "pea.transitions.two_choice"), 0);
  EXPECT_GT(Detail(st, "pea.transitions.stash"), 0);
  EXPECT_GT(Detail(st, "pea.stash.segments"), 0);
  EXPECT_GT(max_stash_entries, 0) << "the stash buckets were never used";
  EXPECT_GT(st.splits, 0u);
  EXPECT_GT(st.doublings, 0u);
  EXPECT_EQ(Detail(st, "pea.segments"), Detail(st, "pea.segments.single") +
                                            Detail(st, "pea.segments.two_choice") +
                                            Detail(st, "pea.segments.stash"));
  // Every key, after a crash-recovery too.
  r.value()->Abandon();
  r.value().reset();
  Options o = PeaOptions(path.path(), Durability::kAdr, 4);
  o.mode = OpenMode::kOpenExisting;
  auto r2 = pea::Pea<pm::Adr>::Open(o);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_TRUE((*r2)->Stats().recovered);
  EXPECT_EQ((*r2)->Size(), keys.size());
  for (uint64_t j = 0; j < keys.size(); j++) {
    Value v;
    ASSERT_TRUE((*r2)->Find(keys[j], &v).ok());
    ASSERT_EQ(v, j);
  }
  Status s = (*r2)->CheckInvariants();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(PeaStrategy, AblationModes) {
  struct Mode {
    PeaStrategies m;
    const char* name;
    uint32_t lo, hi;
  };
  const Mode modes[] = {
      {PeaStrategies::kSingle, "single", pea::kSingleHash, pea::kSingleHash},
      {PeaStrategies::kTwoChoice, "2-choice", pea::kTwoChoice, pea::kTwoChoice},
      {PeaStrategies::kTwoChoiceStash, "2-choice+stash", pea::kStash, pea::kStash},
      {PeaStrategies::kSingleTwoChoice, "single->2-choice", pea::kSingleHash, pea::kTwoChoice},
      {PeaStrategies::kAdaptive, "pea", pea::kSingleHash, pea::kStash},
  };
  const char* kSeg[] = {"pea.segments.single", "pea.segments.two_choice", "pea.segments.stash"};
  double max_lf[5] = {};
  const uint64_t n = Scaled(30000, 4);
  for (int x = 0; x < 5; x++) {
    SCOPED_TRACE(modes[x].name);
    ScopedPath path("pea_ablation");
    Options o = PeaOptions(path.path(), Durability::kDram, 64);
    o.pea.strategies = modes[x].m;
    auto r = pea::Pea<pm::Dram>::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto& ix = **r;
    uint64_t splits = 0;
    double lf_before = 0;
    for (uint64_t i = 0; i < n; i++) {
      ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
      if ((i & 63) == 0 || i + 1 == n) {
        const IndexStats s = ix.Stats();
        if (s.splits != splits) max_lf[x] = std::max(max_lf[x], lf_before);
        splits = s.splits;
        lf_before = s.load_factor;
        for (uint32_t st = 0; st < 3; st++) {
          if (st < modes[x].lo || st > modes[x].hi) {
            ASSERT_EQ(Detail(s, kSeg[st]), 0) << st;
          }
        }
      }
    }
    Status s = ix.CheckInvariants();
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (uint64_t i = 0; i < n; i += 7) {
      Value v;
      ASSERT_TRUE(ix.Find(SplitMix64(i), &v).ok());
      ASSERT_EQ(v, i);
    }
    std::printf("[ info ] %-18s max load factor (sampled) %.3f, %lu splits\n", modes[x].name,
                max_lf[x], static_cast<unsigned long>(ix.Stats().splits));
  }
  // Figure 7: single has the lowest utilisation; every multi-choice sequence beats it, and Pea's
  // three-step sequence reaches at least the single -> 2-choice one.
  EXPECT_GT(max_lf[1], max_lf[0]);
  EXPECT_GT(max_lf[3], max_lf[0]);
  EXPECT_GT(max_lf[4], max_lf[0]);
  EXPECT_GE(max_lf[4] + 0.02, max_lf[3]);
}

// Persists (flush requests), fences and flushed lines of every insert that changes no structure.
//   default:   1 + 1 (slot in line 0, one flush of the line), or 2 + 2 (slot line, then header)
//   tear_safe: 2 + 2 (slot, then header word 0), or 2-3 flushes + 2 fences (slot line and, when
//              the fingerprint word changes, the header line; then header word 0)
struct PersistCost {
  double cheapest_fraction = 0;  // inserts at the cheapest cost (default 1 fence, tear_safe 2)
  double persists_per_insert = 0;
  double fences_per_insert = 0;
};

template <class P>
void CheckPersistCost(bool entry_moving, bool tear_safe, PersistCost* cost) {
  ScopedPath path("pea_cost");
  Options o = PeaOptions(path.path(), P::kDurability, 64);
  o.counters = true;
  o.pea.entry_moving = entry_moving;
  o.pea.tear_safe = tear_safe;
  auto r = pea::Pea<P>::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto& ix = **r;
  pm::TrafficCounters& ctr = ix.pool().counters();
  const uint64_t lines_per_persist = P::kWritesBack ? 1 : 0;
  ix.ResetCounters();
  const uint64_t n = Scaled(6000);
  uint64_t steady = 0, cheapest = 0, structural = 0, persists_sum = 0, fences_sum = 0;
  auto shape = [&] {
    const IndexStats s = ix.Stats();
    return s.splits + s.doublings + static_cast<uint64_t>(Detail(s, "pea.transitions.two_choice")) +
           static_cast<uint64_t>(Detail(s, "pea.transitions.stash"));
  };
  uint64_t before = shape();
  for (uint64_t i = 0; i < n; i++) {
    const TrafficStats t0 = ctr.Snapshot();
    ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
    const TrafficStats t1 = ctr.Snapshot();
    const uint64_t after = shape();
    const uint64_t persists = t1.persists - t0.persists, fences = t1.fences - t0.fences;
    if (after == before) {
      steady++;
      if (tear_safe) {
        ASSERT_EQ(fences, 2u) << "insert #" << i;
        ASSERT_TRUE(persists == 2 || persists == 3) << "insert #" << i << ": " << persists;
        cheapest += persists == 2;
      } else {
        ASSERT_TRUE(persists == 1 || persists == 2) << "insert #" << i << ": " << persists;
        ASSERT_EQ(fences, persists) << "insert #" << i;
        cheapest += persists == 1;
      }
      ASSERT_EQ(t1.flushed_lines - t0.flushed_lines, persists * lines_per_persist);
      ASSERT_EQ(t1.nt_bytes - t0.nt_bytes, 0u);
      persists_sum += persists;
      fences_sum += fences;
    } else {
      structural++;
    }
    before = after;
  }
  EXPECT_GT(steady, n * 9 / 10);
  EXPECT_GT(structural, 0u);
  cost->cheapest_fraction = static_cast<double>(cheapest) / static_cast<double>(steady);
  cost->persists_per_insert = static_cast<double>(persists_sum) / static_cast<double>(steady);
  cost->fences_per_insert = static_cast<double>(fences_sum) / static_cast<double>(steady);
  std::printf(
      "[ info ] entry moving %s, tear_safe %s: %lu plain inserts, %.1f%% at the cheapest cost, "
      "%.3f persists + %.3f fences per insert\n",
      entry_moving ? "on " : "off", tear_safe ? "on " : "off", static_cast<unsigned long>(steady),
      100 * cost->cheapest_fraction, cost->persists_per_insert, cost->fences_per_insert);

  // Update and erase: one persist + one fence each (one 8-byte store: nothing to tear);
  // failed operations and finds: nothing.
  ExpectUpdateEraseOnePersistFailuresNone(ix, ctr, n, lines_per_persist);
}

TEST(PeaPersistCost, AdrOneFlushFastPath) {
  PersistCost with, without;
  ASSERT_NO_FATAL_FAILURE(CheckPersistCost<pm::Adr>(true, false, &with));
  ASSERT_NO_FATAL_FAILURE(CheckPersistCost<pm::Adr>(false, false, &without));
  EXPECT_GT(with.cheapest_fraction, 0.6) << "most inserts must take the one-flush path";
  EXPECT_GT(with.cheapest_fraction, without.cheapest_fraction + 0.1)
      << "entry moving must create one-flush inserts";
}

TEST(PeaPersistCost, EadrNoWriteBack) {
  PersistCost with;
  ASSERT_NO_FATAL_FAILURE(CheckPersistCost<pm::Eadr>(true, false, &with));
  EXPECT_GT(with.cheapest_fraction, 0.6);
}

// I2': two fences per insert, whichever line the slot is in; update and erase unchanged.
TEST(PeaPersistCost, AdrTearSafeTwoFencesPerInsert) {
  PersistCost with, without;
  ASSERT_NO_FATAL_FAILURE(CheckPersistCost<pm::Adr>(true, true, &with));
  ASSERT_NO_FATAL_FAILURE(CheckPersistCost<pm::Adr>(false, true, &without));
  EXPECT_DOUBLE_EQ(with.fences_per_insert, 2.0);
  EXPECT_DOUBLE_EQ(without.fences_per_insert, 2.0);
  EXPECT_GT(with.cheapest_fraction, 0.6) << "most inserts: slot, then header word 0";
  EXPECT_LT(with.persists_per_insert, 2.4);
}

// Like entry_moving, tear_safe changes no byte of the format: a pool written with it opens
// without it and the other way round.
TEST(PeaPersistCost, TearSafeIsNotAPoolProperty) {
  ScopedPath path("pea_tear_safe");
  Options o = PeaOptions(path.path(), Durability::kAdr, 4);
  o.pool_size = 8 << 20;
  const uint64_t n = 2000;
  for (uint64_t round = 0; round < 3; round++) {
    o.pea.tear_safe = round % 2 == 1;
    o.mode = round == 0 ? OpenMode::kCreateExclusive : OpenMode::kOpenExisting;
    auto r = pea::Pea<pm::Adr>::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto& ix = **r;
    ASSERT_EQ(ix.Size(), round * n);
    for (uint64_t i = round * n; i < (round + 1) * n; i++) {
      ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
    }
    for (uint64_t i = 0; i < (round + 1) * n; i += 7) {
      Value v;
      ASSERT_TRUE(ix.Find(SplitMix64(i), &v).ok()) << i;
      ASSERT_EQ(v, i);
    }
    const Status s = ix.CheckInvariants();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(ix.Close().ok());
  }
}

// ============================================================================================
// Recovery: which directory, and repair of a half-done directory update
// ============================================================================================

class PeaRecovery : public ::testing::Test {
 protected:
  static constexpr uint64_t kKeys = 3000;
  void SetUp() override {
    Options o = PeaOptions(path_.path(), Durability::kAdr, 4);
    o.pool_size = 8 << 20;
    auto r = pea::Pea<pm::Adr>::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    // Keys whose hash starts with bit 0 only: the upper half of the hash space keeps shallow
    // segments with strides of many directory entries.
    const Hasher hash((*r)->pool().hash_mode(), (*r)->pool().hash_seed());
    for (uint64_t i = 0; keys_.size() < kKeys; i++) {
      if ((hash(SplitMix64(i)) >> 63) == 0) keys_.push_back(SplitMix64(i));
    }
    for (uint64_t i = 0; i < kKeys; i++) ASSERT_TRUE((*r)->Insert(keys_[i], i).ok());
    root_ = (*r)->DirectoryRoot();
    depth_ = (*r)->global_depth();
    ASSERT_GE(depth_, 4u);
    ASSERT_TRUE((*r)->Close().ok());
    ASSERT_TRUE(ReadAt(path_.path(), RootAt(root_), &desc_, 8));
    ASSERT_TRUE(ReadAt(path_.path(), RootAt(1 - root_), &other_, 8));
    ASSERT_EQ(pea::DescDepth(desc_), depth_);
    ASSERT_LT(pea::DescDepth(other_), depth_) << "the other root holds an older directory";
    image_ = ReadFile(path_.path());
    std::memcpy(&heap_offset_, &image_[offsetof(pm::PoolHeader, heap_offset)], 8);
  }
  static uint64_t RootAt(int r) { return offsetof(pm::PoolHeader, roots) + 8 * r; }
  void SetRoot(int r, uint64_t v) { ASSERT_TRUE(PatchFile(path_.path(), RootAt(r), &v, 8)); }
  void Restore() { ASSERT_TRUE(WriteFile(path_.path(), image_)); }
  Result<std::unique_ptr<pea::Pea<pm::Adr>>> Reopen() {
    Options o = PeaOptions(path_.path(), Durability::kAdr, 4);
    o.pool_size = 8 << 20;
    o.mode = OpenMode::kOpenExisting;
    return pea::Pea<pm::Adr>::Open(o);
  }
  void ExpectIntact(pea::Pea<pm::Adr>& ix) {
    ASSERT_EQ(ix.Size(), kKeys);
    for (uint64_t i = 0; i < kKeys; i++) {
      Value v;
      ASSERT_TRUE(ix.Find(keys_[i], &v).ok()) << i;
      ASSERT_EQ(v, i);
    }
    Status s = ix.CheckInvariants();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // The highest heap chunk that no segment uses (the pool is mostly empty).
  uint64_t FreeChunkAtEnd(uint64_t chunks) const {
    return image_.size() / 1024 * 1024 - chunks * 1024;
  }

  ScopedPath path_{"pea_recovery"};
  std::vector<Key> keys_;
  std::vector<uint8_t> image_;
  int root_ = 0;
  uint32_t depth_ = 0;
  uint64_t desc_ = 0, other_ = 0, heap_offset_ = 0;
};

TEST_F(PeaRecovery, AdoptsTheLargerDirectory) {
  // Build the doubled directory by hand in free chunks and name it in the other root, as an
  // expansion that crashed right after its switch would leave it.
  const uint64_t n = uint64_t{1} << depth_;
  std::vector<uint64_t> entries(n), doubled(2 * n);
  std::memcpy(entries.data(), &image_[pea::DescOffset(desc_)], n * 8);
  for (uint64_t x = 0; x < n; x++) doubled[2 * x] = doubled[2 * x + 1] = entries[x];
  const uint64_t chunks = (2 * n * 8 + 1023) / 1024;
  const uint64_t off = FreeChunkAtEnd(chunks);
  ASSERT_TRUE(PatchFile(path_.path(), off, doubled.data(), 2 * n * 8));
  ASSERT_NO_FATAL_FAILURE(SetRoot(1 - root_, pea::PackDesc(depth_ + 1, off)));
  {
    auto r = Reopen();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)->global_depth(), depth_ + 1);
    EXPECT_EQ((*r)->DirectoryRoot(), 1 - root_);
    ASSERT_NO_FATAL_FAILURE(ExpectIntact(**r));
    // It keeps growing from there (the next expansion writes the other root again).
    for (uint64_t i = 0; i < 2 * kKeys; i++) {
      ASSERT_TRUE((*r)->Insert(SplitMix64(i) ^ (uint64_t{1} << 62), i).ok());
    }
    Status s = (*r)->CheckInvariants();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ASSERT_NO_FATAL_FAILURE(Restore());
  auto r = Reopen();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->global_depth(), depth_);
  ASSERT_NO_FATAL_FAILURE(ExpectIntact(**r));
}

TEST_F(PeaRecovery, BadDescriptors) {
  // An invalid smaller descriptor is never looked at.
  for (uint64_t v : {pea::PackDesc(1, 12345), pea::PackDesc(0, ~uint64_t{0})}) {
    ASSERT_NO_FATAL_FAILURE(SetRoot(1 - root_, v));
    auto r = Reopen();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectIntact(**r));
    r.value().reset();
    ASSERT_NO_FATAL_FAILURE(Restore());
  }
  // A larger one that is invalid, an equal depth, a missing directory: clear errors.
  const uint64_t bad[] = {
      pea::PackDesc(depth_ + 1, 12345), pea::PackDesc(depth_ + 1, uint64_t{1} << 50),
      pea::PackDesc(depth_ + 1, 0),     pea::PackDesc(depth_, pea::DescOffset(desc_)),
      pea::PackDesc(40, heap_offset_),  pea::PackDesc(200, heap_offset_)};
  for (uint64_t v : bad) {
    ASSERT_NO_FATAL_FAILURE(SetRoot(1 - root_, v));
    auto r = Reopen();
    ASSERT_FALSE(r.ok()) << "descriptor " << v;
    EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
    // The failed open was abandoned, not closed: no clean mark for what it did not recover.
    uint64_t clean = 1;
    ASSERT_TRUE(ReadAt(path_.path(), offsetof(pm::PoolHeader, clean_shutdown), &clean, 8));
    EXPECT_EQ(clean, 0u) << "descriptor " << v;
    ASSERT_NO_FATAL_FAILURE(Restore());
  }
  ASSERT_NO_FATAL_FAILURE(SetRoot(0, 0));
  ASSERT_NO_FATAL_FAILURE(SetRoot(1, 0));
  auto r = Reopen();
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
}

TEST_F(PeaRecovery, HalfDoneTwoStepUpdateIsUndone) {
  // Find a segment with a stride of at least 4 entries, then write step 1 of a fake update
  // (every entry but the lowest points at another segment) without step 2.
  const uint64_t n = uint64_t{1} << depth_;
  std::vector<uint64_t> entries(n);
  const uint64_t doff = pea::DescOffset(desc_);
  std::memcpy(entries.data(), &image_[doff], n * 8);
  uint64_t first = n;
  for (uint64_t i = 0; i < n;) {
    const uint64_t stride = uint64_t{1} << (depth_ - pea::EntryDepth(entries[i]));
    if (stride >= 4) {
      first = i;
      break;
    }
    i += stride;
  }
  ASSERT_LT(first, n) << "no segment with a stride of 4";
  const uint64_t stride = uint64_t{1} << (depth_ - pea::EntryDepth(entries[first]));
  const uint64_t other = first == 0 ? entries[n - 1] : entries[0];
  for (uint64_t x = first + 1; x < first + stride; x++) {
    ASSERT_TRUE(PatchFile(path_.path(), doff + 8 * x, &other, 8));
  }
  auto r = Reopen();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectIntact(**r));
}

// Close saves the live count (root kSavedSizeRoot) and an open after a clean shutdown takes it
// instead of scanning the buckets; after a crash the saved count is stale and never used; a
// hostile count is taken but CheckInvariants' recount refuses it.
TEST_F(PeaRecovery, SavedSizeOnlyAfterACleanShutdown) {
  constexpr int kRoot = pea::Pea<pm::Adr>::kSavedSizeRoot;
  uint64_t saved = 0;
  ASSERT_TRUE(ReadAt(path_.path(), RootAt(kRoot), &saved, 8));
  EXPECT_EQ(saved, kKeys + 1) << "Close saves Size() + 1 (0 = none)";
  // A count larger than the pool could hold is not taken: the first Size() counts.
  ASSERT_NO_FATAL_FAILURE(SetRoot(kRoot, ~uint64_t{0} - 3));
  {
    auto r = Reopen();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)->Size(), kKeys);
  }
  ASSERT_NO_FATAL_FAILURE(Restore());
  ASSERT_NO_FATAL_FAILURE(SetRoot(kRoot, kKeys + 1 + 5));
  {
    auto r = Reopen();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)->Size(), kKeys + 5) << "the saved count was not taken";
    const Status s = (*r)->CheckInvariants();
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    (*r)->Abandon();  // a crash: the pool keeps no clean mark
  }
  {
    auto r = Reopen();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)->Size(), kKeys) << "a count saved before a crash was used";
    for (uint64_t i = 0; i < 10; i++) ASSERT_TRUE((*r)->Erase(keys_[i]).ok());
    (*r)->Abandon();
  }
  {
    auto r = Reopen();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)->Size(), kKeys - 10);
    const Status s = (*r)->CheckInvariants();
    EXPECT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE((*r)->Close().ok());
  }
  ASSERT_TRUE(ReadAt(path_.path(), RootAt(kRoot), &saved, 8));
  EXPECT_EQ(saved, kKeys - 10 + 1);
  auto r = Reopen();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->Size(), kKeys - 10);
}

TEST(PeaKv, LargeRecords) {
  ScopedPath path("peakv_large");
  Options o = PeaOptions(path.path(), Durability::kAdr, 2048);  // 512 KB segments and slabs
  o.pea.initial_depth = 1;
  std::unordered_map<std::string, std::string> model;
  auto check = [&](pea::PeaKv<pm::Adr>& ix) {
    ASSERT_TRUE(ix.CheckInvariants().ok());
    ASSERT_EQ(ix.Size(), model.size());
    std::string v;
    for (const auto& [k, val] : model) {
      ASSERT_TRUE(ix.FindBytes(k, &v).ok()) << k;
      ASSERT_EQ(v, val) << k;
    }
  };
  {
    auto r = pea::PeaKv<pm::Adr>::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    // 2 KiB .. 56 KiB values: slab slots of the classes 2560 .. 57344.
    for (uint32_t i = 0; i < 40; i++) {
      const std::string k = "key" + std::to_string(i);
      const std::string v(2048 + i * 1400, static_cast<char>('a' + i % 26));
      ASSERT_TRUE((*r)->InsertBytes(k, v).ok());
      model[k] = v;
    }
    IndexStats st = (*r)->Stats();
    EXPECT_EQ(Detail(st, "records.large_chunks"), 0) << "a slab class holds every record";
    EXPECT_GT(Detail(st, "records.slabs"), 1);
    // Past the largest class (56 KiB, 8 slots per slab): whole chunks.
    const std::string big(60 << 10, 'z');
    ASSERT_TRUE((*r)->InsertBytes("big", big).ok());
    model["big"] = big;
    st = (*r)->Stats();
    EXPECT_EQ(Detail(st, "records.large_chunks"), 1);
    ASSERT_NO_FATAL_FAILURE(check(**r));
    ASSERT_TRUE((*r)->Close().ok());
  }
  o.mode = OpenMode::kOpenExisting;
  auto r = pea::PeaKv<pm::Adr>::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_NO_FATAL_FAILURE(check(**r));
  EXPECT_EQ(Detail((*r)->Stats(), "records.large_chunks"), 1);
}

}  // namespace
}  // namespace pmhash::testing
