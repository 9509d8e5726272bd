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
  const std::string cmd = "timeout 10 " PMHASH_CLI " " + args + " 2>&1 </dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return -1;
  out->clear();
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;) out->append(buf, n);
  const int status = pclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The line "KEY:   value" of `pmhash info` / `check` output, value only ("" if absent).
std::string Field(const std::string& out, const std::string& key) {
  const size_t at = out.find(key + ":");
  if (at == std::string::npos) return "";
  size_t v = out.find_first_not_of(' ', at + key.size() + 1);
  return out.substr(v, out.find('\n', v) - v);
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

// The kinds `pmhash list` prints (one name per unindented line): every registered kind.
// The kinds `pmhash list` prints, and whether each offers the bytes API (its "APIs:" line).
std::vector<std::pair<std::string, bool>> ListedKinds() {
  std::string out;
  EXPECT_EQ(RunCli("list", &out), 0) << out;
  std::vector<std::pair<std::string, bool>> kinds;
  for (size_t at = 0; at < out.size();) {
    const size_t end = std::min(out.find('\n', at), out.size());
    const std::string line = out.substr(at, end - at);
    if (!line.empty() && line[0] != ' ') kinds.emplace_back(line, false);
    if (!kinds.empty() && line.starts_with("  APIs:") && line.find("bytes") != std::string::npos) {
      kinds.back().second = true;
    }
    at = end + 1;
  }
  return kinds;
}

// Every registered kind works from the tool: a fresh pool through put, get, del, check, info,
// then reopened by every command with no per-index option (the pool describes itself: kind,
// durability, parameters). Regression test: pea, turbo and turbo-kv pools were created by
// `put --index KIND` and then refused by every later command ("cannot decode the parameters").
TEST(Cli, EveryKindReopensWithoutOptions) {
  const auto kinds = ListedKinds();
  ASSERT_GE(kinds.size(), 4u) << "pmhash list printed too few kinds";
  std::string with_bytes;  // what a refusal names: the kinds that have the bytes API
  for (const auto& [kind, offers_bytes] : kinds) {
    if (offers_bytes) with_bytes += (with_bytes.empty() ? "" : ", ") + kind;
  }
  for (const auto& [kind, offers_bytes] : kinds) {
    for (const char* durability : {"adr", "eadr"}) {
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
      ASSERT_EQ(RunCli("put " + pool + " 7 71", &out), 0) << out;  // overwrite
      ASSERT_EQ(RunCli("get " + pool + " 7", &out), 0) << out;
      EXPECT_EQ(out, "71\n");
      ASSERT_EQ(RunCli("del " + pool + " 8", &out), 0) << out;
      EXPECT_EQ(RunCli("get " + pool + " 8", &out), 1) << out;
      EXPECT_NE(out.find("not found"), std::string::npos) << out;
      ASSERT_EQ(RunCli("check " + pool, &out), 0) << out;
      EXPECT_EQ(Field(out, "index"), kind + " (" + durability + ")") << out;
      EXPECT_EQ(Field(out, "size"), "1 keys") << out;
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
        EXPECT_EQ(out, "71\n");
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
      EXPECT_EQ(Field(out, "APIs"), offers_bytes ? "uint64, bytes (variable-size keys)" : "uint64")
          << out;
      ASSERT_EQ(RunCli("check " + pool, &out), 0) << out;
      EXPECT_EQ(Field(out, "size"), "1 keys") << out;
      // A wrong --index is refused, the right one accepted.
      EXPECT_EQ(RunCli("get " + pool + " 7 --index " + (kind == "reh" ? "pea" : "reh"), &out), 1)
          << out;
      ASSERT_EQ(RunCli("get " + pool + " 7 --index " + kind, &out), 0) << out;
      EXPECT_EQ(out, "71\n");
    }
  }
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
