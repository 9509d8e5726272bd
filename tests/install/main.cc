// tests/install/main.cc — a program built against an *installed* pmhash, as a user would build
// one (run_install_test.cmake: once with find_package(pmhash), once with pkg-config). It sees
// only the installed include/pmhash/*.h and the installed library.
#include <pmhash/pmhash.h>

#include <cstdio>
#include <string_view>

// The library's internals (src/) and the benchmark (bench/) must not be visible to a consumer.
#if __has_include("pm/pool.h") || __has_include("status.cc") || __has_include("bench/driver.h")
#error "pmhash's internal headers are on the consumer's include path"
#endif

static int Failed(const char* what, const pmhash::Status& s) {
  std::fprintf(stderr, "consumer: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

int main() {
  bool have_reh = false;
  for (const auto& info : pmhash::RegisteredIndexes()) have_reh |= info.name == "reh";
  if (!have_reh) {
    std::fprintf(stderr, "consumer: index kind 'reh' is not registered\n");
    return 1;
  }

  pmhash::Options options;  // no path: an anonymous DRAM pool
  options.pool_size = 16 << 20;
  auto opened = pmhash::Open("reh", options);
  if (!opened.ok()) return Failed("Open", opened.status());
  pmhash::Index& index = *opened.value();

  for (pmhash::Key k = 1; k <= 1000; k++) {
    if (pmhash::Status s = index.Insert(k, k * 10); !s.ok()) return Failed("Insert", s);
  }
  pmhash::Value v = 0;
  if (pmhash::Status s = index.Find(42, &v); !s.ok() || v != 420) {
    std::fprintf(stderr, "consumer: Find(42) gave %s, value %lu\n", s.ToString().c_str(),
                 static_cast<unsigned long>(v));
    return 1;
  }
  if (!index.Find(5000, &v).IsNotFound()) {
    std::fprintf(stderr, "consumer: Find(5000) found an absent key\n");
    return 1;
  }
  // The batched find: a present and an absent key.
  const pmhash::Key keys[] = {7, 5000};
  pmhash::Value values[2] = {};
  pmhash::Status found[2];
  if (pmhash::Status s = index.FindBatch(keys, values, found); !s.ok()) {
    return Failed("FindBatch", s);
  }
  if (!found[0].ok() || values[0] != 70 || !found[1].IsNotFound()) {
    std::fprintf(stderr, "consumer: FindBatch gave %s / %s\n", found[0].ToString().c_str(),
                 found[1].ToString().c_str());
    return 1;
  }
  if (pmhash::Status s = index.Erase(42); !s.ok()) return Failed("Erase", s);
  if (index.Size() != 999) {
    std::fprintf(stderr, "consumer: Size() = %lu, expected 999\n",
                 static_cast<unsigned long>(index.Size()));
    return 1;
  }
  if (pmhash::Status s = index.Close(); !s.ok()) return Failed("Close", s);
  std::printf("consumer: ok (reh, 999 keys)\n");
  return 0;
}
