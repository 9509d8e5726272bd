// Explicit instantiations of Pea Hash for every durability policy (one compile of the template).
#include "index/pea/pea.h"

namespace pmhash::pea {
PMHASH_ENGINE_INSTANTIATIONS(, Pea, false);
PMHASH_ENGINE_INSTANTIATIONS(, Pea, true);
static_assert(HashIndex<Pea<pm::Adr>> && BytesIndex<Pea<pm::Adr, true>>);
}  // namespace pmhash::pea
