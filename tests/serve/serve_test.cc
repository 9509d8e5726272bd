// tests/serve/serve_test.cc — `pmhash serve` in process: the RESP2 parser, the command executor
// (against a std::unordered_map oracle, on every registered kind) and the event loops over
// loopback sockets (pipelining, parallel clients, malformed and hostile input, 10k connections,
// client limit, idle timeout, a client that does not read, SHUTDOWN). The cases named
// *Concurrent* run threads (the server's loops, several clients) and run under TSan in CI.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "resp_client.h"
#include "test_util.h"
#include "tools/serve/commands.h"
#include "tools/serve/resp.h"
#include "tools/serve/server.h"

namespace pmhash::testing {
namespace {

using serve::Limits;
using serve::RequestParser;
using Outcome = RequestParser::Outcome;
using Args = std::vector<std::string>;

// ---- parser ------------------------------------------------------------------------------------

// Feeds `input` to a parser `step` bytes at a time, as a connection's buffer grows. Returns the
// commands parsed; *error: the protocol error, if one ended the input.
std::vector<Args> ParseAll(std::string_view input, size_t step, std::string* error,
                           const Limits& limits = Limits{}) {
  RequestParser p(limits);
  std::vector<Args> cmds;
  std::string buf;
  error->clear();
  for (size_t at = 0; at < input.size(); at += step) {
    buf.append(input.substr(at, step));
    while (!buf.empty()) {
      size_t used = 0;
      const Outcome o = p.Parse(buf, &used);
      if (o == Outcome::kNeedMore) break;
      if (o == Outcome::kError) {
        *error = p.error();
        return cmds;
      }
      if (o == Outcome::kCommand) cmds.emplace_back(p.args().begin(), p.args().end());
      EXPECT_GT(used, 0u);
      buf.erase(0, used);
    }
  }
  return cmds;
}

TEST(RespParser, MultibulkWholeOrByteByByte) {
  const std::string bin("a\0b\r\nc", 6);
  const std::string input = EncodeCommand({"SET", "key", bin}) + EncodeCommand({"GET", "key"}) +
                            "*0\r\n" + EncodeCommand({"ECHO", ""});
  for (size_t step : {input.size(), size_t{1}, size_t{3}, size_t{7}}) {
    std::string err;
    const auto cmds = ParseAll(input, step, &err);
    ASSERT_TRUE(err.empty()) << err;
    ASSERT_EQ(cmds.size(), 3u) << "step " << step;
    EXPECT_EQ(cmds[0], (Args{"SET", "key", bin}));
    EXPECT_EQ(cmds[1], (Args{"GET", "key"}));
    EXPECT_EQ(cmds[2], (Args{"ECHO", ""}));
  }
}

TEST(RespParser, InlineCommandsSplitLikeRedis) {
  std::string err;
  const auto cmds = ParseAll(
      "PING\r\n\r\nset k \"a b\\n\\x41\" 'it\\'s'\nGET  'x\\'y'   \r\necho \"\"\r\n", 2, &err);
  ASSERT_TRUE(err.empty()) << err;
  ASSERT_EQ(cmds.size(), 4u);
  EXPECT_EQ(cmds[0], (Args{"PING"}));
  EXPECT_EQ(cmds[1], (Args{"set", "k", "a b\nA", "it's"}));
  EXPECT_EQ(cmds[2], (Args{"GET", "x'y"}));
  EXPECT_EQ(cmds[3], (Args{"echo", ""}));
}

TEST(RespParser, RejectsMalformedInput) {
  const std::pair<std::string, std::string> cases[] = {
      {"*x\r\n", "invalid multibulk length"},
      {"*2\r\n$3\r\nGET\r\n:1\r\n", "expected '$', got ':'"},
      {"*1\r\n$-3\r\n", "invalid bulk length"},
      {"*1\r\n$abc\r\n", "invalid bulk length"},
      {"*1\r\n$3\r\nGETxx", "not followed by CRLF"},
      {"*1\r\n$99999999999\r\n", "invalid bulk length"},  // beyond max_bulk: refused at once
      {"*99999999999\r\n", "invalid multibulk length"},     // beyond max_args
      {"*1\r" + std::string(100, '1'), "invalid multibulk length"},  // header without LF
      {"SET \"unterminated\r\n", "unbalanced quotes"},
      {"SET \"a\"b\r\n", "unbalanced quotes"},
      {std::string(70 << 10, 'x'), "too big inline request"},  // no newline within max_inline
  };
  for (const auto& [input, want] : cases) {
    std::string err;
    ParseAll(input, 4096, &err);
    EXPECT_NE(err.find(want), std::string::npos) << "input " << input.substr(0, 40) << ": " << err;
    EXPECT_EQ(err.rfind("ERR Protocol error: ", 0), 0u) << err;
  }
}

TEST(RespParser, LimitsAreConfigurable) {
  Limits l;
  l.max_bulk = 4;
  l.max_args = 2;
  l.max_inline = 8;
  std::string err;
  EXPECT_EQ(ParseAll(EncodeCommand({"GET", "1234"}), 64, &err, l).size(), 1u);
  ParseAll(EncodeCommand({"GET", "12345"}), 64, &err, l);
  EXPECT_NE(err.find("invalid bulk length"), std::string::npos);
  ParseAll(EncodeCommand({"MGET", "a", "b"}), 64, &err, l);
  EXPECT_NE(err.find("invalid multibulk length"), std::string::npos);
  ParseAll("GET 123456789\r\n", 64, &err, l);
  EXPECT_NE(err.find("too big inline"), std::string::npos);
}

TEST(RespParser, RandomBytesNeverCrashOrHang) {
  std::mt19937_64 rng(TestSeed(7));
  SCOPED_TRACE(SeedTrace(TestSeed(7)));
  const std::string alphabet = "*$\r\n0123456789-: abc\"'\\x";
  for (int round = 0; round < 2000; round++) {
    std::string input(rng() % 200, '\0');
    for (char& c : input) {
      c = (rng() % 4 == 0) ? static_cast<char>(rng()) : alphabet[rng() % alphabet.size()];
    }
    std::string err;
    ParseAll(input, 1 + rng() % 16, &err);  // any outcome but a crash or a hang
  }
}

TEST(RespGlob, MatchesLikeRedis) {
  EXPECT_TRUE(serve::GlobMatch("*", ""));
  EXPECT_TRUE(serve::GlobMatch("key:*", "key:000012"));
  EXPECT_FALSE(serve::GlobMatch("key:*", "kex:1"));
  EXPECT_TRUE(serve::GlobMatch("h?llo", "hello"));
  EXPECT_TRUE(serve::GlobMatch("h[ae]llo", "hallo"));
  EXPECT_FALSE(serve::GlobMatch("h[^e]llo", "hello"));
  EXPECT_TRUE(serve::GlobMatch("h[a-c]llo", "hbllo"));
  EXPECT_TRUE(serve::GlobMatch("a\\*b", "a*b"));
  EXPECT_FALSE(serve::GlobMatch("a\\*b", "axb"));
  EXPECT_TRUE(serve::GlobMatch("*a*b*c*", "xxaxxbxxcxx"));
  EXPECT_FALSE(serve::GlobMatch("*a*b*c*", "xxaxxcxxbxx"));
  EXPECT_TRUE(serve::GlobMatch("app*fsync", "appendfsync"));
}

// ---- executor --------------------------------------------------------------------------------

// A DRAM pool of `kind` and an executor over it; Run() executes one command and decodes the
// one reply it must have appended.
class ExecEnv {
 public:
  explicit ExecEnv(const std::string& kind, Durability d = Durability::kDram)
      : path_("serve-" + kind) {
    auto r = pmhash::Open(kind, PoolOptions(path_.path(), d, uint64_t{64} << 20));
    EXPECT_TRUE(r.ok()) << kind << ": " << r.status().ToString();
    if (!r.ok()) return;
    index_ = std::move(r).value();
    exec_ = std::make_unique<serve::Executor>(*index_, serve::ServeSettings{},
                                              [this] { shutdowns_++; });
  }
  bool ok() const { return exec_ != nullptr; }
  Index& index() { return *index_; }
  serve::Session& session() { return session_; }
  int shutdowns() const { return shutdowns_; }

  serve::Executor& exec() { return *exec_; }
  std::string Raw(const Args& args) {
    std::vector<std::string_view> views(args.begin(), args.end());
    std::string out;
    exec_->Execute(views, &session_, &out);
    return out;
  }
  Reply Run(const Args& args) {
    const std::string out = Raw(args);
    Reply r;
    size_t used = 0;
    EXPECT_EQ(DecodeReply(out, &used, &r), 1) << "reply of " << args[0] << ": " << out;
    EXPECT_EQ(used, out.size()) << "one reply per command";
    return r;
  }
  std::string Bulk(const Args& args) {
    Reply r = Run(args);
    return r.type == Reply::kBulk ? r.str : r.type == Reply::kNull ? "<nil>" : "<" + r.str + ">";
  }
  int64_t Int(const Args& args) {
    Reply r = Run(args);
    EXPECT_EQ(r.type, Reply::kInt) << args[0] << ": " << r.str;
    return r.num;
  }
  // Every key, by a whole SCAN iteration with COUNT `count`; fails on a key returned twice.
  std::set<std::string> ScanAll(int64_t count, const std::string& match = "") {
    std::set<std::string> keys;
    std::string cursor = "0";
    for (int calls = 0; calls < 100000; calls++) {
      Args cmd{"SCAN", cursor, "COUNT", std::to_string(count)};
      if (!match.empty()) cmd.insert(cmd.end(), {"MATCH", match});
      Reply r = Run(cmd);
      EXPECT_EQ(r.type, Reply::kArray) << r.str;
      if (r.type != Reply::kArray || r.elems.size() != 2) return keys;
      for (const Reply& k : r.elems[1].elems) EXPECT_TRUE(keys.insert(k.str).second) << k.str;
      cursor = r.elems[0].str;
      if (cursor == "0") break;
    }
    return keys;
  }

 private:
  ScopedPath path_;
  std::unique_ptr<Index> index_;
  std::unique_ptr<serve::Executor> exec_;
  serve::Session session_;
  int shutdowns_ = 0;
};

TEST(ServeExecutor, StringCommandsOnByteKeys) {
  ExecEnv e("reh-kv");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e.Run({"PING"}).str, "PONG");
  EXPECT_EQ(e.Bulk({"ping", "hi"}), "hi");
  EXPECT_EQ(e.Bulk({"ECHO", std::string("a\0b", 3)}), std::string("a\0b", 3));
  EXPECT_TRUE(e.Run({"SET", "k", "v1"}).ok());
  EXPECT_EQ(e.Bulk({"GET", "k"}), "v1");
  EXPECT_EQ(e.Bulk({"GET", "absent"}), "<nil>");
  EXPECT_EQ(e.Run({"SET", "k", "v2", "NX"}).type, Reply::kNull);
  EXPECT_EQ(e.Run({"SET", "new", "x", "XX"}).type, Reply::kNull);
  EXPECT_EQ(e.Bulk({"GET", "new"}), "<nil>");
  EXPECT_TRUE(e.Run({"set", "k", "v2", "xx"}).ok());
  EXPECT_EQ(e.Bulk({"SET", "k", "v3", "GET"}), "v2");
  EXPECT_EQ(e.Bulk({"SET", "k2", "a", "NX", "GET"}), "<nil>");
  EXPECT_TRUE(e.Run({"SET", "k", "v", "NX", "XX"}).is_error());
  EXPECT_TRUE(e.Run({"SET", "k", "v", "EX", "10"}).is_error());
  EXPECT_TRUE(e.Run({"SET", "k", "v", "BOGUS"}).is_error());
  EXPECT_EQ(e.Int({"SETNX", "k", "zz"}), 0);
  EXPECT_EQ(e.Int({"SETNX", "k3", "zz"}), 1);
  EXPECT_EQ(e.Int({"EXISTS", "k", "k", "nope", "k3"}), 3);
  EXPECT_EQ(e.Run({"TYPE", "k"}).str, "string");
  EXPECT_EQ(e.Run({"TYPE", "nope"}).str, "none");
  EXPECT_TRUE(e.Run({"MSET", "a", "1", "b", "2"}).ok());
  EXPECT_TRUE(e.Run({"MSET", "a", "1", "b"}).is_error());
  const Reply mget = e.Run({"MGET", "a", "nope", "b"});
  ASSERT_EQ(mget.elems.size(), 3u);
  EXPECT_EQ(mget.elems[0].str, "1");
  EXPECT_EQ(mget.elems[1].type, Reply::kNull);
  EXPECT_EQ(mget.elems[2].str, "2");
  EXPECT_EQ(e.Int({"MSETNX", "a", "9", "c", "3"}), 0);
  EXPECT_EQ(e.Bulk({"GET", "c"}), "<nil>");
  EXPECT_EQ(e.Int({"MSETNX", "c", "3", "d", "4"}), 1);
  EXPECT_EQ(e.Int({"INCR", "n"}), 1);
  EXPECT_EQ(e.Int({"INCRBY", "n", "41"}), 42);
  EXPECT_EQ(e.Int({"DECRBY", "n", "50"}), -8);
  EXPECT_EQ(e.Int({"DECR", "n"}), -9);
  EXPECT_EQ(e.Bulk({"GET", "n"}), "-9");
  EXPECT_TRUE(e.Run({"INCR", "k"}).is_error());  // "v3" is not an integer
  EXPECT_TRUE(e.Run({"INCRBY", "n", "x"}).is_error());
  EXPECT_TRUE(e.Run({"SET", "big", "9223372036854775807"}).ok());
  EXPECT_NE(e.Run({"INCR", "big"}).str.find("overflow"), std::string::npos);
  EXPECT_NE(e.Run({"DECRBY", "n", "-9223372036854775808"}).str.find("overflow"),
            std::string::npos);
  EXPECT_EQ(e.Int({"DBSIZE"}), 9);  // k k2 k3 a b c d n big
  EXPECT_EQ(e.Int({"DEL", "a", "b", "a", "nope"}), 2);
  EXPECT_EQ(e.Int({"UNLINK", "c"}), 1);
  EXPECT_EQ(e.Run({"KEYS", "k*"}).elems.size(), 3u);
  EXPECT_EQ(e.ScanAll(2), (std::set<std::string>{"k", "k2", "k3", "d", "n", "big"}));
  EXPECT_EQ(e.ScanAll(100, "k?"), (std::set<std::string>{"k2", "k3"}));
  EXPECT_TRUE(e.Run({"SCAN", "x"}).is_error());
  EXPECT_TRUE(e.Run({"SCAN", "0", "COUNT", "0"}).is_error());
  EXPECT_TRUE(e.Run({"FLUSHALL"}).ok());
  EXPECT_EQ(e.Int({"DBSIZE"}), 0);
  EXPECT_TRUE(e.Run({"SELECT", "0"}).ok());
  EXPECT_TRUE(e.Run({"SELECT", "1"}).is_error());
  EXPECT_NE(e.Run({"FOO", "bar"}).str.find("unknown command 'FOO'"), std::string::npos);
  EXPECT_NE(e.Run({"GET"}).str.find("wrong number of arguments for 'get'"), std::string::npos);
  EXPECT_NE(e.Run({"GET", "a", "b"}).str.find("wrong number"), std::string::npos);
  // Server commands that client libraries and redis-cli/redis-benchmark send.
  EXPECT_GT(e.Int({"COMMAND", "COUNT"}), 30);
  EXPECT_EQ(e.Run({"COMMAND", "INFO", "get", "nope"}).elems[1].type, Reply::kNull);
  EXPECT_EQ(e.Run({"COMMAND", "DOCS"}).type, Reply::kArray);
  const Reply cfg = e.Run({"CONFIG", "GET", "save"});
  ASSERT_EQ(cfg.elems.size(), 2u);
  EXPECT_EQ(cfg.elems[0].str, "save");
  EXPECT_EQ(e.Run({"CONFIG", "GET", "append*"}).elems.size(), 4u);
  EXPECT_TRUE(e.Run({"CONFIG", "SET", "save", ""}).is_error());
  EXPECT_EQ(e.Run({"HELLO", "4"}).str.rfind("NOPROTO", 0), 0u);
  EXPECT_EQ(e.Run({"HELLO", "2", "SETNAME", "me"}).elems.size(), 14u);
  EXPECT_EQ(e.Bulk({"CLIENT", "GETNAME"}), "me");
  EXPECT_TRUE(e.Run({"CLIENT", "SETNAME", "bad name"}).is_error());
  EXPECT_TRUE(e.Run({"AUTH", "pw"}).is_error());
  const std::string info = e.Bulk({"INFO"});
  for (const char* field : {"redis_version:", "index_kind:reh-kv", "durability:dram",
                            "key_space:bytes", "total_commands_processed:", "# Keyspace"}) {
    EXPECT_NE(info.find(field), std::string::npos) << field;
  }
  EXPECT_EQ(e.Bulk({"INFO", "keyspace"}).find("# Server"), std::string::npos);
  EXPECT_FALSE(e.session().close_after_reply);
  EXPECT_TRUE(e.Run({"QUIT"}).ok());
  EXPECT_TRUE(e.session().close_after_reply);
  EXPECT_TRUE(e.index().CheckInvariants().ok());
}

// HELLO 3 switches the connection to RESP3: nulls and maps get their own types, the rest is
// written as in RESP2; HELLO 2 switches back.
TEST(ServeExecutor, Resp3AfterHello3) {
  ExecEnv e("reh-kv");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e.Raw({"GET", "nope"}), "$-1\r\n");
  const std::string hello = e.Raw({"HELLO", "3"});
  EXPECT_EQ(hello.rfind("%7\r\n$6\r\nserver\r\n", 0), 0u) << hello;
  EXPECT_NE(hello.find("$5\r\nproto\r\n:3\r\n"), std::string::npos) << hello;
  EXPECT_EQ(e.session().proto, 3);
  EXPECT_EQ(e.Raw({"GET", "nope"}), "_\r\n");
  EXPECT_EQ(e.Raw({"SET", "k", "v", "NX"}), "+OK\r\n");
  EXPECT_EQ(e.Raw({"SET", "k", "v", "NX"}), "_\r\n");
  EXPECT_EQ(e.Raw({"MGET", "k", "nope"}), "*2\r\n$1\r\nv\r\n_\r\n");
  EXPECT_EQ(e.Raw({"CONFIG", "GET", "save"}), "%1\r\n$4\r\nsave\r\n$0\r\n\r\n");
  EXPECT_EQ(e.Run({"HELLO"}).elems.size(), 14u) << "HELLO without a version keeps RESP3";
  EXPECT_EQ(e.session().proto, 3);
  EXPECT_EQ(e.Raw({"HELLO", "2"}).rfind("*14\r\n", 0), 0u);
  EXPECT_EQ(e.Raw({"GET", "nope"}), "$-1\r\n");
}

TEST(ServeExecutor, ShutdownRunsTheCallbackWithoutAReply) {
  ExecEnv e("reh");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e.Run({"SHUTDOWN", "ABORT"}).is_error());
  EXPECT_TRUE(e.Run({"SHUTDOWN", "BOGUS"}).is_error());
  EXPECT_EQ(e.shutdowns(), 0);
  EXPECT_EQ(e.Raw({"SHUTDOWN", "NOSAVE"}), "") << "Redis closes the connection without a reply";
  EXPECT_EQ(e.shutdowns(), 1);
  EXPECT_TRUE(e.session().close_after_reply);
}

TEST(ServeExecutor, Uint64KindsTakeDecimalKeysAndValues) {
  ExecEnv e("reh");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e.Run({"SET", "000042", "7"}).ok());
  EXPECT_EQ(e.Bulk({"GET", "42"}), "7");
  const Reply bad_key = e.Run({"SET", "abc", "1"});
  ASSERT_TRUE(bad_key.is_error());
  EXPECT_NE(bad_key.str.find("'abc' is not a decimal unsigned 64-bit integer"), std::string::npos);
  EXPECT_NE(bad_key.str.find("reh-kv"), std::string::npos) << "names the byte-key kinds";
  EXPECT_TRUE(e.Run({"SET", "1", "-5"}).is_error());
  EXPECT_TRUE(e.Run({"SET", "18446744073709551616", "1"}).is_error());
  EXPECT_TRUE(e.Run({"MSET", "5", "5", "6", "x"}).is_error());
  EXPECT_EQ(e.Bulk({"GET", "5"}), "<nil>") << "a refused MSET writes nothing";
  EXPECT_TRUE(e.Run({"SET", "9", "18446744073709551614"}).ok());
  const Reply top = e.Run({"INCR", "9"});
  EXPECT_EQ(top.type, Reply::kInt);
  EXPECT_EQ(top.str, "18446744073709551615");
  EXPECT_NE(e.Run({"INCR", "9"}).str.find("overflow"), std::string::npos);
  EXPECT_NE(e.Run({"DECRBY", "42", "8"}).str.find("overflow"), std::string::npos);
  EXPECT_EQ(e.Int({"DECRBY", "42", "7"}), 0);
  EXPECT_EQ(e.ScanAll(1), (std::set<std::string>{"9", "42"}));
  EXPECT_TRUE(e.Run({"SADD", "1", "2"}).is_error());
  // MGET of numeric keys is one FindBatch: more keys than one pipeline stage, present and not.
  std::vector<std::string> mget = {"MGET"};
  for (int k = 100; k < 140; k++) {
    if (k % 3 == 0) {
      EXPECT_TRUE(e.Run({"SET", std::to_string(k), std::to_string(k * 2)}).ok());
    }
    mget.push_back(std::to_string(k));
  }
  mget.push_back("0042");
  const Reply all = e.Run(mget);
  ASSERT_EQ(all.elems.size(), 41u);
  for (int k = 100; k < 140; k++) {
    const Reply& r = all.elems[static_cast<size_t>(k - 100)];
    if (k % 3 == 0) {
      EXPECT_EQ(r.str, std::to_string(k * 2)) << "MGET key " << k;
    } else {
      EXPECT_EQ(r.type, Reply::kNull) << "MGET key " << k;
    }
  }
  EXPECT_EQ(all.elems[40].str, "0");
  EXPECT_TRUE(e.Run({"MGET", "1", "x"}).is_error());
  // MSET of numeric keys is one WriteBatch: many keys, one of them twice (the last value wins),
  // and MSETNX refuses when one is present.
  std::vector<std::string> mset = {"MSET"};
  for (int k = 200; k < 260; k++) {
    mset.push_back(std::to_string(k));
    mset.push_back(std::to_string(k + 1));
  }
  mset.insert(mset.end(), {"205", "7"});
  EXPECT_TRUE(e.Run(mset).ok());
  for (int k = 200; k < 260; k++) {
    EXPECT_EQ(e.Bulk({"GET", std::to_string(k)}), std::to_string(k == 205 ? 7 : k + 1)) << k;
  }
  EXPECT_EQ(e.Int({"MSETNX", "300", "1", "259", "1"}), 0);
  EXPECT_EQ(e.Bulk({"GET", "300"}), "<nil>");
  EXPECT_EQ(e.Int({"MSETNX", "300", "1", "300", "2"}), 1);
  EXPECT_EQ(e.Bulk({"GET", "300"}), "2");
}

TEST(ServeExecutor, MultiValuePoolsAreSets) {
  ExecEnv e("pea-multi");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e.Int({"SADD", "7", "1", "2", "2", "3"}), 3);
  EXPECT_EQ(e.Int({"SADD", "7", "3", "4"}), 1);
  const Reply m = e.Run({"SMEMBERS", "7"});
  ASSERT_EQ(m.elems.size(), 4u);
  EXPECT_EQ(m.elems[0].str, "1");
  EXPECT_EQ(m.elems[3].str, "4");
  EXPECT_EQ(e.Int({"SCARD", "7"}), 4);
  EXPECT_EQ(e.Int({"SISMEMBER", "7", "3"}), 1);
  EXPECT_EQ(e.Int({"SISMEMBER", "7", "9"}), 0);
  EXPECT_EQ(e.Int({"SREM", "7", "3", "9", "x"}), 1);
  EXPECT_EQ(e.Int({"SADD", "8", "1"}), 1);
  EXPECT_EQ(e.Run({"TYPE", "7"}).str, "set");
  EXPECT_EQ(e.Run({"GET", "7"}).str.rfind("WRONGTYPE", 0), 0u);
  EXPECT_EQ(e.Run({"SET", "7", "1"}).str.rfind("WRONGTYPE", 0), 0u);
  EXPECT_EQ(e.Int({"DBSIZE"}), 4) << "pairs";
  EXPECT_EQ(e.ScanAll(1), (std::set<std::string>{"7", "8"})) << "one entry per key";
  EXPECT_EQ(e.Int({"DEL", "7"}), 1);
  EXPECT_EQ(e.Int({"SCARD", "7"}), 0);
  EXPECT_TRUE(e.Run({"FLUSHALL"}).ok());
  EXPECT_EQ(e.Int({"DBSIZE"}), 0);
  ExecEnv single("reh-kv");
  ASSERT_TRUE(single.ok());
  EXPECT_NE(single.Run({"SADD", "a", "1"}).str.find("pea-multi"), std::string::npos);
}

// Random commands on every registered kind against an oracle; then SCAN, KEYS and DBSIZE
// against the oracle's keys.
TEST(ServeExecutor, EveryKindAgainstOracle) {
  for (const IndexInfo& info : RegisteredIndexes()) {
    const std::string kind(info.name);
    SCOPED_TRACE(kind);
    ExecEnv e(kind);
    ASSERT_TRUE(e.ok());
    const Capabilities caps = KindCapabilities(kind).value();
    std::mt19937_64 rng(TestSeed(11));
    const int ops = static_cast<int>(Scaled(3000, 3));
    auto key = [&] {
      const uint64_t k = rng() % 300;
      return caps.bytes ? "key:" + std::to_string(k) : std::to_string(k);
    };
    auto value = [&] { return std::to_string(rng() % 1000000); };
    if (caps.multi) {
      std::map<std::string, std::set<std::string>> oracle;
      for (int i = 0; i < ops; i++) {
        const std::string k = key(), v = std::to_string(rng() % 8);
        switch (rng() % 5) {
          case 0:
          case 1: EXPECT_EQ(e.Int({"SADD", k, v}), oracle[k].insert(v).second ? 1 : 0); break;
          case 2: EXPECT_EQ(e.Int({"SREM", k, v}), oracle[k].erase(v) ? 1 : 0); break;
          case 3: {
            const Reply m = e.Run({"SMEMBERS", k});
            std::set<std::string> got;
            for (const Reply& x : m.elems) got.insert(x.str);
            EXPECT_EQ(got, oracle[k]);
            break;
          }
          default: {
            const bool had = !oracle[k].empty();
            oracle[k].clear();
            EXPECT_EQ(e.Int({"DEL", k}), had ? 1 : 0);
          }
        }
      }
      std::set<std::string> keys;
      uint64_t pairs = 0;
      for (const auto& [k, vs] : oracle) {
        if (!vs.empty()) keys.insert(k);
        pairs += vs.size();
      }
      EXPECT_EQ(e.ScanAll(7), keys);
      EXPECT_EQ(e.Int({"DBSIZE"}), static_cast<int64_t>(pairs));
    } else {
      std::unordered_map<std::string, std::string> oracle;
      for (int i = 0; i < ops; i++) {
        const std::string k = key();
        const auto it = oracle.find(k);
        const bool present = it != oracle.end();
        switch (rng() % 8) {
          case 0: {
            const std::string v = value();
            EXPECT_TRUE(e.Run({"SET", k, v}).ok());
            oracle[k] = v;
            break;
          }
          case 1: {
            const std::string v = value();
            const Reply r = e.Run({"SET", k, v, "NX"});
            EXPECT_EQ(r.ok(), !present);
            if (!present) oracle[k] = v;
            break;
          }
          case 2: {
            const std::string v = value();
            const Reply r = e.Run({"SET", k, v, "XX"});
            EXPECT_EQ(r.ok(), present);
            if (present) oracle[k] = v;
            break;
          }
          case 3: EXPECT_EQ(e.Bulk({"GET", k}), present ? it->second : "<nil>"); break;
          case 4:
            EXPECT_EQ(e.Int({"DEL", k}), present ? 1 : 0);
            oracle.erase(k);
            break;
          case 5: {
            const int64_t by = static_cast<int64_t>(rng() % 100);
            const int64_t before = present ? std::stoll(oracle[k]) : 0;
            EXPECT_EQ(e.Int({"INCRBY", k, std::to_string(by)}), before + by);
            oracle[k] = std::to_string(before + by);
            break;
          }
          case 6: {
            const std::string k2 = key(), v1 = value(), v2 = value();
            EXPECT_TRUE(e.Run({"MSET", k, v1, k2, v2}).ok());
            oracle[k] = v1;
            oracle[k2] = v2;
            break;
          }
          default: EXPECT_EQ(e.Int({"EXISTS", k}), present ? 1 : 0);
        }
      }
      std::set<std::string> keys;
      for (const auto& [k, v] : oracle) keys.insert(k);
      EXPECT_EQ(e.ScanAll(7), keys);
      EXPECT_EQ(e.Run({"KEYS", "*"}).elems.size(), keys.size());
      EXPECT_EQ(e.Int({"DBSIZE"}), static_cast<int64_t>(oracle.size()));
    }
    EXPECT_TRUE(e.index().CheckInvariants().ok());
  }
}

// Redis's SCAN guarantee: a key present from the first call to the last is returned, while
// other keys come and go between calls.
TEST(ServeExecutor, ScanReturnsStableKeysDuringWrites) {
  ExecEnv e("pea-kv");
  ASSERT_TRUE(e.ok());
  std::set<std::string> stable;
  for (int i = 0; i < 2000; i++) {
    stable.insert("s" + std::to_string(i));
    EXPECT_TRUE(e.Run({"SET", "s" + std::to_string(i), "v"}).ok());
  }
  std::set<std::string> seen;
  std::string cursor = "0";
  int churn = 0;
  do {
    const Reply r = e.Run({"SCAN", cursor, "COUNT", "10"});
    ASSERT_EQ(r.elems.size(), 2u);
    for (const Reply& k : r.elems[1].elems) seen.insert(k.str);
    cursor = r.elems[0].str;
    for (int j = 0; j < 50; j++, churn++) {
      EXPECT_TRUE(e.Run({"SET", "c" + std::to_string(churn), "v"}).ok());
      if (churn % 3 == 0) e.Run({"DEL", "c" + std::to_string(churn / 2)});
    }
  } while (cursor != "0");
  for (const std::string& k : stable) EXPECT_TRUE(seen.count(k)) << k;
}

TEST(ServeExecutor, ConcurrentIncrIsAtomic) {
  ExecEnv e("reh-kv");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e.Run({"SET", "x", "0"}).ok());
  const int threads = 4, per = static_cast<int>(Scaled(2000, 4));
  std::vector<std::thread> ts;
  serve::Executor& ex = e.exec();  // shared by the threads, each with its own session
  for (int t = 0; t < threads; t++) {
    ts.emplace_back([&] {
      serve::Session s;
      std::string out;
      for (int i = 0; i < per; i++) {
        const std::string_view incr[] = {"INCR", "x"};
        const std::string_view set[] = {"SET", "other", "1"};
        ex.Execute(incr, &s, &out);
        ex.Execute(set, &s, &out);
        out.clear();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(e.Bulk({"GET", "x"}), std::to_string(threads * per));
}

// ---- the event loops over loopback sockets ----------------------------------------------------

class ServerEnv {
 public:
  explicit ServerEnv(serve::ServeSettings s = {}, const std::string& kind = "reh-kv")
      : path_("serve-net") {
    auto r = pmhash::Open(kind, PoolOptions(path_.path(), Durability::kDram, uint64_t{64} << 20));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return;
    index_ = std::move(r).value();
    s.port = 0;
    if (s.threads == 1) s.threads = 2;
    auto started = serve::Server::Start(*index_, s);
    EXPECT_TRUE(started.ok()) << started.status().ToString();
    if (started.ok()) server_ = std::move(started).value();
  }
  ~ServerEnv() {
    if (server_) server_->Stop();
  }
  bool ok() const { return server_ != nullptr; }
  uint16_t port() const { return server_->port(); }
  serve::Server& server() { return *server_; }
  Index& index() { return *index_; }
  // Waits (bounded) until the server counts `n` connected clients.
  bool WaitClients(uint64_t n) {
    for (int i = 0; i < 500; i++) {
      if (server_->executor().counters().connected_clients.load() == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // A fresh connection answers and the index is sound.
  void ExpectHealthy() {
    RespConn c;
    ASSERT_TRUE(c.Connect(port()));
    EXPECT_EQ(c.Call({"PING"}).str, "PONG");
    EXPECT_TRUE(c.Call({"SET", "health", "1"}).ok());
    EXPECT_EQ(c.Call({"GET", "health"}).str, "1");
    EXPECT_TRUE(index_->CheckInvariants().ok());
  }

 private:
  ScopedPath path_;
  std::unique_ptr<Index> index_;
  std::unique_ptr<serve::Server> server_;
};

TEST(ServeServerConcurrent, PipelinedRepliesComeInOrder) {
  ServerEnv env;
  ASSERT_TRUE(env.ok());
  RespConn c;
  ASSERT_TRUE(c.Connect(env.port()));
  std::string batch;
  const int n = 2000;
  for (int i = 0; i < n; i++) {
    batch += EncodeCommand({"SET", "p" + std::to_string(i), std::to_string(i)});
    batch += EncodeCommand({"GET", "p" + std::to_string(i)});
  }
  batch += "PING\r\n";  // an inline command among multibulk ones
  ASSERT_TRUE(c.SendRaw(batch));
  for (int i = 0; i < n; i++) {
    auto set = c.Read();
    ASSERT_TRUE(set && set->ok()) << i;
    auto get = c.Read();
    ASSERT_TRUE(get) << i;
    EXPECT_EQ(get->str, std::to_string(i));
  }
  auto pong = c.Read();
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->str, "PONG");
}

TEST(ServeServerConcurrent, ParallelClientsIncrementAtomically) {
  ServerEnv env;
  ASSERT_TRUE(env.ok());
  const int clients = 4, per = static_cast<int>(Scaled(1000, 4));
  std::vector<std::thread> ts;
  std::atomic<int> failures{0};
  for (int t = 0; t < clients; t++) {
    ts.emplace_back([&] {
      RespConn c;
      if (!c.Connect(env.port())) {
        failures++;
        return;
      }
      std::string batch;
      for (int i = 0; i < per; i++) batch += EncodeCommand({"INCR", "counter"});
      if (!c.SendRaw(batch)) failures++;
      for (int i = 0; i < per; i++) {
        auto r = c.Read();
        if (!r || r->type != Reply::kInt) failures++;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  RespConn c;
  ASSERT_TRUE(c.Connect(env.port()));
  EXPECT_EQ(c.Call({"GET", "counter"}).str, std::to_string(clients * per));
}

// Random bytes, truncated frames, huge lengths, oversized inline lines and bad quoting: each
// connection gets an error (and is closed) or nothing; the server stays up and the pool sound.
TEST(ServeServerConcurrent, MalformedInputLeavesTheServerUp) {
  ServerEnv env;
  ASSERT_TRUE(env.ok());
  const std::string hostile[] = {
      "*99999999999\r\n",
      "*1\r\n$99999999999\r\n",
      "*1\r\n$2147483648\r\n",
      "*2\r\n$3\r\nSET\r\n",  // truncated, then the client goes away
      "*1\r\n$3\r\nGETxx",
      "*-1\r\n*0\r\nPING\r\n",
      std::string(100 << 10, 'A'),
      "SET \"a\r\n",
      std::string("\0\0\0\xff\xfe\r\n", 7),
  };
  for (const std::string& h : hostile) {
    RespConn c;
    ASSERT_TRUE(c.Connect(env.port()));
    ASSERT_TRUE(c.SendRaw(h) || true);
    c.WaitClosed(200);
  }
  std::mt19937_64 rng(TestSeed(5));
  SCOPED_TRACE(SeedTrace(TestSeed(5)));
  const std::string alphabet = "*$\r\n0123456789-:+ SETGET\"'";
  for (int round = 0; round < 200; round++) {
    RespConn c;
    ASSERT_TRUE(c.Connect(env.port()));
    std::string junk(1 + rng() % 512, '\0');
    for (char& ch : junk) {
      ch = rng() % 3 == 0 ? static_cast<char>(rng()) : alphabet[rng() % alphabet.size()];
    }
    c.SendRaw(junk);
    if (rng() % 2) c.WaitClosed(20);  // else: drop the connection at once
  }
  EXPECT_GT(env.server().executor().counters().protocol_errors.load(), 0u);
  env.ExpectHealthy();
  EXPECT_TRUE(env.WaitClients(0));
}

TEST(ServeServerConcurrent, TenThousandConnectionsOpenedAndDropped) {
  ServerEnv env;
  ASSERT_TRUE(env.ok());
  const int total = kSanitized ? 2000 : 10000, batch = 250;
  int opened = 0;
  for (int b = 0; b < total / batch; b++) {
    std::vector<std::unique_ptr<RespConn>> conns;
    for (int i = 0; i < batch; i++) {
      auto c = std::make_unique<RespConn>();
      ASSERT_TRUE(c->Connect(env.port())) << "connection " << opened;
      opened++;
      if (i % 3 == 0) c->SendRaw("*2\r\n$3\r\nGET\r\n$1");  // half a command, then gone
      conns.push_back(std::move(c));
    }
  }  // each batch is closed when `conns` leaves scope
  EXPECT_EQ(opened, total);
  EXPECT_TRUE(env.WaitClients(0)) << env.server().executor().counters().connected_clients;
  EXPECT_GE(env.server().executor().counters().connections_received.load(),
            static_cast<uint64_t>(total));
  env.ExpectHealthy();
}

TEST(ServeServerConcurrent, ClientLimitRefusesTheExtraClient) {
  serve::ServeSettings s;
  s.max_clients = 3;
  ServerEnv env(s);
  ASSERT_TRUE(env.ok());
  RespConn c[3];
  for (auto& x : c) {
    ASSERT_TRUE(x.Connect(env.port()));
    EXPECT_EQ(x.Call({"PING"}).str, "PONG");
  }
  RespConn extra;
  ASSERT_TRUE(extra.Connect(env.port()));
  auto r = extra.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->str, "ERR max number of clients reached");
  EXPECT_TRUE(extra.WaitClosed());
  c[0].Close();
  ASSERT_TRUE(env.WaitClients(2));
  ASSERT_TRUE(extra.Connect(env.port()));
  EXPECT_EQ(extra.Call({"PING"}).str, "PONG");
  EXPECT_EQ(env.server().executor().counters().rejected_connections.load(), 1u);
}

TEST(ServeServerConcurrent, IdleClientsAreClosed) {
  serve::ServeSettings s;
  s.idle_timeout_s = 1;
  ServerEnv env(s);
  ASSERT_TRUE(env.ok());
  RespConn idle, busy;
  ASSERT_TRUE(idle.Connect(env.port()));
  ASSERT_TRUE(busy.Connect(env.port()));
  EXPECT_EQ(idle.Call({"PING"}).str, "PONG");
  for (int i = 0; i < 10; i++) {  // 2.5 s: busy stays active, idle goes past its timeout
    EXPECT_EQ(busy.Call({"PING"}).str, "PONG");
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_TRUE(idle.WaitClosed(3000));
  EXPECT_EQ(busy.Call({"PING"}).str, "PONG");
  EXPECT_GE(env.server().executor().counters().idle_timeouts.load(), 1u);
}

// A client that pipelines big replies without reading them: the server stops reading it at the
// high water mark and resumes as the replies drain; every reply arrives whole and in order.
TEST(ServeServerConcurrent, SlowReaderGetsEveryReply) {
  ServerEnv env;
  ASSERT_TRUE(env.ok());
  RespConn c;
  ASSERT_TRUE(c.Connect(env.port()));
  std::string big(200 << 10, 'v');
  for (size_t i = 0; i < big.size(); i += 997) big[i] = static_cast<char>('a' + i % 26);
  ASSERT_TRUE(c.Call({"SET", "big", big}).ok());
  std::string batch;
  const int n = 64;  // 12.8 MiB of replies
  for (int i = 0; i < n; i++) batch += EncodeCommand({"GET", "big"});
  std::thread writer([&] { c.SendRaw(batch); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (int i = 0; i < n; i++) {
    auto r = c.Read();
    ASSERT_TRUE(r) << i;
    ASSERT_EQ(r->str, big) << i;
  }
  writer.join();
}

// A client that sends its commands and then half-closes (shutdown(SHUT_WR), as `nc -N` does):
// every command it sent is run and answered, also those still waiting behind 1 MiB of replies
// when the server reads the end of the input.
TEST(ServeServerConcurrent, HalfClosedClientStillGetsItsReplies) {
  ServerEnv env;
  ASSERT_TRUE(env.ok());
  RespConn c;
  ASSERT_TRUE(c.Connect(env.port()));
  ASSERT_TRUE(c.SendRaw("SET a 1\r\nGET a\r\n"));
  shutdown(c.fd(), SHUT_WR);
  auto set = c.Read();
  auto get = c.Read();
  ASSERT_TRUE(set && get);
  EXPECT_TRUE(set->ok());
  EXPECT_EQ(get->str, "1");
  EXPECT_TRUE(c.WaitClosed());

  const std::string big(256 << 10, 'b');
  ASSERT_TRUE(c.Connect(env.port()));
  ASSERT_TRUE(c.Call({"SET", "big", big}).ok());
  std::string batch;
  const int n = 32;  // 8 MiB of replies: the server stops at the high water with input left
  for (int i = 0; i < n; i++) batch += EncodeCommand({"GET", "big"});
  batch += "PING\r\n";
  ASSERT_TRUE(c.SendRaw(batch));
  shutdown(c.fd(), SHUT_WR);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int i = 0; i < n; i++) {
    auto r = c.Read();
    ASSERT_TRUE(r) << "reply " << i << " of " << n;
    ASSERT_EQ(r->str.size(), big.size());
  }
  auto pong = c.Read();
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->str, "PONG");
  EXPECT_TRUE(c.WaitClosed());
}

TEST(ServeServerConcurrent, ShutdownCommandSignalsTheOwner) {
  ServerEnv env;
  ASSERT_TRUE(env.ok());
  RespConn c;
  ASSERT_TRUE(c.Connect(env.port()));
  ASSERT_TRUE(c.Send({"SHUTDOWN"}));
  EXPECT_TRUE(c.WaitClosed());
  pollfd p{env.server().shutdown_fd(), POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 5000), 1);
}

}  // namespace
}  // namespace pmhash::testing
