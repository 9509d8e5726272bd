// tests/engine_types.h — typed-test type lists derived from the one list of kinds
// (src/index/kinds.h): a kind added there is in every typed suite without editing the suites.
#pragma once

#include <gtest/gtest.h>

#include <tuple>
#include <type_traits>
#include <utility>

#include "index/kinds.h"
#include "pm/persist.h"

namespace pmhash::testing {

// std::tuple of EngineOf<D, P> for every kind D and every policy in Ps (kind-major order).
template <class... Ps>
struct EnginesUnder {
  template <class D>
  using PerKind = std::tuple<index::EngineOf<D, Ps>...>;
  template <class... Ds>
  using Of = decltype(std::tuple_cat(std::declval<PerKind<Ds>>()...));
};

template <class... Ps>
using AllEngines = typename index::IndexKinds::template Apply<EnginesUnder<Ps...>::template Of>;

// The same for the kinds that offer the bytes API (Capabilities::bytes) only.
template <class... Ps>
struct BytesEnginesUnder {
  template <class D>
  using PerKind = std::conditional_t<index::CapabilitiesOf<D>().bytes,
                                     std::tuple<index::EngineOf<D, Ps>...>, std::tuple<>>;
  template <class... Ds>
  using Of = decltype(std::tuple_cat(std::declval<PerKind<Ds>>()...));
};

template <class... Ps>
using BytesEngines =
    typename index::IndexKinds::template Apply<BytesEnginesUnder<Ps...>::template Of>;

// ::testing::Types<Extra..., every type of Tuple>.
template <class Tuple, class... Extra>
struct GtestTypes;
template <class... Ts, class... Extra>
struct GtestTypes<std::tuple<Ts...>, Extra...> {
  using type = ::testing::Types<Extra..., Ts...>;
};

}  // namespace pmhash::testing
