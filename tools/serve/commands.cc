// tools/serve/commands.cc — see commands.h.
#include "tools/serve/commands.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <queue>
#include <unordered_set>

namespace pmhash::serve {

struct Executor::Spec {
  std::string_view name;  // lower case
  int arity;              // Redis's convention: N exactly N words, -N at least N
  std::string_view flags;  // COMMAND's flags, space-separated
  int first_key, last_key, step;
  void (Executor::*fn)(Args, Session*, std::string*);
};

namespace {

constexpr size_t kStripes = 1024;
constexpr uint64_t kHashSeed = 0x706d68617368;  // fixed: SCAN cursors stay valid across restarts
constexpr std::string_view kVersion = "0.1.0";
// Redis version reported to clients that gate features on it (RESP2 command set of 7.0).
constexpr std::string_view kRedisCompatVersion = "7.0.0";

std::string Lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

// An argument as shown in an error message: at most 40 bytes, non-printables escaped.
std::string Shown(std::string_view a) {
  std::string r;
  for (size_t i = 0; i < a.size() && i < 40; i++) {
    const unsigned char c = static_cast<unsigned char>(a[i]);
    if (c >= 32 && c < 127 && c != '\'') {
      r += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      r += buf;
    }
  }
  if (a.size() > 40) r += "...";
  return r;
}

// Decimal digits only (leading zeros allowed: redis-benchmark's __rand_int__ is zero-padded).
bool ParseU64Dec(std::string_view s, uint64_t* v) {
  if (s.empty() || s.size() > 32) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string U64Text(uint64_t v) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  (void)ec;
  return std::string(buf, p);
}

void AppendArity(std::string* out, std::string_view cmd) {
  AppendError(out, "ERR wrong number of arguments for '" + Lower(cmd) + "' command");
}

void AppendSyntax(std::string* out) { AppendError(out, "ERR syntax error"); }

void AppendNotInteger(std::string* out) {
  AppendError(out, "ERR value is not an integer or out of range");
}

// One glob item at p[pi] against c; *next: the pattern index after the item.
bool MatchOne(std::string_view p, size_t pi, char c, size_t* next) {
  const char pc = p[pi];
  if (pc == '?') {
    *next = pi + 1;
    return true;
  }
  if (pc == '\\' && pi + 1 < p.size()) {
    *next = pi + 2;
    return p[pi + 1] == c;
  }
  if (pc != '[') {
    *next = pi + 1;
    return pc == c;
  }
  size_t j = pi + 1;
  const bool negate = j < p.size() && p[j] == '^';
  if (negate) j++;
  bool matched = false;
  while (j < p.size() && p[j] != ']') {
    if (p[j] == '\\' && j + 1 < p.size()) {
      matched |= p[j + 1] == c;
      j += 2;
    } else if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
      char lo = p[j], hi = p[j + 2];
      if (lo > hi) std::swap(lo, hi);
      matched |= c >= lo && c <= hi;
      j += 3;
    } else {
      matched |= p[j] == c;
      j++;
    }
  }
  if (j < p.size()) j++;  // the ']' (an unclosed class ends with the pattern, as in Redis)
  *next = j;
  return matched != negate;
}

}  // namespace

bool GlobMatch(std::string_view p, std::string_view s) {
  size_t pi = 0, si = 0;
  size_t star_p = std::string_view::npos, star_s = 0;
  while (si < s.size()) {
    if (pi < p.size()) {
      if (p[pi] == '*') {
        star_p = ++pi;
        star_s = si;
        continue;
      }
      size_t next = 0;
      if (MatchOne(p, pi, s[si], &next)) {
        pi = next;
        si++;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    pi = star_p;  // let the last '*' absorb one more byte
    si = ++star_s;
  }
  while (pi < p.size() && p[pi] == '*') pi++;
  return pi == p.size();
}

// ---- the command table ------------------------------------------------------------------------

std::span<const Executor::Spec> Executor::Table() {
  static const Spec kTable[] = {
      {"auth", -2, "noscript loading stale fast no-auth", 0, 0, 0, &Executor::Auth},
      {"client", -2, "admin noscript loading stale", 0, 0, 0, &Executor::Client},
      {"command", -1, "random loading stale", 0, 0, 0, &Executor::Command},
      {"config", -2, "admin noscript loading stale", 0, 0, 0, &Executor::Config},
      {"dbsize", 1, "readonly fast", 0, 0, 0, &Executor::DbSize},
      {"decr", 2, "write denyoom fast", 1, 1, 1, &Executor::IncrBy},
      {"decrby", 3, "write denyoom fast", 1, 1, 1, &Executor::IncrBy},
      {"del", -2, "write", 1, -1, 1, &Executor::Del},
      {"echo", 2, "fast", 0, 0, 0, &Executor::Echo},
      {"exists", -2, "readonly fast", 1, -1, 1, &Executor::Exists},
      {"flushall", -1, "write", 0, 0, 0, &Executor::FlushAll},
      {"flushdb", -1, "write", 0, 0, 0, &Executor::FlushAll},
      {"get", 2, "readonly fast", 1, 1, 1, &Executor::Get},
      {"hello", -1, "noscript loading stale fast no-auth", 0, 0, 0, &Executor::Hello},
      {"incr", 2, "write denyoom fast", 1, 1, 1, &Executor::IncrBy},
      {"incrby", 3, "write denyoom fast", 1, 1, 1, &Executor::IncrBy},
      {"info", -1, "loading stale", 0, 0, 0, &Executor::Info},
      {"keys", 2, "readonly", 0, 0, 0, &Executor::Keys},
      {"mget", -2, "readonly fast", 1, -1, 1, &Executor::MGet},
      {"mset", -3, "write denyoom", 1, -1, 2, &Executor::MSet},
      {"msetnx", -3, "write denyoom", 1, -1, 2, &Executor::MSet},
      {"ping", -1, "fast", 0, 0, 0, &Executor::Ping},
      {"quit", -1, "fast no-auth", 0, 0, 0, &Executor::Quit},
      {"sadd", -3, "write denyoom fast", 1, 1, 1, &Executor::SAdd},
      {"scan", -2, "readonly", 0, 0, 0, &Executor::Scan},
      {"scard", 2, "readonly fast", 1, 1, 1, &Executor::SCard},
      {"select", 2, "loading stale fast", 0, 0, 0, &Executor::Select},
      {"set", -3, "write denyoom", 1, 1, 1, &Executor::Set},
      {"setnx", 3, "write denyoom fast", 1, 1, 1, &Executor::SetNx},
      {"shutdown", -1, "admin noscript loading stale", 0, 0, 0, &Executor::Shutdown},
      {"sismember", 3, "readonly fast", 1, 1, 1, &Executor::SIsMember},
      {"smembers", 2, "readonly", 1, 1, 1, &Executor::SMembers},
      {"srem", -3, "write fast", 1, 1, 1, &Executor::SRem},
      {"type", 2, "readonly fast", 1, 1, 1, &Executor::Type},
      {"unlink", -2, "write fast", 1, -1, 1, &Executor::Del},
  };
  return kTable;
}

// ---- construction, dispatch ------------------------------------------------------------------

Executor::Executor(Index& index, ServeSettings settings, std::function<void()> on_shutdown)
    : index_(index),
      bytes_(index.bytes()),
      multi_(bytes_ ? nullptr : index.multi()),
      space_(bytes_ ? Space::kBytes : multi_ ? Space::kMulti : Space::kUint64),
      hash_seed_(kHashSeed),
      settings_(std::move(settings)),
      on_shutdown_(std::move(on_shutdown)),
      start_(std::chrono::steady_clock::now()),
      stripes_(new std::mutex[kStripes]),
      kinds_with_bytes_(KindsWith(&Capabilities::bytes)) {}

Executor::~Executor() = default;

std::string_view Executor::key_space() const {
  switch (space_) {
    case Space::kBytes: return "bytes";
    case Space::kMulti: return "multi";
    case Space::kUint64: break;
  }
  return "uint64";
}

void Executor::Execute(Args args, Session* session, std::string* out) {
  counters_.commands_processed.Add(1);
  if (args.empty()) return;
  const std::string name = Lower(args[0]);
  const Spec* spec = nullptr;
  for (const Spec& s : Table()) {
    if (s.name == name) {
      spec = &s;
      break;
    }
  }
  if (spec == nullptr) {
    std::string msg = "ERR unknown command '" + Shown(args[0]) + "', with args beginning with:";
    for (size_t i = 1; i < args.size() && i < 4; i++) msg += " '" + Shown(args[i]) + "'";
    AppendError(out, msg);
    return;
  }
  const int n = static_cast<int>(args.size());
  if ((spec->arity > 0 && n != spec->arity) || (spec->arity < 0 && n < -spec->arity)) {
    AppendArity(out, args[0]);
    return;
  }
  (this->*spec->fn)(args, session, out);
}

// ---- key space helpers -----------------------------------------------------------------------

bool Executor::ResolveKey(std::string_view arg, KeyRef* k, std::string* out) const {
  k->bytes = arg;
  if (space_ == Space::kBytes) {
    k->hash = XXH3_64bits_withSeed(arg.data(), arg.size(), hash_seed_);
    return true;
  }
  if (!ParseU64Dec(arg, &k->num)) {
    AppendError(out, "ERR key '" + Shown(arg) +
                         "' is not a decimal unsigned 64-bit integer: this pool's kind '" +
                         std::string(index_.kind()) + "' has uint64 keys" +
                         (kinds_with_bytes_.empty()
                              ? std::string()
                              : " (kinds with byte-string keys: " + kinds_with_bytes_ + ")"));
    return false;
  }
  k->hash = XXH3_64bits_withSeed(&k->num, sizeof(k->num), hash_seed_);
  return true;
}

bool Executor::NeedUniqueKeys(std::string_view cmd, std::string* out) const {
  if (space_ != Space::kMulti) return true;
  AppendError(out, "WRONGTYPE '" + Lower(cmd) + "' on a multi-value pool (kind '" +
                       std::string(index_.kind()) +
                       "'): its keys hold sets of values; use SADD, SREM, SMEMBERS, SCARD, "
                       "SISMEMBER");
  return false;
}

bool Executor::NeedMulti(std::string_view cmd, std::string* out) const {
  if (space_ == Space::kMulti) return true;
  const std::string others = KindsWith(&Capabilities::multi);
  AppendError(out, "WRONGTYPE '" + Lower(cmd) + "' needs a multi-value pool; kind '" +
                       std::string(index_.kind()) + "' has one value per key" +
                       (others.empty() ? std::string() : " (multi-value kinds: " + others + ")"));
  return false;
}

std::mutex& Executor::StripeOf(uint64_t hash) const {
  return stripes_[(hash >> 17) & (kStripes - 1)];
}

class Executor::StripeSet {
 public:
  // The stripes of `hashes`, or every stripe when `all`.
  StripeSet(const Executor& e, const std::vector<uint64_t>& hashes, bool all = false) {
    if (all) {
      for (size_t i = 0; i < kStripes; i++) held_.push_back(&e.stripes_[i]);
    } else {
      for (uint64_t h : hashes) held_.push_back(&e.StripeOf(h));
      std::sort(held_.begin(), held_.end());  // one global order: stripe address
      held_.erase(std::unique(held_.begin(), held_.end()), held_.end());
    }
    for (std::mutex* m : held_) m->lock();
  }
  ~StripeSet() {
    for (auto it = held_.rbegin(); it != held_.rend(); ++it) (*it)->unlock();
  }
  StripeSet(const StripeSet&) = delete;
  StripeSet& operator=(const StripeSet&) = delete;

 private:
  std::vector<std::mutex*> held_;
};

Status Executor::FindValue(const KeyRef& k, std::string* value) const {
  if (space_ == Space::kBytes) return bytes_->Find(k.bytes, value);
  Value v = 0;
  Status s = index_.Find(k.num, &v);
  if (s.ok()) *value = U64Text(v);
  return s;
}

Status Executor::WriteValue(const KeyRef& k, std::string_view value, SetMode mode) {
  if (space_ == Space::kBytes) {
    switch (mode) {
      case SetMode::kInsert: return bytes_->Insert(k.bytes, value);
      case SetMode::kUpdate: return bytes_->Update(k.bytes, value);
      case SetMode::kUpsert: break;
    }
    return bytes_->Upsert(k.bytes, value);
  }
  uint64_t v = 0;
  if (!ParseU64Dec(value, &v)) {
    return Status::InvalidArgument("value '" + Shown(value) +
                                   "' is not a decimal unsigned 64-bit integer: this pool's "
                                   "kind '" + std::string(index_.kind()) +
                                   "' has uint64 values");
  }
  switch (mode) {
    case SetMode::kInsert: return index_.Insert(k.num, v);
    case SetMode::kUpdate: return index_.Update(k.num, v);
    case SetMode::kUpsert: break;
  }
  return index_.Upsert(k.num, v);
}

Status Executor::EraseKey(const KeyRef& k) {
  switch (space_) {
    case Space::kBytes: return bytes_->Erase(k.bytes);
    case Space::kMulti: return multi_->EraseAll(k.num);
    case Space::kUint64: break;
  }
  return index_.Erase(k.num);
}

bool Executor::Present(const KeyRef& k) const {
  switch (space_) {
    case Space::kBytes: {
      std::string v;
      return bytes_->Find(k.bytes, &v).ok();
    }
    case Space::kMulti: return multi_->Count(k.num) > 0;
    case Space::kUint64: break;
  }
  Value v = 0;
  return index_.Find(k.num, &v).ok();
}

Status Executor::ForEachKey(
    const std::function<void(std::string_view key, uint64_t hash)>& fn) const {
  if (space_ == Space::kBytes) {
    return bytes_->ForEach([&](std::string_view key, std::string_view) {
      fn(key, XXH3_64bits_withSeed(key.data(), key.size(), hash_seed_));
    });
  }
  auto visit = [&](Key key) {
    char buf[24];
    auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), key);
    (void)ec;
    fn(std::string_view(buf, static_cast<size_t>(p - buf)),
       XXH3_64bits_withSeed(&key, sizeof(key), hash_seed_));
  };
  if (space_ == Space::kMulti) return multi_->ForEach([&](Key key, Value) { visit(key); });
  return index_.ForEach([&](Key key, Value) { visit(key); });
}

void Executor::AppendIndexError(std::string* out, const Status& s) const {
  if (s.IsOutOfSpace()) {
    AppendError(out, "OOM " + s.ToString());
  } else if (s.IsInvalidArgument()) {
    AppendError(out, "ERR " + std::string(s.message()));
  } else {
    AppendError(out, "ERR " + s.ToString());
  }
}

// ---- strings ---------------------------------------------------------------------------------

void Executor::Ping(Args a, Session*, std::string* out) {
  if (a.size() > 2) return AppendArity(out, a[0]);
  if (a.size() == 2) return AppendBulk(out, a[1]);
  AppendSimple(out, "PONG");
}

void Executor::Echo(Args a, Session*, std::string* out) { AppendBulk(out, a[1]); }

void Executor::Get(Args a, Session* session, std::string* out) {
  if (!NeedUniqueKeys(a[0], out)) return;
  KeyRef k;
  if (!ResolveKey(a[1], &k, out)) return;
  std::string v;
  const Status s = FindValue(k, &v);
  if (s.ok()) return AppendBulk(out, v);
  if (s.IsNotFound()) return AppendNull(out, session->proto);
  AppendIndexError(out, s);
}

void Executor::Set(Args a, Session* session, std::string* out) {
  if (!NeedUniqueKeys(a[0], out)) return;
  bool nx = false, xx = false, get = false;
  for (size_t i = 3; i < a.size(); i++) {
    if (IEquals(a[i], "nx")) {
      nx = true;
    } else if (IEquals(a[i], "xx")) {
      xx = true;
    } else if (IEquals(a[i], "get")) {
      get = true;
    } else if (IEquals(a[i], "keepttl")) {
      // keys never expire: nothing to keep
    } else if (IEquals(a[i], "ex") || IEquals(a[i], "px") || IEquals(a[i], "exat") ||
               IEquals(a[i], "pxat")) {
      return AppendError(out, "ERR keys do not expire in pmhash: SET with " + Lower(a[i]) +
                                  " is not supported");
    } else {
      return AppendSyntax(out);
    }
  }
  if (nx && xx) return AppendSyntax(out);
  KeyRef k;
  if (!ResolveKey(a[1], &k, out)) return;
  std::lock_guard<std::mutex> lock(StripeOf(k.hash));
  std::string old;
  Status found = Status::NotFound();
  if (get) {
    found = FindValue(k, &old);
    if (!found.ok() && !found.IsNotFound()) return AppendIndexError(out, found);
  }
  const Status s = WriteValue(k, a[2], nx ? SetMode::kInsert : xx ? SetMode::kUpdate
                                                                  : SetMode::kUpsert);
  if (!s.ok() && !s.IsExists() && !s.IsNotFound()) return AppendIndexError(out, s);
  if (get) return found.ok() ? AppendBulk(out, old) : AppendNull(out, session->proto);
  if (s.ok()) return AppendSimple(out, "OK");
  AppendNull(out, session->proto);  // NX on a present key, XX on an absent one
}

void Executor::SetNx(Args a, Session*, std::string* out) {
  if (!NeedUniqueKeys(a[0], out)) return;
  KeyRef k;
  if (!ResolveKey(a[1], &k, out)) return;
  std::lock_guard<std::mutex> lock(StripeOf(k.hash));
  const Status s = WriteValue(k, a[2], SetMode::kInsert);
  if (s.ok()) return AppendInteger(out, 1);
  if (s.IsExists()) return AppendInteger(out, 0);
  AppendIndexError(out, s);
}

void Executor::Del(Args a, Session*, std::string* out) {
  std::vector<KeyRef> keys(a.size() - 1);
  std::vector<uint64_t> hashes;
  for (size_t i = 1; i < a.size(); i++) {
    if (!ResolveKey(a[i], &keys[i - 1], out)) return;
    hashes.push_back(keys[i - 1].hash);
  }
  StripeSet locks(*this, hashes);
  int64_t erased = 0;
  for (const KeyRef& k : keys) {
    const Status s = EraseKey(k);
    if (s.ok()) {
      erased++;
    } else if (!s.IsNotFound()) {
      return AppendIndexError(out, s);
    }
  }
  AppendInteger(out, erased);
}

void Executor::Exists(Args a, Session*, std::string* out) {
  int64_t n = 0;
  for (size_t i = 1; i < a.size(); i++) {
    KeyRef k;
    if (!ResolveKey(a[i], &k, out)) return;
    n += Present(k) ? 1 : 0;
  }
  AppendInteger(out, n);
}

void Executor::Type(Args a, Session*, std::string* out) {
  KeyRef k;
  if (!ResolveKey(a[1], &k, out)) return;
  AppendSimple(out, !Present(k) ? "none" : space_ == Space::kMulti ? "set" : "string");
}

void Executor::MGet(Args a, Session* session, std::string* out) {
  if (!NeedUniqueKeys(a[0], out)) return;
  std::vector<KeyRef> keys(a.size() - 1);
  for (size_t i = 1; i < a.size(); i++) {
    if (!ResolveKey(a[i], &keys[i - 1], out)) return;
  }
  // Numeric keys: one FindBatch, whose prefetching overlaps the keys' cache misses.
  std::vector<Key> nums;
  std::vector<Value> values;
  std::vector<Status> found;
  if (space_ == Space::kUint64) {
    for (const KeyRef& k : keys) nums.push_back(k.num);
    values.resize(nums.size());
    found.resize(nums.size());
    if (Status s = index_.FindBatch(nums, values, found); !s.ok()) {
      return AppendIndexError(out, s);
    }
  }
  std::string reply;
  AppendArrayHeader(&reply, keys.size());
  std::string v;
  for (size_t i = 0; i < keys.size(); i++) {
    Status s;
    if (space_ == Space::kUint64) {
      s = std::move(found[i]);
      if (s.ok()) v = U64Text(values[i]);
    } else {
      s = FindValue(keys[i], &v);
    }
    if (s.ok()) {
      AppendBulk(&reply, v);
    } else if (s.IsNotFound()) {
      AppendNull(&reply, session->proto);
    } else {
      return AppendIndexError(out, s);
    }
  }
  out->append(reply);
}

void Executor::MSet(Args a, Session*, std::string* out) {
  if (!NeedUniqueKeys(a[0], out)) return;
  if ((a.size() - 1) % 2 != 0) return AppendArity(out, a[0]);
  const bool nx = IEquals(a[0], "msetnx");
  const size_t n = (a.size() - 1) / 2;
  std::vector<KeyRef> keys(n);
  std::vector<uint64_t> hashes;
  uint64_t ignored = 0;
  for (size_t i = 0; i < n; i++) {
    if (!ResolveKey(a[1 + 2 * i], &keys[i], out)) return;
    hashes.push_back(keys[i].hash);
    // Refuse a bad value before anything is written.
    if (space_ == Space::kUint64 && !ParseU64Dec(a[2 + 2 * i], &ignored)) {
      return AppendIndexError(out, WriteValue(keys[i], a[2 + 2 * i], SetMode::kUpsert));
    }
  }
  StripeSet locks(*this, hashes);
  if (nx) {
    for (const KeyRef& k : keys) {
      if (Present(k)) return AppendInteger(out, 0);
    }
  }
  if (space_ == Space::kUint64) {
    // One WriteBatch of upserts (values were checked above): its ops share fences (reh), and
    // the reply follows the batch's return, when every pair is durable. A key given twice is
    // written twice, in order (MSETNX too: inserted once, then overwritten, as Redis).
    std::vector<WriteOp> ops(n);
    for (size_t i = 0; i < n; i++) {
      ops[i] = {WriteKind::kUpsert, keys[i].num, 0};
      ParseU64Dec(a[2 + 2 * i], &ops[i].value);
    }
    std::vector<Status> statuses(n);
    Status s = index_.WriteBatch(ops, statuses);
    for (size_t i = 0; s.ok() && i < n; i++) s = statuses[i];
    if (!s.ok()) return AppendIndexError(out, s);
  } else {
    for (size_t i = 0; i < n; i++) {
      // MSETNX: a key given twice is inserted once, then overwritten (as Redis).
      const Status s = WriteValue(keys[i], a[2 + 2 * i], SetMode::kUpsert);
      if (!s.ok()) return AppendIndexError(out, s);
    }
  }
  if (nx) return AppendInteger(out, 1);
  AppendSimple(out, "OK");
}

void Executor::IncrBy(Args a, Session*, std::string* out) {
  if (!NeedUniqueKeys(a[0], out)) return;
  const std::string cmd = Lower(a[0]);
  int64_t delta = 1;
  if (cmd == "incrby" || cmd == "decrby") {
    if (!ParseInteger(a[2], &delta)) return AppendNotInteger(out);
    if (cmd == "decrby") {
      if (delta == INT64_MIN) return AppendError(out, "ERR decrement would overflow");
      delta = -delta;
    }
  } else if (cmd == "decr") {
    delta = -1;
  }
  KeyRef k;
  if (!ResolveKey(a[1], &k, out)) return;
  std::lock_guard<std::mutex> lock(StripeOf(k.hash));
  std::string cur;
  const Status found = FindValue(k, &cur);
  if (!found.ok() && !found.IsNotFound()) return AppendIndexError(out, found);
  std::string next;
  if (space_ == Space::kUint64) {
    // uint64 values: the result must stay in [0, 2^64).
    uint64_t v = 0;
    if (found.ok()) ParseU64Dec(cur, &v);
    const __int128 r = static_cast<__int128>(v) + delta;
    if (r < 0 || r > static_cast<__int128>(UINT64_MAX)) {
      return AppendError(out, "ERR increment or decrement would overflow");
    }
    next = U64Text(static_cast<uint64_t>(r));
  } else {
    // Byte-string values: a decimal signed 64-bit integer, as in Redis.
    int64_t v = 0;
    if (found.ok() && !ParseInteger(cur, &v)) return AppendNotInteger(out);
    int64_t r = 0;
    if (__builtin_add_overflow(v, delta, &r)) {
      return AppendError(out, "ERR increment or decrement would overflow");
    }
    next = std::to_string(r);
  }
  const Status s = WriteValue(k, next, SetMode::kUpsert);
  if (!s.ok()) return AppendIndexError(out, s);
  // A uint64 result above 2^63-1 is written as its digits (RESP integers are signed 64-bit).
  out->push_back(':');
  out->append(next);
  out->append("\r\n");
}

void Executor::DbSize(Args, Session*, std::string* out) {
  AppendInteger(out, static_cast<int64_t>(index_.Size()));
}

// ---- iteration -------------------------------------------------------------------------------

// SCAN's cursor is a position in hash order: the call returns the keys whose hash h(key) is the
// smallest ones >= cursor (at least COUNT of them, and at least 1/32 of the keys, so that a
// whole iteration costs at most ~33 walks of the index), and the next cursor is one past the
// largest hash returned; 0 when none is left. The index offers no cursor of its own, so each
// call walks it with ForEach and keeps a bounded heap. Redis's guarantee holds: a key present
// for the whole iteration is returned (once, unless the hash function gives two keys one hash
// and they straddle a batch boundary: then the batch stops before that hash).
void Executor::Scan(Args a, Session*, std::string* out) {
  uint64_t cursor = 0;
  if (!ParseU64Dec(a[1], &cursor)) return AppendError(out, "ERR invalid cursor");
  std::string_view pattern;
  std::string_view type;
  int64_t count = 10;
  for (size_t i = 2; i < a.size(); i++) {
    if (i + 1 >= a.size()) return AppendSyntax(out);
    if (IEquals(a[i], "match")) {
      pattern = a[++i];
    } else if (IEquals(a[i], "count")) {
      if (!ParseInteger(a[++i], &count)) return AppendNotInteger(out);
      if (count < 1) return AppendSyntax(out);
    } else if (IEquals(a[i], "type")) {
      type = a[++i];
    } else {
      return AppendSyntax(out);
    }
  }
  const uint64_t want = std::max<uint64_t>(static_cast<uint64_t>(count), index_.Size() / 32);
  using Item = std::pair<uint64_t, std::string>;  // (hash, key)
  std::priority_queue<Item> heap;                 // the largest hash on top
  uint64_t min_evicted = UINT64_MAX;
  bool evicted = false;
  const Status walk = ForEachKey([&](std::string_view key, uint64_t h) {
    if (h < cursor) return;
    if (heap.size() < want) {
      heap.emplace(h, std::string(key));
    } else if (h < heap.top().first) {
      min_evicted = std::min(min_evicted, heap.top().first);
      evicted = true;
      heap.pop();
      heap.emplace(h, std::string(key));
    } else {
      min_evicted = std::min(min_evicted, h);
      evicted = true;
    }
  });
  if (!walk.ok()) return AppendIndexError(out, walk);
  std::vector<Item> batch;
  batch.reserve(heap.size());
  while (!heap.empty()) {
    batch.push_back(std::move(const_cast<Item&>(heap.top())));
    heap.pop();
  }
  std::sort(batch.begin(), batch.end());
  uint64_t next = 0;
  if (evicted && !batch.empty()) {
    const uint64_t last = batch.back().first;
    if (min_evicted > last) {
      next = last + 1;  // cannot wrap: a larger hash exists
    } else {
      // Keys of hash `last` were left out: end this batch before that hash.
      while (!batch.empty() && batch.back().first == last) batch.pop_back();
      next = last;
      if (batch.empty()) {
        // More than `want` keys share one hash: return all of them at once.
        const Status again = ForEachKey([&](std::string_view key, uint64_t h) {
          if (h == last) batch.emplace_back(h, std::string(key));
        });
        if (!again.ok()) return AppendIndexError(out, again);
        std::sort(batch.begin(), batch.end());
        next = last == UINT64_MAX ? 0 : last + 1;
      }
    }
  }
  batch.erase(std::unique(batch.begin(), batch.end()), batch.end());  // multi: one per key
  const std::string_view key_type = space_ == Space::kMulti ? "set" : "string";
  std::vector<std::string_view> keys;
  for (const Item& it : batch) {
    if (!pattern.empty() && !GlobMatch(pattern, it.second)) continue;
    if (!type.empty() && !IEquals(type, key_type)) continue;
    keys.push_back(it.second);
  }
  AppendArrayHeader(out, 2);
  AppendBulk(out, U64Text(next));
  AppendArrayHeader(out, keys.size());
  for (std::string_view k : keys) AppendBulk(out, k);
}

void Executor::Keys(Args a, Session*, std::string* out) {
  std::vector<std::string> keys;
  const Status walk = ForEachKey([&](std::string_view key, uint64_t) {
    if (GlobMatch(a[1], key)) keys.emplace_back(key);
  });
  if (!walk.ok()) return AppendIndexError(out, walk);
  if (space_ == Space::kMulti) {
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  }
  AppendArrayHeader(out, keys.size());
  for (const std::string& k : keys) AppendBulk(out, k);
}

void Executor::FlushAll(Args a, Session*, std::string* out) {
  if (a.size() > 2 || (a.size() == 2 && !IEquals(a[1], "sync") && !IEquals(a[1], "async"))) {
    return AppendSyntax(out);
  }
  StripeSet locks(*this, {}, /*all=*/true);
  std::vector<std::string> keys;
  const Status walk = ForEachKey([&](std::string_view key, uint64_t) { keys.emplace_back(key); });
  if (!walk.ok()) return AppendIndexError(out, walk);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  for (const std::string& key : keys) {
    KeyRef k;
    if (!ResolveKey(key, &k, out)) return;
    const Status s = EraseKey(k);
    if (!s.ok() && !s.IsNotFound()) return AppendIndexError(out, s);
  }
  AppendSimple(out, "OK");
}

// ---- sets (multi-value pools) ----------------------------------------------------------------

void Executor::SAdd(Args a, Session*, std::string* out) {
  if (!NeedMulti(a[0], out)) return;
  KeyRef k;
  if (!ResolveKey(a[1], &k, out)) return;
  std::vector<Value> members;
  for (size_t i = 2; i < a.size(); i++) {
    uint64_t v = 0;
    if (!ParseU64Dec(a[i], &v)) {
      return AppendError(out, "ERR member '" + Shown(a[i]) +
                                  "' is not a decimal unsigned 64-bit integer");
    }
    members.push_back(v);
  }
  std::lock_guard<std::mutex> lock(StripeOf(k.hash));
  // A set: a member already there is not added twice (the multimap would keep both).
  std::vector<Value> have;
  const Status f = multi_->FindAll(k.num, &have);
  if (!f.ok() && !f.IsNotFound()) return AppendIndexError(out, f);
  std::unordered_set<Value> present(have.begin(), have.end());
  int64_t added = 0;
  for (Value v : members) {
    if (!present.insert(v).second) continue;
    const Status s = multi_->Insert(k.num, v);
    if (!s.ok()) return AppendIndexError(out, s);
    added++;
  }
  AppendInteger(out, added);
}

void Executor::SRem(Args a, Session*, std::string* out) {
  if (!NeedMulti(a[0], out)) return;
  KeyRef k;
  if (!ResolveKey(a[1], &k, out)) return;
  std::lock_guard<std::mutex> lock(StripeOf(k.hash));
  int64_t removed = 0;
  for (size_t i = 2; i < a.size(); i++) {
    uint64_t v = 0;
    if (!ParseU64Dec(a[i], &v)) continue;  // not a number: not a member
    const Status s = multi_->Erase(k.num, v);
    if (s.ok()) {
      removed++;
    } else if (!s.IsNotFound()) {
      return AppendIndexError(out, s);
    }
  }
  AppendInteger(out, removed);
}

void Executor::SMembers(Args a, Session*, std::string* out) {
  if (!NeedMulti(a[0], out)) return;
  KeyRef k;
  if (!ResolveKey(a[1], &k, out)) return;
  std::vector<Value> values;
  const Status s = multi_->FindAll(k.num, &values);
  if (!s.ok() && !s.IsNotFound()) return AppendIndexError(out, s);
  std::sort(values.begin(), values.end());
  AppendArrayHeader(out, values.size());
  for (Value v : values) AppendBulk(out, U64Text(v));
}

void Executor::SCard(Args a, Session*, std::string* out) {
  if (!NeedMulti(a[0], out)) return;
  KeyRef k;
  if (!ResolveKey(a[1], &k, out)) return;
  AppendInteger(out, static_cast<int64_t>(multi_->Count(k.num)));
}

void Executor::SIsMember(Args a, Session*, std::string* out) {
  if (!NeedMulti(a[0], out)) return;
  KeyRef k;
  if (!ResolveKey(a[1], &k, out)) return;
  uint64_t want = 0;
  if (!ParseU64Dec(a[2], &want)) return AppendInteger(out, 0);
  bool found = false;
  const Status s = multi_->ForEachValue(k.num, [&](Value v) { found |= v == want; });
  if (!s.ok() && !s.IsNotFound()) return AppendIndexError(out, s);
  AppendInteger(out, found ? 1 : 0);
}

// ---- server commands -------------------------------------------------------------------------

std::string Executor::InfoText(std::string_view section) const {
  const bool all = section.empty() || section == "all" || section == "everything" ||
                   section == "default";
  std::string r;
  char buf[64];
  auto line = [&](std::string_view k, std::string_view v) {
    r.append(k);
    r.push_back(':');
    r.append(v);
    r.append("\r\n");
  };
  auto num = [&](std::string_view k, uint64_t v) { line(k, U64Text(v)); };
  if (all || section == "server") {
    r += "# Server\r\n";
    line("redis_version", kRedisCompatVersion);
    line("pmhash_version", kVersion);
    line("redis_mode", "standalone");
    num("process_id", static_cast<uint64_t>(getpid()));
    num("tcp_port", settings_.port);
    num("io_threads", static_cast<uint64_t>(settings_.threads));
    num("uptime_in_seconds",
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::steady_clock::now() - start_)
                                  .count()));
    r += "\r\n";
  }
  if (all || section == "clients") {
    r += "# Clients\r\n";
    num("connected_clients", counters_.connected_clients.load());
    num("maxclients", settings_.max_clients);
    num("timeout", settings_.idle_timeout_s);
    r += "\r\n";
  }
  if (all || section == "stats") {
    r += "# Stats\r\n";
    num("total_connections_received", counters_.connections_received.load());
    num("total_commands_processed", static_cast<uint64_t>(counters_.commands_processed.Sum()));
    num("rejected_connections", counters_.rejected_connections.load());
    num("protocol_errors", counters_.protocol_errors.load());
    num("idle_timeouts", counters_.idle_timeouts.load());
    r += "\r\n";
  }
  const bool want_stats = all || section == "persistence" || section == "index";
  const IndexStats st = want_stats ? index_.Stats() : IndexStats{};
  if (all || section == "persistence") {
    const Durability d = index_.durability();
    r += "# Persistence\r\n";
    line("index_kind", index_.kind());
    line("durability", DurabilityName(d));
    line("durable_writes", d == Durability::kDram ? "no (a DRAM pool)"
                                                  : "yes (a write is replied to once durable)");
    line("mapping", st.mapping.empty() ? "unknown" : st.mapping);
    num("recovered_at_open", st.recovered ? 1 : 0);
    num("state_loaded_at_open", st.state_loaded ? 1 : 0);
    std::snprintf(buf, sizeof(buf), "%.6f", st.recovery_seconds);
    line("recovery_seconds", buf);
    num("persists", st.traffic.persists);
    num("fences", st.traffic.fences);
    num("flushed_lines", st.traffic.flushed_lines);
    num("nt_bytes", st.traffic.nt_bytes);
    num("media_writes_modelled", st.traffic.media_writes);
    num("loading", 0);
    num("aof_enabled", 0);
    num("rdb_changes_since_last_save", 0);
    r += "\r\n";
  }
  if (all || section == "index") {
    r += "# Index\r\n";
    line("key_space", key_space());
    num("size", st.size);
    num("capacity_slots", st.capacity_slots);
    std::snprintf(buf, sizeof(buf), "%.4f", st.load_factor);
    line("load_factor", buf);
    num("buckets", st.buckets);
    num("global_depth", st.global_depth);
    num("splits", st.splits);
    num("doublings", st.doublings);
    num("pm_bytes", st.pm_bytes);
    num("dram_bytes", st.dram_bytes);
    num("pool_bytes", st.pool_bytes);
    for (const NamedStat& d : st.details) {
      std::snprintf(buf, sizeof(buf), "%g", d.value);
      std::string name = d.name;
      std::replace(name.begin(), name.end(), '.', '_');
      line(name, buf);
    }
    r += "\r\n";
  }
  if (all || section == "keyspace") {
    r += "# Keyspace\r\n";
    const uint64_t n = index_.Size();
    if (n > 0) line("db0", "keys=" + U64Text(n) + ",expires=0,avg_ttl=0");
    r += "\r\n";
  }
  return r;
}

void Executor::Info(Args a, Session*, std::string* out) {
  if (a.size() == 1) return AppendBulk(out, InfoText(""));
  std::string text;
  for (size_t i = 1; i < a.size(); i++) text += InfoText(Lower(a[i]));
  AppendBulk(out, text);
}

void Executor::Command(Args a, Session* session, std::string* out) {
  auto entry = [&](const Spec& s) {
    AppendArrayHeader(out, 6);
    AppendBulk(out, s.name);
    AppendInteger(out, s.arity);
    std::vector<std::string_view> flags;
    for (size_t i = 0; i < s.flags.size();) {
      size_t j = s.flags.find(' ', i);
      if (j == std::string_view::npos) j = s.flags.size();
      flags.push_back(s.flags.substr(i, j - i));
      i = j + 1;
    }
    AppendArrayHeader(out, flags.size());
    for (std::string_view f : flags) AppendSimple(out, f);
    AppendInteger(out, s.first_key);
    AppendInteger(out, s.last_key);
    AppendInteger(out, s.step);
  };
  const auto table = Table();
  if (a.size() == 1) {
    AppendArrayHeader(out, table.size());
    for (const Spec& s : table) entry(s);
    return;
  }
  const std::string sub = Lower(a[1]);
  if (sub == "count") return AppendInteger(out, static_cast<int64_t>(table.size()));
  if (sub == "docs") return AppendArrayHeader(out, 0);  // no documentation: clients do without
  if (sub == "list") {
    AppendArrayHeader(out, table.size());
    for (const Spec& s : table) AppendBulk(out, s.name);
    return;
  }
  if (sub == "info") {
    AppendArrayHeader(out, a.size() - 2);
    for (size_t i = 2; i < a.size(); i++) {
      const std::string name = Lower(a[i]);
      auto it = std::find_if(table.begin(), table.end(),
                             [&](const Spec& s) { return s.name == name; });
      if (it == table.end()) {
        AppendNull(out, session->proto);
      } else {
        entry(*it);
      }
    }
    return;
  }
  AppendError(out, "ERR unknown subcommand '" + Shown(a[1]) + "'. Try COMMAND HELP.");
}

void Executor::Config(Args a, Session* session, std::string* out) {
  const std::string sub = Lower(a[1]);
  if (sub == "get") {
    if (a.size() < 3) return AppendArity(out, "config|get");
    const std::pair<std::string, std::string> params[] = {
        {"appendfsync", "always"},  // every write is durable before its reply
        {"appendonly", "no"},
        {"bind", settings_.bind},
        {"databases", "1"},
        {"io-threads", std::to_string(settings_.threads)},
        {"maxclients", std::to_string(settings_.max_clients)},
        {"port", std::to_string(settings_.port)},
        {"proto-max-bulk-len", std::to_string(settings_.limits.max_bulk)},
        {"save", ""},
        {"timeout", std::to_string(settings_.idle_timeout_s)},
    };
    std::vector<const std::pair<std::string, std::string>*> hits;
    for (const auto& p : params) {
      for (size_t i = 2; i < a.size(); i++) {
        if (GlobMatch(Lower(a[i]), p.first)) {
          hits.push_back(&p);
          break;
        }
      }
    }
    AppendMapHeader(out, hits.size(), session->proto);
    for (const auto* p : hits) {
      AppendBulk(out, p->first);
      AppendBulk(out, p->second);
    }
    return;
  }
  if (sub == "resetstat") {
    index_.ResetCounters();
    return AppendSimple(out, "OK");
  }
  if (sub == "set" || sub == "rewrite") {
    return AppendError(out, "ERR CONFIG " + Lower(a[1]) +
                                " is not supported: pmhash serve is configured by its command "
                                "line");
  }
  AppendError(out, "ERR unknown subcommand '" + Shown(a[1]) + "'. Try CONFIG HELP.");
}

void Executor::Client(Args a, Session* s, std::string* out) {
  const std::string sub = Lower(a[1]);
  if (sub == "setname" && a.size() == 3) {
    for (char c : a[2]) {
      if (c <= ' ' || c > '~') {
        return AppendError(out, "ERR Client names cannot contain spaces, newlines or special "
                                "characters.");
      }
    }
    s->name = std::string(a[2]);
    return AppendSimple(out, "OK");
  }
  if (sub == "getname" && a.size() == 2) {
    return s->name.empty() ? AppendNull(out, s->proto) : AppendBulk(out, s->name);
  }
  if (sub == "id" && a.size() == 2) return AppendInteger(out, static_cast<int64_t>(s->id));
  if (sub == "setinfo" && a.size() == 4) return AppendSimple(out, "OK");
  if (sub == "info" && a.size() == 2) {
    return AppendBulk(out, "id=" + U64Text(s->id) + " name=" + s->name + " db=0\n");
  }
  AppendError(out, "ERR unknown subcommand or wrong number of arguments for '" + Shown(a[1]) +
                       "'. Try CLIENT HELP.");
}

void Executor::Hello(Args a, Session* s, std::string* out) {
  size_t i = 1;
  int proto = s->proto;
  if (a.size() > 1) {
    int64_t v = 0;
    if (!ParseInteger(a[1], &v)) {
      return AppendError(out, "ERR Protocol version is not an integer or out of range");
    }
    if (v != 2 && v != 3) return AppendError(out, "NOPROTO unsupported protocol version");
    proto = static_cast<int>(v);
    i = 2;
  }
  std::string name = s->name;
  for (; i < a.size(); i++) {
    if (IEquals(a[i], "setname") && i + 1 < a.size()) {
      name = std::string(a[++i]);
    } else if (IEquals(a[i], "auth")) {
      return AppendError(out, "ERR AUTH: pmhash serve has no users or passwords");
    } else {
      return AppendSyntax(out);
    }
  }
  // RESP3 differs from RESP2 here only in its null and map types (resp.h): every other reply
  // is written alike in both.
  s->proto = proto;
  s->name = name;
  AppendMapHeader(out, 7, proto);
  AppendBulk(out, "server");
  AppendBulk(out, "pmhash");
  AppendBulk(out, "version");
  AppendBulk(out, kVersion);
  AppendBulk(out, "proto");
  AppendInteger(out, proto);
  AppendBulk(out, "id");
  AppendInteger(out, static_cast<int64_t>(s->id));
  AppendBulk(out, "mode");
  AppendBulk(out, "standalone");
  AppendBulk(out, "role");
  AppendBulk(out, "master");
  AppendBulk(out, "modules");
  AppendArrayHeader(out, 0);
}

void Executor::Select(Args a, Session*, std::string* out) {
  int64_t db = 0;
  if (!ParseInteger(a[1], &db)) return AppendNotInteger(out);
  if (db != 0) return AppendError(out, "ERR DB index is out of range");
  AppendSimple(out, "OK");
}

void Executor::Quit(Args, Session* s, std::string* out) {
  s->close_after_reply = true;
  AppendSimple(out, "OK");
}

void Executor::Shutdown(Args a, Session* s, std::string* out) {
  for (size_t i = 1; i < a.size(); i++) {
    if (IEquals(a[i], "abort")) return AppendError(out, "ERR No shutdown in progress.");
    if (!IEquals(a[i], "nosave") && !IEquals(a[i], "save") && !IEquals(a[i], "now") &&
        !IEquals(a[i], "force")) {
      return AppendSyntax(out);
    }
  }
  // As Redis: no reply; the connection closes and the server closes the pool cleanly.
  s->close_after_reply = true;
  if (on_shutdown_) on_shutdown_();
}

void Executor::Auth(Args, Session*, std::string* out) {
  AppendError(out, "ERR AUTH <password> called without any password configured for the default "
                   "user. Are you sure your configuration is correct?");
}

}  // namespace pmhash::serve
