// tests/conformance_suite.h — the HashIndex contract (include/pmhash/index.h), written once as a
// type-parameterized test suite. It is instantiated for every unique-key kind of
// src/index/kinds.h (AllEngines, engine_types.h: the multimaps, Capabilities::multi, have their
// own contract and suites in tests/multi_test.cc) in one file per durability policy
// (conformance_<policy>.cc, so that the typed cases compile in parallel), and for the
// OracleIndex (tests/oracle_index.h) in conformance_test.cc, which proves
// the tests themselves.
//
// Adding an index: nothing to do here (the type lists derive from IndexKinds). If it needs a
// small geometry (so that splits happen within a few thousand keys) or a different tiny-pool
// size, specialise IndexTraits<> for it next to the REH one; the defaults fit any index with a
// pmhash::pm::Pool behind a `pool()` accessor, registered under T::kKindName.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine_types.h"
#include "index/elimda/elimda.h"
#include "index/pea/pea.h"
#include "index/reh/reh.h"
#include "index/smartht/smartht.h"
#include "index/turbo/turbo.h"
#include "index_adapter.h"
#include "oracle_index.h"
#include "pm/persist.h"
#include "pmhash/pmhash.h"
#include "test_util.h"

namespace pmhash::testing {
namespace {

using Model = std::unordered_map<Key, Value>;
constexpr Key kMaxKey = std::numeric_limits<Key>::max();

// ============================================================================================
// Per-index traits
// ============================================================================================

template <class T>
struct DefaultTraits {
  // Whether Close + reopen (and destroy + recover) is meaningful for this type.
  static constexpr bool kReopenable = T::Policy::kPersistent;
  // A geometry that makes the index split and grow within a few thousand keys.
  static void SmallGeometry(Options*) {}
  // After out of space, erasing keys frees room for exactly those keys (single-choice buckets).
  static constexpr bool kErasedKeysAlwaysRefit = true;
  // Otherwise, at least this fraction of them (in quarters) must fit again.
  static constexpr int kMinRefitQuarters = 3;
  // Pool size for the out-of-space test: a few hundred to a few thousand pairs.
  static uint64_t TinyPoolBytes() { return 32 << 10; }
  // Mapping address of the index's pool (nullptr if it has none).
  static const void* Base(T& t) {
    if constexpr (requires { t.pool().base(); }) {
      return t.pool().base();
    } else {
      return nullptr;
    }
  }
  static uint64_t MappedBytes(T& t) {
    if constexpr (requires { t.pool().size(); }) {
      return t.pool().size();
    } else {
      return 0;
    }
  }
  // The type-erased facade for the same kind and durability.
  static Result<std::unique_ptr<Index>> OpenFacade(const Options& o) {
    return pmhash::Open(T::kKindName, o);
  }
};

template <class T>
struct IndexTraits : DefaultTraits<T> {};

template <class P, bool R>
struct IndexTraits<reh::Reh<P, R>> : DefaultTraits<reh::Reh<P, R>> {
  static void SmallGeometry(Options* o) {
    o->reh.initial_depth = 1;  // 2 buckets of 15 slots: the first split comes at ~16 keys
    o->reh.max_depth = 32;
  }
};

template <class P, bool R>
struct IndexTraits<pea::Pea<P, R>> : DefaultTraits<pea::Pea<P, R>> {
  static void SmallGeometry(Options* o) {
    // 4 buckets of 15 slots per segment: every transition (single -> 2-choice -> stash), 4-way
    // splits and directory expansions happen within the first few hundred keys.
    o->pea.segment_buckets = 4;
    o->pea.initial_depth = 0;
    o->pea.max_depth = 32;
  }
  // 2-choice + stash: a freed slot can be taken by another key's balanced insert.
  static constexpr bool kErasedKeysAlwaysRefit = false;
};

// TurboHash: 4 shards of 2 buckets (the paper's 16-bucket scope), so shard rehashes (and, after
// erases, garbage collections) start within a few dozen keys.
template <class P, bool R>
struct IndexTraits<turbo::Turbo<P, R>> : DefaultTraits<turbo::Turbo<P, R>> {
  static void SmallGeometry(Options* o) {
    o->turbo.shard_bits = 2;
    o->turbo.initial_buckets = 2;
    o->turbo.probe_scope = 16;
    o->turbo.max_shard_buckets = 1u << 20;
  }
};

// SmartHT: 4 heads growing at 3 keys per head: chained buckets and head-array doublings within
// the first few dozen keys; filter rebuilds after a quarter of the keys are erased.
template <class P, bool R>
struct IndexTraits<smartht::SmartHt<P, R>> : DefaultTraits<smartht::SmartHt<P, R>> {
  static void SmallGeometry(Options* o) {
    o->smartht.head_bits = 2;
    o->smartht.max_head_bits = 24;
  }
};

// ElimDA: 2 P-buckets of 32 items per segment, D-buckets of 16, 4 collecting logs of 15 items:
// log swaps from the 16th insert, relocations and splits within a few hundred keys.
template <class P, bool R>
struct IndexTraits<elimda::ElimDA<P, R>> : DefaultTraits<elimda::ElimDA<P, R>> {
  static void SmallGeometry(Options* o) {
    o->elimda.bucket_items = 32;
    o->elimda.dbucket_items = 16;
    o->elimda.segment_buckets = 2;
    o->elimda.logs = 4;
    o->elimda.initial_depth = 1;
    o->elimda.max_depth = 32;
  }
  // Erased PM-table items leave tombstones until their bucket is compacted. elimda-kv: an erase
  // frees a record's slot in its slab, not a chunk, and a re-insert needs whole chunks for new
  // log blocks, so in a full pool fewer erased keys fit again (60% measured; the others
  // are refused with kOutOfSpace, cleanly).
  static constexpr bool kErasedKeysAlwaysRefit = false;
  static constexpr int kMinRefitQuarters = R ? 2 : 3;
  static uint64_t TinyPoolBytes() { return 48 << 10; }
};

template <>
struct IndexTraits<OracleIndex> : DefaultTraits<OracleIndex> {
  static constexpr bool kReopenable = true;  // it saves itself to Options::path
  static Result<std::unique_ptr<Index>> OpenFacade(const Options& o) {
    return OpenWrapped<OracleIndex>(o);  // not in the registry: wrap it directly
  }
};

// ============================================================================================
// Fixture
// ============================================================================================

template <class T>
class ConformanceTest : public ::testing::Test {
 protected:
  using Traits = IndexTraits<T>;

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = TempPoolPath(std::string(info->test_suite_name()) + "_" + info->name());
  }
  void TearDown() override {
    idx_.reset();
    unlink(path_.c_str());
  }

  Options MakeOptions(HashMode mode = HashMode::kStrong) const {
    Options o;
    o.path = path_;
    o.pool_size = uint64_t{256} << 20;  // sparse on tmpfs
    o.mode = OpenMode::kOpenOrCreate;
    o.durability = T::Policy::kDurability;
    o.hash_mode = mode;
    // A fixed hash seed (PMHASH_TEST_SEED overrides it). With a random one, colliding-hash runs
    // differ from run to run, and some seeds (2 of 150 tried) put 16 keys of equal 27-bit hash
    // prefixes into DestroyWithoutCloseRecovers: REH then refuses the insert (kOutOfSpace: its
    // directory would pass Options::max_directory_bytes), as designed.
    o.hash_seed = TestSeed(0x5eed);
    Traits::SmallGeometry(&o);
    return o;
  }

  // Opens idx_ (fatal failure on error).
  void OpenIdx(const Options& o) {
    idx_.reset();
    auto r = T::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    idx_ = std::move(r).value();
    ASSERT_NE(idx_, nullptr);
  }

  // Close (clean) or just destroy (crash of the process state), then reopen the same pool.
  void Reopen(Options o, bool clean) {
    ASSERT_NE(idx_, nullptr);
    if (clean) {
      Status s = idx_->Close();
      ASSERT_TRUE(s.ok()) << s.ToString();
    } else {
      idx_->Abandon();  // the destructor would close
    }
    idx_.reset();
    o.mode = OpenMode::kOpenExisting;
    ASSERT_NO_FATAL_FAILURE(OpenIdx(o));
    EXPECT_EQ(idx_->Stats().recovered, !clean);
  }

  // The index holds exactly `m`: Size, Stats().size, ForEach, Find of every pair, invariants.
  void ExpectMatches(const Model& m) {
    ASSERT_NE(idx_, nullptr);
    Status inv = idx_->CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv.ToString();
    ASSERT_EQ(idx_->Size(), m.size());
    ASSERT_EQ(idx_->Stats().size, m.size());
    Model seen;
    uint64_t visits = 0;
    Key dup = 0;
    bool has_dup = false;
    const Status scanned = idx_->ForEach([&](Key k, Value v) {
      visits++;
      if (!seen.emplace(k, v).second && !has_dup) {
        has_dup = true;
        dup = k;
      }
    });
    ASSERT_TRUE(scanned.ok()) << scanned.ToString();
    ASSERT_FALSE(has_dup) << "ForEach visited key " << dup << " twice";
    ASSERT_EQ(visits, m.size()) << "ForEach count != oracle size";
    for (const auto& [k, v] : m) {
      auto it = seen.find(k);
      ASSERT_TRUE(it != seen.end()) << "ForEach missed key " << k;
      ASSERT_EQ(it->second, v) << "ForEach value of key " << k;
      Value got = ~v;
      Status s = idx_->Find(k, &got);
      ASSERT_TRUE(s.ok()) << "Find(" << k << "): " << s.ToString();
      ASSERT_EQ(got, v) << "Find(" << k << ")";
    }
    ASSERT_NO_FATAL_FAILURE(ExpectBatchMatches(m));
  }

  // FindBatch over every key of the model and as many absent ones, interleaved, in batches of
  // varied sizes (1, partial groups, whole groups, several groups): each result as the model's.
  void ExpectBatchMatches(const Model& m) {
    std::vector<Key> keys;
    keys.reserve(2 * m.size());
    uint64_t absent = 0x9e3779b97f4a7c15;
    for (const auto& kv : m) {
      keys.push_back(kv.first);
      while (m.contains(absent)) absent = SplitMix64(absent);
      keys.push_back(absent);
      absent = SplitMix64(absent);
    }
    constexpr Value kUntouched = 0xDEADBEEF;
    std::vector<Value> values(keys.size(), kUntouched);
    std::vector<Status> statuses(keys.size(), Status::Corruption("not written"));
    static constexpr size_t kSizes[] = {1, 5, 16, 17, 64, 3, 33};
    for (size_t first = 0, n = 0; first < keys.size(); first += n) {
      n = std::min(kSizes[(first / 7) % std::size(kSizes)], keys.size() - first);
      Status s = idx_->FindBatch(std::span<const Key>(keys).subspan(first, n),
                                 std::span<Value>(values).subspan(first, n),
                                 std::span<Status>(statuses).subspan(first, n));
      ASSERT_TRUE(s.ok()) << "FindBatch: " << s.ToString();
    }
    for (size_t i = 0; i < keys.size(); i++) {
      const auto it = m.find(keys[i]);
      if (it != m.end()) {
        ASSERT_TRUE(statuses[i].ok()) << "FindBatch, key " << keys[i] << ": "
                                      << statuses[i].ToString();
        ASSERT_EQ(values[i], it->second) << "FindBatch, key " << keys[i];
      } else {
        ASSERT_TRUE(statuses[i].IsNotFound()) << "FindBatch, absent key " << keys[i] << ": "
                                              << statuses[i].ToString();
        ASSERT_EQ(values[i], kUntouched) << "FindBatch wrote the value of absent key " << keys[i];
      }
    }
    // Spans shorter than the keys: refused, nothing written.
    if (!keys.empty()) {
      Value v = kUntouched;
      Status st;
      Status s = idx_->FindBatch(keys, std::span<Value>(&v, 1), std::span<Status>(&st, 1));
      if (keys.size() > 1) {
        ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
        ASSERT_EQ(v, kUntouched);
      }
    }
  }

  enum Op { kInsert, kUpdate, kUpsert, kFind, kErase, kNumOps };

  // One randomized phase: `ops` operations with weights `w` over keys[], checked op by op
  // against `model`.
  void RunPhase(std::mt19937_64& rng, const std::vector<Key>& keys, const int (&w)[kNumOps],
                uint64_t ops, Model& model) {
    int total = 0;
    for (int x : w) total += x;
    for (uint64_t i = 0; i < ops; i++) {
      int r = static_cast<int>(rng() % static_cast<uint64_t>(total));
      int op = 0;
      while (r >= w[op]) r -= w[op++];
      const Key k = keys[rng() % keys.size()];
      const Value v = rng();
      auto it = model.find(k);
      const bool present = it != model.end();
      switch (op) {
        case kInsert: {
          Status s = idx_->Insert(k, v);
          if (present) {
            ASSERT_TRUE(s.IsExists()) << "op " << i << " Insert(" << k << "): " << s.ToString();
          } else {
            ASSERT_TRUE(s.ok()) << "op " << i << " Insert(" << k << "): " << s.ToString();
            model.emplace(k, v);
          }
          break;
        }
        case kUpdate: {
          Status s = idx_->Update(k, v);
          if (present) {
            ASSERT_TRUE(s.ok()) << "op " << i << " Update(" << k << "): " << s.ToString();
            it->second = v;
          } else {
            ASSERT_TRUE(s.IsNotFound()) << "op " << i << " Update(" << k << "): " << s.ToString();
          }
          break;
        }
        case kUpsert: {
          Status s = idx_->Upsert(k, v);
          ASSERT_TRUE(s.ok()) << "op " << i << " Upsert(" << k << "): " << s.ToString();
          model[k] = v;
          break;
        }
        case kFind: {
          Value got = 0;
          Status s = idx_->Find(k, &got);
          if (present) {
            ASSERT_TRUE(s.ok()) << "op " << i << " Find(" << k << "): " << s.ToString();
            ASSERT_EQ(got, it->second) << "op " << i << " Find(" << k << ")";
          } else {
            ASSERT_TRUE(s.IsNotFound()) << "op " << i << " Find(" << k << "): " << s.ToString();
          }
          break;
        }
        case kErase: {
          Status s = idx_->Erase(k);
          if (present) {
            ASSERT_TRUE(s.ok()) << "op " << i << " Erase(" << k << "): " << s.ToString();
            model.erase(it);
          } else {
            ASSERT_TRUE(s.IsNotFound()) << "op " << i << " Erase(" << k << "): " << s.ToString();
          }
          break;
        }
      }
    }
  }

  // `ops` random writes over keys[], sent through WriteBatch in batches of 1..48 (a key often
  // twice in one batch), each status checked against `model` applied op by op in batch order.
  void RunBatchedWrites(std::mt19937_64& rng, const std::vector<Key>& keys, uint64_t ops,
                        Model& model) {
    std::vector<WriteOp> batch;
    std::vector<Status> statuses;
    for (uint64_t done = 0; done < ops;) {
      const size_t n = std::min<uint64_t>(1 + rng() % 48, ops - done);
      batch.clear();
      for (size_t i = 0; i < n; i++) {
        WriteOp op;
        op.kind = static_cast<WriteKind>(rng() % 4);
        // One op in four reuses a key of this batch: ops on one key apply in order.
        op.key = (i > 0 && rng() % 4 == 0) ? batch[rng() % i].key : keys[rng() % keys.size()];
        op.value = rng();
        batch.push_back(op);
      }
      statuses.assign(n, Status::Corruption("not written"));
      Status s = idx_->WriteBatch(batch, statuses);
      ASSERT_TRUE(s.ok()) << "WriteBatch: " << s.ToString();
      for (size_t i = 0; i < n; i++) {
        const WriteOp& op = batch[i];
        auto it = model.find(op.key);
        const bool present = it != model.end();
        Status want = Status::OK();
        switch (op.kind) {
          case WriteKind::kInsert:
            if (present) want = Status::Exists(); else model.emplace(op.key, op.value);
            break;
          case WriteKind::kUpdate:
            if (present) it->second = op.value; else want = Status::NotFound();
            break;
          case WriteKind::kUpsert:
            model[op.key] = op.value;
            break;
          case WriteKind::kErase:
            if (present) model.erase(it); else want = Status::NotFound();
            break;
        }
        ASSERT_EQ(statuses[i].code(), want.code())
            << "batch op " << i << " of " << n << " (kind " << static_cast<int>(op.kind)
            << ", key " << op.key << "): " << statuses[i].ToString();
      }
      done += n;
    }
  }

  void RandomOps(HashMode mode, uint64_t seed) {
    SCOPED_TRACE(SeedTrace(seed));
    std::mt19937_64 rng(seed);
    const uint64_t total_ops = Scaled(200000, 4);  // sanitizers: 50,000 (CI minutes)
    // Key universe: ~1/3 of the ops' count, so that every outcome (exists, not found) is common.
    const uint64_t range = std::max<uint64_t>(64, total_ops / 3);
    std::vector<Key> keys(range);
    if (mode == HashMode::kCollide) {
      // Dense range [0, range): groups of 8 consecutive keys share their hash above the low
      // byte, and k, k+4 share the full hash (src/common/hash.h).
      for (uint64_t i = 0; i < range; i++) keys[i] = i;
    } else {
      for (uint64_t i = 0; i < range; i++) keys[i] = SplitMix64(seed ^ (i * 0x9e37));
      const Key specials[] = {0, 1, 2, 3, kMaxKey, kMaxKey - 1, Key{1} << 63, (Key{1} << 63) - 1};
      for (size_t i = 0; i < std::size(specials); i++) keys[i] = specials[i];
    }
    Options o = MakeOptions(mode);
    ASSERT_NO_FATAL_FAILURE(OpenIdx(o));
    Model model;
    //                                 ins upd ups find erase
    const int grow[kNumOps] = /*    */ {50, 5, 15, 20, 10};
    const int mixed[kNumOps] = /*   */ {20, 20, 20, 20, 20};
    const int shrink[kNumOps] = /*  */ {10, 10, 5, 25, 50};
    const int regrow[kNumOps] = /*  */ {45, 5, 20, 20, 10};
    {
      SCOPED_TRACE("phase grow");
      ASSERT_NO_FATAL_FAILURE(RunPhase(rng, keys, grow, total_ops / 3, model));
      ASSERT_NO_FATAL_FAILURE(ExpectMatches(model));
      EXPECT_GT(idx_->Stats().splits, 0u);
    }
    {
      SCOPED_TRACE("phase mixed");
      ASSERT_NO_FATAL_FAILURE(RunPhase(rng, keys, mixed, total_ops / 4, model));
      ASSERT_NO_FATAL_FAILURE(ExpectMatches(model));
      if (Traits::kReopenable) {
        ASSERT_NO_FATAL_FAILURE(Reopen(o, /*clean=*/true));
        ASSERT_NO_FATAL_FAILURE(ExpectMatches(model));
      }
    }
    {
      SCOPED_TRACE("phase shrink");
      ASSERT_NO_FATAL_FAILURE(RunPhase(rng, keys, shrink, total_ops / 5, model));
      ASSERT_NO_FATAL_FAILURE(ExpectMatches(model));
      if (Traits::kReopenable) {
        ASSERT_NO_FATAL_FAILURE(Reopen(o, /*clean=*/false));
        ASSERT_NO_FATAL_FAILURE(ExpectMatches(model));
      }
    }
    {
      SCOPED_TRACE("phase regrow");
      const uint64_t rest = total_ops - total_ops / 3 - total_ops / 4 - total_ops / 5;
      ASSERT_NO_FATAL_FAILURE(RunPhase(rng, keys, regrow, rest, model));
      ASSERT_NO_FATAL_FAILURE(ExpectMatches(model));
    }
  }

  std::unique_ptr<T> idx_;
  std::string path_;
};

TYPED_TEST_SUITE_P(ConformanceTest);

// ============================================================================================
// Tests
// ============================================================================================

TYPED_TEST_P(ConformanceTest, BasicSemantics) {
  ASSERT_NO_FATAL_FAILURE(this->OpenIdx(this->MakeOptions()));
  auto& ix = *this->idx_;
  Value v = 12345;
  EXPECT_EQ(ix.Size(), 0u);
  EXPECT_TRUE(ix.Find(42, &v).IsNotFound());
  EXPECT_TRUE(ix.Erase(42).IsNotFound());
  EXPECT_TRUE(ix.Update(42, 1).IsNotFound());
  EXPECT_EQ(ix.Size(), 0u);

  ASSERT_TRUE(ix.Insert(42, 100).ok());
  EXPECT_EQ(ix.Size(), 1u);
  ASSERT_TRUE(ix.Find(42, &v).ok());
  EXPECT_EQ(v, 100u);

  // Insert of a present key: kExists, value unchanged.
  Status s = ix.Insert(42, 200);
  EXPECT_TRUE(s.IsExists()) << s.ToString();
  EXPECT_EQ(s.code(), Status::Code::kExists);
  ASSERT_TRUE(ix.Find(42, &v).ok());
  EXPECT_EQ(v, 100u);
  EXPECT_EQ(ix.Size(), 1u);

  // Update of a present key.
  ASSERT_TRUE(ix.Update(42, 300).ok());
  ASSERT_TRUE(ix.Find(42, &v).ok());
  EXPECT_EQ(v, 300u);
  EXPECT_EQ(ix.Size(), 1u);

  // Upsert: overwrite, then insert.
  ASSERT_TRUE(ix.Upsert(42, 400).ok());
  ASSERT_TRUE(ix.Find(42, &v).ok());
  EXPECT_EQ(v, 400u);
  EXPECT_EQ(ix.Size(), 1u);
  ASSERT_TRUE(ix.Upsert(43, 500).ok());
  EXPECT_EQ(ix.Size(), 2u);
  ASSERT_TRUE(ix.Find(43, &v).ok());
  EXPECT_EQ(v, 500u);

  // Update of an absent key does not insert it.
  s = ix.Update(44, 1);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_TRUE(ix.Find(44, &v).IsNotFound());
  EXPECT_EQ(ix.Size(), 2u);

  // Erase.
  ASSERT_TRUE(ix.Erase(42).ok());
  EXPECT_TRUE(ix.Find(42, &v).IsNotFound());
  EXPECT_TRUE(ix.Erase(42).IsNotFound());
  EXPECT_TRUE(ix.Update(42, 9).IsNotFound());
  EXPECT_EQ(ix.Size(), 1u);
  ASSERT_TRUE(ix.Find(43, &v).ok());
  EXPECT_EQ(v, 500u);

  // Re-insert after erase.
  ASSERT_TRUE(ix.Insert(42, 600).ok());
  ASSERT_TRUE(ix.Find(42, &v).ok());
  EXPECT_EQ(v, 600u);
  EXPECT_EQ(ix.Size(), 2u);

  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(Model{{42, 600}, {43, 500}}));
  EXPECT_TRUE(ix.Close().ok());
  EXPECT_TRUE(ix.Close().ok()) << "Close is idempotent";
  // After Close the engine itself refuses every write (src/index/lifecycle.h; the facade has a
  // flag of its own); reads still answer.
  EXPECT_TRUE(ix.Insert(44, 1).IsInvalidArgument());
  EXPECT_TRUE(ix.Update(42, 1).IsInvalidArgument());
  EXPECT_TRUE(ix.Upsert(44, 1).IsInvalidArgument());
  EXPECT_TRUE(ix.Erase(42).IsInvalidArgument());
  const WriteOp ops[] = {{WriteKind::kUpsert, 42, 1}, {WriteKind::kErase, 43, 0}};
  Status st[std::size(ops)];
  ASSERT_TRUE(ix.WriteBatch(ops, st).ok());
  for (const Status& s : st) EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  ASSERT_TRUE(ix.Find(42, &v).ok());
  EXPECT_EQ(v, 600u);
  EXPECT_TRUE(ix.Find(44, &v).IsNotFound());
}

TYPED_TEST_P(ConformanceTest, SpecialKeysAndValues) {
  using Traits = typename TestFixture::Traits;
  for (HashMode mode : {HashMode::kStrong, HashMode::kCollide}) {
    SCOPED_TRACE(mode == HashMode::kStrong ? "strong" : "collide");
    this->idx_.reset();
    unlink(this->path_.c_str());
    const Options o = this->MakeOptions(mode);
    ASSERT_NO_FATAL_FAILURE(this->OpenIdx(o));
    auto* ix = this->idx_.get();
    std::vector<Key> specials = {kMaxKey,      kMaxKey - 1,        kMaxKey - 2,
                                 Key{1} << 63, (Key{1} << 63) - 1, Key{1} << 32,
                                 0xFFFFFFFFull};
    for (Key k = 0; k < 16; k++) specials.push_back(k);  // REH's tombstones are small keys
    Model model;
    for (Key k : specials) {
      const Value v = (k & 1) ? kMaxKey : 0;  // extreme values too
      ASSERT_TRUE(ix->Insert(k, v).ok()) << "Insert " << k;
      model[k] = v;
    }
    ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
    // Many more keys (in collide mode: the dense range right after the specials) force splits
    // while the special keys, their erased slots and their copies are in the buckets.
    const uint64_t fill = Scaled(6000);
    for (uint64_t i = 0; i < fill; i++) {
      const Key k = mode == HashMode::kCollide ? 16 + i : SplitMix64(i + 77);
      ASSERT_TRUE(ix->Insert(k, ~k).ok()) << "Insert " << k;
      model[k] = ~k;
      if (i == fill / 2) {
        for (Key s : specials) {  // erase every special key half way
          ASSERT_TRUE(ix->Erase(s).ok()) << "Erase " << s;
          model.erase(s);
        }
        ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
        for (Key s : specials) {
          Value got;
          ASSERT_TRUE(ix->Find(s, &got).IsNotFound()) << "erased key " << s << " still found";
        }
      }
    }
    EXPECT_GT(ix->Stats().splits, 0u);
    for (Key k : specials) {
      ASSERT_TRUE(ix->Insert(k, k * 3 + 1).ok()) << "re-Insert " << k;
      model[k] = k * 3 + 1;
    }
    for (Key k : specials) {
      if (k % 3 == 0) {
        ASSERT_TRUE(ix->Update(k, kMaxKey).ok());
        model[k] = kMaxKey;
      }
    }
    ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
    if (Traits::kReopenable) {
      ASSERT_NO_FATAL_FAILURE(this->Reopen(o, /*clean=*/true));
      ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
      for (Key k : specials) {  // erased specials must stay erased across a crash
        if (k % 2 == 0) {
          ASSERT_TRUE(this->idx_->Erase(k).ok());
          model.erase(k);
        }
      }
      ASSERT_NO_FATAL_FAILURE(this->Reopen(o, /*clean=*/false));
      ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
    }
  }
}

TYPED_TEST_P(ConformanceTest, RandomOpsStrongHash) {
  this->RandomOps(HashMode::kStrong, TestSeed(0x5eed0001));
}

TYPED_TEST_P(ConformanceTest, RandomOpsCollideHash) {
  this->RandomOps(HashMode::kCollide, TestSeed(0x5eed0002));
}

TYPED_TEST_P(ConformanceTest, SplitsAndDoublingsHappen) {
  ASSERT_NO_FATAL_FAILURE(this->OpenIdx(this->MakeOptions()));
  auto& ix = *this->idx_;
  const IndexStats s0 = ix.Stats();
  EXPECT_EQ(s0.size, 0u);
  EXPECT_EQ(s0.splits, 0u);
  EXPECT_EQ(s0.doublings, 0u);
  EXPECT_FALSE(s0.recovered);
  const uint64_t n = Scaled(20000);
  Model model;
  for (uint64_t i = 0; i < n; i++) {
    const Key k = SplitMix64(i);
    ASSERT_TRUE(ix.Insert(k, i).ok());
    model[k] = i;
  }
  const IndexStats s = ix.Stats();
  EXPECT_EQ(s.size, n);
  EXPECT_GT(s.splits, 0u);
  EXPECT_GT(s.doublings, 0u);
  EXPECT_GT(s.buckets, s0.buckets);
  EXPECT_GE(s.capacity_slots, n);
  EXPECT_GT(s.load_factor, 0.0);
  EXPECT_LE(s.load_factor, 1.0);
  EXPECT_DOUBLE_EQ(s.load_factor, static_cast<double>(s.size) / s.capacity_slots);
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
}

TYPED_TEST_P(ConformanceTest, TrafficCountersFollowPolicy) {
  using P = typename TypeParam::Policy;
  Options o = this->MakeOptions();
  o.counters = true;
  ASSERT_NO_FATAL_FAILURE(this->OpenIdx(o));
  auto& ix = *this->idx_;
  ix.ResetCounters();
  const uint64_t n = 2000;
  for (uint64_t i = 0; i < n; i++) ASSERT_TRUE(ix.Insert(SplitMix64(i), i).ok());
  for (uint64_t i = 0; i < n; i += 2) ASSERT_TRUE(ix.Erase(SplitMix64(i)).ok());
  TrafficStats t = ix.Stats().traffic;
  if constexpr (!P::kPersistent) {
    EXPECT_EQ(t.persists, 0u);
    EXPECT_EQ(t.fences, 0u);
    EXPECT_EQ(t.flushed_lines, 0u);
    EXPECT_EQ(t.nt_bytes, 0u);
    EXPECT_EQ(t.media_writes, 0u);
  } else {
    // Every acknowledged write is persisted (>= 1 persist and fence each).
    EXPECT_GE(t.persists, n + n / 2);
    EXPECT_GE(t.fences, n + n / 2);
    if constexpr (P::kWritesBack) {
      EXPECT_GE(t.flushed_lines, t.persists);
      EXPECT_GT(t.media_writes, 0u);
    } else {
      // eADR writes nothing back for durability; ElimDA's sealed-block hint is the only
      // write-back (Persister::WriteBack). Persisted lines stay in the cache model until evicted.
      EXPECT_LT(t.flushed_lines, t.persists) << "eADR writes back hints only";
      EXPECT_GT(t.media_writes + t.cached_dirty_lines, 0u);
    }
  }
  // Finds are free.
  ix.ResetCounters();
  for (uint64_t i = 0; i < n; i++) {
    Value v;
    (void)ix.Find(SplitMix64(i), &v);
  }
  t = ix.Stats().traffic;
  EXPECT_EQ(t.persists, 0u);
  EXPECT_EQ(t.fences, 0u);
  EXPECT_EQ(t.flushed_lines, 0u);
  EXPECT_EQ(t.nt_bytes, 0u);
  EXPECT_EQ(t.media_writes, 0u);
}

TYPED_TEST_P(ConformanceTest, OpenModes) {
  Options o = this->MakeOptions();
  o.mode = OpenMode::kOpenExisting;
  {
    auto r = TypeParam::Open(o);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().IsNotFound()) << r.status().ToString();
    EXPECT_FALSE(FileExists(this->path_)) << "kOpenExisting must not create the file";
  }
  o.mode = OpenMode::kCreateExclusive;
  ASSERT_NO_FATAL_FAILURE(this->OpenIdx(o));
  ASSERT_TRUE(this->idx_->Insert(7, 70).ok());
  ASSERT_TRUE(this->idx_->Close().ok());
  this->idx_.reset();
  {
    auto r = TypeParam::Open(o);  // exclusive create on an existing pool
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  }
  if (TestFixture::Traits::kReopenable) {
    o.mode = OpenMode::kOpenOrCreate;  // opens what is there
    ASSERT_NO_FATAL_FAILURE(this->OpenIdx(o));
    ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(Model{{7, 70}}));
  }
}

TYPED_TEST_P(ConformanceTest, CloseAndReopen) {
  if (!TestFixture::Traits::kReopenable) GTEST_SKIP() << "volatile index: nothing to reopen";
  const Options o = this->MakeOptions();
  ASSERT_NO_FATAL_FAILURE(this->OpenIdx(o));
  Model model;
  const uint64_t n = Scaled(20000);
  for (uint64_t i = 0; i < n; i++) {
    const Key k = SplitMix64(i ^ 0xabc);
    ASSERT_TRUE(this->idx_->Insert(k, i).ok());
    model[k] = i;
  }
  for (uint64_t i = 0; i < n; i += 3) {
    const Key k = SplitMix64(i ^ 0xabc);
    ASSERT_TRUE(this->idx_->Erase(k).ok());
    model.erase(k);
  }
  for (uint64_t i = 1; i < n; i += 3) {
    const Key k = SplitMix64(i ^ 0xabc);
    ASSERT_TRUE(this->idx_->Update(k, ~i).ok());
    model[k] = ~i;
  }
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
  ASSERT_NO_FATAL_FAILURE(this->Reopen(o, /*clean=*/true));
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
  // The reopened index keeps working (and growing).
  for (uint64_t i = n; i < 2 * n; i++) {
    const Key k = SplitMix64(i ^ 0xabc);
    ASSERT_TRUE(this->idx_->Insert(k, i).ok());
    model[k] = i;
  }
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
  ASSERT_NO_FATAL_FAILURE(this->Reopen(o, /*clean=*/true));
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
}

TYPED_TEST_P(ConformanceTest, ReopenAtDifferentAddress) {
  using Traits = typename TestFixture::Traits;
  if (!Traits::kReopenable) GTEST_SKIP() << "volatile index: nothing to reopen";
  Options o = this->MakeOptions();
  ASSERT_NO_FATAL_FAILURE(this->OpenIdx(o));
  Model model;
  const uint64_t n = Scaled(5000);
  for (uint64_t i = 0; i < n; i++) {
    ASSERT_TRUE(this->idx_->Insert(i * 7919, i).ok());
    model[i * 7919] = i;
  }
  const void* old_base = Traits::Base(*this->idx_);
  const uint64_t mapped = Traits::MappedBytes(*this->idx_);
  ASSERT_TRUE(this->idx_->Close().ok());
  this->idx_.reset();

  // Occupy the old mapping address so that the pool must map elsewhere.
  void* block = MAP_FAILED;
  if (old_base != nullptr) {
    block = mmap(const_cast<void*>(old_base), mapped, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | MAP_NORESERVE, -1, 0);
    ASSERT_NE(block, MAP_FAILED) << "cannot reserve the old pool address";
    ASSERT_EQ(block, old_base) << "kernel ignored MAP_FIXED_NOREPLACE";
  }
  o.mode = OpenMode::kOpenExisting;
  ASSERT_NO_FATAL_FAILURE(this->OpenIdx(o));
  if (old_base != nullptr) {
    EXPECT_NE(Traits::Base(*this->idx_), old_base) << "pool did not move";
  }
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
  for (uint64_t i = n; i < 3 * n; i++) {  // grow at the new address: splits write offsets
    ASSERT_TRUE(this->idx_->Insert(i * 7919, i).ok());
    model[i * 7919] = i;
  }
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));

  // And again through Options::map_address_hint: both earlier addresses are now occupied, the
  // hint names a third place (the kernel may or may not honour a hint; either way the pool must
  // come up somewhere else, whole).
  const void* second_base = Traits::Base(*this->idx_);
  ASSERT_TRUE(this->idx_->Close().ok());
  this->idx_.reset();
  if (old_base != nullptr) {
    void* block2 = mmap(const_cast<void*>(second_base), mapped, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | MAP_NORESERVE, -1, 0);
    ASSERT_EQ(block2, second_base) << "cannot reserve the second pool address";
    void* probe = mmap(nullptr, mapped + (uint64_t{1} << 30), PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ASSERT_NE(probe, MAP_FAILED);
    void* hint = static_cast<char*>(probe) + (uint64_t{1} << 30);
    munmap(probe, mapped + (uint64_t{1} << 30));
    o.map_address_hint = hint;
    ASSERT_NO_FATAL_FAILURE(this->OpenIdx(o));
    const void* third_base = Traits::Base(*this->idx_);
    EXPECT_NE(third_base, second_base);
    EXPECT_NE(third_base, old_base);
    ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
    ASSERT_TRUE(this->idx_->Insert(kMaxKey, 1).ok());
    model[kMaxKey] = 1;
    ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
    this->idx_.reset();
    munmap(block2, mapped);
  }
  this->idx_.reset();
  if (block != MAP_FAILED) munmap(block, mapped);
}

TYPED_TEST_P(ConformanceTest, DestroyWithoutCloseRecovers) {
  if (!TestFixture::Traits::kReopenable) GTEST_SKIP() << "volatile index: nothing to recover";
  const Options o = this->MakeOptions(HashMode::kCollide);
  ASSERT_NO_FATAL_FAILURE(this->OpenIdx(o));
  Model model;
  const uint64_t n = Scaled(10000);
  for (uint64_t i = 0; i < n; i++) {
    ASSERT_TRUE(this->idx_->Insert(i, i + 1).ok());
    model[i] = i + 1;
  }
  for (uint64_t i = 0; i < n; i += 5) {
    ASSERT_TRUE(this->idx_->Erase(i).ok());
    model.erase(i);
  }
  EXPECT_FALSE(this->idx_->Stats().recovered);
  // Crash (no Close), recover, crash again with more work, recover a recovered pool.
  ASSERT_NO_FATAL_FAILURE(this->Reopen(o, /*clean=*/false));
  EXPECT_TRUE(this->idx_->Stats().recovered);
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
  for (uint64_t i = n; i < 2 * n; i++) {
    const Status s = this->idx_->Upsert(i, i * 2);
    ASSERT_TRUE(s.ok()) << s.ToString();
    model[i] = i * 2;
  }
  for (uint64_t i = 1; i < n; i += 5) {
    ASSERT_TRUE(this->idx_->Update(i, 0).ok());
    model[i] = 0;
  }
  ASSERT_NO_FATAL_FAILURE(this->Reopen(o, /*clean=*/false));
  EXPECT_TRUE(this->idx_->Stats().recovered);
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
  ASSERT_NO_FATAL_FAILURE(this->Reopen(o, /*clean=*/true));
  EXPECT_FALSE(this->idx_->Stats().recovered);
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
}

TYPED_TEST_P(ConformanceTest, FacadeOpen) {
  using Traits = typename TestFixture::Traits;
  Options o = this->MakeOptions();
  {
    auto r = Traits::OpenFacade(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Index& ix = **r;
    EXPECT_EQ(ix.kind(), TypeParam::kKindName);
    EXPECT_EQ(ix.durability(), TypeParam::Policy::kDurability);
    Model model;
    for (Key k = 0; k < 1000; k++) {
      ASSERT_TRUE(ix.Insert(k, k + 10).ok());
      model[k] = k + 10;
    }
    EXPECT_TRUE(ix.Insert(5, 0).IsExists());
    ASSERT_TRUE(ix.Update(5, 55).ok());
    model[5] = 55;
    ASSERT_TRUE(ix.Upsert(5000, 1).ok());
    model[5000] = 1;
    ASSERT_TRUE(ix.Erase(6).ok());
    model.erase(6);
    EXPECT_TRUE(ix.Erase(6).IsNotFound());
    Value v;
    ASSERT_TRUE(ix.Find(5, &v).ok());
    EXPECT_EQ(v, 55u);
    EXPECT_EQ(ix.Size(), model.size());
    EXPECT_EQ(ix.Stats().size, model.size());
    uint64_t visits = 0;
    const Status scanned = ix.ForEach([&](Key k, Value val) {
      visits++;
      EXPECT_EQ(model.at(k), val);
    });
    EXPECT_TRUE(scanned.ok()) << scanned.ToString();
    EXPECT_EQ(visits, model.size());
    Status inv = ix.CheckInvariants();
    EXPECT_TRUE(inv.ok()) << inv.ToString();
    ix.ResetCounters();
    EXPECT_TRUE(ix.Close().ok());
  }
  if (Traits::kReopenable) {
    o.mode = OpenMode::kOpenExisting;
    auto r = Traits::OpenFacade(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Value v;
    ASSERT_TRUE((*r)->Find(5, &v).ok());
    EXPECT_EQ(v, 55u);
    EXPECT_FALSE((*r)->Stats().recovered);
  }
  // An unknown kind is refused before any file is touched.
  Options bad = o;
  bad.path = this->path_ + ".unknown";
  bad.mode = OpenMode::kOpenOrCreate;
  auto r = pmhash::Open("no-such-index", bad);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  EXPECT_FALSE(FileExists(bad.path));
}

TYPED_TEST_P(ConformanceTest, OutOfSpace) {
  using Traits = typename TestFixture::Traits;
  Options o = this->MakeOptions();
  o.pool_size = Traits::TinyPoolBytes();
  ASSERT_NO_FATAL_FAILURE(this->OpenIdx(o));
  auto* ix = this->idx_.get();
  Model model;
  std::vector<Key> refused;
  uint64_t first_oos = 0;
  const uint64_t limit = 1 << 20;
  uint64_t i = 0;
  for (; i < limit; i++) {
    const Key k = SplitMix64(i + 1000);
    Status s = ix->Insert(k, i);
    if (s.IsOutOfSpace()) {
      first_oos = i;
      refused.push_back(k);
      break;
    }
    ASSERT_TRUE(s.ok()) << "Insert #" << i << ": " << s.ToString();
    model[k] = i;
  }
  ASSERT_LT(i, limit) << "a " << o.pool_size << "-byte pool never filled up";
  ASSERT_GT(first_oos, 0u);
  // Keep inserting: each insert either fits in a bucket with room or is refused cleanly.
  for (uint64_t j = 0; j < 2000; j++) {
    const Key k = SplitMix64(limit + j);
    Status s = ix->Insert(k, j);
    ASSERT_TRUE(s.ok() || s.IsOutOfSpace()) << s.ToString();
    if (s.ok()) {
      model[k] = j;
    } else {
      refused.push_back(k);
    }
    s = ix->Upsert(k ^ 1, j);
    ASSERT_TRUE(s.ok() || s.IsOutOfSpace()) << s.ToString();
    if (s.ok()) {
      model[k ^ 1] = j;
    } else {
      refused.push_back(k ^ 1);
    }
  }
  for (Key k : refused) {
    if (model.count(k)) continue;
    Value v;
    ASSERT_TRUE(ix->Find(k, &v).IsNotFound()) << "refused insert of " << k << " left it behind";
  }
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
  // Still usable: updates, erases, then re-inserting what was erased.
  std::vector<Key> erased;
  for (auto& [k, v] : model) {
    if (k % 2 == 0) erased.push_back(k);
  }
  for (Key k : erased) {
    ASSERT_TRUE(ix->Erase(k).ok());
    model.erase(k);
  }
  for (auto& [k, v] : model) {
    {
      Status us = ix->Update(k, v + 1);
      ASSERT_TRUE(us.ok()) << us.ToString();
    }
    v++;
  }
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
  uint64_t refits = 0;
  for (Key k : erased) {
    Status s = ix->Insert(k, k);
    if (!Traits::kErasedKeysAlwaysRefit && s.IsOutOfSpace()) continue;
    ASSERT_TRUE(s.ok()) << "re-insert of erased " << k << " after out of space: " << s.ToString();
    model[k] = k;
    refits++;
  }
  // Multi-choice indexes: a key's freed slot may have gone to another key's balanced insert.
  EXPECT_GE(refits * 4, erased.size() * Traits::kMinRefitQuarters)
      << "most erased keys must fit again";
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
  if (Traits::kReopenable) {
    ASSERT_NO_FATAL_FAILURE(this->Reopen(o, /*clean=*/false));
    ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
    Status s = this->idx_->Insert(SplitMix64(limit + 5000), 1);
    EXPECT_TRUE(s.ok() || s.IsOutOfSpace()) << s.ToString();
  }
}

// CheckInvariants is the leak detector of the crash suite and of `pmhash check`: a chunk that is
// allocated but reachable from no root must fail it (EngineBase::CheckAccounting).
TYPED_TEST_P(ConformanceTest, CheckInvariantsFindsALeakedChunk) {
  using T = TypeParam;
  if constexpr (!requires(T& t) { t.pool().allocator().Allocate(1); }) {
    GTEST_SKIP() << T::kKindName << " has no pool";
  } else {
    ASSERT_NO_FATAL_FAILURE(this->OpenIdx(this->MakeOptions()));
    auto& ix = *this->idx_;
    for (Key k = 1; k <= 200; k++) ASSERT_TRUE(ix.Insert(SplitMix64(k), k).ok());
    Status inv = ix.CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv.ToString();
    auto leaked = ix.pool().allocator().Allocate(1);
    ASSERT_TRUE(leaked.ok()) << leaked.status().ToString();
    inv = ix.CheckInvariants();
    EXPECT_TRUE(inv.IsCorruption()) << inv.ToString();
    EXPECT_NE(inv.ToString().find("leak"), std::string::npos) << inv.ToString();
  }
}

TYPED_TEST_P(ConformanceTest, WriteBatchMatchesTheCalls) {
  const uint64_t seed = TestSeed(0x5eed0003);
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  Options o = this->MakeOptions();
  ASSERT_NO_FATAL_FAILURE(this->OpenIdx(o));
  auto& ix = *this->idx_;
  Model model;
  // One key through every kind, in one batch: each op sees the ones before it.
  const WriteOp ops[] = {{WriteKind::kInsert, 7, 1}, {WriteKind::kInsert, 7, 2},
                         {WriteKind::kUpdate, 7, 3}, {WriteKind::kErase, 7, 0},
                         {WriteKind::kUpdate, 7, 4}, {WriteKind::kErase, 7, 0},
                         {WriteKind::kUpsert, 7, 5}, {WriteKind::kUpsert, 8, 6}};
  Status st[std::size(ops)];
  ASSERT_TRUE(ix.WriteBatch(ops, st).ok());
  using C = Status::Code;
  const C want[] = {C::kOk,       C::kExists,   C::kOk, C::kOk,
                    C::kNotFound, C::kNotFound, C::kOk, C::kOk};
  for (size_t i = 0; i < std::size(ops); i++) EXPECT_EQ(st[i].code(), want[i]) << "op " << i;
  model = {{7, 5}, {8, 6}};
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
  // Fewer statuses than ops: refused, nothing done.
  const WriteOp more[] = {{WriteKind::kUpsert, 9, 1}, {WriteKind::kUpsert, 10, 1}};
  EXPECT_TRUE(ix.WriteBatch(more, std::span<Status>(st, 1)).IsInvalidArgument());
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));

  // Random batches, through splits and (persistent policies) a clean and a crashed reopen.
  const uint64_t total = Scaled(40000, 4);
  std::vector<Key> keys(std::max<uint64_t>(64, total / 4));
  for (size_t i = 0; i < keys.size(); i++) keys[i] = SplitMix64(seed ^ (i * 0x9e37));
  ASSERT_NO_FATAL_FAILURE(this->RunBatchedWrites(rng, keys, total / 2, model));
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
  EXPECT_GT(ix.Stats().splits, 0u);
  if (TestFixture::Traits::kReopenable) {
    ASSERT_NO_FATAL_FAILURE(this->Reopen(o, /*clean=*/false));
    ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
  }
  ASSERT_NO_FATAL_FAILURE(this->RunBatchedWrites(rng, keys, total / 2, model));
  ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
  if (TestFixture::Traits::kReopenable) {
    ASSERT_NO_FATAL_FAILURE(this->Reopen(o, /*clean=*/true));
    ASSERT_NO_FATAL_FAILURE(this->ExpectMatches(model));
  }
}

REGISTER_TYPED_TEST_SUITE_P(ConformanceTest, BasicSemantics, SpecialKeysAndValues,
                            RandomOpsStrongHash, RandomOpsCollideHash, SplitsAndDoublingsHappen,
                            TrafficCountersFollowPolicy, OpenModes, CloseAndReopen,
                            ReopenAtDifferentAddress, DestroyWithoutCloseRecovers, FacadeOpen,
                            OutOfSpace, CheckInvariantsFindsALeakedChunk,
                            WriteBatchMatchesTheCalls);

}  // namespace
}  // namespace pmhash::testing
