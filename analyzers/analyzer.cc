// The analyzers themselves and their registry: each analyzer is a recipe
// (segment, normalize, maybe fold, maybe drop stop words, maybe stem) run on
// per-thread state (break iterator, buffers, stemmers) that is created on a
// thread's first call and reused for every later one.
#include "analyzers/analyzer.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>

#include "analyzers/stemmer.h"
#include "analyzers/term_normalizer.h"
#include "analyzers/word_segmenter.h"

namespace corvid::analyzers {
namespace {

using internal::CachedStemmer;
using internal::SegmentMode;
using internal::TermNormalizer;
using internal::WordBreaker;

constexpr size_t kMaxInputBytes = std::numeric_limits<int32_t>::max();
constexpr size_t kKeepBufferBytes = 1 << 20;

enum class Kind { kStandard, kEnglish, kFolding, kKeyword, kSnowball };

// Everything one thread needs to analyze; never shared between threads.
struct ThreadState {
  WordBreaker breaker;
  TermNormalizer normalizer;
  std::string reference_term;  // AnalyzeWithIcuOnly only
  std::string reference_stem;
  // Indexed by position in StemmerAlgorithms(); created on first use.
  std::vector<std::unique_ptr<CachedStemmer>> stemmers;
  bool busy = false;  // inside an Analyze call on this thread

  Status InitStatus() const {
    if (!breaker.init_status().ok()) return breaker.init_status();
    return normalizer.init_status();
  }

  Result<CachedStemmer*> Stemmer(int algorithm) {
    if (stemmers.empty()) stemmers.resize(internal::StemmerAlgorithms().size());
    std::unique_ptr<CachedStemmer>& slot = stemmers[static_cast<size_t>(algorithm)];
    if (slot == nullptr) {
      const std::string& name = internal::StemmerAlgorithms()[static_cast<size_t>(algorithm)];
      auto created = CachedStemmer::Create(name, /*english_stop_words=*/name == "english");
      if (!created.ok()) return created.status();
      slot = std::move(created.value());
    }
    return slot.get();
  }
};

thread_local std::unique_ptr<ThreadState> tls_state;

// The calling thread's state for the duration of one Analyze call. A sink
// that re-enters Analyze gets a fresh, temporary state instead of
// clobbering the outer call's buffers.
class StateLease {
 public:
  StateLease() {
    if (tls_state == nullptr) tls_state = std::make_unique<ThreadState>();
    if (tls_state->busy) {
      temporary_ = std::make_unique<ThreadState>();
      state_ = temporary_.get();
    } else {
      state_ = tls_state.get();
    }
    state_->busy = true;
  }
  ~StateLease() {
    state_->busy = false;
    state_->normalizer.Trim(kKeepBufferBytes);
  }
  ThreadState& operator*() const { return *state_; }
  ThreadState* operator->() const { return state_; }

 private:
  std::unique_ptr<ThreadState> temporary_;
  ThreadState* state_;
};

class AnalyzerImpl final : public Analyzer {
 public:
  AnalyzerImpl(std::string name, Kind kind, int algorithm)
      : name_(std::move(name)), kind_(kind), algorithm_(algorithm) {}

  std::string_view name() const override { return name_; }
  // folding 2: letters with a stroke and ligatures fold to ASCII (ø → o).
  // folding 2: more letters fold (ø → o, ...); keyword 2: "" is a term.
  uint32_t revision() const override { return kind_ == Kind::kFolding || kind_ == Kind::kKeyword ? 2 : 1; }

  Status Analyze(std::string_view utf8, TokenSink& sink) const override {
    return Run(utf8, sink, /*icu_only=*/false);
  }
  Status AnalyzeWithIcuOnly(std::string_view utf8, TokenSink& sink) const override {
    return Run(utf8, sink, /*icu_only=*/true);
  }

 private:
  Status Run(std::string_view utf8, TokenSink& sink, bool icu_only) const;
  Status RunKeyword(std::string_view utf8, TokenSink& sink, bool icu_only) const;

  const std::string name_;
  const Kind kind_;
  const int algorithm_;  // index into StemmerAlgorithms(), or -1
};

// One token, the whole value, even an empty one (as Lucene's
// KeywordTokenizer: "" is a value a keyword field can hold, facet and match).
Status AnalyzerImpl::RunKeyword(std::string_view utf8, TokenSink& sink, bool icu_only) const {
  StateLease state;
  Token token;
  token.position = 0;
  token.start = 0;
  token.end = static_cast<uint32_t>(utf8.size());
  if (icu_only) {
    state->reference_term.clear();
    icu::UnicodeString::fromUTF8(icu::StringPiece(utf8.data(), static_cast<int32_t>(utf8.size())))
        .toUTF8String(state->reference_term);
    token.term = state->reference_term;
  } else {
    token.term = state->normalizer.RepairUtf8(utf8);
  }
  sink.OnToken(token);
  return Status::Ok();
}

Status AnalyzerImpl::Run(std::string_view utf8, TokenSink& sink, bool icu_only) const {
  if (utf8.size() > kMaxInputBytes) {
    return Status::InvalidArgument("analyzer input must be shorter than 2 GiB");
  }
  if (kind_ == Kind::kKeyword) return RunKeyword(utf8, sink, icu_only);
  StateLease state;
  Status init = state->InitStatus();
  if (!init.ok()) return init;
  CachedStemmer* stemmer = nullptr;
  if (algorithm_ >= 0) {
    auto s = state->Stemmer(algorithm_);
    if (!s.ok()) return s.status();
    stemmer = s.value();
  }
  const bool fold = kind_ == Kind::kFolding;
  TermNormalizer& normalizer = state->normalizer;
  ThreadState& ts = *state;
  Status error;
  uint32_t position = 0;
  Token token;

  auto emit_fast = [&](uint32_t start, uint32_t end, uint32_t flags) {
    if (!error.ok()) return;
    const std::string_view segment(utf8.data() + start, end - start);
    // `term` never has its address taken, so it lives in registers: the
    // callees write their results to `out` (two 8-byte stores), and a copy
    // of a view stored that way, read back as one 16-byte load, would stall
    // on store forwarding once per token (8% of the W2 index worker).
    std::string_view term, out;
    if (flags & internal::kSegmentAscii) {
      term = (flags & internal::kSegmentHasUpper) ? normalizer.AsciiLower(segment) : segment;
    } else {
      error = normalizer.Normalize(segment, fold, &out);
      term = out;
      if (!error.ok() || term.empty()) return;
    }
    if (stemmer != nullptr) {
      bool is_stop = false;
      error = stemmer->Stem(term, &is_stop, &out);
      term = out;
      if (!error.ok()) return;
      if (is_stop) {
        ++position;
        return;
      }
    }
    token.term = term;
    token.position = position++;
    token.start = start;
    token.end = end;
    sink.OnToken(token);
  };

  auto emit_reference = [&](uint32_t start, uint32_t end, uint32_t /*flags*/) {
    if (!error.ok()) return;
    error = normalizer.NormalizeWithIcuOnly(utf8.substr(start, end - start), fold,
                                            &ts.reference_term);
    if (!error.ok() || ts.reference_term.empty()) return;
    std::string_view term = ts.reference_term;
    if (stemmer != nullptr) {
      bool is_stop = false;
      error = stemmer->StemUncached(term, &is_stop, &ts.reference_stem);
      if (!error.ok()) return;
      if (is_stop) {
        ++position;
        return;
      }
      if (!ts.reference_stem.empty()) term = ts.reference_stem;
    }
    token.term = term;
    token.position = position++;
    token.start = start;
    token.end = end;
    sink.OnToken(token);
  };

  Status s = icu_only ? ts.breaker.Segment(utf8, SegmentMode::kIcuOnly, emit_reference)
                      : ts.breaker.Segment(utf8, SegmentMode::kFast, emit_fast);
  if (!s.ok()) return s;
  return error;
}

// Process-wide analyzers by name, built once on first use and never freed
// (threads may still analyze during static destruction at exit).
class Registry {
 public:
  Registry() {
    Add("standard", Kind::kStandard, -1);
    Add("folding", Kind::kFolding, -1);
    Add("keyword", Kind::kKeyword, -1);
    const auto& algorithms = internal::StemmerAlgorithms();
    for (size_t i = 0; i < algorithms.size(); ++i) {
      const bool english = algorithms[i] == "english";
      Add(algorithms[i], english ? Kind::kEnglish : Kind::kSnowball, static_cast<int>(i));
    }
  }
  const Analyzer* Find(std::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second.get();
  }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& [name, analyzer] : by_name_) names.push_back(name);
    return names;
  }

 private:
  void Add(const std::string& name, Kind kind, int algorithm) {
    if (by_name_.count(name) != 0) return;
    by_name_.emplace(name, std::make_unique<AnalyzerImpl>(name, kind, algorithm));
  }
  std::map<std::string, std::unique_ptr<AnalyzerImpl>, std::less<>> by_name_;
};

const Registry& GetRegistry() {
  static const Registry* registry = new Registry();  // intentionally leaked
  return *registry;
}

}  // namespace

Result<const Analyzer*> FindAnalyzer(std::string_view name) {
  if (name.empty()) return Status::InvalidArgument("analyzer name is empty");
  const Analyzer* analyzer = GetRegistry().Find(name);
  if (analyzer == nullptr) {
    return Status::NotFound("unknown analyzer: " + std::string(name));
  }
  return analyzer;
}

std::vector<std::string> AnalyzerNames() { return GetRegistry().Names(); }

Result<std::string> NormalizeText(std::string_view utf8, bool fold) {
  StateLease state;
  if (Status s = state->InitStatus(); !s.ok()) return s;
  std::string_view term;
  if (Status s = state->normalizer.Normalize(utf8, fold, &term); !s.ok()) return s;
  return std::string(term);
}

}  // namespace corvid::analyzers
