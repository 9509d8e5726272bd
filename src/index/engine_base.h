// src/index/engine_base.h — the part of an engine that every index design has in common.
//
// Every engine (REH, Pea, Turbo, and the ones to come) owns a pool, runs with a Config (the
// pool's stored parameters plus this open's options), hashes keys with the pool's seed and mode,
// persists through one Persister, counts its size and its resizes, remembers how its last open
// went, and follows one lifecycle (src/index/lifecycle.h). EngineBase holds exactly that, so an
// engine declares only what makes it different — its layout, its write path, its recovery.
// It is a base class in the CRTP style (Boost.Unordered FOA: one core, variation by small
// template parameters): the uint64 write calls dispatch to the engine's
//
//     Status Write(Key, Value, index::WriteMode);     // insert, update or upsert one pair
//
// which the engine may keep private. An engine names its base once, first in its class body:
//
//     template <pm::PersistPolicy P>
//     class Reh : public index::EngineBase<Reh<P>, P, Config> {
//       PMHASH_ENGINE(Reh, P, Config, Descriptor);  // Base, kKindName, Open, Find, ..., ~Reh()
//
// Members are protected, not private: they are the engine's own state, shared with it only to
// avoid declaring them three times. Destruction order: members of the engine are destroyed
// before this base, so the pool (here) outlives every engine member that points into it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>

#include "common/hash.h"
#include "index/batch.h"
#include "common/resize_log.h"
#include "common/striped_counter.h"
#include "index/descriptor.h"
#include "index/lifecycle.h"
#include "pm/persist.h"
#include "pm/pool.h"
#include "pm/saved_state.h"
#include "pmhash/stats.h"
#include "pmhash/status.h"
#include "pmhash/index.h"

namespace pmhash::index {

// (WriteMode, the mode of an engine's Write, is declared in index/batch.h, which uses it too.)

template <class Engine, pm::PersistPolicy P, class Config>
class EngineBase {
 public:
  using Policy = P;

  EngineBase(const EngineBase&) = delete;
  EngineBase& operator=(const EngineBase&) = delete;

  Status Insert(Key k, Value v) { return self().Write(k, v, WriteMode::kInsert); }
  Status Update(Key k, Value v) { return self().Write(k, v, WriteMode::kUpdate); }
  Status Upsert(Key k, Value v) { return self().Write(k, v, WriteMode::kUpsert); }
  // The engine's batched writes if it has them (src/index/batch.h), else one call per op.
  Status WriteBatch(std::span<const WriteOp> ops, std::span<Status> statuses) {
    return BatchCalls::Write(self(), ops, statuses);
  }
  // Live pairs (an engine that counts otherwise declares its own Size()).
  uint64_t Size() const { return static_cast<uint64_t>(size_.Sum()); }
  // Clean shutdown (src/index/lifecycle.h): the engine's Quiesce() — epoch drain, background
  // work; none by default — then, for an engine with `void SaveState(pm::StateWriter&) const`
  // on a persistent policy, the image of its DRAM state (src/pm/saved_state.h, S1), then the
  // pool's clean mark. Idempotent.
  Status Close() {
    return life_.Close(*pool_, [this]() -> Status {
      PMHASH_RETURN_IF_ERROR(Lifecycle::Run([this] { return self().Quiesce(); }));
      if constexpr (P::kPersistent && requires(pm::StateWriter& w) { self().SaveState(w); }) {
        return pm::SaveStateImage(*pool_, [this](pm::StateWriter& w) { self().SaveState(w); });
      }
      return Status::OK();
    });
  }
  // The destructor will leave the pool as a crash would (src/index/lifecycle.h).
  void Abandon() { life_.Abandon(); }
  void ResetCounters() { pool_->counters().Reset(); }

  // For tests and tools.
  pm::Pool& pool() { return *pool_; }

 protected:
  // The start of every engine's Open (descriptor D): the pool opened or created and its
  // parameters resolved (OpenIndexPool, src/index/descriptor.h), the Config made of them plus this
  // open's options (CommonOpenOptions, then the engine's own `Config::SetOpenOptions(const
  // Options&)` if it has one), and the engine object built on
  // both, not yet created nor recovered. REQUIRES: Engine(std::unique_ptr<pm::Pool>, const Config&).
  template <class D>
  static Result<std::unique_ptr<Engine>> NewEngine(const Options& options) {
    auto opened = OpenIndexPool<D>(options, P::kDurability);
    if (!opened.ok()) return opened.status();
    Config config;
    static_cast<typename D::Stored&>(config) = opened->params;
    config.SetCommonOptions(options);
    if constexpr (requires { config.SetOpenOptions(options); }) config.SetOpenOptions(options);
    std::unique_ptr<Engine> e(new (std::nothrow) Engine(std::move(opened->pool), config));
    if (!e) return Status::OutOfMemory(std::string(D::kName) + ": index object");
    return e;
  }

  // Every engine's Open: NewEngine, then the engine's `Status Init()` if it has one (DRAM
  // structures sized by the Config), its `Status Create()` if the pool is new, and always its
  // `Status Recover()` (a new pool is recovered like any other: one path to trust), unless the
  // engine loaded the image of its DRAM state that the last clean Close saved (LoadState, S2-S3
  // of src/pm/saved_state.h). Recover starts from an empty allocator (it marks every chunk it
  // reaches: what it does not reach is free, so nothing leaks) and rebuilds every DRAM structure
  // (REQUIRES: including any a failed LoadState left half built); the base records whether the
  // open recovered from a crash, whether it loaded an image, and how long either took.
  // A descriptor may check this open's options first (`static Status CheckOptions(const
  // Options&)`), before any file is opened or created.
  template <class D>
  static Result<std::unique_ptr<Engine>> OpenAs(const Options& options) {
    if constexpr (requires { D::CheckOptions(options); }) {
      PMHASH_RETURN_IF_ERROR(D::CheckOptions(options));
    }
    auto r = NewEngine<D>(options);
    if (!r.ok()) return r;
    Engine& e = **r;
    Status s = Status::OK();
    if constexpr (requires { e.Init(); }) s = e.Init();
    if (s.ok() && e.pool_->created()) s = e.Create();
    const auto t0 = std::chrono::steady_clock::now();
    if (s.ok()) {
      // After a clean Close, the image it saved (src/pm/saved_state.h; engines with
      // `Status LoadState(pm::StateReader&)`), else the walk.
      if constexpr (requires(pm::StateReader& r) { e.LoadState(r); }) {
        e.state_loaded_ = pm::LoadStateImage(
            *e.pool_, [&e](pm::StateReader& r) { return e.LoadState(r); });
      } else {
        e.pool_->allocator().Reset();
      }
      if (!e.state_loaded_) s = e.Recover();
    }
    if (!s.ok()) {
      // A failed open is abandoned: its destructor must not Close (no Quiesce over half-built
      // state, and no clean mark, which would make the next open trust what Close saves).
      e.Abandon();
      return s;
    }
    e.recovered_ = !e.pool_->created() && !e.pool_->was_clean();
    e.recovery_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

  EngineBase(std::unique_ptr<pm::Pool> pool, const Config& config)
      : pool_(std::move(pool)),
        params_(config),
        hash_(pool_->hash_mode(), pool_->hash_seed()),
        persist_(pool_->persist_target()) {}
  ~EngineBase() = default;

  // For the engine's destructor (the base's runs too late: the engine is gone by then).
  void CloseUnlessAbandoned() {
    if (life_.CloseOnDestroy()) (void)Close();
  }
  void Quiesce() {}
  void FreeDram() {}

  // The IndexStats fields every engine fills the same way: live pairs, pool size, resize counts
  // and durations, how the last open went, traffic and mapping. `splits` counts the engine's own
  // structural growth events (splits_ unless it says otherwise).
  void FillCommonStats(IndexStats* s) const {
    s->size = self().Size();
    s->pool_bytes = pool_->size();
    s->splits = splits_.load(std::memory_order_relaxed);
    s->doublings = doublings_.load(std::memory_order_relaxed);
    s->resize_ns = resize_log_.Snapshot();
    s->recovered = recovered_;
    s->recovery_seconds = recovery_seconds_;
    s->state_loaded = state_loaded_;
    s->traffic = pool_->counters().Snapshot();
    s->mapping = std::string(pm::MappingName(pool_->mapping()));
  }

  // The accounting every CheckInvariants ends with, after its walk: the allocator holds exactly
  // the chunks the walk reached (more: a leak; fewer: a chunk in use that the allocator would
  // hand out again), and Size() is the number of live pairs it found. "" or what is wrong.
  std::string CheckAccounting(uint64_t reachable_chunks, uint64_t live) const {
    const uint64_t used = pool_->allocator().used_chunks();
    if (used != reachable_chunks) {
      return "allocated chunks (" + std::to_string(used) + ") != reachable chunks (" +
             std::to_string(reachable_chunks) + ")" + (used > reachable_chunks ? ": leak" : "");
    }
    if (const uint64_t size = self().Size(); size != live) {
      return "Size() (" + std::to_string(size) + ") != live pairs (" + std::to_string(live) + ")";
    }
    return "";
  }

  std::unique_ptr<pm::Pool> pool_;
  const Config params_;
  Hasher hash_;
  pm::Persister<P> persist_;

  StripedCounter size_;
  std::atomic<uint64_t> splits_{0};
  std::atomic<uint64_t> doublings_{0};
  ResizeLog resize_log_;  // durations of the events counted in splits_ and doublings_
  bool recovered_ = false;
  bool state_loaded_ = false;  // this open loaded the image of a clean Close (saved_state.h)
  double recovery_seconds_ = 0;
  Lifecycle life_;

 private:
  Engine& self() { return static_cast<Engine&>(*this); }
  const Engine& self() const { return static_cast<const Engine&>(*this); }
};

// What an engine's CheckInvariants returns for a broken invariant:
//   const InvariantFailure fail{kKindName};  ...  if (...) return fail("why");
struct InvariantFailure {
  std::string_view kind;
  Status operator()(const std::string& what) const {
    return Status::Corruption(std::string(kind) + " invariant: " + what);
  }
};

}  // namespace pmhash::index

// The explicit instantiations of an engine for every durability policy: once with `extern` in
// its header (users link to the library's copy instead of compiling the engine again), once
// without in its .cc. Extra template arguments follow the engine's name:
//   PMHASH_ENGINE_INSTANTIATIONS(extern, Reh)   PMHASH_ENGINE_INSTANTIATIONS(, Turbo, true)
#define PMHASH_ENGINE_INSTANTIATIONS(EXTERN, ENGINE, ...)                        \
  EXTERN template class ENGINE<::pmhash::pm::Dram __VA_OPT__(, ) __VA_ARGS__>; \
  EXTERN template class ENGINE<::pmhash::pm::Adr __VA_OPT__(, ) __VA_ARGS__>;  \
  EXTERN template class ENGINE<::pmhash::pm::Eadr __VA_OPT__(, ) __VA_ARGS__>; \
  EXTERN template class ENGINE<::pmhash::pm::Sim __VA_OPT__(, ) __VA_ARGS__>

// The base's members an engine uses, declared once per engine (they live in a dependent base, so
// the engine would otherwise write `this->` before each). Private; the engine is the base's friend
// so that the base can call its private Write and Quiesce.
#define PMHASH_ENGINE_BASE(P, CONFIG, ...)                                                      \
  using Base = ::pmhash::index::EngineBase<__VA_ARGS__, P, CONFIG>;                             \
  friend Base;                                                                                  \
  friend struct ::pmhash::index::BatchCalls;                                                    \
  using Base::pool_, Base::params_, Base::hash_, Base::persist_, Base::size_, Base::splits_,    \
      Base::doublings_, Base::resize_log_, Base::recovered_, Base::recovery_seconds_, Base::life_

// The head of every engine class, first in its body: the base (PMHASH_ENGINE_BASE), the calls the
// facade uses (PMHASH_ENGINE_API) and the destructor, which closes cleanly unless the engine was
// abandoned (src/index/lifecycle.h), then runs the engine's `FreeDram()` (DRAM its members'
// destructors do not free; none by default). ENGINE is the class's name (its injected name
// stands for the instance); DESCRIPTOR, last, may hold commas. Leaves the body public.
#define PMHASH_ENGINE(ENGINE, P, CONFIG, ...)                                                \
  PMHASH_ENGINE_BASE(P, CONFIG, ENGINE);                                                     \
  PMHASH_ENGINE_API(ENGINE, __VA_ARGS__);                                                    \
  ~ENGINE() {                                                                                \
    this->CloseUnlessAbandoned();                                                            \
    this->FreeDram();                                                                        \
  }                                                                                          \
  static_assert(true)

// The calls every engine offers the facade (IndexAdapter<T>, src/index_adapter.h), declared once
// for all engines. Open is EngineBase::OpenAs over the engine's descriptor; FindBatch, and the
// ProbeCalls forwarders where the engine has them, are the macros below; the engine defines the
// rest:
//   kKindName                                    the descriptor's kName
//   Open(options)                                open or create, then recover
//   Find(k, &v)  Erase(k)  ForEach(fn)           the uint64 reads and erase (Insert, Update and
//                                                Upsert are the base's, over the engine's Write)
//   FindBatch(keys, values, statuses)            index::BatchCalls::Find (src/index/batch.h):
//                                                prefetched when the engine has the hooks, else
//                                                one Find per key
//   Stats()  CheckInvariants()                   for tools and tests
// It leaves the class body in a public section.
#define PMHASH_ENGINE_API(ENGINE, ...)                                                       \
 public:                                                                                     \
  static constexpr std::string_view kKindName = __VA_ARGS__::kName;                          \
  static ::pmhash::Result<std::unique_ptr<ENGINE>> Open(const ::pmhash::Options& options) {  \
    return Base::template OpenAs<__VA_ARGS__>(options);                                      \
  }                                                                                          \
  ::pmhash::Status Find(::pmhash::Key k, ::pmhash::Value* v) const;                         \
  ::pmhash::Status FindBatch(std::span<const ::pmhash::Key> keys,                            \
                             std::span<::pmhash::Value> values,                              \
                             std::span<::pmhash::Status> statuses) const;                    \
  ::pmhash::Status Erase(::pmhash::Key k);                                                   \
  ::pmhash::Status ForEach(const std::function<void(::pmhash::Key, ::pmhash::Value)>& fn)    \
      const;                                                                                 \
  ::pmhash::IndexStats Stats() const;                                                        \
  ::pmhash::Status CheckInvariants() const

// Strips the parentheses around a macro argument that holds commas (a template head).
#define PMHASH_UNPAREN(...) __VA_ARGS__

// The definitions PMHASH_ENGINE_API declares that are the same in every engine, written out of
// the class after it (so that only the engine's .cc instantiates them: the extern template
// elsewhere). HEAD is the class's template head in parentheses, then the class:
//   PMHASH_ENGINE_FIND_BATCH((template <pm::PersistPolicy P, bool R>), Turbo<P, R>);
// FindBatch: index::BatchCalls::Find (src/index/batch.h), every engine.
#define PMHASH_ENGINE_FIND_BATCH(HEAD, ...)                                                  \
  PMHASH_UNPAREN HEAD ::pmhash::Status __VA_ARGS__::FindBatch(                               \
      std::span<const ::pmhash::Key> keys, std::span<::pmhash::Value> values,                \
      std::span<::pmhash::Status> statuses) const {                                          \
    return ::pmhash::index::BatchCalls::Find(*this, keys, values, statuses);                 \
  }                                                                                          \
  static_assert(true)

// An engine written over index::ProbeCalls (src/index/records.h): FindBatch, Erase and ForEach
// as its calls (ForEach hands out the pairs of each unit the engine's WalkLiveSlots locks).
#define PMHASH_PROBE_ENGINE_CALLS(HEAD, ...)                                                 \
  PMHASH_ENGINE_FIND_BATCH(HEAD, __VA_ARGS__);                                               \
  PMHASH_UNPAREN HEAD ::pmhash::Status __VA_ARGS__::Erase(::pmhash::Key k) {                 \
    return ::pmhash::index::ProbeCalls::Erase(*this, k);                                     \
  }                                                                                          \
  PMHASH_UNPAREN HEAD ::pmhash::Status __VA_ARGS__::ForEach(                                 \
      const std::function<void(::pmhash::Key, ::pmhash::Value)>& fn) const {                 \
    return ::pmhash::index::ProbeCalls::ForEach(*this, fn);                                  \
  }                                                                                          \
  static_assert(true)

// The same with Find too: a Search of the key's probe (a records kind: its 8-byte record).
#define PMHASH_PROBE_ENGINE_CALLS_WITH_FIND(HEAD, ...)                                       \
  PMHASH_PROBE_ENGINE_CALLS(HEAD, __VA_ARGS__);                                              \
  PMHASH_UNPAREN HEAD ::pmhash::Status __VA_ARGS__::Find(::pmhash::Key k, ::pmhash::Value* v)  \
      const {                                                                                \
    return ::pmhash::index::ProbeCalls::Find(*this, k, v);                                   \
  }                                                                                          \
  static_assert(true)
