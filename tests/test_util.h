// tests/test_util.h — helpers shared by the pmhash test programs.
//
//   * TestScale(): PMHASH_TEST_SCALE (default 1) multiplies op counts; sanitizer builds divide.
//   * TestThreads(): PMHASH_TEST_THREADS (default 4).
//   * TempPoolPath(): a unique pool file path under $TMPDIR, else /dev/shm, else /tmp.
//   * ScopedPath: removes a pool file when it leaves scope.
//   * Seeds: tests use fixed seeds (PMHASH_TEST_SEED overrides) and print them on failure through
//     SCOPED_TRACE(SeedTrace(seed)).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "pmhash/index.h"
#include "pmhash/options.h"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PMHASH_TEST_TSAN 1
#endif
#if __has_feature(address_sanitizer)
#define PMHASH_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(PMHASH_TEST_TSAN)
#define PMHASH_TEST_TSAN 1
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(PMHASH_TEST_ASAN)
#define PMHASH_TEST_ASAN 1
#endif

namespace pmhash::testing {

// Options of a pool at `path`: durability, size and hash mode; the index parameters are the
// caller's.
inline Options PoolOptions(const std::string& path, Durability d, uint64_t pool_size,
                           HashMode mode = HashMode::kStrong) {
  Options o;
  o.path = path;
  o.pool_size = pool_size;
  o.durability = d;
  o.hash_mode = mode;
  return o;
}

// The detail `name` of IndexStats (index-specific figures); a test failure and -1 if absent.
inline double Detail(const IndexStats& s, std::string_view name) {
  for (const NamedStat& d : s.details) {
    if (d.name == name) return d.value;
  }
  ADD_FAILURE() << "no detail " << name;
  return -1;
}

#if defined(PMHASH_TEST_TSAN)
inline constexpr bool kTsan = true;
#else
inline constexpr bool kTsan = false;
#endif
#if defined(PMHASH_TEST_ASAN)
inline constexpr bool kAsan = true;
#else
inline constexpr bool kAsan = false;
#endif
inline constexpr bool kSanitized = kTsan || kAsan;

inline double EnvDouble(const char* name, double def) {
  const char* s = std::getenv(name);
  if (!s || !*s) return def;
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  return (end && *end == 0 && v > 0) ? v : def;
}

// PMHASH_TEST_SCALE, default 1.
inline double TestScale() {
  static const double kScale = EnvDouble("PMHASH_TEST_SCALE", 1.0);
  return kScale;
}

// `base` scaled by PMHASH_TEST_SCALE, divided by `sanitized_div` in sanitizer builds; >= 1.
inline uint64_t Scaled(uint64_t base, uint64_t sanitized_div = 1) {
  double v = static_cast<double>(base) * TestScale();
  if (kSanitized) v /= static_cast<double>(sanitized_div);
  return v < 1 ? 1 : static_cast<uint64_t>(v);
}

inline int TestThreads() {
  static const int kThreads = static_cast<int>(EnvDouble("PMHASH_TEST_THREADS", 4));
  return kThreads < 1 ? 1 : kThreads;
}

inline uint64_t TestSeed(uint64_t def) {
  const char* s = std::getenv("PMHASH_TEST_SEED");
  if (!s || !*s) return def;
  return std::strtoull(s, nullptr, 0);
}

inline std::string SeedTrace(uint64_t seed) {
  return "seed=" + std::to_string(seed) + " (rerun with PMHASH_TEST_SEED=" + std::to_string(seed) +
         ")";
}

inline std::string TempDir() {
  if (const char* t = std::getenv("TMPDIR"); t && *t) return t;
  struct stat st;
  if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0) {
    return "/dev/shm";
  }
  return "/tmp";
}

// A fresh, unused path: <tmp>/pmhash-test-<pid>-<n>-<tag>.pool
inline std::string TempPoolPath(std::string_view tag) {
  static std::atomic<uint64_t> counter{0};
  std::string clean;
  for (char c : tag) clean += (isalnum(static_cast<unsigned char>(c)) ? c : '_');
  if (clean.size() > 80) clean.resize(80);
  std::string p = TempDir() + "/pmhash-test-" + std::to_string(getpid()) + "-" +
                  std::to_string(counter.fetch_add(1)) + "-" + clean + ".pool";
  unlink(p.c_str());
  return p;
}

// Runs a shell command line under timeout(1) (`timeout_s` seconds; exit status 124 if it ran
// out); returns its exit status (128 + N if signal N ended it), its stdout and stderr together
// in *out.
inline int RunShell(const std::string& cmd, std::string* out, int timeout_s = 60) {
  const std::string full = "timeout " + std::to_string(timeout_s) + " " + cmd + " 2>&1";
  FILE* f = popen(full.c_str(), "r");
  if (!f) return -1;
  out->clear();
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;) out->append(buf, n);
  const int status = pclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class ScopedPath {
 public:
  explicit ScopedPath(std::string_view tag) : path_(TempPoolPath(tag)) {}
  ~ScopedPath() { unlink(path_.c_str()); }
  ScopedPath(const ScopedPath&) = delete;
  ScopedPath& operator=(const ScopedPath&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline bool FileExists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

inline uint64_t FileSize(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

inline std::vector<uint8_t> ReadFile(const std::string& p) {
  std::vector<uint8_t> out;
  const int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  out.resize(FileSize(p));
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  close(fd);
  return out;
}

inline bool WriteFile(const std::string& p, const std::vector<uint8_t>& data) {
  const int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  size_t put = 0;
  while (put < data.size()) {
    const ssize_t n = pwrite(fd, data.data() + put, data.size() - put, static_cast<off_t>(put));
    if (n <= 0) break;
    put += static_cast<size_t>(n);
  }
  close(fd);
  return put == data.size();
}

// Writes `len` bytes at `offset` of an existing file.
inline bool PatchFile(const std::string& p, uint64_t offset, const void* data, size_t len) {
  const int fd = open(p.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = pwrite(fd, data, len, static_cast<off_t>(offset));
  close(fd);
  return n == static_cast<ssize_t>(len);
}

inline bool ReadAt(const std::string& p, uint64_t offset, void* data, size_t len) {
  const int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = pread(fd, data, len, static_cast<off_t>(offset));
  close(fd);
  return n == static_cast<ssize_t>(len);
}

// splitmix64: deterministic value/key scrambling for tests.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Keys SplitMix64(0..n-1) are present in `ix`, whose pool counts traffic in `ctr`. Asserts that an
// update and an erase each cost one persist and one fence (`lines_per_persist` lines), and that
// finds and failed writes (absent erase/update, duplicate insert) persist nothing. Leaves keys
// 0..99 erased.
template <class Index, class Counters>
void ExpectUpdateEraseOnePersistFailuresNone(Index& ix, Counters& ctr, uint64_t n,
                                             uint64_t lines_per_persist) {
  ix.ResetCounters();
  for (uint64_t i = 0; i < 100; i++) EXPECT_TRUE(ix.Update(SplitMix64(i), 7).ok());
  TrafficStats t = ctr.Snapshot();
  EXPECT_EQ(t.persists, 100u);
  EXPECT_EQ(t.fences, 100u);
  EXPECT_EQ(t.flushed_lines, 100u * lines_per_persist);
  ix.ResetCounters();
  for (uint64_t i = 0; i < 100; i++) EXPECT_TRUE(ix.Erase(SplitMix64(i)).ok());
  t = ctr.Snapshot();
  EXPECT_EQ(t.persists, 100u);
  EXPECT_EQ(t.fences, 100u);
  ix.ResetCounters();
  Value v;
  for (uint64_t i = 0; i < 200; i++) {
    (void)ix.Find(SplitMix64(i), &v);
    EXPECT_TRUE(ix.Erase(SplitMix64(i + n + 1)).IsNotFound());
    EXPECT_TRUE(ix.Update(SplitMix64(i + n + 1), 1).IsNotFound());
    EXPECT_TRUE(ix.Insert(SplitMix64(i + 100), 1).IsExists());
  }
  t = ctr.Snapshot();
  EXPECT_EQ(t.persists, 0u);
  EXPECT_EQ(t.fences, 0u);
  EXPECT_EQ(t.nt_bytes, 0u);
}

// First error seen by any thread (threads do not use gtest assertions).
class Errors {
 public:
  void Add(const std::string& e) {
    std::lock_guard<std::mutex> g(mu_);
    if (count_++ == 0) first_ = e;
  }
  bool any() const {
    std::lock_guard<std::mutex> g(mu_);
    return count_ != 0;
  }
  std::string Report() const {
    std::lock_guard<std::mutex> g(mu_);
    return std::to_string(count_) + " error(s); first: " + first_;
  }

 private:
  mutable std::mutex mu_;
  uint64_t count_ = 0;
  std::string first_;
};

}  // namespace pmhash::testing
