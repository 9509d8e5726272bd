// tests/crash/image_file.h — the file a crash image is written to before it is recovered.
//
// The crash harness writes thousands of pool images per run into one file, each followed by an
// open (recovery) that maps it. Truncating and refilling the file for each image made tmpfs free
// and allocate every page of it each time: half of the crash suite's time went to the kernel.
// ImageFile keeps the file and a shared mapping of it, and copies only the 4 KiB pages that
// differ from what the file holds (the previous image, plus whatever its recovery wrote there).
//
// The mapping is checked before each use: if the file at the path is another one (recreated) or
// has another size (a recovery re-created the pool in place), it is mapped again, so a stale
// mapping is never compared against, written to, or read past its end.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "pmhash/status.h"

namespace pmhash::crashtest {

class ImageFile {
 public:
  explicit ImageFile(std::string path) : path_(std::move(path)) {}
  ~ImageFile() { Unmap(); }
  ImageFile(const ImageFile&) = delete;
  ImageFile& operator=(const ImageFile&) = delete;

  const std::string& path() const { return path_; }

  // After this returns OK the file at path() holds exactly `img`.
  Status Write(const std::vector<char>& img) {
    if (img.empty()) return Status::InvalidArgument("empty crash image");
    if (!MappedAndCurrent(img.size())) {
      if (Status s = Map(img.size()); !s.ok()) return s;
    }
    constexpr size_t kPage = 4096;
    for (size_t off = 0; off < img.size(); off += kPage) {
      const size_t n = std::min(kPage, img.size() - off);
      if (std::memcmp(map_ + off, img.data() + off, n) != 0) {
        std::memcpy(map_ + off, img.data() + off, n);
      }
    }
    return Status::OK();
  }

  // Unmaps and removes the file.
  void Remove() {
    Unmap();
    unlink(path_.c_str());
  }

 private:
  // Whether the mapping is of the file now at path_, at `size` bytes.
  bool MappedAndCurrent(size_t size) const {
    if (map_ == nullptr) return false;
    struct stat at_path, mapped;
    if (stat(path_.c_str(), &at_path) != 0 || fstat(fd_, &mapped) != 0) return false;
    return at_path.st_dev == mapped.st_dev && at_path.st_ino == mapped.st_ino &&
           static_cast<size_t>(mapped.st_size) == size && size_ == size;
  }

  Status Map(size_t size) {
    Unmap();
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd_ < 0) return Status::IOError("open image file " + path_);
    struct stat st;
    if (fstat(fd_, &st) != 0) return Status::IOError("stat image file " + path_);
    if (static_cast<size_t>(st.st_size) != size && ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      return Status::IOError("size image file " + path_);
    }
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) return Status::IOError("map image file " + path_);
    map_ = static_cast<char*>(p);
    size_ = size;
    return Status::OK();
  }

  void Unmap() {
    if (map_ != nullptr) munmap(map_, size_);
    if (fd_ >= 0) close(fd_);
    map_ = nullptr;
    size_ = 0;
    fd_ = -1;
  }

  std::string path_;
  int fd_ = -1;
  char* map_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pmhash::crashtest
