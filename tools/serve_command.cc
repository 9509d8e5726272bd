// tools/serve_command.cc — `pmhash serve`: opens (or creates) a pool and serves it over RESP2
// (tools/serve/server.h) until SIGTERM, SIGINT or SHUTDOWN; then closes the pool cleanly.
#include "tools/serve_command.h"

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <thread>

#include "tools/exit_status.h"
#include "tools/pool_inspect.h"
#include "tools/serve/server.h"

namespace pmhash::cli {
namespace {

constexpr FlagSpec kFlags[] = {
    {"pool", "PATH", "the pool file (created if missing; required)"},
    {"index", "NAME", "index kind of a new pool (default reh-kv), or the kind expected"},
    {"durability", "MODE", "adr | eadr | dram (default: the pool's; adr for a new pool)"},
    {"pool-size", "BYTES", "size of a new pool (default 1G)"},
    {"bind", "ADDR", "IPv4 address to listen on (default 127.0.0.1)"},
    {"port", "N", "TCP port (default 6379; 0: any free port, printed at start)"},
    {"threads", "N", "event-loop threads (default: the CPUs, at most 8)"},
    {"max-clients", "N", "connections served at once (default 10000)"},
    {"timeout", "SECONDS", "close a client idle this long (default 0: never)"},
    {"max-bulk", "BYTES", "largest argument of a command (default 8M)"},
    {"counters", "", "count persists, fences and flushed lines (INFO persistence)"},
    {"huge-pages", "",
     "advise the pool's mapping MADV_HUGEPAGE: 2 MiB pages, fewer TLB misses (on a\n"
     "tmpfs mounted with huge=advise or huge=always; DAX mappings have them anyway)"},
    {"help", "", "show this help"},
};

// The number of option --NAME, if given, within [lo, hi].
Status ParseBounded(const ParsedArgs& args, std::string_view name, uint64_t lo, uint64_t hi,
                    uint64_t* v) {
  auto s = args.Value(name);
  if (!s) return Status::OK();
  if (Status st = ParseCount(*s, "--" + std::string(name), v); !st.ok()) return st;
  if (*v < lo || *v > hi) {
    return Status::InvalidArgument("--" + std::string(name) + " must be in [" +
                                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return Status::OK();
}

}  // namespace

std::span<const FlagSpec> ServeFlags() { return kFlags; }

const char kServeDetails[] =
    "Speaks the Redis protocol (RESP2; RESP3 after HELLO 3): redis-cli, redis-benchmark and\n"
    "Redis client libraries work unchanged. Commands: PING ECHO GET SET (NX XX GET) SETNX DEL\n"
    "UNLINK EXISTS TYPE MGET MSET MSETNX INCR INCRBY DECR DECRBY DBSIZE SCAN KEYS INFO COMMAND\n"
    "CONFIG GET CLIENT HELLO SELECT 0 QUIT SHUTDOWN FLUSHALL FLUSHDB, and on multi-value pools\n"
    "(pea-multi) SADD SREM SMEMBERS SCARD SISMEMBER. Kinds with variable-size keys (reh-kv,\n"
    "pea-kv, turbo-kv, smartht-kv, elimda-kv) take byte-string keys and values; the others\n"
    "decimal uint64 ones. A write is replied to only once it is durable: an acknowledged SET\n"
    "survives a crash. SIGTERM, SIGINT and SHUTDOWN close the pool cleanly. Prints 'listening\n"
    "on ADDR:PORT'.\n";

int ServeMain(const ParsedArgs& args) {
  if (!args.positional.empty()) {
    return Usage(
        Status::InvalidArgument("pmhash serve takes no positional argument (--pool PATH)"));
  }
  auto pool = args.Value("pool");
  if (!pool) return Usage(Status::InvalidArgument("pmhash serve needs --pool PATH"));
  serve::ServeSettings settings;
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  uint64_t port = 6379, threads = std::min(cpus, 8u), max_clients = settings.max_clients,
           timeout = 0, max_bulk = settings.limits.max_bulk, pool_size = uint64_t{1} << 30;
  for (Status s : {ParseBounded(args, "port", 0, 65535, &port),
                   ParseBounded(args, "threads", 1, 256, &threads),
                   ParseBounded(args, "max-clients", 1, 1000000, &max_clients),
                   ParseBounded(args, "timeout", 0, 86400 * 365, &timeout)}) {
    if (!s.ok()) return Usage(s);
  }
  if (auto v = args.Value("max-bulk")) {
    if (Status s = ParseSize(*v, "--max-bulk", &max_bulk); !s.ok()) return Usage(s);
    if (max_bulk < 1024) return Usage(Status::InvalidArgument("--max-bulk must be >= 1K"));
  }
  if (auto v = args.Value("pool-size")) {
    if (Status s = ParseSize(*v, "--pool-size", &pool_size); !s.ok()) return Usage(s);
  }
  Options o;
  o.path = *pool;
  o.pool_size = pool_size;
  o.counters = args.Has("counters");
  o.huge_pages = args.Has("huge-pages");
  if (Status s = ParseDurabilityFlag(args, &o.durability); !s.ok()) return Usage(s);
  settings.bind = args.Value("bind").value_or("127.0.0.1");
  settings.port = static_cast<uint16_t>(port);
  settings.threads = static_cast<int>(threads);
  settings.max_clients = static_cast<uint32_t>(max_clients);
  settings.idle_timeout_s = static_cast<uint32_t>(timeout);
  settings.limits.max_bulk = max_bulk;
  settings.limits.max_query_buffer = std::max(settings.limits.max_query_buffer, 2 * max_bulk);

  // Descriptors for the clients (the soft limit is often 1024).
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  // SIGTERM and SIGINT are taken by a signalfd on this thread: block them before any thread
  // starts, so that every thread inherits the mask.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);
  const int sigfd = signalfd(-1, &mask, SFD_CLOEXEC);
  if (sigfd < 0) return Fail(Status::IOError("signalfd failed"));

  auto opened = OpenPool(o, args.Value("index"), /*may_create=*/true, "reh-kv");
  if (!opened.ok()) return Fail(opened.status());
  std::unique_ptr<Index> index = std::move(opened).value();
  auto started = serve::Server::Start(*index, settings);
  if (!started.ok()) {
    (void)index->Close();
    return Fail(started.status());
  }
  std::unique_ptr<serve::Server> server = std::move(started).value();
  const IndexStats st = index->Stats();
  std::cout << "pmhash serve: " << index->kind() << " pool " << o.path << " ("
            << DurabilityName(index->durability()) << ", " << server->executor().key_space()
            << " keys, " << st.size << (index->capabilities().multi ? " pairs" : " keys")
            << (st.recovered ? ", recovered after a crash" : "") << "), " << settings.threads
            << " thread" << (settings.threads == 1 ? "" : "s") << "\n"
            << "listening on " << settings.bind << ":" << server->port() << std::endl;

  pollfd fds[2] = {{sigfd, POLLIN, 0}, {server->shutdown_fd(), POLLIN, 0}};
  while (poll(fds, 2, -1) < 0 && errno == EINTR) {
  }
  std::string why = "SHUTDOWN";
  if (fds[0].revents & POLLIN) {
    signalfd_siginfo si{};
    if (read(sigfd, &si, sizeof(si)) == sizeof(si)) why = strsignal(static_cast<int>(si.ssi_signo));
  }
  server->Stop();
  server.reset();
  close(sigfd);
  const Status closed = index->Close();
  if (!closed.ok()) return Fail(closed);
  std::cout << "pmhash serve: " << why << ": closed the pool cleanly" << std::endl;
  return kExitOk;
}

}  // namespace pmhash::cli
