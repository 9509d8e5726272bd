// Explicit instantiations of REH for every durability policy (one compile of the template).
#include "index/reh/reh.h"

namespace pmhash::reh {
template class Reh<pm::Dram>;
template class Reh<pm::Adr>;
template class Reh<pm::Eadr>;
template class Reh<pm::Sim>;
static_assert(HashIndex<Reh<pm::Adr>>);
}  // namespace pmhash::reh
