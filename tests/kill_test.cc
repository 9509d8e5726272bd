// tests/kill_test.cc — process crash, for every registered index kind (through pmhash::Open,
// Adr durability, the index's default parameters): a child process runs operations on a file pool
// and reports each one to the parent through a pipe, before (INTENT) and after it
// returned OK (ACK). The parent SIGKILLs the child at a random moment, reopens the pool and checks:
// every acknowledged operation is applied, the at-most-one in-flight operation is either fully
// applied or absent, nothing else changed, CheckInvariants passes, Stats().recovered is true.
// Several rounds reuse the same pool, so a recovered pool is recovered again.
//
// The child never touches gtest: it only uses the library, write(2) and _exit(2).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "pmhash/index.h"
#include "test_util.h"

namespace pmhash::testing {
namespace {

using Model = std::unordered_map<Key, Value>;

enum RecType : uint64_t { kReady = 1, kIntent = 2, kAck = 3, kError = 4 };
enum OpType : uint64_t { kInsert = 1, kUpsert = 2, kUpdate = 3, kErase = 4 };

struct Rec {
  uint64_t type;
  uint64_t op;
  uint64_t key;
  uint64_t value;
};
static_assert(sizeof(Rec) <= PIPE_BUF, "pipe writes of one record are atomic");

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

void Send(int fd, const Rec& r) {
  const char* p = reinterpret_cast<const char*>(&r);
  size_t left = sizeof(r);
  while (left > 0) {
    const ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(5);  // parent gone
    p += n;
    left -= static_cast<size_t>(n);
  }
}

[[noreturn]] void ChildMain(int fd, std::string_view kind, const std::string& path, int round,
                            Model model, uint64_t seed) {
  auto r = pmhash::Open(kind, PoolOptions(path));
  if (!r.ok()) {
    Send(fd, {kError, 0, 0, static_cast<uint64_t>(r.status().code())});
    _exit(2);
  }
  Index& ix = **r;
  std::vector<Key> live;
  live.reserve(model.size() * 2 + 1024);
  for (const auto& [k, v] : model) live.push_back(k);
  std::mt19937_64 rng(seed);
  Send(fd, {kReady, 0, 0, 0});
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
    Send(fd, rec);
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
      Send(fd, {kError, rec.op, rec.key, static_cast<uint64_t>(s.code())});
      _exit(3);
    }
    if (rec.op == kInsert) live.push_back(rec.key);
    if (rec.op == kErase) {
      live[li] = live.back();
      live.pop_back();
    }
    rec.type = kAck;
    Send(fd, rec);
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
  const int rounds = static_cast<int>(std::max<uint64_t>(5, Scaled(20, 2)));
  const uint64_t seed = TestSeed(0x411);
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  Model model;
  uint64_t total_acks = 0, inflight_applied = 0, inflight_absent = 0;

  for (int round = 0; round < rounds; round++) {
    SCOPED_TRACE("round " + std::to_string(round));
    int fds[2];
    ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
    const int delay_ms = 5 + static_cast<int>(rng() % 46);
    const uint64_t child_seed = rng();
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      ChildMain(fds[1], kind, path_, round, model, child_seed);
    }
    close(fds[1]);

    // Read records; kill delay_ms after READY.
    std::vector<Rec> recs;
    std::string buf;
    bool ready = false, eof = false;
    const auto start = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point kill_at{};
    bool killed = false;
    while (!eof) {
      const auto now = std::chrono::steady_clock::now();
      if (!ready && now - start > std::chrono::seconds(60)) {
        kill(pid, SIGKILL);
        killed = true;
        ADD_FAILURE() << "child never became ready";
      }
      if (ready && !killed && now >= kill_at) {
        ASSERT_EQ(kill(pid, SIGKILL), 0);
        killed = true;
      }
      int timeout = 100;
      if (ready && !killed) {
        timeout = static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - now).count());
        if (timeout < 0) timeout = 0;
      }
      pollfd pfd{fds[0], POLLIN, 0};
      const int pr = poll(&pfd, 1, timeout);
      if (pr < 0 && errno == EINTR) continue;
      ASSERT_GE(pr, 0) << strerror(errno);
      if (pr == 0) continue;
      char tmp[1 << 16];
      const ssize_t n = read(fds[0], tmp, sizeof(tmp));
      if (n < 0 && errno == EINTR) continue;
      ASSERT_GE(n, 0) << strerror(errno);
      if (n == 0) {
        eof = true;
        break;
      }
      buf.append(tmp, static_cast<size_t>(n));
      size_t used = 0;
      while (buf.size() - used >= sizeof(Rec)) {
        Rec r;
        std::memcpy(&r, buf.data() + used, sizeof(Rec));
        used += sizeof(Rec);
        if (r.type == kReady && !ready) {
          ready = true;
          kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
        }
        recs.push_back(r);
      }
      buf.erase(0, used);
    }
    close(fds[0]);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);

    // Replay what the child reported.
    std::optional<Rec> inflight;
    uint64_t acks = 0;
    for (const Rec& r : recs) {
      ASSERT_NE(r.type, uint64_t{kError})
          << "child saw op " << r.op << " on key " << r.key << " fail with code " << r.value;
      if (r.type == kIntent) {
        ASSERT_FALSE(inflight.has_value()) << "two intents without an ack";
        inflight = r;
      } else if (r.type == kAck) {
        ASSERT_TRUE(inflight.has_value());
        ASSERT_EQ(inflight->key, r.key);
        Apply(model, r);
        inflight.reset();
        acks++;
      }
    }
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

std::vector<std::string_view> AllKinds() {
  std::vector<std::string_view> v;
  for (const IndexInfo& i : RegisteredIndexes()) v.push_back(i.name);
  return v;
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
