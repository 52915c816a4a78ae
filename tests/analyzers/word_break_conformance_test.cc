// Conformance with the Unicode word-break test data (WordBreakTest.txt from
// Debian's unicode-data package): ICU over UTF-8 must report exactly the
// listed boundaries, and the fast path's tokens must be whole segments of
// that segmentation and equal the ICU-only tokens, alone and in context.
#include <catch2/catch.hpp>

#include <unicode/utf8.h>

#include <algorithm>
#include <iterator>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "analyzers/word_segmenter.h"
#include "tests/analyzers/test_util.h"

namespace corvid::analyzers::testing {
namespace {

constexpr const char* kWordBreakTest = "/usr/share/unicode/auxiliary/WordBreakTest.txt";

// ICU's root word rules are CLDR's tailoring of UAX #29: colon-like
// characters are not MidLetter (so "a:b" is three segments) and '@' is a
// letter. Lines with these characters may legitimately differ from the
// file; ICU is the definition Corvid follows (API.md).
constexpr UChar32 kTailored[] = {0x003A, 0xFE13, 0xFE55, 0xFF1A, 0x0040};

struct BreakCase {
  int line;
  bool tailored = false;  // contains a kTailored character
  std::string text;                 // UTF-8
  std::vector<uint32_t> boundaries;  // byte offsets marked ÷, including 0 and size
};

std::string Utf8(UChar32 c) {
  char buf[4];
  int32_t n = 0;
  UBool error = false;
  U8_APPEND(buf, n, 4, c, error);
  (void)error;
  return std::string(buf, static_cast<size_t>(n));
}

// Each data line reads "÷ 0001 × 0308 ÷ 0001 ÷ # comment": code points in
// hex, separated by ÷ (break) or × (no break), with one at each end.
std::vector<BreakCase> LoadCases() {
  std::ifstream in(kWordBreakTest);
  REQUIRE(in.good());
  std::vector<BreakCase> cases;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    line = line.substr(0, line.find('#'));
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    BreakCase c;
    c.line = line_no;
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      if (word == "\xC3\xB7") {  // ÷
        c.boundaries.push_back(static_cast<uint32_t>(c.text.size()));
      } else if (word == "\xC3\x97") {  // ×
      } else {
        const auto cp = static_cast<UChar32>(std::stoul(word, nullptr, 16));
        c.tailored |= std::count(std::begin(kTailored), std::end(kTailored), cp) > 0;
        c.text += Utf8(cp);
      }
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST_CASE("WordBreakTest.txt: ICU over UTF-8 reports exactly the listed boundaries",
          "[analyzers]") {
  const auto cases = LoadCases();
  REQUIRE(cases.size() > 1500);
  internal::WordBreaker breaker;
  REQUIRE(breaker.init_status().ok());
  int mismatches = 0;
  int tailored_mismatches = 0;
  for (const auto& c : cases) {
    std::vector<uint32_t> got;
    std::vector<int32_t> statuses;
    REQUIRE(breaker.IcuBoundaries(c.text, &got, &statuses).ok());
    if (got == c.boundaries) continue;
    if (c.tailored) {
      ++tailored_mismatches;
    } else {
      ++mismatches;
      UNSCOPED_INFO("line " << c.line);
    }
  }
  CHECK(mismatches == 0);
  // Today 15 colon lines; far more would mean a broken UText or parser.
  CHECK(tailored_mismatches < 40);
}

TEST_CASE("WordBreakTest.txt: fast tokens are whole segments and equal ICU's", "[analyzers]") {
  const auto cases = LoadCases();
  internal::WordBreaker breaker;
  size_t tokens_checked = 0;
  for (const auto& c : cases) {
    INFO("line " << c.line);
    const auto fast = Run("standard", c.text);
    REQUIRE(fast == RunIcuOnly("standard", c.text));
    // The file's boundaries, or ICU's where CLDR tailors the line.
    std::vector<uint32_t> boundaries = c.boundaries;
    if (c.tailored) {
      std::vector<int32_t> statuses;
      REQUIRE(breaker.IcuBoundaries(c.text, &boundaries, &statuses).ok());
    }
    const std::set<uint32_t> expected(boundaries.begin(), boundaries.end());
    for (const auto& t : fast) {
      CHECK(expected.count(t.start) == 1);
      CHECK(expected.count(t.end) == 1);
      CHECK(std::none_of(boundaries.begin(), boundaries.end(),
                         [&](uint32_t b) { return b > t.start && b < t.end; }));
      ++tokens_checked;
    }
    // The same text inside ASCII context exercises the chunking around it.
    for (const char* context : {" ", "x", "1", ".", "a.", "_", "\n", "-", "'", "\xE2\x80\x99"}) {
      const std::string wrapped = std::string(context) + c.text + context + "b " + c.text;
      INFO("context '" << context << "'");
      REQUIRE(Run("standard", wrapped) == RunIcuOnly("standard", wrapped));
    }
  }
  CHECK(tokens_checked > 1000);
}

}  // namespace
}  // namespace corvid::analyzers::testing
