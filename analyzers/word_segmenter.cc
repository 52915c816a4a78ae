// The non-template half of WordBreaker: creating the per-thread ICU word
// BreakIterator and pointing it at a document's UTF-8 through a UText (no
// conversion of the whole text to UTF-16).
#include "analyzers/word_segmenter.h"

#include <unicode/locid.h>

#include <string>

namespace corvid::analyzers::internal {

WordBreaker::WordBreaker() {
  UErrorCode status = U_ZERO_ERROR;
  break_iterator_.reset(
      icu::BreakIterator::createWordInstance(icu::Locale::getRoot(), status));
  if (U_FAILURE(status) || break_iterator_ == nullptr) {
    break_iterator_.reset();
    init_status_ = Status::Internal(std::string("ICU word BreakIterator: ") +
                                    u_errorName(status));
  }
}

WordBreaker::~WordBreaker() { utext_close(&text_); }

Status WordBreaker::OpenText(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  // Reuses text_'s storage: opening a UText over UTF-8 allocates nothing,
  // and setText clones it shallowly into the iterator's own UText.
  utext_openUTF8(&text_, text.data(), static_cast<int64_t>(text.size()), &status);
  if (U_SUCCESS(status)) break_iterator_->setText(&text_, status);
  if (U_FAILURE(status)) {
    return Status::Internal(std::string("ICU setText: ") + u_errorName(status));
  }
  return Status::Ok();
}

Status WordBreaker::IcuBoundaries(std::string_view text,
                                  std::vector<uint32_t>* boundaries,
                                  std::vector<int32_t>* statuses) {
  boundaries->clear();
  statuses->clear();
  Status s = OpenText(text);
  if (!s.ok()) return s;
  boundaries->push_back(static_cast<uint32_t>(break_iterator_->first()));
  statuses->push_back(0);
  for (int32_t b = break_iterator_->next(); b != icu::BreakIterator::DONE;
       b = break_iterator_->next()) {
    boundaries->push_back(static_cast<uint32_t>(b));
    statuses->push_back(break_iterator_->getRuleStatus());
  }
  return Status::Ok();
}

}  // namespace corvid::analyzers::internal
