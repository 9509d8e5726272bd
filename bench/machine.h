// bench/machine.h — the build and machine description recorded with every result.
#pragma once

#include <string>

#include "bench/results.h"

namespace pmhash::bench {

BuildInfo CollectBuildInfo();
// `pool_dir`: where the pools live; its file system type is recorded ("tmpfs", ...).
MachineInfo CollectMachineInfo(const std::string& pool_dir);

// Current UTC time as "2026-11-22T03:04:05Z".
std::string UtcTimestamp();

}  // namespace pmhash::bench
