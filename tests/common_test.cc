// tests/common_test.cc — hashing, SIMD tag matching, locks, epochs, striped counter, Status.
//
// Tests whose suite name contains "Concurrent" are multi-threaded; CMake labels them
// "concurrent" (CI runs those under TSan).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <iostream>
#include <iterator>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <chrono>
#include <thread>
#include <vector>

#include "common/epoch.h"
#include "common/fingerprint.h"
#include "common/hash.h"
#include "common/locks.h"
#include "common/striped_counter.h"
#include "pm/persist.h"
#include "pm/pool_format.h"
#include "pmhash/pmhash.h"
#include "test_util.h"

namespace pmhash::testing {
namespace {

// ============================================================================================
// Hasher
// ============================================================================================

TEST(Hasher, DeterministicAndSeedDependent) {
  const Hasher a(HashMode::kStrong, 1), b(HashMode::kStrong, 1), c(HashMode::kStrong, 2);
  EXPECT_EQ(a.mode(), HashMode::kStrong);
  EXPECT_EQ(a.seed(), 1u);
  int differ = 0;
  for (uint64_t k = 0; k < 10000; k++) {
    ASSERT_EQ(a(k), b(k)) << k;
    ASSERT_EQ(a(k), a(k)) << k;
    differ += a(k) != c(k);
  }
  EXPECT_EQ(differ, 10000) << "seed must change the hash of (practically) every key";
  EXPECT_NE(a(std::string_view("hello")), c(std::string_view("hello")));
  EXPECT_EQ(a(std::string_view("hello")), b(std::string_view("hello")));
  EXPECT_NE(a(std::string_view("hello")), a(std::string_view("hellp")));
}

// The hash of a key is part of the pool format: it decides bucket placement, tombstones and slot
// validity (REH I1). A change makes every existing pool unreadable, so it must come with a new
// pool format version; these pinned values make such a change visible.
TEST(Hasher, PinnedValues) {
  const Hasher strong(HashMode::kStrong, 0x9e3779b97f4a7c15ULL);
  const Hasher col(HashMode::kCollide, 0x9e3779b97f4a7c15ULL);
  EXPECT_EQ(strong(0), 0xceea16ef1feb5a37ULL);
  EXPECT_EQ(strong(1), 0x287f3e0aa07085a6ULL);
  EXPECT_EQ(strong(42), 0x13f247bfaaee3d6bULL);
  EXPECT_EQ(strong(~uint64_t{0}), 0xf11469f0a074a748ULL);
  EXPECT_EQ(col(0), 0xceea16ef1feb5a00ULL);
  EXPECT_EQ(col(1), 0xceea16ef1feb5a01ULL);
  EXPECT_EQ(col(42), 0xcfc83a9db6164e02ULL);
  EXPECT_EQ(col(~uint64_t{0}), 0x0760059658c0cb03ULL);
  EXPECT_EQ(strong(std::string_view("pmhash")), 0xd3fdae152d73bf67ULL);
  EXPECT_EQ(pm::kFormatVersion, 1u) << "new format version: update the pinned hashes above";
}

TEST(Hasher, StrongHashSpreadsBits) {
  const Hasher h(HashMode::kStrong, 0x1234);
  std::set<uint64_t> seen;
  for (uint64_t k = 0; k < 100000; k++) ASSERT_TRUE(seen.insert(h(k)).second) << k;
  // Avalanche: flipping one input bit flips ~32 of 64 output bits on average.
  std::mt19937_64 rng(7);
  double total = 0;
  int n = 0;
  for (int i = 0; i < 2000; i++) {
    const uint64_t k = rng();
    for (int bit = 0; bit < 64; bit += 7) {
      total += std::popcount(h(k) ^ h(k ^ (uint64_t{1} << bit)));
      n++;
    }
  }
  const double avg = total / n;
  EXPECT_GT(avg, 30.0);
  EXPECT_LT(avg, 34.0);
  // Top bits (directory index) and low byte (fingerprint) of dense keys are both well spread.
  int top[16] = {}, low[256] = {};
  for (uint64_t k = 0; k < 64000; k++) {
    top[h(k) >> 60]++;
    low[h(k) & 0xFF]++;
  }
  for (int c : top) EXPECT_NEAR(c, 4000, 400);
  for (int c : low) EXPECT_NEAR(c, 250, 100);
}

TEST(Hasher, CollideModeProperty) {
  const uint64_t seed = 99;
  const Hasher col(HashMode::kCollide, seed), strong(HashMode::kStrong, seed);
  EXPECT_EQ(col.mode(), HashMode::kCollide);
  std::set<uint64_t> groups;
  for (uint64_t j = 0; j < 5000; j++) {
    const uint64_t base = 8 * j;
    const uint64_t high = col(base) & ~uint64_t{0xFF};
    EXPECT_EQ(high, strong(j) & ~uint64_t{0xFF}) << "high bits come from Strong(k >> 3)";
    groups.insert(high);
    for (uint64_t k = base; k < base + 8; k++) {
      const uint64_t h = col(k);
      ASSERT_EQ(h & ~uint64_t{0xFF}, high) << "group " << j << " key " << k;
      ASSERT_LT(h & 0xFF, 4u) << k;
      ASSERT_EQ(h & 0xFF, k & 3) << k;
    }
    for (uint64_t k = base; k < base + 4; k++) ASSERT_EQ(col(k), col(k + 4)) << k;
    // At most 2 keys on one full hash.
    for (uint64_t k = base; k < base + 4; k++) {
      for (uint64_t l = base; l < base + 8; l++) {
        if (l != k && l != k + 4) {
          ASSERT_NE(col(k), col(l)) << k << " " << l;
        }
      }
    }
  }
  EXPECT_GT(groups.size(), 4990u) << "distinct groups get distinct high bits";
  // Large keys too.
  const uint64_t big = ~uint64_t{0} - 7;
  for (uint64_t k = big; k != 0; k++) EXPECT_EQ(col(k) >> 8, col(big) >> 8);
  // Strings: the low byte keeps 2 bits.
  for (int i = 0; i < 1000; i++) {
    const std::string s = "key" + std::to_string(i);
    EXPECT_LT(col(std::string_view(s)) & 0xFF, 4u);
    EXPECT_EQ(col(std::string_view(s)) & ~uint64_t{0xFF},
              strong(std::string_view(s)) & ~uint64_t{0xFF});
  }
}

TEST(Hasher, Mix64) {
  EXPECT_EQ(Mix64(3, 5), Mix64(5, 3));
  EXPECT_EQ(Mix64(0, 12345), 0u);
  EXPECT_EQ(Mix64(uint64_t{1} << 63, 2), 1u);  // product 2^64: low 0, high 1
  EXPECT_EQ(Mix64(7, 6), 42u);
}

// ============================================================================================
// SIMD tag match
// ============================================================================================

std::vector<SimdLevel> SupportedLevels() {
  std::vector<SimdLevel> v;
  for (SimdLevel l : {SimdLevel::kSse2, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (ActiveSimdLevel() >= l) v.push_back(l);
  }
  return v;
}

TEST(Fingerprint, LevelNames) {
  EXPECT_STREQ(SimdLevelName(SimdLevel::kSse2), "sse2");
  EXPECT_STRNE(SimdLevelName(SimdLevel::kAvx2), SimdLevelName(SimdLevel::kAvx512));
  EXPECT_GE(SupportedLevels().size(), 1u);
  EXPECT_EQ(ActiveSimdLevel(), ActiveSimdLevel());
  std::cout << "[ info ] SIMD level: " << SimdLevelName(ActiveSimdLevel())
            << ", flush: " << pm::FlushInstructionName(pm::ActiveFlushInstruction()) << "\n";
}

TEST(Fingerprint, AllLevelsAgreeWithScalar) {
  const uint64_t seed = TestSeed(0xf1f1);
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  alignas(64) uint8_t storage[64 + 64];
  const auto levels = SupportedLevels();
  for (int round = 0; round < 200; round++) {
    // Alphabets from tiny (many matches) to full bytes; every alignment offset.
    const int alphabet = round % 4 == 0 ? 2 : round % 4 == 1 ? 5 : round % 4 == 2 ? 256 : 17;
    const uint8_t shift = static_cast<uint8_t>(rng());
    for (auto& b : storage) b = static_cast<uint8_t>(rng() % alphabet + shift);
    const uint8_t* tags = storage + (round % 64);
    for (int t = 0; t < 256; t++) {
      const uint8_t tag = static_cast<uint8_t>(t);
      uint64_t ref = 0;
      for (int i = 0; i < 64; i++) ref |= uint64_t{tags[i] == tag} << i;
      ASSERT_EQ(Match16(tags, tag), static_cast<uint32_t>(ref & 0xFFFF)) << t;
      ASSERT_EQ(Match16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tags)), tag),
                static_cast<uint32_t>(ref & 0xFFFF));
      ASSERT_EQ(Match32(tags, tag), static_cast<uint32_t>(ref)) << t;
      ASSERT_EQ(Match64(tags, tag), ref) << t;
      for (SimdLevel l : levels) {
        ASSERT_EQ(Match32With(l, tags, tag), static_cast<uint32_t>(ref))
            << SimdLevelName(l) << " tag " << t;
        ASSERT_EQ(Match64With(l, tags, tag), ref) << SimdLevelName(l) << " tag " << t;
      }
    }
  }
  // All-equal and none-equal arrays.
  std::memset(storage, 0xAB, sizeof(storage));
  for (SimdLevel l : levels) {
    EXPECT_EQ(Match64With(l, storage, 0xAB), ~uint64_t{0});
    EXPECT_EQ(Match32With(l, storage, 0xAB), ~uint32_t{0});
    EXPECT_EQ(Match64With(l, storage, 0xAC), 0u);
  }
  EXPECT_EQ(Match16(storage, 0xAB), 0xFFFFu);
}

// Both Bloom block probes against the definition, on blocks that hold every probed bit, lack
// exactly one of them (in each word in turn, every bit position), or are random.
TEST(Fingerprint, BlockBitsSetAgreesWithDefinition) {
  const uint64_t seed = TestSeed(0xf1f3);
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const bool avx2 = ActiveSimdLevel() >= SimdLevel::kAvx2;
  if (!avx2) std::cout << "[ info ] no AVX2: the vector probe is not run\n";
  alignas(64) uint64_t block[8];
  auto check = [&](uint64_t bits, bool want) {
    ASSERT_EQ(BlockBitsSet(block, bits), want) << std::hex << bits;
    if (avx2) {
      ASSERT_EQ(BlockBitsSetAvx2(block, bits), want) << std::hex << bits;
    }
  };
  int hits = 0;
  for (int round = 0; round < 20000; round++) {
    const uint64_t bits = rng();
    // Words sparse to dense: random words, then the probed bits set or all but one.
    const int density = round % 4;
    for (auto& w : block) {
      w = rng();
      for (int d = 0; d < density; d++) w |= rng();
    }
    bool want = true;
    for (int i = 0; i < 8; i++) want &= (block[i] >> ((bits >> (8 * i)) & 63) & 1) != 0;
    hits += want;
    check(bits, want);
    for (int i = 0; i < 8; i++) block[i] |= uint64_t{1} << ((bits >> (8 * i)) & 63);
    check(bits, true);
    const int i = round % 8;
    block[i] &= ~(uint64_t{1} << ((bits >> (8 * i)) & 63));
    check(bits, false);
  }
  EXPECT_GT(hits, 100);  // dense random blocks gave both answers
  // Every word, every bit number: only that word's probed bit clear.
  for (int i = 0; i < 8; i++) {
    for (int b = 0; b < 64; b++) {
      for (auto& w : block) w = ~uint64_t{0};
      const uint64_t bits = (rng() & ~(uint64_t{0xFF} << (8 * i))) |
                            (uint64_t(b + 64 * (rng() % 4)) << (8 * i));  // (high bits ignored)
      block[i] = ~(uint64_t{1} << b);
      check(bits, false);
      block[i] = uint64_t{1} << b;
      check(bits, true);
    }
  }
}

TEST(Fingerprint, Match16WideAgreesWithScalar) {
  const uint64_t seed = TestSeed(0xf1f2);
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  uint16_t storage[16 + 8];
  for (int round = 0; round < 2000; round++) {
    // Small alphabets (many matches, and tags whose low or high byte alone matches) and full.
    const int alphabet = round % 3 == 0 ? 3 : round % 3 == 1 ? 70000 : 300;
    for (auto& t : storage) t = static_cast<uint16_t>(rng() % alphabet * (round % 2 ? 257 : 1));
    const uint16_t* tags = storage + (round % 8);
    const uint16_t tag = round % 4 == 0 ? static_cast<uint16_t>(rng()) : tags[rng() % 16];
    uint32_t ref = 0;
    for (int i = 0; i < 16; i++) ref |= uint32_t{tags[i] == tag} << i;
    ASSERT_EQ(Match16Wide(tags, tag), ref) << "round " << round << " tag " << tag;
  }
  std::fill(std::begin(storage), std::end(storage), uint16_t{0x8001});
  EXPECT_EQ(Match16Wide(storage, 0x8001), 0xFFFFu);
  EXPECT_EQ(Match16Wide(storage, 0x0180), 0u);  // same bytes, swapped
}

// ============================================================================================
// Locks
// ============================================================================================

// The basic lock tests deliberately do what clang's -Wthread-safety cannot follow (try_lock
// outcomes asserted by value, a reader lock taken twice).
#if defined(__clang__)
#define TEST_NO_TSA __attribute__((no_thread_safety_analysis))
#else
#define TEST_NO_TSA
#endif

void SpinLockBasics() TEST_NO_TSA {
  SpinLock l;
  EXPECT_TRUE(l.try_lock());
  EXPECT_FALSE(l.try_lock());
  l.unlock();
  l.lock();
  EXPECT_FALSE(l.try_lock());
  l.unlock();
  {
    LockGuard<SpinLock> g(l);
    EXPECT_FALSE(l.try_lock());
  }
  EXPECT_TRUE(l.try_lock());
  l.unlock();
}
TEST(Locks, SpinLockBasics) { SpinLockBasics(); }

void RwSpinLockBasics() TEST_NO_TSA {
  RwSpinLock l;
  l.lock_shared();
  l.lock_shared();
  l.unlock_shared();
  l.unlock_shared();
  l.lock();
  l.unlock();
  { LockGuard<RwSpinLock> g(l); }
  l.lock_shared();
  l.unlock_shared();
}
TEST(Locks, RwSpinLockBasics) { RwSpinLockBasics(); }

TEST(Locks, VersionLockBasics) {
  VersionLock l;
  EXPECT_FALSE(l.IsLocked());
  const uint32_t v0 = l.BeginRead();
  EXPECT_EQ(v0 & VersionLock::kLocked, 0u);
  EXPECT_TRUE(l.Validate(v0));
  l.Lock();
  EXPECT_TRUE(l.IsLocked());
  EXPECT_FALSE(l.TryLock());
  EXPECT_FALSE(l.Validate(v0)) << "a locked word never validates";
  l.Unlock();
  EXPECT_FALSE(l.IsLocked());
  EXPECT_FALSE(l.Validate(v0)) << "unlock bumps the version";
  const uint32_t v1 = l.BeginRead();
  EXPECT_EQ(v1, v0 + 2);
  EXPECT_TRUE(l.Validate(v1));
  EXPECT_TRUE(l.TryLock());
  l.Unlock();
  EXPECT_EQ(l.BeginRead(), v0 + 4);
}

TEST(LocksConcurrent, CountersUnderEveryLock) {
  const int threads = std::max(2, TestThreads());
  const uint64_t per = Scaled(100000, 10);
  SpinLock spin;
  RwSpinLock rw;
  VersionLock ver;
  uint64_t c_spin = 0, c_rw = 0, c_ver = 0;  // plain: TSan checks the locks order them
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; t++) {
    ts.emplace_back([&] {
      for (uint64_t i = 0; i < per; i++) {
        {
          LockGuard<SpinLock> g(spin);
          c_spin++;
        }
        {
          LockGuard<RwSpinLock> g(rw);
          c_rw++;
        }
        if (i % 4 == 0) {  // and some shared sections in between
          rw.lock_shared();
          volatile uint64_t x = c_rw;
          (void)x;
          rw.unlock_shared();
        }
        ver.Lock();
        c_ver++;
        ver.Unlock();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(c_spin, threads * per);
  EXPECT_EQ(c_rw, threads * per);
  EXPECT_EQ(c_ver, threads * per);
  EXPECT_EQ(ver.BeginRead(), 2 * threads * per);
}

// Optimistic readers of a VersionLock never accept a torn pair.
TEST(LocksConcurrent, VersionLockOptimisticReads) {
  VersionLock l;
  std::atomic<uint64_t> a{0}, b{0};
  std::atomic<bool> stop{false};
  const uint64_t writes = Scaled(200000, 10);
  std::atomic<uint64_t> validated{0}, torn{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; r++) {
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_acquire)) {
        const uint32_t v = l.BeginRead();
        const uint64_t x = a.load(std::memory_order_relaxed);
        const uint64_t y = b.load(std::memory_order_relaxed);
        if (l.Validate(v)) {
          validated.fetch_add(1, std::memory_order_relaxed);
          if (x != y) torn.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  for (uint64_t i = 1; i <= writes; i++) {
    l.Lock();
    a.store(i, std::memory_order_relaxed);
    b.store(i, std::memory_order_relaxed);
    l.Unlock();
  }
  // Let the readers validate at least once after the last write (no timing assumption).
  while (validated.load() == 0) std::this_thread::yield();
  stop.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_GT(validated.load(), 0u);
}

// ============================================================================================
// EpochManager
// ============================================================================================

TEST(Epoch, RetiredObjectWaitsForGuard) {
  EpochManager m;
  std::atomic<bool> freed{false};
  std::atomic<int> stage{0};  // 1: reader inside; 2: reader may leave; 3: reader left
  std::thread reader([&] {
    {
      EpochManager::Guard g(m);
      stage.store(1);
      while (stage.load() != 2) std::this_thread::yield();
    }
    stage.store(3);
  });
  while (stage.load() != 1) std::this_thread::yield();
  m.Retire([&] { freed.store(true); });
  EXPECT_EQ(m.pending(), 1u);
  int freed_at = -1;
  for (int i = 0; i < 10 && freed_at < 0; i++) {
    m.Reclaim();
    if (freed.load()) freed_at = i;
  }
  EXPECT_EQ(freed_at, -1) << "freed while a reader that may see it is inside (Reclaim #" << freed_at
                          << ", epoch now " << m.epoch() << ")";
  EXPECT_EQ(m.pending(), freed_at < 0 ? 1u : 0u);
  stage.store(2);
  reader.join();
  EXPECT_EQ(stage.load(), 3);
  m.Drain();
  EXPECT_TRUE(freed.load());
  EXPECT_EQ(m.pending(), 0u);
}

// Synchronize() returns only once a reader inside at its call has left.
TEST(Epoch, SynchronizeWaitsForEarlierReaders) {
  EpochManager m;
  std::atomic<int> stage{0};  // 1: reader inside; 2: reader may leave
  std::thread reader([&] {
    {
      EpochManager::Guard g(m);
      stage.store(1);
      while (stage.load() != 2) std::this_thread::yield();
    }
  });
  while (stage.load() != 1) std::this_thread::yield();
  std::atomic<bool> returned{false};
  std::thread sync([&] {
    m.Synchronize();
    returned.store(true);
  });
  for (int i = 0; i < 50; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_FALSE(returned.load()) << "returned while an earlier reader is inside";
  }
  stage.store(2);
  reader.join();
  sync.join();
  EXPECT_TRUE(returned.load());
}

TEST(Epoch, LaterReaderDoesNotBlockReclaim) {
  EpochManager m;
  bool freed = false;
  m.Retire([&] { freed = true; });
  m.Reclaim();               // the retiring epoch is now behind
  EpochManager::Guard g(m);  // entered after the object was unlinked: cannot see it
  for (int i = 0; i < 4 && !freed; i++) m.Reclaim();
  EXPECT_TRUE(freed);
}

// The allocation-free form waits for readers like the closure form, and passes its words.
TEST(Epoch, FreeFnFormWaitsForGuardAndPassesItsWords) {
  EpochManager m;
  std::vector<std::pair<uint64_t, uint64_t>> freed;
  auto free_fn = [](void* ctx, uint64_t a, uint64_t b) {
    static_cast<std::vector<std::pair<uint64_t, uint64_t>>*>(ctx)->emplace_back(a, b);
  };
  {
    EpochManager::Guard g(m);
    m.Retire(free_fn, &freed, 7, uint64_t{1} << 63);
    for (int i = 0; i < 4; i++) m.Reclaim();
    EXPECT_TRUE(freed.empty()) << "freed while a reader that may see it is inside";
  }
  m.Retire([] {});  // the two forms share one queue
  m.Drain();
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0], std::make_pair(uint64_t{7}, uint64_t{1} << 63));
  EXPECT_EQ(m.pending(), 0u);
}

TEST(Epoch, SameThreadNestedGuardsAndEpochAdvance) {
  EpochManager m;
  const uint64_t e0 = m.epoch();
  EXPECT_EQ(m.Reclaim(), 0u);
  EXPECT_GT(m.epoch(), e0) << "no readers: the epoch advances";
  {
    EpochManager::Guard g1(m);
    EpochManager::Guard g2(m);
  }
  int freed = 0;
  for (int i = 0; i < 100; i++) m.Retire([&] { freed++; });
  m.Drain();
  EXPECT_EQ(freed, 100);
  EXPECT_EQ(m.pending(), 0u);
}

TEST(Epoch, DestructorFreesPending) {
  int freed = 0;
  {
    EpochManager m;
    for (int i = 0; i < 10; i++) m.Retire([&] { freed++; });
    EXPECT_EQ(freed, 0);
    EXPECT_EQ(m.pending(), 10u);
  }
  EXPECT_EQ(freed, 10);
}

// Readers dereference a shared object under a guard while a writer swaps and retires it: no
// reader ever sees a retired (poisoned) object. Under ASan a premature free is also a
// heap-use-after-free report.
TEST(EpochConcurrent, NoUseAfterRetire) {
  struct Obj {
    std::atomic<uint64_t> magic{0x600d};
  };
  EpochManager m;
  std::atomic<Obj*> cur{new Obj};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad{0}, reads{0};
  const int nreaders = std::max(1, TestThreads() - 1);
  std::vector<std::thread> readers;
  for (int r = 0; r < nreaders; r++) {
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_acquire)) {
        EpochManager::Guard g(m);
        Obj* o = cur.load(std::memory_order_acquire);
        if (o->magic.load(std::memory_order_relaxed) != 0x600d) bad.fetch_add(1);
        reads.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  const uint64_t swaps = Scaled(100000, 10);
  for (uint64_t i = 0; i < swaps; i++) {
    Obj* old = cur.exchange(new Obj, std::memory_order_acq_rel);
    m.Retire([old] {
      old->magic.store(0xdead, std::memory_order_relaxed);
      delete old;
    });
    if (i % 64 == 0) m.Reclaim();
  }
  while (reads.load() < 1000) std::this_thread::yield();
  stop.store(true);
  for (auto& t : readers) t.join();
  m.Drain();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(m.pending(), 0u);
  delete cur.load();
}

// ============================================================================================
// StripedCounter
// ============================================================================================

TEST(StripedCounter, AddSumReset) {
  StripedCounter c;
  EXPECT_EQ(c.Sum(), 0);
  c.Add(5);
  c.Add(-7);
  EXPECT_EQ(c.Sum(), -2);
  c.Reset(100);
  EXPECT_EQ(c.Sum(), 100);
  c.Add(1);
  EXPECT_EQ(c.Sum(), 101);
  c.Reset();
  EXPECT_EQ(c.Sum(), 0);
}

TEST(StripedCounterConcurrent, ManyThreads) {
  StripedCounter c;
  c.Reset(10);
  const int threads = std::max(2, TestThreads());
  const int64_t per = static_cast<int64_t>(Scaled(100000, 10));
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; t++) {
    ts.emplace_back([&, t] {
      for (int64_t i = 0; i < per; i++) c.Add(t % 2 == 0 ? 2 : -1);
    });
  }
  for (auto& t : ts) t.join();
  int64_t expect = 10;
  for (int t = 0; t < threads; t++) expect += (t % 2 == 0 ? 2 : -1) * per;
  EXPECT_EQ(c.Sum(), expect);
}

// ============================================================================================
// Status / Result / names
// ============================================================================================

TEST(Status, Basics) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.code(), Status::Code::kOk);
  EXPECT_EQ(ok.ToString(), "OK");
  EXPECT_TRUE(ok.message().empty());
  EXPECT_TRUE(Status::OK().ok());

  Status c = Status::Corruption("bad magic in x");
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(c.IsCorruption());
  EXPECT_FALSE(c.IsNotFound());
  EXPECT_EQ(c.message(), "bad magic in x");
  EXPECT_EQ(c.ToString(), "Corruption: bad magic in x");
  EXPECT_TRUE(c == Status::Code::kCorruption);

  Status copy = c;
  EXPECT_EQ(copy.ToString(), c.ToString());
  Status assigned;
  assigned = c;
  EXPECT_EQ(assigned.message(), "bad magic in x");
  const Status& alias = assigned;
  assigned = alias;  // self-assignment keeps the message
  EXPECT_EQ(assigned.message(), "bad magic in x");
  Status moved = std::move(copy);
  EXPECT_TRUE(moved.IsCorruption());
  EXPECT_EQ(moved.message(), "bad magic in x");

  EXPECT_TRUE(Status::NotFound().IsNotFound());
  EXPECT_TRUE(Status::NotFound().message().empty());
  EXPECT_EQ(Status::NotFound().ToString(), "NotFound");
  EXPECT_TRUE(Status::Exists().IsExists());
  EXPECT_TRUE(Status::InvalidArgument("x").IsInvalidArgument());
  EXPECT_TRUE(Status::IOError("x").IsIOError());
  EXPECT_TRUE(Status::OutOfSpace().IsOutOfSpace());
  EXPECT_TRUE(Status::Busy("x").IsBusy());
  EXPECT_TRUE(Status::NotSupported("x").IsNotSupported());
  EXPECT_EQ(Status::OutOfMemory("x").code(), Status::Code::kOutOfMemory);

  std::set<std::string_view> names;
  for (int i = 0; i <= static_cast<int>(Status::Code::kOutOfMemory); i++) {
    const auto name = Status::CodeName(static_cast<Status::Code>(i));
    EXPECT_NE(name, "Unknown") << i;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), 10u);
  EXPECT_EQ(Status::CodeName(Status::Code::kOutOfSpace), "OutOfSpace");
}

Status Propagate(const Status& inner, bool* reached_end) {
  PMHASH_RETURN_IF_ERROR(inner);
  *reached_end = true;
  return Status::OK();
}

TEST(Status, ReturnIfError) {
  bool end = false;
  EXPECT_TRUE(Propagate(Status::Busy("held"), &end).IsBusy());
  EXPECT_FALSE(end);
  EXPECT_TRUE(Propagate(Status::OK(), &end).ok());
  EXPECT_TRUE(end);
}

TEST(Result, Basics) {
  Result<int> r(5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), 5);
  EXPECT_EQ(*r, 5);
  EXPECT_TRUE(r.status().ok());

  Result<int> e(Status::NotFound("nope"));
  EXPECT_FALSE(e.ok());
  EXPECT_TRUE(e.status().IsNotFound());
  EXPECT_EQ(e.status().message(), "nope");

  Result<int> bad(Status::OK());  // a Result needs a value or an error
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().IsInvalidArgument());

  Result<std::unique_ptr<int>> p(std::make_unique<int>(9));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p.value(), 9);
  std::unique_ptr<int> taken = std::move(p).value();
  EXPECT_EQ(*taken, 9);

  Result<std::string> s(std::string("abc"));
  EXPECT_EQ(s->size(), 3u);
}

TEST(Names, Durability) {
  for (Durability d : {Durability::kDram, Durability::kAdr, Durability::kEadr, Durability::kSim}) {
    Durability back;
    ASSERT_TRUE(ParseDurability(DurabilityName(d), &back)) << DurabilityName(d);
    EXPECT_EQ(back, d);
  }
  EXPECT_EQ(DurabilityName(Durability::kAdr), "adr");
  Durability x = Durability::kAdr;
  EXPECT_FALSE(ParseDurability("ADR", &x));
  EXPECT_FALSE(ParseDurability("", &x));
  EXPECT_FALSE(ParseDurability("nvm", &x));
  EXPECT_EQ(x, Durability::kAdr) << "a failed parse leaves the output alone";
  EXPECT_EQ(DurabilityName(static_cast<Durability>(9)), "?");
}

}  // namespace
}  // namespace pmhash::testing
