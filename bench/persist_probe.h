// bench/persist_probe.h — the one-persist limit of this machine.
//
// Times the smallest durable update an index can make: an 8-byte store to a random 64 B line of
// a pool file, then the policy's Flush (clwb/clflushopt/clflush under Adr, nothing under Eadr)
// and Fence (sfence). The lines are spread over a region as large as the index's pool and are
// touched once beforehand, so page faults are not measured. The rate (Mops/s) bounds every
// index whose insert or erase needs one persist; ADR rows are shown as a fraction of it.
#pragma once

#include <cstdint>
#include <string>

#include "bench/runner.h"
#include "pmhash/options.h"
#include "pmhash/status.h"

namespace pmhash::bench {

struct PersistProbeResult {
  Durability durability = Durability::kAdr;
  int threads = 1;
  uint64_t region_bytes = 0;
  uint64_t ops = 0;
  double seconds = 0;
  Status failure;

  double mops() const { return seconds > 0 ? static_cast<double>(ops) / seconds / 1e6 : 0; }
};

// Runs `ops` persists split among ro.threads threads on the file at `path` (resized to
// region_bytes, then truncated back to zero). REQUIRES: d is kAdr or kEadr.
PersistProbeResult RunPersistProbe(const std::string& path, uint64_t region_bytes, Durability d,
                                   const RunnerOptions& ro, uint64_t ops, uint64_t seed);

}  // namespace pmhash::bench
