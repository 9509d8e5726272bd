// bench/pages.h — which page size backs a table: 4 KiB pages or 2 MiB (transparent) huge pages.
//
// On a table larger than the TLB's reach every random probe also pays a page walk, and in a
// virtual machine a nested one. PM behind a DAX device or file system is mapped with 2 MiB pages;
// a pool file on a default tmpfs gets 4 KiB pages, and so does absl's table under THP "madvise".
// A comparison is only fair when the page sizes are known, so the benchmark records them: the
// system's THP settings and the pool file system's huge= mount option (banner), and for every
// row how much of its table was resident on huge pages after the insert phase (/proc/self/smaps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace pmhash::bench {

// Resident bytes of some mappings, and how many of them are mapped with huge pages
// (AnonHugePages + ShmemPmdMapped + FilePmdMapped + FilePudMapped: PMD- or PUD-mapped).
struct PageUse {
  uint64_t resident = 0;
  uint64_t huge = 0;
  bool known = false;    // smaps was read and a mapping matched
  bool advised = false;  // a matching mapping is advised MADV_HUGEPAGE (VmFlags "hg")
};

// Sums the mappings of a /proc/PID/smaps text for which `match(start, end, pathname)` is true
// (pathname: "" for an anonymous mapping; a deleted file's path ends with " (deleted)").
PageUse ParseSmaps(std::string_view smaps,
                   const std::function<bool(uintptr_t, uintptr_t, std::string_view)>& match);

// This process's mappings of the file at `path` (a pool).
PageUse PagesOfFile(const std::string& path);
// This process's mappings that overlap [addr, addr + len) (a mapping is counted whole).
PageUse PagesOfRange(const void* addr, size_t len);

// One line on the system's huge-page settings for tables in DRAM and in files under `pool_dir`:
// "THP madvise (tmpfs: never); pool fs huge=always" ("" where nothing could be read).
std::string HugePageSettings(const std::string& pool_dir);

}  // namespace pmhash::bench
