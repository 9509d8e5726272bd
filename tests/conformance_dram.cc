// tests/conformance_dram.cc — the conformance suite (conformance_suite.h) for every unique-key
// kind of src/index/kinds.h (AllEngines; multimaps: multi_test.cc) under pm::Dram. ctest names:
// "Dram.<Test><pmhash::reh::Reh<pmhash::pm::Dram>>".
#include "conformance_suite.h"

namespace pmhash::testing {
namespace {

INSTANTIATE_TYPED_TEST_SUITE_P(Dram, ConformanceTest, GtestTypes<AllEngines<pm::Dram>>::type);

}  // namespace
}  // namespace pmhash::testing
