// The registry: index kinds by name, each instantiated for the four durability policies.
// Immutable after static initialisation (a constant table, no registration side effects).
#include <array>

#include "index/pea/pea.h"
#include "index/reh/reh.h"
#include "index/turbo/turbo.h"
#include "index_adapter.h"
#include "pm/persist.h"
#include "pmhash/index.h"

namespace pmhash {

namespace {

using OpenFn = Result<std::unique_ptr<Index>> (*)(const Options&);

template <template <class> class I>
Result<std::unique_ptr<Index>> OpenAnyPolicy(const Options& o) {
  switch (o.durability) {
    case Durability::kDram:
      return OpenWrapped<I<pm::Dram>>(o);
    case Durability::kAdr:
      return OpenWrapped<I<pm::Adr>>(o);
    case Durability::kEadr:
      return OpenWrapped<I<pm::Eadr>>(o);
    case Durability::kSim:
      return OpenWrapped<I<pm::Sim>>(o);
  }
  return Status::InvalidArgument("unknown durability");
}

template <class P>
using TurboInline = turbo::Turbo<P, false>;

struct Entry {
  IndexInfo info;
  OpenFn open;
};

const std::array<Entry, 4> kEntries = {{
    {{"reh", "Li, Tan, Chen: REH: Redesigning Extendible Hashing for Commercial NVM",
      "extendible hashing, 256 B PM buckets, DRAM directory + fingerprints, 1 flush/insert"},
     &OpenAnyPolicy<reh::Reh>},
    {{"pea", "Liu, Chen: Pea Hash: A Performant Extendible Adaptive Hashing Index (SIGMOD 2023)",
      "extendible hashing, 512 KB segments, adaptive single/2-choice/stash strategy, 4-way split"},
     &OpenAnyPolicy<pea::Pea>},
    {{"turbo", "Zhao, Zhong, Jiang: TurboHash: A Hash Table for Key-value Store on PM (SYSTOR'23)",
      "sharded linear probing, 256 B buckets, near-place update, lock-free reads, 8 B items"},
     &OpenAnyPolicy<TurboInline>},
    {{"turbo-kv", "Zhao, Zhong, Jiang: TurboHash (SYSTOR'23), records (TURBO30)",
      "TurboHash with variable-size keys/values: hash + record offset per slot, record heap"},
     &OpenAnyPolicy<turbo::TurboKv>},
}};

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
  for (const auto& e : kEntries) {
    if (e.info.name == kind) return e.open(options);
  }
  std::string known;
  for (const auto& e : kEntries) known += (known.empty() ? "" : ", ") + std::string(e.info.name);
  return Status::InvalidArgument("unknown index kind '" + std::string(kind) + "' (known: " + known +
                                 ")");
}

}  // namespace pmhash
