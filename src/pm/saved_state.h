// src/pm/saved_state.h — the DRAM state an index saves at a clean Close, so that the next open
// does not rebuild it from PM.
//
// Every index rebuilds its DRAM state at open by walking its persistent structure: which chunks
// are in use (chunk_allocator.h keeps that in DRAM only), REH's directory and fingerprints, the
// record heap's slab bitmaps, the live-pair count. After a crash that walk is the only thing to
// trust. After a clean Close nothing changed since the state was last in DRAM, so Close writes
// it to the pool as one image and the next open reads it back: a sequential read of a few MiB
// instead of a walk with a dependent miss per bucket or record.
//
// Image (contiguous pool chunks; the header's saved_state field names the first):
//
//   +0    SavedStateHeader, 64 B:
//           [ magic "PMHSAVE1":64 | payload bytes:64 | chunks:64 | allocator words:64 ]
//           [ checksum:64 | reserved: 24 zero bytes ]
//   +64   the chunk allocator's bitmap, as 64-bit words, up to the word of the last chunk in
//         use (the image's own chunks are set in it; the chunks past these words are free)
//   ...   the engine's section: whatever its SaveState wrote, read back by its LoadState
//
//   checksum = XXH3-64 of the payload, seeded with XXH3-64 of the header (checksum field zero)
//   and of the pool's identity (hash seed, creation time): an image is only valid in the pool
//   that wrote it.
//
// Protocol (the durability argument):
//   S1  Close, after the engine is quiescent: the image is written into freshly allocated chunks
//       and persisted, then saved_state names it (persisted), then the clean mark (persisted,
//       Lifecycle). A crash anywhere before the clean mark leaves an unclean pool: the image is
//       ignored and its chunks, which nothing the recovery walk visits names, are free again.
//   S2  Open trusts an image only if the pool was clean, saved_state names chunks inside the
//       heap, the header is well formed and the checksum matches. Whether it loads or not,
//       saved_state is cleared (persisted) before the open returns: an image is used once, and
//       the next clean Close writes a new one.
//   S3  Loading is all or nothing: any section that does not parse, or a count that does not
//       match (the engine's LoadState checks its structure against the loaded allocator), makes
//       the open fall back to the full recovery walk from an empty allocator.
//   S4  A hostile pool can forge a matching checksum. Loaders therefore bound every offset they
//       will dereference (inside the heap, chunk-aligned, marked used), exactly as recovery
//       bounds what it reads from PM; a forged but consistent image can make answers wrong, as
//       forged buckets can, never an out-of-bounds access. `pmhash check` walks the PM structure
//       and compares it with the DRAM state (CheckInvariants), so it detects such an image.
//   S5  The image is a cache. A pool without one (after a crash, out of space at Close, the
//       Dram policy, an engine without SaveState) opens by the walk, as it always did.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#include "pm/chunk_allocator.h"
#include "pm/pool.h"
#include "pmhash/status.h"

namespace pmhash::pm {

inline constexpr uint64_t kSavedStateMagic = 0x3145564153484D50;  // "PMHSAVE1", little-endian

struct SavedStateHeader {
  uint64_t magic;
  uint64_t payload_bytes;    // after this header
  uint64_t chunks;           // chunks the image takes (header + payload, rounded up)
  uint64_t allocator_words;  // bitmap words saved: 1 to (chunk_count + 63) / 64
  uint64_t checksum;
  uint8_t reserved[24];
};
static_assert(sizeof(SavedStateHeader) == 64, "the image header is one cache line");

// The checksum of an image (the header's field ignored) in the pool of this identity: XXH3-64 of
// the payload, seeded as described above. (Tests forge images with it.)
uint64_t SavedStateChecksum(uint64_t hash_seed, uint64_t create_time_ns,
                           const SavedStateHeader& h, const void* payload);

// Appends the engine's section. Close calls the engine's SaveState twice with it: first to
// count the bytes (no destination), then to write them into the image.
class StateWriter {
 public:
  explicit StateWriter(char* dst = nullptr, uint64_t capacity = 0) : dst_(dst), cap_(capacity) {}
  void Put(const void* p, size_t n) {
    if (dst_ != nullptr && pos_ + n <= cap_) std::memcpy(dst_ + pos_, p, n);
    pos_ += n;
  }
  template <class T>
    requires std::is_trivially_copyable_v<T>
  void Put(const T& v) {
    Put(&v, sizeof(T));
  }
  uint64_t bytes() const { return pos_; }

 private:
  char* dst_;
  uint64_t cap_;
  uint64_t pos_ = 0;
};

// Reads the engine's section back, every read bounded by the section's length.
class StateReader {
 public:
  StateReader(const char* p, uint64_t n) : p_(p), n_(n) {}
  bool Get(void* dst, size_t n) {
    if (n > n_ - pos_) return false;
    std::memcpy(dst, p_ + pos_, n);
    pos_ += n;
    return true;
  }
  template <class T>
    requires std::is_trivially_copyable_v<T>
  bool Get(T* v) {
    return Get(v, sizeof(T));
  }
  uint64_t remaining() const { return n_ - pos_; }

 private:
  const char* p_;
  uint64_t n_;
  uint64_t pos_ = 0;
};

// S1: writes the image (the allocator's bitmap, then `save`'s bytes) and names it in the
// header. Called by Close before the clean mark. No image (and OK) if the pool lacks the space;
// the DRAM allocator does not keep the image's chunks (after Close they are reachable from the
// header only, and the next open frees them: S2, S5).
// REQUIRES: the engine quiescent; P persistent.
Status SaveStateImage(Pool& pool, const std::function<void(StateWriter&)>& save);

// S2, S3: if the pool's image is valid, the allocator is loaded from it (the image's own chunks
// free again) and `load` reads the engine's section; true if both succeeded and `load` consumed
// the section exactly. False: the allocator is Reset() and the engine must recover by its walk
// (its Recover resets whatever `load` may have built). saved_state is cleared in both cases.
bool LoadStateImage(Pool& pool, const std::function<Status(StateReader&)>& load);

}  // namespace pmhash::pm
