// pmhash/stats.h — what an index reports about itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pmhash {

// Persistence traffic, summed over all threads since the counters were last reset.
// Media writes are an estimate: flushed lines are grouped into media blocks (256 B on Optane,
// configurable) by a small write-combining model; under eADR a persisted line reaches the media
// only when a model of the last-level cache evicts it (src/pm/counters.h).
struct TrafficStats {
  uint64_t persists = 0;       // Persist()/Flush() requests made by the index
  uint64_t fences = 0;         // ordering fences issued
  uint64_t flushed_lines = 0;  // 64 B lines written back (clwb/clflushopt/clflush)
  uint64_t nt_bytes = 0;       // bytes written with non-temporal stores
  uint64_t media_writes = 0;   // estimated media block writes
  uint32_t media_block_bytes = 256;
  uint64_t media_cache_bytes = 0;   // the eADR cache model's capacity (0: off)
  uint64_t cached_dirty_lines = 0;  // eADR: lines persisted but not yet evicted to the media
};

// One index-specific statistic ("segments.stash", "rehash.gc", "probe.mean", ...). Indexes put
// what their paper reports here; the bench writes every one to JSON/CSV without knowing them.
struct NamedStat {
  std::string name;
  double value = 0;
};

struct IndexStats {
  uint64_t size = 0;            // live keys
  uint64_t capacity_slots = 0;  // slots the index could hold without growing
  double load_factor = 0;       // size / capacity_slots
  uint64_t pm_bytes = 0;        // persistent bytes in use by the index structure
  uint64_t dram_bytes = 0;      // DRAM used by volatile metadata (directories, fingerprints)
  uint64_t pool_bytes = 0;      // size of the pool
  uint32_t global_depth = 0;    // directory depth for extendible designs (0 otherwise)
  uint64_t buckets = 0;         // buckets (REH) or segments, per index
  uint64_t splits = 0;          // structural growth events since open
  uint64_t doublings = 0;       // directory doublings since open
  // Durations (ns) of structural resize events since open (splits, rehashes, directory
  // doublings: whatever the index counts in `splits` + `doublings`), in completion order, capped
  // at ResizeLog::kCap entries (the count above stays exact). Pea Hash Table 3 is built from it.
  std::vector<uint64_t> resize_ns;
  std::vector<NamedStat> details;  // index-specific figures, stable names, documented per index
  bool recovered = false;          // the last open found no clean-shutdown mark
  double recovery_seconds = 0;     // time spent rebuilding DRAM state at open
  // The last open loaded the DRAM state that the clean Close before it saved, instead of
  // rebuilding it by walking the pool (indexes that save one: docs/design.md).
  bool state_loaded = false;
  // How the pool is mapped: "anonymous", "tmpfs file", "file (page cache)", "fsdax file
  // (MAP_SYNC)" or "devdax" (pm::MappingName); which failures a persist survives depends on it.
  std::string mapping;
  TrafficStats traffic;
};

}  // namespace pmhash
