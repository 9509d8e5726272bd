// crash_soak — long crash-simulator runs for local use:
//   crash_soak [--minutes N] [--seed S] [--ops N]
// Cycles through every index x {ADR strong, ADR colliding, eADR, ADR with 8-byte torn lines (with
// the index's TearSafe() options)} with seeds S, S+1, ... until the time is up; prints per-index totals and stops
// at the first failure with its replay line. Exit status 0 iff no failure.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "crash/crash_harness.h"
#include "crash/crash_indexes.h"

using namespace pmhash;
using namespace pmhash::crashtest;

namespace {

struct Totals {
  uint64_t runs = 0, points = 0, states = 0, images = 0, recovery_images = 0;
};

template <class T>
bool RunOne(int variant, uint64_t seed, int ops, double budget, Totals& t) {
  Config c;
  c.seed = seed;
  c.ops = ops;
  c.budget_seconds = budget;
  c.random_images = 6;
  Options o = T::Small(variant == 1 ? HashMode::kCollide : HashMode::kStrong);
  if (variant == 2) c.eadr = true;
  if (variant == 3) {
    c.tear_words = true;
    o = T::TearSafe(std::move(o));
  }
  const Report r = Harness<T::template Index>(c, o, std::string(T::kName) + "Soak").Run();
  t.runs++;
  t.points += r.crash_points;
  t.states += r.states_checked;
  t.images += r.images_checked;
  t.recovery_images += r.recovery_images_checked;
  if (!r.failure.empty()) {
    std::printf("FAILURE (%s, variant %d, seed %lu):\n%s\n", std::string(T::kName).c_str(), variant,
                static_cast<unsigned long>(seed), r.failure.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  double minutes = 1;
  uint64_t seed = 1000;
  int ops = 400;
  for (int i = 1; i < argc; i++) {
    auto need = [&](const char* f) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", f);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--minutes")) {
      minutes = std::strtod(need("--minutes"), nullptr);
    } else if (!std::strcmp(argv[i], "--seed")) {
      seed = std::strtoull(need("--seed"), nullptr, 10);
    } else if (!std::strcmp(argv[i], "--ops")) {
      ops = std::atoi(need("--ops"));
    } else {
      std::fprintf(stderr, "usage: crash_soak [--minutes N] [--seed S] [--ops N]\n");
      return 2;
    }
  }
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(minutes * 60));
  std::map<std::string, Totals> totals;
  bool ok = true;
  for (uint64_t s = seed; ok && std::chrono::steady_clock::now() < end; s++) {
    std::apply(
        [&](auto... t) {
          ((ok = ok &&
                 [&] {
                   using T = decltype(t);
                   Totals& tot = totals[std::string(T::kName)];
                   for (int v = 0; v < 4 && ok; v++) ok = RunOne<T>(v, s, ops, 600, tot);
                   return ok;
                 }()),
           ...);
        },
        AllIndexes{});
  }
  for (const auto& [name, t] : totals) {
    std::printf(
        "%-8s runs %lu, crash points %lu, states checked %lu, images %lu, recovery images %lu\n",
        name.c_str(), static_cast<unsigned long>(t.runs), static_cast<unsigned long>(t.points),
        static_cast<unsigned long>(t.states), static_cast<unsigned long>(t.images),
        static_cast<unsigned long>(t.recovery_images));
  }
  std::printf("%s\n", ok ? "soak: no failure" : "soak: FAILED");
  return ok ? 0 : 1;
}
