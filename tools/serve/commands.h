// tools/serve/commands.h — the Redis commands of `pmhash serve`, run against one open Index.
//
// The executor knows nothing of sockets: it takes one parsed command and appends its RESP2 reply,
// so that tests drive it directly. It is shared by every event-loop thread.
//
// Key spaces (fixed by the pool's kind, from Index::capabilities()):
//   bytes   kinds with variable-size keys (reh-kv, pea-kv, turbo-kv, smartht-kv, elimda-kv):
//           keys and values are byte strings (the index bounds their size).
//   uint64  the other unique-key kinds (reh, pea, turbo, smartht, elimda): a key and a value are
//           unsigned 64-bit decimal numbers ("000042" is key 42; GET replies "42"); anything else
//           is refused with an error that names the kinds with byte-string keys.
//   multi   kinds with several values per key (pea-multi): the set commands (SADD, SREM,
//           SMEMBERS, SCARD, SISMEMBER) on uint64 keys and members; DEL erases every value of a
//           key; GET/SET are refused (WRONGTYPE). DBSIZE counts pairs, as Index::Size().
//
// Durability: a write command's reply is appended only after the index call returned, and a
// persistent index's write is durable when it returns (include/pmhash/index.h): a client that
// reads "+OK" holds a write that survives any crash. A multi-key write (MSET, DEL k1 k2,
// FLUSHALL) is atomic to other clients (it holds the stripe locks of all its keys) but is made
// durable key by key: a crash in its middle keeps a subset of its keys' writes.
//
// Atomicity: every write of a key (SET, SETNX, DEL, INCR..., MSET, SADD, SREM, FLUSHALL) holds
// the key's stripe lock (1024 stripes by key hash; several stripes taken in increasing order),
// so a read-modify-write (INCR, SET NX GET, SADD's membership check) is atomic against every
// other client. Reads take no lock; MGET reads each key at its own instant.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/striped_counter.h"
#include "pmhash/index.h"
#include "tools/serve/resp.h"

namespace pmhash::serve {

// One client connection's state, owned by its event loop.
struct Session {
  uint64_t id = 0;
  std::string name;                // CLIENT SETNAME
  int proto = 2;                   // 2 (RESP2) or 3 (RESP3): HELLO
  bool close_after_reply = false;  // QUIT, SHUTDOWN: close once the reply is written
};

// Server-wide counters (INFO): written by the event loops, read by INFO.
struct ServerCounters {
  std::atomic<uint64_t> connected_clients{0};
  std::atomic<uint64_t> connections_received{0};
  std::atomic<uint64_t> rejected_connections{0};
  // Counted by every loop on every command: striped, so that the loops share no cache line.
  StripedCounter commands_processed;
  std::atomic<uint64_t> protocol_errors{0};
  std::atomic<uint64_t> idle_timeouts{0};
};

// What INFO and CONFIG GET report about the server's own settings.
struct ServeSettings {
  std::string bind = "127.0.0.1";
  uint16_t port = 6379;
  int threads = 1;
  uint32_t max_clients = 10000;
  uint32_t idle_timeout_s = 0;  // 0: never
  Limits limits;
};

class Executor {
 public:
  using Args = std::span<const std::string_view>;

  // `on_shutdown` runs on the thread that executes SHUTDOWN (the server then stops).
  Executor(Index& index, ServeSettings settings, std::function<void()> on_shutdown);
  ~Executor();

  // Runs one command (args[0] is its name, any case) and appends its reply to *out.
  void Execute(Args args, Session* session, std::string* out);

  ServerCounters& counters() { return counters_; }
  ServeSettings& settings() { return settings_; }
  // "bytes", "uint64" or "multi".
  std::string_view key_space() const;

  // One command of the table (commands.cc).
  struct Spec;
  static std::span<const Spec> Table();

 private:
  enum class Space { kUint64, kBytes, kMulti };
  // A key as the index sees it: its bytes (bytes space) or number, and its hash (stripe, SCAN).
  struct KeyRef {
    std::string_view bytes;
    uint64_t num = 0;
    uint64_t hash = 0;
  };
  enum class SetMode { kUpsert, kInsert, kUpdate };

  // Command handlers (commands.cc); each appends exactly one reply.
  void Ping(Args a, Session* s, std::string* out);
  void Echo(Args a, Session* s, std::string* out);
  void Get(Args a, Session* s, std::string* out);
  void Set(Args a, Session* s, std::string* out);
  void SetNx(Args a, Session* s, std::string* out);
  void Del(Args a, Session* s, std::string* out);
  void Exists(Args a, Session* s, std::string* out);
  void Type(Args a, Session* s, std::string* out);
  void MGet(Args a, Session* s, std::string* out);
  void MSet(Args a, Session* s, std::string* out);
  void IncrBy(Args a, Session* s, std::string* out);
  void DbSize(Args a, Session* s, std::string* out);
  void Scan(Args a, Session* s, std::string* out);
  void Keys(Args a, Session* s, std::string* out);
  void FlushAll(Args a, Session* s, std::string* out);
  void SAdd(Args a, Session* s, std::string* out);
  void SRem(Args a, Session* s, std::string* out);
  void SMembers(Args a, Session* s, std::string* out);
  void SCard(Args a, Session* s, std::string* out);
  void SIsMember(Args a, Session* s, std::string* out);
  void Info(Args a, Session* s, std::string* out);
  void Command(Args a, Session* s, std::string* out);
  void Config(Args a, Session* s, std::string* out);
  void Client(Args a, Session* s, std::string* out);
  void Hello(Args a, Session* s, std::string* out);
  void Select(Args a, Session* s, std::string* out);
  void Quit(Args a, Session* s, std::string* out);
  void Shutdown(Args a, Session* s, std::string* out);
  void Auth(Args a, Session* s, std::string* out);

  // Helpers. Each returning bool appends an error reply and returns false on failure.
  bool ResolveKey(std::string_view arg, KeyRef* k, std::string* out) const;
  bool NeedUniqueKeys(std::string_view cmd, std::string* out) const;
  bool NeedMulti(std::string_view cmd, std::string* out) const;
  Status FindValue(const KeyRef& k, std::string* value) const;  // reply bytes of the value
  Status WriteValue(const KeyRef& k, std::string_view value, SetMode mode);
  Status EraseKey(const KeyRef& k);
  bool Present(const KeyRef& k) const;
  // Every key once per live pair (multi: once per pair): its reply bytes and hash.
  Status ForEachKey(const std::function<void(std::string_view key, uint64_t hash)>& fn) const;
  std::mutex& StripeOf(uint64_t hash) const;
  // Locks the stripes of `hashes` in increasing order; unlocks them when the result is dropped.
  class StripeSet;
  void AppendIndexError(std::string* out, const Status& s) const;
  std::string InfoText(std::string_view section) const;

  Index& index_;
  BytesApi* bytes_;
  MultiApi* multi_;
  Space space_;
  uint64_t hash_seed_;
  ServeSettings settings_;
  std::function<void()> on_shutdown_;
  ServerCounters counters_;
  std::chrono::steady_clock::time_point start_;
  // Serialise the writes of one key (see the top of this file). They guard no field of this
  // class (they order index calls), hence std::mutex without thread-safety annotations.
  std::unique_ptr<std::mutex[]> stripes_;
  std::string kinds_with_bytes_;  // for the uint64 key space's error messages
};

// Redis's glob-style pattern match (KEYS, SCAN MATCH, CONFIG GET): * ? [abc] [^a-z] \x.
bool GlobMatch(std::string_view pattern, std::string_view s);

}  // namespace pmhash::serve
