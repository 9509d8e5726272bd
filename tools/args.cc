#include "tools/args.h"

#include <algorithm>
#include <charconv>

namespace pmhash::cli {

bool ParsedArgs::Has(std::string_view name) const {
  return std::any_of(flags_.begin(), flags_.end(), [&](const auto& f) { return f.first == name; });
}

std::optional<std::string> ParsedArgs::Value(std::string_view name) const {
  for (const auto& f : flags_) {
    if (f.first == name) return f.second;
  }
  return std::nullopt;
}

Status ParseArgs(std::span<char* const> args, std::span<const FlagSpec> flags,
                 std::string_view command, ParsedArgs* out) {
  const std::string see = " (see '" + std::string(command) + " --help')";
  bool options_done = false;
  for (size_t i = 0; i < args.size(); i++) {
    const std::string_view a = args[i];
    if (options_done || a.size() < 2 || a[0] != '-') {
      if (!options_done && a == "-") {
        return Status::InvalidArgument("unexpected argument '-'" + see);
      }
      out->positional.emplace_back(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    if (a.substr(0, 2) != "--") {
      return Status::InvalidArgument("unknown option '" + std::string(a) + "' for " +
                                     std::string(command) + see);
    }
    std::string_view name = a.substr(2);
    std::optional<std::string> value;
    if (const auto eq = name.find('='); eq != std::string_view::npos) {
      value = std::string(name.substr(eq + 1));
      name = name.substr(0, eq);
    }
    const auto spec =
        std::find_if(flags.begin(), flags.end(), [&](const FlagSpec& f) { return f.name == name; });
    if (spec == flags.end()) {
      return Status::InvalidArgument("unknown option '--" + std::string(name) + "' for " +
                                     std::string(command) + see);
    }
    if (out->Has(name)) {
      return Status::InvalidArgument("option --" + std::string(name) + " given twice");
    }
    if (spec->value_name.empty()) {
      if (value) {
        return Status::InvalidArgument("option --" + std::string(name) + " takes no value");
      }
    } else if (!value) {
      if (i + 1 >= args.size()) {
        return Status::InvalidArgument("option --" + std::string(name) + " needs a value (" +
                                       std::string(spec->value_name) + ")");
      }
      value = std::string(args[++i]);
    }
    out->flags_.emplace_back(std::string(name), std::move(value));
  }
  return Status::OK();
}

namespace {

Status Bad(std::string_view what, std::string_view s, std::string_view expected) {
  return Status::InvalidArgument("invalid " + std::string(what) + " '" + std::string(s) +
                                 "': expected " + std::string(expected));
}

// Leading decimal digits of s as a number; *rest gets what follows. False on no digits or
// overflow.
bool LeadingDecimal(std::string_view s, uint64_t* v, std::string_view* rest) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v, 10);
  if (ec != std::errc() || p == s.data()) return false;
  *rest = s.substr(static_cast<size_t>(p - s.data()));
  return true;
}

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

}  // namespace

Status ParseU64(std::string_view s, std::string_view what, uint64_t* out) {
  const char* expected = "an unsigned integer (decimal, or hex with 0x)";
  if (s.empty()) return Bad(what, s, expected);
  int base = 10;
  std::string_view digits = s;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    digits = s.substr(2);
  }
  uint64_t v = 0;
  const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
  if (ec == std::errc::result_out_of_range) {
    return Status::InvalidArgument("invalid " + std::string(what) + " '" + std::string(s) +
                                   "': larger than 2^64-1");
  }
  if (ec != std::errc() || p != digits.data() + digits.size()) return Bad(what, s, expected);
  *out = v;
  return Status::OK();
}

Status ParseCount(std::string_view s, std::string_view what, uint64_t* out) {
  const char* expected = "a count such as 200000, 200k or 10M";
  uint64_t v = 0;
  std::string_view rest;
  if (!LeadingDecimal(s, &v, &rest)) return Bad(what, s, expected);
  uint64_t mul = 1;
  if (rest == "k" || rest == "K") {
    mul = 1000;
  } else if (rest == "m" || rest == "M") {
    mul = 1000000;
  } else if (rest == "g" || rest == "G") {
    mul = 1000000000;
  } else if (!rest.empty()) {
    return Bad(what, s, expected);
  }
  if (MulOverflows(v, mul, out)) return Bad(what, s, "a value below 2^64");
  return Status::OK();
}

Status ParseSize(std::string_view s, std::string_view what, uint64_t* out) {
  const char* expected = "a size in bytes such as 4096, 512M, 8G or 1GiB";
  uint64_t v = 0;
  std::string_view rest;
  if (!LeadingDecimal(s, &v, &rest)) return Bad(what, s, expected);
  int shift = 0;
  if (!rest.empty()) {
    switch (rest[0]) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      case 't':
      case 'T':
        shift = 40;
        break;
      case 'b':
      case 'B':
        shift = -1;
        break;
      default:
        return Bad(what, s, expected);
    }
    if (shift < 0) {
      if (rest.size() != 1) return Bad(what, s, expected);
      shift = 0;
    } else {
      const std::string_view unit = rest.substr(1);
      if (!(unit.empty() || unit == "B" || unit == "b" || unit == "iB" || unit == "ib")) {
        return Bad(what, s, expected);
      }
    }
  }
  if (MulOverflows(v, uint64_t{1} << shift, out)) return Bad(what, s, "a size below 2^64");
  return Status::OK();
}

Status SplitList(std::string_view s, std::string_view what, std::vector<std::string>* out) {
  out->clear();
  size_t start = 0;
  for (;;) {
    const size_t comma = s.find(',', start);
    const std::string_view item =
        s.substr(start, comma == std::string_view::npos ? s.npos : comma - start);
    if (item.empty()) {
      return Status::InvalidArgument("invalid " + std::string(what) + " '" + std::string(s) +
                                     "': empty item in comma-separated list");
    }
    out->emplace_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return Status::OK();
}

Status ParseIntList(std::string_view s, std::string_view what, int lo, int hi,
                    std::vector<int>* out) {
  std::vector<std::string> items;
  PMHASH_RETURN_IF_ERROR(SplitList(s, what, &items));
  out->clear();
  for (const auto& item : items) {
    uint64_t v = 0;
    PMHASH_RETURN_IF_ERROR(ParseU64(item, what, &v));
    if (v < static_cast<uint64_t>(lo) || v > static_cast<uint64_t>(hi)) {
      return Status::InvalidArgument("invalid " + std::string(what) + " '" + item +
                                     "': must be in [" + std::to_string(lo) + ", " +
                                     std::to_string(hi) + "]");
    }
    out->push_back(static_cast<int>(v));
  }
  return Status::OK();
}

std::string FlagsHelp(std::span<const FlagSpec> flags) {
  std::string s;
  for (const auto& f : flags) {
    std::string left = "  --";
    left += f.name;
    if (!f.value_name.empty()) {
      left += ' ';
      left += f.value_name;
    }
    if (left.size() < 28) {
      left.append(28 - left.size(), ' ');
    } else {
      left += "\n" + std::string(28, ' ');
    }
    s += left;
    // Continuation lines of the help text are indented under the first.
    for (const char c : f.help) {
      s += c;
      if (c == '\n') s.append(28, ' ');
    }
    s += '\n';
  }
  return s;
}

Status ParseDurabilityFlag(const ParsedArgs& args, std::optional<Durability>* d) {
  const auto v = args.Value("durability");
  if (!v) return Status::OK();
  Durability parsed;
  if (*v == "sim" || !ParseDurability(*v, &parsed)) {
    return Status::InvalidArgument("invalid durability '" + *v + "': expected adr, eadr or dram");
  }
  *d = parsed;
  return Status::OK();
}

}  // namespace pmhash::cli
