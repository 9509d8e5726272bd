// tests/conformance_eadr.cc — the conformance suite (conformance_suite.h) for every unique-key
// kind of src/index/kinds.h (AllEngines; multimaps: multi_test.cc) under pm::Eadr. ctest names:
// "Eadr.<Test><pmhash::reh::Reh<pmhash::pm::Eadr>>".
#include "conformance_suite.h"

namespace pmhash::testing {
namespace {

INSTANTIATE_TYPED_TEST_SUITE_P(Eadr, ConformanceTest, GtestTypes<AllEngines<pm::Eadr>>::type);

}  // namespace
}  // namespace pmhash::testing
