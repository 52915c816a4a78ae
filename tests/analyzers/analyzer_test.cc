// Specific cases for every analyzer: exact expected terms, positions and
// byte offsets for the cases API.md and issue 3 name (numbers, apostrophes,
// URLs, CJK, Thai, emoji, combining marks, full-width forms, invalid UTF-8,
// a 10 MB token), each also checked against the ICU-only path.
#include <catch2/catch.hpp>

#include <libstemmer.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/analyzers/test_util.h"

namespace corvid::analyzers::testing {
namespace {

using Tokens = std::vector<TokenValue>;
using Strings = std::vector<std::string>;

// Runs both paths, requires they agree, returns the tokens.
Tokens Both(std::string_view analyzer, std::string_view text) {
  const auto fast = Run(analyzer, text);
  REQUIRE(fast == RunIcuOnly(analyzer, text));
  return fast;
}

TEST_CASE("standard: ASCII words, offsets and positions", "[analyzers]") {
  CHECK(Both("standard", "Hello, World!") ==
        Tokens{{"hello", 0, 0, 5}, {"world", 1, 7, 12}});
  CHECK(Both("standard", "  multiple   spaces\tand\nlines\r\n") ==
        Tokens{{"multiple", 0, 2, 10}, {"spaces", 1, 13, 19}, {"and", 2, 20, 23}, {"lines", 3, 24, 29}});
  CHECK(Both("standard", "").empty());
  CHECK(Both("standard", " \t\n.,;:!?-").empty());
}

TEST_CASE("standard: numbers with separators", "[analyzers]") {
  CHECK(Both("standard", "pi is 3.14, not 1,000 or 1;2") ==
        Tokens{{"pi", 0, 0, 2}, {"is", 1, 3, 5}, {"3.14", 2, 6, 10}, {"not", 3, 12, 15},
               {"1,000", 4, 16, 21}, {"or", 5, 22, 24}, {"1;2", 6, 25, 28}});
  CHECK(Terms(Both("standard", "1,000.50 12:30 1.2.3 3. .5")) ==
        Strings{"1,000.50", "12", "30", "1.2.3", "3", "5"});
  CHECK(Terms(Both("standard", "abc123 123abc a1.2b 1.a.b a.1")) ==
        Strings{"abc123", "123abc", "a1.2b", "1", "a.b", "a", "1"});
}

TEST_CASE("standard: apostrophes, periods, colons, underscores, hyphens", "[analyzers]") {
  CHECK(Terms(Both("standard", "can't O'Neil 'quoted' rock'n'roll")) ==
        Strings{"can't", "o'neil", "quoted", "rock'n'roll"});
  // U+2019 RIGHT SINGLE QUOTATION MARK is MidNumLet too.
  CHECK(Terms(Both("standard", "can\xE2\x80\x99t")) == Strings{"can\xE2\x80\x99t"});
  CHECK(Terms(Both("standard", "e.g. U.S.A. a..b a:b")) == Strings{"e.g", "u.s.a", "a", "b", "a", "b"});
  CHECK(Terms(Both("standard", "foo_bar __init__ _ __ x_1")) ==
        Strings{"foo_bar", "__init__", "__", "x_1"});
  CHECK(Terms(Both("standard", "state-of-the-art well--known")) ==
        Strings{"state", "of", "the", "art", "well", "known"});
}

TEST_CASE("standard: URLs and e-mail addresses", "[analyzers]") {
  CHECK(Terms(Both("standard", "https://www.example.com/path/to?q=1&lang=en#top")) ==
        Strings{"https", "www.example.com", "path", "to", "q", "1", "lang", "en", "top"});
  // ICU's root rules (CLDR) make '@' a letter, so an address is one word.
  CHECK(Both("standard", "Mail John.Doe@Example.org now") ==
        Tokens{{"mail", 0, 0, 4}, {"john.doe@example.org", 1, 5, 25}, {"now", 2, 26, 29}});
  CHECK(Terms(Both("standard", "@home a@b.c @ x")) == Strings{"@home", "a@b.c", "@", "x"});
}

TEST_CASE("standard: CJK is segmented by ICU's dictionary", "[analyzers]") {
  // 我们在北京学习 "we study in Beijing"; every character is kept, in words.
  const std::string text = "\xE6\x88\x91\xE4\xBB\xAC\xE5\x9C\xA8\xE5\x8C\x97\xE4\xBA\xAC\xE5\xAD\xA6\xE4\xB9\xA0";
  const auto tokens = Both("standard", text);
  CHECK(Terms(tokens) == Strings{"\xE6\x88\x91\xE4\xBB\xAC", "\xE5\x9C\xA8", "\xE5\x8C\x97\xE4\xBA\xAC",
                                 "\xE5\xAD\xA6\xE4\xB9\xA0"});
  CHECK(tokens.front().start == 0);
  CHECK(tokens.back().end == text.size());
  // Japanese: kanji, hiragana, katakana; the ideographic full stop is dropped.
  const auto ja = Both("standard", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88\xE3\x80\x82");
  CHECK(Terms(ja) == Strings{"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", "\xE3\x81\xAE",
                             "\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88"});
  // CJK next to ASCII: the chunk goes to ICU, the ASCII word stays whole.
  CHECK(Terms(Both("standard", "ICU\xE5\x88\x86\xE8\xAF\x8D test")).front() == "icu");
}

TEST_CASE("standard: Thai is segmented by ICU's dictionary", "[analyzers]") {
  // ภาษาไทยง่ายนิดเดียว "Thai is very easy".
  const std::string text =
      "\xE0\xB8\xA0\xE0\xB8\xB2\xE0\xB8\xA9\xE0\xB8\xB2\xE0\xB9\x84\xE0\xB8\x97\xE0\xB8\xA2"
      "\xE0\xB8\x87\xE0\xB9\x88\xE0\xB8\xB2\xE0\xB8\xA2\xE0\xB8\x99\xE0\xB8\xB4\xE0\xB8\x94"
      "\xE0\xB9\x80\xE0\xB8\x94\xE0\xB8\xB5\xE0\xB8\xA2\xE0\xB8\xA7";
  const auto tokens = Both("standard", text);
  REQUIRE(tokens.size() >= 3);
  CHECK(tokens[0].term == "\xE0\xB8\xA0\xE0\xB8\xB2\xE0\xB8\xA9\xE0\xB8\xB2");  // ภาษา
  std::string joined;
  for (const auto& t : tokens) joined += t.term;
  CHECK(joined == text);
}

TEST_CASE("standard: emoji and ZWJ sequences are not words", "[analyzers]") {
  const std::string family = "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7";
  CHECK(Both("standard", "I \xE2\x9D\xA4\xEF\xB8\x8F my " + family + " family\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD") ==
        Tokens{{"i", 0, 0, 1}, {"my", 1, 9, 11}, {"family", 2, 31, 37}});
  // A ZWJ inside a word stays inside it (WB4) and nfkc_cf removes it.
  CHECK(Both("standard", "ab\xE2\x80\x8D" "cd") == Tokens{{"abcd", 0, 0, 7}});
}

TEST_CASE("standard: combining marks and full-width forms are normalized", "[analyzers]") {
  // "école" with a combining acute accent composes under nfkc_cf.
  CHECK(Both("standard", "E\xCC\x81" "cole") == Tokens{{"\xC3\xA9" "cole", 0, 0, 7}});
  // A mark after an ASCII word joins the word (WB4), so the chunk goes to ICU.
  CHECK(Both("standard", "cafe\xCC\x81 bar") == Tokens{{"caf\xC3\xA9", 0, 0, 6}, {"bar", 1, 7, 10}});
  // A mark after a space belongs to the space: never a token.
  CHECK(Both("standard", "a \xCC\x81" "b") == Tokens{{"a", 0, 0, 1}, {"b", 1, 4, 5}});
  // Full-width letters and digits: one word, NFKC maps it to ASCII.
  CHECK(Both("standard", "\xEF\xBC\xA1\xEF\xBC\xA2\xEF\xBC\xA3\xEF\xBC\x91\xEF\xBC\x92") ==
        Tokens{{"abc12", 0, 0, 15}});
  // Ligature fi, Kelvin sign, German sharp s, Greek final sigma.
  CHECK(Terms(Both("standard", "\xEF\xAC\x81le \xE2\x84\xAA STRASSE Stra\xC3\x9F" "e \xCE\xA3\xCE\x91\xCE\xA3")) ==
        Strings{"file", "k", "strasse", "strasse", "\xCF\x83\xCE\xB1\xCF\x83"});
}

TEST_CASE("standard: invalid UTF-8 reads as U+FFFD and never fails", "[analyzers]") {
  CHECK(Both("standard", "ab\xFF" "cd") == Tokens{{"ab", 0, 0, 2}, {"cd", 1, 3, 5}});
  CHECK(Both("standard", "caf\xC3") == Tokens{{"caf", 0, 0, 3}});
  CHECK(Both("standard", "\xE4\xB8" "abc \xED\xA0\x80 \xC0\xAF" "x") ==
        Tokens{{"abc", 0, 2, 5}, {"x", 1, 12, 13}});
  // Every single byte value, alone and between letters.
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    Both("standard", byte);
    Both("standard", "x" + byte + "y");
    Both("folding", "\xC3\xA9" + byte + "\xC3\xA9");
  }
}

TEST_CASE("standard: a 10 MB single token", "[analyzers]") {
  std::string text(10 * 1024 * 1024, 'a');
  for (size_t i = 0; i < text.size(); i += 7) text[i] = 'Q';
  const auto tokens = Both("standard", text);
  REQUIRE(tokens.size() == 1);
  CHECK(tokens[0].start == 0);
  CHECK(tokens[0].end == text.size());
  std::string lower = text;
  std::replace(lower.begin(), lower.end(), 'Q', 'q');
  CHECK(tokens[0].term == lower);
  // Non-ASCII: the same size through the ICU path.
  std::string accented;
  while (accented.size() < 10 * 1024 * 1024) accented += "\xC3\xA9";
  const auto t2 = Run("folding", accented);
  REQUIRE(t2.size() == 1);
  CHECK(t2[0].term == std::string(accented.size() / 2, 'e'));
}

TEST_CASE("english: stop words leave position gaps, Snowball stems", "[analyzers]") {
  CHECK(Both("english", "The quick brown foxes are running") ==
        Tokens{{"quick", 1, 4, 9}, {"brown", 2, 10, 15}, {"fox", 3, 16, 21}, {"run", 5, 26, 33}});
  CHECK(Terms(Both("english", "It is THE connection of connected connecting things, isn't it?")) ==
        Strings{"connect", "connect", "connect", "thing", "isn't"});
  // All 33 stop words, any case, vanish but count.
  const std::string stops =
      "a an and are as at be but by for if in into is it no not of on or such that the their "
      "then there these they this to was will with THE Such running";
  const auto start = static_cast<uint32_t>(stops.find("running"));
  CHECK(Both("english", stops) == Tokens{{"run", 35, start, start + 7}});
  CHECK(Both("english", "the of and").empty());
}

TEST_CASE("folding: diacritics removed after nfkc_cf", "[analyzers]") {
  CHECK(Both("folding", "Caf\xC3\xA9 \xC3\x85ngstr\xC3\xB6m na\xC3\xAFve Cafe\xCC\x81") ==
        Tokens{{"cafe", 0, 0, 5}, {"angstrom", 1, 6, 16}, {"naive", 2, 17, 23}, {"cafe", 3, 24, 30}});
  // Letters that are not base+mark map as Lucene's ASCIIFoldingFilter maps
  // them: øl, Łódź, Ærøskøbing, Œuvre, þorn, ðe, Đ, ı; ß is "ss" (nfkc_cf).
  CHECK(Terms(Both("folding", "\xC3\xB8l \xC5\x81\xC3\xB3" "d\xC5\xBA Stra\xC3\x9F" "e "
                              "\xC3\x86r\xC3\xB8sk\xC3\xB8" "bing \xC5\x92uvre \xC3\xBEorn \xC3\xB0" "e \xC4\x90" "a "
                              "\xC4\xB1s")) ==
        Strings{"ol", "lodz", "strasse", "aeroskobing", "oeuvre", "thorn", "de", "da", "is"});
  // Greek and Vietnamese lose their accents too (and case folding maps
  // final sigma to sigma).
  CHECK(Terms(Both("folding", "\xCE\xBB\xCF\x8C\xCE\xB3\xCE\xBF\xCF\x82 Ti\xE1\xBA\xBFng")) ==
        Strings{"\xCE\xBB\xCE\xBF\xCE\xB3\xCE\xBF\xCF\x83", "tieng"});
}

TEST_CASE("keyword: the whole value, unchanged", "[analyzers]") {
  CHECK(Both("keyword", "New York, NY") == Tokens{{"New York, NY", 0, 0, 12}});
  CHECK(Both("keyword", "") == Tokens{{"", 0, 0, 0}});  // a value too: facets count it, tags:"" finds it
  CHECK(Both("keyword", "  Caf\xC3\xA9  ") == Tokens{{"  Caf\xC3\xA9  ", 0, 0, 9}});
  // Invalid UTF-8: each maximal ill-formed subsequence becomes U+FFFD.
  CHECK(Both("keyword", "a\xFF" "b\xE4\xB8" "c") == Tokens{{"a\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c", 0, 0, 6}});
  CHECK(Both("keyword", "\xED\xA0\x80") == Tokens{{"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 0, 0, 3}});
}

TEST_CASE("languages: every libstemmer algorithm is an analyzer", "[analyzers]") {
  const auto names = AnalyzerNames();
  REQUIRE(std::is_sorted(names.begin(), names.end()));
  for (const char* required : {"standard", "english", "folding", "keyword", "german", "russian", "french"}) {
    CHECK(std::count(names.begin(), names.end(), required) == 1);
  }
  size_t algorithms = 0;
  for (const char** p = sb_stemmer_list(); *p != nullptr; ++p, ++algorithms) {
    INFO(*p);
    auto found = FindAnalyzer(*p);
    REQUIRE(found.ok());
    CHECK(found.value()->name() == *p);
    Both(*p, "Running Häuser книги continuer 中文 ภาษาไทย");
  }
  CHECK(names.size() == algorithms + 3);  // + standard, folding, keyword
  CHECK(Terms(Both("german", "Die H\xC3\xA4user")) == Strings{"die", "haus"});
  CHECK(Terms(Both("russian", "\xD0\x9A\xD0\xBD\xD0\xB8\xD0\xB3\xD0\xB8")) ==
        Strings{"\xD0\xBA\xD0\xBD\xD0\xB8\xD0\xB3"});
  CHECK(Terms(Both("french", "Les continuations")) == Strings{"le", "continu"});
  // Only english drops stop words.
  CHECK(Terms(Both("porter", "the running")) == Strings{"the", "run"});
}

TEST_CASE("FindAnalyzer: unknown or empty names are errors", "[analyzers]") {
  auto unknown = FindAnalyzer("klingon");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == StatusCode::kNotFound);
  CHECK(FindAnalyzer("Standard").status().code() == StatusCode::kNotFound);
  auto empty = FindAnalyzer("");
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.status().code() == StatusCode::kInvalidArgument);
  auto same = FindAnalyzer("standard");
  REQUIRE(same.ok());
  CHECK(same.value() == FindAnalyzer("standard").value());
}

// A sink that analyzes again from inside OnToken: must not corrupt the
// outer call's buffers.
class ReentrantSink : public TokenSink {
 public:
  void OnToken(const Token& token) override {
    outer.push_back(std::string(token.term));
    CollectingSink inner;
    (void)Get("english").Analyze("Nested RUNNING text", inner);
    inner_terms = Terms(inner.tokens);
  }
  Strings outer;
  Strings inner_terms;
};

TEST_CASE("Analyze is reentrant from a sink", "[analyzers]") {
  ReentrantSink sink;
  REQUIRE(Get("english").Analyze("Outer WALKING Café", sink).ok());
  CHECK(sink.outer == Strings{"outer", "walk", "caf\xC3\xA9"});
  CHECK(sink.inner_terms == Strings{"nest", "run", "text"});
}

}  // namespace
}  // namespace corvid::analyzers::testing
