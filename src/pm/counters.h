// src/pm/counters.h — persistence traffic counters and a media write-combining model.
//
// Compiled into every build, off by default: Persister<P> checks enabled() (one relaxed load)
// before calling in here. When on, each thread counts into one of kStripes cache-line-sized
// stripes, chosen from the address of a thread_local, so threads rarely share a stripe.
//
// Media model. Optane (and CXL memory) writes the media in blocks (256 B XPLines on Optane; 64 B
// is a reasonable CXL setting). The DIMM merges adjacent line write-backs that fall in a block it
// still buffers. We model that buffer per stripe as a FIFO of the last kWcEntries block ids: a
// written-back line whose block is in the FIFO is merged, otherwise it costs one media write and
// enters the FIFO. Non-temporal bytes go through the same model, a line at a time. This makes
// write amplification (media bytes / payload bytes) comparable across indexes without PM.
//
// eADR cache model. Under eADR a persisted line is not written back: it stays dirty in the CPU
// caches, which are in the persistence domain, and reaches the media only when the cache evicts
// it (or at power failure). So an eADR persist point only marks its lines dirty in a model of
// the last-level cache (`media_cache_bytes`, 16-way set-associative, LRU within a set, sets
// chosen by a hash of the line address as the slices' hash does); a dirty line costs a media
// write (through a write-combining FIFO of its own) when it is evicted. A line written again
// while resident costs nothing more: this is what lets ElimDA's collecting logs (2 MiB at the
// paper's 8192 logs of 256 B) be appended to without media traffic. Non-temporal stores bypass
// the cache: they go through the media model at once and drop the line from the cache model
// (the Eadr policy copies with memcpy, but a bulk copy writes whole blocks once either way).
// Only written lines are modelled; reads would evict sooner, so the default capacity (16 MiB) is
// below the last-level caches it stands for (36 MB on the ElimDA paper's Xeon, 32 MiB on the
// EPYC VMs here). `media_cache_bytes == 0` turns the model off: an eADR persist then counts as a
// write-back at once (the model before 2026-11-27). Dirty lines still resident at a snapshot are
// reported (cached_dirty_lines), not counted as media writes; Reset keeps them. ADR is
// unchanged: clwb writes the line back when asked.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/locks.h"
#include "pmhash/stats.h"

namespace pmhash::pm {

class TrafficCounters {
 public:
  static constexpr uint32_t kStripes = 16;
  static constexpr int kWcEntries = 8;
  static constexpr uint64_t kDefaultMediaCacheBytes = uint64_t{16} << 20;
  static constexpr uint32_t kCacheWays = 16;

  // media_block_bytes: a power of two >= 64, else 256. media_cache_bytes: the eADR cache model's
  // capacity, rounded down to whole 16-way sets of a power-of-two count (0, or less than one
  // set: the model is off).
  explicit TrafficCounters(uint32_t media_block_bytes = 256,
                           uint64_t media_cache_bytes = kDefaultMediaCacheBytes);

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }

  // A persist request over [addr, addr+len). `writes_back`: the policy really writes lines back
  // (Adr, Sim); under eADR the lines are counted for the media model but not as flushed.
  void OnFlush(const void* addr, size_t len, bool writes_back);
  void OnFence();
  // Non-temporal stores; `writes_back` as for OnFlush (false: eADR, the cache model drops them).
  void OnNtCopy(const void* dst, size_t len, bool writes_back);
  // An eADR write-back hint (Persister::WriteBack): the lines the cache model holds dirty are
  // written back now, through the thread's write-combining buffer, and leave the model.
  void OnWriteBack(const void* addr, size_t len);

  TrafficStats Snapshot() const;
  // Zeroes the counts. The eADR cache model keeps its dirty lines (the machine's state): a phase
  // is charged with the evictions during it.
  void Reset();

 private:
  // One stream of line write-backs to the media (a stripe's, or the cache model's evictions):
  // its write-combining FIFO and the media writes it cost.
  struct MediaStream {
    std::array<uint64_t, kWcEntries> wc{};  // block id + 1 (0 = empty)
    uint32_t next = 0;
    uint64_t writes = 0;
    void Line(uint64_t block);  // one media write unless the block is in the FIFO
  };
  struct alignas(64) Stripe {
    SpinLock mu;
    uint64_t persists = 0;
    uint64_t fences = 0;
    uint64_t flushed_lines = 0;
    uint64_t nt_bytes = 0;
    MediaStream media;
  };
  // The eADR cache model: one for all threads (it stands for a shared last-level cache), with
  // its own lock; its tags are allocated at the first eADR persist counted.
  struct Cache {
    SpinLock mu;
    uint64_t sets = 0;  // power of two; 0: the model is off
    std::unique_ptr<uint64_t[]> tags PMHASH_GUARDED_BY(mu);  // line + 1 per way, MRU first
    uint64_t resident PMHASH_GUARDED_BY(mu) = 0;
    MediaStream evictions PMHASH_GUARDED_BY(mu);
  };
  Stripe& MyStripe();
  uint64_t BlockOf(uintptr_t line_addr) const { return (line_addr >> block_shift_) + 1; }
  void CacheLine(uintptr_t line_addr);  // an eADR persist of the line: dirty in the cache model
  // A non-temporal store or a write-back: the line leaves the cache model; true if it was there.
  bool UncacheLine(uintptr_t line_addr);
  uint64_t* CacheSet(uintptr_t line_addr) PMHASH_REQUIRES(cache_.mu);

  std::atomic<bool> enabled_{false};
  uint32_t block_shift_;
  std::array<Stripe, kStripes> stripes_;
  Cache cache_;
};

}  // namespace pmhash::pm
