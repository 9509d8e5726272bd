// src/index/kinds.h — THE list of index kinds (src/index/descriptor.h).
//
// The registry (pmhash::Open, RegisteredIndexes), the benchmark targets, the CLI and every typed
// test suite derive from IndexKinds; a new kind appears in all of them by being added here.
#pragma once

#include <cstddef>
#include <tuple>

#include "index/descriptor.h"
#include "index/elimda/elimda.h"
#include "index/pea/pea.h"
#include "index/reh/reh.h"
#include "index/smartht/smartht.h"
#include "index/turbo/turbo.h"
#include "pm/persist.h"

namespace pmhash::index {

template <Descriptor... Ds>
struct KindList {
  static constexpr size_t kSize = sizeof...(Ds);
  // fn.template operator()<D>() for each descriptor, in order.
  template <class Fn>
  static constexpr void ForEach(Fn&& fn) {
    (fn.template operator()<Ds>(), ...);
  }
  // Apply<F> = F<Ds...> (a type list for typed test suites, a tuple, ...).
  template <template <class...> class F>
  using Apply = F<Ds...>;
};

// DescriptorFor<true> of a folder is its records kind ("reh-kv"); pea's <false, true> is pea-multi.
using IndexKinds =
    KindList<reh::DescriptorFor<false>, reh::DescriptorFor<true>, pea::DescriptorFor<false>,
             pea::DescriptorFor<true>, turbo::DescriptorFor<false>, turbo::DescriptorFor<true>,
             smartht::DescriptorFor<false>, smartht::DescriptorFor<true>,
             elimda::DescriptorFor<false>, pea::DescriptorFor<false, true>,
             elimda::DescriptorFor<true>>;

// The engine of descriptor D under policy P.
template <class D, class P>
using EngineOf = typename D::template Engine<P>;

}  // namespace pmhash::index
