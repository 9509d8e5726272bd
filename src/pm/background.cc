#include "pm/background.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <new>
#include <string>
#include <system_error>
#include <utility>

#include "common/locks.h"

namespace pmhash::pm {
namespace {

// The tasks running on this thread, innermost first (a task may run another executor's tasks).
struct Frame {
  const BackgroundWork* owner;
  Frame* prev;
};
thread_local Frame* tls_frames = nullptr;

Status Refused(std::string_view what) {
  return Status::InvalidArgument("background work: " + std::string(what));
}

}  // namespace

void BackgroundStats::AppendTo(std::vector<NamedStat>* details, std::string_view prefix) const {
  const std::string p(prefix);
  auto add = [&](const char* name, double v) { details->push_back({p + "." + name, v}); };
  add("threads", threads);
  add("scheduled", static_cast<double>(scheduled));
  add("run", static_cast<double>(run));
  add("failed", static_cast<double>(failed));
  add("rejected", static_cast<double>(rejected));
  add("dropped", static_cast<double>(dropped));
  add("queued", static_cast<double>(queued));
  add("queue_max", static_cast<double>(queue_depth_max));
  add("busy_ms", static_cast<double>(busy_ns) / 1e6);
}

BackgroundWork::BackgroundWork(BackgroundOptions options)
    : options_(options), limit_(std::clamp<uint32_t>(options.threads, 1, kMaxThreads)) {}

BackgroundWork::~BackgroundWork() { Abandon(); }

bool BackgroundWork::InTask() const {
  for (const Frame* f = tls_frames; f; f = f->prev) {
    if (f->owner == this) return true;
  }
  return false;
}

Status BackgroundWork::Start() {
  if (InTask()) return Refused("Start called from one of its own tasks");
  LockGuard<Mutex> j(join_mu_);
  {
    LockGuard<Mutex> g(mu_);
    if (state_ == State::kClosed) return Refused("Start after Shutdown");
    if (options_.threads > kMaxThreads) {
      return Refused(std::to_string(options_.threads) + " threads asked for, at most " +
                     std::to_string(kMaxThreads));
    }
    if (options_.threads == 0 || workers_ > 0) return Status::OK();
  }
  Status failed;
  try {
    threads_.reserve(options_.threads);
    for (uint32_t i = 0; i < options_.threads; i++) {
      threads_.emplace_back([this] { WorkerLoop(); });
      LockGuard<Mutex> g(mu_);
      workers_++;
    }
  } catch (const std::system_error& e) {
    failed = Status::IOError(std::string("background work: cannot start a thread: ") + e.what());
  } catch (const std::bad_alloc&) {
    failed = Status::OutOfMemory("background work: thread handles");
  }
  if (failed.ok()) return failed;
  // Stop the workers that did start; the queue stays, and Drain() runs it on its caller.
  {
    LockGuard<Mutex> g(mu_);
    stop_ = true;
    workers_ = 0;
    work_cv_.NotifyAll();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  LockGuard<Mutex> g(mu_);
  stop_ = false;
  return failed;
}

Status BackgroundWork::Schedule(Task task) {
  LockGuard<Mutex> g(mu_);
  if (!task) {
    stats_.rejected++;
    return Refused("empty task");
  }
  if (state_ == State::kClosed) {
    stats_.rejected++;
    return Refused("Schedule after Shutdown (or after the owner was abandoned)");
  }
  try {
    queue_.push_back(std::move(task));
  } catch (const std::bad_alloc&) {
    stats_.rejected++;
    return Status::OutOfMemory("background work: task queue");
  }
  stats_.scheduled++;
  stats_.queue_depth_max = std::max<uint64_t>(stats_.queue_depth_max, queue_.size());
  if (workers_ > 0) work_cv_.NotifyOne();
  return Status::OK();
}

BackgroundWork::Task BackgroundWork::PopLocked() {
  Task t = std::move(queue_.front());
  queue_.pop_front();
  running_++;
  return t;
}

void BackgroundWork::RunTask(Task task) {
  Frame frame{this, tls_frames};
  tls_frames = &frame;
  SimHook* const prev_hook = SetThreadSimHook(options_.sim_hook);
  const auto t0 = std::chrono::steady_clock::now();
  Status s;
  try {
    s = task();
  } catch (const std::bad_alloc&) {
    s = Status::OutOfMemory("background task: out of memory");
  } catch (const std::exception& e) {
    s = Status::InvalidArgument(std::string("background task threw: ") + e.what());
  } catch (...) {
    s = Status::InvalidArgument("background task threw a non-standard exception");
  }
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
  task = nullptr;  // its captures are destroyed outside mu_ (and with the hook still installed)
  SetThreadSimHook(prev_hook);
  tls_frames = frame.prev;

  LockGuard<Mutex> g(mu_);
  running_--;
  stats_.run++;
  stats_.busy_ns += static_cast<uint64_t>(ns);
  if (!s.ok()) {
    stats_.failed++;
    if (first_error_.ok()) first_error_ = std::move(s);
  }
  // Notified under mu_: a waiter may destroy *this as soon as it sees the executor idle.
  if (workers_ > 0 && !queue_.empty()) work_cv_.NotifyOne();
  done_cv_.NotifyAll();
}

void BackgroundWork::WorkerLoop() {
  // Foreground first (see the header): batch policy, then the CPU back to the thread that
  // started this one, before the first task.
  sched_param batch{};
  (void)sched_setscheduler(0, SCHED_BATCH, &batch);
  sched_yield();
  mu_.lock();
  for (;;) {
    while (!stop_ && (queue_.empty() || running_ >= limit_)) work_cv_.Wait(mu_);
    if (stop_) break;
    Task t = PopLocked();
    mu_.unlock();
    RunTask(std::move(t));
    mu_.lock();
  }
  mu_.unlock();
}

bool BackgroundWork::RunOne() {
  if (InTask()) return false;
  Task t;
  {
    LockGuard<Mutex> g(mu_);
    for (;;) {
      if (queue_.empty()) return false;
      if (running_ < limit_) break;
      done_cv_.Wait(mu_);
    }
    t = PopLocked();
  }
  RunTask(std::move(t));
  return true;
}

size_t BackgroundWork::RunPending() {
  size_t n = 0;
  while (RunOne()) n++;
  return n;
}

Status BackgroundWork::Drain() {
  if (InTask()) return Refused("Drain called from one of its own tasks");
  mu_.lock();
  for (;;) {
    if (queue_.empty() && running_ == 0) break;
    if (!queue_.empty() && workers_ == 0 && running_ < limit_) {
      // Nobody else will run it: manual mode, or no worker started.
      Task t = PopLocked();
      mu_.unlock();
      RunTask(std::move(t));
      mu_.lock();
      continue;
    }
    done_cv_.Wait(mu_);
  }
  Status s = first_error_;
  mu_.unlock();
  return s;
}

Status BackgroundWork::Shutdown() {
  if (InTask()) return Refused("Shutdown called from one of its own tasks");
  for (;;) {
    (void)Drain();
    LockGuard<Mutex> g(mu_);
    // Another thread may have scheduled between Drain's return and here: drain again.
    if (queue_.empty() && running_ == 0) {
      state_ = State::kClosed;
      break;
    }
  }
  Stop(/*drop=*/false);  // nothing is queued: the workers just exit
  return status();
}

void BackgroundWork::Abandon() { Stop(/*drop=*/true); }

void BackgroundWork::Stop(bool drop) {
  const bool in_task = InTask();
  std::deque<Task> dropped;  // destroyed last, outside both locks
  LockGuard<Mutex> j(join_mu_);
  {
    LockGuard<Mutex> g(mu_);
    state_ = State::kClosed;
    if (drop) {
      stats_.dropped += queue_.size();
      dropped.swap(queue_);
    }
    stop_ = true;
    workers_ = 0;
    work_cv_.NotifyAll();
  }
  if (in_task) return;  // a task cannot wait for itself (documented misuse; no deadlock)
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  // Tasks that callers run on their own threads (RunOne, Drain) finish too.
  LockGuard<Mutex> g(mu_);
  while (running_ > 0) done_cv_.Wait(mu_);
}

Status BackgroundWork::status() const {
  LockGuard<Mutex> g(mu_);
  return first_error_;
}

BackgroundStats BackgroundWork::stats() const {
  LockGuard<Mutex> g(mu_);
  BackgroundStats s = stats_;
  s.threads = options_.threads;
  s.queued = queue_.size();
  s.running = running_;
  return s;
}

uint64_t BackgroundWork::pending() const {
  LockGuard<Mutex> g(mu_);
  return queue_.size() + running_;
}

}  // namespace pmhash::pm
