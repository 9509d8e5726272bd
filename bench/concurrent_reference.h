// bench/concurrent_reference.h — the multi-threaded DRAM reference: a sharded absl map.
//
// absl::flat_hash_map (reference.h) is the yardstick for one thread but is not thread-safe. For
// tables with T > 1 threads the benchmark also runs kShards absl::flat_hash_map<uint64_t,
// uint64_t> shards, each behind its own std::shared_mutex (shared for finds), with the same T threads
// and phases, and ratios at T > 1 are taken against it. A key's shard is the top 8 bits of
// absl's hash of it, bits no shard's table uses to place its keys.
// (Not absl::Mutex: with Debian's absl, perf showed its lock calls in absl's global
// SpinLock::SpinLoop, and the map ran 5x slower than one absl thread.)
// It replaced tbb::concurrent_hash_map (issue 16): TBB's accessor locking made every index look
// 2-3x better against it than against what a user would write with absl and a lock per shard.
#pragma once

#include <functional>
#include <span>
#include <string_view>

#include "bench/results.h"
#include "bench/runner.h"

namespace pmhash::bench {

inline constexpr std::string_view kConcurrentReferenceName =
    "sharded absl::flat_hash_map (256 shards, std::shared_mutex)";

// The reference row with ro.threads threads.
RowResult RunConcurrentReferenceRow(std::span<const PhaseSpec> phases, const RunnerOptions& ro,
                                    const std::function<void(std::string_view)>& progress);

}  // namespace pmhash::bench
