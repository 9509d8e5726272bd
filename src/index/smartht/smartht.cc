// Explicit instantiations of SmartHT for every durability policy (one compile of the template).
#include "index/smartht/smartht.h"

namespace pmhash::smartht {
PMHASH_ENGINE_INSTANTIATIONS(, SmartHt, false);
PMHASH_ENGINE_INSTANTIATIONS(, SmartHt, true);
static_assert(HashIndex<SmartHt<pm::Adr>> && BytesIndex<SmartHt<pm::Adr, true>>);
}  // namespace pmhash::smartht
