// The registry: index kinds by name (src/index/kinds.h), each instantiated for the four
// durability policies. Immutable after static initialisation (no registration side effects).
#include <array>
#include <string>

#include "index/kinds.h"
#include "index_adapter.h"
#include "pm/persist.h"
#include "pm/pool.h"
#include "pmhash/index.h"
#include "registry.h"

namespace pmhash {

namespace {

using OpenFn = Result<std::unique_ptr<Index>> (*)(const Options&);
using DescribeFn = std::string (*)(std::span<const uint8_t>);

template <index::Descriptor D>
Result<std::unique_ptr<Index>> OpenAnyPolicy(const Options& o) {
  switch (o.durability.value_or(Durability::kAdr)) {
    case Durability::kDram:
      return OpenWrapped<index::EngineOf<D, pm::Dram>>(o);
    case Durability::kAdr:
      return OpenWrapped<index::EngineOf<D, pm::Adr>>(o);
    case Durability::kEadr:
      return OpenWrapped<index::EngineOf<D, pm::Eadr>>(o);
    case Durability::kSim:
      return OpenWrapped<index::EngineOf<D, pm::Sim>>(o);
  }
  return Status::InvalidArgument("unknown durability");
}

template <index::Descriptor D>
std::string Describe(std::span<const uint8_t> bytes) {
  auto s = index::DecodeParams<D>(bytes);
  return s.ok() ? index::DescribeParams<D>(s.value()) : s.status().ToString();
}

struct Entry {
  IndexInfo info;
  OpenFn open;
  DescribeFn describe;
  Capabilities caps;
};

using Entries = std::array<Entry, index::IndexKinds::kSize>;

const Entries kEntries = [] {
  Entries e{};
  size_t i = 0;
  index::IndexKinds::ForEach([&]<class D>() {
    e[i++] = Entry{{D::kName, D::kPaper, D::kSummary}, &OpenAnyPolicy<D>, &Describe<D>,
                   index::CapabilitiesOf<D>()};
  });
  return e;
}();

const Entry* FindEntry(std::string_view kind) {
  for (const auto& e : kEntries) {
    if (e.info.name == kind) return &e;
  }
  return nullptr;
}

Status UnknownKind(std::string_view kind) {
  std::string known;
  for (const auto& e : kEntries) known += (known.empty() ? "" : ", ") + std::string(e.info.name);
  return Status::InvalidArgument("unknown index kind '" + std::string(kind) + "' (known: " + known +
                                 ")");
}

}  // namespace

const std::vector<IndexInfo>& RegisteredIndexes() {
  static const std::vector<IndexInfo> kInfos = [] {
    std::vector<IndexInfo> v;
    for (const auto& e : kEntries) v.push_back(e.info);
    return v;
  }();
  return kInfos;
}

Result<std::unique_ptr<Index>> Open(std::string_view kind, const Options& options) {
  const Entry* e = FindEntry(kind);
  if (!e) return UnknownKind(kind);
  Options o = options;
  if (!o.durability && !o.path.empty()) {
    // The durability the pool was made for; a pool that is not there (or not readable) is
    // created, or refused, by the open itself.
    if (auto h = pm::ReadPoolIdentity(o.path);
        h.ok() && h.value().kind == kind &&
        h.value().created_durability <= static_cast<uint8_t>(Durability::kSim)) {
      o.durability = static_cast<Durability>(h.value().created_durability);
    }
  }
  return e->open(o);
}

Result<std::unique_ptr<Index>> Open(const Options& options) {
  if (options.path.empty()) {
    return Status::InvalidArgument("an anonymous pool has nothing to open: name the index kind");
  }
  auto h = pm::ReadPoolIdentity(options.path);
  if (!h.ok()) {
    if (h.status().IsNotFound()) {
      return Status::NotFound("no pool at " + options.path +
                              " (to create one, name the index kind)");
    }
    return h.status();
  }
  const std::string kind = h.value().kind;
  if (!FindEntry(kind)) return UnknownKind(kind);
  return Open(kind, options);
}

Result<Capabilities> KindCapabilities(std::string_view kind) {
  const Entry* e = FindEntry(kind);
  if (!e) return UnknownKind(kind);
  return e->caps;
}

std::string KindsWith(bool Capabilities::*has) {
  std::string list;
  for (const auto& e : kEntries) {
    auto caps = KindCapabilities(e.info.name);
    if (caps.ok() && caps.value().*has) list += (list.empty() ? "" : ", ") + std::string(e.info.name);
  }
  return list;
}

Result<std::string> DescribePoolParams(std::string_view kind, std::span<const uint8_t> params) {
  const Entry* e = FindEntry(kind);
  if (!e) return UnknownKind(kind);
  return e->describe(params);
}

}  // namespace pmhash
