// The analyzers facade: text -> terms with positions and UTF-8 byte offsets,
// exactly as the "Search index" analyzer list in API.md defines them. Search
// indexes call this for every document and query; POST /admin/analyze calls
// it to show what an index stores. Nothing here exposes ICU or libstemmer;
// see analyzers/README.md for the pipeline and the exact semantics.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace corvid::analyzers {

// One term of an analyzed text.
//   term     normalized (and possibly stemmed) UTF-8; valid only until the
//            sink returns from OnToken (it may point into a per-thread
//            buffer or into the input).
//   position counts the analyzer's tokens from 0; `english` leaves gaps
//            where stop words were removed.
//   start/end are UTF-8 byte offsets of the token's segment in the input.
struct Token {
  std::string_view term;
  uint32_t position = 0;
  uint32_t start = 0;
  uint32_t end = 0;
};

// Receives the tokens of one Analyze call, in text order. Must not call
// Analyze (of any analyzer) recursively from OnToken on the same thread;
// doing so works but takes a slow path that builds fresh ICU state.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  virtual void OnToken(const Token& token) = 0;
};

class Analyzer {
 public:
  virtual ~Analyzer() = default;

  // The name this analyzer is found by ("standard", "english", "german"...).
  virtual std::string_view name() const = 0;

  // Changes whenever the terms this analyzer makes of some text change
  // (1 at first): an index records it with its definition and rebuilds
  // when it differs, so stored terms and query terms always agree.
  virtual uint32_t revision() const = 0;

  // Feeds the tokens of `utf8` to `sink`. Invalid UTF-8 never fails: each
  // maximal ill-formed subsequence is read as U+FFFD (a non-word character,
  // so it separates words and never appears in a segmented term; `keyword`
  // terms contain U+FFFD in its place). Returns InvalidArgument, calling the
  // sink for nothing, if utf8 is 2 GiB or longer (ICU indexes are int32),
  // and Internal if ICU or libstemmer fails (out of memory, missing data);
  // tokens emitted before such a failure stay emitted.
  // Thread-safe: any number of threads may call it concurrently. Each thread
  // keeps its ICU break iterator, buffers and stem cache in thread-local
  // state created on its first call and reused after, so the steady state
  // allocates nothing per token.
  virtual Status Analyze(std::string_view utf8, TokenSink& sink) const = 0;

  // The same contract and output as Analyze, computed the slow, obvious way
  // with ICU alone: the word BreakIterator over the whole text, ICU's
  // nfkc_cf on every term (via UTF-16), ICU's Transliterator for folding and
  // uncached stemmers. Exists as the oracle for differential tests and as a
  // peer for the benchmark; never use it for indexing.
  virtual Status AnalyzeWithIcuOnly(std::string_view utf8,
                                    TokenSink& sink) const = 0;
};

// Returns the process-wide analyzer registered under `name` (see
// AnalyzerNames()); it lives until exit and is never freed. Returns
// InvalidArgument for an empty name and NotFound for an unknown one.
// Names are exact and lower-case. Thread-safe.
Result<const Analyzer*> FindAnalyzer(std::string_view name);

// Every analyzer name FindAnalyzer resolves, sorted: "standard", "english",
// "folding", "keyword" and one per Snowball algorithm libstemmer ships
// (its canonical names from sb_stemmer_list(), e.g. "german", "porter").
std::vector<std::string> AnalyzerNames();

// The normalization every analyzer but `keyword` gives its terms
// (NFKC_Casefold, then accent folding if `fold`, as `folding` does),
// applied to the whole text without segmenting it, stop words or stemming:
// what a prefix, fuzzy or range word of a query is compared in (Lucene's
// Analyzer.normalize). Invalid UTF-8 reads as U+FFFD. Thread-safe.
Result<std::string> NormalizeText(std::string_view utf8, bool fold);

}  // namespace corvid::analyzers
