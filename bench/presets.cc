#include "bench/presets.h"

#include <algorithm>
#include <array>
#include <thread>

#include "pmhash/index.h"

namespace pmhash::bench {

namespace {

constexpr std::array kPresets = {
    Preset{"default", "-",
           "every registered index + absl: insert, find+, find-, erase; 10M keys, adr, 1 thread",
           ""},
    Preset{"pea-fig4", "Pea Hash Fig. 4 (a)-(f)",
           "growth: load factor (sawtooth), average utility and per-op latency while inserting; "
           "1 thread, 4M keys, 80 steps",
           "", 200'000'000},
    Preset{"pea-fig7", "Pea Hash Fig. 7",
           "the growth experiment on Pea Hash (strategy comparison); needs index 'pea'", "pea",
           200'000'000},
    Preset{"pea-table3", "Pea Hash Table 3",
           "resize events (count, min/median/p90/p99/max, total) during single-thread inserts; "
           "4M keys",
           "", 200'000'000},
    Preset{"pea-table4", "Pea Hash Table 4",
           "recovery time after SIGKILL and after a clean shutdown; 1/3, 2/3 and 1M keys, adr", "",
           300'000'000},
    Preset{"pea-fig8", "Pea Hash Fig. 8",
           "duplicate keys: insert, skew search, unique search, erase of Zipfian pairs (skew 0, "
           "0.2, 0.4, 0.6, 0.8), adaptive buckets vs the (key, pointer to buffer) baseline; 2M "
           "pairs; needs index 'pea-multi'",
           "pea-multi", 190'000'000},
    Preset{"pea-fig9", "Pea Hash Fig. 9",
           "average utility and PM bytes of the Fig. 8 inserts (the same run as pea-fig8)",
           "pea-multi", 190'000'000},
    Preset{"pea-fig10", "Pea Hash Fig. 10 / Table 2",
           "duplicate keys on power-law edge lists shaped like wiki-Talk and cit-Patents (or "
           "--dataset FILE); 2M edges (--paper-size: the graphs' sizes); needs 'pea-multi'",
           "pea-multi", 16'518'948},
    Preset{"smartht-table1", "SmartHT Table I",
           "recovery time after SIGKILL as the key count grows (250k, 500k, 1M)", "", 200'000'000},
    Preset{"reh-fig7", "REH Fig. 7",
           "single-thread throughput: insert, find+, find-, erase; adr, eadr, dram; 4M keys", "",
           500'000'000},
    Preset{"turbo-fig6", "TurboHash Fig. 6",
           "throughput vs threads (1, 2, all CPUs) of insert, find+, find-, update, erase, and the "
           "media I/O per op (write amplification); 2M keys",
           "", 120'000'000},
    Preset{"elimda-fig4", "ElimDA Fig. 4",
           "write amplification of inserts: media bytes / 16 B payload (256 B blocks); 2M keys", "",
           10'000'000},
    Preset{"elimda-exp1", "ElimDA Exp#1 (uniform)",
           "throughput of insert, find+, find-, erase under eADR, uniform keys: elimda beside "
           "reh, pea, turbo; 2M keys",
           ""},
    Preset{"elimda-exp1z", "ElimDA Exp#1 (Zipf 0.99)",
           "as elimda-exp1, with the find+ keys drawn from Zipf 0.99", ""},
    Preset{"elimda-exp5", "ElimDA Exp#5",
           "as elimda-exp1 on ADR (volatile caches: ElimDA flushes each append)", ""},
    Preset{"elimda-exp6", "ElimDA Exp#6",
           "PM traffic per op (flushes, non-temporal bytes, media writes in 256 B blocks) of "
           "insert, find+, find-, erase, ADR and eADR: elimda beside reh, pea, turbo; 2M keys",
           ""},
    Preset{"elimda-exp11", "ElimDA Exp#11",
           "log space 0.5, 1, 2, 4 MB (2048..16384 collecting logs): insert and find+ "
           "throughput and insert media writes under eADR; one run per size; 2M keys",
           "elimda"},
    Preset{"smartht-fig5", "SmartHT Fig. 5",
           "scalability, uniform keys: insert, find+, find-, erase with 1, 2, all CPUs; 2M keys",
           "", 200'000'000},
    Preset{"smartht-fig6", "SmartHT Fig. 6",
           "scalability, skewed finds (zipfian 0.99): as smartht-fig5", "", 200'000'000},
    Preset{"smartht-fig8", "SmartHT Fig. 8",
           "tail latency (p50 to p99.99, every op timed) of insert, find+, find-, erase, uniform "
           "keys, all CPUs; 2M keys",
           "", 200'000'000},
    Preset{"smartht-fig9", "SmartHT Fig. 9",
           "load factor while inserting (its maximum: the summary's max_load_factor); the growth "
           "experiment, 2M keys, 40 steps",
           "", 200'000'000},
    Preset{"ycsb", "YCSB A, B, C, D, F",
           "load 2M keys, then 2M operations of each YCSB core workload (E is unsupported: "
           "scans); 1 and 2 threads",
           ""},
    Preset{"batch", "batched finds (issue 16)",
           "find+ and find- one key at a time and with FindBatch of 1, 2, 4, 8, 16, 32, 64 keys "
           "(software prefetch across keys); absl loops Find; 2M keys",
           ""},
    Preset{"write-batch", "batched writes (issue 16)",
           "insert, update and erase with WriteBatch of 16 ops, update one at a time and with 1, 4, "
           "16, 64 ops per batch (REH: one fence per up to 16 buckets); absl loops; 2M keys",
           ""},
    Preset{"skew", "skewed accesses",
           "find+ and update under zipfian 0.99 (other skews: --dist zipf:0.5, selfsimilar:0.2, "
           "latest); 2M keys",
           ""},
};

std::vector<int> ThreadSweep() {
  const int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> t = {1};
  for (int x = 2; x < n; x *= 2) t.push_back(x);
  if (n > 1) t.push_back(n);
  return t;
}

bool Registered(std::string_view name) {
  const auto& r = RegisteredIndexes();
  return std::any_of(r.begin(), r.end(), [&](const IndexInfo& i) { return i.name == name; });
}

}  // namespace

std::span<const Preset> Presets() { return kPresets; }

const Preset* FindPreset(std::string_view name) {
  for (const Preset& p : kPresets) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Status ApplyPreset(std::string_view name, BenchConfig* c, std::vector<std::string>* notes,
                   bool* skip) {
  *skip = false;
  const auto it = std::find_if(kPresets.begin(), kPresets.end(),
                               [&](const Preset& p) { return p.name == name; });
  if (it == kPresets.end()) {
    std::string list;
    for (const auto& p : kPresets) list += (list.empty() ? "" : ", ") + std::string(p.name);
    return Status::InvalidArgument("unknown experiment '" + std::string(name) + "' (" + list + ")");
  }
  c->experiment = std::string(name);
  if (!it->requires_index.empty()) {
    if (!Registered(it->requires_index)) {
      notes->push_back("experiment " + std::string(name) + " skipped: index '" +
                       std::string(it->requires_index) + "' is not registered in this build");
      *skip = true;
      return Status::OK();
    }
    c->indexes = {std::string(it->requires_index)};
  }
  if (name == "default") return Status::OK();
  if (name == "pea-fig4" || name == "pea-fig7" || name == "smartht-fig9") {
    c->table = false;
    c->growth = true;
    c->keys = name == "smartht-fig9" ? 2'000'000 : 4'000'000;
    c->growth_steps = name == "smartht-fig9" ? 40 : 80;
    c->sample_ops = 1000;
  } else if (name == "pea-table3") {
    c->phases = {"insert"};
    c->keys = 4'000'000;
    c->persist_probe = false;
    c->count_keys = 0;
  } else if (name == "pea-table4") {
    c->table = false;
    c->keys = 1'000'000;
    c->recovery_keys = {333'333, 666'667, 1'000'000};  // the paper: 100M, 200M, 300M
  } else if (name == "pea-fig8" || name == "pea-fig9" || name == "pea-fig10") {
    c->table = false;
    c->keys = 2'000'000;
    c->dup_datasets = name == "pea-fig10"
                          ? std::vector<std::string>{"wiki-talk", "cit-patents"}
                          : std::vector<std::string>{"zipf:0", "zipf:0.2", "zipf:0.4", "zipf:0.6",
                                                     "zipf:0.8"};
  } else if (name == "smartht-table1") {
    c->table = false;
    c->keys = 1'000'000;
    c->recovery_keys = {250'000, 500'000, 1'000'000};
  } else if (name == "reh-fig7") {
    c->keys = 4'000'000;
    c->durabilities = {Durability::kAdr, Durability::kEadr, Durability::kDram};
    c->count_keys = 0;
  } else if (name == "turbo-fig6") {
    if (!Registered("turbo")) {
      notes->push_back("turbo-fig6: index 'turbo' is not registered; running the other indexes");
    }
    c->keys = 2'000'000;
    c->threads = ThreadSweep();
    c->phases = {"insert", "find+", "find-", "update", "erase"};
  } else if (name == "elimda-fig4") {
    c->keys = 2'000'000;
    c->phases = {"insert"};
    c->persist_probe = false;
  } else if (name.rfind("elimda-exp", 0) == 0) {
    c->keys = 2'000'000;
    c->phases = {"insert", "find+", "find-", "erase"};
    c->persist_probe = false;
    if (name != "elimda-exp11") {
      c->indexes.clear();
      for (const char* i : {"reh", "pea", "turbo", "elimda"}) {
        if (Registered(i)) c->indexes.emplace_back(i);
      }
    }
    if (name == "elimda-exp1" || name == "elimda-exp1z" || name == "elimda-exp5") {
      c->count_keys = 0;
      c->durabilities = {name == "elimda-exp5" ? Durability::kAdr : Durability::kEadr};
      if (name == "elimda-exp1z") c->dist = {DistKind::kZipfian, 0.99};
    } else if (name == "elimda-exp6") {
      c->durabilities = {Durability::kAdr, Durability::kEadr};
    } else {  // elimda-exp11
      c->durabilities = {Durability::kEadr};
      c->phases = {"insert", "find+"};
      c->elimda_logs = {2048, 4096, 8192, 16384};
    }
  } else if (name == "smartht-fig8") {
    c->keys = 2'000'000;
    c->threads = {ThreadSweep().back()};
    c->latency_every = 1;
    c->count_keys = 0;
    c->persist_probe = false;
  } else if (name == "smartht-fig5" || name == "smartht-fig6") {
    c->keys = 2'000'000;
    c->threads = ThreadSweep();
    c->count_keys = 0;
    if (name == "smartht-fig6") c->dist = {DistKind::kZipfian, 0.99};
  } else if (name == "ycsb") {
    c->keys = 2'000'000;
    c->threads = {1, 2};
    c->phases = {"insert", "ycsb-a", "ycsb-b", "ycsb-c", "ycsb-d", "ycsb-f"};
    c->count_keys = 0;
    c->persist_probe = false;
    notes->push_back("ycsb-e skipped: it needs range scans, which hash indexes do not offer");
  } else if (name == "batch") {
    c->keys = 2'000'000;
    c->phases = {"insert",   "find+",    "find+@1",  "find+@2", "find+@4", "find+@8",
                 "find+@16", "find+@32", "find+@64", "find-",   "find-@16"};
    c->count_keys = 0;
    c->persist_probe = false;
    c->latency_every = 0;
  } else if (name == "write-batch") {
    c->keys = 2'000'000;
    c->phases = {"insert@16", "update", "update@1", "update@4", "update@16", "update@64",
                 "erase@16"};
    c->count_keys = 0;
    c->persist_probe = false;
    c->latency_every = 0;
  } else if (name == "skew") {
    c->keys = 2'000'000;
    c->phases = {"insert", "find+", "update"};
    c->dist = {DistKind::kZipfian, 0.99};
    c->count_keys = 0;
  }
  return Status::OK();
}

}  // namespace pmhash::bench
