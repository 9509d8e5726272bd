// src/registry.h — what the registry offers the tools beyond the public API.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "pmhash/status.h"

namespace pmhash {

// The stored parameter block of a `kind` pool, decoded and printed ("layout_version=1
// initial_depth=1 max_depth=32"), or why it cannot be decoded. kInvalidArgument for an unknown
// kind.
Result<std::string> DescribePoolParams(std::string_view kind, std::span<const uint8_t> params);

}  // namespace pmhash
