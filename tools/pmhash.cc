// tools/pmhash.cc — the pmhash command-line tool.
//
//   pmhash bench [options]            benchmark indexes against absl::flat_hash_map
//   pmhash info POOL                  print a pool's header (read-only, no open, no lock)
//   pmhash check POOL [--index K]     open, recover if needed, CheckInvariants, print Stats
//   pmhash put POOL KEY VALUE         upsert one pair (creates the pool if missing); on a
//                                     multi-value pool (pea-multi): add VALUE to KEY's values
//   pmhash get POOL KEY               print the value of KEY (multi-value: every value, one a line)
//   pmhash del POOL KEY [VALUE]       erase KEY (multi-value: every value, or the pair KEY VALUE)
//   pmhash serve --pool PATH [opts]   serve a pool over the Redis protocol (tools/serve/)
//   pmhash list                       registered index kinds
//
// Exit status: 0 success; 1 the operation failed (error Status, key not found, check failed,
// benchmark row failed); 2 usage error. The library never prints; everything printed is here.
#include "pmhash/pmhash.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pm/pool_format.h"
#include "tools/args.h"
#include "tools/bench_command.h"
#include "tools/exit_status.h"
#include "tools/pool_inspect.h"
#include "tools/serve_command.h"

namespace pmhash::cli {
namespace {

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%#" PRIx64, v);
  return buf;
}

// "uint64, bytes (variable-size keys)" (pmhash check and list).
std::string ApiNames(const Capabilities& caps) {
  return std::string("uint64") + (caps.bytes ? ", bytes (variable-size keys)" : "") +
         (caps.multi ? ", multi-value" : "");
}

std::string HumanBytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  char buf[48];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// ---- help ------------------------------------------------------------------------------------

constexpr FlagSpec kHelpFlag{"help", "", "show this help"};

constexpr FlagSpec kBenchFlags[] = {
    {"index", "NAME[,NAME|all]",
     "indexes to run (default: all registered; 'list': which run through\n"
     "the template fast path, which through the pmhash::Open facade)"},
    {"durability", "MODE[,MODE|all]", "adr | eadr | dram | all (default: adr)"},
    {"keys", "N", "number of keys (default 10M; suffixes k, M, G = 10^3, 10^6, 10^9)"},
    {"threads", "T[,T2,...]", "thread counts, one table each (default 1)"},
    {"seed", "S", "key generation seed (default 1)"},
    {"pool", "PATH",
     "pool file (must not exist or be empty; default: a temporary file\n"
     "under /dev/shm, else $TMPDIR, else /tmp)"},
    {"keep-pool", "",
     "keep the pool file(s), closed cleanly and empty after the erase phase\n"
     "(several rows: PATH.INDEX-MODE-tT)"},
    {"pool-size", "BYTES", "pool size (default: from the key count; K, M, G, T = 2^10...)"},
    {"pin", "", "pin thread i to the i-th allowed CPU"},
    {"huge-pages", "",
     "2 MiB pages for every table: pools and absl's array advised MADV_HUGEPAGE\n"
     "(a pool file also needs a tmpfs mounted with -o huge=always or huge=advise);\n"
     "each row reports how much of its table got them"},
    {"json", "FILE", "also write the results as JSON"},
    {"csv", "FILE", "also write the results as CSV (one line per row and phase)"},
    {"no-reference", "", "skip the absl::flat_hash_map reference row"},
    {"count-keys", "N", "keys of the persistence-counting pass (default: --keys; 0: skip it)"},
    {"media-block", "BYTES",
     "media block of the counting pass's write model (default 256: Optane;\n"
     "64: CXL-attached memory)"},
    {"media-cache", "BYTES",
     "eADR rows' counting pass: last-level cache in which persisted lines\n"
     "stay until evicted to the media (default 16M; 0: every persist is a\n"
     "media write at once)"},
    {"elimda-logs", "N[,N...]",
     "ElimDA's collecting logs in the pools it creates (powers of 2; default\n"
     "8192 = 2 MiB of 256 B logs under eADR and DRAM, 4 under ADR); a list runs\n"
     "once per value"},
    {"elimda-batch", "N",
     "ElimDA unlinks emptied log blocks once they are 1/N of its sealed ones,\n"
     "a run of consecutive ones per store (default 4 under ADR, 0 under eADR\n"
     "and DRAM; 0: at every log swap)"},
    {"elimda-writer-logs", "0|1",
     "ElimDA appends to the writer thread's log (1, default under ADR: the\n"
     "paper's sequential backup log) or to the key hash's log (0, default\n"
     "under eADR and DRAM)"},
    {"smartht-keys-per-head", "X",
     "SmartHT grows its head array while it holds more than X keys per head\n"
     "bucket (default 3; larger: longer chains, fewer buckets, a higher load\n"
     "factor; the paper's 200M keys in 2^24 heads are 11.9)"},
    {"background-threads", "N",
     "worker threads of the indexes' background work (SmartHT's head growth\n"
     "and filter rebuild; default 1; 0: manual mode, deterministic: writers\n"
     "split heads themselves, but SmartHT's filter is not rebuilt until Close,\n"
     "so past its first capacity its negative searches read PM)"},
    {"check", "", "run CheckInvariants after the insert phase (untimed)"},
    {"no-probe", "", "skip the persist-limit probe (store + flush + fence on random lines)"},
    {"repeat", "R",
     "R interleaved rounds (reference, rows, reference, rows in reverse...)\n"
     "on fresh tables; report medians, ratios as medians of per-round\n"
     "ratios, and their spread (default 1; use 4+ on shared, noisy machines:\n"
     "an even R gives every row each place in a round equally often)"},
    {"key-bytes", "N",
     "variable-size items: N-byte keys (8..65536) expanded from the generated\n"
     "keys, through the bytes API of the kinds that offer it (others are\n"
     "skipped); reference absl::flat_hash_map<string,string> (TURBO30: 15)"},
    {"value-bytes", "M", "variable-size items: M-byte values (8..65536; default 8 with --key-bytes)"},
    {"experiment", "NAME",
     "a preset named after a paper's figure (see --experiment list);\n"
     "options given with it override the preset (e.g. --keys scales it)"},
    {"paper-size", "",
     "with --experiment: the paper's key count (e.g. 200M for pea-fig4; needs\n"
     "the memory for it)"},
    {"phases", "P[,P...]",
     "phases in order: insert, find+, find-, update, rmw, erase, ycsb-a|b|c|d|f,\n"
     "mix (default insert,find+,find-,erase; the first must be insert);\n"
     "find+@B / find-@B: finds B keys per FindBatch call; insert@B, update@B,\n"
     "erase@B: B ops per WriteBatch call (B in 1..1024)"},
    {"workload", "W[,W...]",
     "shorthand for --phases insert,W,...: ycsb-a, ycsb-b, ycsb-c,\n"
     "ycsb-d, ycsb-f (ycsb-e needs scans: unsupported), mix"},
    {"mix", "OP=W,...",
     "the 'mix' phase by ratio, e.g. find+=90,insert=5,erase=5\n"
     "(ops: insert, find+, find-, update, erase, rmw)"},
    {"dist", "D",
     "keys of find+/update/rmw and mixes: uniform (default), zipf[:THETA]\n"
     "(0..0.99, default 0.99), selfsimilar[:H] (0.2 = 80/20), latest"},
    {"ops", "N", "operations of each mixed phase (default: --keys)"},
    {"warmup", "N",
     "N untimed, unreported find+ after the load (insert) phase, before the\n"
     "measured phases (default 0)"},
    {"latency", "MODE", "off | all | sampled (1 op in 32, default) | N (1 op in N)"},
    {"growth", "", "also run the growth (sawtooth) experiment"},
    {"growth-steps", "S", "steps of the growth experiment (default 50)"},
    {"sample-ops", "K", "timed operations of each kind per growth step (default 1000)"},
    {"recovery", "N[,N...]", "also run the recovery experiment with these key counts"},
    {"dataset", "D[,D...]",
     "also run the duplicate-key experiment (kinds with the multi-value API,\n"
     "e.g. pea-multi) on these datasets: zipf:S (0 <= S < 1), wiki-talk,\n"
     "cit-patents (generated), or a SNAP edge-list FILE (\"src dst\" lines)"},
    {"no-table", "", "skip the throughput tables (experiments only)"},
    {"quiet", "", "no progress on stderr"},
    kHelpFlag,
};

constexpr FlagSpec kCheckFlags[] = {
    {"index", "NAME", "expected index kind (default: the kind recorded in the pool)"},
    {"durability", "MODE", "adr | eadr | dram (default: the one the pool was created with)"},
    kHelpFlag,
};

constexpr FlagSpec kKvFlags[] = {
    {"index", "NAME", "index kind of a new pool (put; default reh) or the expected kind"},
    {"durability", "MODE", "adr | eadr | dram (default: the pool's; adr for a new pool)"},
    {"pool-size", "BYTES", "size of a pool created by put (default 64M)"},
    {"bytes", "", "KEY and VALUE are byte strings (kinds with variable-size keys, e.g. turbo-kv; "
                  "without it, such kinds take a KEY or VALUE that is not a decimal number as "
                  "bytes)"},
    kHelpFlag,
};

constexpr FlagSpec kPlainFlags[] = {kHelpFlag};

struct Command {
  std::string_view name;
  std::string_view usage;
  std::string_view summary;
  std::string_view details;
  std::span<const FlagSpec> flags;
};

constexpr std::string_view kBenchDetails =
    "Runs the phases insert (table starting small), find+ (present keys, shuffled order),\n"
    "find- (absent keys) and erase over N distinct uniform random 64-bit keys, for every\n"
    "index x durability, with T threads; wall time of each whole phase, in Mops/s. The same\n"
    "phases on absl::flat_hash_map (one thread, no reserve) form the reference row, and every\n"
    "figure is also shown as ratio = index / reference. Load factor and structure are taken\n"
    "after insert. Persistence counters (persists, fences, flushed lines, media writes per\n"
    "insert and per erase) come from a separate counting pass on a fresh pool with counters\n"
    "on, so that the timed phases run with counters off. The persist limit is the rate of\n"
    "store + flush + fence on random 64 B lines of a pool file: the ceiling of any insert or\n"
    "erase that needs one persist; adr/eadr rows are also shown as a fraction of it.\n"
    "A multi-value kind (pea-multi) runs the phases with one value per key; the phases that\n"
    "update (update, rmw, ycsb-a, ycsb-b, ycsb-f, a mix with update or rmw) are not applicable\n"
    "to it (a multimap has no Update): its rows show them as '-', and a note says so.\n";

constexpr std::string_view kInfoDetails =
    "Reads the 4096-byte header with pread; opens nothing, locks nothing, changes nothing.\n"
    "Works on a pool in use (its mutable fields are shown as read). Exit 1 if the file is not\n"
    "a pmhash pool or its header checksum does not match.\n";

constexpr std::string_view kCheckDetails =
    "Opens the pool (recovering it if it was not shut down cleanly), prints its statistics and\n"
    "runs the index's deep structural check. Exit 0 if the check passes (the pool is then\n"
    "closed cleanly), 1 otherwise (the pool is left as it was found, apart from the recovery).\n";

constexpr std::string_view kKvDetails =
    "put upserts (inserts or overwrites) and creates the pool if it does not exist (or formats\n"
    "an empty file, or a file or devdax device whose first 8 bytes are zero); get prints\n"
    "the value; del erases. KEY and VALUE are unsigned 64-bit integers, decimal or 0x-prefixed\n"
    "hex; on kinds with variable-size keys (turbo-kv) they are byte strings with --bytes, or\n"
    "when one of them is not a number. get and del exit 1 if the key is absent.\n"
    "\n"
    "Multi-value pools (kinds with several values per key: pea-multi): put adds VALUE to KEY's\n"
    "values (an exact duplicate pair is kept, as a second value); get prints every value of KEY,\n"
    "one per line, in increasing order; del KEY erases every value of KEY, del KEY VALUE one\n"
    "pair (KEY, VALUE). get and del exit 1 if there is no such key or pair. VALUE with del is\n"
    "refused (exit 2) on other pools.\n";

const Command kCommands[] = {
    {"bench", "pmhash bench [options]", "benchmark indexes against absl::flat_hash_map",
     kBenchDetails, kBenchFlags},
    {"info", "pmhash info POOL", "print a pool's header without opening it", kInfoDetails,
     kPlainFlags},
    {"check", "pmhash check POOL [--index NAME] [--durability MODE]",
     "open a pool, check its invariants, print its statistics", kCheckDetails, kCheckFlags},
    {"put", "pmhash put POOL KEY VALUE [options]",
     "store a key/value pair (multi-value pools: add a value)", kKvDetails, kKvFlags},
    {"get", "pmhash get POOL KEY [options]",
     "print the value of a key (multi-value pools: all of them)", kKvDetails, kKvFlags},
    {"del", "pmhash del POOL KEY [VALUE] [options]",
     "erase a key (multi-value pools: or one pair)", kKvDetails, kKvFlags},
    {"serve", "pmhash serve --pool PATH [options]",
     "serve a pool to Redis clients (RESP2 over TCP)", kServeDetails, ServeFlags()},
    {"list", "pmhash list", "list the registered index kinds", "", kPlainFlags},
};

const Command* FindCommand(std::string_view name) {
  for (const auto& c : kCommands) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

void PrintMainHelp(std::ostream& os) {
  os << "pmhash — persistent-memory hash indexes\n\n"
        "usage: pmhash COMMAND [ARGS...]\n\ncommands:\n";
  for (const auto& c : kCommands) {
    std::string n(c.name);
    n.resize(8, ' ');
    os << "  " << n << c.summary << "\n";
  }
  os << "\n'pmhash help COMMAND' or 'pmhash COMMAND --help' shows a command's options.\n"
        "Exit status: 0 success, 1 failure, 2 usage error.\n";
}

void PrintCommandHelp(std::ostream& os, const Command& c) {
  os << "usage: " << c.usage << "\n\n" << c.summary << ".\n";
  if (!c.details.empty()) os << "\n" << c.details;
  os << "\noptions:\n" << FlagsHelp(c.flags);
}

// Parses the words after the command name. Returns -1 to continue, else an exit code
// (help printed, or a usage error).
int ParseCommandArgs(const Command& cmd, std::span<char* const> words, ParsedArgs* args) {
  const std::string prog = "pmhash " + std::string(cmd.name);
  if (Status s = ParseArgs(words, cmd.flags, prog, args); !s.ok()) return Usage(s);
  if (args->Has("help")) {
    PrintCommandHelp(std::cout, cmd);
    return kExitOk;
  }
  return -1;
}

Status CheckPositionals(const ParsedArgs& args, size_t n, const Command& cmd) {
  if (args.positional.size() != n) {
    return Status::InvalidArgument("expected " + std::to_string(n) + " argument" +
                                   (n == 1 ? "" : "s") + ": usage: " + std::string(cmd.usage));
  }
  return Status::OK();
}

// ---- bench -----------------------------------------------------------------------------------

// The benchmark itself is in bench_command.cc, the only file of the tool that uses bench/.
int RunBenchCommand(const Command& cmd, std::span<char* const> words) {
  ParsedArgs args;
  if (int rc = ParseCommandArgs(cmd, words, &args); rc >= 0) return rc;
  return BenchMain(args);
}

// ---- info ------------------------------------------------------------------------------------

std::string TimeOf(uint64_t ns) {
  const std::time_t t = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm;
  if (!gmtime_r(&t, &tm)) return "?";
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int RunInfo(const Command& cmd, std::span<char* const> words) {
  ParsedArgs args;
  if (int rc = ParseCommandArgs(cmd, words, &args); rc >= 0) return rc;
  if (Status s = CheckPositionals(args, 1, cmd); !s.ok()) return Usage(s);
  auto r = ReadPoolHeader(args.positional[0]);
  if (!r.ok()) return Fail(r.status());
  const PoolHeaderView& h = r.value();
  auto line = [](std::string_view k, const std::string& v) {
    std::string key(k);
    key += ':';
    key.resize(20, ' ');
    std::cout << key << v << "\n";
  };
  using MS = PoolHeaderView::MagicState;
  line("pool", h.path);
  line("file", h.char_device
                   ? std::string("character device (devdax)")
                   : std::to_string(h.file_size) + " B (" + HumanBytes(h.file_size) + ")");
  line("storage", h.storage);
  line("magic",
       h.magic == MS::kFinal ? "PMHASH01 (pool complete)" : "PMHASHc1 (creation did not complete)");
  line("format version",
       std::to_string(h.format_version) +
           (h.format_version == pm::kFormatVersion ? "" : " (not supported by this build)"));
  line("header bytes", std::to_string(h.header_bytes));
  line("checksum",
       Hex(h.checksum) +
           (h.checksum_ok() ? " (ok)" : " (MISMATCH, computed " + Hex(h.computed_checksum) + ")"));
  line("features",
       "compat " + Hex(h.compat_features) + ", incompat " + Hex(h.incompat_features) +
           ((h.incompat_features & ~pm::kKnownIncompatFeatures) ? " (unknown bits!)" : ""));
  line("pool size",
       std::to_string(h.pool_size) + " B (" + HumanBytes(h.pool_size) + ")" +
           (!h.char_device && h.pool_size > h.file_size ? " (file is TRUNCATED)" : ""));
  line("chunks", std::to_string(h.chunk_count) + " x " + std::to_string(h.chunk_size) +
                     " B, heap at offset " + std::to_string(h.heap_offset));
  line("index kind", h.kind.empty() ? "(none)" : h.kind);
  const char* mode = h.hash_mode == 0 ? "strong" : h.hash_mode == 1 ? "collide (tests)" : "unknown";
  line("hash", std::string(mode) + ", seed " + Hex(h.hash_seed));
  const std::string dur =
      h.created_durability <= 3
          ? std::string(DurabilityName(static_cast<Durability>(h.created_durability)))
          : "unknown (" + std::to_string(h.created_durability) + ")";
  line("created", TimeOf(h.create_time_ns) + " with durability " + dur);
  line("params", std::to_string(h.params_bytes) + " B: " + DescribeParams(h));
  line("clean shutdown", h.clean_shutdown == 1 ? "yes"
                         : h.clean_shutdown == 0
                             ? "no (open now, or not closed cleanly)"
                             : "invalid value " + std::to_string(h.clean_shutdown));
  line("open count", std::to_string(h.open_count));
  line("saved state", h.saved_state == 0 ? "none (the next open walks the pool)"
                                         : "image at offset " + std::to_string(h.saved_state) +
                                               (h.clean_shutdown == 1 ? " (loaded by the next open)"
                                                                      : " (ignored: not clean)"));
  std::string roots;
  for (int i = 0; i < pm::kMaxRoots; i++) {
    if (h.roots[i])
      roots += (roots.empty() ? "" : ", ") + std::string("[") + std::to_string(i) + "] " +
               std::to_string(h.roots[i]);
  }
  line("roots", roots.empty() ? "(none)" : roots);
  if (!h.checksum_ok() && h.magic == MS::kFinal) {
    return Fail(Status::Corruption("pool header checksum mismatch: " + h.path));
  }
  return kExitOk;
}

// ---- check, put, get, del ---------------------------------------------------------------------

int RunCheck(const Command& cmd, std::span<char* const> words) {
  ParsedArgs args;
  if (int rc = ParseCommandArgs(cmd, words, &args); rc >= 0) return rc;
  if (Status s = CheckPositionals(args, 1, cmd); !s.ok()) return Usage(s);
  std::optional<Durability> durability;
  if (Status s = ParseDurabilityFlag(args, &durability); !s.ok()) return Usage(s);
  Options o;
  o.path = args.positional[0];
  o.durability = durability;
  auto opened = OpenPool(o, args.Value("index"), /*may_create=*/false, "reh");
  if (!opened.ok()) return Fail(opened.status());
  Index& idx = *opened.value();
  const IndexStats s = idx.Stats();
  auto line = [](std::string_view k, const std::string& v) {
    std::string key(k);
    key += ':';
    key.resize(16, ' ');
    std::cout << key << v << "\n";
  };
  char buf[64];
  line("pool", args.positional[0]);
  line("index",
       std::string(idx.kind()) + " (" + std::string(DurabilityName(idx.durability())) + ")");
  std::snprintf(buf, sizeof(buf), "%.3f s", s.recovery_seconds);
  line("opened",
       std::string(s.recovered ? "after a crash (no clean-shutdown mark), recovered" : "clean") +
           (s.state_loaded ? ", DRAM state loaded from the image Close saved in " : ", rebuild ") +
           buf);
  line("size", std::to_string(s.size) + (idx.capabilities().multi ? " pairs" : " keys"));
  line("APIs", ApiNames(idx.capabilities()));
  std::snprintf(buf, sizeof(buf), "%.4f", s.load_factor);
  line("load factor", std::string(buf) + " (" + std::to_string(s.capacity_slots) + " slots)");
  line("buckets", std::to_string(s.buckets) + ", global depth " + std::to_string(s.global_depth));
  line("PM", HumanBytes(s.pm_bytes) + " of a " + HumanBytes(s.pool_bytes) + " pool");
  line("mapping", s.mapping.empty() ? "(not reported)" : s.mapping);
  line("DRAM", HumanBytes(s.dram_bytes));
  const Status inv = idx.CheckInvariants();
  line("invariants", inv.ok() ? "OK" : "FAILED: " + inv.ToString());
  if (!inv.ok()) {
    // Leave the pool without the clean-shutdown mark: it is not known to be sane.
    return kExitFailed;
  }
  if (Status c = idx.Close(); !c.ok()) return Fail(c);
  return kExitOk;
}

int RunKv(const Command& cmd, std::span<char* const> words) {
  ParsedArgs args;
  if (int rc = ParseCommandArgs(cmd, words, &args); rc >= 0) return rc;
  const bool put = cmd.name == "put";
  const bool get = cmd.name == "get";
  // del POOL KEY VALUE: one pair of a multi-value pool.
  const bool del_pair = cmd.name == "del" && args.positional.size() == 3;
  if (!del_pair) {
    if (Status s = CheckPositionals(args, put ? 3 : 2, cmd); !s.ok()) return Usage(s);
  }
  uint64_t key = 0, value = 0, pool_size = uint64_t{64} << 20;
  // uint64 unless --bytes, or unless KEY or VALUE is not a decimal number (then byte strings,
  // on kinds that offer them).
  Status numeric = ParseU64(args.positional[1], "KEY", &key);
  if (numeric.ok() && (put || del_pair)) numeric = ParseU64(args.positional[2], "VALUE", &value);
  const bool bytes = args.Has("bytes") || !numeric.ok();
  if (auto v = args.Value("pool-size")) {
    if (!put) return Usage(Status::InvalidArgument("--pool-size applies to put only"));
    if (Status s = ParseSize(*v, "--pool-size", &pool_size); !s.ok()) return Usage(s);
  }
  std::optional<Durability> durability;
  if (Status s = ParseDurabilityFlag(args, &durability); !s.ok()) return Usage(s);
  Options o;
  o.path = args.positional[0];
  o.durability = durability;
  o.pool_size = pool_size;
  auto opened = OpenPool(o, args.Value("index"), /*may_create=*/put, "reh");
  if (!opened.ok()) return Fail(opened.status());
  Index& idx = *opened.value();
  BytesApi* kv = bytes ? idx.bytes() : nullptr;
  if (bytes && kv == nullptr) {
    (void)idx.Close();
    const std::string others = KindsWith(&Capabilities::bytes);
    const std::string why = "kind '" + std::string(idx.kind()) + "' has no variable-size keys" +
                            (others.empty() ? std::string() : "; these have: " + others);
    if (!numeric.ok()) return Usage(Status::InvalidArgument(std::string(numeric.message()) + ", and " + why));
    return Usage(Status::InvalidArgument("--bytes: " + why));
  }
  // Several values per key (Capabilities::multi): put adds one, get prints all, del erases all
  // or one pair.
  MultiApi* multi = kv ? nullptr : idx.multi();
  if (del_pair && multi == nullptr) {
    (void)idx.Close();
    const std::string others = KindsWith(&Capabilities::multi);
    return Usage(Status::InvalidArgument(
        "del KEY VALUE: kind '" + std::string(idx.kind()) + "' has one value per key" +
        (others.empty() ? std::string() : "; these have several: " + others) +
        " (usage: " + std::string(cmd.usage) + ")"));
  }
  Status op;
  const std::string_view kb = args.positional[1];
  if (put) {
    op = kv ? kv->Upsert(kb, args.positional[2])
            : multi ? multi->Insert(key, value) : idx.Upsert(key, value);
  } else if (get && multi) {
    std::vector<Value> values;
    op = multi->FindAll(key, &values);
    std::sort(values.begin(), values.end());
    for (Value v : values) std::cout << v << "\n";
  } else if (get) {
    std::string vb;
    op = kv ? kv->Find(kb, &vb) : idx.Find(key, &value);
    if (op.ok()) std::cout << (kv ? vb : std::to_string(value)) << "\n";
  } else if (multi) {
    op = del_pair ? multi->Erase(key, value) : multi->EraseAll(key);
  } else {
    op = kv ? kv->Erase(kb) : idx.Erase(key);
  }
  const Status closed = idx.Close();
  if (op.IsNotFound()) {
    if (del_pair) {
      std::cerr << "pmhash: pair (" << args.positional[1] << ", " << args.positional[2]
                << ") not found\n";
    } else {
      std::cerr << "pmhash: key " << args.positional[1] << " not found\n";
    }
    return kExitFailed;
  }
  if (!op.ok()) return Fail(op);
  if (!closed.ok()) return Fail(closed);
  return kExitOk;
}

// ---- list ------------------------------------------------------------------------------------

int RunList(const Command& cmd, std::span<char* const> words) {
  ParsedArgs args;
  if (int rc = ParseCommandArgs(cmd, words, &args); rc >= 0) return rc;
  if (Status s = CheckPositionals(args, 0, cmd); !s.ok()) return Usage(s);
  // From the library only (the benchmark's dispatch per index: `pmhash bench --index list`).
  for (const auto& info : RegisteredIndexes()) {
    std::cout << info.name << "\n"
              << "  paper:  " << info.paper << "\n"
              << "  design: " << info.description << "\n"
              << "  APIs:   " << ApiNames(KindCapabilities(info.name).value()) << "\n";
  }
  return kExitOk;
}

int Main(int argc, char** argv) {
  std::span<char* const> all(argv, static_cast<size_t>(argc));
  if (all.size() < 2) {
    PrintMainHelp(std::cerr);
    return kExitUsage;
  }
  const std::string_view first = all[1];
  if (first == "--help" || first == "-h" || first == "help") {
    if (first == "help" && all.size() >= 3) {
      const Command* c = FindCommand(all[2]);
      if (!c)
        return Usage(Status::InvalidArgument("unknown command '" + std::string(all[2]) + "'"));
      PrintCommandHelp(std::cout, *c);
      return kExitOk;
    }
    PrintMainHelp(std::cout);
    return kExitOk;
  }
  const Command* cmd = FindCommand(first);
  if (!cmd) {
    return Usage(Status::InvalidArgument("unknown command '" + std::string(first) +
                                         "' (see 'pmhash --help')"));
  }
  const auto words = all.subspan(2);
  if (cmd->name == "bench") return RunBenchCommand(*cmd, words);
  if (cmd->name == "info") return RunInfo(*cmd, words);
  if (cmd->name == "check") return RunCheck(*cmd, words);
  if (cmd->name == "list") return RunList(*cmd, words);
  if (cmd->name == "serve") {
    ParsedArgs args;
    if (int rc = ParseCommandArgs(*cmd, words, &args); rc >= 0) return rc;
    return ServeMain(args);
  }
  return RunKv(*cmd, words);
}

}  // namespace
}  // namespace pmhash::cli

int main(int argc, char** argv) { return pmhash::cli::Main(argc, argv); }
