// Explicit instantiations of Pea Hash for every durability policy (one compile of the template).
#include "index/pea/pea.h"

namespace pmhash::pea {
template class Pea<pm::Dram>;
template class Pea<pm::Adr>;
template class Pea<pm::Eadr>;
template class Pea<pm::Sim>;
static_assert(HashIndex<Pea<pm::Adr>>);
}  // namespace pmhash::pea
