// tests/conformance_adr.cc — the conformance suite (conformance_suite.h) for every unique-key
// kind of src/index/kinds.h (AllEngines; multimaps: multi_test.cc) under pm::Adr. ctest names:
// "Adr.<Test><pmhash::reh::Reh<pmhash::pm::Adr>>".
#include "conformance_suite.h"

namespace pmhash::testing {
namespace {

INSTANTIATE_TYPED_TEST_SUITE_P(Adr, ConformanceTest, GtestTypes<AllEngines<pm::Adr>>::type);

}  // namespace
}  // namespace pmhash::testing
