// tools/no_bench_command.cc — `pmhash bench` in a tool built without the benchmark
// (PMHASH_BUILD_BENCH=OFF): the command stays known and says why it cannot run.
#include "tools/bench_command.h"
#include "tools/exit_status.h"

namespace pmhash::cli {

int BenchMain(const ParsedArgs&) {
  return Fail(Status::NotSupported(
      "this pmhash was built without the benchmark (PMHASH_BUILD_BENCH=OFF)"));
}

}  // namespace pmhash::cli
