// TermNormalizer: nfkc_cf on UTF-8 through ICU's Normalizer2::normalizeUTF8
// into a reused buffer (no allocation per term once warm), the folding
// transform, and the ICU-only reference versions the tests compare with.
#include "analyzers/term_normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include "common/utf8.h"

namespace corvid::analyzers::internal {
namespace {

// Appends to a std::string, so a buffer cleared and reused keeps capacity.
class StringAppendSink : public icu::ByteSink {
 public:
  explicit StringAppendSink(std::string* out) : out_(out) {}
  void Append(const char* bytes, int32_t n) override { out_->append(bytes, n); }

 private:
  std::string* out_;
};

// The ASCII a folded letter becomes when it has no combining mark to
// remove: letters with a stroke or bar, ligatures, thorn, eth and dotless
// i (lowercase: nfkc_cf ran first), as Lucene's ASCIIFoldingFilter maps
// them. nullptr for any other code point.
const char* FoldedLetter(UChar32 c) {
  switch (c) {
    case 0x00E6: return "ae";  // æ
    case 0x00F0: return "d";   // ð
    case 0x00F8: return "o";   // ø
    case 0x00FE: return "th";  // þ
    case 0x0111: return "d";   // đ
    case 0x0127: return "h";   // ħ
    case 0x0131: return "i";   // ı
    case 0x0142: return "l";   // ł
    case 0x0153: return "oe";  // œ
    case 0x0167: return "t";   // ŧ
    case 0x0180: return "b";   // ƀ
    case 0x01E5: return "g";   // ǥ
    case 0x0268: return "i";   // ɨ
    default: return nullptr;
  }
}

// Appends c to out, or the letters it folds to.
void AppendFolded(icu::UnicodeString& out, UChar32 c) {
  if (const char* ascii = FoldedLetter(c)) {
    for (; *ascii != 0; ++ascii) out.append(static_cast<UChar>(*ascii));
  } else {
    out.append(c);
  }
}

}  // namespace

TermNormalizer::TermNormalizer() {
  UErrorCode status = U_ZERO_ERROR;
  nfkc_cf_ = icu::Normalizer2::getNFKCCasefoldInstance(status);
  if (U_SUCCESS(status)) nfd_ = icu::Normalizer2::getNFDInstance(status);
  if (U_SUCCESS(status)) nfc_ = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) {
    init_status_ = Status::Internal(std::string("ICU Normalizer2: ") + u_errorName(status));
  }
  buffer_.reserve(256);
}

Status TermNormalizer::Normalize(std::string_view segment, bool fold,
                                 std::string_view* term) {
  UErrorCode status = U_ZERO_ERROR;
  buffer_.clear();
  if (IsValidUtf8(segment)) {
    StringAppendSink sink(&buffer_);
    nfkc_cf_->normalizeUTF8(0, icu::StringPiece(segment.data(), static_cast<int32_t>(segment.size())),
                            sink, nullptr, status);
  } else {
    // ICU's UTF-8 normalizer copies ill-formed bytes through; go via UTF-16,
    // where fromUTF8 substitutes U+FFFD, so the rule "reads as U+FFFD" holds.
    utf16_a_ = icu::UnicodeString::fromUTF8(
        icu::StringPiece(segment.data(), static_cast<int32_t>(segment.size())));
    nfkc_cf_->normalize(utf16_a_, utf16_b_, status);
    if (U_SUCCESS(status)) {
      StringAppendSink sink(&buffer_);
      utf16_b_.toUTF8(sink);
    }
  }
  if (U_FAILURE(status)) {
    return Status::Internal(std::string("ICU nfkc_cf: ") + u_errorName(status));
  }
  if (fold && !buffer_.empty()) {
    Status s = Fold();
    if (!s.ok()) return s;
  }
  *term = buffer_;
  return Status::Ok();
}

Status TermNormalizer::Fold() {
  // Only non-ASCII text can change: ASCII has no marks or decompositions.
  bool ascii = true;
  for (char c : buffer_) ascii &= static_cast<uint8_t>(c) < 0x80;
  if (ascii) return Status::Ok();
  UErrorCode status = U_ZERO_ERROR;
  utf16_a_.remove();
  {
    // Decode into utf16_a_'s own storage to keep its capacity.
    const int32_t cap = static_cast<int32_t>(buffer_.size()) + 1;
    UChar* dst = utf16_a_.getBuffer(cap);
    int32_t len = 0;
    u_strFromUTF8WithSub(dst, cap, &len, buffer_.data(), static_cast<int32_t>(buffer_.size()),
                         0xFFFD, nullptr, &status);
    utf16_a_.releaseBuffer(U_SUCCESS(status) ? len : 0);
  }
  if (U_SUCCESS(status)) nfd_->normalize(utf16_a_, utf16_b_, status);
  if (U_FAILURE(status)) {
    return Status::Internal(std::string("ICU NFD: ") + u_errorName(status));
  }
  utf16_a_.remove();
  for (int32_t i = 0; i < utf16_b_.length();) {
    const UChar32 c = utf16_b_.char32At(i);
    if (u_charType(c) != U_NON_SPACING_MARK) AppendFolded(utf16_a_, c);
    i += U16_LENGTH(c);
  }
  nfc_->normalize(utf16_a_, utf16_b_, status);
  if (U_FAILURE(status)) {
    return Status::Internal(std::string("ICU NFC: ") + u_errorName(status));
  }
  buffer_.clear();
  StringAppendSink sink(&buffer_);
  utf16_b_.toUTF8(sink);
  return Status::Ok();
}

Status TermNormalizer::NormalizeWithIcuOnly(std::string_view segment, bool fold,
                                            std::string* term) {
  UErrorCode status = U_ZERO_ERROR;
  icu::UnicodeString text = icu::UnicodeString::fromUTF8(
      icu::StringPiece(segment.data(), static_cast<int32_t>(segment.size())));
  icu::UnicodeString normalized = nfkc_cf_->normalize(text, status);
  if (U_FAILURE(status)) {
    return Status::Internal(std::string("ICU nfkc_cf: ") + u_errorName(status));
  }
  if (fold) {
    if (fold_transliterator_ == nullptr) {
      fold_transliterator_.reset(icu::Transliterator::createInstance(
          "NFD; [:Nonspacing Mark:] Remove; NFC", UTRANS_FORWARD, status));
      if (U_FAILURE(status) || fold_transliterator_ == nullptr) {
        fold_transliterator_.reset();
        return Status::Internal(std::string("ICU Transliterator: ") + u_errorName(status));
      }
    }
    fold_transliterator_->transliterate(normalized);
    icu::UnicodeString letters;
    for (int32_t i = 0; i < normalized.length();) {
      const UChar32 c = normalized.char32At(i);
      AppendFolded(letters, c);
      i += U16_LENGTH(c);
    }
    normalized = letters;
  }
  term->clear();
  normalized.toUTF8String(*term);
  return Status::Ok();
}

std::string_view TermNormalizer::RepairUtf8(std::string_view text) {
  if (IsValidUtf8(text)) return text;
  buffer_.clear();
  AppendReplacingInvalidUtf8(text, buffer_);
  return buffer_;
}

void TermNormalizer::Trim(size_t keep) {
  if (buffer_.capacity() > keep) {
    std::string().swap(buffer_);
    buffer_.reserve(256);
  }
}

}  // namespace corvid::analyzers::internal
