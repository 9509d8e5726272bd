// tools/serve/resp.cc — see resp.h.
#include "tools/serve/resp.h"

#include <charconv>
#include <cstdio>
#include <cstring>

namespace pmhash::serve {
namespace {

// A header line ("*3", "$5") is short; one without CRLF after this many bytes is an error.
constexpr size_t kMaxHeaderLine = 64;

// Finds the CRLF-terminated line at in[from..]. Returns 1 with *line (without CRLF) and *next
// (the byte after LF), 0 if the line is not complete yet, -1 if it is too long or has a CR that
// is not followed by LF.
int HeaderLine(std::string_view in, size_t from, std::string_view* line, size_t* next) {
  const size_t avail = in.size() - from;
  const size_t scan = avail < kMaxHeaderLine ? avail : kMaxHeaderLine;
  const void* cr = std::memchr(in.data() + from, '\r', scan);
  if (cr == nullptr) return avail < kMaxHeaderLine ? 0 : -1;
  const size_t at = static_cast<size_t>(static_cast<const char*>(cr) - in.data());
  if (at + 1 >= in.size()) return 0;
  if (in[at + 1] != '\n') return -1;
  *line = in.substr(from, at - from);
  *next = at + 2;
  return 1;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Splits an inline command line into words (Redis's rules: spaces and tabs separate words;
// "..." with backslash escapes; '...' with \' only; a closing quote must end the word).
bool SplitInline(std::string_view line, std::vector<std::string>* words) {
  words->clear();
  size_t i = 0;
  const size_t n = line.size();
  auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (true) {
    while (i < n && space(line[i])) i++;
    if (i == n) return true;
    std::string w;
    if (line[i] == '"' || line[i] == '\'') {
      const char q = line[i++];
      bool closed = false;
      while (i < n) {
        const char c = line[i];
        if (c == q) {
          closed = true;
          i++;
          break;
        }
        if (c == '\\' && i + 1 < n) {
          const char e = line[i + 1];
          if (q == '\'') {
            if (e == '\'') {
              w += '\'';
              i += 2;
              continue;
            }
          } else if (e == 'x' && i + 3 < n && HexDigit(line[i + 2]) >= 0 &&
                     HexDigit(line[i + 3]) >= 0) {
            w += static_cast<char>(HexDigit(line[i + 2]) * 16 + HexDigit(line[i + 3]));
            i += 4;
            continue;
          } else {
            w += e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e == 'b' ? '\b'
                 : e == 'a' ? '\a' : e;
            i += 2;
            continue;
          }
        }
        w += c;
        i++;
      }
      if (!closed || (i < n && !space(line[i]))) return false;
    } else {
      while (i < n && !space(line[i])) w += line[i++];
    }
    words->push_back(std::move(w));
  }
}

}  // namespace

bool ParseInteger(std::string_view s, int64_t* v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

void RequestParser::Reset() {
  pos_ = 0;
  expected_ = -1;
  bulk_len_ = -1;
  spans_.clear();
}

RequestParser::Outcome RequestParser::Fail(std::string msg) {
  Reset();
  error_ = "ERR Protocol error: " + std::move(msg);
  return Outcome::kError;
}

RequestParser::Outcome RequestParser::Parse(std::string_view in, size_t* consumed) {
  *consumed = 0;
  if (expected_ < 0) {
    if (in.empty()) return Outcome::kNeedMore;
    if (in[0] != '*') return ParseInline(in, consumed);
  }
  return ParseMultibulk(in, consumed);
}

RequestParser::Outcome RequestParser::ParseMultibulk(std::string_view in, size_t* consumed) {
  std::string_view line;
  size_t next = 0;
  if (expected_ < 0) {
    const int r = HeaderLine(in, 0, &line, &next);
    if (r == 0) return Outcome::kNeedMore;
    int64_t n = 0;
    if (r < 0 || !ParseInteger(line.substr(1), &n) ||
        n > static_cast<int64_t>(limits_.max_args)) {
      return Fail("invalid multibulk length");
    }
    if (n <= 0) {  // "*0" and "*-1": nothing to run (as Redis)
      *consumed = next;
      Reset();
      return Outcome::kEmpty;
    }
    expected_ = n;
    pos_ = next;
    spans_.reserve(static_cast<size_t>(n < 1024 ? n : 1024));
  }
  while (static_cast<int64_t>(spans_.size()) < expected_) {
    if (bulk_len_ < 0) {
      if (pos_ >= in.size()) return Outcome::kNeedMore;
      if (in[pos_] != '$') {
        const uint8_t c = static_cast<uint8_t>(in[pos_]);
        char shown[8];
        std::snprintf(shown, sizeof(shown), c >= 32 && c < 127 ? "%c" : "\\x%02x", c);
        return Fail(std::string("expected '$', got '") + shown + "'");
      }
      const int r = HeaderLine(in, pos_, &line, &next);
      if (r == 0) return Outcome::kNeedMore;
      int64_t len = 0;
      if (r < 0 || !ParseInteger(line.substr(1), &len) || len < 0 ||
          len > static_cast<int64_t>(limits_.max_bulk)) {
        return Fail("invalid bulk length");
      }
      bulk_len_ = len;
      pos_ = next;
    }
    const size_t len = static_cast<size_t>(bulk_len_);
    if (in.size() - pos_ < len + 2) return Outcome::kNeedMore;
    if (in[pos_ + len] != '\r' || in[pos_ + len + 1] != '\n') {
      return Fail("bulk argument not followed by CRLF");
    }
    spans_.emplace_back(pos_, len);
    pos_ += len + 2;
    bulk_len_ = -1;
  }
  args_.clear();
  for (const auto& [off, len] : spans_) args_.push_back(in.substr(off, len));
  *consumed = pos_;
  Reset();
  return Outcome::kCommand;
}

RequestParser::Outcome RequestParser::ParseInline(std::string_view in, size_t* consumed) {
  const size_t scan = in.size() < limits_.max_inline + 1 ? in.size() : limits_.max_inline + 1;
  const void* nl = std::memchr(in.data(), '\n', scan);
  if (nl == nullptr) {
    if (in.size() > limits_.max_inline) return Fail("too big inline request");
    return Outcome::kNeedMore;
  }
  const size_t at = static_cast<size_t>(static_cast<const char*>(nl) - in.data());
  std::string_view line = in.substr(0, at);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (!SplitInline(line, &inline_words_)) return Fail("unbalanced quotes in request");
  *consumed = at + 1;
  if (inline_words_.empty()) return Outcome::kEmpty;
  args_.assign(inline_words_.begin(), inline_words_.end());
  return Outcome::kCommand;
}

void AppendSimple(std::string* out, std::string_view s) {
  out->push_back('+');
  out->append(s);
  out->append("\r\n");
}

void AppendError(std::string* out, std::string_view msg) {
  out->push_back('-');
  for (char c : msg) out->push_back(c == '\r' || c == '\n' ? ' ' : c);
  out->append("\r\n");
}

namespace {

// "<type><n>\r\n": the line of an integer, a bulk string's length or an array's count.
template <class T>
void AppendLine(std::string* out, char type, T n) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), n);
  (void)ec;
  out->push_back(type);
  out->append(buf, p);
  out->append("\r\n");
}

}  // namespace

void AppendInteger(std::string* out, int64_t v) { AppendLine(out, ':', v); }

void AppendBulk(std::string* out, std::string_view s) {
  AppendLine(out, '$', s.size());
  out->append(s);
  out->append("\r\n");
}

void AppendNull(std::string* out, int proto) { out->append(proto == 3 ? "_\r\n" : "$-1\r\n"); }

void AppendArrayHeader(std::string* out, size_t n) { AppendLine(out, '*', n); }

void AppendMapHeader(std::string* out, size_t n, int proto) {
  if (proto == 3) {
    AppendLine(out, '%', n);
  } else {
    AppendLine(out, '*', 2 * n);
  }
}

}  // namespace pmhash::serve
