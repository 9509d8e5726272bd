// tools/serve_command.h — `pmhash serve`: the Redis-protocol server (tools/serve/).
#pragma once

#include <span>

#include "tools/args.h"

namespace pmhash::cli {

// The flags of `pmhash serve` (for its help and its parsing).
std::span<const FlagSpec> ServeFlags();
extern const char kServeDetails[];

// Runs the server until SIGTERM, SIGINT or a SHUTDOWN command, then closes the pool cleanly.
// Returns the exit status.
int ServeMain(const ParsedArgs& args);

}  // namespace pmhash::cli
