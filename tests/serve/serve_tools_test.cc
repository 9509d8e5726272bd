// tests/serve/serve_tools_test.cc — the `pmhash serve` binary (PMHASH_CLI) with the clients
// people already run, from Debian's redis-tools and nutcracker packages: redis-cli round trips
// and --pipe mass insertion, redis-benchmark runs on byte-key and uint64 kinds, a kill -9 of a
// loaded server on every kind (every acknowledged write must be there after the restart, and
// nothing that was never sent), and three servers behind twemproxy (every key on exactly one
// shard). Loopback only; every wait and every child is bounded by a timeout.
//
// Without the tools the tests are skipped, except under CI (environment CI set): there
// scripts/install-deps has installed them, and a missing one is a failure.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "resp_client.h"
#include "test_util.h"

namespace pmhash::testing {
namespace {

using Args = std::vector<std::string>;

bool HaveTool(const std::string& name) {
  const std::string cmd = "command -v " + name + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

#define REQUIRE_TOOL(name)                                                                  \
  do {                                                                                      \
    if (!HaveTool(name)) {                                                                  \
      if (std::getenv("CI") != nullptr) {                                                   \
        FAIL() << name << " is missing: scripts/install-deps installs redis-tools and "     \
                          "nutcracker";                                                     \
      }                                                                                     \
      GTEST_SKIP() << name << " not installed (Debian: redis-tools, nutcracker)";           \
    }                                                                                       \
  } while (0)

uint16_t FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A child process with its stdout+stderr on a pipe; killed (SIGKILL) if still running at the end.
class Child {
 public:
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
    if (fd_ >= 0) close(fd_);
  }
  bool Spawn(const std::vector<std::string>& argv) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(p[1], 1);
      dup2(p[1], 2);
      std::vector<char*> a;
      for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      execvp(a[0], a.data());
      _exit(127);
    }
    close(p[1]);
    fd_ = p[0];
    return pid_ > 0;
  }
  // Reads output until `marker` appears (true) or timeout_ms passes / the child exits (false).
  bool WaitFor(const std::string& marker, int timeout_ms = 30000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (output_.find(marker) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            end - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0 || !ReadSome(static_cast<int>(left))) return false;
    }
    return true;
  }
  void Signal(int sig) { kill(pid_, sig); }
  // Waits (bounded, 30 s; then SIGKILL) and returns the wait status.
  int Wait() {
    int status = 0;
    for (int i = 0; i < 3000; i++) {
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        while (ReadSome(0)) {
        }
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  const std::string& output() const { return output_; }

 private:
  bool ReadSome(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n <= 0) return false;
    output_.append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string output_;
};

// `pmhash serve` on a pool, on a free port.
class Server {
 public:
  bool Start(const std::string& pool, const Args& extra = {}) {
    Args argv{PMHASH_CLI, "serve", "--pool", pool, "--port", "0", "--threads", "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    child_ = std::make_unique<Child>();
    if (!child_->Spawn(argv) || !child_->WaitFor("listening on 127.0.0.1:")) {
      ADD_FAILURE() << "pmhash serve did not start: " << (child_ ? child_->output() : "");
      return false;
    }
    child_->WaitFor("\n", 100);
    const std::string& out = child_->output();
    const size_t at = out.find("listening on 127.0.0.1:") + 23;
    port_ = static_cast<uint16_t>(std::stoi(out.substr(at)));
    return true;
  }
  uint16_t port() const { return port_; }
  std::string port_str() const { return std::to_string(port_); }
  Child& child() { return *child_; }

 private:
  std::unique_ptr<Child> child_;
  uint16_t port_ = 0;
};

// Every key of a server, by a whole SCAN iteration.
std::set<std::string> ScanAll(uint16_t port) {
  std::set<std::string> keys;
  RespConn c;
  if (!c.Connect(port)) return keys;
  std::string cursor = "0";
  for (int calls = 0; calls < 100000; calls++) {
    const Reply r = c.Call({"SCAN", cursor, "COUNT", "500"});
    if (r.type != Reply::kArray || r.elems.size() != 2) {
      ADD_FAILURE() << "SCAN: " << r.str;
      return keys;
    }
    for (const Reply& k : r.elems[1].elems) keys.insert(k.str);
    cursor = r.elems[0].str;
    if (cursor == "0") break;
  }
  return keys;
}

TEST(ServeTools, RedisCliRoundTrips) {
  REQUIRE_TOOL("redis-cli");
  ScopedPath pool("serve-cli");
  Server srv;
  ASSERT_TRUE(srv.Start(pool.path(), {"--index", "smartht-kv"}));
  const std::string cli = "redis-cli -p " + srv.port_str() + " ";
  std::string out;
  EXPECT_EQ(RunShell(cli + "SET greeting 'hello world'", &out), 0);
  EXPECT_EQ(out, "OK\n");
  RunShell(cli + "GET greeting", &out);
  EXPECT_EQ(out, "hello world\n");
  RunShell(cli + "INCR visits", &out);
  EXPECT_EQ(out, "1\n");
  RunShell(cli + "--scan --pattern 'g*'", &out);
  EXPECT_EQ(out, "greeting\n");
  RunShell(cli + "DBSIZE", &out);
  EXPECT_EQ(out, "2\n");
  RunShell(cli + "INFO keyspace", &out);
  EXPECT_NE(out.find("db0:keys=2"), std::string::npos) << out;
  RunShell(cli + "-3 HELLO 3", &out);  // RESP3: redis-cli prints the map's pairs
  EXPECT_NE(out.find("proto 3"), std::string::npos) << out;
  RunShell(cli + "-3 MGET greeting nope", &out);
  EXPECT_EQ(out, "hello world\n\n") << "a RESP3 null is an empty line";
  RunShell(cli + "SET k v EX 5", &out);
  EXPECT_NE(out.find("do not expire"), std::string::npos) << out;
  // Mass insertion (redis-cli --pipe: raw RESP on stdin, one reply expected per command).
  const std::string file = pool.path() + ".pipe";
  {
    std::ofstream f(file, std::ios::binary);
    for (int i = 0; i < 10000; i++) {
      f << EncodeCommand({"SET", "mass:" + std::to_string(i), std::to_string(i * 3)});
    }
  }
  EXPECT_EQ(RunShell(cli + "--pipe < " + file, &out), 0) << out;
  EXPECT_NE(out.find("errors: 0, replies: 10000"), std::string::npos) << out;
  unlink(file.c_str());
  RunShell(cli + "GET mass:9999", &out);
  EXPECT_EQ(out, "29997\n");
  RunShell(cli + "DBSIZE", &out);
  EXPECT_EQ(out, "10002\n");
  RunShell(cli + "SHUTDOWN", &out);
  const int status = srv.child().Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << srv.child().output();
  EXPECT_NE(srv.child().output().find("closed the pool cleanly"), std::string::npos);
  EXPECT_EQ(RunShell(std::string(PMHASH_CLI) + " check " + pool.path(), &out), 0) << out;
  EXPECT_NE(out.find("size:           10002 keys"), std::string::npos) << out;
}

TEST(ServeTools, RedisCliOnAUint64Kind) {
  REQUIRE_TOOL("redis-cli");
  ScopedPath pool("serve-cli64");
  Server srv;
  ASSERT_TRUE(srv.Start(pool.path(), {"--index", "turbo"}));
  const std::string cli = "redis-cli -p " + srv.port_str() + " ";
  std::string out;
  RunShell(cli + "SET 0042 7", &out);
  EXPECT_EQ(out, "OK\n");
  RunShell(cli + "GET 42", &out);
  EXPECT_EQ(out, "7\n");
  RunShell(cli + "SET name alice", &out);
  EXPECT_NE(out.find("is not a decimal unsigned 64-bit integer"), std::string::npos) << out;
}

// redis-benchmark with its standard tests on a byte-key kind, and with custom decimal commands
// on a uint64 kind; then SIGTERM must close the pool cleanly and the pool must check.
TEST(ServeTools, RedisBenchmarkRuns) {
  REQUIRE_TOOL("redis-benchmark");
  for (const std::string kind : {"pea-kv", "reh"}) {
    SCOPED_TRACE(kind);
    ScopedPath pool("serve-bench-" + kind);
    Server srv;
    ASSERT_TRUE(srv.Start(pool.path(), {"--index", kind}));
    const std::string bench =
        "redis-benchmark -p " + srv.port_str() + " -n 20000 -r 5000 -c 20 -P 8 -q ";
    std::string out;
    if (kind == "reh") {
      EXPECT_EQ(RunShell(bench + "SET __rand_int__ __rand_int__", &out), 0) << out;
      EXPECT_NE(out.find("requests per second"), std::string::npos) << out;
      EXPECT_EQ(RunShell(bench + "GET __rand_int__", &out), 0) << out;
    } else {
      EXPECT_EQ(RunShell(bench + "-t set,get,incr,mset,ping", &out), 0) << out;
      for (const char* test : {"SET: ", "GET: ", "INCR: ", "MSET (10 keys): "}) {
        EXPECT_NE(out.find(test), std::string::npos) << test << out;
      }
    }
    EXPECT_EQ(out.find("ERR"), std::string::npos) << out;
    RespConn c;
    ASSERT_TRUE(c.Connect(srv.port()));
    const Reply size = c.Call({"DBSIZE"});
    EXPECT_GT(size.num, 1000);
    EXPECT_LE(size.num, 5001 + 5000);  // key:N and counter:N ranges of -r 5000 (+ the mset key)
    c.Close();
    srv.child().Signal(SIGTERM);
    const int status = srv.child().Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << srv.child().output();
    EXPECT_NE(srv.child().output().find("Terminated: closed the pool cleanly"), std::string::npos)
        << srv.child().output();
    EXPECT_EQ(RunShell(std::string(PMHASH_CLI) + " check " + pool.path(), &out), 0) << out;
  }
}

// kill -9 of a server in the middle of a write load, on every kind: a recording client pipelines
// writes of its own keys beside a redis-benchmark load; after the restart every write it saw
// acknowledged is there, the ones in flight are there or not, and no key it never sent is.
TEST(ServeTools, KillNineKeepsEveryAcknowledgedWrite) {
  REQUIRE_TOOL("redis-benchmark");
  std::string kinds_out;
  ASSERT_EQ(RunShell(std::string(PMHASH_CLI) + " list | grep -v '^ '", &kinds_out), 0);
  std::vector<std::string> kinds;
  for (size_t at = 0; at < kinds_out.size();) {
    const size_t nl = kinds_out.find('\n', at);
    kinds.push_back(kinds_out.substr(at, nl - at));
    at = nl + 1;
  }
  ASSERT_GE(kinds.size(), 5u);
  for (const std::string& kind : kinds) {
    SCOPED_TRACE(kind);
    const bool multi = kind.find("multi") != std::string::npos;
    const bool bytes = kind.size() > 3 && kind.substr(kind.size() - 3) == "-kv";
    ScopedPath pool("serve-kill-" + kind);
    Server srv;
    ASSERT_TRUE(srv.Start(pool.path(), {"--index", kind, "--durability", "adr"}));
    // The recorder's keys: "rec:i" or 10^13 + i, out of redis-benchmark's 12-digit range.
    auto key = [&](uint64_t i) {
      return bytes ? "rec:" + std::to_string(i) : std::to_string(10000000000000ULL + i);
    };
    auto value = [&](uint64_t i) {
      return bytes ? "val:" + std::to_string(i) : std::to_string(i * 7 + 1);
    };
    auto write = [&](uint64_t i) {
      return EncodeCommand(multi ? Args{"SADD", key(i), value(i)} : Args{"SET", key(i), value(i)});
    };
    const std::string load = multi   ? "SADD __rand_int__ __rand_int__"
                             : bytes ? "-t set"
                                     : "SET __rand_int__ __rand_int__";
    std::thread bench([&] {
      std::string out;
      RunShell("redis-benchmark -p " + srv.port_str() + " -n 2000000 -r 100000 -c 4 -P 16 -q " + load,
          &out, 20);
    });
    RespConn c;
    ASSERT_TRUE(c.Connect(srv.port()));
    uint64_t sent = 0, acked = 0;
    const auto start = std::chrono::steady_clock::now();
    const int window = 32;
    bool killed = false;
    while (!killed) {
      std::string batch;
      for (int i = 0; i < window; i++) batch += write(sent++);
      ASSERT_TRUE(c.SendRaw(batch));
      const bool enough = acked >= 2000 && std::chrono::steady_clock::now() - start >
                                               std::chrono::milliseconds(200);
      if (enough || std::chrono::steady_clock::now() - start > std::chrono::seconds(10)) {
        srv.child().Signal(SIGKILL);  // with this window in flight
        killed = true;
      }
      for (int i = 0; i < window; i++) {
        auto r = c.Read(killed ? 2000 : 10000);
        if (!r) break;
        ASSERT_TRUE(multi ? (r->type == Reply::kInt && r->num == 1) : r->ok())
            << "write " << acked << ": " << r->str;
        acked++;
      }
    }
    const int status = srv.child().Wait();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    bench.join();
    ASSERT_GE(acked, 2000u);
    // Restart on the same pool (it describes itself: no --index) and check.
    Server again;
    ASSERT_TRUE(again.Start(pool.path()));
    RespConn v;
    ASSERT_TRUE(v.Connect(again.port()));
    EXPECT_NE(v.Call({"INFO", "persistence"}).str.find("recovered_at_open:1"), std::string::npos);
    std::string batch;
    const uint64_t probe_end = sent + 100;  // keys never sent must be absent
    for (uint64_t i = 0; i < probe_end; i++) {
      batch += EncodeCommand(multi ? Args{"SMEMBERS", key(i)} : Args{"GET", key(i)});
    }
    ASSERT_TRUE(v.SendRaw(batch));
    uint64_t in_flight_kept = 0;
    for (uint64_t i = 0; i < probe_end; i++) {
      auto r = v.Read();
      ASSERT_TRUE(r) << i;
      const bool present = multi ? r->elems.size() == 1 && r->elems[0].str == value(i)
                                 : r->type == Reply::kBulk && r->str == value(i);
      const bool absent = multi ? r->elems.empty() : r->type == Reply::kNull;
      if (i < acked) {
        ASSERT_TRUE(present) << "acknowledged write " << i << " lost (of " << acked << ")";
      } else if (i < sent) {
        ASSERT_TRUE(present || absent) << "in-flight write " << i << " torn";
        in_flight_kept += present;
      } else {
        ASSERT_TRUE(absent) << "write " << i << " was never sent, yet it is there";
      }
    }
    v.Close();
    again.child().Signal(SIGTERM);
    EXPECT_EQ(again.child().Wait(), 0) << again.child().output();
    std::string out;
    EXPECT_EQ(RunShell(std::string(PMHASH_CLI) + " check " + pool.path(), &out), 0) << out;
    std::printf("%-11s acknowledged %llu, in flight %llu (kept %llu)\n", kind.c_str(),
                static_cast<unsigned long long>(acked),
                static_cast<unsigned long long>(sent - acked),
                static_cast<unsigned long long>(in_flight_kept));
  }
}

// Three servers (three different kinds) behind twemproxy (nutcracker) with consistent hashing:
// writes through the proxy, redis-benchmark through the proxy, then every key is on exactly one
// shard and reads through the proxy find it.
TEST(ServeTools, TwemproxyShardsAcrossThreeServers) {
  REQUIRE_TOOL("nutcracker");
  REQUIRE_TOOL("redis-benchmark");
  const std::string kinds[3] = {"reh-kv", "smartht-kv", "pea-kv"};
  std::vector<std::unique_ptr<ScopedPath>> pools;
  Server shards[3];
  for (int i = 0; i < 3; i++) {
    pools.push_back(std::make_unique<ScopedPath>("serve-shard-" + kinds[i]));
    ASSERT_TRUE(shards[i].Start(pools[i]->path(), {"--index", kinds[i]}));
  }
  const uint16_t proxy = FreePort(), stats = FreePort();
  const std::string conf = pools[0]->path() + ".yml";
  {
    std::ofstream f(conf);
    f << "pmhash:\n"
         "  listen: 127.0.0.1:" << proxy << "\n"
         "  hash: fnv1a_64\n"
         "  distribution: ketama\n"
         "  redis: true\n"
         "  auto_eject_hosts: false\n"
         "  servers:\n";
    for (int i = 0; i < 3; i++) f << "   - 127.0.0.1:" << shards[i].port() << ":1 s" << i << "\n";
  }
  Child nut;
  ASSERT_TRUE(nut.Spawn({"nutcracker", "-c", conf, "-s", std::to_string(stats), "-a",
                         "127.0.0.1", "-v", "4"}));
  RespConn c;
  bool up = false;
  for (int i = 0; i < 200 && !up; i++) {
    up = c.Connect(proxy);
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(up) << nut.output();
  const int n = 3000;
  std::string batch;
  for (int i = 0; i < n; i++) {
    batch += EncodeCommand({"SET", "shard:" + std::to_string(i), std::to_string(i)});
  }
  ASSERT_TRUE(c.SendRaw(batch));
  for (int i = 0; i < n; i++) {
    auto r = c.Read();
    ASSERT_TRUE(r && r->ok()) << i << ": " << (r ? r->str : "no reply");
  }
  std::string out;
  EXPECT_EQ(RunShell("redis-benchmark -p " + std::to_string(proxy) +
                    " -t set -n 20000 -r 2000 -c 10 -P 4 -q",
                &out),
            0)
      << out;
  EXPECT_NE(out.find("SET: "), std::string::npos) << out;
  std::map<std::string, int> where;
  for (int s = 0; s < 3; s++) {
    const std::set<std::string> keys = ScanAll(shards[s].port());
    EXPECT_GT(keys.size(), static_cast<size_t>(n / 10)) << "shard " << s << " (" << kinds[s] << ")";
    for (const std::string& k : keys) where[k]++;
  }
  int ours = 0, bench_keys = 0;
  for (const auto& [k, count] : where) {
    EXPECT_EQ(count, 1) << k << " is on " << count << " shards";
    ours += k.rfind("shard:", 0) == 0;
    bench_keys += k.rfind("key:", 0) == 0;
  }
  EXPECT_EQ(ours, n);
  EXPECT_GT(bench_keys, 1000);
  for (int i = 0; i < n; i += 97) {
    EXPECT_EQ(c.Call({"GET", "shard:" + std::to_string(i)}).str, std::to_string(i));
  }
  c.Close();
  nut.Signal(SIGTERM);
  nut.Wait();
  unlink(conf.c_str());
  for (Server& s : shards) {
    s.child().Signal(SIGTERM);
    EXPECT_EQ(s.child().Wait(), 0);
  }
}

}  // namespace
}  // namespace pmhash::testing
