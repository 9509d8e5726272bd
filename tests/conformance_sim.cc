// tests/conformance_sim.cc — the conformance suite (conformance_suite.h) for every unique-key
// kind of src/index/kinds.h (AllEngines; multimaps: multi_test.cc) under pm::Sim. ctest names:
// "Sim.<Test><pmhash::reh::Reh<pmhash::pm::Sim>>".
#include "conformance_suite.h"

namespace pmhash::testing {
namespace {

INSTANTIATE_TYPED_TEST_SUITE_P(Sim, ConformanceTest, GtestTypes<AllEngines<pm::Sim>>::type);

}  // namespace
}  // namespace pmhash::testing
