// tests/crash/crash_harness.h — runs any index through the crash simulator.
//
// Three phases per configuration (PMDK style): create, mutate (crashing everywhere), check.
//
//   1. Create the pool under a CrashSimulator (Sim policy): every fence of the creation is a
//      crash point; a crash there must reopen as an empty index (the incomplete pool is
//      re-created) — never as garbage.
//   2. Run a seeded workload (insert/upsert/update/erase on a small key range, small geometry
//      so splits and directory doublings happen). Every fence with pending flushes and every
//      operation boundary is a crash point. For the states captured during one operation the
//      oracle has two acceptable answers: the model before the operation and after it (the
//      in-flight operation is either fully applied or absent).
//   3. For each crash point, materialise images (minimal, maximal, single lines, pairs, random)
//      into a file, reopen it with a fresh index object (no DRAM state survives), and check:
//      contents == model_before or model_after, CheckInvariants() (which also proves that
//      allocated chunks == reachable chunks: no leak), Size() == scan, and that the recovered
//      index keeps working (more inserts/erases, invariants again). Every Nth image is also
//      recovered under a second simulator, and every crash point of that recovery is recovered
//      again (crash during recovery).
//
// Concurrent mode (Config::concurrent_reader): a second thread reads beside the writer. At every
// crash point inside an operation the writer, before the state is captured, asks that reader
// to look up the operation's key and waits up to reader_wait_us for the answer. A read that
// completes has linearized before the crash, so if it saw the operation's effect (the model
// after it, not before), every image of that crash point must recover to the model after it:
// a completed read never observes a write that a crash can still undo (durable
// linearizability). A read that does not complete in time is blocked by the writer's lock
// (REH, Pea hold their locks across the persist; their runs count such reads) and is ignored.
// The reader's own flushes and fences (Turbo readers help persist) go to the same simulator:
// a Sim pool keeps the hook it was opened under, for every thread.
//
// Batched writes (Config::write_batch): a step is one WriteBatch, and the acceptable answers are
// per key (see Config). The concurrent reader looks up the batch's first key: once a completed
// read saw it past its state before the batch, no image may recover it to an earlier state.
//
// Background work (pm::BackgroundWork, src/pm/background.h): an index that exposes
// `pm::BackgroundWork& background()` is opened in manual mode (Options::background_threads =
// Config::background_threads, default 0), so its background tasks never run on a thread of their
// own: after every background_every-th operation the harness runs the queued tasks itself, on the
// writer thread, one at a time (RunOne). A crash is thus placed before a task (the operation's
// boundary), during it (each of its fences), between tasks and after the last (an explicit crash
// point after each task); background work changes no contents, so every image must recover to
// the model after the operation. Close() drains what is left, on the writer thread too. After
// each recovery the harness also runs the tasks recovery queued (a lazy rebuild), checks that
// they changed nothing, and crashes them in the crash-during-recovery check. With
// background_threads > 0 the tasks run on worker threads instead: their persists still reach the
// simulator (the executor installs the pool's hook on its workers), but crash points are taken
// on the writer thread only.
//
// Determinism: everything derives from Config::seed (in concurrent mode, also the scheduling). A failure names seed, operation, crash
// point and the (shrunk) set of line versions, and prints a command that replays exactly that
// crash point (PMHASH_CRASH_SEED / PMHASH_CRASH_POINT).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <concepts>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/hash.h"
#include "crash/image_file.h"
#include "crash/store_tracer.h"
#include "pm/background.h"
#include "pm/crash_sim.h"
#include "pm/persist.h"
#include "pmhash/index.h"

namespace pmhash::crashtest {

struct Config {
  uint64_t seed = 1;
  int ops = 400;
  uint64_t key_range = 2000;
  int random_images = 3;
  size_t max_pairs = 12;
  double budget_seconds = 20;
  // Whether PMHASH_CRASH_BUDGET (and PMHASH_TEST_SCALE) may change budget_seconds. A run that
  // must find a failure (a seeded bug, a torn one-flush write) sets false: a short budget would
  // stop it before the failing image and fail it for the wrong reason.
  bool budget_from_env = true;
  uint64_t max_images = 1000000;
  // At most this many crash states checked per operation (evenly spaced over its crash points);
  // 0: every one.
  size_t max_states_per_op = 0;
  int recovery_crash_every = 25;  // nested recovery-crash check on every Nth image
  bool eadr = false;
  bool tear_words = false;
  int64_t only_point = -1;  // replay: check this crash point only
  bool track_stores = false;  // every store is a possible eviction (eADR: a crash point)
  // Skewed keys: the first two thirds of the operations use keys whose hash has its top three
  // bits clear (one eighth of the hash space), so extendible directories grow deep there and
  // the other segments span wide strides (directory updates over several cache lines).
  bool skewed = false;
  // What the media holds when the pool is created (a devdax device is not zeroed): zeros, random
  // bytes, or an old pool of the same kind and size full of keys. Its first 8 bytes (the
  // magic) are zero in both, so the open formats it; the index must trust nothing else there.
  enum class Media { kZero, kRandom, kOldPool };
  Media dirty_media = Media::kZero;
  bool concurrent_reader = false;  // a reader thread probes the in-flight key (see above)
  int reader_wait_us = 2000;       // how long a crash point waits for the reader's answer
  // Background work (see above): Options::background_threads for every open the harness makes
  // (0: manual mode, the harness runs the tasks), and how often it runs them: after every Nth
  // operation (0: never; Close() drains them).
  uint32_t background_threads = 0;
  int background_every = 1;
  // > 0: every step of the workload is one WriteBatch of 1..write_batch ops (unique-key kinds;
  // one op in four reuses a key of its batch). A crash inside it may keep any subset of its ops,
  // of one key's ops a prefix: each key must recover to its state before the batch or after one
  // of the batch's ops on it, every other key unchanged.
  int write_batch = 0;

  // PMHASH_CRASH_SEED, PMHASH_CRASH_POINT, PMHASH_CRASH_BUDGET (seconds), PMHASH_TEST_SCALE.
  Config WithEnv() const {
    Config c = *this;
    if (const char* s = std::getenv("PMHASH_CRASH_SEED")) c.seed = std::strtoull(s, nullptr, 10);
    if (const char* s = std::getenv("PMHASH_CRASH_POINT"))
      c.only_point = std::strtoll(s, nullptr, 10);
    if (const char* s = std::getenv("PMHASH_CRASH_BUDGET"); s && budget_from_env)
      c.budget_seconds = std::strtod(s, nullptr);
    if (const char* s = std::getenv("PMHASH_TEST_SCALE")) {
      const double f = std::strtod(s, nullptr);
      if (f > 0) {
        c.ops = static_cast<int>(c.ops * f);
        if (budget_from_env) c.budget_seconds *= f;
      }
    }
    return c;
  }
};

struct Report {
  uint64_t crash_points = 0;
  uint64_t states_checked = 0;
  uint64_t images_checked = 0;
  uint64_t recovery_images_checked = 0;
  uint64_t stores_traced = 0;    // track_stores: stores reported by the tracer
  IndexStats stats;              // the workload index's Stats() before Close (coverage)
  uint64_t reads_in_flight = 0;  // concurrent mode: completed reads that saw the in-flight op
  uint64_t reads_blocked = 0;    // concurrent mode: reads still waiting when the state was taken
  uint64_t reads_probed = 0;     // concurrent mode: reads asked for
  uint64_t background_tasks_run = 0;  // background tasks the harness ran between operations
  bool budget_exhausted = false;
  std::string failure;  // empty: passed
};

// The oracle: every key's values, sorted. A unique-key index holds one value per key; a
// multi-value index (MultiIndex, e.g. pea-multi) any number, duplicates included.
using Model = std::map<Key, std::vector<Value>>;

inline void ModelSet(Model& m, Key k, Value v) { m[k] = {v}; }
inline void ModelAdd(Model& m, Key k, Value v) {
  std::vector<Value>& vals = m[k];
  vals.insert(std::upper_bound(vals.begin(), vals.end(), v), v);
}
inline bool ModelEraseOne(Model& m, Key k, Value v) {
  auto it = m.find(k);
  if (it == m.end()) return false;
  auto pos = std::lower_bound(it->second.begin(), it->second.end(), v);
  if (pos == it->second.end() || *pos != v) return false;
  it->second.erase(pos);
  if (it->second.empty()) m.erase(it);
  return true;
}
inline uint64_t ModelPairs(const Model& m) {
  uint64_t n = 0;
  for (const auto& [k, vals] : m) n += vals.size();
  return n;
}
inline bool ModelHas(const Model& m, Key k, Value v) {
  auto it = m.find(k);
  return it != m.end() && std::binary_search(it->second.begin(), it->second.end(), v);
}

// An index with background work (src/pm/background.h) exposes its executor.
template <class I>
concept HasBackgroundWork = requires(I& i) {
  { i.background() } -> std::same_as<pm::BackgroundWork&>;
};

// What a completed concurrent read returned.
struct Observation {
  Key key = 0;
  bool found = false;
  Value value = 0;
};

// Fills a new pool's mapping with `media` before the simulator (and the index) see it, then
// forwards every call: the simulator takes those bytes as what the media holds.
class DirtyMediaHook final : public pm::SimHook {
 public:
  DirtyMediaHook(pm::SimHook* next, std::vector<char> media)
      : next_(next), media_(std::move(media)) {}
  void OnMap(void* base, size_t len) override {
    if (!media_.empty()) {  // the first mapping only: the pool being created
      std::memcpy(base, media_.data(), std::min(len, media_.size()));
      media_.clear();
    }
    next_->OnMap(base, len);
  }
  void OnUnmap(void* base, size_t len) override { next_->OnUnmap(base, len); }
  void OnFlush(const void* addr, size_t len) override { next_->OnFlush(addr, len); }
  void OnFence() override { next_->OnFence(); }
  void OnNtCopyBegin(void* dst, size_t len) override { next_->OnNtCopyBegin(dst, len); }
  void OnNtCopy(void* dst, size_t len) override { next_->OnNtCopy(dst, len); }
  void OnStore(const void* addr, size_t len) override { next_->OnStore(addr, len); }

 private:
  pm::SimHook* next_;
  std::vector<char> media_;
};

// The concurrent reader: one thread that looks keys up on request. Probe() waits a bounded
// time; a read that has not finished by then is left to finish on its own (its answer is
// dropped) and the reader counts as busy until it does.
template <class IndexPtr>
class Prober {
 public:
  explicit Prober(IndexPtr index) : index_(index), thread_([this] { Loop(); }) {}
  ~Prober() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // The answer, or nothing if the reader did not finish within `wait_us` (or was still busy).
  std::optional<Observation> Probe(Key k, int wait_us) {
    std::unique_lock<std::mutex> g(mu_);
    if (done_ != asked_) return std::nullopt;  // an earlier read is still blocked
    asked_++;
    key_ = k;
    cv_.notify_all();
    if (!cv_.wait_for(g, std::chrono::microseconds(wait_us), [&] { return done_ == asked_; })) {
      return std::nullopt;
    }
    return result_;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> g(mu_);
    for (;;) {
      cv_.wait(g, [&] { return stop_ || asked_ != done_; });
      if (asked_ == done_) return;  // stop, nothing pending
      const Key k = key_;
      g.unlock();
      Observation o;
      o.key = k;
      o.found = index_->Find(k, &o.value).ok();
      g.lock();
      result_ = o;
      done_ = asked_;
      cv_.notify_all();
    }
  }

  IndexPtr index_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t asked_ = 0, done_ = 0;
  Key key_ = 0;
  Observation result_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the fields above exist
};

inline std::string TempPoolPath(const std::string& tag) {
  const char* dir = std::getenv("TMPDIR");
  std::string base = (access("/dev/shm", W_OK) == 0) ? "/dev/shm" : (dir ? dir : "/tmp");
  return base + "/pmhash-crash-" + tag + "-" + std::to_string(getpid()) + ".pool";
}

// IndexT is a template over a persist policy (e.g. reh::Reh).
template <template <class> class IndexT>
class Harness {
 public:
  using SimIndex = IndexT<pm::Sim>;
  using CheckIndex = IndexT<pm::Dram>;  // recovery of an image needs no flushing

  // `base_options` gives geometry, hash mode and pool size; path/durability/mode are set here.
  Harness(Config config, Options base_options, std::string test_name)
      : cfg_(config.WithEnv()),
        base_(WithSeed(std::move(base_options), cfg_.seed, cfg_.background_threads)),
        name_(std::move(test_name)) {}

  Report Run() {
    const std::string tag = name_ + "-" + std::to_string(cfg_.seed);
    path_ = TempPoolPath(tag);
    image_.emplace(TempPoolPath(tag + "-img"));
    unlink(path_.c_str());
    start_ = std::chrono::steady_clock::now();

    pm::CrashSimulator sim(pm::CrashSimConfig{cfg_.eadr, cfg_.tear_words});
    sim_ = &sim;
    const std::thread::id writer = std::this_thread::get_id();
    sim.set_crash_point_callback([&](uint64_t point) {
      // Crash points of the concurrent reader's own fences: the writer's points cover them.
      if (std::this_thread::get_id() != writer) return;
      if (cfg_.only_point >= 0 && static_cast<int64_t>(point) != cfg_.only_point) return;
      if (Exhausted()) return;
      // With max_states_per_op, capture every capture_stride_-th point only, and halve what is
      // kept (doubling the stride) whenever twice the cap is held: evenly spaced states, at a
      // bounded cost in copies of the image, however many crash points the operation has.
      if (cfg_.max_states_per_op && phase_points_++ % capture_stride_ != 0) return;
      Captured c;
      if (prober_ && in_flight_) {
        report_.reads_probed++;
        c.seen = prober_->Probe(*in_flight_, cfg_.reader_wait_us);
        if (!c.seen) report_.reads_blocked++;
      }
      c.state = sim.Capture();  // after the read: what it saw happened before this crash
      captured_.push_back(std::move(c));
      if (cfg_.max_states_per_op && captured_.size() >= 2 * cfg_.max_states_per_op) {
        // Keep the even-numbered states; the first stays where it is (a self-move-assignment
        // of std::vector empties it in libstdc++).
        size_t kept = 1;
        for (size_t i = 2; i < captured_.size(); i += 2) captured_[kept++] = std::move(captured_[i]);
        captured_.resize(kept);
        capture_stride_ *= 2;
      }
    });
    // With track_stores the pool reports to the tracer, which forwards everything to `sim`.
    std::optional<StoreTracer> tracer;
    if (cfg_.track_stores) tracer.emplace(&sim);
    pm::SimHook* hook = tracer ? static_cast<pm::SimHook*>(&*tracer) : &sim;
    std::optional<DirtyMediaHook> dirty;
    if (cfg_.dirty_media != Config::Media::kZero) {
      std::vector<char> media = DirtyMedia();
      if (media.empty()) {
        report_.failure = "could not build the dirty media image";
        return Finish();
      }
      hook = &dirty.emplace(hook, std::move(media));
    }
    pm::SimHook* prev = pm::SetThreadSimHook(hook);

    // Phase 1: creation.
    Options o = base_;
    o.path = path_;
    o.durability = Durability::kSim;
    o.mode = OpenMode::kCreateExclusive;
    auto opened = SimIndex::Open(o);
    if (!opened.ok()) {
      pm::SetThreadSimHook(prev);
      report_.failure = "create failed: " + opened.status().ToString();
      return Finish();
    }
    std::unique_ptr<SimIndex> index = std::move(opened).value();
    op_desc_ = "create";
    VerifyCaptured(Model{}, Model{}, /*creation=*/true);
    std::optional<Prober<SimIndex*>> prober;
    if (cfg_.concurrent_reader) prober_ = &prober.emplace(index.get());

    // Phase 2: workload.
    std::mt19937_64 rng(cfg_.seed);
    const Hasher hash(base_.hash_mode.value_or(HashMode::kStrong), *base_.hash_seed);
    // The hash the index files k under: a records kind hashes the key's 8 bytes.
    bool records = false;
    if constexpr (requires { index->SupportsBytes(); }) records = index->SupportsBytes();
    auto key_hash = [&](Key k) {
      return records ? hash(std::string_view(reinterpret_cast<const char*>(&k), sizeof(k)))
                     : hash(k);
    };
    Model model;
    // A multi-value index: half of the operations on two hot keys (many values each, exact
    // duplicates too: values from a small set; no EraseAll of them in the first half of the run,
    // so that their values outgrow a buffer), half on a quarter of the key range (splits).
    constexpr bool kMulti = MultiIndex<SimIndex>;
    auto draw = [&]() -> Key {
      if (!kMulti) return rng() % cfg_.key_range;
      return rng() % 2 ? rng() % 2 : 2 + rng() % std::max<uint64_t>(cfg_.key_range / 4, 8);
    };
    int step = 0;  // the workload's operation (or batch) number
    auto draw_key = [&] {
      Key k = draw();
      if (cfg_.skewed && step < cfg_.ops * 2 / 3) {
        while (key_hash(k) >> 61) k = draw();
      }
      return k;
    };
    for (int i = 0; i < cfg_.ops && report_.failure.empty(); i++) {
      step = i;
      Key k = draw_key();
      Value v = kMulti ? rng() % 16 : rng();
      const int r = static_cast<int>(rng() % 100);
      Model before = model;
      Status s;
      std::ostringstream d;
      d << "op " << i << ": ";
      in_flight_ = k;
      if constexpr (kMulti) {
        const bool hot_early = k < 2 && i < cfg_.ops / 2;
        if (r < 75 || (hot_early && r >= 97)) {
          d << "Insert(" << k << ", " << v << ")";
          s = index->Insert(k, v);
          if (s.ok()) ModelAdd(model, k, v);
        } else if (r < 97) {
          auto it = model.find(k);
          if (it != model.end() && rng() % 4 != 0) v = it->second[rng() % it->second.size()];
          d << "Erase(" << k << ", " << v << ")";
          s = index->Erase(k, v);
          if (s.ok() != ModelEraseOne(model, k, v)) {
            report_.failure = d.str() + " disagrees with the model: " + s.ToString();
          }
        } else {
          d << "EraseAll(" << k << ")";
          s = index->EraseAll(k);
          if (s.ok()) model.erase(k);
        }
      } else if (cfg_.write_batch > 0) {
        s = RunBatch(*index, rng, draw_key, k, model, d);
      } else if (r < 50) {
        d << "Insert(" << k << ")";
        s = index->Insert(k, v);
        if (s.ok()) ModelSet(model, k, v);
      } else if (r < 65) {
        d << "Upsert(" << k << ")";
        s = index->Upsert(k, v);
        if (s.ok()) ModelSet(model, k, v);
      } else if (r < 75) {
        d << "Update(" << k << ")";
        s = index->Update(k, v);
        if (s.ok()) ModelSet(model, k, v);
      } else {
        d << "Erase(" << k << ")";
        s = index->Erase(k);
        if (s.ok()) model.erase(k);
      }
      in_flight_.reset();
      op_desc_ = d.str();
      if (!report_.failure.empty()) break;
      if (!s.ok() && !s.IsExists() && !s.IsNotFound()) {
        report_.failure = op_desc_ + " returned " + s.ToString();
        break;
      }
      sim.CrashPoint();  // operation boundary (and: before the background tasks below)
      VerifyCaptured(before, model, false);
      batch_states_.clear();
      if (cfg_.background_every > 0 && (i + 1) % cfg_.background_every == 0) {
        RunBackground(*index, sim, model);
      }
    }
    prober_ = nullptr;
    prober.reset();  // joins the reader before Close
    report_.stats = index->Stats();
    if (report_.failure.empty()) {
      op_desc_ = "close";
      if (Status s = index->Close(); !s.ok()) report_.failure = "close returned " + s.ToString();
      index.reset();
      VerifyCaptured(model, model, false);
    }
    if (index) index->Abandon();  // a failed run: no clean mark after the failure
    index.reset();
    pm::SetThreadSimHook(prev);
    report_.crash_points = sim.crash_points();
    if (tracer) report_.stores_traced = tracer->stores();
    return Finish();
  }

 private:
  // The hash seed derives from the run seed too: one number replays everything. Background
  // work runs in the mode the configuration asks for (manual by default).
  static Options WithSeed(Options o, uint64_t seed, uint32_t background_threads) {
    o.hash_seed = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    o.background_threads = background_threads;
    return o;
  }

  // One WriteBatch step (Config::write_batch) whose first key is `first`: its ops, their expected
  // statuses from `model` (applied op by op), and batch_states_ for the checks. Returns OK, or
  // the first status that is neither OK, kExists nor kNotFound (the caller reports it).
  template <class DrawKey>
  Status RunBatch(SimIndex& index, std::mt19937_64& rng, DrawKey& draw_key, Key first,
                  Model& model, std::ostringstream& d) {
    const size_t n = 1 + rng() % static_cast<uint64_t>(cfg_.write_batch);
    std::vector<WriteOp> ops;
    std::vector<Status> want;
    d << "WriteBatch(";
    for (size_t i = 0; i < n; i++) {
      WriteOp op;
      op.key = i == 0 ? first : rng() % 4 == 0 ? ops[rng() % i].key : draw_key();
      op.value = rng();
      const int r = static_cast<int>(rng() % 100);
      op.kind = r < 50   ? WriteKind::kInsert
                : r < 65 ? WriteKind::kUpsert
                : r < 75 ? WriteKind::kUpdate
                         : WriteKind::kErase;
      static constexpr const char* kNames[] = {"Insert", "Update", "Upsert", "Erase"};
      d << (i ? ", " : "") << kNames[static_cast<int>(op.kind)] << "(" << op.key << ")";
      auto& states = batch_states_[op.key];
      auto it = model.find(op.key);
      if (states.empty()) states.push_back(it == model.end() ? std::vector<Value>{} : it->second);
      const bool present = it != model.end();
      Status w = Status::OK();
      if (op.kind == WriteKind::kErase) {
        if (present) model.erase(it); else w = Status::NotFound();
      } else if (op.kind == WriteKind::kInsert && present) {
        w = Status::Exists();
      } else if (op.kind == WriteKind::kUpdate && !present) {
        w = Status::NotFound();
      } else {
        ModelSet(model, op.key, op.value);
      }
      states.push_back(model.count(op.key) ? model[op.key] : std::vector<Value>{});
      want.push_back(w);
      ops.push_back(op);
    }
    d << ")";
    std::vector<Status> got(n, Status::Corruption("not written"));
    batch_probe_key_ = first;
    if constexpr (requires { index.WriteBatch(ops, std::span<Status>(got)); }) {
      if (Status s = index.WriteBatch(ops, got); !s.ok()) return s;
    } else {
      report_.failure = "Config::write_batch: this index has no WriteBatch";
      return Status::OK();
    }
    for (size_t i = 0; i < n; i++) {
      if (got[i].code() == want[i].code()) continue;
      if (!got[i].ok() && !got[i].IsExists() && !got[i].IsNotFound()) return got[i];
      report_.failure = d.str() + ": op " + std::to_string(i) + " returned " +
                        got[i].ToString() + ", the model says " + want[i].ToString();
      return Status::OK();
    }
    return Status::OK();
  }

  // The batch's answers (batch_states_): every key in one of its states, keys it did not touch
  // as before it; the probed key from position `min_pos` on. "" or what is wrong.
  std::string CheckBatchStates(const Model& got, const Model& before, size_t min_pos) const {
    static const std::vector<Value> kAbsent;
    auto state = [](const Model& m, Key k) -> const std::vector<Value>& {
      auto it = m.find(k);
      return it == m.end() ? kAbsent : it->second;
    };
    for (const Model* m : {&got, &before}) {
      for (const auto& kv : *m) {
        if (!batch_states_.count(kv.first) && state(got, kv.first) != state(before, kv.first)) {
          return "key " + std::to_string(kv.first) +
                 " changed, and the batch in flight has no op on it";
        }
      }
    }
    for (const auto& [k, states] : batch_states_) {
      const size_t from = k == batch_probe_key_ ? min_pos : 0;
      const auto& g = state(got, k);
      if (std::find(states.begin() + static_cast<std::ptrdiff_t>(from), states.end(), g) ==
          states.end()) {
        return "key " + std::to_string(k) + " recovered to " +
               (g.empty() ? std::string("absent") : std::to_string(g[0])) +
               ", which no prefix of the batch's ops on it leaves" +
               (from ? " after the state a completed read saw" : "");
      }
    }
    return "";
  }

  // Runs the workload index's queued background tasks on this (the writer) thread, one at a
  // time, with a crash point after each; the operation's boundary was the point before the
  // first. Background work changes no contents: every image must recover to `model`.
  void RunBackground(SimIndex& index, pm::CrashSimulator& sim, const Model& model) {
    if constexpr (HasBackgroundWork<SimIndex>) {
      if (!report_.failure.empty()) return;
      pm::BackgroundWork& bg = index.background();
      uint64_t n = 0;
      while (bg.RunOne()) {
        n++;
        sim.CrashPoint();  // after this task (before the next one)
      }
      if (n == 0) return;
      report_.background_tasks_run += n;
      op_desc_ += ", then " + std::to_string(n) + " background task(s)";
      if (Status s = bg.status(); !s.ok()) {
        report_.failure = op_desc_ + ": a background task returned " + s.ToString();
        return;
      }
      VerifyCaptured(model, model, false);
    } else {
      (void)index;
      (void)sim;
      (void)model;
    }
  }

  // The bytes a new pool's media holds (Config::dirty_media), magic zeroed; empty on failure.
  std::vector<char> DirtyMedia() {
    std::vector<char> media(base_.pool_size);
    if (cfg_.dirty_media == Config::Media::kRandom) {
      std::mt19937_64 rng(cfg_.seed ^ 0xD1127ULL);
      for (size_t i = 0; i + 8 <= media.size(); i += 8) {
        const uint64_t w = rng();
        std::memcpy(media.data() + i, &w, 8);
      }
    } else {
      // An old pool: same kind and geometry, another seed, filled and closed.
      const std::string old = TempPoolPath(name_ + "-old");
      unlink(old.c_str());
      Options o = base_;
      o.path = old;
      o.durability = Durability::kDram;
      o.mode = OpenMode::kCreateExclusive;
      o.hash_seed = *base_.hash_seed ^ 0x5EEDULL;
      auto r = CheckIndex::Open(o);
      if (!r.ok()) return {};
      std::mt19937_64 rng(cfg_.seed ^ 0x01DULL);
      for (uint64_t i = 0; i < cfg_.key_range; i++) {
        const Key k = rng() % (4 * cfg_.key_range);
        if (rng() % 4 == 0) {
          (void)r.value()->Erase(k);
        } else if constexpr (MultiIndex<CheckIndex>) {
          (void)r.value()->Insert(k % 64, rng());  // a multi pool: many values per key
        } else {
          (void)r.value()->Upsert(k, rng());
        }
      }
      (void)r.value()->Close();
      r.value().reset();
      const int fd = ::open(old.c_str(), O_RDONLY);
      const ssize_t got = fd < 0 ? -1 : pread(fd, media.data(), media.size(), 0);
      if (fd >= 0) close(fd);
      unlink(old.c_str());
      if (got != static_cast<ssize_t>(media.size())) return {};
    }
    std::memset(media.data(), 0, 8);  // the magic: unformatted
    return media;
  }

  bool Exhausted() {
    if (report_.images_checked >= cfg_.max_images) report_.budget_exhausted = true;
    if (Elapsed() > cfg_.budget_seconds && MinimumChecked()) report_.budget_exhausted = true;
    return report_.budget_exhausted;
  }
  // The time budget applies only once a minimum has been checked: some states, and enough images
  // for a nested crash during recovery. On a slow machine (a sanitizer build on a loaded runner)
  // capturing one phase, e.g. a creation under eADR where every store is a crash point, can
  // take the whole budget; without the minimum such a run checked nothing and passed vacuously.
  bool MinimumChecked() const {
    constexpr uint64_t kMinStates = 8;
    const uint64_t min_images =
        cfg_.recovery_crash_every > 0 ? static_cast<uint64_t>(cfg_.recovery_crash_every) : 1;
    return report_.states_checked >= kMinStates && report_.images_checked >= min_images;
  }
  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  Report Finish() {
    unlink(path_.c_str());
    if (image_) image_->Remove();
    return report_;
  }

  // Recovers the pool at `path` with a fresh index object and checks it against the oracle.
  // Returns "" if fine, else what is wrong.
  // `after_only`: a completed concurrent read saw the in-flight operation, so `before` is no
  // longer an acceptable answer.
  // In a batch step, `after_only` holds the position of the state the read saw (batch_states_).
  std::string CheckRecovered(const std::string& path, const Model& before, const Model& after,
                             bool creation, bool keep_working, size_t after_only = 0) {
    Options o = base_;
    o.path = path;
    o.durability = Durability::kDram;
    o.mode = creation ? OpenMode::kOpenOrCreate : OpenMode::kOpenExisting;
    auto r = CheckIndex::Open(o);
    if (!r.ok()) return "recovery failed: " + r.status().ToString();
    auto& idx = *r.value();
    Model got;
    if (Status s = idx.ForEach([&](Key k, Value v) { ModelAdd(got, k, v); }); !s.ok()) {
      return "ForEach after recovery: " + s.ToString();
    }
    if constexpr (!MultiIndex<CheckIndex>) {
      for (const auto& [k, vals] : got) {
        if (vals.size() > 1) return "duplicate key " + std::to_string(k) + " after recovery";
      }
    }
    if (!batch_states_.empty()) {
      if (std::string e = CheckBatchStates(got, before, after_only); !e.empty()) return e;
    } else if (after_only && got != after && got == before) {
      return "a completed concurrent read saw the in-flight operation, but recovery undid it "
             "(the read returned a write that was not yet durable)";
    }
    if (batch_states_.empty() && got != before && got != after) {
      std::ostringstream m;
      m << "recovered contents match neither side of the in-flight op (got " << got.size()
        << " keys, before " << before.size() << ", after " << after.size() << ")";
      for (const auto& [k, vals] : got) {
        for (Value v : vals) {
          if (!ModelHas(after, k, v) && !ModelHas(before, k, v)) {
            m << "; phantom/wrong pair " << k << " -> " << v;
            break;
          }
        }
      }
      for (const auto& [k, vals] : before) {
        if (!got.count(k) && after.count(k)) {
          m << "; lost key " << k;
          break;
        }
      }
      return m.str();
    }
    if (idx.Size() != ModelPairs(got)) return "Size() != scan";
    if (Status s = idx.CheckInvariants(); !s.ok()) return s.ToString();
    if constexpr (HasBackgroundWork<CheckIndex>) {
      // What recovery queued (a lazy rebuild) runs now, and changes nothing visible.
      idx.background().RunPending();
      if (Status s = idx.background().status(); !s.ok()) {
        return "background task after recovery: " + s.ToString();
      }
      Model again;
      if (Status s = idx.ForEach([&](Key k, Value v) { ModelAdd(again, k, v); }); !s.ok()) {
        return "ForEach after background work: " + s.ToString();
      }
      if (again != got) return "background work after recovery changed the contents";
      if (Status s = idx.CheckInvariants(); !s.ok()) return "after background work: " + s.ToString();
    }
    if (keep_working) {
      // The recovered index must keep working.
      for (uint64_t j = 0; j < 40; j++) {
        const Key k = cfg_.key_range + 1000 + j * 7919;
        if (Status s = idx.Insert(k, j); !s.ok()) return "post-recovery insert: " + s.ToString();
      }
      for (uint64_t j = 0; j < 40; j += 3) {
        if (Status s = idx.Erase(cfg_.key_range + 1000 + j * 7919); !s.ok()) {
          return "post-recovery erase: " + s.ToString();
        }
      }
      if (Status s = idx.CheckInvariants(); !s.ok()) return "after more ops: " + s.ToString();
      if constexpr (HasBackgroundWork<CheckIndex>) {
        idx.background().RunPending();
        if (Status s = idx.background().status(); !s.ok()) {
          return "background task after more ops: " + s.ToString();
        }
        if (Status s = idx.CheckInvariants(); !s.ok()) {
          return "after more ops and background work: " + s.ToString();
        }
      }
    }
    return "";
  }

  // Crash during recovery: recover the image file under a second simulator and check every image
  // of every crash point of that recovery.
  std::string CheckRecoveryCrashes(const Model& before, const Model& after, bool creation) {
    pm::CrashSimulator rsim(pm::CrashSimConfig{cfg_.eadr, cfg_.tear_words});
    std::vector<pm::CrashSimulator::State> states;
    rsim.set_crash_point_callback([&](uint64_t) { states.push_back(rsim.Capture()); });
    pm::SimHook* prev = pm::SetThreadSimHook(&rsim);
    {
      Options o = base_;
      o.path = image_->path();
      o.durability = Durability::kSim;
      o.mode = creation ? OpenMode::kOpenOrCreate : OpenMode::kOpenExisting;
      auto r = SimIndex::Open(o);
      if (r.ok()) {
        rsim.CrashPoint();  // recovery done, before any new operation
        if constexpr (HasBackgroundWork<SimIndex>) {
          while (r.value()->background().RunOne()) rsim.CrashPoint();  // work recovery queued
        }
      }
    }
    pm::SetThreadSimHook(prev);
    ImageFile nested(TempPoolPath(name_ + "-rec"));
    std::string err;
    for (const auto& st : states) {
      pm::ForEachCrashChoice(
          st, cfg_.seed ^ st.point, 1, 4, [&](const pm::CrashSimulator::Choice& c) {
            std::vector<char> img(st.persisted.size());
            pm::CrashSimulator::BuildImage(st, c, img.data());
            if (Status s = nested.Write(img); !s.ok()) {
              err = s.ToString();
              return false;
            }
            report_.recovery_images_checked++;
            err = CheckRecovered(nested.path(), before, after, creation, false);
            if (!err.empty())
              err = "crash during recovery (recovery point " + std::to_string(st.point) + ", " +
                    pm::CrashSimulator::DescribeChoice(st, c) + "): " + err;
            return err.empty();
          });
      if (!err.empty()) break;
    }
    nested.Remove();
    return err;
  }

  void VerifyCaptured(const Model& before, const Model& after, bool creation) {
    // Verification opens pools: keep the workload's simulator out of it.
    pm::SimHook* prev = pm::SetThreadSimHook(nullptr);
    std::vector<Captured> states = std::move(captured_);
    captured_.clear();
    phase_points_ = 0;
    capture_stride_ = 1;
    const size_t stride = cfg_.max_states_per_op && states.size() > cfg_.max_states_per_op
                              ? (states.size() + cfg_.max_states_per_op - 1) / cfg_.max_states_per_op
                              : 1;
    for (size_t i = 0; i < states.size(); i += stride) {
      const Captured& cap = states[i];
      // The budget bounds the checking too: one phase (a creation under eADR, where every
      // store is a crash point) can capture thousands of states before the first check.
      if (!report_.failure.empty() || Exhausted()) break;
      const pm::CrashSimulator::State& st = cap.state;
      if (st.persisted.empty()) {
        report_.failure = "internal: a captured crash state has no persisted image";
        break;
      }
      report_.states_checked++;
      size_t after_only = 0;
      if (cap.seen && !batch_states_.empty()) {
        // The first of the probed key's states that the read matches: recovery may not go back
        // before it.
        const auto& states = batch_states_[cap.seen->key];
        size_t pos = 0;
        auto as_model = [&](const std::vector<Value>& vals) {
          return vals.empty() ? Model{} : Model{{cap.seen->key, vals}};
        };
        while (pos < states.size() && !Matches(as_model(states[pos]), *cap.seen)) pos++;
        if (states.empty() || pos == states.size()) {
          report_.failure = "a concurrent read of key " + std::to_string(cap.seen->key) +
                            " returned a state that no prefix of " + op_desc_ + " leaves";
          break;
        }
        after_only = pos;
        if (after_only) report_.reads_in_flight++;
      } else if (cap.seen) {
        const bool as_before = Matches(before, *cap.seen), as_after = Matches(after, *cap.seen);
        if (!as_before && !as_after) {
          report_.failure = "a concurrent read of key " + std::to_string(cap.seen->key) +
                            " returned a state that is neither before nor after " + op_desc_;
          break;
        }
        after_only = as_after && !as_before;
        if (after_only) report_.reads_in_flight++;
      }
      std::vector<char> img(st.persisted.size());
      pm::ForEachCrashChoice(
          st, cfg_.seed ^ (st.point * 0x9E3779B97F4A7C15ULL), cfg_.random_images, cfg_.max_pairs,
          [&](const pm::CrashSimulator::Choice& c) {
            pm::CrashSimulator::BuildImage(st, c, img.data());
            if (Status s = image_->Write(img); !s.ok()) {
              report_.failure = s.ToString();
              return false;
            }
            report_.images_checked++;
            std::string err =
                CheckRecovered(image_->path(), before, after, creation, true, after_only);
            if (err.empty() && cfg_.recovery_crash_every > 0 &&
                report_.images_checked % cfg_.recovery_crash_every == 0) {
              if (Status s = image_->Write(img); s.ok()) {
                err = CheckRecoveryCrashes(before, after, creation);
              }
            }
            if (!err.empty()) {
              const auto shrunk = Shrink(st, c, before, after, creation, after_only);
              std::ostringstream m;
              m << "crash image fails: " << err << "\n  seed " << cfg_.seed << ", " << op_desc_
                << ", crash point " << st.point << " (" << st.lines.size()
                << " lines differ from the persisted image)"
                << (after_only ? ", a concurrent read had seen the op" : "")
                << "\n  line versions: "
                << pm::CrashSimulator::DescribeChoice(st, shrunk)
                << "\n  replay: PMHASH_CRASH_SEED=" << cfg_.seed
                << " PMHASH_CRASH_POINT=" << st.point << " <this test binary> --gtest_filter='*"
                << name_ << "*'";
              report_.failure = m.str();
              return false;
            }
            return report_.images_checked < cfg_.max_images;
          });
    }
    pm::SetThreadSimHook(prev);
  }

  // Drops line versions from a failing choice while it keeps failing.
  pm::CrashSimulator::Choice Shrink(const pm::CrashSimulator::State& st,
                                    pm::CrashSimulator::Choice c, const Model& before,
                                    const Model& after, bool creation, size_t after_only) {
    std::vector<char> img(st.persisted.size());
    auto fails = [&](const pm::CrashSimulator::Choice& x) {
      pm::CrashSimulator::BuildImage(st, x, img.data());
      if (!image_->Write(img).ok()) return false;
      return !CheckRecovered(image_->path(), before, after, creation, true, after_only).empty();
    };
    for (size_t i = 0; i < st.lines.size(); i++) {
      pm::CrashSimulator::Choice t = c;
      if (!t.word_version.empty()) {
        t.word_version[i].fill(0);
      } else if (i < t.line_version.size() && t.line_version[i] != 0) {
        t.line_version[i] = 0;
      } else {
        continue;
      }
      if (fails(t)) c = t;
    }
    return c;
  }

  // A crash point's state, and what the concurrent reader saw just before it was taken.
  struct Captured {
    pm::CrashSimulator::State state;
    std::optional<Observation> seen;
  };
  // (A multi-value index's Find returns one of the key's values.)
  static bool Matches(const Model& m, const Observation& o) {
    return o.found ? ModelHas(m, o.key, o.value) : m.find(o.key) == m.end();
  }

  const Config cfg_;
  const Options base_;
  const std::string name_;
  std::string path_;
  std::optional<ImageFile> image_;  // where crash images are written (image_file.h)
  std::chrono::steady_clock::time_point start_;
  pm::CrashSimulator* sim_ = nullptr;
  std::vector<Captured> captured_;
  uint64_t phase_points_ = 0;    // crash points of the current operation (max_states_per_op)
  uint64_t capture_stride_ = 1;  // capture every Nth of them
  Prober<SimIndex*>* prober_ = nullptr;
  std::optional<Key> in_flight_;  // the key of the operation in flight (concurrent mode)
  // A batch step (Config::write_batch): every state each of its keys may recover to, in order
  // (before the batch, then after each of its ops on the key); empty between batches and in
  // single-op runs. batch_probe_key_: its first key, the one the concurrent reader looks up.
  std::map<Key, std::vector<std::vector<Value>>> batch_states_;
  Key batch_probe_key_ = 0;
  std::string op_desc_;
  Report report_;
};

}  // namespace pmhash::crashtest
