// Explicit instantiations of Pea Hash for every durability policy (one compile of the template).
#include "index/pea/pea.h"

namespace pmhash::pea {
PMHASH_ENGINE_INSTANTIATIONS(, Pea);
static_assert(HashIndex<Pea<pm::Adr>>);
}  // namespace pmhash::pea
