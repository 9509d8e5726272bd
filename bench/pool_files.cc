#include "bench/pool_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace pmhash::bench {

namespace {

// Paths a signal handler may unlink. A slot is claimed with a CAS on `used`, the path written,
// then `armed` set; the handler reads only armed slots.
constexpr int kSlots = 16;
constexpr size_t kMaxPath = 4096;
struct Slot {
  std::atomic<bool> used{false};
  std::atomic<bool> armed{false};
  char path[kMaxPath];
};
Slot g_slots[kSlots];

int Register(const std::string& path) {
  if (path.size() >= kMaxPath) return -1;
  for (int i = 0; i < kSlots; i++) {
    bool expected = false;
    if (g_slots[i].used.compare_exchange_strong(expected, true)) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].armed.store(true, std::memory_order_release);
      return i;
    }
  }
  return -1;  // table full: the file is still removed by the destructor
}

void Unregister(int slot) {
  if (slot < 0) return;
  g_slots[slot].armed.store(false, std::memory_order_release);
  g_slots[slot].used.store(false, std::memory_order_release);
}

std::string ErrnoText(std::string_view what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

bool WritableDir(const char* dir) {
  struct stat st;
  return dir && *dir && stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && access(dir, W_OK | X_OK) == 0;
}

}  // namespace

std::string DefaultPoolDir() {
  if (WritableDir("/dev/shm")) return "/dev/shm";
  if (const char* t = std::getenv("TMPDIR"); WritableDir(t)) return t;
  return "/tmp";
}

PoolFile::PoolFile(std::string path) : path_(std::move(path)), slot_(Register(path_)) {}

PoolFile::~PoolFile() {
  Unregister(slot_);
  if (!keep_) unlink(path_.c_str());
}

void PoolFile::Keep() {
  keep_ = true;
  Unregister(slot_);
  slot_ = -1;
}

Result<std::unique_ptr<PoolFile>> PoolFile::CreateTemp(const std::string& dir,
                                                       std::string_view tag) {
  std::string tmpl = dir + "/pmhash-" + std::string(tag) + "-XXXXXX";
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) return Status::IOError(ErrnoText("cannot create a temporary pool file in", dir));
  close(fd);
  return std::unique_ptr<PoolFile>(new PoolFile(tmpl));
}

Result<std::unique_ptr<PoolFile>> PoolFile::CreateAt(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError(ErrnoText("cannot create pool file", path));
  struct stat st;
  const int rc = fstat(fd, &st);
  close(fd);
  if (rc != 0) return Status::IOError(ErrnoText("fstat", path));
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument("bench pool must be a regular file: " + path);
  }
  if (st.st_size != 0) {
    return Status::InvalidArgument("pool file " + path +
                                   " exists and is not empty; the benchmark needs a fresh pool "
                                   "(remove the file or choose another --pool)");
  }
  return std::unique_ptr<PoolFile>(new PoolFile(path));
}

Status PoolFile::Truncate() {
  if (::truncate(path_.c_str(), 0) != 0) return Status::IOError(ErrnoText("truncate", path_));
  return Status::OK();
}

Status PoolFile::MoveTo(const std::string& new_path) {
  if (::rename(path_.c_str(), new_path.c_str()) != 0) {
    return Status::IOError("rename " + path_ + " to " + new_path + ": " + std::strerror(errno));
  }
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError(ErrnoText("cannot recreate pool file", path_));
  close(fd);
  return Status::OK();
}

void RemoveRegisteredPoolFilesForSignal() {
  for (auto& s : g_slots) {
    if (s.armed.load(std::memory_order_acquire)) unlink(s.path);
  }
}

}  // namespace pmhash::bench
