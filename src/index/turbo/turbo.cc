// Explicit instantiations: the registry and the tests link against these.
#include "index/turbo/turbo.h"

namespace pmhash::turbo {
PMHASH_ENGINE_INSTANTIATIONS(, Turbo, false);
PMHASH_ENGINE_INSTANTIATIONS(, Turbo, true);
static_assert(HashIndex<Turbo<pm::Adr, false>> && BytesIndex<Turbo<pm::Adr, true>>);
}  // namespace pmhash::turbo
