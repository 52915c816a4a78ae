// Internal to analyzers/: Lucene's English stop words and libstemmer's
// Snowball stemmers behind a per-thread, fixed-size stem cache, so frequent
// words cost one hash probe instead of a Snowball run. libstemmer objects
// are not thread-safe; each thread owns its own (see analyzer.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

struct sb_stemmer;

namespace corvid::analyzers::internal {

// libstemmer's canonical algorithm names (sb_stemmer_list()), in its order.
const std::vector<std::string>& StemmerAlgorithms();

// Whether `term` (already nfkc_cf-normalized) is one of Lucene's 33 default
// English stop words.
bool IsEnglishStopWord(std::string_view term);

struct SbStemmerDeleter {
  void operator()(sb_stemmer* s) const;
};

// One thread's stemmer for one algorithm, optionally dropping English stop
// words first. The cache is direct-mapped (a collision evicts), bounded at
// kSlots entries of short terms, allocated once.
class CachedStemmer {
 public:
  // Returns Internal if libstemmer has no such algorithm or no memory.
  static Result<std::unique_ptr<CachedStemmer>> Create(const std::string& algorithm,
                                                       bool english_stop_words);

  // Sets *is_stop when `term` is a stop word (then *stem is untouched), else
  // *stem to its stem: a view into the cache or the stemmer, valid until the
  // next call. An empty stem is replaced by the term itself. Returns
  // Internal if libstemmer runs out of memory.
  Status Stem(std::string_view term, bool* is_stop, std::string_view* stem);

  // The uncached reference: stop-word test then libstemmer, every time.
  Status StemUncached(std::string_view term, bool* is_stop, std::string* stem);

 private:
  static constexpr uint32_t kSlots = 8192;
  static constexpr uint32_t kMaxTermBytes = 29;
  static constexpr uint32_t kMaxStemBytes = 32;
  // One cache line each: a lookup misses the cache at most once.
  struct alignas(64) Slot {
    uint8_t term_len = 0;  // 0 = empty slot
    uint8_t stem_len = 0;
    uint8_t is_stop = 0;
    char term[kMaxTermBytes];
    char stem[kMaxStemBytes];
  };
  static_assert(sizeof(Slot) == 64);

  CachedStemmer(std::unique_ptr<sb_stemmer, SbStemmerDeleter> stemmer, bool english_stop_words);
  Status RunStemmer(std::string_view term, std::string_view* stem);

  std::unique_ptr<sb_stemmer, SbStemmerDeleter> stemmer_;
  bool english_stop_words_;
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace corvid::analyzers::internal
