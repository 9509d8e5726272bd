// Explicit instantiations of REH for every durability policy (one compile of the template).
#include "index/reh/reh.h"

namespace pmhash::reh {
PMHASH_ENGINE_INSTANTIATIONS(, Reh, false);
PMHASH_ENGINE_INSTANTIATIONS(, Reh, true);
static_assert(HashIndex<Reh<pm::Adr>> && BytesIndex<Reh<pm::Adr, true>>);
}  // namespace pmhash::reh
