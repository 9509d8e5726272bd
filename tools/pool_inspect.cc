#include "tools/pool_inspect.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "pm/pool.h"
#include "registry.h"

namespace pmhash::cli {

namespace {

template <class T>
T Load(const std::vector<uint8_t>& b, size_t offset) {
  T v;
  std::memcpy(&v, b.data() + offset, sizeof(T));
  return v;
}

}  // namespace

Result<PoolHeaderView> ReadPoolHeader(const std::string& path) {
  PoolHeaderView h;
  h.path = path;
  // The file type first, by stat: opening a FIFO would block forever.
  PMHASH_RETURN_IF_ERROR(pm::CheckPoolFileType(path));
  // O_NONBLOCK: should the path have become a FIFO since, the open still returns.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const std::string why = std::strerror(errno);
    if (errno == ENOENT) return Status::NotFound("no such file: " + path);
    return Status::IOError("cannot open " + path + ": " + why);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return Status::IOError("fstat " + path + ": " + why);
  }
  h.char_device = S_ISCHR(st.st_mode);
  if (!h.char_device && !S_ISREG(st.st_mode)) {
    close(fd);
    return Status::InvalidArgument("not a pmhash pool: " + path +
                                   " is not a regular file or character device");
  }
  h.file_size = h.char_device ? 0 : static_cast<uint64_t>(st.st_size);
  h.storage = std::string(pm::DescribeStorage(fd));
  h.bytes.assign(pm::kHeaderBytes, 0);
  size_t got = 0;
  while (got < h.bytes.size()) {
    const ssize_t n =
        pread(fd, h.bytes.data() + got, h.bytes.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::strerror(errno);
      close(fd);
      return Status::IOError("read " + path + ": " + why);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got < h.bytes.size()) {
    return Status::Corruption("not a pmhash pool: " + path + " is " + std::to_string(got) +
                              " bytes, shorter than the " + std::to_string(pm::kHeaderBytes) +
                              "-byte pool header");
  }

  using pm::PoolHeader;
  const auto& b = h.bytes;
  if (std::memcmp(b.data(), pm::kPoolMagic, 8) == 0) {
    h.magic = PoolHeaderView::MagicState::kFinal;
  } else if (std::memcmp(b.data(), pm::kPoolMagicCreating, 8) == 0) {
    h.magic = PoolHeaderView::MagicState::kCreating;
  } else if (pm::IsUnformattedMagic(b.data())) {
    return Status::Corruption(
        "not a pmhash pool (unformatted: zero magic; creating a pool "
        "here would format it): " +
        path);
  } else {
    return Status::Corruption("not a pmhash pool (bad magic): " + path);
  }
  h.format_version = Load<uint32_t>(b, offsetof(PoolHeader, format_version));
  h.header_bytes = Load<uint32_t>(b, offsetof(PoolHeader, header_bytes));
  h.compat_features = Load<uint64_t>(b, offsetof(PoolHeader, compat_features));
  h.incompat_features = Load<uint64_t>(b, offsetof(PoolHeader, incompat_features));
  h.pool_size = Load<uint64_t>(b, offsetof(PoolHeader, pool_size));
  h.heap_offset = Load<uint64_t>(b, offsetof(PoolHeader, heap_offset));
  h.chunk_size = Load<uint32_t>(b, offsetof(PoolHeader, chunk_size));
  h.chunk_count = Load<uint64_t>(b, offsetof(PoolHeader, chunk_count));
  const char* kind = reinterpret_cast<const char*>(b.data() + offsetof(PoolHeader, kind));
  h.kind.assign(kind, strnlen(kind, pm::kKindBytes));
  h.hash_mode = Load<uint8_t>(b, offsetof(PoolHeader, hash_mode));
  h.created_durability = Load<uint8_t>(b, offsetof(PoolHeader, created_durability));
  h.params_bytes = Load<uint16_t>(b, offsetof(PoolHeader, params_bytes));
  h.hash_seed = Load<uint64_t>(b, offsetof(PoolHeader, hash_seed));
  h.create_time_ns = Load<uint64_t>(b, offsetof(PoolHeader, create_time_ns));
  const size_t np = std::min<size_t>(h.params_bytes, pm::kMaxParamsBytes);
  h.params.assign(b.begin() + offsetof(PoolHeader, params),
                  b.begin() + static_cast<std::ptrdiff_t>(offsetof(PoolHeader, params) + np));
  h.checksum = Load<uint64_t>(b, offsetof(PoolHeader, checksum));
  h.computed_checksum = pm::HeaderChecksum(b.data());
  h.clean_shutdown = Load<uint64_t>(b, offsetof(PoolHeader, clean_shutdown));
  h.open_count = Load<uint64_t>(b, offsetof(PoolHeader, open_count));
  h.saved_state = Load<uint64_t>(b, offsetof(PoolHeader, saved_state));
  for (int i = 0; i < pm::kMaxRoots; i++) {
    h.roots[i] =
        Load<uint64_t>(b, offsetof(PoolHeader, roots) + sizeof(uint64_t) * static_cast<size_t>(i));
  }
  return h;
}

bool IsUnformatted(const std::string& path) {
  if (!pm::CheckPoolFileType(path).ok()) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool result = false;
  if (fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISCHR(st.st_mode))) {
    if (S_ISREG(st.st_mode) && st.st_size == 0) {
      result = true;
    } else {
      uint8_t magic[8];
      result = pread(fd, magic, sizeof(magic), 0) == static_cast<ssize_t>(sizeof(magic)) &&
               pm::IsUnformattedMagic(magic);
    }
  }
  close(fd);
  return result;
}

std::string DescribeParams(const PoolHeaderView& h) {
  if (auto d = DescribePoolParams(h.kind, h.params); d.ok()) return d.value();
  std::string s;
  for (const uint8_t byte : h.params) {
    char buf[4];
    std::snprintf(buf, sizeof(buf), "%02x", byte);
    s += buf;
  }
  return s.empty() ? "(none)" : s;
}

Result<std::unique_ptr<Index>> OpenPool(Options o, const std::optional<std::string>& want_kind,
                                        bool may_create, std::string_view default_kind) {
  auto header = ReadPoolHeader(o.path);
  if (header.ok()) {
    if (want_kind && *want_kind != header.value().kind) {
      return Status::InvalidArgument("pool " + o.path + " holds index '" + header.value().kind +
                                     "', not '" + *want_kind + "'");
    }
    o.mode = OpenMode::kOpenExisting;
    return pmhash::Open(o);
  }
  if (may_create && (header.status().IsNotFound() || IsUnformatted(o.path))) {
    // A missing file is created; an empty file or a zero-magic file/device is formatted.
    o.mode = header.status().IsNotFound() ? OpenMode::kCreateExclusive : OpenMode::kOpenOrCreate;
    return pmhash::Open(want_kind ? std::string_view(*want_kind) : default_kind, o);
  }
  return header.status();
}

}  // namespace pmhash::cli
