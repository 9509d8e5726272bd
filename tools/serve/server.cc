// tools/serve/server.cc — see server.h.
#include "tools/serve/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <unordered_map>

namespace pmhash::serve {
namespace {

constexpr size_t kReadChunk = 16 << 10;
constexpr int kReadsPerEvent = 64;           // then let other connections run
constexpr size_t kOutputHighWater = 1 << 20;  // stop reading a client with this much unsent

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Status Errno(const std::string& what) {
  return Status::IOError(what + ": " + std::strerror(errno));
}

}  // namespace

struct Server::Loop {
  struct Conn {
    explicit Conn(const Limits& limits) : parser(limits) {}
    int fd = -1;
    std::string in;
    size_t in_off = 0;  // bytes of `in` already consumed
    std::string out;
    size_t out_sent = 0;
    RequestParser parser;
    Session session;
    int64_t last_active_ms = 0;
    uint32_t events = 0;   // the epoll interest set now registered
    bool closing = false;  // close once `out` is sent
    bool eof = false;      // the client will send nothing more
  };

  Server* server = nullptr;
  Executor* exec = nullptr;
  ServeSettings settings;
  int epfd = -1;
  int wake_fd = -1;
  int spare_fd = -1;  // closed to accept (and drop) a connection when out of descriptors
  std::atomic<bool> stop{false};
  std::unordered_map<int, std::unique_ptr<Conn>> conns;

  ~Loop() {
    for (auto& [fd, c] : conns) {
      close(fd);
      exec->counters().connected_clients.fetch_sub(1);
    }
    if (epfd >= 0) close(epfd);
    if (wake_fd >= 0) close(wake_fd);
    if (spare_fd >= 0) close(spare_fd);
  }

  void Wake() {
    const uint64_t one = 1;
    ssize_t n = write(wake_fd, &one, sizeof(one));
    (void)n;
  }

  void Run() {
    std::vector<epoll_event> events(256);
    int64_t last_sweep = NowMs();
    const int timeout_ms = settings.idle_timeout_s > 0 ? 1000 : -1;
    while (!stop.load(std::memory_order_acquire)) {
      const int n = epoll_wait(epfd, events.data(), static_cast<int>(events.size()), timeout_ms);
      if (n < 0 && errno != EINTR) break;
      for (int i = 0; i < n; i++) {
        const int fd = events[i].data.fd;
        if (fd == wake_fd) continue;  // Stop(): the loop condition says it
        if (fd == server->listen_fd_) {
          Accept();
          continue;
        }
        auto it = conns.find(fd);
        if (it == conns.end()) continue;
        Serve(it->second.get(), events[i].events);
      }
      if (settings.idle_timeout_s > 0 && NowMs() - last_sweep >= 1000) {
        last_sweep = NowMs();
        SweepIdle(last_sweep);
      }
    }
  }

  void Accept() {
    for (int i = 0; i < 64; i++) {
      const int fd = accept4(server->listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if ((errno == EMFILE || errno == ENFILE) && spare_fd >= 0) {
          // Out of descriptors: accept with the spare one and drop the connection, so that
          // the listening socket does not stay readable forever.
          close(spare_fd);
          const int drop = accept(server->listen_fd_, nullptr, nullptr);
          if (drop >= 0) close(drop);
          spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
          exec->counters().rejected_connections.fetch_add(1);
          continue;
        }
        return;  // EAGAIN (another loop took it), or a transient error
      }
      exec->counters().connections_received.fetch_add(1);
      if (exec->counters().connected_clients.fetch_add(1) >= settings.max_clients) {
        exec->counters().connected_clients.fetch_sub(1);
        exec->counters().rejected_connections.fetch_add(1);
        static constexpr char kMsg[] = "-ERR max number of clients reached\r\n";
        ssize_t w = send(fd, kMsg, sizeof(kMsg) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
        close(fd);
        continue;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<Conn>(settings.limits);
      c->fd = fd;
      c->session.id = server->next_client_id_.fetch_add(1);
      c->last_active_ms = NowMs();
      c->events = EPOLLIN;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        exec->counters().connected_clients.fetch_sub(1);
        continue;
      }
      conns.emplace(fd, std::move(c));
    }
  }

  void Close(Conn* c) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, nullptr);
    close(c->fd);
    exec->counters().connected_clients.fetch_sub(1);
    conns.erase(c->fd);  // destroys *c
  }

  void SweepIdle(int64_t now) {
    const int64_t limit = static_cast<int64_t>(settings.idle_timeout_s) * 1000;
    std::vector<Conn*> idle;
    for (auto& [fd, c] : conns) {
      if (now - c->last_active_ms > limit) idle.push_back(c.get());
    }
    for (Conn* c : idle) {
      exec->counters().idle_timeouts.fetch_add(1);
      Close(c);
    }
  }

  enum class ReadResult { kOk, kEof, kError };
  // Reads what the socket has.
  ReadResult Read(Conn* c) {
    for (int i = 0; i < kReadsPerEvent; i++) {
      const size_t old = c->in.size();
      c->in.resize(old + kReadChunk);
      const ssize_t n = read(c->fd, c->in.data() + old, kReadChunk);
      if (n > 0) {
        c->in.resize(old + static_cast<size_t>(n));
        if (static_cast<size_t>(n) < kReadChunk) return ReadResult::kOk;
        continue;
      }
      c->in.resize(old);
      if (n == 0) return ReadResult::kEof;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return ReadResult::kOk;
      if (errno == EINTR) continue;
      return ReadResult::kError;
    }
    return ReadResult::kOk;
  }

  // Runs the complete commands buffered, while the replies waiting stay under the high water.
  // Returns true if it stopped at the high water with input left (run it once replies left).
  bool Process(Conn* c) {
    while (!c->closing && c->out.size() - c->out_sent < kOutputHighWater &&
           c->in_off < c->in.size()) {
      const std::string_view view = std::string_view(c->in).substr(c->in_off);
      size_t consumed = 0;
      const auto outcome = c->parser.Parse(view, &consumed);
      if (outcome == RequestParser::Outcome::kNeedMore) break;
      if (outcome == RequestParser::Outcome::kError) {
        AppendError(&c->out, c->parser.error());
        exec->counters().protocol_errors.fetch_add(1);
        c->closing = true;
        break;
      }
      if (outcome == RequestParser::Outcome::kCommand) {
        exec->Execute(c->parser.args(), &c->session, &c->out);
        if (c->session.close_after_reply) c->closing = true;
      }
      c->in_off += consumed;
    }
    if (!c->closing && c->in.size() - c->in_off > settings.limits.max_query_buffer) {
      AppendError(&c->out, "ERR client query buffer limit exceeded: closing the connection");
      exec->counters().protocol_errors.fetch_add(1);
      c->closing = true;
    }
    const bool held = !c->closing && c->out.size() - c->out_sent >= kOutputHighWater &&
                      c->in_off < c->in.size();
    if (c->in_off > 0) {
      c->in.erase(0, c->in_off);
      c->in_off = 0;
    }
    return held;
  }

  // Sends what it can; false if the connection is gone.
  bool Flush(Conn* c) {
    while (c->out_sent < c->out.size()) {
      const ssize_t n = send(c->fd, c->out.data() + c->out_sent, c->out.size() - c->out_sent,
                             MSG_NOSIGNAL);
      if (n > 0) {
        c->out_sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      return false;
    }
    c->out.clear();
    c->out_sent = 0;
    return true;
  }

  void Serve(Conn* c, uint32_t ev) {
    c->last_active_ms = NowMs();
    if (ev & EPOLLERR) return Close(c);
    if ((ev & (EPOLLIN | EPOLLHUP)) && !c->closing && !c->eof) {
      const ReadResult r = Read(c);
      if (r == ReadResult::kError) return Close(c);
      // The client sent all it will (or half-closed): run what it sent, reply, then close.
      if (r == ReadResult::kEof) c->eof = true;
    }
    // Run commands and send replies until the input is exhausted or the socket is full.
    bool held = false;
    while (true) {
      held = Process(c);
      if (!Flush(c)) return Close(c);
      if (!held || c->out_sent < c->out.size() || c->closing) break;
    }
    const bool pending = c->out_sent < c->out.size();
    if (!pending && (c->closing || (c->eof && !held))) return Close(c);
    uint32_t want = 0;
    if (pending) want |= EPOLLOUT;
    if (!c->closing && !c->eof && c->out.size() - c->out_sent < kOutputHighWater) {
      want |= EPOLLIN;
    }
    if (want != c->events) {
      epoll_event e{};
      e.events = want;
      e.data.fd = c->fd;
      epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &e);
      c->events = want;
    }
  }
};

Result<std::unique_ptr<Server>> Server::Start(Index& index, const ServeSettings& settings) {
  if (settings.threads < 1 || settings.threads > 256) {
    return Status::InvalidArgument("threads must be in [1, 256]");
  }
  std::unique_ptr<Server> s(new Server());
  s->shutdown_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->shutdown_fd_ < 0) return Errno("eventfd");
  const int sfd = s->shutdown_fd_;
  s->executor_ = std::make_unique<Executor>(index, settings, [sfd] {
    const uint64_t one = 1;
    ssize_t n = write(sfd, &one, sizeof(one));
    (void)n;
  });

  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(settings.port);
  if (inet_pton(AF_INET, settings.bind.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("bind address '" + settings.bind +
                                   "' is not an IPv4 address (e.g. 127.0.0.1)");
  }
  s->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0) return Errno("socket");
  const int one = 1;
  setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Errno("bind " + settings.bind + ":" + std::to_string(settings.port));
  }
  if (listen(s->listen_fd_, 1024) != 0) return Errno("listen");
  socklen_t len = sizeof(addr);
  getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  s->port_ = ntohs(addr.sin_port);
  s->executor_->settings().port = s->port_;

  for (int i = 0; i < settings.threads; i++) {
    auto loop = std::make_unique<Loop>();
    loop->server = s.get();
    loop->exec = s->executor_.get();
    loop->settings = settings;
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    loop->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    loop->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (loop->epfd < 0 || loop->wake_fd < 0) return Errno("epoll_create1/eventfd");
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLEXCLUSIVE;
    ev.data.fd = s->listen_fd_;
    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, s->listen_fd_, &ev) != 0) {
      return Errno("epoll_ctl(listen)");
    }
    ev.events = EPOLLIN;
    ev.data.fd = loop->wake_fd;
    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, loop->wake_fd, &ev) != 0) {
      return Errno("epoll_ctl(wake)");
    }
    s->loops_.push_back(std::move(loop));
  }
  for (auto& loop : s->loops_) s->threads_.emplace_back([l = loop.get()] { l->Run(); });
  return s;
}

void Server::Stop() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& loop : loops_) {
    loop->stop.store(true, std::memory_order_release);
    loop->Wake();
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
  loops_.clear();  // closes every connection
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
}

Server::~Server() {
  Stop();
  if (shutdown_fd_ >= 0) close(shutdown_fd_);
}

}  // namespace pmhash::serve
