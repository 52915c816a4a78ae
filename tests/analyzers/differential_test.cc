// Differential tests: every analyzer's fast path (ASCII fast path, UTF-8
// normalization, stem cache) against its ICU-only reference path, over
// large generated texts built to hit UAX #29's edge cases and over every
// real text on this machine we can find (licenses, translation catalogs in
// dozens of languages, read raw so they include invalid UTF-8 too).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "analyzers/word_segmenter.h"
#include "tests/analyzers/test_util.h"

namespace corvid::analyzers::testing {
namespace {

namespace fs = std::filesystem;

// Pieces the generator glues together, usually with no space between them
// so that every pair meets: ASCII word-break edge cases and the non-ASCII
// neighbours that must divert a chunk to ICU.
const std::vector<std::string> kPieces = {
    // ASCII words, numbers and the Mid*/ExtendNumLet characters.
    "the", "The", "QUICK", "brown", "fox", "running", "jumps", "over", "lazy", "dogs", "a", "I",
    "can't", "O'Neil", "rock'n'roll", "e.g.", "i.e", "U.S.A.", "foo_bar", "__init__", "_", "__",
    "x_1", "1_x", "3.14", "1,000", "1,000.50", "1;2", "12:30", "a:b", "1.2.3", "v1.2b", "a1.2b",
    "abc123", "123abc", "0", "42", ".", ",", ";", ":", "'", "\"", "''", "..", "-", "--", "/", "@",
    "#", "$", "%", "&", "*", "(", ")", "[", "]", "{", "}", "<", ">", "!", "?", "+", "=", "|",
    "\\", "^", "`", "~", "state-of-the-art", "https://example.com/a/b?q=1&r=2#frag",
    "john.doe@example.com", "C++", "C#", "node.js", "3.x", "x.3", "a.'b", "a'.b", "1.'2",
    // Whitespace and controls.
    " ", " ", " ", "  ", "\t", "\n", "\r\n", "\r", "\v", "\f", std::string(1, '\0'), "\x01", "\x7f",
    // Non-ASCII letters, digits and punctuation.
    "caf\xC3\xA9", "Caf\xC3\xA9", "na\xC3\xAFve", "\xC3\x85ngstr\xC3\xB6m", "Stra\xC3\x9F" "e",
    "\xCE\xBB\xCF\x8C\xCE\xB3\xCE\xBF\xCF\x82", "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",
    "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D", "\xD7\x90", "\xD8\xB3\xD9\x84\xD8\xA7\xD9\x85",
    "\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\x82\xE0\xA4\xA6\xE0\xA5\x80", "\xD9\xA3", "\xE0\xA5\xA7",
    "\xE2\x80\x99", "\xC2\xB7", "\xE2\x80\xA6", "\xE2\x80\x94", "\xC2\xA0", "\xE3\x80\x80",
    "\xE2\x80\xA8", "\xC2\x85", "\xE2\x80\x8B", "\xC2\xAD", "\xE2\x81\xA0", "\xEF\xBC\x8C",
    "\xEF\xBC\x8E", "\xEF\xBC\x9A", "\xEF\xB9\x95", "\xE2\x80\xBF",
    // Combining marks, ZWJ, variation selectors.
    "e\xCC\x81", "\xCC\x81", "\xCC\x88", "a\xCC\x8A", "\xE2\x80\x8D", "\xEF\xB8\x8F",
    // Emoji: single, ZWJ sequence, skin tone, flags (regional indicators).
    "\xF0\x9F\x91\x8D", "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
    "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", "\xF0\x9F\x87\xBA\xF0\x9F\x87\xB8", "\xF0\x9F\x87\xAB",
    "\xE2\x9D\xA4\xEF\xB8\x8F", "\xC2\xA9",
    // CJK, kana, Hangul, Thai, Lao, Khmer, Myanmar.
    "\xE4\xB8\xAD\xE6\x96\x87\xE5\x88\x86\xE8\xAF\x8D\xE6\xB5\x8B\xE8\xAF\x95",
    "\xE6\x88\x91\xE4\xBB\xAC\xE5\x9C\xA8\xE5\x8C\x97\xE4\xBA\xAC\xE5\xAD\xA6\xE4\xB9\xA0",
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88",
    "\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", "\xE3\x81\xB2\xE3\x82\x89\xE3\x81\x8C\xE3\x81\xAA",
    "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "\xE3\x80\x82", "\xE3\x80\x81",
    "\xE0\xB8\xA0\xE0\xB8\xB2\xE0\xB8\xA9\xE0\xB8\xB2\xE0\xB9\x84\xE0\xB8\x97\xE0\xB8\xA2\xE0\xB8\x87\xE0\xB9\x88\xE0\xB8\xB2\xE0\xB8\xA2",
    "\xE0\xBA\x9E\xE0\xBA\xB2\xE0\xBA\xAA\xE0\xBA\xB2\xE0\xBA\xA5\xE0\xBA\xB2\xE0\xBA\xA7",
    "\xE1\x9E\x97\xE1\x9E\xB6\xE1\x9E\x9F\xE1\x9E\xB6\xE1\x9E\x81\xE1\x9F\x92\xE1\x9E\x98\xE1\x9F\x82\xE1\x9E\x9A",
    "\xE1\x80\x99\xE1\x80\xBC\xE1\x80\x94\xE1\x80\xBA\xE1\x80\x99\xE1\x80\xAC",
    // Full-width forms and compatibility characters.
    "\xEF\xBC\xA1\xEF\xBC\xA2\xEF\xBC\xA3", "\xEF\xBC\x91\xEF\xBC\x92\xEF\xBC\x93", "\xEF\xAC\x81",
    "\xE2\x84\xAB", "\xE2\x91\xA0", "\xC2\xB2",
    // Invalid UTF-8: stray continuation, truncated sequences, surrogate,
    // overlong, out of range.
    "\x80", "\xBF", "\xC3", "\xE4\xB8", "\xF0\x9F\x91", "\xED\xA0\x80", "\xC0\xAF", "\xF5\x80\x80\x80",
    "\xFF",
};

// A text of about `bytes` bytes: mostly English-like words with spaces,
// with bursts of random pieces glued together.
std::string GenerateText(uint64_t seed, size_t bytes) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> piece(0, kPieces.size() - 1);
  std::uniform_int_distribution<int> percent(0, 99);
  std::string out;
  while (out.size() < bytes) {
    const int r = percent(rng);
    if (r < 55) {  // a plain word or number from the first pieces
      out += kPieces[piece(rng) % 40];
      out += ' ';
    } else if (r < 90) {  // a glued burst
      const int n = 1 + percent(rng) % 5;
      for (int i = 0; i < n; ++i) out += kPieces[piece(rng)];
      if (percent(rng) < 60) out += ' ';
    } else {  // random ASCII bytes over the word-break alphabet
      static const char kAlphabet[] = "aZq19_.,;:'\" -\t\n@/";
      const int n = 1 + percent(rng) % 12;
      for (int i = 0; i < n; ++i) out += kAlphabet[static_cast<size_t>(percent(rng)) % (sizeof(kAlphabet) - 1)];
    }
  }
  return out;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void RequireSameTokens(std::string_view analyzer, std::string_view text, std::string_view what) {
  const auto fast = Run(analyzer, text);
  const auto reference = RunIcuOnly(analyzer, text);
  const long diff = FirstDifference(fast, reference);
  if (diff >= 0) {
    const size_t i = static_cast<size_t>(diff);
    INFO(what << " analyzer=" << analyzer << " first difference at token " << i << " of "
              << fast.size() << "/" << reference.size());
    if (i < fast.size()) INFO("fast:      " << fast[i]);
    if (i < reference.size()) {
      const auto& t = reference[i];
      INFO("reference: " << t << " context: "
                         << std::string(text.substr(t.start > 20 ? t.start - 20 : 0, 60)));
    }
    FAIL("fast path differs from the ICU-only path");
  }
}

TEST_CASE("Differential: generated edge-case texts, fast vs ICU-only", "[analyzers]") {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const std::string text = GenerateText(seed, 64 * 1024);
    for (const char* analyzer : {"standard", "english", "folding"}) {
      RequireSameTokens(analyzer, text, "seed " + std::to_string(seed));
    }
  }
}

TEST_CASE("Differential: short generated texts, every analyzer", "[analyzers]") {
  // Short texts put the edge cases at the start and end of the input.
  const auto names = AnalyzerNames();
  for (uint64_t seed = 100; seed < 2100; ++seed) {
    const std::string text = GenerateText(seed, 1 + seed % 24);
    for (const auto& name : {std::string("standard"), std::string("keyword"),
                             names[seed % names.size()]}) {
      RequireSameTokens(name, text, "seed " + std::to_string(seed));
    }
  }
}

TEST_CASE("Differential: random ASCII over the word-break alphabet", "[analyzers]") {
  std::mt19937_64 rng(7);
  static const char kAlphabet[] = "aZ09_.,;:'\" -\t\n\r@/+#";
  std::string text;
  for (int i = 0; i < 400000; ++i) text += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  RequireSameTokens("standard", text, "random ascii");
  RequireSameTokens("english", text, "random ascii");
}

// Real text: licenses, Debian docs and gettext catalogs (raw .mo files:
// UTF-8 translations in many languages plus binary headers that are
// invalid UTF-8 and NULs).
std::vector<fs::path> RealTextFiles(size_t max_files_per_dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const char* dir : {"/usr/share/common-licenses"}) {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
  }
  if (fs::exists("/usr/share/locale", ec)) {
    for (const auto& lang : fs::directory_iterator("/usr/share/locale", ec)) {
      const fs::path messages = lang.path() / "LC_MESSAGES";
      if (!fs::is_directory(messages, ec)) continue;
      std::vector<fs::path> mo;
      for (const auto& e : fs::directory_iterator(messages, ec)) mo.push_back(e.path());
      std::sort(mo.begin(), mo.end());
      for (size_t i = 0; i < mo.size() && i < max_files_per_dir; ++i) files.push_back(mo[i]);
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

void RunRealTexts(size_t max_files_per_dir, std::vector<const char*> analyzers) {
  const auto files = RealTextFiles(max_files_per_dir);
  REQUIRE(files.size() > 10);
  size_t bytes = 0;
  for (const auto& path : files) {
    const std::string text = ReadFile(path);
    bytes += text.size();
    for (const char* analyzer : analyzers) RequireSameTokens(analyzer, text, path.string());
  }
  WARN("real texts: " << files.size() << " files, " << bytes << " bytes");
}

TEST_CASE("Segmenter: ASCII text takes the fast path, other text ICU", "[analyzers]") {
  using Segments = std::vector<std::pair<uint32_t, uint32_t>>;
  auto segments = [](internal::WordBreaker& breaker, std::string_view text,
                     internal::SegmentMode mode) {
    Segments out;
    REQUIRE(breaker.Segment(text, mode, [&](uint32_t s, uint32_t e, uint32_t flags) {
                     out.emplace_back(s, e);
                     // Flags must describe the segment exactly.
                     REQUIRE(flags == internal::FlagsOf(
                                          reinterpret_cast<const uint8_t*>(text.data()) + s, e - s));
                   }).ok());
    return out;
  };
  internal::WordBreaker breaker;
  REQUIRE(breaker.init_status().ok());
  const std::string ascii = ReadFile("/usr/share/common-licenses/GPL-3");
  REQUIRE(ascii.size() > 10000);
  const Segments fast = segments(breaker, ascii, internal::SegmentMode::kFast);
  CHECK(breaker.stats().icu_chunks == 0);
  CHECK(breaker.stats().ascii_bytes == ascii.size());
  CHECK(fast == segments(breaker, ascii, internal::SegmentMode::kIcuOnly));
  CHECK(fast.size() > 5000);

  const std::string mixed = GenerateText(5, 64 * 1024);
  const auto before = breaker.stats();
  const Segments mixed_fast = segments(breaker, mixed, internal::SegmentMode::kFast);
  CHECK(breaker.stats().icu_chunks > before.icu_chunks + 100);
  CHECK(breaker.stats().ascii_bytes > before.ascii_bytes + mixed.size() / 4);
  CHECK(mixed_fast == segments(breaker, mixed, internal::SegmentMode::kIcuOnly));
}

TEST_CASE("Differential: real texts on this machine", "[analyzers]") {
  RunRealTexts(2, {"standard", "english", "folding"});
}

TEST_CASE("Differential: every real text, every analyzer kind", "[analyzers][.slow]") {
  RunRealTexts(1000, {"standard", "english", "folding", "german", "russian", "french"});
}

TEST_CASE("Concurrent analysis gives the single-threaded result", "[analyzers]") {
  const std::string text = GenerateText(99, 256 * 1024);
  const auto expected_standard = Run("standard", text);
  const auto expected_english = Run("english", text);
  const Analyzer& standard = Get("standard");
  const Analyzer& english = Get("english");
  std::vector<int> ok(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      int good = 1;
      for (int round = 0; round < 3; ++round) {
        CollectingSink a, b;
        if (!standard.Analyze(text, a).ok() || !english.Analyze(text, b).ok()) good = 0;
        if (a.tokens != expected_standard || b.tokens != expected_english) good = 0;
      }
      ok[static_cast<size_t>(t)] = good;
    });
  }
  for (auto& th : threads) th.join();
  CHECK(ok == std::vector<int>(4, 1));
}

}  // namespace
}  // namespace corvid::analyzers::testing
