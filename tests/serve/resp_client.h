// tests/serve/resp_client.h — a minimal RESP2 (and RESP3 null and map) client for the tests of
// `pmhash serve`: a reply decoder (also used on the executor's output, no socket) and a blocking
// loopback connection.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pmhash::testing {

struct Reply {
  enum Type { kSimple, kError, kInt, kBulk, kNull, kArray } type = kNull;
  std::string str;  // kSimple, kError, kBulk
  int64_t num = 0;  // kInt
  std::vector<Reply> elems;

  bool ok() const { return type == kSimple && str == "OK"; }
  bool is_error() const { return type == kError; }
};

// Decodes one reply at in[0..]: 1 with *consumed set, 0 if incomplete, -1 if malformed.
inline int DecodeReply(std::string_view in, size_t* consumed, Reply* r) {
  const size_t crlf = in.find("\r\n");
  if (crlf == std::string_view::npos) return 0;
  if (in.empty()) return 0;
  const std::string_view line = in.substr(1, crlf - 1);
  size_t pos = crlf + 2;
  auto parse_int = [](std::string_view s, int64_t* v) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
    return ec == std::errc() && p == s.data() + s.size();
  };
  switch (in[0]) {
    case '+': r->type = Reply::kSimple; r->str = std::string(line); break;
    case '-': r->type = Reply::kError; r->str = std::string(line); break;
    case ':': {
      r->type = Reply::kInt;
      uint64_t u = 0;
      // Integers above 2^63-1 (uint64 INCR results) are kept in `str` as digits.
      r->str = std::string(line);
      if (!parse_int(line, &r->num)) {
        auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), u);
        if (ec != std::errc() || p != line.data() + line.size()) return -1;
        r->num = static_cast<int64_t>(u);
      }
      break;
    }
    case '_': r->type = Reply::kNull; break;  // RESP3 null
    case '$': {
      int64_t len = 0;
      if (!parse_int(line, &len)) return -1;
      if (len < 0) {
        r->type = Reply::kNull;
        break;
      }
      if (in.size() < pos + static_cast<size_t>(len) + 2) return 0;
      r->type = Reply::kBulk;
      r->str = std::string(in.substr(pos, static_cast<size_t>(len)));
      pos += static_cast<size_t>(len) + 2;
      break;
    }
    case '*':
    case '%': {  // a RESP3 map: its pairs flattened, as RESP2 sends them
      int64_t n = 0;
      if (!parse_int(line, &n)) return -1;
      if (in[0] == '%') n *= 2;
      r->type = n < 0 ? Reply::kNull : Reply::kArray;
      r->elems.clear();
      for (int64_t i = 0; i < n; i++) {
        Reply e;
        size_t used = 0;
        const int rc = DecodeReply(in.substr(pos), &used, &e);
        if (rc <= 0) return rc;
        r->elems.push_back(std::move(e));
        pos += used;
      }
      break;
    }
    default: return -1;
  }
  *consumed = pos;
  return 1;
}

// Encodes a command as a multibulk request.
inline std::string EncodeCommand(const std::vector<std::string>& args) {
  std::string s = "*" + std::to_string(args.size()) + "\r\n";
  for (const std::string& a : args) {
    s += "$" + std::to_string(a.size()) + "\r\n";
    s += a;
    s += "\r\n";
  }
  return s;
}

// One blocking connection to 127.0.0.1:port. Every wait is bounded (timeout_ms).
class RespConn {
 public:
  RespConn() = default;
  RespConn(const RespConn&) = delete;
  RespConn& operator=(const RespConn&) = delete;
  ~RespConn() { Close(); }

  bool Connect(uint16_t port) {
    Close();
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return false;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      Close();
      return false;
    }
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return true;
  }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    buf_.clear();
  }
  int fd() const { return fd_; }

  bool SendRaw(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  bool Send(const std::vector<std::string>& args) { return SendRaw(EncodeCommand(args)); }

  // The next reply; nullopt on timeout, EOF or a malformed reply.
  std::optional<Reply> Read(int timeout_ms = 10000) {
    while (true) {
      Reply r;
      size_t used = 0;
      const int rc = DecodeReply(buf_, &used, &r);
      if (rc < 0) return std::nullopt;
      if (rc > 0) {
        buf_.erase(0, used);
        return r;
      }
      if (!Fill(timeout_ms)) return std::nullopt;
    }
  }
  // True if the server closed the connection (EOF) within timeout_ms, replies ignored.
  bool WaitClosed(int timeout_ms = 10000) {
    while (Fill(timeout_ms)) {
    }
    return eof_;
  }
  Reply Call(const std::vector<std::string>& args) {
    if (!Send(args)) return Reply{Reply::kError, "send failed", 0, {}};
    auto r = Read();
    return r ? *r : Reply{Reply::kError, "no reply", 0, {}};
  }

 private:
  bool Fill(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char tmp[65536];
    const ssize_t n = recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool eof_ = false;
  std::string buf_;
};

}  // namespace pmhash::testing
