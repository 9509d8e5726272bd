// The crash simulator's own tests: it must catch seeded crash-consistency bugs in a tiny
// persistent structure and pass the correct version of the same structure.
#include "pm/crash_sim.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <optional>
#include <vector>

#include "crash/store_tracer.h"
#include "pm/persist.h"

namespace pmhash::pm {
namespace {

// A tiny persistent log: word 0 = count; record i (16 B) at line 1+i: {payload, ~payload}.
// Invariant: every record below count is complete.
struct TinyLog {
  static constexpr size_t kBytes = 64 * 64;
  enum class Bug { kNone, kPublishBeforeFlush, kMissingFlush, kRewriteAfterFlush };

  char* base;
  uint64_t* count() { return reinterpret_cast<uint64_t*>(base); }
  uint64_t* rec(uint64_t i) { return reinterpret_cast<uint64_t*>(base + 64 * (1 + i)); }

  void Append(uint64_t payload, Bug bug) {
    const uint64_t i = *count();
    uint64_t* r = rec(i);
    if (bug == Bug::kPublishBeforeFlush) {
      *count() = i + 1;  // published first: the record may not be durable yet
      Sim::Flush(count(), 8);
      Sim::Fence();
      r[0] = payload;
      r[1] = ~payload;
      Sim::Flush(r, 16);
      Sim::Fence();
      return;
    }
    r[0] = payload;
    r[1] = bug == Bug::kRewriteAfterFlush ? 0 : ~payload;
    if (bug != Bug::kMissingFlush) Sim::Flush(r, 16);
    if (bug == Bug::kRewriteAfterFlush) r[1] = ~payload;  // completed after the flush: not durable
    Sim::Fence();
    *count() = i + 1;
    Sim::Flush(count(), 8);
    Sim::Fence();
  }

  static bool Consistent(const char* img) {
    uint64_t n;
    std::memcpy(&n, img, 8);
    if (n > 60) return false;
    for (uint64_t i = 0; i < n; i++) {
      uint64_t w[2];
      std::memcpy(w, img + 64 * (1 + i), 16);
      if (w[1] != ~w[0]) return false;
    }
    return true;
  }
};

// Runs 20 appends under a simulator; checks every image of every crash point.
// Returns the number of inconsistent images found.
int CountBadImages(TinyLog::Bug bug, CrashSimConfig cfg, int* points_seen = nullptr) {
  std::vector<char> mem(TinyLog::kBytes, 0);
  CrashSimulator sim(cfg);
  std::vector<CrashSimulator::State> states;
  sim.set_crash_point_callback([&](uint64_t) { states.push_back(sim.Capture()); });
  SimHook* prev = SetThreadSimHook(&sim);
  sim.OnMap(mem.data(), mem.size());
  TinyLog log{mem.data()};
  for (uint64_t p = 1; p <= 20; p++) {
    log.Append(p * 1000 + 7, bug);
    sim.CrashPoint();
  }
  SetThreadSimHook(prev);
  int bad = 0;
  std::vector<char> img(mem.size());
  for (const auto& st : states) {
    ForEachCrashChoice(st, st.point, 8, 64, [&](const CrashSimulator::Choice& c) {
      CrashSimulator::BuildImage(st, c, img.data());
      bad += !TinyLog::Consistent(img.data());
      return true;
    });
  }
  if (points_seen) *points_seen = static_cast<int>(states.size());
  return bad;
}

TEST(CrashSimulator, CorrectLogPasses) {
  int points = 0;
  EXPECT_EQ(CountBadImages(TinyLog::Bug::kNone, {}, &points), 0);
  EXPECT_EQ(points, 20 * 3);  // two fences with pending flushes + one boundary per append
}

TEST(CrashSimulator, CatchesPublishBeforeFlush) {
  EXPECT_GT(CountBadImages(TinyLog::Bug::kPublishBeforeFlush, {}), 0);
}

TEST(CrashSimulator, CatchesMissingFlush) {
  EXPECT_GT(CountBadImages(TinyLog::Bug::kMissingFlush, {}), 0);
}

TEST(CrashSimulator, LineRewrittenAfterFlushIsNotDurable) {
  EXPECT_GT(CountBadImages(TinyLog::Bug::kRewriteAfterFlush, {}), 0);
}

TEST(CrashSimulator, EadrImageIsCurrentMemory) {
  // Under eADR every completed store is durable: the buggy orders are all fine...
  EXPECT_EQ(CountBadImages(TinyLog::Bug::kMissingFlush, {.eadr = true}), 0);
  // ...except a real ordering bug: publishing the count before writing the record.
  EXPECT_GT(CountBadImages(TinyLog::Bug::kPublishBeforeFlush, {.eadr = true}), 0);
}

TEST(CrashSimulator, SnapshotAtFlushNotAtFence) {
  std::vector<char> mem(256, 0);
  CrashSimulator sim;
  sim.OnMap(mem.data(), mem.size());
  SimHook* prev = SetThreadSimHook(&sim);
  mem[0] = 1;
  Sim::Flush(&mem[0], 1);
  mem[0] = 2;  // after the flush
  Sim::Fence();
  SetThreadSimHook(prev);
  const auto st = sim.Capture();
  EXPECT_EQ(st.persisted[0], 1);   // the snapshot was committed
  ASSERT_EQ(st.lines.size(), 1u);  // line 0 is dirty again
  EXPECT_EQ(st.lines[0].versions[0][0], 2);
}

TEST(CrashSimulator, TornWordsProduceMixedLines) {
  std::vector<char> mem(128, 0);
  CrashSimulator sim({.tear_words = true});
  sim.OnMap(mem.data(), mem.size());
  uint64_t* w = reinterpret_cast<uint64_t*>(mem.data());
  w[0] = 11;
  w[1] = 22;  // dirty, never flushed
  const auto st = sim.Capture();
  ASSERT_EQ(st.lines.size(), 1u);
  bool mixed = false;
  std::vector<char> img(mem.size());
  ForEachCrashChoice(st, 5, 64, 0, [&](const CrashSimulator::Choice& c) {
    CrashSimulator::BuildImage(st, c, img.data());
    uint64_t a, b;
    std::memcpy(&a, img.data(), 8);
    std::memcpy(&b, img.data() + 8, 8);
    mixed |= (a == 11) != (b == 22);
    return true;
  });
  EXPECT_TRUE(mixed);
}

TEST(CrashSimulator, ChoiceEnumerationCoversMinMaxSinglesPairs) {
  CrashSimulator::State st;
  st.persisted.assign(64 * 4, 0);
  for (size_t l = 0; l < 3; l++) {
    CrashSimulator::LineBytes b{};
    b[0] = static_cast<char>(l + 1);
    st.lines.push_back({l, {b}});
  }
  int n = 0;
  ForEachCrashChoice(st, 1, 2, 100, [&](const CrashSimulator::Choice&) {
    n++;
    return true;
  });
  EXPECT_EQ(n, 1 + 1 + 3 + 3 + 2);  // min, max, singles, pairs, random
}

// Slots of one line each, [key | value], key != 0 = live; an insert writes value then key and
// persists the line with one flush. The swapped order (key first) is wrong — a cache may write
// the line back between the two stores — yet one flush covers both, so only a simulator that
// sees the stores can tell the two orders apart.
int CountBadSlotImages(bool key_first, bool trace, CrashSimConfig cfg = {}) {
  constexpr size_t kBytes = 4 * 4096;
  void* m = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return -1;
  auto* mem = static_cast<uint64_t*>(m);
  CrashSimulator sim(cfg);
  std::vector<CrashSimulator::State> states;
  sim.set_crash_point_callback([&](uint64_t) { states.push_back(sim.Capture()); });
  {
    std::optional<pmhash::crashtest::StoreTracer> tracer;
    if (trace) tracer.emplace(&sim);
    SimHook* hook = trace ? static_cast<SimHook*>(&*tracer) : &sim;
    SimHook* prev = SetThreadSimHook(hook);
    hook->OnMap(m, kBytes);
    for (uint64_t i = 0; i < 16; i++) {
      volatile uint64_t* slot = mem + 8 * i;  // one line per slot
      const uint64_t key = i + 1;
      if (key_first) {
        slot[0] = key;
        slot[1] = key * 3;
      } else {
        slot[1] = key * 3;
        slot[0] = key;
      }
      Sim::Flush(const_cast<uint64_t*>(slot), 16);
      Sim::Fence();
      sim.CrashPoint();
    }
    hook->OnUnmap(m, kBytes);
    SetThreadSimHook(prev);
  }
  munmap(m, kBytes);
  int bad = 0;
  std::vector<char> img(kBytes);
  for (const auto& st : states) {
    ForEachCrashChoice(st, st.point, 8, 64, [&](const CrashSimulator::Choice& c) {
      CrashSimulator::BuildImage(st, c, img.data());
      const auto* w = reinterpret_cast<const uint64_t*>(img.data());
      for (size_t i = 0; i < 16; i++) bad += w[8 * i] != 0 && w[8 * i + 1] != w[8 * i] * 3;
      return true;
    });
  }
  return bad;
}

TEST(StoreTracer, SwappedStoresInOneLineAreInvisibleWithoutIt) {
  EXPECT_EQ(CountBadSlotImages(/*key_first=*/true, /*trace=*/false), 0);
}

TEST(StoreTracer, CatchesSwappedStoresInOneLine) {
  EXPECT_GT(CountBadSlotImages(/*key_first=*/true, /*trace=*/true), 0);
  EXPECT_EQ(CountBadSlotImages(/*key_first=*/false, /*trace=*/true), 0);
}

TEST(StoreTracer, EadrCrashesBetweenTwoStores) {
  EXPECT_EQ(CountBadSlotImages(true, false, {.eadr = true}), 0);  // fences only: not seen
  EXPECT_GT(CountBadSlotImages(true, true, {.eadr = true}), 0);
  EXPECT_EQ(CountBadSlotImages(false, true, {.eadr = true}), 0);
}

TEST(StoreTracer, ReportsEveryStoreAndRestoresAccess) {
  constexpr size_t kBytes = 2 * 4096;
  void* m = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  CrashSimulator sim;
  {
    pmhash::crashtest::StoreTracer tracer(&sim);
    tracer.OnMap(m, kBytes);
    auto* w = static_cast<volatile uint64_t*>(m);
    w[0] = 1;
    w[1] = 2;
    w[600] = 3;  // second page
    EXPECT_EQ(tracer.stores(), 3u);
    tracer.OnUnmap(m, kBytes);
  }
  static_cast<volatile uint64_t*>(m)[1] = 5;  // writable again, no handler involved
  munmap(m, kBytes);
}

}  // namespace
}  // namespace pmhash::pm
