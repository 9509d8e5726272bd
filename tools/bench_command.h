// tools/bench_command.h — the `pmhash bench` subcommand, seen from the rest of the tool.
//
// This header includes nothing from bench/: pmhash.cc parses the subcommand's options (its table
// and help text live with the other commands') and calls BenchMain. tools/CMakeLists.txt states
// the rule: only bench_command.cc uses the benchmark library.
#pragma once

#include "tools/args.h"

namespace pmhash::cli {

// Runs `pmhash bench` with its parsed options (--help already handled). Returns the exit status:
// 0 success, 1 failure (an error, or a benchmark row failed), 2 usage error. Defined by
// bench_command.cc, or, in a build without the benchmark (PMHASH_BUILD_BENCH=OFF), by
// no_bench_command.cc, which only says so.
int BenchMain(const ParsedArgs& args);

}  // namespace pmhash::cli
