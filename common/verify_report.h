// What `corvid verify` (API.md, Command line) collects from every part of a
// data directory it checks: damage (the command then exits 1), what was
// checked and found sound, and notes (files that are outdated rather than
// damaged, which the server rebuilds by itself).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace corvid {

struct VerifyReport {
  std::vector<std::string> damaged;
  std::vector<std::string> sound;
  std::vector<std::string> notes;
  // Damage beyond this many lines in one part is counted, not listed.
  static constexpr size_t kMaxListed = 20;
};

}  // namespace corvid
