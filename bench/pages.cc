#include "bench/pages.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace pmhash::bench {

namespace {

std::string ReadAll(const char* path) {
  std::ifstream f(path);
  if (!f) return "";
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// "always [madvise] never" -> "madvise".
std::string Selected(const std::string& text) {
  const auto open = text.find('['), close = text.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return text.substr(open + 1, close - open - 1);
}

// The whole of `s` as a number in `base`.
bool ParseNumber(std::string_view s, int base, uint64_t* out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

// A mapping's header line: "start-end perms offset dev inode [pathname]". False for the
// "Field:   N kB" lines.
bool ParseHeader(std::string_view line, uintptr_t* start, uintptr_t* end, std::string_view* path) {
  const auto dash = line.find('-');
  const auto sp = line.find(' ');
  if (dash == std::string_view::npos || sp == std::string_view::npos || dash > sp) return false;
  if (!ParseNumber(line.substr(0, dash), 16, start) ||
      !ParseNumber(line.substr(dash + 1, sp - dash - 1), 16, end)) {
    return false;
  }
  // Skip perms, offset, dev, inode; the rest (after spaces) is the pathname.
  size_t pos = sp;
  for (int field = 0; field < 4; field++) {
    pos = line.find_first_not_of(' ', pos);
    if (pos == std::string_view::npos) {
      *path = {};
      return true;
    }
    pos = line.find(' ', pos);
    if (pos == std::string_view::npos) {
      *path = {};
      return true;
    }
  }
  pos = line.find_first_not_of(' ', pos);
  *path = pos == std::string_view::npos ? std::string_view() : line.substr(pos);
  return true;
}

// "Rss:   1234 kB" -> bytes, if the line is `field`.
bool FieldBytes(std::string_view line, std::string_view field, uint64_t* bytes) {
  if (!line.starts_with(field) || line.substr(field.size(), 1) != ":") return false;
  std::string_view rest = line.substr(field.size() + 1);
  rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
  if (!ParseNumber(rest.substr(0, rest.find(' ')), 10, bytes)) return false;
  *bytes *= 1024;  // smaps sizes are in kB
  return true;
}

}  // namespace

PageUse ParseSmaps(std::string_view smaps,
                   const std::function<bool(uintptr_t, uintptr_t, std::string_view)>& match) {
  static constexpr std::string_view kHugeFields[] = {"AnonHugePages", "ShmemPmdMapped",
                                                     "FilePmdMapped", "FilePudMapped"};
  PageUse use;
  bool in = false;
  size_t pos = 0;
  while (pos < smaps.size()) {
    size_t eol = smaps.find('\n', pos);
    if (eol == std::string_view::npos) eol = smaps.size();
    const std::string_view line = smaps.substr(pos, eol - pos);
    pos = eol + 1;
    uintptr_t start = 0, end = 0;
    std::string_view path;
    if (ParseHeader(line, &start, &end, &path)) {
      in = match(start, end, path);
      use.known = use.known || in;
      continue;
    }
    if (!in) continue;
    if (line.substr(0, 8) == "VmFlags:") {
      // Two-letter flags separated by spaces: "hg" is VM_HUGEPAGE.
      for (size_t f = 8; f + 2 <= line.size(); f++) {
        if (line[f - 1] == ' ' && line.substr(f, 2) == "hg" &&
            (f + 2 == line.size() || line[f + 2] == ' ')) {
          use.advised = true;
        }
      }
      continue;
    }
    uint64_t bytes = 0;
    if (FieldBytes(line, "Rss", &bytes)) {
      use.resident += bytes;
      continue;
    }
    for (const std::string_view f : kHugeFields) {
      if (FieldBytes(line, f, &bytes)) {
        use.huge += bytes;
        break;
      }
    }
  }
  return use;
}

PageUse PagesOfFile(const std::string& path) {
  const std::string deleted = path + " (deleted)";
  return ParseSmaps(ReadAll("/proc/self/smaps"), [&](uintptr_t, uintptr_t, std::string_view p) {
    return p == path || p == deleted;
  });
}

PageUse PagesOfRange(const void* addr, size_t len) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(addr), hi = lo + len;
  return ParseSmaps(ReadAll("/proc/self/smaps"), [&](uintptr_t start, uintptr_t end,
                                                      std::string_view) {
    return len > 0 && start < hi && lo < end;
  });
}

std::string HugePageSettings(const std::string& pool_dir) {
  std::string out;
  const std::string anon = Selected(ReadAll("/sys/kernel/mm/transparent_hugepage/enabled"));
  const std::string shmem =
      Selected(ReadAll("/sys/kernel/mm/transparent_hugepage/shmem_enabled"));
  if (!anon.empty()) out = "THP " + anon;
  if (!shmem.empty()) out += std::string(out.empty() ? "" : ", ") + "shmem THP " + shmem;
  // The mount that holds pool_dir: the longest mount point that is a prefix of its real path.
  std::error_code ec;
  const std::string dir = std::filesystem::weakly_canonical(pool_dir, ec).string();
  std::istringstream mounts(ReadAll("/proc/mounts"));
  std::string line, best_fs, best_opts;
  size_t best = 0;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string dev, point, fs, opts;
    if (!(fields >> dev >> point >> fs >> opts)) continue;
    const bool under = dir.compare(0, point.size(), point) == 0 &&
                       (dir.size() == point.size() || point == "/" || dir[point.size()] == '/');
    if (under && point.size() >= best) {
      best = point.size();
      best_fs = fs;
      best_opts = opts;
    }
  }
  if (best_fs == "tmpfs") {
    std::string huge = "never";  // tmpfs's default
    std::istringstream opts(best_opts);
    std::string opt;
    while (std::getline(opts, opt, ',')) {
      if (opt.rfind("huge=", 0) == 0) huge = opt.substr(5);
    }
    out += std::string(out.empty() ? "" : "; ") + "pool tmpfs huge=" + huge;
  }
  return out;
}

}  // namespace pmhash::bench
