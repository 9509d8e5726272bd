// bench/concurrent_reference.h — the multi-threaded DRAM reference: tbb::concurrent_hash_map.
//
// absl::flat_hash_map (reference.h) is the yardstick for one thread but is not thread-safe. For
// tables with T > 1 threads the benchmark also runs tbb::concurrent_hash_map<uint64_t, uint64_t>
// (Debian package libtbb-dev; found by CMake at configure time, optional) with the same T threads
// and phases, and ratios at T > 1 are taken against it. Without TBB the ratios at T > 1 stay
// against one absl thread, and the report says so.
#pragma once

#include <functional>
#include <span>
#include <string_view>

#include "bench/results.h"
#include "bench/runner.h"

namespace pmhash::bench {

inline constexpr std::string_view kConcurrentReferenceName = "tbb::concurrent_hash_map";

// True if this build has the concurrent reference.
bool HaveConcurrentReference();

// The reference row with ro.threads threads; an error row when the build has none.
RowResult RunConcurrentReferenceRow(std::span<const PhaseSpec> phases, const RunnerOptions& ro,
                                    const std::function<void(std::string_view)>& progress);

}  // namespace pmhash::bench
