#include "bench/targets.h"

#include <array>

#include "bench/reference.h"
#include "bench/row.h"
#include "index/pea/pea.h"
#include "index/reh/reh.h"
#include "index/turbo/turbo.h"
#include "pm/persist.h"
#include "pm/record_heap.h"
#include "pmhash/index.h"

namespace pmhash::bench {

namespace {

// (index, durability) -> the row instantiated for the concrete type. Sim is left out: without
// a crash-simulator hook it behaves like Dram and measures nothing new.
constexpr std::array kTargets = {
    Target{"reh", Durability::kAdr, &RunTemplateRow<reh::Reh<pm::Adr>>},
    Target{"reh", Durability::kEadr, &RunTemplateRow<reh::Reh<pm::Eadr>>},
    Target{"reh", Durability::kDram, &RunTemplateRow<reh::Reh<pm::Dram>>},
    Target{"pea", Durability::kAdr, &RunTemplateRow<pea::Pea<pm::Adr>>},
    Target{"pea", Durability::kEadr, &RunTemplateRow<pea::Pea<pm::Eadr>>},
    Target{"pea", Durability::kDram, &RunTemplateRow<pea::Pea<pm::Dram>>},
    Target{"turbo", Durability::kAdr, &RunTemplateRow<turbo::Turbo<pm::Adr>>},
    Target{"turbo", Durability::kEadr, &RunTemplateRow<turbo::Turbo<pm::Eadr>>},
    Target{"turbo", Durability::kDram, &RunTemplateRow<turbo::Turbo<pm::Dram>>},
    Target{"turbo-kv", Durability::kAdr, &RunTemplateRow<turbo::TurboKv<pm::Adr>>},
    Target{"turbo-kv", Durability::kEadr, &RunTemplateRow<turbo::TurboKv<pm::Eadr>>},
    Target{"turbo-kv", Durability::kDram, &RunTemplateRow<turbo::TurboKv<pm::Dram>>},
};

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
  // PM bytes per key at the lowest load factor the index can be left at, with margin.
  // Unknown index: generous (the file is sparse: untouched space costs nothing); the driver
  // also retries a row with a 4x larger pool when an estimate proves too small (kOutOfSpace).
  double bytes_per_key = 512;
  if (index == "reh") {
    // 256 B bucket per 15 slots; extendible hashing averages ~0.69 load and can dip towards
    // 0.5 right after a wave of splits. Plan for 0.35.
    bytes_per_key = sizeof(reh::PmBucket) / static_cast<double>(reh::kSlots) / 0.35;
  }
  if (index == "pea") {
    // 256 B bucket per 15 slots; a 4-way split leaves segments near 0.22 load and uniform keys
    // fill them in waves, so the whole table can dip that low. Plan for 0.2 (the directory,
    // retired directories and stash segments are well under 1% on top).
    bytes_per_key = sizeof(pea::PmBucket) / static_cast<double>(pea::kSlots) / 0.2;
  }
  if (index == "turbo" || index == "turbo-kv") {
    // 256 B bucket per 14 slots; a shard is at ~0.4 load right after doubling (plan 0.3), and
    // the old shard stays allocated until its readers leave. turbo-kv adds one 24 B record per
    // key (8 B header + 8 B key + 8 B value) in a 32 B slot of a 4 KiB record-heap slab of 126
    // slots (src/pm/record_heap.h); plan for slabs 80% full (erases, one open slab per stripe).
    bytes_per_key = sizeof(turbo::Bucket) / static_cast<double>(turbo::kSlots) / 0.3;
    if (index == "turbo-kv") {
      const double slots_per_slab = (pm::kSlabTargetBytes - pm::kSlabHeaderBytes) / 32;
      bytes_per_key += pm::kSlabTargetBytes / slots_per_slab / 0.8;
    }
  }
  const auto bytes = static_cast<uint64_t>(static_cast<double>(keys) * bytes_per_key);
  return 64 * kMiB + (bytes + kMiB - 1) / kMiB * kMiB;
}

RowResult RunIndexRow(const RowConfig& c) {
  if (const Target* t = FindTemplateTarget(c.index, c.durability)) return t->run(c);
  const std::string kind = c.index;
  return RunRowWith([&kind](const Options& o) { return pmhash::Open(kind, o); }, RowKind::kFacade,
                    c);
}

RowResult RunReferenceRow(std::span<const PhaseSpec> phases, const RunnerOptions& ro,
                          const std::function<void(std::string_view)>& progress) {
  RowResult row;
  row.index = std::string(AbslReference::kName);
  row.durability = "dram";
  row.kind = RowKind::kReference;
  const RunnerOptions one{1, ro.pin, ro.latency_every};
  row.threads = 1;
  AbslReference table;
  RunReferencePhases(table, phases, one, progress, &row, [&row](const AbslReference& t) {
    row.load_factor = t.LoadFactor();
    row.dram_bytes = t.DramBytes();
  });
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
