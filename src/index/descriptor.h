// src/index/descriptor.h — what the library knows about an index kind, in one place, and the
// open/create skeleton every engine shares.
//
// Each index folder defines one descriptor per kind (src/index/reh/reh.h: reh::Descriptor):
//
//   struct Descriptor : DescriptorTypes<RehParams, &Options::reh, PersistentParams, Reh> {
//     // From DescriptorTypes:
//     //   using Params = RehParams;              the user's struct in Options (options.h)
//     //   Given(options)                         options.reh
//     //   using Stored = reh::PersistentParams;  its image in the pool header (<= 128 B)
//     //   template <class P> using Engine = reh::Reh<P>;
//     static constexpr std::string_view kName, kPaper, kSummary;   // registry row
//     static constexpr auto kProperties = std::tuple{PoolProperty{...}, ...};
//     static std::string Check(const Stored&);  // "" or why the values are impossible
//     static PoolLayout Layout(const Stored&);  // chunk size and minimum chunks of a new pool
//     static uint64_t EstimatePoolBytes(uint64_t keys);   // for tools and benchmarks
//     static Stored Base();                     // optional: non-property words of a new block
//   };
//
// and src/index/kinds.h lists the descriptors. The registry, the benchmark targets, the CLI and
// every typed test suite derive from that list, so adding a kind is: its folder (engine +
// descriptor), its parameter struct in options.h, one line in kinds.h (docs/design.md).
//
// Self-describing pools. The parameter block of a pool holds every pool property (kProperties:
// a std::optional field of Params and its uint32 image in Stored). OpenIndexPool:
//   * create: unset properties take their defaults, Check() validates them (kInvalidArgument),
//     the block is written into the new header;
//   * open: the block is read back, its layout words (layout_version, bucket_bytes, slots: the
//     first three words of every Stored, constants of this build) and Check() validate it
//     (kNotSupported / kCorruption: the file is not trusted), the chunk size must be the one the
//     parameters imply, and a property the caller did set must equal the pool's
//     (kInvalidArgument naming it). Unset ones are simply the pool's.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "pm/persist.h"
#include "pm/pool.h"
#include "pmhash/index.h"
#include "pmhash/options.h"
#include "pmhash/status.h"

namespace pmhash::index {

// One pool property: the user's optional field, its stored image, its default at create.
template <class Params, class Stored, class V>
struct PoolProperty {
  using Value = V;
  std::string_view name;  // as the user writes it: "pea.segment_buckets"
  std::optional<V> Params::*given;
  uint32_t Stored::*stored;
  V default_value;
};

template <class Params, class Stored, class V>
PoolProperty(std::string_view, std::optional<V> Params::*, uint32_t Stored::*, V)
    -> PoolProperty<Params, Stored, V>;

// The types of a descriptor, named once: the user's parameter struct and the Options member
// that holds it, its stored image, and the engine template (one durability policy argument).
template <class ParamsT, ParamsT Options::*kGiven, class StoredT,
          template <pm::PersistPolicy> class EngineT>
struct DescriptorTypes {
  using Params = ParamsT;
  using Stored = StoredT;
  template <pm::PersistPolicy P>
  using Engine = EngineT<P>;
  static const Params& Given(const Options& o) { return o.*kGiven; }
};

// The layout words every stored parameter block starts with (its first three words: checked by
// DecodeParams against this build's), as a base of the index's PersistentParams:
//   struct PersistentParams : index::LayoutWords<sizeof(PmBucket), kSlots> { uint32_t ...; };
template <uint32_t kBucketBytes, uint32_t kSlots, uint32_t kVersion = 1>
struct LayoutWords {
  uint32_t layout_version = kVersion;
  uint32_t bucket_bytes = kBucketBytes;
  uint32_t slots = kSlots;
};

// Engine<P> = E<P, kFlag>: an engine with a second template argument (reh-kv and turbo-kv are
// Reh<P, true> and Turbo<P, true>) as the template of the policy alone that DescriptorTypes takes.
template <template <pm::PersistPolicy, bool> class E, bool kFlag>
struct FlaggedEngine {
  template <class P>
  using Engine = E<P, kFlag>;
};

// What an index needs of a new pool's heap.
struct PoolLayout {
  uint32_t chunk_size = 256;
  uint64_t min_chunks = 1;
};

template <class D>
concept Descriptor = requires(const Options& o, const typename D::Stored& s, uint64_t n) {
  { D::kName } -> std::convertible_to<std::string_view>;
  { D::kPaper } -> std::convertible_to<std::string_view>;
  { D::kSummary } -> std::convertible_to<std::string_view>;
  { D::Given(o) } -> std::same_as<const typename D::Params&>;
  D::kProperties;
  { D::Check(s) } -> std::same_as<std::string>;
  { D::Layout(s) } -> std::same_as<PoolLayout>;
  { D::EstimatePoolBytes(n) } -> std::same_as<uint64_t>;
  typename D::template Engine<pm::Adr>;
  requires std::is_trivially_copyable_v<typename D::Stored>;
  requires sizeof(typename D::Stored) <= pm::kMaxParamsBytes;
  // The layout words every parameter block starts with (checked against this build's).
  { s.layout_version } -> std::convertible_to<uint32_t>;
  { s.bucket_bytes } -> std::convertible_to<uint32_t>;
  { s.slots } -> std::convertible_to<uint32_t>;
};

// The parameter block of a new pool: defaults where the caller left a property unset.
// A descriptor may provide Base(): the stored block before properties are applied (words that
// are not user properties, e.g. turbo-kv's `records`).
// What the kind offers beyond the uint64 API (include/pmhash/index.h): a descriptor may declare
// `static constexpr Capabilities kCapabilities`; none by default.
template <Descriptor D>
constexpr Capabilities CapabilitiesOf() {
  if constexpr (requires { D::kCapabilities; }) {
    return D::kCapabilities;
  } else {
    return Capabilities{};
  }
}

template <Descriptor D>
typename D::Stored BaseParams() {
  if constexpr (requires { D::Base(); }) {
    return D::Base();
  } else {
    return typename D::Stored{};
  }
}

template <Descriptor D>
typename D::Stored ResolveParams(const typename D::Params& given) {
  typename D::Stored s = BaseParams<D>();
  std::apply(
      [&](const auto&... p) {
        ((s.*p.stored = static_cast<uint32_t>((given.*p.given).value_or(p.default_value))), ...);
      },
      D::kProperties);
  return s;
}

// kInvalidArgument naming the first property the caller set to another value than the pool's.
template <Descriptor D>
Status CheckGivenParams(const typename D::Stored& stored, const typename D::Params& given) {
  Status st;
  std::apply(
      [&](const auto&... p) {
        auto one = [&](const auto& prop) {
          const auto& g = given.*prop.given;
          if (!st.ok() || !g || static_cast<uint32_t>(*g) == stored.*prop.stored) return;
          st = Status::InvalidArgument(
              std::string(prop.name) + " = " + std::to_string(static_cast<uint32_t>(*g)) +
              " was asked for, but the pool was created with " +
              std::to_string(stored.*prop.stored) +
              " (a pool property; leave it unset to open the pool as it is)");
        };
        (one(p), ...);
      },
      D::kProperties);
  return st;
}

// "segment_buckets=2048 initial_depth=2 ..." (pmhash info).
template <Descriptor D>
std::string DescribeParams(const typename D::Stored& s) {
  std::string out = "layout_version=" + std::to_string(s.layout_version);
  std::apply(
      [&](const auto&... p) {
        auto field = [](std::string_view name) { return name.substr(name.find('.') + 1); };
        ((out += " " + std::string(field(p.name)) + "=" + std::to_string(s.*p.stored)), ...);
      },
      D::kProperties);
  return out;
}

// A stored parameter block, decoded and validated (nothing in a file is trusted).
template <Descriptor D>
Result<typename D::Stored> DecodeParams(std::span<const uint8_t> bytes) {
  using Stored = typename D::Stored;
  const std::string kind(D::kName);
  if (bytes.size() != sizeof(Stored)) {
    return Status::Corruption(kind + " pool has a " + std::to_string(bytes.size()) +
                              "-byte parameter block, expected " + std::to_string(sizeof(Stored)));
  }
  Stored s;
  std::memcpy(&s, bytes.data(), sizeof(s));
  const Stored build = BaseParams<D>();
  if (s.layout_version != build.layout_version) {
    return Status::NotSupported(kind + " pool layout version " +
                                std::to_string(s.layout_version) + " (this build reads " +
                                std::to_string(build.layout_version) + ")");
  }
  if (s.bucket_bytes != build.bucket_bytes || s.slots != build.slots) {
    return Status::Corruption(kind + " pool parameters name " + std::to_string(s.bucket_bytes) +
                              " B buckets of " + std::to_string(s.slots) + " slots");
  }
  if (std::string why = D::Check(s); !why.empty()) {
    return Status::Corruption(kind + " pool parameters: " + why);
  }
  return s;
}

template <Descriptor D>
struct OpenedPool {
  std::unique_ptr<pm::Pool> pool;
  typename D::Stored params;  // the pool's (open) or the resolved new ones (create)
};

// The skeleton of every engine's Open: resolve and check parameters, open or create the pool
// for durability `d` (the engine's policy), and adopt an existing pool's parameters.
template <Descriptor D>
Result<OpenedPool<D>> OpenIndexPool(const Options& o, Durability d) {
  const typename D::Params& given = D::Given(o);
  const typename D::Stored fresh = ResolveParams<D>(given);
  if (std::string why = D::Check(fresh); !why.empty()) {
    return Status::InvalidArgument(std::string(D::kName) + ": " + why);
  }
  const PoolLayout layout = D::Layout(fresh);
  pm::PoolSpec spec;
  spec.kind = D::kName;
  spec.params = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&fresh), sizeof(fresh));
  spec.chunk_size = layout.chunk_size;
  spec.min_chunks = layout.min_chunks;
  spec.durability = d;
  auto pool = pm::Pool::Open(o, spec);
  if (!pool.ok()) return pool.status();
  OpenedPool<D> r{std::move(pool).value(), fresh};
  if (!r.pool->created()) {
    auto stored = DecodeParams<D>(r.pool->params());
    if (!stored.ok()) return stored.status();
    r.params = stored.value();
    if (r.pool->allocator().chunk_size() != D::Layout(r.params).chunk_size) {
      return Status::Corruption(std::string(D::kName) + " pool has " +
                                std::to_string(r.pool->allocator().chunk_size()) +
                                " B chunks; its parameters need " +
                                std::to_string(D::Layout(r.params).chunk_size));
    }
    PMHASH_RETURN_IF_ERROR(CheckGivenParams<D>(r.params, given));
  }
  return r;
}

}  // namespace pmhash::index
