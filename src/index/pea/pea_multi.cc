// Explicit instantiations of pea-multi (Pea Hash with duplicate keys) for every durability
// policy; a translation unit of its own so that the two Pea files build in parallel.
#include "index/pea/pea.h"

namespace pmhash::pea {
PMHASH_ENGINE_INSTANTIATIONS(, Pea, false, true);
static_assert(MultiIndex<PeaMulti<pm::Adr>> && !MultiIndex<Pea<pm::Adr>>);
}  // namespace pmhash::pea
