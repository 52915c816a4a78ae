// The version `corvid serve` logs at start-up and `corvid --version` prints.
#pragma once

namespace corvid {
inline constexpr const char* kVersion = "0.9.0";
}  // namespace corvid
