// bench/presets.h — `pmhash bench --experiment NAME`: the papers' experiments as configurations.
//
// A preset fills a BenchConfig (phases, thread counts, durability, distribution, experiments);
// the command line's explicit options are applied on top of it, so `--keys` scales any preset
// (the papers' sizes when asked: e.g. --keys 200M for pea-fig4). Default sizes finish in a few
// minutes on 2 cores. A preset whose subject index is not registered is skipped with a note.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bench/results.h"
#include "pmhash/status.h"

namespace pmhash::bench {

struct Preset {
  std::string_view name;
  std::string_view paper_figure;  // what it reproduces
  std::string_view description;
  std::string_view requires_index;  // "" : runs on every registered index
  uint64_t paper_keys = 0;          // the paper's key count (--paper-size); 0: none
};

std::span<const Preset> Presets();
const Preset* FindPreset(std::string_view name);

// Fills *c for preset `name` (unknown: kInvalidArgument). Notes (e.g. a skipped subject index)
// are appended to *notes. Sets *skip when nothing of the preset can run here.
Status ApplyPreset(std::string_view name, BenchConfig* c, std::vector<std::string>* notes,
                   bool* skip);

}  // namespace pmhash::bench
