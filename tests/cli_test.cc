// tests/cli_test.cc — the `pmhash` command-line tool, run as a child process (PMHASH_CLI).
//
// Each run goes through `timeout`, so a command that would hang (the FIFO case below did) fails
// the test instead of stalling the suite.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "test_util.h"

namespace pmhash::testing {
namespace {

constexpr int kTimedOut = 124;  // timeout(1)'s exit status

// Runs `pmhash ARGS` with a 10 s limit; returns its exit status, stdout and stderr in *out.
int RunCli(const std::string& args, std::string* out) {
  return RunShell(PMHASH_CLI " " + args + " </dev/null", out, 10);
}

// The line "KEY:   value" of `pmhash info` / `check` output, value only ("" if absent).
std::string Field(const std::string& out, const std::string& key) {
  const size_t at = out.find(key + ":");
  if (at == std::string::npos) return "";
  size_t v = out.find_first_not_of(' ', at + key.size() + 1);
  return out.substr(v, out.find('\n', v) - v);
}

// scripts/bench-keys (issue 16, the headline over several key counts): one interleaved-rounds run
// per key count, then each row's ratio per count and their geometric mean. A count that is not a
// count, or a --from directory without results, is refused.
TEST(Cli, BenchKeysSweepsKeyCounts) {
  std::string out;
  if (RunCli("bench --help", &out) != 0) GTEST_SKIP() << "this pmhash is built without bench";
  char dir[] = "/tmp/pmhash-bench-keys-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string script = std::string(PMHASH_SOURCE_DIR) + "/scripts/bench-keys ";
  ASSERT_EQ(RunShell(script + "--pmhash " PMHASH_CLI " --keys 3K,6000 --out " + dir +
                         " -- --index reh,pea --repeat 2 --phases insert,find+ --no-probe",
                     &out, 120),
            0)
      << out;
  EXPECT_TRUE(FileExists(std::string(dir) + "/keys-3000.json"));
  EXPECT_TRUE(FileExists(std::string(dir) + "/keys-6000.json"));
  // "  insert  3K  6K  geomean", then one line per row with two ratios [spread] and the mean.
  const size_t summary = out.find("and the geometric mean over the counts");
  ASSERT_NE(summary, std::string::npos) << out;
  EXPECT_NE(out.find("geomean", summary), std::string::npos) << out;
  for (const char* row : {"reh/adr", "pea/adr"}) {
    const size_t at = out.find(std::string("\n  ") + row, summary);
    ASSERT_NE(at, std::string::npos) << row << "\n" << out;
    const std::string line = out.substr(at + 1, out.find('\n', at + 1) - at - 1);
    EXPECT_EQ(std::count(line.begin(), line.end(), '['), 2) << line;
    EXPECT_EQ(line.find(" -"), std::string::npos) << "a count or the mean is missing: " << line;
  }
  const size_t begin = out.rfind("\n==", summary), end = out.find("\nresults:", summary);
  ASSERT_TRUE(begin != std::string::npos && end != std::string::npos) << out;
  const std::string table = out.substr(begin, end - begin);
  EXPECT_NE(RunShell(script + "--keys 3X --pmhash " PMHASH_CLI, &out), 0);
  EXPECT_NE(out.find("bad key count"), std::string::npos) << out;
  std::string again;
  ASSERT_EQ(RunShell(script + "--from " + dir, &again), 0) << again;
  EXPECT_NE(again.find(table), std::string::npos) << "--from prints the same table\n" << again;
  ASSERT_EQ(std::system(("rm -f " + std::string(dir) + "/keys-*.json").c_str()), 0);
  EXPECT_NE(RunShell(script + "--from " + dir, &out), 0);
  EXPECT_NE(out.find("no keys-*.json"), std::string::npos) << out;
  rmdir(dir);
}

// Regression test: `pmhash info|get|put|check` on a FIFO hung forever (the header was read
// through an O_RDONLY open, which waits for a writer). The file type is now checked by stat.
TEST(Cli, FifoIsRefusedWithoutHanging) {
  ScopedPath p("fifo");
  ASSERT_EQ(mkfifo(p.path().c_str(), 0600), 0);
  for (const std::string& cmd : {"info " + p.path(), "get " + p.path() + " 1",
                                 "put " + p.path() + " 1 2", "check " + p.path()}) {
    std::string out;
    const int rc = RunCli(cmd, &out);
    ASSERT_NE(rc, kTimedOut) << "pmhash " << cmd << " hangs on a FIFO";
    EXPECT_EQ(rc, 1) << cmd << ": " << out;
    EXPECT_NE(out.find("not a regular file or devdax device"), std::string::npos)
        << cmd << ": " << out;
  }
}

// Regression test: `pmhash info` on a new pool said "open count: 0": the creating open was not
// counted.
TEST(Cli, InfoCountsTheCreatingOpen) {
  ScopedPath p("info_count");
  std::string out;
  ASSERT_EQ(RunCli("put " + p.path() + " 7 70 --pool-size 1M", &out), 0) << out;
  ASSERT_EQ(RunCli("info " + p.path(), &out), 0) << out;
  EXPECT_EQ(Field(out, "open count"), "1") << out;
  EXPECT_NE(Field(out, "storage"), "") << out;
  ASSERT_EQ(RunCli("get " + p.path() + " 7", &out), 0) << out;
  EXPECT_EQ(out, "70\n");
  ASSERT_EQ(RunCli("info " + p.path(), &out), 0) << out;
  EXPECT_EQ(Field(out, "open count"), "2") << out;
  ASSERT_EQ(RunCli("check " + p.path(), &out), 0) << out;
  EXPECT_NE(Field(out, "mapping"), "") << out;
  EXPECT_NE(Field(out, "mapping"), "(not reported)") << out;
}

// A kind `pmhash list` prints (one name per unindented line: every registered kind), and the
// optional APIs its "APIs:" line names.
struct ListedKind {
  std::string name;
  bool bytes = false;  // variable-size keys
  bool multi = false;  // several values per key
};

std::vector<ListedKind> ListedKinds() {
  std::string out;
  EXPECT_EQ(RunCli("list", &out), 0) << out;
  std::vector<ListedKind> kinds;
  for (size_t at = 0; at < out.size();) {
    const size_t end = std::min(out.find('\n', at), out.size());
    const std::string line = out.substr(at, end - at);
    if (!line.empty() && line[0] != ' ') kinds.push_back({line});
    if (!kinds.empty() && line.starts_with("  APIs:")) {
      kinds.back().bytes = line.find("bytes") != std::string::npos;
      kinds.back().multi = line.find("multi-value") != std::string::npos;
    }
    at = end + 1;
  }
  return kinds;
}

// Every registered kind works from the tool: a fresh pool through put, get, del, check, info,
// then reopened by every command with no per-index option (the pool describes itself: kind,
// durability, parameters). Regression test: pea, turbo and turbo-kv pools were created by
// `put --index KIND` and then refused by every later command ("cannot decode the parameters").
// A multi-value kind (pea-multi) runs the same commands with its meaning of them: the second put
// of key 7 adds a value, get prints both, check counts pairs (Cli.MultiValuePool tests the rest).
TEST(Cli, EveryKindReopensWithoutOptions) {
  const auto kinds = ListedKinds();
  ASSERT_GE(kinds.size(), 4u) << "pmhash list printed too few kinds";
  std::string with_bytes;  // what a refusal names: the kinds that have the bytes API
  for (const auto& k : kinds) {
    if (k.bytes) with_bytes += (with_bytes.empty() ? "" : ", ") + k.name;
  }
  size_t nth = 0;
  for (const auto& [kind, offers_bytes, multi] : kinds) {
    // The value(s) of key 7 after `put 7 70`, `put 7 71`, and the size after `del 8`.
    const std::string seven = multi ? "70\n71\n" : "71\n";
    const std::string size = multi ? "2 pairs" : "1 keys";
    // The kinds take adr and eadr in turn (both durabilities, every code path of the tool, at
    // half the process starts of running every kind under both: CI minutes under ASan).
    for (const char* durability : {nth++ % 2 == 0 ? "adr" : "eadr"}) {
      SCOPED_TRACE(kind + " / " + durability);
      ScopedPath p("cli_" + kind);
      const std::string pool = p.path();
      std::string out;
      ASSERT_EQ(RunCli("put " + pool + " 7 70 --pool-size 64M --index " + kind +
                           " --durability " + durability,
                       &out),
                0)
          << out;
      ASSERT_EQ(RunCli("put " + pool + " 8 80", &out), 0) << out;
      ASSERT_EQ(RunCli("put " + pool + " 7 71", &out), 0) << out;  // overwrite (multi: add)
      ASSERT_EQ(RunCli("get " + pool + " 7", &out), 0) << out;
      EXPECT_EQ(out, seven);
      ASSERT_EQ(RunCli("del " + pool + " 8", &out), 0) << out;
      EXPECT_EQ(RunCli("get " + pool + " 8", &out), 1) << out;
      EXPECT_NE(out.find("not found"), std::string::npos) << out;
      ASSERT_EQ(RunCli("check " + pool, &out), 0) << out;
      EXPECT_EQ(Field(out, "index"), kind + " (" + durability + ")") << out;
      EXPECT_EQ(Field(out, "size"), size) << out;
      EXPECT_EQ(Field(out, "invariants"), "OK") << out;
      ASSERT_EQ(RunCli("info " + pool, &out), 0) << out;
      EXPECT_EQ(Field(out, "index kind"), kind) << out;
      EXPECT_NE(Field(out, "params").find("layout_version="), std::string::npos) << out;
      EXPECT_NE(Field(out, "created").find(durability), std::string::npos) << out;
      // String keys and values on kinds that offer them; a clear refusal elsewhere.
      const int put_rc = RunCli("put " + pool + " user:17 'hello world'", &out);
      if (offers_bytes) {
        ASSERT_EQ(put_rc, 0) << out;
        ASSERT_EQ(RunCli("get " + pool + " user:17", &out), 0) << out;
        EXPECT_EQ(out, "hello world\n");
        ASSERT_EQ(RunCli("put " + pool + " 7 seven --bytes", &out), 0) << out;
        ASSERT_EQ(RunCli("get " + pool + " 7 --bytes", &out), 0) << out;
        EXPECT_EQ(out, "seven\n");
        ASSERT_EQ(RunCli("get " + pool + " 7", &out), 0) << out;  // the uint64 key 7: another key
        EXPECT_EQ(out, seven);
        ASSERT_EQ(RunCli("del " + pool + " user:17", &out), 0) << out;
        ASSERT_EQ(RunCli("del " + pool + " 7 --bytes", &out), 0) << out;
        EXPECT_EQ(RunCli("get " + pool + " user:17", &out), 1) << out;
      } else {
        EXPECT_EQ(put_rc, 2) << out;
        EXPECT_NE(out.find("KEY"), std::string::npos) << out;
        EXPECT_NE(out.find("kind '" + kind + "' has no variable-size keys; these have: " +
                           with_bytes),
                  std::string::npos)
            << out;
        EXPECT_EQ(RunCli("get " + pool + " 7 --bytes", &out), 2) << out;
        EXPECT_NE(out.find("--bytes: kind '" + kind +
                           "' has no variable-size keys; these have: " + with_bytes),
                  std::string::npos)
            << out;
      }
      ASSERT_EQ(RunCli("check " + pool, &out), 0) << out;
      EXPECT_EQ(Field(out, "APIs"), offers_bytes ? "uint64, bytes (variable-size keys)"
                                    : multi      ? "uint64, multi-value"
                                                 : "uint64")
          << out;
      ASSERT_EQ(RunCli("check " + pool, &out), 0) << out;
      EXPECT_EQ(Field(out, "size"), size) << out;
      // A wrong --index is refused, the right one accepted.
      EXPECT_EQ(RunCli("get " + pool + " 7 --index " + (kind == "reh" ? "pea" : "reh"), &out), 1)
          << out;
      ASSERT_EQ(RunCli("get " + pool + " 7 --index " + kind, &out), 0) << out;
      EXPECT_EQ(out, seven);
    }
  }
}

// The kinds with several values per key (pmhash list: "multi-value"; today pea-multi): put adds
// a value, get prints every value (one per line, increasing), del erases every value or one pair.
// `del KEY VALUE` on a one-value-per-key pool is a usage error naming the multi-value kinds.
TEST(Cli, MultiValuePool) {
  std::string multi_kinds;  // what the refusal names
  std::vector<std::string> multi;
  for (const auto& k : ListedKinds()) {
    if (!k.multi) continue;
    multi.push_back(k.name);
    multi_kinds += (multi_kinds.empty() ? "" : ", ") + k.name;
  }
  ASSERT_FALSE(multi.empty()) << "pmhash list names no multi-value kind";
  for (const std::string& kind : multi) {
    SCOPED_TRACE(kind);
    ScopedPath p("cli_multi_" + kind);
    const std::string pool = p.path();
    std::string out;
    ASSERT_EQ(RunCli("put " + pool + " 5 51 --pool-size 64M --index " + kind, &out), 0) << out;
    ASSERT_EQ(RunCli("put " + pool + " 5 50", &out), 0) << out;
    ASSERT_EQ(RunCli("put " + pool + " 5 51", &out), 0) << out;  // a duplicate pair is kept
    ASSERT_EQ(RunCli("put " + pool + " 0x6 60", &out), 0) << out;
    ASSERT_EQ(RunCli("get " + pool + " 5", &out), 0) << out;
    EXPECT_EQ(out, "50\n51\n51\n");
    ASSERT_EQ(RunCli("get " + pool + " 6", &out), 0) << out;
    EXPECT_EQ(out, "60\n");
    ASSERT_EQ(RunCli("check " + pool, &out), 0) << out;
    EXPECT_EQ(Field(out, "size"), "4 pairs") << out;
    EXPECT_EQ(Field(out, "APIs"), "uint64, multi-value") << out;
    EXPECT_EQ(Field(out, "invariants"), "OK") << out;
    // One pair, then every value.
    ASSERT_EQ(RunCli("del " + pool + " 5 51", &out), 0) << out;
    ASSERT_EQ(RunCli("get " + pool + " 5", &out), 0) << out;
    EXPECT_EQ(out, "50\n51\n");
    EXPECT_EQ(RunCli("del " + pool + " 5 52", &out), 1) << out;
    EXPECT_NE(out.find("pair (5, 52) not found"), std::string::npos) << out;
    EXPECT_EQ(RunCli("del " + pool + " 7 50", &out), 1) << out;
    ASSERT_EQ(RunCli("del " + pool + " 5", &out), 0) << out;
    EXPECT_EQ(RunCli("get " + pool + " 5", &out), 1) << out;
    EXPECT_NE(out.find("key 5 not found"), std::string::npos) << out;
    EXPECT_EQ(RunCli("del " + pool + " 5", &out), 1) << out;
    // Many values: printed in increasing order, whatever the order they were put in.
    std::string want;
    for (int v = 20; v >= 1; v--) {
      ASSERT_EQ(RunCli("put " + pool + " 9 " + std::to_string(v * 3), &out), 0) << out;
    }
    for (int v = 1; v <= 20; v++) want += std::to_string(v * 3) + "\n";
    ASSERT_EQ(RunCli("get " + pool + " 9", &out), 0) << out;
    EXPECT_EQ(out, want);
    ASSERT_EQ(RunCli("check " + pool, &out), 0) << out;
    EXPECT_EQ(Field(out, "size"), "21 pairs") << out;
    ASSERT_EQ(RunCli("info " + pool, &out), 0) << out;
    EXPECT_EQ(Field(out, "index kind"), kind) << out;
    // No variable-size keys; a malformed or extra argument is a usage error.
    EXPECT_EQ(RunCli("put " + pool + " 9 nine", &out), 2) << out;
    EXPECT_NE(out.find("has no variable-size keys"), std::string::npos) << out;
    EXPECT_EQ(RunCli("del " + pool + " 9 3 4", &out), 2) << out;
    EXPECT_EQ(RunCli("get " + pool + " 9 3", &out), 2) << out;
    ASSERT_EQ(RunCli("get " + pool + " 6", &out), 0) << out;
    EXPECT_EQ(out, "60\n");
  }
  // A pool with one value per key refuses `del KEY VALUE` and keeps the key.
  ScopedPath q("cli_multi_reh");
  std::string out;
  ASSERT_EQ(RunCli("put " + q.path() + " 1 10 --pool-size 8M --index reh", &out), 0) << out;
  EXPECT_EQ(RunCli("del " + q.path() + " 1 10", &out), 2) << out;
  EXPECT_NE(out.find("kind 'reh' has one value per key; these have several: " + multi_kinds),
            std::string::npos)
      << out;
  ASSERT_EQ(RunCli("get " + q.path() + " 1", &out), 0) << out;
  EXPECT_EQ(out, "10\n");
  // The help says what the commands mean on such pools.
  ASSERT_EQ(RunCli("help del", &out), 0) << out;
  EXPECT_NE(out.find("pmhash del POOL KEY [VALUE]"), std::string::npos) << out;
  EXPECT_NE(out.find("Multi-value pools"), std::string::npos) << out;
}

TEST(Cli, NonDaxCharacterDeviceIsRefused) {
  std::string out;
  EXPECT_EQ(RunCli("info /dev/zero", &out), 1) << out;
  EXPECT_NE(out.find("not a devdax device"), std::string::npos) << out;
  EXPECT_EQ(RunCli("get /dev/zero 1", &out), 1) << out;
  EXPECT_NE(out.find("not a devdax device"), std::string::npos) << out;
}

}  // namespace
}  // namespace pmhash::testing
