// Helpers shared by the analyzers tests: run an analyzer (fast or ICU-only)
// and collect its tokens as plain values that Catch2 can compare and print.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "analyzers/analyzer.h"

namespace corvid::analyzers::testing {

struct TokenValue {
  std::string term;
  uint32_t position;
  uint32_t start;
  uint32_t end;
  bool operator==(const TokenValue&) const = default;
};

inline std::ostream& operator<<(std::ostream& os, const TokenValue& t) {
  return os << "{\"" << t.term << "\" pos=" << t.position << " [" << t.start << "," << t.end << ")}";
}

class CollectingSink : public TokenSink {
 public:
  void OnToken(const Token& token) override {
    tokens.push_back({std::string(token.term), token.position, token.start, token.end});
  }
  std::vector<TokenValue> tokens;
};

inline const Analyzer& Get(std::string_view name) {
  auto found = FindAnalyzer(name);
  REQUIRE(found.ok());
  return *found.value();
}

inline std::vector<TokenValue> Run(std::string_view name, std::string_view text) {
  CollectingSink sink;
  Status s = Get(name).Analyze(text, sink);
  REQUIRE(s.ok());
  return sink.tokens;
}

inline std::vector<TokenValue> RunIcuOnly(std::string_view name, std::string_view text) {
  CollectingSink sink;
  Status s = Get(name).AnalyzeWithIcuOnly(text, sink);
  REQUIRE(s.ok());
  return sink.tokens;
}

inline std::vector<std::string> Terms(const std::vector<TokenValue>& tokens) {
  std::vector<std::string> terms;
  for (const auto& t : tokens) terms.push_back(t.term);
  return terms;
}

// Returns the index of the first token where a and b differ (or the shorter
// size when one is a prefix of the other), or -1 when equal. Used to print
// a small, readable window instead of two huge vectors.
inline long FirstDifference(const std::vector<TokenValue>& a, const std::vector<TokenValue>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (!(a[i] == b[i])) return static_cast<long>(i);
  }
  return a.size() == b.size() ? -1 : static_cast<long>(n);
}

}  // namespace corvid::analyzers::testing
