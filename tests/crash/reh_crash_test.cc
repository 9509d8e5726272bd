// The crash suite for REH: creation, inserts, splits, directory doublings, updates, erases and
// recovery, each crashed at every fence and operation boundary (see crash_harness.h).
#include <gtest/gtest.h>

#include "crash/crash_harness.h"
#include "index/reh/reh.h"

namespace pmhash::crashtest {
namespace {

Options SmallReh(HashMode mode) {
  Options o;
  o.pool_size = 512 << 10;  // small pool: cheap images
  o.reh.initial_depth = 1;  // splits and doublings from the first operations
  o.reh.max_depth = 24;
  o.hash_mode = mode;
  return o;
}

void Expect(const Report& r) {
  EXPECT_TRUE(r.failure.empty()) << r.failure;
  EXPECT_GT(r.images_checked, 0u);
  EXPECT_GT(r.recovery_images_checked, 0u);
  std::printf("crash points %lu, states %lu, images %lu, recovery images %lu%s\n",
              static_cast<unsigned long>(r.crash_points), static_cast<unsigned long>(r.states_checked),
              static_cast<unsigned long>(r.images_checked),
              static_cast<unsigned long>(r.recovery_images_checked),
              r.budget_exhausted ? " (budget exhausted)" : "");
}

TEST(RehCrash, AdrStrongHash) {
  Config c;
  c.seed = 11;
  Expect(Harness<reh::Reh>(c, SmallReh(HashMode::kStrong), "AdrStrongHash").Run());
}

TEST(RehCrash, AdrCollidingHash) {
  Config c;
  c.seed = 12;
  Expect(Harness<reh::Reh>(c, SmallReh(HashMode::kCollide), "AdrCollidingHash").Run());
}

TEST(RehCrash, Eadr) {
  Config c;
  c.seed = 13;
  c.eadr = true;
  Expect(Harness<reh::Reh>(c, SmallReh(HashMode::kStrong), "Eadr").Run());
}

TEST(RehCrash, TearSafeInsertSurvivesTornLines) {
  Config c;
  c.seed = 14;
  c.tear_words = true;
  c.random_images = 8;
  Options o = SmallReh(HashMode::kStrong);
  o.reh.tear_safe = true;
  Expect(Harness<reh::Reh>(c, o, "TearSafe").Run());
}

// Documents the assumption behind the paper's one-flush insert (I4 in reh.h): if the platform
// could tear a line at 8 bytes, the new key could become durable without its value. The
// simulator must find that image.
TEST(RehCrash, OneFlushInsertNeedsWholeLineWriteBack) {
  Config c;
  c.seed = 5;
  c.tear_words = true;
  c.random_images = 20;
  c.ops = 60;
  const Report r = Harness<reh::Reh>(c, SmallReh(HashMode::kStrong), "OneFlushTorn").Run();
  EXPECT_NE(r.failure.find("match neither side"), std::string::npos) << r.failure;
}

}  // namespace
}  // namespace pmhash::crashtest
