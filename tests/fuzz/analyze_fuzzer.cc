// analyze: every analyzer (analyzers/analyzer.h AnalyzerNames) over
// arbitrary bytes, invalid UTF-8 included, and NormalizeText.
// Invariants: Analyze succeeds; every term is non-empty UTF-8; positions
// strictly increase; byte offsets lie within the text, start < end, and
// starts never go back (`keyword`: exactly one token, the whole text, an
// empty one included, as analyzer.cc's RunKeyword says). For "standard", "english", "folding", "keyword" and
// one more analyzer picked by the input, the fast path (ASCII fast path,
// UTF-8 normalization, stem cache) gives exactly the tokens of the
// ICU-only oracle (AnalyzeWithIcuOnly), and the same tokens when run again
// (warm stem cache): the claim tests/analyzers/differential_test.cc makes
// for generated and real texts.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "analyzers/analyzer.h"
#include "common/utf8.h"
#include "tests/fuzz/fuzz_util.h"

using corvid::fuzz::Printable;
using namespace corvid::analyzers;

namespace {

struct Tok {
  std::string term;
  uint32_t position, start, end;
  bool operator==(const Tok&) const = default;
};

class Collect : public TokenSink {
 public:
  void OnToken(const Token& t) override { tokens.push_back({std::string(t.term), t.position, t.start, t.end}); }
  std::vector<Tok> tokens;
};

std::string Describe(const std::vector<Tok>& v, size_t i) {
  if (i >= v.size()) return "(none)";
  const Tok& t = v[i];
  return "'" + Printable(t.term, 60) + "' pos=" + std::to_string(t.position) + " [" + std::to_string(t.start) + "," +
         std::to_string(t.end) + ")";
}

void CheckTokens(std::string_view name, const std::vector<Tok>& tokens, std::string_view text) {
  if (name == "keyword") {
    // One token, the whole value, "" included (analyzer.cc RunKeyword).
    FUZZ_CHECK_MSG(tokens.size() == 1 && tokens[0].start == 0 && tokens[0].end == text.size() &&
                       tokens[0].position == 0 && corvid::IsValidUtf8(tokens[0].term),
                   "keyword: not one token of the whole text (%zu tokens)", tokens.size());
    return;
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Tok& t = tokens[i];
    FUZZ_CHECK_MSG(!t.term.empty(), "%.*s: empty term at %zu", int(name.size()), name.data(), i);
    FUZZ_CHECK_MSG(corvid::IsValidUtf8(t.term), "%.*s: term %s is not UTF-8", int(name.size()), name.data(),
                   Describe(tokens, i).c_str());
    FUZZ_CHECK_MSG(t.start < t.end && t.end <= text.size(), "%.*s: token %s outside the text (%zu bytes)",
                   int(name.size()), name.data(), Describe(tokens, i).c_str(), text.size());
    if (i > 0) {
      FUZZ_CHECK_MSG(t.position > tokens[i - 1].position, "%.*s: position of %s after %s", int(name.size()),
                     name.data(), Describe(tokens, i).c_str(), Describe(tokens, i - 1).c_str());
      FUZZ_CHECK_MSG(t.start >= tokens[i - 1].start, "%.*s: start of %s before %s", int(name.size()), name.data(),
                     Describe(tokens, i).c_str(), Describe(tokens, i - 1).c_str());
    }
  }
}

void Compare(std::string_view name, std::string_view what, const std::vector<Tok>& a, const std::vector<Tok>& b,
             std::string_view text) {
  if (a == b) return;
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  corvid::fuzz::Fail("%.*s: %.*s differ at token %zu: %s vs %s (text '%s')", int(name.size()), name.data(),
                     int(what.size()), what.data(), i, Describe(a, i).c_str(), Describe(b, i).c_str(),
                     Printable(text, 300).c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> names = AnalyzerNames();
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  uint32_t h = 2166136261u;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 16777619u;
  const std::string& extra = names[h % names.size()];

  for (const std::string& name : names) {
    auto found = FindAnalyzer(name);
    FUZZ_CHECK(found.ok());
    const Analyzer& analyzer = **found;
    Collect fast;
    const corvid::Status s = analyzer.Analyze(text, fast);
    FUZZ_CHECK_MSG(s.ok(), "%s: Analyze failed: %s", name.c_str(), s.message().c_str());
    CheckTokens(name, fast.tokens, text);

    const bool differential =
        name == "standard" || name == "english" || name == "folding" || name == "keyword" || name == extra;
    if (!differential) continue;
    Collect again;
    FUZZ_CHECK(analyzer.Analyze(text, again).ok());
    Compare(name, "two runs of Analyze", fast.tokens, again.tokens, text);
    Collect oracle;
    const corvid::Status so = analyzer.AnalyzeWithIcuOnly(text, oracle);
    FUZZ_CHECK_MSG(so.ok(), "%s: AnalyzeWithIcuOnly failed: %s", name.c_str(), so.message().c_str());
    Compare(name, "Analyze and AnalyzeWithIcuOnly", fast.tokens, oracle.tokens, text);
  }
  for (bool fold : {false, true}) {
    auto normalized = NormalizeText(text, fold);
    FUZZ_CHECK_MSG(normalized.ok(), "NormalizeText failed: %s", normalized.status().message().c_str());
    FUZZ_CHECK(corvid::IsValidUtf8(*normalized));
  }
  return 0;
}
