// Explicit instantiations of ElimDA for every durability policy (one compile of the template).
#include "index/elimda/elimda.h"

namespace pmhash::elimda {
PMHASH_ENGINE_INSTANTIATIONS(, ElimDA, false);
PMHASH_ENGINE_INSTANTIATIONS(, ElimDA, true);
static_assert(HashIndex<ElimDA<pm::Adr>> && BytesIndex<ElimDA<pm::Adr, true>>);
}  // namespace pmhash::elimda
