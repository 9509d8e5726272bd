// tools/serve/resp.h — the wire format of `pmhash serve` (RESP2, and RESP3 after HELLO 3): an
// incremental request parser and reply encoders.
//
// Requests come in the two forms Redis accepts:
//   multibulk  "*<n>\r\n" then n times "$<len>\r\n<len bytes>\r\n"   (every client library)
//   inline     "SET k v\r\n": words split on spaces, "double" quotes with \n \r \t \" \\ \xHH
//              escapes and 'single' quotes                              (telnet, nc)
// The parser is incremental: it is handed the connection's unconsumed input, which begins with a
// command and grows between calls, and resumes where it stopped (a 8 MiB argument arriving in
// 16 KiB reads is scanned once, not 512 times). Every length is bounded by Limits before any
// memory is reserved for it, so a hostile header ("$9999999999") costs nothing: it is an error.
//
// Replies are appended to a std::string (the connection's output buffer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pmhash::serve {

struct Limits {
  size_t max_bulk = size_t{8} << 20;    // bytes of one argument (Redis: proto-max-bulk-len)
  size_t max_args = size_t{1} << 20;    // arguments of one command
  size_t max_inline = size_t{64} << 10;  // bytes of one inline command line
  // Unconsumed input one client may have buffered (a command still arriving plus the commands
  // pipelined behind it); beyond it the client gets an error and is disconnected.
  size_t max_query_buffer = size_t{64} << 20;
};

class RequestParser {
 public:
  enum class Outcome {
    kCommand,   // one command complete: args(), and *consumed bytes to drop from the input
    kNeedMore,  // the input holds an incomplete command: call again with more bytes
    kEmpty,     // an empty command (blank inline line, "*0"): drop *consumed bytes, no reply
    kError,     // a protocol error: error() says which; the connection must be closed
  };

  explicit RequestParser(const Limits& limits) : limits_(limits) {}

  // `input` is the connection's unconsumed input; it starts at the command being parsed, and
  // holds at least the bytes of the previous call (more may have been appended; none removed
  // since the last kCommand/kEmpty). Resumes where the previous call stopped.
  Outcome Parse(std::string_view input, size_t* consumed);

  // The arguments of the last kCommand: views into the `input` of that call.
  const std::vector<std::string_view>& args() const { return args_; }
  const std::string& error() const { return error_; }

 private:
  Outcome ParseMultibulk(std::string_view in, size_t* consumed);
  Outcome ParseInline(std::string_view in, size_t* consumed);
  Outcome Fail(std::string msg);
  void Reset();

  Limits limits_;
  // Resumable state of a multibulk command: bytes parsed so far, arguments expected, and the
  // (offset, length) of each complete argument; -1: no "$<len>" line read for the next one.
  size_t pos_ = 0;
  int64_t expected_ = -1;
  int64_t bulk_len_ = -1;
  std::vector<std::pair<size_t, size_t>> spans_;
  std::vector<std::string_view> args_;
  std::vector<std::string> inline_words_;  // unescaped words of an inline command
  std::string error_;
};

// A signed decimal 64-bit integer that is the whole of s (optional '-', no '+', no spaces): the
// lengths of the wire and Redis's integer arguments and values.
bool ParseInteger(std::string_view s, int64_t* v);

// Reply encoders. `proto` is the connection's protocol version (HELLO): 2 (RESP2, the default)
// or 3 (RESP3), which has a null type and a map type of its own; every other reply is the same
// in both.
void AppendSimple(std::string* out, std::string_view s);  // "+OK\r\n" (s has no CR/LF)
void AppendError(std::string* out, std::string_view msg);  // "-ERR ...\r\n": CR/LF become ' '
void AppendInteger(std::string* out, int64_t v);
void AppendBulk(std::string* out, std::string_view s);
void AppendNull(std::string* out, int proto = 2);  // RESP2 "$-1\r\n", RESP3 "_\r\n"
void AppendArrayHeader(std::string* out, size_t n);  // "*n\r\n"
// A map of n key/value pairs: RESP3 "%n\r\n", RESP2 an array of 2n elements.
void AppendMapHeader(std::string* out, size_t n, int proto = 2);

}  // namespace pmhash::serve
