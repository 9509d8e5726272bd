// tools/pool_inspect.h — read a pool header without opening the pool; open a pool as it
// describes itself (check, put/get/del, serve).
//
// `pmhash info` must work on any file, open or not, sane or not: it reads the 4096-byte header
// with pread on a read-only descriptor, takes no lock and maps nothing. The mutable fields
// (clean-shutdown flag, open count, roots) may be changing under a running process; they are
// shown as read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pm/pool_format.h"
#include "pmhash/index.h"
#include "pmhash/options.h"
#include "pmhash/status.h"

namespace pmhash::cli {

struct PoolHeaderView {
  std::string path;
  bool char_device = false;    // devdax
  uint64_t file_size = 0;      // 0 for a character device
  std::string storage;         // pm::DescribeStorage: devdax, tmpfs file, DAX file, page cache
  std::vector<uint8_t> bytes;  // the header, kHeaderBytes long

  enum class MagicState { kFinal, kCreating, kBad };
  MagicState magic = MagicState::kBad;
  uint32_t format_version = 0;
  uint32_t header_bytes = 0;
  uint64_t compat_features = 0;
  uint64_t incompat_features = 0;
  uint64_t pool_size = 0;
  uint64_t heap_offset = 0;
  uint32_t chunk_size = 0;
  uint64_t chunk_count = 0;
  std::string kind;
  uint8_t hash_mode = 0;
  uint8_t created_durability = 0;
  uint16_t params_bytes = 0;
  uint64_t hash_seed = 0;
  uint64_t create_time_ns = 0;
  std::vector<uint8_t> params;  // params_bytes (capped at kMaxParamsBytes)
  uint64_t checksum = 0;
  uint64_t computed_checksum = 0;  // pm::HeaderChecksum of the bytes read
  uint64_t clean_shutdown = 0;
  uint64_t open_count = 0;
  uint64_t saved_state = 0;
  uint64_t roots[pm::kMaxRoots] = {};

  bool checksum_ok() const { return checksum == computed_checksum; }
};

// Reads and decodes the header. Errors: the file cannot be opened (kIOError / kNotFound), is not
// a regular file or devdax device (checked by stat before opening: a FIFO is refused, not read), is shorter than the header, or does not start with a
// pmhash magic (kCorruption "not a pmhash pool").
Result<PoolHeaderView> ReadPoolHeader(const std::string& path);

// True if `path` exists and holds no pool yet: an empty regular file, or a file or device whose
// first 8 bytes (the magic) are zero. Opening it with a create mode formats it.
bool IsUnformatted(const std::string& path);

// Opens the existing pool at o.path as it describes itself (kind, durability unless
// o.durability is set, every parameter: from its header), or, when `may_create`, creates a
// missing file (or formats an empty or unformatted one) of o.pool_size bytes holding `want_kind`,
// else `default_kind`. `want_kind`: the kind the caller expects an existing pool to hold, if any.
Result<std::unique_ptr<Index>> OpenPool(Options o, const std::optional<std::string>& want_kind,
                                        bool may_create, std::string_view default_kind);

// "layout_version=1 initial_depth=1 ..." for kinds this build knows (or why the block cannot be
// decoded), else a hex dump.
std::string DescribeParams(const PoolHeaderView& h);

}  // namespace pmhash::cli
