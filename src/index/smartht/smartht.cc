// Explicit instantiations of SmartHT for every durability policy (one compile of the template).
#include "index/smartht/smartht.h"

namespace pmhash::smartht {
PMHASH_ENGINE_INSTANTIATIONS(, SmartHt);
static_assert(HashIndex<SmartHt<pm::Adr>>);
}  // namespace pmhash::smartht
