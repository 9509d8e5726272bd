// tests/elimda_test.cc — ElimDA specifics (src/index/elimda/elimda.h) that the typed suites
// cannot see:
//
//   LayersAndGrowth        with a small geometry, keys end up in all three layers (PM table,
//                          DRAM table backed by sealed log blocks, active collecting logs); logs
//                          are swapped, D-buckets relocated, segments split, emptied log blocks
//                          freed; every key is found and the invariants hold.
//   InsertExistsInEveryLayer  Insert of a present key returns kExists and keeps the first value,
//                          whichever layer holds it; Update/Erase work in every layer.
//   EmptyBlocksInRuns      emptied log blocks wait for their batch, linked, and go a run per
//                          store (well under one per block freed); with a batch of 0 none
//                          waits (a seal's sweep still merges the blocks it emptied); a crash
//                          with blocks waiting: recovery unlinks them, no leak, same contents.
//                          Unset, the batch is 4 under ADR, 0 under eADR and DRAM. Close
//                          unlinks the waiting ones before it saves the image.
//   LateCounts             ADR: relocations' counts published late, several with one header
//                          write (I14); crashes in between lose nothing. eADR: none late.
//   RecoveryRebuildsDram   a crash (Abandon) after inserts, updates and erases: recovery rebuilds
//                          fingerprints, D-buckets and logs: same contents, same layers (but
//                          for relocated items whose counts were not published: I14), no leak.
//   PersistCost            ADR: an append is one persist (item and bit in the block's first line),
//                          plus one when the first line's items move out; tear_safe: two (item,
//                          then its bit). Update and erase one; finds and failed writes none.
//                          eADR: no line is ever flushed.
//   Duplicates             a P-bucket holding a key twice: the first copy wins, splits drop the
//                          second, an erase removes both.
//   HostilePool            corrupt offsets and header words are refused with kCorruption.
//   Shadows                relocated items' log bits stay set in PM (I13): an erase of such an
//                          item clears its bit and fences first (two fences, one otherwise), an
//                          update leaves it (and publishes its segment's counts first if they
//                          were not: I14, one more fence); compactions at out of space renumber the shadows of
//                          the items they move; Close clears them, a crash leaves them to
//                          recovery.
//   Stripes                a pool created under ADR gets few logs and writer logs, under eADR
//                          and DRAM 8192 hashed ones; lock stripes shared by a log (more
//                          stripes than logs) or one per log, hashed or writer logs, give the
//                          same contents, alone and with concurrent writers and readers (in the
//                          TSan set), and after a crash. Writer logs: a log per writer, a
//                          reopen with fewer stripes settles them by sealing, a key in two logs
//                          is refused.
#include "index/elimda/elimda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace pmhash::testing {
namespace {

Options SmallOptions(const std::string& path) {
  Options o;
  o.path = path;
  o.pool_size = uint64_t{32} << 20;
  o.elimda.bucket_items = 32;
  o.elimda.dbucket_items = 16;
  o.elimda.segment_buckets = 2;
  o.elimda.logs = 4;
  o.elimda.initial_depth = 1;
  o.hash_seed = TestSeed(0xe11d);
  return o;
}

template <class I>
void ExpectContents(I& ix, const std::map<Key, Value>& model) {
  Status s = ix.CheckInvariants();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(ix.Size(), model.size());
  for (const auto& [k, v] : model) {
    Value got = 0;
    ASSERT_TRUE(ix.Find(k, &got).ok()) << k;
    ASSERT_EQ(got, v) << k;
  }
  std::map<Key, Value> seen;
  ASSERT_TRUE(ix.ForEach([&](Key k, Value v) { EXPECT_TRUE(seen.emplace(k, v).second); }).ok());
  ASSERT_EQ(seen, model);
}

using Engine = elimda::ElimDA<pm::Adr>;

TEST(ElimdaLayers, LayersAndGrowth) {
  ScopedPath path("elimda_layers");
  auto r = Engine::Open(SmallOptions(path.path()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto& ix = **r;
  std::map<Key, Value> model;
  const uint64_t n = Scaled(4000, 4);
  for (uint64_t i = 0; i < n; i++) {
    const Key k = SplitMix64(i);
    ASSERT_TRUE(ix.Insert(k, i).ok());
    model[k] = i;
    if (i % 3 == 0 && i > 0) {
      const Key e = SplitMix64(i / 2);
      if (model.erase(e)) {
        ASSERT_TRUE(ix.Erase(e).ok());
      }
    }
  }
  ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));
  int layers[4] = {0, 0, 0, 0};
  for (const auto& [k, v] : model) layers[ix.LayerOf(k)]++;
  EXPECT_EQ(layers[0], 0);
  EXPECT_GT(layers[1], 0) << "no key in the PM table";
  EXPECT_GT(layers[2], 0) << "no key in the DRAM table";
  EXPECT_GT(layers[3], 0) << "no key in an active log";
  const IndexStats s = ix.Stats();
  EXPECT_GT(Detail(s, "elimda.log_swaps"), 0);
  EXPECT_GT(Detail(s, "elimda.relocations"), 0);
  EXPECT_GT(Detail(s, "elimda.blocks_freed"), 0);
  EXPECT_GT(s.splits, 0u);
  EXPECT_GT(s.doublings, 0u);
  EXPECT_GT(ix.global_depth(), 1u);
}

TEST(ElimdaLayers, InsertExistsInEveryLayer) {
  ScopedPath path("elimda_exists");
  auto r = Engine::Open(SmallOptions(path.path()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto& ix = **r;
  std::map<Key, Value> model;
  // One writer: its log's active block ends with 1507 mod 15 = 7 items, room for the two
  // appends of the layers tested before it (erase, then insert again).
  for (uint64_t i = 0; i < 1507; i++) {
    ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
    model[SplitMix64(i)] = i;
  }
  bool tested[4] = {false, false, false, false};
  for (auto& [k, v] : model) {
    const int layer = ix.LayerOf(k);
    if (tested[layer]) continue;
    tested[layer] = true;
    SCOPED_TRACE("layer " + std::to_string(layer));
    EXPECT_TRUE(ix.Insert(k, v + 100).IsExists());
    Value got = 0;
    ASSERT_TRUE(ix.Find(k, &got).ok());
    EXPECT_EQ(got, v) << "the first-inserted value must win";
    ASSERT_TRUE(ix.Update(k, v + 1).ok());
    ASSERT_TRUE(ix.Find(k, &got).ok());
    EXPECT_EQ(got, v + 1);
    EXPECT_EQ(ix.LayerOf(k), layer) << "an update is in place";
    ASSERT_TRUE(ix.Erase(k).ok());
    EXPECT_TRUE(ix.Find(k, &got).IsNotFound());
    EXPECT_TRUE(ix.Erase(k).IsNotFound());
    EXPECT_TRUE(ix.Update(k, 1).IsNotFound());
    ASSERT_TRUE(ix.Insert(k, v + 2).ok());
    ASSERT_TRUE(ix.Find(k, &got).ok());
    EXPECT_EQ(got, v + 2);
    v += 2;
  }
  EXPECT_TRUE(tested[1] && tested[2] && tested[3]);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));
}

TEST(ElimdaRecovery, EmptyBlocksInRuns) {
  double unlinks_per_block[2] = {0, 0};  // batch 0, batch 4
  for (const uint32_t batch : {0u, 4u}) {
    SCOPED_TRACE("empty_block_batch " + std::to_string(batch));
    ScopedPath path("elimda_empty_runs");
    Options o = SmallOptions(path.path());
    o.elimda.empty_block_batch = batch;
    std::map<Key, Value> model;
    double linked = 0, blocks = 0;
    double most = 0;  // the largest share of the sealed blocks waiting, times the batch
    {
      auto r = Engine::Open(o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      auto& ix = **r;
      // The waiting share checked after every insert; past 8000 inserts, on until blocks wait
      // for their batch (batch 4), to crash there.
      for (uint64_t i = 0; i < 30000; i++) {
        ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
        model[SplitMix64(i)] = i;
        const IndexStats s = ix.Stats();
        linked = Detail(s, "elimda.empty_blocks_linked");
        const double sealed = Detail(s, "elimda.log_blocks") - Detail(s, "elimda.active_logs");
        if (sealed > 0) most = std::max(most, linked * batch / sealed);
        if (i >= 8000 && (batch == 0 || linked >= 5)) break;
      }
      if (batch != 0) {
        EXPECT_LT(most, 1.0) << "waited past the batch";
        EXPECT_GT(most, 0.8) << "swept well before the batch";
      }
      ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));
      const IndexStats s = ix.Stats();
      const double freed = Detail(s, "elimda.blocks_freed");
      const double unlinks = Detail(s, "elimda.block_unlinks");
      blocks = Detail(s, "elimda.log_blocks");
      unlinks_per_block[batch != 0] = freed > 0 ? unlinks / freed : 1;
      EXPECT_GT(freed, 20);
      if (batch == 0) {
        EXPECT_EQ(linked, 0);
        EXPECT_LE(unlinks, freed);  // runs only of blocks emptied by one seal's relocations
      } else {
        EXPECT_GE(linked, 5);
        EXPECT_LE(linked * batch, blocks + batch);  // swept once they reach 1/batch
        EXPECT_LT(unlinks * 2, freed) << "runs too short";
      }
      ix.Abandon();  // a crash: the waiting blocks are still linked
    }
    auto r = Engine::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto& ix = **r;
    ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));  // CheckInvariants: no leak
    const IndexStats s = ix.Stats();
    EXPECT_EQ(Detail(s, "elimda.empty_blocks_linked"), 0);
    // Recovery unlinks the waiting blocks, but for those whose relocated items' counts were not
    // published yet (I14): their items are logged again, in D-buckets.
    EXPECT_LE(Detail(s, "elimda.log_blocks"), blocks);
    EXPECT_GE(Detail(s, "elimda.log_blocks"), blocks - linked) << "recovery unlinks them";
  }
  EXPECT_LT(unlinks_per_block[1], unlinks_per_block[0] * 0.75);
}

// Unset, the batch is 4 where an unlink's store is written back (ADR), 0 under eADR and DRAM.
template <class E>
double MostEmptyBlocksLinked() {
  ScopedPath path("elimda_empty_default");
  auto r = E::Open(SmallOptions(path.path()));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return -1;
  double most = 0;
  for (uint64_t i = 0; i < 8000; i++) {
    EXPECT_TRUE((*r)->Insert(SplitMix64(i), i).ok());
    if (i % 64 == 0) most = std::max(most, Detail((*r)->Stats(), "elimda.empty_blocks_linked"));
  }
  return most;
}

TEST(ElimdaRecovery, EmptyBlockBatchFollowsDurability) {
  EXPECT_GE(MostEmptyBlocksLinked<Engine>(), 5);
  EXPECT_EQ(MostEmptyBlocksLinked<elimda::ElimDA<pm::Eadr>>(), 0);
  EXPECT_EQ(MostEmptyBlocksLinked<elimda::ElimDA<pm::Dram>>(), 0);
}

TEST(ElimdaRecovery, CloseUnlinksWaitingBlocks) {
  ScopedPath path("elimda_empty_close");
  const Options o = SmallOptions(path.path());
  std::map<Key, Value> model;
  double linked = 0, blocks = 0;
  {
    auto r = Engine::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto& ix = **r;
    for (uint64_t i = 0; i < 30000 && (i < 6000 || linked < 5); i++) {
      ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
      model[SplitMix64(i)] = i;
      linked = Detail(ix.Stats(), "elimda.empty_blocks_linked");
    }
    ASSERT_GE(linked, 5);
    blocks = Detail(ix.Stats(), "elimda.log_blocks");
    ASSERT_TRUE(ix.Close().ok());
  }
  auto r = Engine::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto& ix = **r;
  EXPECT_TRUE(ix.Stats().state_loaded);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));
  EXPECT_EQ(Detail(ix.Stats(), "elimda.empty_blocks_linked"), 0);
  EXPECT_EQ(Detail(ix.Stats(), "elimda.log_blocks"), blocks - linked);
}

// I14: under ADR a relocation's count is published later, many relocations with one header write
// and all segments with one fence, before log blocks are freed; a crash in between brings the
// relocated items back from their log slots. Under eADR each count is stored at once.
template <class E>
void CheckLateCounts(bool late) {
  ScopedPath path("elimda_late_counts");
  const Options o = SmallOptions(path.path());
  std::map<Key, Value> model;
  double relocations = 0, publishes = 0;
  for (int crash = 0; crash < 2; crash++) {
    auto r = E::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto& ix = **r;
    ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));  // CheckInvariants: no leak either
    for (uint64_t i = 0; i < 4000; i++) {
      const Key k = SplitMix64(crash * 4000 + i);
      ASSERT_TRUE(ix.Insert(k, i).ok());
      model[k] = i;
      if (i % 500 == 0) {
        ASSERT_TRUE(ix.CheckInvariants().ok()) << i;  // unpublished items: shadowed
      }
    }
    relocations += Detail(ix.Stats(), "elimda.relocations");
    publishes += Detail(ix.Stats(), "elimda.count_publishes");
    ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));
    ix.Abandon();
  }
  auto r = E::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectContents(**r, model));
  EXPECT_GT(relocations, 100);
  if (late) {
    EXPECT_GT(publishes, 0);
    EXPECT_LT(publishes * 1.5, relocations) << "a publish covers too few relocations";
  } else {
    EXPECT_EQ(publishes, 0);
  }
}

TEST(ElimdaRecovery, LateCounts) {
  CheckLateCounts<Engine>(/*late=*/true);
  CheckLateCounts<elimda::ElimDA<pm::Eadr>>(/*late=*/false);
}

TEST(ElimdaRecovery, RecoveryRebuildsDram) {
  ScopedPath path("elimda_recovery");
  const Options o = SmallOptions(path.path());
  std::map<Key, Value> model;
  std::map<Key, int> layer;
  {
    auto r = Engine::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto& ix = **r;
    for (uint64_t i = 0; i < 3000; i++) {
      const Key k = SplitMix64(i);
      ASSERT_TRUE(ix.Upsert(k, i).ok());
      model[k] = i;
      if (i % 5 == 0) {
        ASSERT_TRUE(ix.Update(SplitMix64(i / 2), i + 7).ok());
        model[SplitMix64(i / 2)] = i + 7;
      }
      if (i % 7 == 0) {
        ASSERT_TRUE(ix.Erase(SplitMix64(i / 3)).ok() || !model.count(SplitMix64(i / 3)));
        model.erase(SplitMix64(i / 3));
      }
    }
    for (const auto& [k, v] : model) layer[k] = ix.LayerOf(k);
    ix.Abandon();  // the destructor leaves the pool as a crash would
  }
  auto r = Engine::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto& ix = **r;
  EXPECT_TRUE(ix.Stats().recovered);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));
  // Same layers, but that a relocated item whose count was not published yet is back in its
  // D-bucket (I14).
  size_t back = 0;
  for (const auto& [k, l] : layer) {
    const int now = ix.LayerOf(k);
    if (l == 1 && now == 2) {
      back++;
      continue;
    }
    EXPECT_EQ(now, l) << k;
  }
  EXPECT_LT(back, layer.size() / 4);
  // And it keeps working.
  for (uint64_t i = 3000; i < 4000; i++) {
    ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
    model[SplitMix64(i)] = i;
  }
  ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));
}

TEST(ElimdaPersist, PersistCost) {
  ScopedPath path("elimda_persist");
  Options o = SmallOptions(path.path());
  o.counters = true;
  o.elimda.logs = 128;  // 1920 slots: the appends below never seal a log
  o.elimda.writer_logs = 0;  // (one writer's log would: by the keys' hashes)
  auto r = Engine::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto& ix = **r;
  ix.ResetCounters();
  for (uint64_t i = 0; i < 400; i++) ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
  TrafficStats t = ix.pool().counters().Snapshot();
  EXPECT_EQ(ix.log_swaps(), 0u);
  // One line per append, one more per move of the first line's items; and each log's first
  // block (header, then the log table word).
  const uint64_t first_blocks = static_cast<uint64_t>(Detail(ix.Stats(), "elimda.log_blocks"));
  const uint64_t moves = static_cast<uint64_t>(Detail(ix.Stats(), "elimda.first_line_moves"));
  EXPECT_GT(moves, 0u);
  EXPECT_LE(moves, 400u / 3);  // at most one per three appends of a block
  EXPECT_EQ(t.persists, 400u + moves + 2 * first_blocks);
  EXPECT_EQ(t.fences, 400u + moves + 2 * first_blocks);
  ExpectUpdateEraseOnePersistFailuresNone(ix, ix.pool().counters(), 400, 1);

  // tear_safe: the item, then its bit, and no moves.
  ScopedPath tpath("elimda_persist_tear_safe");
  Options to = o;
  to.path = tpath.path();
  to.elimda.tear_safe = true;
  auto ts = Engine::Open(to);
  ASSERT_TRUE(ts.ok()) << ts.status().ToString();
  (*ts)->ResetCounters();
  for (uint64_t i = 0; i < 400; i++) ASSERT_TRUE((*ts)->Insert(SplitMix64(i), i).ok());
  t = (*ts)->pool().counters().Snapshot();
  const uint64_t ts_blocks = static_cast<uint64_t>(Detail((*ts)->Stats(), "elimda.log_blocks"));
  EXPECT_EQ(Detail((*ts)->Stats(), "elimda.first_line_moves"), 0);
  EXPECT_EQ(t.persists, 800u + 2 * ts_blocks);
  EXPECT_EQ(t.fences, 800u + 2 * ts_blocks);

  // eADR flushes nothing for durability; the only lines written back are the write-back hints
  // of sealed blocks (their three item lines, all dirty in the cache model at this size), and
  // none with the hint off.
  for (const bool write_back : {true, false}) {
    SCOPED_TRACE(write_back ? "eadr_write_back" : "no write-back");
    ScopedPath epath(write_back ? "elimda_persist_eadr" : "elimda_persist_eadr_no_write_back");
    Options eo = o;
    eo.path = epath.path();
    eo.elimda.eadr_write_back = write_back;
    auto e = elimda::ElimDA<pm::Eadr>::Open(eo);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    (*e)->ResetCounters();
    for (uint64_t i = 0; i < 3000; i++) ASSERT_TRUE((*e)->Insert(SplitMix64(i), i).ok());
    EXPECT_GT((*e)->relocations(), 0u);
    const uint64_t swaps = (*e)->log_swaps();
    EXPECT_GT(swaps, 0u);
    EXPECT_EQ((*e)->pool().counters().Snapshot().flushed_lines, write_back ? 3 * swaps : 0u);
  }
}

// A pool whose P-bucket holds a key twice (as one written by the paper's blind appends would):
// the older copy wins everywhere, recovery counts the key once, and the split of its segment
// drops the newer copy; Erase removes both.
TEST(ElimdaDuplicates, FirstCopyWinsAndSplitDropsDuplicates) {
  ScopedPath path("elimda_dups");
  const Options o = SmallOptions(path.path());
  std::map<Key, Value> model;
  std::vector<Key> dup_keys;
  {
    auto r = Engine::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto& ix = **r;
    for (uint64_t i = 0; i < 400; i++) {
      ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
      model[SplitMix64(i)] = i;
    }
    for (const auto& [k, v] : model) {
      if (ix.LayerOf(k) == 1 && ix.AppendCopyForTest(k, v + 1000).ok()) dup_keys.push_back(k);
      if (dup_keys.size() == 6) break;
    }
    ASSERT_GE(dup_keys.size(), 2u);
    ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));
    ix.Abandon();
  }
  auto r = Engine::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto& ix = **r;
  ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));
  ASSERT_TRUE(ix.Erase(dup_keys[0]).ok());
  model.erase(dup_keys[0]);
  Value v;
  EXPECT_TRUE(ix.Find(dup_keys[0], &v).IsNotFound()) << "an erase must remove every copy";
  for (uint64_t i = 400; i < 4000; i++) {
    ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
    model[SplitMix64(i)] = i;
  }
  EXPECT_GE(ix.duplicates_dropped(), dup_keys.size() - 1);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));
}

// I13: the shadows of relocated items. The invariants (CheckInvariants: every stale bit has one
// valid shadow entry naming the P-bucket slot that holds its item) are checked after each op.
TEST(ElimdaShadows, EraseClearsUpdateLeavesCompactionRenumbers) {
  ScopedPath path("elimda_shadows");
  Options o = SmallOptions(path.path());
  o.counters = true;
  o.elimda.logs = 2;
  // Too small to split for long: relocations then compact P-buckets (ElimdaCrash's geometry).
  o.pool_size = 4096 + 40 * 256;
  std::map<Key, Value> model;
  uint64_t shadowed_erases = 0, plain_erases = 0, updates = 0, compactions_with_shadows = 0;
  uint64_t publishing_updates = 0;  // I14: an update of an item whose count was not published
  {
    auto r = Engine::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto& ix = **r;
    for (uint64_t i = 0; i < 2000; i++) {
      const Key k = SplitMix64(i);
      const double compactions = Detail(ix.Stats(), "elimda.compactions");
      const double shadows = Detail(ix.Stats(), "elimda.shadow_entries");
      const Status st = ix.Insert(k, i);
      if (st.IsOutOfSpace()) break;
      ASSERT_TRUE(st.ok()) << st.ToString();
      model[k] = i;
      if (Detail(ix.Stats(), "elimda.compactions") > compactions && shadows > 0) {
        compactions_with_shadows++;
      }
      // Every third key of the PM table: an update (one fence, two if it publishes its
      // segment's counts first: I14; the shadow stays), then every other one of those erased
      // (two fences if it had a shadow, else one).
      const Key old = SplitMix64(i / 2);
      if (i % 3 == 0 && model.count(old) && ix.LayerOf(old) == 1) {
        ix.ResetCounters();
        const double cleared = Detail(ix.Stats(), "elimda.shadows_cleared");
        const double publishes = Detail(ix.Stats(), "elimda.count_publishes");
        ASSERT_TRUE(ix.Update(old, i + 1).ok());
        const bool published = Detail(ix.Stats(), "elimda.count_publishes") > publishes;
        publishing_updates += published;
        EXPECT_EQ(ix.pool().counters().Snapshot().fences, published ? 2u : 1u);
        EXPECT_EQ(Detail(ix.Stats(), "elimda.shadows_cleared"), cleared) << "an update left it";
        model[old] = i + 1;
        updates++;
        if (i % 2 == 0) {
          ix.ResetCounters();
          ASSERT_TRUE(ix.Erase(old).ok());
          const bool had = Detail(ix.Stats(), "elimda.shadows_cleared") > cleared;
          EXPECT_EQ(ix.pool().counters().Snapshot().fences, had ? 2u : 1u);
          (had ? shadowed_erases : plain_erases)++;
          model.erase(old);
        }
      }
      const Status inv = ix.CheckInvariants();
      ASSERT_TRUE(inv.ok()) << "after op " << i << ": " << inv.ToString();
    }
    EXPECT_GT(shadowed_erases, 0u);
    EXPECT_GT(plain_erases, 0u);
    EXPECT_GT(updates, 0u);
    EXPECT_GT(publishing_updates, 0u);
    EXPECT_LT(publishing_updates, updates);
    EXPECT_GT(compactions_with_shadows, 0u) << "no compaction while shadows were listed";
    EXPECT_GT(Detail(ix.Stats(), "elimda.shadow_entries"), 0);
    ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));
    ix.Abandon();  // a crash: recovery clears the stale bits (I5)
  }
  {
    auto r = Engine::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectContents(**r, model));
    EXPECT_EQ(Detail((*r)->Stats(), "elimda.shadow_entries"), 0);
  }
}

// I13 and I12: Close clears every stale bit, so the image names none, and the next open loads it.
TEST(ElimdaShadows, CloseClearsStaleBits) {
  ScopedPath path("elimda_shadows_close");
  const Options o = SmallOptions(path.path());
  std::map<Key, Value> model;
  {
    auto r = Engine::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto& ix = **r;
    for (uint64_t i = 0; i < 6000; i++) {
      ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
      model[SplitMix64(i)] = i;
      if (i % 3 == 0 && model.erase(SplitMix64(i / 2))) {
        ASSERT_TRUE(ix.Erase(SplitMix64(i / 2)).ok());
      }
    }
    EXPECT_GT(Detail(ix.Stats(), "elimda.shadow_entries"), 0);
    // Most relocated items erased: their entries, left in lists no relocation rewrites, are
    // pruned by a pass over every list when they become most of all.
    for (uint64_t i = 0; i < 6000; i++) {
      if (i % 3 != 0 && model.erase(SplitMix64(i))) {
        ASSERT_TRUE(ix.Erase(SplitMix64(i)).ok());
      }
    }
    for (uint64_t i = 6000; i < 10000; i++) {
      ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
      model[SplitMix64(i)] = i;
    }
    EXPECT_GT(Detail(ix.Stats(), "elimda.shadow_prunes"), 0) << "no pass over every list";
    ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));
    ASSERT_TRUE(ix.Close().ok());
  }
  {
    auto r = Engine::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto& ix = **r;
    EXPECT_TRUE(ix.Stats().state_loaded);
    ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));  // CheckInvariants: no stale bit in PM
    // Erases after the clean open find no shadow to clear; a crash after them keeps them erased.
    for (uint64_t i = 0; i < 6000; i += 2) {
      if (model.erase(SplitMix64(i))) {
        ASSERT_TRUE(ix.Erase(SplitMix64(i)).ok());
      }
    }
    ix.Abandon();
  }
  auto r = Engine::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectContents(**r, model));
}

// One word of the pool overwritten. After a crash the open walks PM and must refuse it. After a
// clean Close the open loads the saved state (I12) and reads no bucket or block but the log
// table: it refuses what it reads, opens otherwise, and then every operation stays bounded and
// CheckInvariants (`pmhash check`) reports the damage.
// The paper's 8192 collecting logs are its eADR configuration; under ADR its appends go to a
// sequential backup log (3.7): a new ADR pool without a `logs` gets few.
TEST(ElimdaStripes, DefaultLogsFollowDurability) {
  ScopedPath path("elimda_default_logs");
  Options o;
  o.path = path.path();
  o.pool_size = uint64_t{64} << 20;
  {
    auto r = elimda::ElimDA<pm::Adr>::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)->logs(), 4u);
    EXPECT_TRUE((*r)->writer_logs());  // the paper's ADR mode: a backup log per writer
    EXPECT_TRUE((*r)->shared_logs());  // 8192 stripes over 4 logs
    ASSERT_TRUE((*r)->Close().ok());
  }
  {
    Options again = o;
    again.elimda.lock_stripes = 2;  // fewer stripes than logs: still shared (writer logs)
    auto r = elimda::ElimDA<pm::Adr>::Open(again);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)->logs(), 4u) << "a reopen keeps the pool's logs";
    EXPECT_TRUE((*r)->writer_logs()) << "and its writer_logs";
    EXPECT_TRUE((*r)->shared_logs());
    ASSERT_TRUE((*r)->Close().ok());
  }
  {
    Options again = o;
    again.elimda.writer_logs = 0;
    auto r = elimda::ElimDA<pm::Adr>::Open(again);
    EXPECT_TRUE(r.status().IsInvalidArgument()) << "a pool property: " << r.status().ToString();
  }
  ASSERT_EQ(unlink(path.path().c_str()), 0);
  {
    Options hashed = o;
    hashed.elimda.writer_logs = 0;
    hashed.elimda.lock_stripes = 2;  // fewer stripes than logs: one per log
    auto r = elimda::ElimDA<pm::Adr>::Open(hashed);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE((*r)->writer_logs());
    EXPECT_FALSE((*r)->shared_logs());
    ASSERT_TRUE((*r)->Close().ok());
  }
  ASSERT_EQ(unlink(path.path().c_str()), 0);
  {
    auto r = elimda::ElimDA<pm::Eadr>::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)->logs(), 8192u);
    EXPECT_FALSE((*r)->writer_logs());
    EXPECT_FALSE((*r)->shared_logs());
    ASSERT_TRUE((*r)->Close().ok());
  }
  ASSERT_EQ(unlink(path.path().c_str()), 0);
  {
    Options bad = o;
    bad.elimda.writer_logs = 2;
    EXPECT_TRUE(elimda::ElimDA<pm::Adr>::Open(bad).status().IsInvalidArgument());
  }
  {
    Options given = o;
    given.elimda.logs = 64;
    auto r = elimda::ElimDA<pm::Adr>::Open(given);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)->logs(), 64u);
    ASSERT_TRUE((*r)->Close().ok());
  }
  Options dram;
  dram.pool_size = uint64_t{64} << 20;
  auto d = elimda::ElimDA<pm::Dram>::Open(dram);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->logs(), 8192u);
  for (const uint32_t bad : {0u, 3u, (1u << 20) + 1, 1u << 21}) {
    Options b = o;
    b.elimda.lock_stripes = bad;
    EXPECT_TRUE(elimda::ElimDA<pm::Adr>::Open(b).status().IsInvalidArgument()) << bad;
  }
}

// Writers and readers of disjoint key ranges, with logs shared by many stripes (one log, two),
// one stripe per log, and the default: every thread's keys exact afterwards, the invariants
// hold, and a crash (Abandon) recovers them all (the stripes' searches then start from the
// recovered active blocks). Named *Concurrent*: in the TSan set.
TEST(ElimdaStripes, ConcurrentLogsSharedOrNot) {
  struct Shape {
    uint32_t logs, stripes, writer;
  };
  for (const Shape shape : {Shape{1, 8192, 1}, Shape{2, 64, 1}, Shape{4, 1, 1}, Shape{2, 64, 0},
                            Shape{4, 4, 0}, Shape{4, 1, 0}}) {
    SCOPED_TRACE("logs " + std::to_string(shape.logs) + ", stripes " +
                 std::to_string(shape.stripes) + ", writer logs " + std::to_string(shape.writer));
    ScopedPath path("elimda_stripes");
    Options o = SmallOptions(path.path());
    o.elimda.logs = shape.logs;
    o.elimda.lock_stripes = shape.stripes;
    o.elimda.writer_logs = shape.writer;
    const int nt = 3;
    const uint64_t per = Scaled(20000, 8);
    std::vector<std::map<Key, Value>> models(nt);
    {
      auto r = Engine::Open(o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      auto& ix = **r;
      EXPECT_EQ(ix.writer_logs(), shape.writer == 1);
      EXPECT_EQ(ix.shared_logs(), shape.stripes > shape.logs || shape.writer == 1);
      Errors errors;
      std::vector<std::thread> ts;
      for (int t = 0; t < nt; t++) {
        ts.emplace_back([&, t] {
          std::map<Key, Value>& model = models[t];
          auto key = [&](uint64_t i) { return SplitMix64(i * nt + t); };
          for (uint64_t i = 0; i < per; i++) {
            const Key k = key(i);
            if (!ix.Insert(k, i).ok()) errors.Add("insert " + std::to_string(k));
            model[k] = i;
            Value got = 0;
            if (i % 4 == 1 && model.count(key(i / 2)) &&
                (!ix.Find(key(i / 2), &got).ok() || got != model[key(i / 2)])) {
              errors.Add("find+");
            }
            if (i % 4 == 2 && !ix.Find(key(per + i), &got).IsNotFound()) errors.Add("find-");
            if (i % 5 == 3 && model.count(key(i / 3))) {
              if (!ix.Update(key(i / 3), i + 1).ok()) errors.Add("update");
              model[key(i / 3)] = i + 1;
            }
            if (i % 7 == 6 && model.erase(key(i / 2))) {
              if (!ix.Erase(key(i / 2)).ok()) errors.Add("erase");
            }
          }
        });
      }
      for (auto& th : ts) th.join();
      ASSERT_FALSE(errors.any()) << errors.Report();
      std::map<Key, Value> all;
      for (const auto& m : models) all.insert(m.begin(), m.end());
      ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, all));
      ix.Abandon();
    }
    auto r = Engine::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::map<Key, Value> all;
    for (const auto& m : models) all.insert(m.begin(), m.end());
    ASSERT_NO_FATAL_FAILURE(ExpectContents(**r, all));
  }
}

// Writer logs (ADR's default, W1): one writer's appends all go to one log, each new writer
// takes the next log; a key's search follows its stripe to the log it was appended to. A crash
// and a reopen with as many stripes keeps every key with no seal at open; a reopen with fewer
// stripes (two), so that one stripe has items in two active blocks, seals those blocks first.
// A key forged into a second log's active block is "logged twice".
TEST(ElimdaStripes, WriterLogsOnePerWriter) {
  ScopedPath path("elimda_writer_logs");
  Options o = SmallOptions(path.path());
  const Hasher hasher(HashMode::kStrong, *o.hash_seed);
  // Keys whose hash's top bit is 0: with two lock stripes, all of them are in stripe 0.
  std::vector<Key> keys;
  for (uint64_t i = 0; keys.size() < 3000; i++) {
    if ((hasher(SplitMix64(i)) >> 63) == 0) keys.push_back(SplitMix64(i));
  }
  std::map<Key, Value> model;
  auto write = [&](auto& ix, size_t from, size_t to) {  // on a thread of its own: a new writer
    std::thread([&] {
      for (size_t i = from; i < to; i++) {
        ASSERT_TRUE(ix.Insert(keys[i], i).ok());
        model[keys[i]] = i;
      }
    }).join();
  };
  uint64_t table = 0;
  {
    auto r = Engine::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto& ix = **r;
    ASSERT_TRUE(ix.writer_logs());
    ASSERT_EQ(ix.logs(), 4u);
    write(ix, 0, 2000);
    EXPECT_EQ(Detail(ix.Stats(), "elimda.active_logs"), 1) << "one writer, one log";
    EXPECT_GT(ix.log_swaps(), 100u);
    write(ix, 2000, 2020);
    EXPECT_EQ(Detail(ix.Stats(), "elimda.active_logs"), 2) << "a second writer, a second log";
    ASSERT_NO_FATAL_FAILURE(ExpectContents(ix, model));
    table = ix.pool().root(1);
    ix.Abandon();
  }
  const std::vector<uint8_t> crashed = ReadFile(path.path());
  uint64_t block[2] = {0, 0};
  ASSERT_TRUE(ReadAt(path.path(), table, block, 16));
  ASSERT_NE(block[0], 0u);
  ASSERT_NE(block[1], 0u);
  {
    SCOPED_TRACE("a key logged in two logs");
    uint64_t hdr[2];
    ASSERT_TRUE(ReadAt(path.path(), block[0], &hdr[0], 8));
    ASSERT_TRUE(ReadAt(path.path(), block[1], &hdr[1], 8));
    const uint32_t from_bits = static_cast<uint32_t>(hdr[0] & 0x7FFF);
    const uint32_t to_bits = static_cast<uint32_t>(hdr[1] & 0x7FFF);
    ASSERT_NE(from_bits, 0u);
    ASSERT_NE(to_bits, 0x7FFFu);
    const int from = std::countr_zero(from_bits);
    const int to = std::countr_zero(~to_bits);
    uint64_t item[2];
    ASSERT_TRUE(ReadAt(path.path(), block[0] + 16 + 16 * from, item, 16));
    ASSERT_TRUE(PatchFile(path.path(), block[1] + 16 + 16 * to, item, 16));
    hdr[1] |= uint64_t{1} << to;
    ASSERT_TRUE(PatchFile(path.path(), block[1], &hdr[1], 8));
    auto r = Engine::Open(o);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().ToString().find("logged twice"), std::string::npos)
        << r.status().ToString();
    ASSERT_TRUE(WriteFile(path.path(), crashed));
  }
  {
    auto r = Engine::Open(o);  // as many stripes: each is in one active block
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(Detail((*r)->Stats(), "elimda.writer_settle_seals"), 0);
    ASSERT_NO_FATAL_FAILURE(ExpectContents(**r, model));
    (*r)->Abandon();
  }
  {
    Options two = o;
    two.elimda.lock_stripes = 2;
    auto r = Engine::Open(two);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(Detail((*r)->Stats(), "elimda.writer_settle_seals"), 1)
        << "stripe 0 had items in both active blocks";
    ASSERT_NO_FATAL_FAILURE(ExpectContents(**r, model));
    write(**r, 2020, 3000);
    ASSERT_NO_FATAL_FAILURE(ExpectContents(**r, model));
    (*r)->Abandon();
  }
  {
    auto r = Engine::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectContents(**r, model));
    ASSERT_TRUE((*r)->Close().ok());
  }
  auto r = Engine::Open(o);  // the saved state (I12), settled the same way
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)->Stats().state_loaded);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(**r, model));
}

TEST(ElimdaHostile, CorruptWordsAreRefused) {
  ScopedPath path("elimda_hostile");
  Options o = SmallOptions(path.path());
  o.durability = Durability::kAdr;
  uint64_t seg = 0, table = 0, block = 0;
  {
    auto r = Engine::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (uint64_t i = 0; i < 500; i++) ASSERT_TRUE((*r)->Insert(SplitMix64(i), i).ok());
    (*r)->Abandon();
  }
  const std::vector<uint8_t> crashed = ReadFile(path.path());
  {
    auto r = Engine::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    seg = (*r)->pool().root(0);
    table = (*r)->pool().root(1);
    ASSERT_TRUE(ReadAt(path.path(), table, &block, 8));
    ASSERT_TRUE((*r)->Close().ok());
  }
  ASSERT_NE(block, 0u);
  const std::vector<uint8_t> clean = ReadFile(path.path());
  struct Patch {
    const char* what;
    uint64_t offset;
    uint64_t value;
  };
  const Patch patches[] = {
      {"segment header word", seg, 0x1234},
      {"segment next offset (misaligned)", seg + 8, seg + 3},
      {"segment next offset (outside the heap)", seg + 8, uint64_t{1} << 40},
      {"segment bucket count", seg + 16, 1000},
      {"log table word (misaligned)", table, block + 8},
      {"log table word (outside the heap)", table, uint64_t{1} << 41},
      {"log block header word", block, 0xFFFF},
      {"log chain (a cycle)", block + 8, block},
  };
  for (const Patch& p : patches) {
    SCOPED_TRACE(p.what);
    ASSERT_TRUE(WriteFile(path.path(), crashed));
    ASSERT_TRUE(PatchFile(path.path(), p.offset, &p.value, 8));
    auto r = Engine::Open(o);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
  }
  int loaded = 0;
  for (const Patch& p : patches) {
    SCOPED_TRACE(std::string("clean: ") + p.what);
    ASSERT_TRUE(WriteFile(path.path(), clean));
    ASSERT_TRUE(PatchFile(path.path(), p.offset, &p.value, 8));
    auto r = Engine::Open(o);
    if (!r.ok()) {
      EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
      continue;
    }
    loaded += (*r)->Stats().state_loaded;
    for (uint64_t i = 0; i < 500; i++) {
      Value v = 0;
      (void)(*r)->Find(SplitMix64(i), &v);
    }
    const Status inv = (*r)->CheckInvariants();
    EXPECT_TRUE(inv.IsCorruption()) << inv.ToString();
    (*r)->Abandon();
  }
  EXPECT_GT(loaded, 0) << "some damage is only found by CheckInvariants after a clean Close";
  // A key logged twice: the first log block's first item copied into a free slot of the same
  // block, its valid bit set (a log never holds a key twice: Insert checks every layer first).
  {
    SCOPED_TRACE("a key logged twice");
    ASSERT_TRUE(WriteFile(path.path(), crashed));
    uint64_t hdr = 0;
    ASSERT_TRUE(ReadAt(path.path(), block, &hdr, 8));
    const uint32_t bits = static_cast<uint32_t>(hdr & 0x7FFF);
    ASSERT_NE(bits, 0u);
    ASSERT_NE(bits, 0x7FFFu) << "the block has a free slot";
    const int from = std::countr_zero(bits);
    const int to = std::countr_zero(~bits);
    uint64_t item[2];
    ASSERT_TRUE(ReadAt(path.path(), block + 16 + 16 * from, item, 16));
    ASSERT_TRUE(PatchFile(path.path(), block + 16 + 16 * to, item, 16));
    hdr |= uint64_t{1} << to;
    ASSERT_TRUE(PatchFile(path.path(), block, &hdr, 8));
    auto r = Engine::Open(o);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
    EXPECT_NE(r.status().ToString().find("logged twice"), std::string::npos)
        << r.status().ToString();
  }
  ASSERT_TRUE(WriteFile(path.path(), clean));
  auto r = Engine::Open(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->Size(), 500u);
  EXPECT_TRUE((*r)->Stats().state_loaded);
  EXPECT_TRUE((*r)->CheckInvariants().ok());
}

}  // namespace
}  // namespace pmhash::testing
