// Internal to analyzers/: turns a word segment into its term: NFKC_Casefold
// (ICU's "nfkc_cf"), optionally diacritic folding, and the U+FFFD repair of
// invalid UTF-8 that `keyword` needs. Pure-ASCII segments skip ICU (under
// nfkc_cf they only lowercase). Not thread-safe: one per thread.
#pragma once

#include <unicode/normalizer2.h>
#include <unicode/translit.h>
#include <unicode/unistr.h>

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace corvid::analyzers::internal {

class TermNormalizer {
 public:
  TermNormalizer();
  TermNormalizer(const TermNormalizer&) = delete;
  TermNormalizer& operator=(const TermNormalizer&) = delete;

  const Status& init_status() const { return init_status_; }

  // nfkc_cf of an all-ASCII segment that has an upper-case letter: ASCII
  // lowercase, in this object's buffer (valid until the next call). (An
  // all-ASCII segment without one is its own nfkc_cf.)
  std::string_view AsciiLower(std::string_view segment) {
    buffer_.resize(segment.size());
    char* out = buffer_.data();
    for (size_t i = 0; i < segment.size(); ++i) {
      const char c = segment[i];
      out[i] = static_cast<char>(c + ((static_cast<uint8_t>(c - 'A') < 26) ? ('a' - 'A') : 0));
    }
    return buffer_;
  }

  // nfkc_cf of `segment` computed on UTF-8 directly, then, if `fold`,
  // diacritic folding: NFD, remove every General_Category=Mn (nonspacing
  // mark) code point, NFC. Ill-formed UTF-8 reads as U+FFFD. Sets *term to
  // a view of this object's buffer (valid until the next call); it may be
  // empty. Returns Internal if ICU fails.
  Status Normalize(std::string_view segment, bool fold, std::string_view* term);

  // The reference for Normalize, with ICU alone and the obvious way:
  // UTF-8 -> UnicodeString -> nfkc_cf -> (Transliterator "NFD;
  // [:Nonspacing Mark:] Remove; NFC") -> UTF-8. Allocates freely.
  Status NormalizeWithIcuOnly(std::string_view segment, bool fold, std::string* term);

  // `text` with each maximal ill-formed UTF-8 subsequence replaced by U+FFFD
  // (the Unicode "maximal subpart" practice, as ICU's converters do).
  // Returns `text` itself when it is well-formed, else a view of this
  // object's buffer valid until the next call.
  std::string_view RepairUtf8(std::string_view text);

  // Releases buffer capacity beyond `keep` bytes (after a huge token).
  void Trim(size_t keep);

 private:
  Status Fold();  // folds buffer_ in place

  Status init_status_;
  const icu::Normalizer2* nfkc_cf_ = nullptr;
  const icu::Normalizer2* nfd_ = nullptr;
  const icu::Normalizer2* nfc_ = nullptr;
  std::unique_ptr<icu::Transliterator> fold_transliterator_;  // reference only
  std::string buffer_;
  icu::UnicodeString utf16_a_;
  icu::UnicodeString utf16_b_;
};

}  // namespace corvid::analyzers::internal
