// Stop words and cached Snowball stemming. The stop list is Lucene's
// EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (33 words), written out here.
#include "analyzers/stemmer.h"

#include "common/hash.h"

#include <libstemmer.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace corvid::analyzers::internal {
namespace {

constexpr std::array<std::string_view, 33> kEnglishStopWords = {
    "a",    "an",   "and",  "are",   "as",    "at",   "be",    "but",  "by",
    "for",  "if",   "in",   "into",  "is",    "it",   "no",    "not",  "of",
    "on",   "or",   "such", "that",  "the",   "their", "then", "there", "these",
    "they", "this", "to",   "was",   "will",  "with"};


}  // namespace

const std::vector<std::string>& StemmerAlgorithms() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const char** p = sb_stemmer_list(); *p != nullptr; ++p) v.emplace_back(*p);
    return v;
  }();
  return names;
}

bool IsEnglishStopWord(std::string_view term) {
  if (term.size() > 5) return false;
  return std::find(kEnglishStopWords.begin(), kEnglishStopWords.end(), term) !=
         kEnglishStopWords.end();
}

void SbStemmerDeleter::operator()(sb_stemmer* s) const { sb_stemmer_delete(s); }

Result<std::unique_ptr<CachedStemmer>> CachedStemmer::Create(const std::string& algorithm,
                                                             bool english_stop_words) {
  std::unique_ptr<sb_stemmer, SbStemmerDeleter> s(sb_stemmer_new(algorithm.c_str(), "UTF_8"));
  if (s == nullptr) return Status::Internal("libstemmer: cannot create " + algorithm);
  return std::unique_ptr<CachedStemmer>(new CachedStemmer(std::move(s), english_stop_words));
}

CachedStemmer::CachedStemmer(std::unique_ptr<sb_stemmer, SbStemmerDeleter> stemmer,
                             bool english_stop_words)
    : stemmer_(std::move(stemmer)),
      english_stop_words_(english_stop_words),
      slots_(std::make_unique<Slot[]>(kSlots)) {}

Status CachedStemmer::RunStemmer(std::string_view term, std::string_view* stem) {
  const sb_symbol* out = sb_stemmer_stem(
      stemmer_.get(), reinterpret_cast<const sb_symbol*>(term.data()), static_cast<int>(term.size()));
  if (out == nullptr) return Status::Internal("libstemmer: out of memory");
  const int len = sb_stemmer_length(stemmer_.get());
  *stem = len > 0 ? std::string_view(reinterpret_cast<const char*>(out), static_cast<size_t>(len))
                  : term;
  return Status::Ok();
}

Status CachedStemmer::Stem(std::string_view term, bool* is_stop, std::string_view* stem) {
  *is_stop = false;
  if (term.empty() || term.size() > kMaxTermBytes) {
    if (english_stop_words_ && IsEnglishStopWord(term)) {
      *is_stop = true;
      return Status::Ok();
    }
    return RunStemmer(term, stem);
  }
  Slot& slot = slots_[HashShortBytes(term) & (kSlots - 1)];
  if (slot.term_len == term.size() && std::memcmp(slot.term, term.data(), term.size()) == 0) {
    *is_stop = slot.is_stop != 0;
    *stem = std::string_view(slot.stem, slot.stem_len);
    return Status::Ok();
  }
  const bool stop = english_stop_words_ && IsEnglishStopWord(term);
  std::string_view result;
  if (!stop) {
    Status s = RunStemmer(term, &result);
    if (!s.ok()) return s;
  }
  if (result.size() <= kMaxStemBytes) {
    slot.term_len = static_cast<uint8_t>(term.size());
    std::memcpy(slot.term, term.data(), term.size());
    slot.is_stop = stop ? 1 : 0;
    slot.stem_len = static_cast<uint8_t>(result.size());
    if (!result.empty()) std::memcpy(slot.stem, result.data(), result.size());
    result = std::string_view(slot.stem, slot.stem_len);
  } else {
    slot.term_len = 0;
  }
  *is_stop = stop;
  *stem = result;
  return Status::Ok();
}

Status CachedStemmer::StemUncached(std::string_view term, bool* is_stop, std::string* stem) {
  *is_stop = english_stop_words_ && IsEnglishStopWord(term);
  if (*is_stop) return Status::Ok();
  std::string_view out;
  Status s = RunStemmer(term, &out);
  if (!s.ok()) return s;
  stem->assign(out.data(), out.size());
  return Status::Ok();
}

}  // namespace corvid::analyzers::internal
