// bench/experiments.h — experiments beyond the throughput tables.
//
// Growth ("sawtooth", Pea Hash Figures 4 and 7): one thread inserts `keys` keys into an empty
// table in growth_steps steps. After each step: load factor, capacity, PM and DRAM bytes, the
// resize events so far, and the latency of sample_ops individually timed operations of each
// kind — inserts (the first keys of the next step), positive finds and negative finds of random
// keys, and erases of random present keys (re-inserted untimed afterwards, so the table size
// follows the insert count). Summary: maximum load factor, average utility (Pea Hash 2.2.2:
// sum_k N(k) / sum_k S(k), N(k) = 16 B x k the payload after the k-th insert, S(k) the PM bytes
// of the index; S is sampled at the end of each step, so it is exact when steps are at least as
// fine as resizes and otherwise slightly pessimistic), average load factor (the same ratio in
// slots), and the resize events (count, min/median/p90/p99/max, total: Pea Hash Table 3). The
// reference absl::flat_hash_map gets the same curve, with its DRAM bytes as S(k).
//
// Recovery (Pea Hash Table 4, SmartHT Table I, REH): for each size n and persistent durability,
// a child process (fork) builds a pool of n keys and is killed with SIGKILL without any clean
// shutdown; the parent then times Open + the first Find (reopen-to-first-request), checks the
// size and a sample of keys, and records the index's own recovery_seconds. The same is measured
// after a clean Close. Indexes run through the registry (pmhash::Open), so every registered
// index is covered.
#pragma once

#include <chrono>
#include <vector>

#include "bench/driver.h"
#include "bench/keys.h"
#include "bench/pool_files.h"
#include "bench/results.h"

namespace pmhash::bench {

// Wall-clock seconds between two points of the experiments' clock.
using Clock = std::chrono::steady_clock;
inline double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The run's per-kind knobs (--elimda-logs, --elimda-batch, --smartht-keys-per-head) into the
// options of a pool it opens: the table rows and the experiments alike. A kind ignores the
// others' knobs.
void ApplyKindOptions(const BenchConfig& c, Options* o);

std::vector<Series> RunGrowth(const BenchConfig& c, const KeySet& keys, PoolFile* file,
                              BenchListener* l);
std::vector<Series> RunRecovery(const BenchConfig& c, PoolFile* file, BenchListener* l);

}  // namespace pmhash::bench
