// src/pm/crash_sim.h — deterministic crash simulator for Sim-durability pools.
//
// The model (ADR). The simulator keeps a shadow "persisted image" of the pool: what the media is
// guaranteed to hold. Through the Sim policy it sees every flush, fence and non-temporal copy:
//
//   OnFlush(line)   snapshot the line's bytes *now* into the calling thread's pending set (every
//                   snapshot is kept until the fence: a line flushed twice before one fence
//                   may reach the media at either version)
//   OnNtCopy(range) same, for every line of the range (non-temporal stores are flushed at copy)
//   OnFence()       crash point (if the thread has pending lines), then commit the thread's
//                   snapshots into the persisted image — the snapshots, not the current bytes:
//                   a line rewritten after its flush is not durable until flushed again
//
// A crash image is the persisted image plus, for every cache line, one of the versions that could
// have reached the media at that instant: the persisted one, any pending snapshot (any thread),
// the current bytes of a dirty line (caches may evict any line, flushed or not), and — when a
// store tracer reports stores (OnStore; tests/crash/store_tracer.h) — every intermediate version
// the line has had since the last snapshot that a fence committed: an eviction may happen
// between any two stores, so two stores to one line in the wrong order are caught even when a
// single flush covers both. With tear_words, a line may also mix those versions 8 bytes at a
// time (x86 guarantees only 8-byte failure atomicity).
//
// eADR model: caches are in the persistence domain, so the only crash image is the current
// memory at the crash instant; crash points fall on every fence (ordering checks) and, with a
// store tracer, after every store (a crash between two stores).
//
// Crash points are numbered in the order they occur: every fence that has pending flushes, and
// every explicit CrashPoint() call (the harness calls it at operation boundaries). The callback
// decides whether to Capture() the state at that point; images are materialised later, so the
// workload keeps running and one run yields many crash points. Everything is deterministic given
// the workload: no timing, no randomness inside the simulator.
//
// Threading: the hook may be called from several threads (pending sets are per thread); the
// callback runs on the thread that hit the crash point, without the simulator's lock held.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "pm/persist.h"

namespace pmhash::pm {

struct CrashSimConfig {
  bool eadr = false;        // eADR model (see above)
  bool tear_words = false;  // allow 8-byte tearing inside a line
};

class CrashSimulator final : public SimHook {
 public:
  static constexpr size_t kLine = 64;
  using LineBytes = std::array<char, kLine>;

  using Config = CrashSimConfig;

  // What Capture() returns: enough to build every crash image of one crash point.
  struct State {
    uint64_t point = 0;           // crash point ordinal
    std::vector<char> persisted;  // the persisted image (size of the mapping)
    struct Line {
      size_t index;                     // line number in the mapping
      std::vector<LineBytes> versions;  // distinct candidates, none equal to the persisted line
    };
    std::vector<Line> lines;  // lines with at least one non-persisted candidate
    bool eadr = false;
    bool tear_words = false;
  };

  // A choice of one version per differing line: 0 = persisted, v = versions[v-1].
  // With tear_words, `words` may instead give a version per 8-byte word (8 per line).
  struct Choice {
    std::vector<uint8_t> line_version;                 // one per State::lines entry
    std::vector<std::array<uint8_t, 8>> word_version;  // optional, same length when used
  };

  explicit CrashSimulator(Config config = {});

  // Called at every crash point with its ordinal (before the fence commits anything).
  void set_crash_point_callback(std::function<void(uint64_t)> fn) { callback_ = std::move(fn); }

  // Explicit crash point (operation boundary).
  void CrashPoint();
  uint64_t crash_points() const { return points_.load(std::memory_order_relaxed); }
  bool mapped() const { return base_ != nullptr; }
  size_t mapped_size() const { return size_; }

  // The state at this instant. REQUIRES: a pool is mapped.
  State Capture() const;
  // Materialises the image for `choice` into `out` (size of the mapping).
  static void BuildImage(const State& s, const Choice& choice, char* out);
  // Human-readable choice for failure reports: "line 12 -> v1, line 40 -> v2".
  static std::string DescribeChoice(const State& s, const Choice& choice);

  // SimHook
  void OnMap(void* base, size_t len) override;
  void OnUnmap(void* base, size_t len) override;
  void OnFlush(const void* addr, size_t len) override;
  void OnFence() override;
  void OnNtCopy(void* dst, size_t len) override;
  void OnStore(const void* addr, size_t len) override;

  // Intermediate versions kept per line (the newest; older ones are dropped).
  static constexpr size_t kMaxHistory = 32;

 private:
  // A line's bytes at one instant; `seq` orders snapshots and stored versions.
  struct Version {
    uint64_t seq;
    LineBytes bytes;
  };
  // line index -> snapshots in flush order (the last one is what the fence commits)
  using Pending = std::map<size_t, std::vector<Version>>;
  void SnapshotLines(const void* addr, size_t len);
  Pending& MyPending();

  const Config config_;
  std::function<void(uint64_t)> callback_;
  char* base_ = nullptr;
  size_t size_ = 0;
  std::vector<char> persisted_;
  mutable std::mutex mu_;  // guards pending_ and persisted_ against concurrent hook calls
  std::map<std::thread::id, Pending> pending_;
  std::map<size_t, std::vector<Version>> stored_;  // OnStore versions not yet superseded
  uint64_t seq_ = 0;
  std::atomic<uint64_t> points_{0};
};

// Enumerates the images of one crash point in the order the crash suite wants them:
// minimal (all persisted), maximal (every line at its newest version), every single line at
// each of its versions (at most `max_singles` of them, a seeded subset beyond that), pairs of
// lines at their newest versions (at most `max_pairs`), then `random` random choices (per word
// when the state allows tearing). Stops early when `fn` returns false.
void ForEachCrashChoice(const CrashSimulator::State& s, uint64_t seed, int random, size_t max_pairs,
                        const std::function<bool(const CrashSimulator::Choice&)>& fn,
                        size_t max_singles = 24);

}  // namespace pmhash::pm
