// src/index/descriptor.h — what the library knows about an index kind, in one place, and the
// open/create skeleton every engine shares.
//
// Each index folder defines one descriptor per kind. The shape of one, for a kind X of a single
// engine template X<P> (what every descriptor has; `index::Descriptor` below checks it):
//
//   struct Descriptor : DescriptorTypes<XParams, &Options::x, PersistentParams, X> {
//     // From DescriptorTypes:
//     //   using Params = XParams;                the user's struct in Options (options.h)
//     //   Given(options)                         options.x
//     //   using Stored = x::PersistentParams;    its image in the pool header (<= 128 B)
//     //   template <class P> using Engine = x::X<P>;
//     static constexpr std::string_view kName, kPaper, kSummary;   // registry row
//     static constexpr auto kProperties = std::tuple{PoolProperty{...}, ...};
//     static std::string Check(const Stored&);  // "" or why the values are impossible
//     static PoolLayout Layout(const Stored&);  // chunk size and minimum chunks of a new pool
//     static constexpr double kPoolBytesPerKey;  // PM per key (EstimatePoolBytes: tools, bench)
//     static constexpr uint64_t kPoolFixedBytes;  // optional: PM whatever the keys
//     static Stored Base();                     // optional: non-property words of a new block
//     static constexpr Capabilities kCapabilities;   // optional: beyond the uint64 API
//   };
//
// Every design here also has a records kind (reh and reh-kv, ...: src/index/records.h), so each
// writes one descriptor template over the flag (reh::DescriptorFor<kRecords>), deriving from
// FlaggedDescriptorTypes<..., E, kRecords, kTexts>, which adds the record format and, from one
// KindTexts, both kinds' names, paper, summary and the max_record_bytes property's name
// (RecordsDescriptorTypes: the same without the texts, for pea's three kinds). The driver below
// then writes the `records` word of a new block, offers max_record_bytes (default 16 MiB) when
// the kind has records, checks both words before Check(), sets Capabilities::bytes and counts a
// record per key in EstimatePoolBytes.
//
// src/index/kinds.h lists the descriptors. The registry, the benchmark targets, the CLI and
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

#include <algorithm>
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
#include "pm/record_heap.h"
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
// (E is taken unconstrained, so that FlaggedDescriptorTypes can pass its own E on.)
template <template <class, bool> class E, bool kFlag>
struct FlaggedEngine {
  template <class P>
  using Engine = E<P, kFlag>;
};

// The `records` word a pool stores: which record format its slots point at (src/index/records.h).
inline constexpr uint32_t kNoRecords = 0;
inline constexpr uint32_t kPlainRecords = 1;    // [klen | vlen | key | value]
inline constexpr uint32_t kCheckedRecords = 2;  // [klen | vlen | check | key | value]

// The descriptor types of a kind with a records variant: kFormat is kNoRecords for the uint64
// kind. Its descriptor declares `static constexpr std::string_view kRecordProperty`
// ("reh.max_record_bytes"); Params and Stored have a `max_record_bytes`, Stored a `records`.
template <class ParamsT, ParamsT Options::*kGiven, class StoredT, template <class> class EngineT,
          uint32_t kFormat>
struct RecordsDescriptorTypes : DescriptorTypes<ParamsT, kGiven, StoredT, EngineT> {
  static constexpr uint32_t kRecordFormat = kFormat;
};

// What the registry says of a design's two kinds (IndexInfo, include/pmhash/index.h): the uint64
// kind's name, paper and summary, and its records kind's name and max_record_bytes property. The
// records kind cites the same paper under one summary for all (kRecordsSummary).
struct KindTexts {
  std::string_view name;             // "reh"
  std::string_view records_name;     // "reh-kv"
  std::string_view record_property;  // "reh.max_record_bytes"
  std::string_view paper;
  std::string_view summary;
};
inline constexpr std::string_view kRecordsSummary =
    "the same design with variable-size keys/values: hash + record offset per slot, record heap";

// The descriptor types of a design with a records kind, E<P, kRecords> (Reh<P, true> is reh-kv),
// whose records are kFormat, and its texts.
template <class ParamsT, ParamsT Options::*kGiven, class StoredT, template <class, bool> class E,
          bool kRecords, const KindTexts& kTexts, uint32_t kFormat = kPlainRecords>
struct FlaggedDescriptorTypes
    : RecordsDescriptorTypes<ParamsT, kGiven, StoredT, FlaggedEngine<E, kRecords>::template Engine,
                             kRecords ? kFormat : kNoRecords> {
  static constexpr std::string_view kName = kRecords ? kTexts.records_name : kTexts.name;
  static constexpr std::string_view kPaper = kTexts.paper;
  static constexpr std::string_view kSummary = kRecords ? kRecordsSummary : kTexts.summary;
  static constexpr std::string_view kRecordProperty = kTexts.record_property;
};

template <class D>
concept RecordsDescriptor = requires {
  { D::kRecordFormat } -> std::convertible_to<uint32_t>;
  { D::kRecordProperty } -> std::convertible_to<std::string_view>;
};

// PM per key of a uint64 pair as a record (8 B header + 8 B key + 8 B value) in a 32 B slot of a
// record-heap slab, slabs planned 80% full (erases, one open slab per stripe).
inline constexpr double kRecordBytesPerKey =
    pm::kSlabTargetBytes / ((pm::kSlabTargetBytes - pm::kSlabHeaderBytes) / 32.0) / 0.8;

// The open-time options every engine's Config has (include/pmhash/options.h), set before the
// engine's own Config::SetOpenOptions(const Options&):
//   struct Config : PersistentParams, index::CommonOpenOptions { ...; void SetOpenOptions(...); };
struct CommonOpenOptions {
  uint64_t max_directory_bytes = 0;  // Options::max_directory_bytes; 0: max(1 GiB, pool size)
  uint32_t reclaim_batch = 0;        // Options::reclaim_batch (retired records)
  uint32_t background_threads = 1;   // Options::background_threads
  void SetCommonOptions(const Options& o) {
    max_directory_bytes = o.max_directory_bytes;
    reclaim_batch = o.reclaim_batch;
    background_threads = o.background_threads;
  }
  // A DRAM directory's budget in bytes. A healthy directory stays far below the pool's size
  // (REH: about 11 entries of 8 B per 256 B bucket at 10^9 keys); chosen keys or a corrupt chain
  // could otherwise ask for 2^max_depth entries.
  uint64_t DirectoryBudget(uint64_t pool_size) const {
    return max_directory_bytes ? max_directory_bytes
                               : std::max<uint64_t>(uint64_t{1} << 30, pool_size);
  }
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
  { D::kPoolBytesPerKey } -> std::convertible_to<double>;
  typename D::template Engine<pm::Adr>;
  requires std::is_trivially_copyable_v<typename D::Stored>;
  requires sizeof(typename D::Stored) <= pm::kMaxParamsBytes;
  // The layout words every parameter block starts with (checked against this build's).
  { s.layout_version } -> std::convertible_to<uint32_t>;
  { s.bucket_bytes } -> std::convertible_to<uint32_t>;
  { s.slots } -> std::convertible_to<uint32_t>;
};

// Whether the kind stores records (variable-size keys and values).
template <Descriptor D>
constexpr bool HasRecords() {
  if constexpr (RecordsDescriptor<D>) {
    return D::kRecordFormat != kNoRecords;
  } else {
    return false;
  }
}

// What the kind offers beyond the uint64 API (include/pmhash/index.h): a descriptor may declare
// `static constexpr Capabilities kCapabilities`; none by default, and `bytes` is HasRecords.
template <Descriptor D>
constexpr Capabilities CapabilitiesOf() {
  Capabilities c{};
  if constexpr (requires { D::kCapabilities; }) c = D::kCapabilities;
  if constexpr (RecordsDescriptor<D>) c.bytes = HasRecords<D>();
  return c;
}

// The kind's pool properties: kProperties, and max_record_bytes if it has records.
template <Descriptor D>
constexpr auto PropertiesOf() {
  if constexpr (HasRecords<D>()) {
    return std::tuple_cat(
        D::kProperties,
        std::tuple{PoolProperty{D::kRecordProperty, &D::Params::max_record_bytes,
                                &D::Stored::max_record_bytes, uint32_t{1} << 24}});
  } else {
    return D::kProperties;
  }
}

// For tools and benchmarks: the PM a pool of `keys` keys needs, roughly.
template <Descriptor D>
constexpr uint64_t EstimatePoolBytes(uint64_t keys) {
  uint64_t fixed = 0;
  if constexpr (requires { D::kPoolFixedBytes; }) fixed = D::kPoolFixedBytes;
  const double per_key = D::kPoolBytesPerKey + (HasRecords<D>() ? kRecordBytesPerKey : 0.0);
  return static_cast<uint64_t>(static_cast<double>(keys) * per_key) + fixed;
}

// The parameter block of a new pool before its properties are applied: Base() if the descriptor
// has one (words that are not user properties, e.g. turbo's layout_version), and the `records`
// word of a records descriptor.
template <Descriptor D>
typename D::Stored BaseParams() {
  typename D::Stored s{};
  if constexpr (requires { D::Base(); }) s = D::Base();
  if constexpr (RecordsDescriptor<D>) s.records = D::kRecordFormat;
  return s;
}

// "" or why a stored block is impossible: its record words, then the descriptor's Check().
template <Descriptor D>
std::string CheckParams(const typename D::Stored& s) {
  if constexpr (RecordsDescriptor<D>) {
    const bool records_kind = HasRecords<D>();
    const uint32_t max_bytes = s.max_record_bytes;
    if (s.records != D::kRecordFormat) {
      std::string e = "records = " + std::to_string(s.records) + " in a '" +
                      std::string(D::kName) + "' pool (its record format is " +
                      std::to_string(D::kRecordFormat) + ")";
      if (records_kind && s.records != kNoRecords) e += ": made by another version of pmhash";
      return e;
    }
    if (records_kind && (max_bytes < 64 || max_bytes > (1u << 30))) {
      return "max_record_bytes must be in [64, 2^30]";
    }
    if (!records_kind && max_bytes != 0) {
      return "max_record_bytes set in a '" + std::string(D::kName) + "' pool";
    }
  }
  return D::Check(s);
}

// The parameter block of a new pool for durability d: defaults where the caller left a property
// unset (a descriptor's DurabilityDefaults may choose some by durability).
template <Descriptor D>
typename D::Stored ResolveParams(const typename D::Params& given, Durability d) {
  typename D::Stored s = BaseParams<D>();
  std::apply(
      [&](const auto&... p) {
        ((s.*p.stored = static_cast<uint32_t>((given.*p.given).value_or(p.default_value))), ...);
      },
      PropertiesOf<D>());
  if constexpr (requires { D::DurabilityDefaults(given, d, &s); }) {
    D::DurabilityDefaults(given, d, &s);
  }
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
      PropertiesOf<D>());
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
      PropertiesOf<D>());
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
  if (std::string why = CheckParams<D>(s); !why.empty()) {
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
  const typename D::Stored fresh = ResolveParams<D>(given, d);
  if (std::string why = CheckParams<D>(fresh); !why.empty()) {
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
