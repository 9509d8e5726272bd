// src/pm/pool_format.h — the on-media pool header (format version 1). Documented in
// docs/pool-format.md; every field below is referenced from there.
//
//   offset  size  field
//   ------  ----  ---------------------------------------------------------------
//        0     8  magic            "PMHASH01" (final) / "PMHASHc1" while creating
//        8     4  format_version   kFormatVersion
//       12     4  header_bytes     4096
//       16     8  compat_features  unknown bits are ignored
//       24     8  incompat_features unknown bits refuse the open
//       32     8  pool_size        bytes mapped; the file must be at least this long
//       40     8  heap_offset      first chunk (4096-aligned)
//       48     4  chunk_size       bytes per allocator chunk (power of two >= 64)
//       52     4  reserved0
//       56     8  chunk_count
//       64    16  kind             index name, NUL-padded ("reh")
//       80     1  hash_mode        pmhash::HashMode
//       81     1  created_durability
//       82     2  params_bytes     <= 128
//       84     4  reserved1
//       88     8  hash_seed
//       96     8  create_time_ns   informational
//      104   128  params           the index's typed parameter struct, byte image
//      232    16  reserved2
//      248     8  checksum         XXH3-64 of bytes [0,248) with the final magic in place
//   ---- mutable part, never covered by the checksum, each field validated on use ----
//      256     8  clean_shutdown   1 after Close(), 0 while open
//      264     8  open_count       incremented at every open (informational)
//      272     8  saved_state      offset of the DRAM-state image the last clean Close saved
//                                  (saved_state.h), 0 = none; trusted only with clean_shutdown
//      320    64  roots[8]         pool offsets owned by the index (0 = none)
//   ... 4096: end of header; the chunk heap starts at heap_offset.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pmhash::pm {

inline constexpr char kPoolMagic[8] = {'P', 'M', 'H', 'A', 'S', 'H', '0', '1'};
inline constexpr char kPoolMagicCreating[8] = {'P', 'M', 'H', 'A', 'S', 'H', 'c', '1'};
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint32_t kHeaderBytes = 4096;
inline constexpr uint64_t kKnownIncompatFeatures = 0;
inline constexpr int kMaxRoots = 8;
inline constexpr size_t kMaxParamsBytes = 128;
inline constexpr size_t kKindBytes = 16;

struct PoolHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t header_bytes;
  uint64_t compat_features;
  uint64_t incompat_features;
  uint64_t pool_size;
  uint64_t heap_offset;
  uint32_t chunk_size;
  uint32_t reserved0;
  uint64_t chunk_count;
  char kind[kKindBytes];
  uint8_t hash_mode;
  uint8_t created_durability;
  uint16_t params_bytes;
  uint32_t reserved1;
  uint64_t hash_seed;
  uint64_t create_time_ns;
  uint8_t params[kMaxParamsBytes];
  uint8_t reserved2[16];
  uint64_t checksum;
  // mutable part
  std::atomic<uint64_t> clean_shutdown;
  std::atomic<uint64_t> open_count;
  std::atomic<uint64_t> saved_state;
  uint8_t reserved3[40];
  std::atomic<uint64_t> roots[kMaxRoots];
  uint8_t tail[kHeaderBytes - 384];
};

static_assert(offsetof(PoolHeader, kind) == 64);
static_assert(offsetof(PoolHeader, hash_seed) == 88);
static_assert(offsetof(PoolHeader, params) == 104);
static_assert(offsetof(PoolHeader, checksum) == 248, "checksum closes the immutable part");
static_assert(offsetof(PoolHeader, clean_shutdown) == 256, "mutable part starts a new XPLine");
static_assert(offsetof(PoolHeader, saved_state) == 272);
static_assert(offsetof(PoolHeader, roots) == 320);
static_assert(sizeof(PoolHeader) == kHeaderBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// The header checksum: XXH3-64 of bytes [0, 248) of a header image with the final magic in place
// (so it is the same before and after CommitCreate writes the magic). REQUIRES: `header` points at
// kHeaderBytes readable bytes. Defined in pool.cc; tools that inspect a header use it too.
uint64_t HeaderChecksum(const void* header);

// A magic of eight zero bytes marks an unformatted pool: never created, or its creation crashed
// before the "creating" magic became durable. Nothing in such a file can be pool data.
inline bool IsUnformattedMagic(const void* magic) {
  const auto* m = static_cast<const unsigned char*>(magic);
  for (int i = 0; i < 8; i++) {
    if (m[i] != 0) return false;
  }
  return true;
}

}  // namespace pmhash::pm
