// src/pm/background.h — background work an index owns: a FIFO of tasks, run by worker threads or,
// in manual mode, by whoever asks (the crash suite), and drained by Close.
//
// Who needs it. ElimDA flushes full collecting logs and relocates D-buckets behind the
// foreground; SmartHT rebuilds its Bloom filter lazily after a crash or when erased keys make it
// stale. Both are "fire and forget" items that must be finished (or provably not needed) before
// Close() marks the pool clean, and both persist. This is LevelDB's Env::Schedule, owned by one
// index instead of the process (no global pool, no singleton: the index holds a BackgroundWork
// member and passes it nothing but tasks).
//
// Model.
//   Schedule(task)   appends a task (std::function<Status()>) to a FIFO. Never runs it inline.
//   workers          `threads` worker threads pop tasks in FIFO order; at most max(threads, 1) tasks
//                    run at once, so with threads <= 1 tasks run one at a time in schedule order.
//                    They run under SCHED_BATCH (Linux: a batch thread that becomes runnable never
//                    preempts a running thread, and still gets its fair share of the CPU at the
//                    next tick) and yield once as they start: an open that starts a worker with a
//                    task queued, or a write that schedules one, returns before the task takes its
//                    CPU. (Without this, on a 2-vCPU VM a third of SmartHT's clean opens at 1M keys
//                    waited the whole 1.3 ms filter load inside pthread_create: the new thread
//                    preempted its creator on the same CPU.) Where the policy cannot be set they
//                    run as normal threads.
//   manual mode      threads == 0: no thread is started; tasks run only when the owner calls
//                    RunOne() / RunPending() or Drain() (Close), on the calling thread, one at a
//                    time, in FIFO order. Nothing about them depends on timing: the crash suite
//                    runs them at chosen points and a crash can be placed before, during (every
//                    fence of the task) and after each one.
//   Drain()          returns once the queue is empty and no task runs (tasks that a task schedules
//                    are drained too). With no worker thread running (manual mode, or Start()
//                    not called), the caller runs the queued tasks itself.
//   Shutdown()       Drain(), then refuse new tasks and stop (join) the workers. Idempotent.
//   Abandon()        crash-like stop (the destructor): the task running finishes, queued tasks are
//                    dropped without running, workers are joined, new tasks are refused.
//
// Errors are values. A task returns a Status; the first non-OK one is kept (status()) and returned
// by every later Drain() and Shutdown(); later tasks still run (the index decides what a failed
// flush means). No exception crosses the API: one escaping a task is caught and kept as its Status
// (std::bad_alloc: kOutOfMemory, anything else: kInvalidArgument naming it); a thread that cannot
// be started is kIOError from Start(); Schedule() after Shutdown()/Abandon() is kInvalidArgument,
// as are Drain()/Shutdown() called from inside one of this executor's own tasks (they would wait
// for themselves). Nothing aborts or exits.
//
// Why src/pm and not src/common: a background task persists, and its persists must land where the
// pool's other persists land. A Persister built from Pool::persist_target() reports to the pool's
// simulator hook from any thread already; but the bare Sim::Flush/Fence/NtCopy, and a Persister
// built from counters only, report to the *calling thread's* hook (SetThreadSimHook), which a new
// thread does not have. So the executor carries a SimHook (the pool's, Pool::sim_hook()) and
// installs it as the thread hook of every worker for the worker's lifetime, and around every task
// that RunOne/RunPending/Drain run on a caller's thread (restoring the caller's hook afterwards):
// a task sees the same hook whoever runs it. That is persistence knowledge, so the class lives
// beside persist.h; src/common keeps no dependency on src/pm. (Under the crash harness every
// fence of a task is a simulator crash point. The harness records crash points of its writer
// thread only, which is why it runs indexes in manual mode: Config::background_threads.)
//
// How an index uses it (ElimDA, SmartHT; no index does yet):
//   - a member `pm::BackgroundWork background_{{options.background_threads, pool->sim_hook()}}`,
//     declared after every member its tasks touch (members are destroyed in reverse order, and
//     the destructor joins the workers), or the index's destructor calls background_.Abandon()
//     first;
//   - Open(): recover, then background_.Start() (tasks scheduled during recovery wait until then);
//   - Close(): `Status s = background_.Shutdown();` (drains: every scheduled task has run), and only
//     if s is OK its last persistent write, Pool::MarkClean(); otherwise return s and leave the pool
//     unclean, so the next open recovers;
//   - destruction without Close() is a crash: Abandon() runs no further task, and recovery must
//     cope with whatever the dropped tasks would have done (it must anyway: a power failure drops
//     them too);
//   - Stats(): background_.stats().AppendTo(&stats.details, "<kind>.bg");
//   - `pm::BackgroundWork& background()` accessor: the crash harness (tests/crash/crash_harness.h)
//     detects it and runs the tasks itself between operations.
//
// Not offered: ScheduleAfter / periodic tasks. Manual mode has no clock to make them deterministic,
// and the planned users are event-driven (a log fills up, an erase ratio passes a threshold).
//
// Thread safety: every member may be called from any thread, except as noted (Drain, Shutdown,
// RunOne, RunPending from inside a task of the same executor; the destructor).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string_view>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "pm/persist.h"
#include "pmhash/stats.h"
#include "pmhash/status.h"

namespace pmhash::pm {

struct BackgroundOptions {
  // Worker threads (Options::background_threads); 0: manual mode. At most kMaxThreads.
  uint32_t threads = 1;
  // Installed as the thread hook while a task runs (Pool::sim_hook(): nullptr unless a Sim pool).
  SimHook* sim_hook = nullptr;
};

struct BackgroundStats {
  uint32_t threads = 0;          // worker threads configured (0: manual mode)
  uint64_t scheduled = 0;        // tasks accepted by Schedule()
  uint64_t rejected = 0;         // Schedule() calls refused (after Shutdown/Abandon, empty task)
  uint64_t run = 0;              // tasks that ran to the end (whatever their Status)
  uint64_t failed = 0;           // ... of which returned a non-OK Status
  uint64_t dropped = 0;          // tasks discarded unrun by Abandon()
  uint64_t queued = 0;           // tasks waiting now
  uint64_t running = 0;          // tasks running now
  uint64_t queue_depth_max = 0;  // most tasks ever waiting at once
  uint64_t busy_ns = 0;          // time spent running tasks, summed over threads

  // Appends the figures to IndexStats::details as "<prefix>.threads", ".scheduled", ".run",
  // ".failed", ".rejected", ".dropped", ".queued", ".queue_max", ".busy_ms".
  void AppendTo(std::vector<NamedStat>* details, std::string_view prefix) const;
};

class BackgroundWork {
 public:
  using Task = std::function<Status()>;
  static constexpr uint32_t kMaxThreads = 64;

  // Starts no thread (Start() does); Schedule() is accepted at once.
  explicit BackgroundWork(BackgroundOptions options);
  // Abandon(): crash-like, see above.
  ~BackgroundWork();
  BackgroundWork(const BackgroundWork&) = delete;
  BackgroundWork& operator=(const BackgroundWork&) = delete;

  // Starts the worker threads. OK and nothing to do in manual mode or if already started;
  // kInvalidArgument after Shutdown/Abandon, from a task, or with more than kMaxThreads (the
  // executor then stays without workers, like manual mode); kIOError if the OS
  // refuses a thread (those already started are stopped again; queued tasks stay queued and
  // Drain() runs them on its caller).
  Status Start() PMHASH_EXCLUDES(mu_, join_mu_);

  // Queues `task` (FIFO). kInvalidArgument after Shutdown()/Abandon() or for an empty function,
  // kOutOfMemory if the queue cannot grow; the task is then not run.
  Status Schedule(Task task) PMHASH_EXCLUDES(mu_);

  // Runs the oldest queued task on the calling thread and returns true; false if the queue is
  // empty (or the caller is a task of this executor). Waits while max(threads, 1) tasks already
  // run, so tasks stay serial with threads <= 1. Meant for manual mode; in threaded mode it helps.
  bool RunOne() PMHASH_EXCLUDES(mu_);
  // RunOne() until it returns false (tasks that the tasks schedule included). Returns how many ran.
  size_t RunPending() PMHASH_EXCLUDES(mu_);

  // Returns when the queue is empty and no task runs; status() then. See the model above.
  Status Drain() PMHASH_EXCLUDES(mu_);
  // Drain(), then refuse new tasks and join the workers; status(). Idempotent.
  Status Shutdown() PMHASH_EXCLUDES(mu_, join_mu_);
  // Refuse new tasks, drop the queued ones, let the running ones finish, join the workers.
  // Idempotent. Not from inside a task of this executor.
  void Abandon() PMHASH_EXCLUDES(mu_, join_mu_);

  // The first non-OK Status a task returned (OK if none).
  Status status() const PMHASH_EXCLUDES(mu_);
  BackgroundStats stats() const PMHASH_EXCLUDES(mu_);
  // Tasks queued or running now (0: idle).
  uint64_t pending() const PMHASH_EXCLUDES(mu_);
  uint32_t threads() const { return options_.threads; }
  bool manual() const { return options_.threads == 0; }
  // True on a thread that is running one of this executor's tasks.
  bool InTask() const;

 private:
  enum class State : uint8_t { kOpen, kClosed };

  void WorkerLoop() PMHASH_EXCLUDES(mu_);
  // Runs `task` on this thread with the executor's hook installed; records its outcome.
  void RunTask(Task task) PMHASH_EXCLUDES(mu_);
  // Pops the oldest task; REQUIRES a queued task and a free slot.
  Task PopLocked() PMHASH_REQUIRES(mu_);
  void Stop(bool drop) PMHASH_EXCLUDES(mu_, join_mu_);

  const BackgroundOptions options_;
  const uint32_t limit_;  // max(threads, 1): tasks that may run at once

  mutable Mutex mu_;
  CondVar work_cv_;  // workers: a task was queued, a slot freed, or stop
  CondVar done_cv_;  // Drain/RunOne: a task finished
  std::deque<Task> queue_ PMHASH_GUARDED_BY(mu_);
  State state_ PMHASH_GUARDED_BY(mu_) = State::kOpen;
  bool stop_ PMHASH_GUARDED_BY(mu_) = false;       // workers exit
  uint32_t workers_ PMHASH_GUARDED_BY(mu_) = 0;    // started and not told to stop
  uint64_t running_ PMHASH_GUARDED_BY(mu_) = 0;
  Status first_error_ PMHASH_GUARDED_BY(mu_);
  BackgroundStats stats_ PMHASH_GUARDED_BY(mu_);

  Mutex join_mu_;  // serialises Start / Shutdown / Abandon around the thread handles
  std::vector<std::thread> threads_ PMHASH_GUARDED_BY(join_mu_);
};

}  // namespace pmhash::pm
