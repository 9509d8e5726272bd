// tests/kill_test.cc — process crash, for every registered unique-key index kind (through
// pmhash::Open, Adr durability, the index's default parameters): a child process runs operations
// on a file pool and reports each one to the parent through a pipe, before (INTENT) and after it
// returned OK (ACK) (the harness: kill_util.h). The parent SIGKILLs the child at a random moment,
// reopens the pool and checks: every acknowledged operation is applied, the at-most-one in-flight
// operation is either fully applied or absent, nothing else changed, CheckInvariants passes,
// Stats().recovered is true. Several rounds reuse the same pool, so a recovered pool is recovered
// again. The multimap kinds (Capabilities::multi) have their own kill test, MultiKill in
// tests/multi_test.cc.
//
// The child never touches gtest: it only uses the library, write(2) and _exit(2).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "kill_util.h"
#include "pmhash/index.h"
#include "test_util.h"

namespace pmhash::testing {
namespace {

using Model = std::unordered_map<Key, Value>;

enum OpType : uint64_t { kInsert = 1, kUpsert = 2, kUpdate = 3, kErase = 4 };

using Rec = KillRec;

Options PoolOptions(const std::string& path) {
  Options o;
  o.path = path;
  o.pool_size = uint64_t{1} << 30;  // sparse on tmpfs: only what the index touches costs memory
  o.durability = Durability::kAdr;
  o.mode = OpenMode::kOpenOrCreate;
  o.reh.initial_depth = 1;
  return o;
}

// ---- child side (no gtest) ----

[[noreturn]] void ChildMain(int fd, std::string_view kind, const std::string& path, int round,
                            Model model, uint64_t seed) {
  auto r = pmhash::Open(kind, PoolOptions(path));
  if (!r.ok()) {
    SendRec(fd, {kError, 0, 0, static_cast<uint64_t>(r.status().code())});
    _exit(2);
  }
  Index& ix = **r;
  std::vector<Key> live;
  live.reserve(model.size() * 2 + 1024);
  for (const auto& [k, v] : model) live.push_back(k);
  std::mt19937_64 rng(seed);
  SendRec(fd, {kReady, 0, 0, 0});
  for (uint64_t i = 0; i < 50'000'000; i++) {
    const unsigned pick = rng() % 100;
    Rec rec{kIntent, kInsert, 0, rng()};
    size_t li = 0;
    if (pick < 65 || live.empty()) {
      rec.op = kInsert;
      rec.key = SplitMix64((uint64_t(round + 1) << 40) | i);
    } else {
      li = rng() % live.size();
      rec.key = live[li];
      rec.op = pick < 78 ? kUpdate : pick < 90 ? kErase : kUpsert;
    }
    SendRec(fd, rec);
    Status s;
    switch (rec.op) {
      case kInsert:
        s = ix.Insert(rec.key, rec.value);
        break;
      case kUpsert:
        s = ix.Upsert(rec.key, rec.value);
        break;
      case kUpdate:
        s = ix.Update(rec.key, rec.value);
        break;
      case kErase:
        s = ix.Erase(rec.key);
        break;
    }
    if (!s.ok()) {
      SendRec(fd, {kError, rec.op, rec.key, static_cast<uint64_t>(s.code())});
      _exit(3);
    }
    if (rec.op == kInsert) live.push_back(rec.key);
    if (rec.op == kErase) {
      live[li] = live.back();
      live.pop_back();
    }
    rec.type = kAck;
    SendRec(fd, rec);
  }
  _exit(0);
}

// ---- parent side ----

void Apply(Model& m, const Rec& r) {
  if (r.op == kErase) {
    m.erase(r.key);
  } else {
    m[r.key] = r.value;
  }
}

class KillTest : public ::testing::TestWithParam<std::string_view> {
 protected:
  void TearDown() override { unlink(path_.c_str()); }
  std::string path_ = TempPoolPath("kill_" + std::string(GetParam()));
};

TEST_P(KillTest, AcknowledgedOpsSurviveSigkill) {
  const std::string_view kind = GetParam();
  const int rounds = static_cast<int>(std::max<uint64_t>(5, Scaled(12, 2)));
  const uint64_t seed = TestSeed(0x411);
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  Model model;
  uint64_t total_acks = 0, inflight_applied = 0, inflight_absent = 0;

  for (int round = 0; round < rounds; round++) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int delay_ms = 5 + static_cast<int>(rng() % 46);
    const uint64_t child_seed = rng();
    std::vector<Rec> recs;
    int status = 0;
    ASSERT_NO_FATAL_FAILURE(RunChildAndKill(
        [&](int fd) { ChildMain(fd, kind, path_, round, model, child_seed); }, delay_ms, &recs,
        &status));

    // Replay what the child reported.
    std::optional<Rec> inflight;
    uint64_t acks = 0;
    ASSERT_NO_FATAL_FAILURE(
        ReplayAcks(recs, [&](const Rec& r) { Apply(model, r); }, &inflight, &acks));
    total_acks += acks;
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "child ended on its own (status " << status << ") before the kill";

    // Reopen and compare.
    Options o = PoolOptions(path_);
    o.mode = OpenMode::kOpenExisting;
    auto ro = pmhash::Open(kind, o);
    ASSERT_TRUE(ro.ok()) << ro.status().ToString();
    Index& ix = **ro;
    EXPECT_TRUE(ix.Stats().recovered);
    Status inv = ix.CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv.ToString();
    Model found;
    ASSERT_TRUE(ix.ForEach([&](Key k, Value v) { found.emplace(k, v); }).ok());
    ASSERT_EQ(found.size(), ix.Size());
    if (inflight) {
      Model after = model;
      Apply(after, *inflight);
      auto get = [](const Model& m, Key k) -> std::optional<Value> {
        auto it = m.find(k);
        return it == m.end() ? std::nullopt : std::optional<Value>(it->second);
      };
      const auto now = get(found, inflight->key);
      const bool was_applied = now == get(after, inflight->key);
      const bool was_absent = now == get(model, inflight->key);
      ASSERT_TRUE(was_applied || was_absent) << "in-flight op " << inflight->op << " on key "
                                             << inflight->key << " left a third state";
      if (was_applied && !was_absent) {
        model = std::move(after);
        inflight_applied++;
      } else if (!was_applied) {
        inflight_absent++;
      }
    }
    ASSERT_EQ(found.size(), model.size()) << acks << " acks this round";
    for (const auto& [k, v] : model) {
      auto it = found.find(k);
      ASSERT_TRUE(it != found.end()) << "acknowledged key " << k << " lost";
      ASSERT_EQ(it->second, v) << "acknowledged value of key " << k << " lost";
      Value got;
      ASSERT_TRUE(ix.Find(k, &got).ok());
      ASSERT_EQ(got, v);
    }
    std::cout << "[ info ] round " << round << ": killed after " << delay_ms << " ms, " << acks
              << " acked ops, " << model.size() << " keys, " << ix.Stats().buckets << " buckets\n";
    // Alternate clean and unclean shutdowns of the parent's handle.
    if (round % 2 == 0) {
      ASSERT_TRUE(ix.Close().ok());
    }
  }
  EXPECT_GT(total_acks, 0u) << "the children never got to run";
  std::cout << "[ info ] " << total_acks << " acked ops; in-flight applied " << inflight_applied
            << ", absent " << inflight_absent << "\n";
}

// Every registered kind but the multimaps (Capabilities::multi): their Insert adds a pair and
// never returns kExists, and Update / Upsert are not defined, so this test's operations and model
// do not apply; MultiKill (tests/multi_test.cc, typed over every multimap kind) kills them.
std::vector<std::string_view> AllKinds() {
  std::vector<std::string_view> v;
  for (const IndexInfo& i : RegisteredIndexes()) {
    if (!KindCapabilities(i.name).value().multi) v.push_back(i.name);
  }
  return v;
}

// Only the multimaps are left out (they are killed by MultiKill, which runs every kind of
// MultiEngines: conformance_test.cc, Registry.EveryKindIsInATypedSuite, checks that list).
TEST(KillKinds, EveryUniqueKeyKindIsKilled) {
  const std::vector<std::string_view> kinds = AllKinds();
  size_t multi = 0;
  for (const IndexInfo& i : RegisteredIndexes()) {
    const bool is_multi = KindCapabilities(i.name).value().multi;
    multi += is_multi;
    EXPECT_EQ(std::count(kinds.begin(), kinds.end(), i.name), is_multi ? 0 : 1) << i.name;
  }
  EXPECT_EQ(kinds.size() + multi, RegisteredIndexes().size());
}

INSTANTIATE_TEST_SUITE_P(All, KillTest, ::testing::ValuesIn(AllKinds()),
                         [](const ::testing::TestParamInfo<std::string_view>& i) {
                           std::string name(i.param);  // "turbo-kv" -> "turbo_kv"
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace pmhash::testing
