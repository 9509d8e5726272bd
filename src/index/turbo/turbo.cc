// Explicit instantiations: the registry and the tests link against these.
#include "index/turbo/turbo.h"

namespace pmhash::turbo {
template class Turbo<pm::Dram, false>;
template class Turbo<pm::Adr, false>;
template class Turbo<pm::Eadr, false>;
template class Turbo<pm::Sim, false>;
template class Turbo<pm::Dram, true>;
template class Turbo<pm::Adr, true>;
template class Turbo<pm::Eadr, true>;
template class Turbo<pm::Sim, true>;
static_assert(HashIndex<Turbo<pm::Adr, false>> && BytesIndex<Turbo<pm::Adr, true>>);
}  // namespace pmhash::turbo
