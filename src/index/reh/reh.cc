// Explicit instantiations of REH for every durability policy (one compile of the template).
#include "index/reh/reh.h"

namespace pmhash::reh {
PMHASH_ENGINE_INSTANTIATIONS(, Reh);
static_assert(HashIndex<Reh<pm::Adr>>);
}  // namespace pmhash::reh
