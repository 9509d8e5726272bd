#include "bench/machine.h"

#include <sys/statfs.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "bench/git_version.h"
#include "bench/pages.h"
#include "bench/runner.h"
#include "common/fingerprint.h"
#include "pm/persist.h"

#ifndef PMHASH_BUILD_TYPE
#define PMHASH_BUILD_TYPE "unknown"
#endif
#ifndef PMHASH_VERSION
#define PMHASH_VERSION "unknown"
#endif

namespace pmhash::bench {

namespace {

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) break;
      const auto start = line.find_first_not_of(" \t", colon + 1);
      return start == std::string::npos ? std::string() : line.substr(start);
    }
  }
  return "unknown";
}

std::string FsName(const std::string& dir) {
  struct statfs st;
  if (dir.empty() || statfs(dir.c_str(), &st) != 0) return "unknown";
  switch (static_cast<unsigned long>(st.f_type)) {
    case 0x01021994:
      return "tmpfs";
    case 0xEF53:
      return "ext4";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x794c7630:
      return "overlayfs";
    case 0x6969:
      return "nfs";
    case 0x858458f6:
      return "ramfs";
    default:
      break;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "fs-magic-%#lx", static_cast<unsigned long>(st.f_type));
  return buf;
}

}  // namespace

BuildInfo CollectBuildInfo() {
  BuildInfo b;
  b.version = PMHASH_VERSION;
  b.git_commit = GitCommit();
  b.git_dirty = GitDirty();
  b.build_type = PMHASH_BUILD_TYPE;
#if defined(__clang__)
  b.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  b.compiler = "gcc " __VERSION__;
#else
  b.compiler = "unknown";
#endif
  return b;
}

MachineInfo CollectMachineInfo(const std::string& pool_dir) {
  MachineInfo m;
  m.cpu_model = CpuModel();
  m.logical_cpus = static_cast<int>(AllowedCpus().size());
  m.flush_instruction = pm::FlushInstructionName(pm::ActiveFlushInstruction());
  m.simd = SimdLevelName(ActiveSimdLevel());
  struct utsname u;
  if (uname(&u) == 0) m.kernel = std::string(u.sysname) + " " + u.release;
  m.pool_fs = FsName(pool_dir);
  m.huge_pages = HugePageSettings(pool_dir);
  // What an empty timed region measures (t1 - t0 of two back-to-back steady_clock reads): the
  // overhead included in every latency sample. Median of 101 batches of 1000.
  std::vector<double> batch;
  for (int b = 0; b < 101; b++) {
    uint64_t sum = 0;
    for (int i = 0; i < 1000; i++) {
      const uint64_t t0 = detail::NowNs();
      sum += detail::NowNs() - t0;
    }
    batch.push_back(static_cast<double>(sum) / 1000.0);
  }
  std::nth_element(batch.begin(), batch.begin() + 50, batch.end());
  m.clock_overhead_ns = batch[50];
  return m;
}

std::string UtcTimestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm;
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace pmhash::bench
