// tools/serve/server.h — the network side of `pmhash serve`: epoll event loops speaking RESP2
// and RESP3.
//
// Threads: settings.threads event loops. Each has its own epoll set, and the listening socket is
// in all of them with EPOLLEXCLUSIVE, so a new connection wakes one loop, which accepts it and
// serves it until it closes. Commands of one connection run in order on its loop (pipelining:
// every complete command in a read is run, and their replies leave in one send); commands of
// different connections run in parallel on the shared Executor.
//
// Limits (ServeSettings): a client count (the next client gets "-ERR max number of clients
// reached" and is closed), an idle timeout (checked once a second), and the parser's bounds on
// argument size, argument count, inline line length and buffered input; a protocol error is
// answered with an error and the connection is closed, as Redis does. A client that does not read
// its replies stops being read once 1 MiB of replies waits for it (no unbounded buffering).
//
// Shutdown: the SHUTDOWN command makes shutdown_fd() readable; Stop() (any thread but a loop's)
// ends every loop and closes every connection. Neither closes the index: its owner does, after
// Stop().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "pmhash/index.h"
#include "tools/serve/commands.h"

namespace pmhash::serve {

class Server {
 public:
  // Binds settings.bind:settings.port (port 0: a free port, see port()) and starts the loops.
  static Result<std::unique_ptr<Server>> Start(Index& index, const ServeSettings& settings);
  ~Server();  // Stop()

  uint16_t port() const { return port_; }
  // Readable once a client ran SHUTDOWN (an eventfd; poll it with the signal fd).
  int shutdown_fd() const { return shutdown_fd_; }
  // Ends every loop and closes every connection; idempotent.
  void Stop();
  Executor& executor() { return *executor_; }

 private:
  struct Loop;
  Server() = default;

  std::unique_ptr<Executor> executor_;
  int listen_fd_ = -1;
  int shutdown_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<uint64_t> next_client_id_{1};
  std::vector<std::unique_ptr<Loop>> loops_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

}  // namespace pmhash::serve
