// tests/kill_util.h — the process-crash harness shared by tests/kill_test.cc (every unique-key
// kind) and tests/multi_test.cc (MultiKill: the multimap kinds).
//
// A child process runs operations on a file pool and reports each one to the parent through a
// pipe as fixed-size records: READY once the pool is open, then per operation an INTENT before it
// is called and an ACK after it returned OK (ERROR and _exit if it did not). The parent SIGKILLs
// the child a given delay after READY and gets every record the child wrote: the acknowledged
// operations must survive, the one in flight (an INTENT without its ACK) may or may not.
//
// The child never touches gtest: it only uses the library, write(2) and _exit(2).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>  // PIPE_BUF
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace pmhash::testing {

enum KillRecType : uint64_t { kReady = 1, kIntent = 2, kAck = 3, kError = 4 };

// One report of the child. `op`, `key`, `value`: the test's own encoding (kError: `value` is
// the failing Status code).
struct KillRec {
  uint64_t type;
  uint64_t op;
  uint64_t key;
  uint64_t value;
};
static_assert(sizeof(KillRec) <= PIPE_BUF, "pipe writes of one record are atomic");

// Child side: writes one record; exits (status 5) if the parent is gone.
inline void SendRec(int fd, const KillRec& r) {
  const char* p = reinterpret_cast<const char*>(&r);
  size_t left = sizeof(r);
  while (left > 0) {
    const ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(5);  // parent gone
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// Parent side: forks a child that runs child(fd) (fd: the pipe's write end; the child should
// _exit; if it returns, it exits with status 0), reads its records until EOF, and SIGKILLs it
// delay_ms after its first kReady record (or after 60 s without one: a test failure). *records:
// every record read, in order; *status: the child's wait status. Use with
// ASSERT_NO_FATAL_FAILURE.
inline void RunChildAndKill(const std::function<void(int fd)>& child, int delay_ms,
                            std::vector<KillRec>* records, int* status) {
  records->clear();
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    child(fds[1]);
    _exit(0);
  }
  close(fds[1]);

  std::string buf;
  bool ready = false, killed = false;
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point kill_at{};
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (!ready && !killed && now - start > std::chrono::seconds(60)) {
      kill(pid, SIGKILL);
      killed = true;
      ADD_FAILURE() << "child never became ready";
    }
    if (ready && !killed && now >= kill_at) {
      EXPECT_EQ(kill(pid, SIGKILL), 0) << strerror(errno);
      killed = true;
    }
    int timeout = 100;
    if (ready && !killed) {
      timeout = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - now).count());
      if (timeout < 0) timeout = 0;
    }
    pollfd pfd{fds[0], POLLIN, 0};
    const int pr = poll(&pfd, 1, timeout);
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) {
      ADD_FAILURE() << "poll: " << strerror(errno);
      if (!killed) kill(pid, SIGKILL);
      break;
    }
    if (pr == 0) continue;
    char tmp[1 << 16];
    const ssize_t n = read(fds[0], tmp, sizeof(tmp));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ADD_FAILURE() << "read: " << strerror(errno);
      if (!killed) kill(pid, SIGKILL);
      break;
    }
    if (n == 0) break;  // EOF: the child is gone
    buf.append(tmp, static_cast<size_t>(n));
    size_t used = 0;
    while (buf.size() - used >= sizeof(KillRec)) {
      KillRec r;
      std::memcpy(&r, buf.data() + used, sizeof(KillRec));
      used += sizeof(KillRec);
      if (r.type == kReady && !ready) {
        ready = true;
        kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
      }
      records->push_back(r);
    }
    buf.erase(0, used);
  }
  close(fds[0]);
  ASSERT_EQ(waitpid(pid, status, 0), pid);
}

// Replays what a killed child reported: apply(record) for every acknowledged operation, in
// order; *inflight: the intent left without an ack (the operation in flight at the kill), if
// any; *acks: how many were acknowledged. A kError record, an ack without its intent or two
// intents in a row fail the test. Use with ASSERT_NO_FATAL_FAILURE.
template <class Apply>
void ReplayAcks(const std::vector<KillRec>& records, Apply&& apply,
                std::optional<KillRec>* inflight, uint64_t* acks) {
  inflight->reset();
  *acks = 0;
  for (const KillRec& r : records) {
    ASSERT_NE(r.type, uint64_t{kError})
        << "child saw op " << r.op << " on key " << r.key << " fail with code " << r.value;
    if (r.type == kIntent) {
      ASSERT_FALSE(inflight->has_value()) << "two intents without an ack";
      *inflight = r;
    } else if (r.type == kAck) {
      ASSERT_TRUE(inflight->has_value());
      ASSERT_EQ((*inflight)->key, r.key);
      apply(r);
      inflight->reset();
      ++*acks;
    }
  }
}

}  // namespace pmhash::testing
