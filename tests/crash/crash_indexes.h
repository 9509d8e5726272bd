// tests/crash/crash_indexes.h — every index of the library, as the crash suite runs it.
//
// Adding an index to the library means adding its traits here (CrashSuite.CoversEveryRegistered
// Index fails until then). Small() must give a geometry where a few hundred operations drive
// every growth path (splits, doublings, rehashes) and a pool small enough that images are cheap.
#pragma once

#include <string_view>
#include <tuple>

#include "index/pea/pea.h"
#include "index/reh/reh.h"
#include "pmhash/options.h"

namespace pmhash::crashtest {

struct RehTraits {
  static constexpr std::string_view kName = "reh";
  template <class P>
  using Index = reh::Reh<P>;
  static Options Small(HashMode mode) {
    Options o;
    o.pool_size = 512 << 10;
    o.reh.initial_depth = 1;  // splits and doublings from the first operations
    o.reh.max_depth = 24;
    o.hash_mode = mode;
    return o;
  }
};

struct PeaTraits {
  static constexpr std::string_view kName = "pea";
  template <class P>
  using Index = pea::Pea<P>;
  static Options Small(HashMode mode) {
    Options o;
    o.pool_size = 512 << 10;
    o.pea.segment_buckets = 4;  // 60 slots per segment: transitions, 4-way splits and directory
    o.pea.initial_depth = 0;    // expansions within the first hundred inserts
    o.pea.max_depth = 24;
    o.hash_mode = mode;
    return o;
  }
};

using AllIndexes = std::tuple<RehTraits, PeaTraits>;

}  // namespace pmhash::crashtest
