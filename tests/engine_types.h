// tests/engine_types.h — typed-test type lists derived from the one list of kinds
// (src/index/kinds.h): a kind added there is in every typed suite of its family without editing
// the suites. Two families: unique-key kinds (AllEngines: conformance, stress) and multimaps
// (MultiEngines, Capabilities::multi: tests/multi_test.cc); BytesEngines is a subset of the
// first family's kinds (the bytes API).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "index/kinds.h"
#include "pm/persist.h"

namespace pmhash::testing {

// Whether kind D is a multimap (Capabilities::multi): several values per key, so the
// unique-key contract (Insert -> kExists, Update, Upsert) of the suites over AllEngines does not
// hold for it. Such kinds are tested by the multi suites (MultiEngines: tests/multi_test.cc).
template <class D>
inline constexpr bool kIsMultiKind = index::CapabilitiesOf<D>().multi;

// std::tuple of EngineOf<D, P> for every unique-key kind D (every kind but the multimaps) and
// every policy in Ps (kind-major order).
template <class... Ps>
struct EnginesUnder {
  template <class D>
  using PerKind = std::conditional_t<kIsMultiKind<D>, std::tuple<>,
                                     std::tuple<index::EngineOf<D, Ps>...>>;
  template <class... Ds>
  using Of = decltype(std::tuple_cat(std::declval<PerKind<Ds>>()...));
};

// The unique-key kinds (the conformance and stress suites).
template <class... Ps>
using AllEngines = typename index::IndexKinds::template Apply<EnginesUnder<Ps...>::template Of>;

// The same for the unique-key kinds that offer the bytes API (Capabilities::bytes) only.
template <class... Ps>
struct BytesEnginesUnder {
  template <class D>
  using PerKind = std::conditional_t<index::CapabilitiesOf<D>().bytes && !kIsMultiKind<D>,
                                     std::tuple<index::EngineOf<D, Ps>...>, std::tuple<>>;
  template <class... Ds>
  using Of = decltype(std::tuple_cat(std::declval<PerKind<Ds>>()...));
};

template <class... Ps>
using BytesEngines =
    typename index::IndexKinds::template Apply<BytesEnginesUnder<Ps...>::template Of>;

// The same for the multimap kinds (Capabilities::multi) only: tests/multi_test.cc.
template <class... Ps>
struct MultiEnginesUnder {
  template <class D>
  using PerKind = std::conditional_t<kIsMultiKind<D>, std::tuple<index::EngineOf<D, Ps>...>,
                                     std::tuple<>>;
  template <class... Ds>
  using Of = decltype(std::tuple_cat(std::declval<PerKind<Ds>>()...));
};

template <class... Ps>
using MultiEngines =
    typename index::IndexKinds::template Apply<MultiEnginesUnder<Ps...>::template Of>;

// Every kind falls in exactly one of the two families, so a typed suite over AllEngines plus one
// over MultiEngines covers every registered kind (the registry tests count them:
// conformance_test.cc, Registry.EveryKindIsInATypedSuite).
template <class... Ds>
struct CountKinds {
  static constexpr size_t kMulti = (static_cast<size_t>(kIsMultiKind<Ds>) + ... + 0);
  static constexpr size_t kUnique = sizeof...(Ds) - kMulti;
};
inline constexpr size_t kMultiKinds = index::IndexKinds::Apply<CountKinds>::kMulti;
inline constexpr size_t kUniqueKinds = index::IndexKinds::Apply<CountKinds>::kUnique;
static_assert(kMultiKinds + kUniqueKinds == index::IndexKinds::kSize);
static_assert(std::tuple_size_v<AllEngines<pm::Dram>> == kUniqueKinds);
static_assert(std::tuple_size_v<MultiEngines<pm::Dram>> == kMultiKinds);

// The kind names (T::kKindName) of a tuple of engine types, in order.
template <class Tuple>
struct KindNamesOf;
template <class... Ts>
struct KindNamesOf<std::tuple<Ts...>> {
  static std::vector<std::string_view> Get() { return {std::string_view(Ts::kKindName)...}; }
};

// ::testing::Types<Extra..., every type of Tuple>.
template <class Tuple, class... Extra>
struct GtestTypes;
template <class... Ts, class... Extra>
struct GtestTypes<std::tuple<Ts...>, Extra...> {
  using type = ::testing::Types<Extra..., Ts...>;
};

}  // namespace pmhash::testing
