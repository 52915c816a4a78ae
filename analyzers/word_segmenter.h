// Internal to analyzers/: finds the word segments `standard` keeps (ICU word
// BreakIterator segments with rule status >= UBRK_WORD_NONE_LIMIT), either
// with ICU alone or with the ASCII fast path that reproduces ICU's segments
// without calling it. The fast path's correctness argument is written next
// to Segment() below; tests/analyzers checks it differentially against ICU.
// Not thread-safe: one WordBreaker per thread (see analyzer.cc).
#pragma once

#include <unicode/brkiter.h>
#include <unicode/ubrk.h>
#include <unicode/utext.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace corvid::analyzers::internal {

enum class SegmentMode {
  kFast,     // ASCII chunks by the rules below, everything else by ICU
  kIcuOnly,  // ICU's BreakIterator over the whole text
};

// Byte classes for the fast path. Within an all-ASCII chunk these are the
// UAX #29 Word_Break values of ICU's root rules: letters are ALetter, and so
// is '@' (a CLDR root tailoring, so e-mail addresses stay one word), digits
// Numeric, '_' ExtendNumLet, '.' and '\'' MidNumLet (Single_Quote behaves as
// MidNumLet outside Hebrew), ',' and ';' MidNum. ICU's root rules drop ':'
// from MidLetter, and '"' only matters beside Hebrew letters, so inside an
// ASCII chunk both simply break on either side (kOtherWord). Every other
// ASCII byte is a separator (kSep): WSegSpace, CR/LF/Newline or Other.
enum ByteClass : uint8_t {
  kLetter = 0,       // a-z and '@'
  kUpperLetter = 1,  // A-Z: a letter whose nfkc_cf differs (lower case)
  kDigit = 2,
  kUnderscore = 3,   // classes up to here join each other
  kMidNumLet = 4,
  kMidNum = 5,
  kOtherWord = 6,
  kSep = 7,       // never joins anything, so one pass can cross separators
  kNonAscii = 8,  // a bit, so OR-ing the classes of a chunk detects it
};

// Flags passed with each segment.
enum SegmentFlags : uint32_t {
  kSegmentAscii = 1,     // every byte is ASCII
  kSegmentHasUpper = 2,  // has an A-Z byte (only set with kSegmentAscii)
};

struct ByteClassTable {
  uint8_t cls[256];
  constexpr ByteClassTable() : cls() {
    for (int c = 0; c < 256; ++c) {
      uint8_t v = kSep;
      if (c >= 0x80) v = kNonAscii;
      else if ((c >= 'a' && c <= 'z') || c == '@') v = kLetter;
      else if (c >= 'A' && c <= 'Z') v = kUpperLetter;
      else if (c >= '0' && c <= '9') v = kDigit;
      else if (c == '_') v = kUnderscore;
      else if (c == '.' || c == '\'') v = kMidNumLet;
      else if (c == ',' || c == ';') v = kMidNum;
      else if (c == ':' || c == '"') v = kOtherWord;
      cls[c] = v;
    }
  }
};
inline constexpr ByteClassTable kByteClass{};

// The first index >= i whose byte is not ASCII, or n.
inline uint32_t FindNonAscii(const uint8_t* p, uint32_t i, uint32_t n) {
  while (i + 8 <= n) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w & 0x8080808080808080ull) break;
    i += 8;
  }
  while (i < n && p[i] < 0x80) ++i;
  return i;
}

// SegmentFlags of an arbitrary segment.
inline uint32_t FlagsOf(const uint8_t* p, uint32_t n) {
  uint8_t any = 0;
  bool upper = false;
  for (uint32_t i = 0; i < n; ++i) {
    any |= p[i];
    upper |= static_cast<uint8_t>(p[i] - 'A') < 26;
  }
  if (any >= 0x80) return 0;
  return kSegmentAscii | (upper ? kSegmentHasUpper : 0u);
}

// Owns one thread's ICU word BreakIterator (root locale) and the UText over
// the document being segmented. Created once per thread and reused for
// every document: setting a new text allocates nothing in steady state.
class WordBreaker {
 public:
  WordBreaker();
  ~WordBreaker();
  WordBreaker(const WordBreaker&) = delete;
  WordBreaker& operator=(const WordBreaker&) = delete;

  // Whether construction succeeded (ICU data present, memory available).
  const Status& init_status() const { return init_status_; }

  // Calls fn(start, end, flags) for every kept segment of `text` in order:
  // byte offsets of the segment and its SegmentFlags. Both modes yield the
  // same segments and flags. Requires text.size() <= INT32_MAX.
  // Returns Internal if ICU fails; segments already passed to fn stay.
  template <typename Fn>
  Status Segment(std::string_view text, SegmentMode mode, Fn&& fn);

  // How Segment() split its work since construction (tests and bench).
  struct Stats {
    uint64_t ascii_bytes = 0;  // bytes segmented by the fast path
    uint64_t icu_chunks = 0;   // chunks sent to ICU
  };
  const Stats& stats() const { return stats_; }

  // Every boundary ICU's iterator reports for `text` (0 and size included),
  // with the rule status of the segment ending there (0 for the first).
  // For tests.
  Status IcuBoundaries(std::string_view text, std::vector<uint32_t>* boundaries,
                       std::vector<int32_t>* statuses);

 private:
  Status OpenText(std::string_view text);

  template <typename Fn>
  void AsciiChunk(const uint8_t* p, uint32_t s, uint32_t e, Fn& fn);

  template <typename Fn>
  uint32_t IcuChunk(const uint8_t* p, uint32_t n, uint32_t s, uint32_t e, Fn& fn);

  Status init_status_;
  Stats stats_;
  std::unique_ptr<icu::BreakIterator> break_iterator_;
  UText text_ = UTEXT_INITIALIZER;
};

// Why the fast path gives exactly ICU's segments (UAX #29 as ICU's root
// word rules implement it; WordBreakTest.txt and the differential tests
// check the claims):
// 1. A chunk is a maximal run of non-separator bytes; a run of all-ASCII
//    chunks is one pass of AsciiChunk, since separators join nothing. A separator is
//    WSegSpace (space), CR/LF/Newline or Other; UAX #29 breaks before each
//    of those unless the previous character is WSegSpace (WB3d, WB3a/b)
//    and after each unless the next is Extend/Format/ZWJ (WB4) or another
//    WSegSpace. So an all-ASCII chunk that follows a separator (or the
//    start of text) starts on a boundary and ends on one.
// 2. Inside such a chunk the only rules that can join characters are
//    WB5-WB13b, and those look at most one character past a Mid* character;
//    a Mid* character next to the chunk's edge has a separator beyond it, so
//    no boundary inside depends on anything outside the chunk.
// 3. Within {letter, digit, '_'} every adjacent pair joins (WB5, WB8-10,
//    WB13a/b); letter Mid letter joins for MidNumLet (WB6/7); digit Mid
//    digit joins for MidNum and MidNumLet (WB11/12); everything else breaks.
// 4. ICU tags a segment holding a letter or digit with status >= 100; a
//    segment of '_' alone is status 0 when it is one '_' and 200 when longer;
//    a lone Mid*/other character is status 0.
// Anything else (a chunk with a non-ASCII byte, or one that does not start
// after a separator because ICU's previous segment ended inside it) is
// segmented by ICU over the whole document's UText, starting from the first
// boundary at or after the chunk's start, so ICU sees the real context.
// Segments that begin at a separator are never kept (status 0), so starting
// from the first boundary >= the chunk start loses no kept segment.
template <typename Fn>
Status WordBreaker::Segment(std::string_view text, SegmentMode mode, Fn&& fn) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const auto n = static_cast<uint32_t>(text.size());
  bool opened = false;
  if (mode == SegmentMode::kIcuOnly) {
    if (n == 0) return Status::Ok();
    Status s = OpenText(text);
    if (!s.ok()) return s;
    int32_t b = break_iterator_->first();
    for (int32_t nb = break_iterator_->next(); nb != icu::BreakIterator::DONE;
         b = nb, nb = break_iterator_->next()) {
      if (break_iterator_->getRuleStatus() >= UBRK_WORD_NONE_LIMIT) {
        fn(static_cast<uint32_t>(b), static_cast<uint32_t>(nb),
           FlagsOf(p + b, static_cast<uint32_t>(nb - b)));
      }
    }
    return Status::Ok();
  }

  uint32_t pos = 0;
  while (pos < n) {
    if (pos == 0 || kByteClass.cls[p[pos - 1]] == kSep) {
      // A clean start: every chunk before the one holding the next
      // non-ASCII byte is all-ASCII and follows a separator, and separators
      // never join, so the whole span is one fast-path pass.
      const uint32_t q = FindNonAscii(p, pos, n);
      uint32_t chunk = q;
      while (chunk > pos && kByteClass.cls[p[chunk - 1]] != kSep) --chunk;
      if (chunk > pos) {
        stats_.ascii_bytes += chunk - pos;
        AsciiChunk(p, pos, chunk, fn);
        pos = chunk;
      }
      if (pos == n) break;
    }
    // The chunk at pos holds a non-ASCII byte, or starts where ICU's last
    // segment ended inside it: ICU segments it in context.
    uint32_t e = pos;
    while (e < n && kByteClass.cls[p[e]] != kSep) ++e;
    if (!opened) {
      Status s = OpenText(text);
      if (!s.ok()) return s;
      opened = true;
    }
    ++stats_.icu_chunks;
    pos = IcuChunk(p, n, pos, e, fn);
    while (pos < n && kByteClass.cls[p[pos]] == kSep) ++pos;
  }
  return Status::Ok();
}

template <typename Fn>
void WordBreaker::AsciiChunk(const uint8_t* p, uint32_t s, uint32_t e, Fn& fn) {
  uint32_t i = s;
  while (i < e) {
    uint8_t prev = kByteClass.cls[p[i]];
    if (prev > kUnderscore) {  // a lone Mid*/other character: status 0
      ++i;
      continue;
    }
    const uint32_t start = i;
    bool alnum = prev != kUnderscore;
    bool upper = prev == kUpperLetter;
    ++i;
    while (i < e) {
      const uint8_t c = kByteClass.cls[p[i]];
      if (c <= kUnderscore) {  // WB5, WB8-WB10, WB13a/b
        alnum |= c != kUnderscore;
        upper |= c == kUpperLetter;
        prev = c;
        ++i;
        continue;
      }
      if (i + 1 < e) {
        const uint8_t next = kByteClass.cls[p[i + 1]];
        if (prev <= kUpperLetter && c == kMidNumLet && next <= kUpperLetter) {  // WB6/7
          upper |= next == kUpperLetter;
          prev = next;
          i += 2;
          continue;
        }
        if (prev == kDigit && (c == kMidNumLet || c == kMidNum) &&
            next == kDigit) {  // WB11/12
          i += 2;
          continue;
        }
      }
      break;
    }
    if (alnum || i - start >= 2) {
      fn(start, i, kSegmentAscii | (upper ? kSegmentHasUpper : 0u));
    }
  }
}

template <typename Fn>
uint32_t WordBreaker::IcuChunk(const uint8_t* p, uint32_t n, uint32_t s,
                               uint32_t e, Fn& fn) {
  icu::BreakIterator& bi = *break_iterator_;
  int32_t b = bi.current();
  if (b != static_cast<int32_t>(s)) b = bi.following(static_cast<int32_t>(s) - 1);
  while (b != icu::BreakIterator::DONE && b < static_cast<int32_t>(e)) {
    const int32_t nb = bi.next();
    if (nb == icu::BreakIterator::DONE) return n;
    if (bi.getRuleStatus() >= UBRK_WORD_NONE_LIMIT) {
      fn(static_cast<uint32_t>(b), static_cast<uint32_t>(nb),
         FlagsOf(p + b, static_cast<uint32_t>(nb - b)));
    }
    b = nb;
  }
  return b == icu::BreakIterator::DONE ? n : static_cast<uint32_t>(b);
}

}  // namespace corvid::analyzers::internal
