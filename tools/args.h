// tools/args.h — hand-written, strict command-line parsing for the pmhash CLI.
//
// Options are "--name value" or "--name=value"; boolean options take no value. "--" ends the
// options. Unknown options, a missing or unexpected value, and repeated options are errors, as
// are numbers with a sign, junk after the digits, or overflow.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pmhash/options.h"
#include "pmhash/status.h"

namespace pmhash::cli {

struct FlagSpec {
  std::string_view name;        // without the leading "--"
  std::string_view value_name;  // empty: a boolean option
  std::string_view help;
};

class ParsedArgs {
 public:
  std::vector<std::string> positional;

  bool Has(std::string_view name) const;
  // The option's value; nullopt if absent (or a boolean option).
  std::optional<std::string> Value(std::string_view name) const;

 private:
  friend Status ParseArgs(std::span<char* const>, std::span<const FlagSpec>, std::string_view,
                          ParsedArgs*);
  std::vector<std::pair<std::string, std::optional<std::string>>> flags_;
};

// Parses args (the words after the subcommand) against `flags`. `command` names the subcommand
// in error messages ("pmhash bench").
Status ParseArgs(std::span<char* const> args, std::span<const FlagSpec> flags,
                 std::string_view command, ParsedArgs* out);

// An unsigned 64-bit integer: decimal, or hexadecimal with a 0x prefix.
Status ParseU64(std::string_view s, std::string_view what, uint64_t* out);
// A count: decimal with an optional decimal suffix k (1e3), m (1e6), g (1e9), either case.
Status ParseCount(std::string_view s, std::string_view what, uint64_t* out);
// A byte size: decimal with an optional binary suffix K, M, G, T (2^10 ...), either case,
// optionally followed by "B" or "iB" ("512M", "1GiB", "4096").
Status ParseSize(std::string_view s, std::string_view what, uint64_t* out);
// A comma-separated list of integers in [lo, hi] ("1,2,4").
Status ParseIntList(std::string_view s, std::string_view what, int lo, int hi,
                    std::vector<int>* out);
// Splits "a,b,c" (empty items are an error).
Status SplitList(std::string_view s, std::string_view what, std::vector<std::string>* out);

// The --durability flag, if given: adr, eadr or dram (sim is for tests only, refused here).
Status ParseDurabilityFlag(const ParsedArgs& args, std::optional<Durability>* d);

// Help text for a flag table, one option per line.
std::string FlagsHelp(std::span<const FlagSpec> flags);

}  // namespace pmhash::cli
