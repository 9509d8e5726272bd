#include "bench/targets.h"

#include <array>

#include "bench/reference.h"
#include "bench/row.h"
#include "index/kinds.h"
#include "pm/persist.h"
#include "pmhash/index.h"

namespace pmhash::bench {

namespace {

// (kind, durability) -> the row instantiated for the concrete type, for every kind of
// src/index/kinds.h. Sim is left out: without a crash-simulator hook it behaves like Dram and
// measures nothing new.
template <index::Descriptor D>
constexpr std::array<Target, 3> TargetsOf() {
  return {{
      {D::kName, Durability::kAdr, &RunTemplateRow<index::EngineOf<D, pm::Adr>>},
      {D::kName, Durability::kEadr, &RunTemplateRow<index::EngineOf<D, pm::Eadr>>},
      {D::kName, Durability::kDram, &RunTemplateRow<index::EngineOf<D, pm::Dram>>},
  }};
}

template <class... Ds>
struct TargetTable {
  static constexpr auto Make() {
    std::array<Target, 3 * sizeof...(Ds)> all{};
    size_t i = 0;
    for (const auto& per_kind : {TargetsOf<Ds>()...}) {
      for (const Target& t : per_kind) all[i++] = t;
    }
    return all;
  }
};

constexpr auto kTargets = index::IndexKinds::Apply<TargetTable>::Make();

constexpr uint64_t kMiB = uint64_t{1} << 20;

}  // namespace

std::span<const Target> TemplateTargets() { return kTargets; }

const Target* FindTemplateTarget(std::string_view index, Durability d) {
  for (const Target& t : kTargets) {
    if (t.index == index && t.durability == d) return &t;
  }
  return nullptr;
}

uint64_t EstimatePoolBytes(std::string_view index, uint64_t keys) {
  // PM bytes per key at the lowest load factor the index can be left at, with margin (each
  // descriptor's, index::EstimatePoolBytes). Unknown index: generous (the file is sparse: untouched
  // space costs nothing); the driver also retries a row with a 4x larger pool when an estimate
  // proves too small (kOutOfSpace).
  uint64_t bytes = keys * 512;
  index::IndexKinds::ForEach([&]<class D>() {
    if (D::kName == index) bytes = index::EstimatePoolBytes<D>(keys);
  });
  return 64 * kMiB + (bytes + kMiB - 1) / kMiB * kMiB;
}

RowResult RunIndexRow(const RowConfig& c) {
  if (const Target* t = FindTemplateTarget(c.index, c.durability)) return t->run(c);
  return RunFacadeRow(c);
}

RowResult RunReferenceRow(std::span<const PhaseSpec> phases, const RunnerOptions& ro,
                          const std::function<void(std::string_view)>& progress, ItemBytes items,
                          bool huge_pages) {
  RowResult row;
  row.index = std::string(items.on() ? AbslBytesReference::kName : AbslReference::kName);
  row.durability = "dram";
  row.kind = RowKind::kReference;
  const RunnerOptions one{1, ro.pin, ro.latency_every};
  row.threads = 1;
  auto measure = [&row](const auto& t) {
    row.load_factor = t.LoadFactor();
    row.dram_bytes = t.DramBytes();
  };
  if (items.on()) {
    auto owner = std::make_unique<AbslBytesReference>();
    AbslBytesReference* api = owner.get();
    BytesView<AbslBytesReference> table(std::move(owner), api, items);
    RunReferencePhases(table, phases, one, progress, &row,
                       [&](const auto& view) { measure(view.owner()); });
  } else {
    AbslReference table(huge_pages);
    RunReferencePhases(table, phases, one, progress, &row, [&](const AbslReference& t) {
      measure(t);
      row.pages = t.Pages();
    });
  }
  return row;
}

std::string_view RowKindName(RowKind k) {
  switch (k) {
    case RowKind::kReference:
      return "reference";
    case RowKind::kTemplate:
      return "template";
    case RowKind::kFacade:
      return "facade";
  }
  return "?";
}

}  // namespace pmhash::bench
