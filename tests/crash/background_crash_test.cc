// The crash harness with background work (pm::BackgroundWork): a crash before, during and after
// a background task, proven on a toy index whose durability depends on one.
//
// LogTable<P> is test-only and registered nowhere. It is the shape of ElimDA's write path in
// miniature: a foreground operation appends a redo record to a PM log (one persist: durable when
// it returns) and updates a DRAM map; a background task applies the logged records to a PM table
// and then advances the table's `applied` sequence number, which frees their log slots. Recovery
// reads the table and replays the log from applied + 1. The seeded bug (kBugAdvanceFirst)
// advances `applied` before the table writes are durable: only a crash *during* the background
// task loses keys, which the harness must find.
//
//   region (root 0, contiguous chunks):
//     [0, 64)             meta line: word 0 = applied (every record <= it is in the table)
//     [64, 64 + 32*S)     table: S slots of 32 B {key + 1 (0: never used), value, live, 0}
//     [.., + 32*L)        log: L records of 32 B {seq | erase << 63, key, value, check}, record s
//                         at s % L; valid iff seq matches and check matches
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "common/locks.h"
#include "common/mutex.h"
#include "crash/crash_harness.h"
#include "index/lifecycle.h"
#include "pm/background.h"
#include "pm/persist.h"
#include "pm/pool.h"

namespace pmhash::crashtest {
namespace {

enum class Bug { kNone, kBugAdvanceFirst };

template <pm::PersistPolicy P, Bug kBug>
class LogTable {
 public:
  static constexpr std::string_view kKindName = "toy-logtable";
  static constexpr uint64_t kSlots = 1024;
  static constexpr uint64_t kLog = 16;
  static constexpr uint32_t kChunk = 4096;
  static constexpr uint64_t kRegionBytes = 64 + 32 * kSlots + 32 * kLog;
  static constexpr uint32_t kRegionChunks = (kRegionBytes + kChunk - 1) / kChunk;

  static Result<std::unique_ptr<LogTable>> Open(const Options& o) {
    static constexpr uint8_t kParams[8] = {1};
    pm::PoolSpec spec;
    spec.kind = kKindName;
    spec.params = kParams;
    spec.chunk_size = kChunk;
    spec.min_chunks = kRegionChunks;
    spec.durability = P::kDurability;
    auto pool = pm::Pool::Open(o, spec);
    if (!pool.ok()) return pool.status();
    std::unique_ptr<LogTable> t(new LogTable(std::move(pool).value(), o.background_threads));
    if (t->pool_->created()) PMHASH_RETURN_IF_ERROR(t->Create());
    PMHASH_RETURN_IF_ERROR(t->Recover());
    PMHASH_RETURN_IF_ERROR(t->background_.Start());
    return t;
  }

  Status Insert(Key k, Value v) {
    LockGuard<Mutex> g(mu_);
    if (map_.count(k)) return Status::Exists();
    return AppendLocked(false, k, v);
  }
  Status Update(Key k, Value v) {
    LockGuard<Mutex> g(mu_);
    if (!map_.count(k)) return Status::NotFound();
    return AppendLocked(false, k, v);
  }
  Status Upsert(Key k, Value v) {
    LockGuard<Mutex> g(mu_);
    return AppendLocked(false, k, v);
  }
  Status Erase(Key k) {
    LockGuard<Mutex> g(mu_);
    if (!map_.count(k)) return Status::NotFound();
    return AppendLocked(true, k, 0);
  }
  Status Find(Key k, Value* v) const {
    LockGuard<Mutex> g(mu_);
    auto it = map_.find(k);
    if (it == map_.end()) return Status::NotFound();
    *v = it->second;
    return Status::OK();
  }
  uint64_t Size() const {
    LockGuard<Mutex> g(mu_);
    return map_.size();
  }
  Status ForEach(const std::function<void(Key, Value)>& fn) const {
    std::map<Key, Value> copy;
    {
      LockGuard<Mutex> g(mu_);
      copy = map_;
    }
    for (const auto& [k, v] : copy) fn(k, v);
    return Status::OK();
  }
  IndexStats Stats() const {
    IndexStats s;
    {
      LockGuard<Mutex> g(mu_);
      s.size = map_.size();
      s.details.push_back({"toy.applies", static_cast<double>(applies_)});
    }
    background_.stats().AppendTo(&s.details, "toy.bg");
    return s;
  }
  // The DRAM map equals what PM says (table + log replay); the region is the only chunk use.
  Status CheckInvariants() const {
    LockGuard<Mutex> g(mu_);
    std::map<Key, Value> pm;
    uint64_t last = 0;
    PMHASH_RETURN_IF_ERROR(ReadPm(&pm, &last));
    if (pm != map_) return Status::Corruption("toy: DRAM map differs from PM");
    if (last + 1 != next_seq_) return Status::Corruption("toy: log end differs");
    if (next_seq_ - 1 - applied_ > kLog) return Status::Corruption("toy: log overfull");
    if (pool_->allocator().used_chunks() != kRegionChunks) {
      return Status::Corruption("toy: allocated chunks != reachable chunks");
    }
    return Status::OK();
  }
  // Every queued apply has run before the clean mark (src/index/lifecycle.h).
  Status Close() {
    return life_.Close(*pool_, [&] { return background_.Shutdown(); });
  }
  ~LogTable() {
    if (life_.CloseOnDestroy()) (void)Close();
  }
  void Abandon() { life_.Abandon(); }

  pm::BackgroundWork& background() { return background_; }

 private:
  struct Slot {
    uint64_t key1, value, live, pad;
  };
  struct Record {
    uint64_t seq_op, key, value, check;
  };

  LogTable(std::unique_ptr<pm::Pool> pool, uint32_t threads)
      : pool_(std::move(pool)),
        persist_(pool_->persist_target()),
        background_(pm::BackgroundOptions{threads, pool_->sim_hook()}) {}

  static uint64_t Mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
  }
  static uint64_t Check(const Record& r) {
    return Mix(r.seq_op ^ Mix(r.key ^ Mix(r.value ^ 0x70F)));
  }

  uint64_t* meta() const { return pool_->At<uint64_t>(region_); }
  Slot* slot(uint64_t i) const { return pool_->At<Slot>(region_ + 64 + 32 * i); }
  Record* rec(uint64_t seq) const {
    return pool_->At<Record>(region_ + 64 + 32 * kSlots + 32 * (seq % kLog));
  }

  Status Create() {
    auto off = pool_->allocator().Allocate(kRegionChunks);
    if (!off.ok()) return off.status();
    char* p = pool_->At<char>(off.value());
    std::memset(p, 0, kRegionBytes);
    persist_.Persist(p, kRegionBytes);
    pool_->SetRoot(0, off.value());
    return pool_->CommitCreate();
  }

  // Table, then the log from applied + 1 while records are valid. REQUIRES region_.
  Status ReadPm(std::map<Key, Value>* out, uint64_t* last) const {
    for (uint64_t i = 0; i < kSlots; i++) {
      const Slot* s = slot(i);
      if (s->key1 == 0) continue;
      if (s->live > 1) return Status::Corruption("toy: bad slot");
      if (s->live && !out->emplace(s->key1 - 1, s->value).second) {
        return Status::Corruption("toy: duplicate key in table");
      }
    }
    uint64_t s = *meta() + 1;
    for (;; s++) {
      const Record* r = rec(s);
      if ((r->seq_op & ~(uint64_t{1} << 63)) != s || r->check != Check(*r)) break;
      if (r->seq_op >> 63) {
        out->erase(r->key);
      } else {
        (*out)[r->key] = r->value;
      }
    }
    *last = s - 1;
    return Status::OK();
  }

  Status Recover() {
    pool_->allocator().Reset();
    region_ = pool_->root(0);
    if (!pool_->allocator().ValidChunk(region_, kRegionChunks)) {
      return Status::Corruption("toy: bad root");
    }
    PMHASH_RETURN_IF_ERROR(pool_->allocator().MarkReachable(region_, kRegionChunks));
    LockGuard<Mutex> g(mu_);
    applied_ = *meta();
    uint64_t last = 0;
    PMHASH_RETURN_IF_ERROR(ReadPm(&map_, &last));
    next_seq_ = last + 1;
    if (next_seq_ - 1 - applied_ > kLog) return Status::Corruption("toy: log overfull");
    return MaybeScheduleLocked();  // a log left half full is applied in the background
  }

  Status AppendLocked(bool erase, Key k, Value v) PMHASH_REQUIRES(mu_) {
    if (next_seq_ - applied_ > kLog) PMHASH_RETURN_IF_ERROR(ApplyLocked());  // log full
    Record* r = rec(next_seq_);
    r->seq_op = next_seq_ | (uint64_t{erase} << 63);
    r->key = k;
    r->value = v;
    r->check = Check(*r);
    persist_.Persist(r, sizeof(Record));  // durable: acknowledged
    next_seq_++;
    if (erase) {
      map_.erase(k);
    } else {
      map_[k] = v;
    }
    return MaybeScheduleLocked();
  }

  Status MaybeScheduleLocked() PMHASH_REQUIRES(mu_) {
    if (apply_scheduled_ || next_seq_ - 1 - applied_ < kLog / 2) return Status::OK();
    apply_scheduled_ = true;
    return background_.Schedule([this] {
      LockGuard<Mutex> g(mu_);
      apply_scheduled_ = false;
      return ApplyLocked();
    });
  }

  void SetApplied(uint64_t a) PMHASH_REQUIRES(mu_) {
    *meta() = a;
    persist_.Persist(meta(), 8);
  }

  // Moves records applied_ + 1 .. next_seq_ - 1 into the table, then advances applied_.
  Status ApplyLocked() PMHASH_REQUIRES(mu_) {
    const uint64_t upto = next_seq_ - 1;
    if (upto == applied_) return Status::OK();
    if constexpr (kBug == Bug::kBugAdvanceFirst) SetApplied(upto);  // BUG: table not durable yet
    for (uint64_t s = applied_ + 1; s <= upto; s++) {
      const Record r = *rec(s);
      const bool erase = r.seq_op >> 63;
      uint64_t i = Mix(r.key) % kSlots;
      uint64_t probes = 0;
      for (; probes < kSlots; probes++, i = (i + 1) % kSlots) {
        if (slot(i)->key1 == r.key + 1 || slot(i)->key1 == 0) break;
      }
      if (probes == kSlots) return Status::OutOfSpace("toy: table full");
      Slot* sl = slot(i);
      if (sl->key1 == 0 && erase) continue;  // never applied: nothing to erase
      sl->value = erase ? 0 : r.value;
      sl->live = erase ? 0 : 1;
      sl->key1 = r.key + 1;
      persist_.Persist(sl, sizeof(Slot));
    }
    if constexpr (kBug == Bug::kNone) SetApplied(upto);  // commit: the log slots are free
    applied_ = upto;
    applies_++;
    return Status::OK();
  }

  std::unique_ptr<pm::Pool> pool_;
  pm::Persister<P> persist_;
  uint64_t region_ = 0;
  index::Lifecycle life_;
  mutable Mutex mu_;
  std::map<Key, Value> map_ PMHASH_GUARDED_BY(mu_);
  uint64_t applied_ PMHASH_GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ PMHASH_GUARDED_BY(mu_) = 1;
  bool apply_scheduled_ PMHASH_GUARDED_BY(mu_) = false;
  uint64_t applies_ PMHASH_GUARDED_BY(mu_) = 0;
  // Last: destroyed first, so no task outlives what it touches (the destructor is Abandon()).
  pm::BackgroundWork background_;
};

template <class P>
using GoodTable = LogTable<P, Bug::kNone>;
template <class P>
using BuggyTable = LogTable<P, Bug::kBugAdvanceFirst>;

Options Small() {
  Options o;
  o.pool_size = 256 << 10;
  o.hash_mode = HashMode::kStrong;
  return o;
}

Config Base(uint64_t seed) {
  Config c;
  c.seed = seed;
  c.ops = 240;
  c.key_range = 300;
  c.budget_seconds = 15;
  return c;
}

double Detail(const IndexStats& s, std::string_view name) {
  for (const NamedStat& d : s.details) {
    if (d.name == name) return d.value;
  }
  return -1;
}

void Print(const Report& r) {
  std::printf("crash points %lu, states %lu, images %lu, recovery images %lu, background tasks "
              "%lu%s\n",
              static_cast<unsigned long>(r.crash_points),
              static_cast<unsigned long>(r.states_checked),
              static_cast<unsigned long>(r.images_checked),
              static_cast<unsigned long>(r.recovery_images_checked),
              static_cast<unsigned long>(r.background_tasks_run),
              r.budget_exhausted ? " (budget exhausted)" : "");
}

// Manual mode (the harness default): the harness runs each queued apply between operations, with
// crash points before, during and after it; every image recovers.
TEST(BackgroundCrash, ManualModeCrashesAroundEveryTask) {
  const Report r = Harness<GoodTable>(Base(5), Small(), "BgManual").Run();
  Print(r);
  EXPECT_TRUE(r.failure.empty()) << r.failure;
  EXPECT_GT(r.images_checked, 0u);
  EXPECT_GT(r.recovery_images_checked, 0u);
  EXPECT_GT(r.background_tasks_run, 5u);  // the log (16 records) was applied many times
  EXPECT_GT(Detail(r.stats, "toy.bg.run"), 5);
  EXPECT_EQ(Detail(r.stats, "toy.bg.threads"), 0);  // the harness forced manual mode
}

// The same in eADR (crash points on every fence).
TEST(BackgroundCrash, ManualModeEadr) {
  Config c = Base(6);
  c.eadr = true;
  const Report r = Harness<GoodTable>(c, Small(), "BgEadr").Run();
  Print(r);
  EXPECT_TRUE(r.failure.empty()) << r.failure;
  EXPECT_GT(r.background_tasks_run, 5u);
}

// Tasks left to Close(): its drain runs them on the writer thread, crash points included.
TEST(BackgroundCrash, CloseDrainsQueuedTasks) {
  Config c = Base(7);
  c.background_every = 0;  // the harness never runs them; the log fills and applies inline
  const Report r = Harness<GoodTable>(c, Small(), "BgClose").Run();
  Print(r);
  EXPECT_TRUE(r.failure.empty()) << r.failure;
  EXPECT_EQ(r.background_tasks_run, 0u);
  EXPECT_GE(Detail(r.stats, "toy.bg.scheduled"), 1);
}

// The seeded bug loses keys only if the crash falls inside the background task: the harness
// must find it there, and say so.
TEST(BackgroundCrash, CatchesCommitBeforeTableIsDurable) {
  Config c = Base(5);
  c.recovery_crash_every = 0;
  c.budget_from_env = false;  // it must find the bug (ASan's short budget would stop it first)
  const Report r = Harness<BuggyTable>(c, Small(), "BgBuggy").Run();
  Print(r);
  ASSERT_FALSE(r.failure.empty()) << "the bug was not found";
  EXPECT_NE(r.failure.find("background task"), std::string::npos) << r.failure;
  EXPECT_NE(r.failure.find("lost key"), std::string::npos) << r.failure;
  std::printf("found, as expected:\n%s\n", r.failure.c_str());
}

// Worker threads instead of manual mode: the tasks' persists reach the simulator through the
// pool's hook (applies are not crash points then: those are the writer's), and every crash
// point the writer takes still recovers.
TEST(BackgroundCrash, WorkerThreadPersistsReachTheSimulator) {
  Config c = Base(8);
  c.background_threads = 1;
  c.background_every = 0;
  const Report r = Harness<GoodTable>(c, Small(), "BgThreaded").Run();
  Print(r);
  EXPECT_TRUE(r.failure.empty()) << r.failure;
  EXPECT_EQ(Detail(r.stats, "toy.bg.threads"), 1);
  EXPECT_GE(Detail(r.stats, "toy.bg.run"), 1);
}

}  // namespace
}  // namespace pmhash::crashtest
