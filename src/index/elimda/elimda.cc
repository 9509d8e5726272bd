// Explicit instantiations of ElimDA for every durability policy (one compile of the template).
#include "index/elimda/elimda.h"

namespace pmhash::elimda {
PMHASH_ENGINE_INSTANTIATIONS(, ElimDA);
static_assert(HashIndex<ElimDA<pm::Adr>>);
}  // namespace pmhash::elimda
