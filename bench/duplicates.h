// bench/duplicates.h — the duplicate-key experiments of Pea Hash (section 4: Figures 8 and 9 on
// Zipfian duplicates, Figure 10 / Table 2 on graph edge lists), on the kinds that offer the
// multi-value API (Capabilities::multi; today pea-multi).
//
// Datasets (BenchConfig::dup_datasets), each a sequence of (key, value) pairs:
//   zipf:S          BenchConfig::keys pairs whose keys are Zipfian ranks (skew S, 0 <= S < 1) over
//                   as many ranks, scrambled; values are the pairs' positions. S = 0: uniform
//                   ranks (most keys have one to three values); larger S: a few keys with very
//                   many values.
//   wiki-talk, cit-patents
//                   a power-law edge list (source = key, destination = value) with the node and
//                   edge counts of the SNAP graph of that name (paper Table 2), scaled down to
//                   BenchConfig::keys edges when that is smaller; the source of each edge is a
//                   Zipfian rank over the nodes (skew 0.99 for wiki-Talk, whose out-degrees are
//                   extremely skewed; 0.6 for cit-Patents, whose out-degree is bounded by a
//                   patent's citation list). A generator matched in size and rough shape, not
//                   the real graphs (no download).
//   file:PATH       a SNAP edge list ("src dst" per line, '#' comments).
//
// For each dataset, interleaved rounds (BenchConfig::repeat) of two rows on a fresh pool each: the
// kind with its paper design (adaptive_buckets = 1) and its baseline (adaptive_buckets = 0: every
// key a (key, pointer) slot to a buffer of 4 values that doubles: the paper's "Dash with value
// buffers"). Phases, each timed on its own (1 thread):
//   insert          every pair, in dataset order                                   (Mops/s)
//   search-skew     FindAll of keys drawn like the inserts (pairs / 4 ops)          (M entries/s)
//   search-unique   FindAll of every distinct key once, shuffled                   (M entries/s)
//   erase           EraseAll of every distinct key once, shuffled                  (M entries/s)
// and the average utility of the insert phase (Pea Hash 2.2.2, Figure 9: the mean over 20 points
// of 16 B x pairs inserted / PM bytes of the pool's heap). Before the rounds, one untimed run of
// each row with the traffic counters on gives the fences and flushed lines per pair inserted and
// per pair erased.
#pragma once

#include <string>
#include <vector>

#include "bench/driver.h"
#include "bench/pool_files.h"
#include "bench/results.h"
#include "pmhash/index.h"

namespace pmhash::bench {

struct DupDataset {
  std::string name;  // "zipf:0.4", "wiki-talk", "file:edges.txt"
  std::vector<std::pair<Key, Value>> pairs;
  std::vector<Key> keys;  // every distinct key once, shuffled (unique search, erase)
};

// The dataset `spec` names (see above), of about `pairs` pairs.
Result<DupDataset> MakeDupDataset(const std::string& spec, uint64_t pairs, uint64_t seed);

// One Series per (kind, mode, durability): points are the datasets, with the figures above and,
// in the paper-design series, the median (and min, max) per-round ratios to the baseline.
std::vector<Series> RunDuplicates(const BenchConfig& c, PoolFile* file, BenchListener* l);

}  // namespace pmhash::bench
