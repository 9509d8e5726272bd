#include "pm/pool.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include "pm/persist.h"

#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif
#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif

namespace pmhash::pm {

namespace {

std::string Errno(std::string_view what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Size of a devdax device from sysfs; 0 if unknown.
uint64_t DevdaxSize(const struct stat& st) {
  std::ifstream f("/sys/dev/char/" + std::to_string(major(st.st_rdev)) + ":" +
                  std::to_string(minor(st.st_rdev)) + "/size");
  uint64_t size = 0;
  if (f) f >> size;
  return size;
}

std::string KindOf(const PoolHeader& h) { return std::string(h.kind, strnlen(h.kind, kKindBytes)); }

}  // namespace

uint64_t HeaderChecksum(const void* header) {
  unsigned char image[offsetof(PoolHeader, checksum)];
  std::memcpy(image, header, sizeof(image));
  std::memcpy(image, kPoolMagic, sizeof(kPoolMagic));
  return XXH3_64bits(image, sizeof(image));
}

Pool::Pool(const Options& o, uint32_t media_block)
    : path_(o.path),
      durability_(o.durability),
      counters_(media_block),
      sim_hook_(o.durability == Durability::kSim ? ThreadSimHook() : nullptr) {
  counters_.set_enabled(o.counters);
}

Pool::~Pool() {
  const bool unlink_file = created_file_ && !committed_;
  Unmap();
  if (fd_ >= 0) close(fd_);  // also drops the flock
  if (unlink_file) unlink(path_.c_str());
}

void Pool::Unmap() {
  if (base_ && sim_hook_) sim_hook_->OnUnmap(base_, size_);
  if (base_) munmap(base_, size_);
  base_ = nullptr;
}

Result<std::unique_ptr<Pool>> Pool::Open(const Options& o, const PoolSpec& spec) {
  if (spec.kind.empty() || spec.kind.size() >= kKindBytes) {
    return Status::InvalidArgument("index kind name must be 1..15 characters");
  }
  if (spec.params.size() > kMaxParamsBytes) {
    return Status::InvalidArgument("index parameter block larger than 128 bytes");
  }
  if (spec.chunk_size < 64 || !std::has_single_bit(spec.chunk_size)) {
    return Status::InvalidArgument("chunk size must be a power of two >= 64");
  }
  std::unique_ptr<Pool> pool(new Pool(o, o.media_block_bytes));
  PMHASH_RETURN_IF_ERROR(pool->MapFile(o, spec));
  if (pool->created_) {
    PMHASH_RETURN_IF_ERROR(pool->InitHeader(o, spec));
  }
  const PoolHeader* h = pool->header();
  pool->allocator_ =
      std::make_unique<ChunkAllocator>(h->heap_offset, h->chunk_size, h->chunk_count);
  if (!pool->created_) {
    pool->was_clean_ = h->clean_shutdown.load() == 1;
    pool->header()->clean_shutdown.store(0);
    pool->header()->open_count.fetch_add(1);
    pool->PersistRange(&h->clean_shutdown, 16);
  }
  return pool;
}

Status Pool::MapFile(const Options& o, const PoolSpec& spec) {
  const uint64_t min_size =
      AlignUp(kHeaderBytes, std::max<uint64_t>(kHeaderBytes, spec.chunk_size)) +
      spec.min_chunks * spec.chunk_size;
  auto too_small = [&](uint64_t size) {
    return Status::InvalidArgument("pool size " + std::to_string(size) +
                                   " B is too small for index '" + std::string(spec.kind) +
                                   "': it needs at least " + std::to_string(min_size) + " B");
  };

  if (path_.empty()) {
    if (o.mode == OpenMode::kOpenExisting) {
      return Status::InvalidArgument("an anonymous (path-less) pool cannot be reopened");
    }
    if (o.pool_size < min_size) return too_small(o.pool_size);
    void* p = mmap(o.map_address_hint, o.pool_size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return Status::IOError(std::string("mmap anonymous: ") + strerror(errno));
    base_ = static_cast<char*>(p);
    size_ = o.pool_size;
    created_ = anonymous_ = true;
    return Status::OK();
  }

  // Open or create the file.
  bool fresh = false;
  if (o.mode == OpenMode::kCreateExclusive) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno == EEXIST) {
      return Status::InvalidArgument("pool file already exists (create-exclusive): " + path_);
    }
    fresh = fd_ >= 0;
  } else {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0 && errno == ENOENT) {
      if (o.mode == OpenMode::kOpenExisting) return Status::NotFound("no pool file at " + path_);
      fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      fresh = fd_ >= 0;
    }
  }
  if (fd_ < 0) return Status::IOError(Errno("cannot open", path_));
  created_file_ = fresh;
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    created_file_ = false;  // someone else's file now
    if (errno == EWOULDBLOCK) return Status::Busy("pool is already open (locked): " + path_);
    return Status::IOError(Errno("flock", path_));
  }

  struct stat st;
  if (fstat(fd_, &st) != 0) return Status::IOError(Errno("fstat", path_));
  const bool devdax = S_ISCHR(st.st_mode);
  if (!devdax && !S_ISREG(st.st_mode)) {
    return Status::InvalidArgument("not a regular file or character device: " + path_);
  }
  uint64_t file_size = devdax ? DevdaxSize(st) : static_cast<uint64_t>(st.st_size);
  if (devdax && file_size == 0) file_size = o.pool_size;

  // Decide between create and open from what the file holds.
  PoolHeader disk;
  std::memset(static_cast<void*>(&disk), 0, sizeof(disk));
  if (!fresh && file_size > 0) {
    const ssize_t got = pread(fd_, &disk, sizeof(disk), 0);
    if (got < 0) return Status::IOError(Errno("read header of", path_));
    if (static_cast<size_t>(got) < sizeof(disk)) {
      return Status::Corruption("truncated pool: " + path_ + " is " + std::to_string(file_size) +
                                " B, smaller than the " + std::to_string(kHeaderBytes) +
                                "-byte header");
    }
  }
  const bool can_create = o.mode != OpenMode::kOpenExisting;
  // A file whose magic is all zero was never formatted (or its creation crashed before the
  // "creating" magic became durable): nothing in it can be pool data.
  const bool empty = fresh || file_size == 0 || IsUnformattedMagic(disk.magic);
  const bool incomplete = !empty && std::memcmp(disk.magic, kPoolMagicCreating, 8) == 0;
  if (incomplete && !can_create) {
    return Status::Corruption("pool creation did not complete (crash during create): " + path_);
  }
  if (empty && !can_create) {
    return Status::Corruption("not a pmhash pool (unformatted: zero magic): " + path_);
  }
  created_ = empty || incomplete;

  if (created_) {
    const uint64_t size = devdax ? file_size : o.pool_size;
    if (size < min_size) return too_small(size);
    if (!devdax) {
      if (ftruncate(fd_, 0) != 0 || ftruncate(fd_, static_cast<off_t>(size)) != 0) {
        return Status::IOError(Errno("ftruncate", path_));
      }
    }
    size_ = size;
  } else {
    if (std::memcmp(disk.magic, kPoolMagic, 8) != 0) {
      return Status::Corruption("not a pmhash pool (bad magic): " + path_);
    }
    if (disk.format_version != kFormatVersion) {
      return Status::NotSupported("pool format version " + std::to_string(disk.format_version) +
                                  " is not supported (this build reads version " +
                                  std::to_string(kFormatVersion) + "): " + path_);
    }
    if (HeaderChecksum(&disk) != disk.checksum) {
      return Status::Corruption("pool header checksum mismatch: " + path_);
    }
    if (disk.pool_size > file_size) {
      return Status::Corruption("truncated pool: " + path_ + " is " + std::to_string(file_size) +
                                " B but its header says " + std::to_string(disk.pool_size) + " B");
    }
    size_ = disk.pool_size;
  }

  int flags = MAP_SHARED_VALIDATE | MAP_SYNC;
  void* p = mmap(o.map_address_hint, size_, PROT_READ | PROT_WRITE, flags, fd_, 0);
  if (p == MAP_FAILED && (errno == EOPNOTSUPP || errno == EINVAL)) {
    p = mmap(o.map_address_hint, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  } else if (p != MAP_FAILED) {
    map_sync_ = true;
  }
  if (p == MAP_FAILED) return Status::IOError(Errno("mmap", path_));
  base_ = static_cast<char*>(p);
  if (sim_hook_) sim_hook_->OnMap(base_, size_);

  if (!created_) return ValidateHeader(o, spec);
  return Status::OK();
}

Status Pool::ValidateHeader(const Options& o, const PoolSpec& spec) {
  const PoolHeader& h = *header();
  // Re-check what was validated through pread, now on the mapping (the file could change between).
  if (std::memcmp(h.magic, kPoolMagic, 8) != 0 || HeaderChecksum(&h) != h.checksum ||
      h.pool_size != size_) {
    return Status::Corruption("pool header changed while opening: " + path_);
  }
  if (h.header_bytes != kHeaderBytes) return Status::Corruption("bad header size in " + path_);
  if ((h.incompat_features & ~kKnownIncompatFeatures) != 0) {
    return Status::NotSupported("pool uses incompatible features unknown to this build: " + path_);
  }
  if (h.chunk_size < 64 || !std::has_single_bit(h.chunk_size) || h.heap_offset < kHeaderBytes ||
      h.heap_offset % h.chunk_size != 0 || h.heap_offset > h.pool_size ||
      h.chunk_count > (h.pool_size - h.heap_offset) / h.chunk_size) {
    return Status::Corruption("pool heap geometry is inconsistent: " + path_);
  }
  if (KindOf(h) != spec.kind) {
    return Status::InvalidArgument("pool " + path_ + " holds index '" + KindOf(h) + "', not '" +
                                   std::string(spec.kind) + "'");
  }
  if (h.params_bytes != spec.params.size() ||
      std::memcmp(h.params, spec.params.data(), spec.params.size()) != 0) {
    return Status::InvalidArgument("pool " + path_ + " was created with other '" +
                                   std::string(spec.kind) + "' parameters (see `pmhash info`)");
  }
  if (h.hash_mode != static_cast<uint8_t>(o.hash_mode)) {
    return Status::InvalidArgument("pool " + path_ + " was created with another hash mode");
  }
  return Status::OK();
}

Status Pool::InitHeader(const Options& o, const PoolSpec& spec) {
  // Fields first, then the "creating" magic: a crash in between leaves a zero magic, which the
  // next open treats as unformatted.
  PoolHeader* h = header();
  std::memset(static_cast<void*>(h), 0, sizeof(PoolHeader));
  h->format_version = kFormatVersion;
  h->header_bytes = kHeaderBytes;
  h->pool_size = size_;
  h->heap_offset = AlignUp(kHeaderBytes, std::max<uint64_t>(kHeaderBytes, spec.chunk_size));
  h->chunk_size = spec.chunk_size;
  h->chunk_count = (size_ - h->heap_offset) / spec.chunk_size;
  std::memcpy(h->kind, spec.kind.data(), spec.kind.size());
  h->hash_mode = static_cast<uint8_t>(o.hash_mode);
  h->created_durability = static_cast<uint8_t>(o.durability);
  h->params_bytes = static_cast<uint16_t>(spec.params.size());
  h->hash_seed = o.hash_seed;
  h->create_time_ns = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch() /
                                            std::chrono::nanoseconds(1));
  if (!spec.params.empty()) std::memcpy(h->params, spec.params.data(), spec.params.size());
  PersistRange(h, sizeof(PoolHeader));
  std::memcpy(h->magic, kPoolMagicCreating, 8);
  PersistRange(h->magic, 8);
  return Status::OK();
}

Status Pool::CommitCreate() {
  PoolHeader* h = header();
  h->checksum = HeaderChecksum(h);
  PersistRange(&h->checksum, sizeof(h->checksum));
  std::memcpy(h->magic, kPoolMagic, 8);
  PersistRange(h->magic, 8);
  committed_ = true;
  return Status::OK();
}

void Pool::MarkClean() {
  header()->clean_shutdown.store(1, std::memory_order_release);
  PersistRange(&header()->clean_shutdown, 8);
}

void Pool::SetRoot(int i, uint64_t offset) {
  header()->roots[i].store(offset, std::memory_order_release);
  PersistRange(&header()->roots[i], 8);
}

void Pool::PersistRange(const void* p, size_t len) {
  WithPolicy(durability_,
             [&](auto policy) { Persister<decltype(policy)>(persist_target()).Persist(p, len); });
}

}  // namespace pmhash::pm
