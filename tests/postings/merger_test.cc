// Oracle tests for the streaming segment merger (segment_merger.h). Random
// segments with random deletes are merged twice: by MergeSegments and by
// the in-memory merge it replaced (SearchIndexImpl::Merge before the
// streaming merger, ported here onto SegmentBuilder). The two results are
// compared through the reader API, and each against a brute force built
// from the generated documents, so a bug both merges share is caught too.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "postings/file_util.h"
#include "postings/pairs.h"
#include "postings/posting_cursor.h"
#include "postings/segment.h"
#include "postings/segment_merger.h"
#include "tests/postings/test_util.h"

namespace corvid::postings {
namespace {

using testing::TempDir;

constexpr uint64_t kFingerprint = 0x5EEDF00DCAFEull;

// ---------------------------------------------------------------------------
// Random corpora.

class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  uint64_t Next() { return g_(); }
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : g_() % n; }
  double Unit() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }
  bool Chance(double p) { return Unit() < p; }

 private:
  std::mt19937_64 g_;
};

struct Token {
  uint32_t term;  // index into Corpus::vocab
  uint32_t position;
};

struct GenDoc {
  std::string id;
  std::string stored;                        // what the segment keeps ("" if it keeps none)
  std::vector<std::vector<Token>> tokens;    // per text field, positions increasing
  std::vector<uint32_t> lengths;             // per text field
  std::vector<std::vector<Number>> numbers;  // per numeric field
};

struct GenSegment {
  std::vector<GenDoc> docs;
  Bitmap deleted;
  bool by_term = false;  // each document's tokens fed grouped by term, not in text order
  std::shared_ptr<const Segment> segment;
};

struct Corpus {
  uint64_t seed = 0;
  uint32_t text_fields = 0, numeric_fields = 0;
  std::vector<std::string> vocab;
  std::vector<GenSegment> segments;
};

struct Shape {
  uint32_t min_segments, max_segments;
  uint32_t min_docs, max_docs;
  uint32_t max_tokens;           // per document and field
  double heavy = 0.01;           // chance a document repeats a term >= 256 times in a field
  bool all_deleted = false;      // every input's documents are deleted
  bool no_full_deletes = false;  // no input loses all its documents
  uint32_t words = 0;            // shared vocabulary size (0: 150 to 400)
  double skew = 1.05;            // Zipf exponent of the shared vocabulary (0: uniform)
};

std::string RandomWord(Rng& rng, uint32_t max_len) {
  std::string w;
  const uint32_t len = 1 + static_cast<uint32_t>(rng.Below(max_len));
  for (uint32_t i = 0; i < len; ++i) w.push_back(static_cast<char>('a' + rng.Below(8)));
  return w;
}

Number RandomNumber(Rng& rng) {
  switch (rng.Below(6)) {
    case 0:
      return Number{static_cast<double>(static_cast<int64_t>(rng.Below(21)) - 10)};
    case 1:
      return Number{static_cast<double>(rng.Below(1000000)) / 64.0 - 5000.0};
    case 2:
      return Number::Of(static_cast<int64_t>((uint64_t{1} << 60) + rng.Below(8193)) - 4096);
    case 3:
      return Number::Of(-static_cast<int64_t>((uint64_t{1} << 60) + rng.Below(8193)));
    case 4:
      return Number::Of(~uint64_t{0} - rng.Below(5000));
    default:
      return Number{1e300 * (rng.Chance(0.5) ? 1 : -1)};
  }
}

// Builds and writes the corpus's segments (in dir/in<k>.cvs) and opens them.
Corpus MakeCorpus(uint64_t seed, const Shape& shape, const std::string& dir) {
  Rng rng(seed);
  Corpus c;
  c.seed = seed;
  c.text_fields = 2 + static_cast<uint32_t>(rng.Below(2));
  c.numeric_fields = 1 + static_cast<uint32_t>(rng.Below(2));
  // Vocabulary: short words over a small alphabet (shared prefixes), long
  // ones sharing more than 8 bytes (TermKey) and longer than the builder's
  // pending-token window, bytes >= 0x80 (bytewise order).
  std::set<std::string> seen;
  const uint32_t base_words = shape.words != 0 ? shape.words : 150 + static_cast<uint32_t>(rng.Below(250));
  while (c.vocab.size() < base_words) {
    std::string w = RandomWord(rng, base_words > 1000 ? 12 : 9);
    if (seen.insert(w).second) c.vocab.push_back(w);
  }
  for (std::string w :
       {std::string(44, 'x') + "1", std::string(44, 'x') + "2", std::string("abcdefghij"), std::string("abcdefghik"),
        std::string("\xc3\xa9t\xc3\xa9"), std::string("\xff"), std::string("a\x80"), std::string("zz")})
    if (seen.insert(w).second) c.vocab.push_back(w);
  std::shuffle(c.vocab.begin(), c.vocab.end(), std::mt19937_64(seed));
  const size_t shared_words = c.vocab.size();
  // Rare words, in any segment: short lists however large the segments.
  std::vector<uint32_t> rare;
  for (uint32_t i = 0; i < 40; ++i) {
    rare.push_back(static_cast<uint32_t>(c.vocab.size()));
    c.vocab.push_back("rare" + std::to_string(i));
  }
  // Zipf-ish weights over the shared words: a few common ones, a long tail.
  std::vector<double> cdf(shared_words);
  double total = 0;
  for (size_t r = 0; r < shared_words; ++r) cdf[r] = total += 1.0 / std::pow(static_cast<double>(r) + 1.5, shape.skew);
  auto zipf = [&] {
    const double u = rng.Unit() * total;
    return static_cast<uint32_t>(
        std::min<size_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin(), shared_words - 1));
  };

  const uint32_t nseg =
      shape.min_segments + static_cast<uint32_t>(rng.Below(shape.max_segments - shape.min_segments + 1));
  enum class DeleteMode { kNone, kFew, kThird, kAll };
  std::vector<DeleteMode> modes(nseg);
  for (auto& m : modes) {
    const uint64_t r = rng.Below(100);
    m = shape.all_deleted ? DeleteMode::kAll
        : r < 35          ? DeleteMode::kNone
        : r < 60          ? DeleteMode::kFew
        : r < 88          ? DeleteMode::kThird
                          : DeleteMode::kAll;
    if (shape.no_full_deletes && m == DeleteMode::kAll) m = DeleteMode::kThird;
  }
  // (segment, doc) of documents whose id a later document took (an update):
  // they are deleted.
  std::vector<std::set<uint32_t>> forced(nseg);
  std::set<std::string> ids;
  uint64_t next_id = 0;
  for (uint32_t k = 0; k < nseg; ++k) {
    GenSegment& s = c.segments.emplace_back();
    s.by_term = rng.Chance(0.3);
    const bool stores = rng.Chance(0.5);
    const bool empty_last_field = rng.Chance(0.15);
    // Terms only this segment has.
    std::vector<uint32_t> own;
    for (uint32_t i = 0; i < 4; ++i) {
      own.push_back(static_cast<uint32_t>(c.vocab.size()));
      c.vocab.push_back("s" + std::to_string(k) + "_" + std::to_string(i));
    }
    const uint32_t ndocs = shape.min_docs + static_cast<uint32_t>(rng.Below(shape.max_docs - shape.min_docs + 1));
    for (uint32_t d = 0; d < ndocs; ++d) {
      GenDoc doc;
      // Ids in an order unlike doc order; a few take an earlier deleted
      // document's id.
      bool reused = false;
      if (k > 0 && rng.Chance(0.03)) {
        const uint32_t j = static_cast<uint32_t>(rng.Below(k));
        if (modes[j] != DeleteMode::kNone && !c.segments[j].docs.empty()) {
          const uint32_t od = static_cast<uint32_t>(rng.Below(c.segments[j].docs.size()));
          if (forced[j].insert(od).second) {
            doc.id = c.segments[j].docs[od].id;
            reused = true;
          }
        }
      }
      if (!reused) {
        do {
          doc.id = std::to_string(rng.Below(1000000000)) + "-" + std::to_string(next_id++);
          if (rng.Chance(0.05)) doc.id += "\xc3\xa9";
        } while (!ids.insert(doc.id).second);
      }
      if (stores && !rng.Chance(0.1)) doc.stored = "{\"n\":" + std::to_string(d) + ",\"s\":" + std::to_string(k) + "}";
      doc.tokens.resize(c.text_fields);
      doc.lengths.resize(c.text_fields);
      for (uint32_t f = 0; f < c.text_fields; ++f) {
        if (empty_last_field && f + 1 == c.text_fields) continue;
        if (rng.Chance(0.12)) continue;  // no tokens in this field
        std::vector<Token>& t = doc.tokens[f];
        uint32_t pos =
            rng.Chance(0.05) ? 20000 + static_cast<uint32_t>(rng.Below(300000)) : static_cast<uint32_t>(rng.Below(3));
        if (rng.Chance(shape.heavy)) {
          // tf >= 256: a u32 tf width, and long position runs.
          const uint32_t term = zipf() % 30;
          const uint32_t reps = 256 + static_cast<uint32_t>(rng.Below(200));
          for (uint32_t r = 0; r < reps; ++r) t.push_back(Token{term, pos++});
        }
        const uint32_t n = 1 + static_cast<uint32_t>(rng.Below(shape.max_tokens));
        for (uint32_t i = 0; i < n; ++i) {
          const uint32_t term = rng.Chance(0.03)    ? own[rng.Below(own.size())]
                                : rng.Chance(0.002) ? rare[rng.Below(rare.size())]
                                                    : zipf();
          t.push_back(Token{term, pos});
          pos += rng.Chance(0.1) ? 2 + static_cast<uint32_t>(rng.Below(4)) : 1;
        }
        doc.lengths[f] = static_cast<uint32_t>(t.size());
      }
      doc.numbers.resize(c.numeric_fields);
      for (uint32_t n = 0; n < c.numeric_fields; ++n) {
        const uint64_t r = rng.Below(10);
        const uint32_t values = r < 4 ? 0 : r < 8 ? 1 : 2 + static_cast<uint32_t>(rng.Below(2));
        for (uint32_t v = 0; v < values; ++v) doc.numbers[n].push_back(RandomNumber(rng));
      }
      s.docs.push_back(std::move(doc));
    }
  }
  // Deletes.
  for (uint32_t k = 0; k < nseg; ++k) {
    GenSegment& s = c.segments[k];
    const auto n = static_cast<uint32_t>(s.docs.size());
    s.deleted = NewBitmap();
    for (uint32_t d : forced[k]) roaring_bitmap_add(s.deleted.get(), d);
    switch (modes[k]) {
      case DeleteMode::kNone:
        break;
      case DeleteMode::kFew:
        for (int i = 0; i < 3 && n > 0; ++i) roaring_bitmap_add(s.deleted.get(), static_cast<uint32_t>(rng.Below(n)));
        break;
      case DeleteMode::kThird:
        for (uint32_t d = 0; d < n; ++d)
          if (rng.Chance(0.3)) roaring_bitmap_add(s.deleted.get(), d);
        break;
      case DeleteMode::kAll:
        roaring_bitmap_add_range(s.deleted.get(), 0, n);
        break;
    }
    // Bits past the segment's documents mean nothing.
    if (modes[k] != DeleteMode::kNone && rng.Chance(0.3)) {
      roaring_bitmap_add(s.deleted.get(), n + static_cast<uint32_t>(rng.Below(100)));
      roaring_bitmap_add(s.deleted.get(), UINT32_MAX);
    }
  }
  // Build, write and open the segments.
  for (uint32_t k = 0; k < nseg; ++k) {
    GenSegment& s = c.segments[k];
    SegmentBuilder b(c.text_fields, c.numeric_fields);
    for (const GenDoc& doc : s.docs) {
      const uint32_t d = b.AddDoc(doc.id, doc.stored);
      for (uint32_t f = 0; f < c.text_fields; ++f) {
        if (s.by_term) {
          std::map<uint32_t, std::vector<uint32_t>> grouped;
          for (const Token& t : doc.tokens[f]) grouped[t.term].push_back(t.position);
          for (const auto& [term, positions] : grouped)
            for (uint32_t at : positions) b.AddToken(f, d, c.vocab[term], at);
        } else {
          for (const Token& t : doc.tokens[f]) b.AddToken(f, d, c.vocab[t.term], t.position);
        }
        b.SetLength(f, d, doc.lengths[f]);
      }
      for (uint32_t n = 0; n < c.numeric_fields; ++n)
        for (const Number& v : doc.numbers[n]) b.AddNumber(n, d, v);
    }
    const std::string name = "in" + std::to_string(k) + ".cvs";
    REQUIRE(WriteFileAtomic(dir, name, b.Encode(kFingerprint)).ok());
    auto seg = Segment::Open(dir + "/" + name, kFingerprint, c.text_fields, c.numeric_fields);
    REQUIRE(seg.ok());
    s.segment = *seg;
  }
  return c;
}

std::vector<MergeInput> Inputs(const Corpus& c) {
  std::vector<MergeInput> in;
  for (const GenSegment& s : c.segments) in.push_back(MergeInput{s.segment.get(), s.deleted.get()});
  return in;
}

// ---------------------------------------------------------------------------
// The old in-memory merge (SearchIndexImpl::Merge before the streaming
// merger), ported: the live documents go into a SegmentBuilder, each
// term's live postings copied with their positions still encoded.

std::shared_ptr<const Segment> MergeInMemory(std::span<const MergeInput> inputs, uint32_t nt, uint32_t nn,
                                             const std::string& dir, const std::string& name) {
  SegmentBuilder b(nt, nn);
  std::vector<std::vector<uint32_t>> remap(inputs.size());
  constexpr uint32_t kGone = UINT32_MAX;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Segment& seg = *inputs[k].segment;
    remap[k].assign(seg.doc_count(), kGone);
    for (uint32_t d = 0; d < seg.doc_count(); ++d) {
      if (roaring_bitmap_contains(inputs[k].deleted, d)) continue;
      uint32_t nd = b.AddDoc(seg.id(d), seg.has_stored() ? seg.stored(d) : std::string_view());
      remap[k][d] = nd;
      for (uint32_t f = 0; f < nt; ++f) b.SetLength(f, nd, seg.lengths(f)[d]);
    }
    for (uint32_t n = 0; n < nn; ++n)
      for (const NumEntry& e : seg.sorted(n))
        if (remap[k][e.doc] != kGone) b.AddNumber(n, remap[k][e.doc], e.number());
  }
  std::vector<bool> has_deletes(inputs.size());
  std::vector<uint32_t> doc_base(inputs.size(), 0);
  {
    uint32_t next_doc = 0;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const uint32_t n = inputs[k].segment->doc_count();
      const auto deleted = static_cast<uint32_t>(roaring_bitmap_range_cardinality(inputs[k].deleted, 0, n));
      has_deletes[k] = deleted > 0;
      doc_base[k] = next_doc;
      next_doc += n - deleted;
    }
  }
  std::vector<uint32_t> docs, out_docs, out_tfs;
  std::string bytes;
  std::vector<uint32_t> cursor(inputs.size());
  std::vector<size_t> at_min;
  for (uint32_t f = 0; f < nt; ++f) {
    std::fill(cursor.begin(), cursor.end(), 0);
    for (;;) {
      at_min.clear();
      std::string_view min_term;
      for (size_t k = 0; k < inputs.size(); ++k) {
        const Segment& seg = *inputs[k].segment;
        if (cursor[k] >= seg.term_count(f)) continue;
        std::string_view t = seg.term(f, cursor[k]);
        if (at_min.empty() || t < min_term) {
          min_term = t;
          at_min.assign(1, k);
        } else if (t == min_term) {
          at_min.push_back(k);
        }
      }
      if (at_min.empty()) break;
      int64_t index = -1;
      size_t need_docs = 0, need_bytes = 0;
      for (size_t k : at_min) {
        const TermEntry e = inputs[k].segment->entry(f, cursor[k]);
        need_docs += e.doc_freq;
        need_bytes += e.pos_len;
      }
      auto append_term = [&] {
        index = b.AppendTerm(f, min_term);
        b.ReservePostings(f, static_cast<uint32_t>(index), need_docs, need_bytes);
      };
      for (size_t k : at_min) {
        const Segment& seg = *inputs[k].segment;
        const uint32_t ti = cursor[k]++;
        const TermEntry e = seg.entry(f, ti);
        docs.resize(e.doc_freq);
        uint32_t read = 0;
        seg.ForEachDoc(e, [&](uint32_t d) {
          if (read < e.doc_freq) docs[read] = d;
          ++read;
        });
        REQUIRE(read == e.doc_freq);
        const TfArray tfs = seg.Tfs(e);
        const uint8_t* p = seg.PositionsStart(e);
        const size_t pos_len = e.pos_len;
        out_tfs.resize(e.doc_freq);
        if (tfs.width == 1) {
          for (uint32_t r = 0; r < e.doc_freq; ++r) out_tfs[r] = tfs.data[r];
        } else {
          std::memcpy(out_tfs.data(), tfs.data, 4 * size_t{e.doc_freq});
        }
        if (!has_deletes[k]) {
          for (uint32_t& d : docs) d += doc_base[k];
          if (index < 0) append_term();
          b.AddEncodedPostings(f, static_cast<uint32_t>(index), docs, out_tfs,
                               std::string_view(reinterpret_cast<const char*>(p), pos_len));
          continue;
        }
        out_docs.clear();
        bytes.clear();
        size_t live = 0;
        for (uint32_t r = 0; r < e.doc_freq; ++r) {
          const uint32_t tf = out_tfs[r];
          const uint8_t* q = SkipVarints(p, tf);
          const uint32_t nd = remap[k][docs[r]];
          if (nd != kGone) {
            out_docs.push_back(nd);
            out_tfs[live++] = tf;
            bytes.append(reinterpret_cast<const char*>(p), q - p);
          }
          p = q;
        }
        if (out_docs.empty()) continue;
        if (index < 0) append_term();
        b.AddEncodedPostings(f, static_cast<uint32_t>(index), out_docs, std::span<const uint32_t>(out_tfs.data(), live),
                             bytes);
      }
    }
  }
  REQUIRE(WriteFileAtomic(dir, name, b.Encode(kFingerprint)).ok());
  auto seg = Segment::Open(dir + "/" + name, kFingerprint, nt, nn);
  REQUIRE(seg.ok());
  return *seg;
}

// ---------------------------------------------------------------------------
// Comparisons. Mismatches are collected (the first few kept in full) rather
// than CHECKed one by one: millions of comparisons, and one message that
// names the seed, field, term and what differs.

class Diffs {
 public:
  explicit Diffs(std::string context) : context_(std::move(context)) {}
  // `what` names the value: a string, or a function returning one (built
  // only on a mismatch: hot loops compare millions of values).
  template <typename A, typename B, typename W>
  void Eq(const A& got, const B& want, const W& what) {
    if (got == want) return;
    std::ostringstream s;
    if constexpr (std::is_invocable_v<W>)
      s << what();
    else
      s << what;
    s << ": got " << Show(got) << ", want " << Show(want);
    Add(s.str());
  }
  void Add(std::string msg) {
    if (messages_.size() < 25) messages_.push_back(context_ + ": " + msg);
    ++count_;
  }
  size_t count() const { return count_; }
  std::string Report() const {
    std::string out = std::to_string(count_) + " mismatches\n";
    for (const auto& m : messages_) out += "  " + m + "\n";
    return out;
  }

 private:
  template <typename T>
  static std::string Show(const T& v) {
    std::ostringstream s;
    if constexpr (std::is_convertible_v<T, std::string_view>) {
      s << '"' << std::string_view(v) << '"';
    } else if constexpr (std::is_same_v<T, std::vector<uint32_t>>) {
      s << '[';
      for (size_t i = 0; i < v.size() && i < 20; ++i) s << (i ? "," : "") << v[i];
      if (v.size() > 20) s << ",... (" << v.size() << ")";
      s << ']';
    } else if constexpr (std::is_same_v<T, std::optional<uint32_t>>) {
      if (v)
        s << *v;
      else
        s << "none";
    } else {
      s << v;
    }
    return s.str();
  }
  std::string context_;
  std::vector<std::string> messages_;
  size_t count_ = 0;
};

std::string Quote(std::string_view term) {
  std::string out = "'";
  for (unsigned char ch : term) {
    if (ch >= 0x20 && ch < 0x7f) {
      out.push_back(static_cast<char>(ch));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  return out + "'";
}

std::vector<uint32_t> DocsOf(const Segment& s, const TermEntry& e) {
  std::vector<uint32_t> out;
  s.ForEachDoc(e, [&](uint32_t d) { out.push_back(d); });
  return out;
}
std::vector<uint32_t> BitmapValues(const roaring_bitmap_t* b) {
  std::vector<uint32_t> out(roaring_bitmap_get_cardinality(b));
  roaring_bitmap_to_uint32_array(b, out.data());
  return out;
}
bool SameDouble(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// Candidate pair terms of a field: those with df >= 1/64 of the documents
// (a superset of the common terms), the most frequent 150 at most.
std::vector<uint32_t> PairCandidates(const Segment& s, uint32_t f) {
  const uint32_t min_df = std::max<uint32_t>(1, s.doc_count() / 64);
  std::vector<uint32_t> c;
  for (uint32_t i = 0; i < s.term_count(f); ++i)
    if (s.doc_freq(f, i) >= min_df) c.push_back(i);
  if (c.size() > 150) {
    std::stable_sort(c.begin(), c.end(), [&](uint32_t a, uint32_t b) { return s.doc_freq(f, a) > s.doc_freq(f, b); });
    c.resize(150);
    std::sort(c.begin(), c.end());
  }
  return c;
}

// Everything the reader API shows of two segments, compared.
void CompareSegments(const Segment& a, const Segment& b, uint32_t nt, uint32_t nn, Diffs& diffs) {
  diffs.Eq(a.doc_count(), b.doc_count(), "doc_count");
  if (a.doc_count() != b.doc_count()) return;
  const uint32_t n = a.doc_count();
  diffs.Eq(a.has_stored(), b.has_stored(), "has_stored");
  for (uint32_t d = 0; d < n; ++d) {
    const auto ds = [d] { return " of doc " + std::to_string(d); };
    diffs.Eq(a.id(d), b.id(d), [&] { return "id" + ds(); });
    diffs.Eq(a.doc_in_id_order(d), b.doc_in_id_order(d), [&] { return "doc_in_id_order" + ds(); });
    diffs.Eq(a.FindId(b.id(d)), b.FindId(b.id(d)), [&] { return "FindId(" + Quote(b.id(d)) + ")"; });
    if (a.has_stored() && b.has_stored()) diffs.Eq(a.stored(d), b.stored(d), [&] { return "stored" + ds(); });
  }
  diffs.Eq(a.FindId("no such id"), b.FindId("no such id"), "FindId(absent)");
  std::vector<uint32_t> pa, pb;
  for (uint32_t f = 0; f < nt; ++f) {
    const std::string fs = "field " + std::to_string(f);
    for (uint32_t d = 0; d < n; ++d)
      diffs.Eq(a.lengths(f)[d], b.lengths(f)[d], [&] { return fs + " length of doc " + std::to_string(d); });
    diffs.Eq(a.term_count(f), b.term_count(f), fs + " term_count");
    if (a.term_count(f) != b.term_count(f)) continue;
    for (uint32_t i = 0; i < a.term_count(f); ++i) {
      const std::string ts = fs + " term " + Quote(b.term(f, i)) + " (#" + std::to_string(i) + ")";
      diffs.Eq(a.term(f, i), b.term(f, i), ts + " name");
      const TermEntry ea = a.entry(f, i), eb = b.entry(f, i);
      diffs.Eq(ea.doc_freq, eb.doc_freq, ts + " doc_freq");
      diffs.Eq(ea.pos_len, eb.pos_len, ts + " pos_len");
      diffs.Eq(ea.tf_width, eb.tf_width, ts + " tf_width");
      diffs.Eq(ea.skip_shift, eb.skip_shift, ts + " skip_shift");
      diffs.Eq(ea.bitmap_len > 0, eb.bitmap_len > 0, ts + " long");
      diffs.Eq(ea.whole.max_tf, eb.whole.max_tf, ts + " max_tf");
      diffs.Eq(ea.whole.min_len, eb.whole.min_len, ts + " min_len");
      diffs.Eq(ea.whole.last_doc, eb.whole.last_doc, ts + " last_doc");
      if (ea.doc_freq != eb.doc_freq) continue;
      diffs.Eq(DocsOf(a, ea), DocsOf(b, eb), ts + " docs");
      const TfArray ta = a.Tfs(ea), tb = b.Tfs(eb);
      for (uint32_t r = 0; r < ea.doc_freq; ++r) {
        diffs.Eq(ta[r], tb[r], [&] { return ts + " tf of rank " + std::to_string(r); });
        PositionReader(a, f, i).Decode(r, pa);
        PositionReader(b, f, i).Decode(r, pb);
        diffs.Eq(pa, pb, [&] { return ts + " positions of rank " + std::to_string(r); });
      }
      BlockMax wa, wb;
      const BlockMax* ba = a.Blocks(ea, wa);
      const BlockMax* bb = b.Blocks(eb, wb);
      for (uint64_t k = 0; k < BlockCount(ea.doc_freq); ++k) {
        const auto ks = [&] { return ts + " block " + std::to_string(k); };
        const BlockMax x = ba[k], y = bb[k];  // packed and unaligned in the file: copied, not bound
        diffs.Eq(uint32_t{x.last_doc}, uint32_t{y.last_doc}, [&] { return ks() + " last_doc"; });
        diffs.Eq(uint32_t{x.max_tf}, uint32_t{y.max_tf}, [&] { return ks() + " max_tf"; });
        diffs.Eq(uint32_t{x.min_len}, uint32_t{y.min_len}, [&] { return ks() + " min_len"; });
      }
    }
    const std::vector<uint32_t> ca = PairCandidates(a, f), cb = PairCandidates(b, f);
    diffs.Eq(ca, cb, fs + " pair candidates");
    for (uint32_t i : ca) {
      for (uint32_t j : ca) {
        ConstBitmap xa, xb;
        const bool ra = a.PairPostings(f, i, j, &xa), rb = b.PairPostings(f, i, j, &xb);
        const auto ps = [&] { return fs + " pair (" + Quote(b.term(f, i)) + ", " + Quote(b.term(f, j)) + ")"; };
        diffs.Eq(ra, rb, [&] { return ps() + " present"; });
        if (ra && rb) diffs.Eq(BitmapValues(xa.get()), BitmapValues(xb.get()), [&] { return ps() + " docs"; });
      }
    }
  }
  for (uint32_t m = 0; m < nn; ++m) {
    const std::string ns = "numeric " + std::to_string(m);
    for (uint32_t d = 0; d < n; ++d)
      if (!SameDouble(a.column(m)[d], b.column(m)[d]))
        diffs.Add(ns + " column of doc " + std::to_string(d) + ": " + std::to_string(a.column(m)[d]) + " vs " +
                  std::to_string(b.column(m)[d]));
    const auto sa = a.sorted(m), sb = b.sorted(m);
    diffs.Eq(sa.size(), sb.size(), ns + " sorted size");
    for (size_t i = 0; i < std::min(sa.size(), sb.size()); ++i) {
      if (sa[i].number() != sb[i].number() || sa[i].doc != sb[i].doc)
        diffs.Add(ns + " sorted[" + std::to_string(i) + "]: doc " + std::to_string(sa[i].doc) + " vs " +
                  std::to_string(sb[i].doc));
    }
    diffs.Eq(a.multi_valued(m), b.multi_valued(m), ns + " multi_valued");
    diffs.Eq(a.has_residuals(m), b.has_residuals(m), ns + " has_residuals");
  }
}

// The merge as the generated documents say it must be.
struct ExpPosting {
  uint32_t doc;
  std::vector<uint32_t> positions;
};
struct Expected {
  std::vector<const GenDoc*> docs;  // in merged order
  bool has_stored = false;
  std::vector<std::map<std::string, std::vector<ExpPosting>>> terms;  // per field, bytewise order
  std::vector<std::string> absent_ids;                                // ids of deleted documents no live one has
};

Expected MakeExpected(const Corpus& c) {
  Expected x;
  x.terms.resize(c.text_fields);
  std::set<std::string> live_ids, dead_ids;
  for (const GenSegment& s : c.segments) {
    for (uint32_t d = 0; d < s.docs.size(); ++d) {
      const GenDoc& doc = s.docs[d];
      if (roaring_bitmap_contains(s.deleted.get(), d)) {
        dead_ids.insert(doc.id);
        continue;
      }
      const auto nd = static_cast<uint32_t>(x.docs.size());
      x.docs.push_back(&doc);
      live_ids.insert(doc.id);
      x.has_stored |= !doc.stored.empty();
      for (uint32_t f = 0; f < c.text_fields; ++f) {
        std::map<uint32_t, std::vector<uint32_t>> by_term;
        for (const Token& t : doc.tokens[f]) by_term[t.term].push_back(t.position);
        for (auto& [term, positions] : by_term) x.terms[f][c.vocab[term]].push_back(ExpPosting{nd, positions});
      }
    }
  }
  for (const std::string& id : dead_ids)
    if (!live_ids.count(id)) x.absent_ids.push_back(id);
  x.absent_ids.push_back("no such id");
  return x;
}

void CheckExpected(const Segment& s, const Corpus& c, const Expected& x, Diffs& diffs) {
  const auto n = static_cast<uint32_t>(x.docs.size());
  diffs.Eq(s.doc_count(), n, "doc_count");
  if (s.doc_count() != n) return;
  std::vector<uint32_t> by_id(n);
  for (uint32_t d = 0; d < n; ++d) by_id[d] = d;
  std::sort(by_id.begin(), by_id.end(), [&](uint32_t a, uint32_t b) { return x.docs[a]->id < x.docs[b]->id; });
  diffs.Eq(s.has_stored(), x.has_stored, "has_stored");
  for (uint32_t d = 0; d < n; ++d) {
    const GenDoc& doc = *x.docs[d];
    const auto ds = [d] { return " of doc " + std::to_string(d); };
    diffs.Eq(s.id(d), doc.id, [&] { return "id" + ds(); });
    diffs.Eq(s.FindId(doc.id), std::optional<uint32_t>(d), [&] { return "FindId(" + Quote(doc.id) + ")"; });
    diffs.Eq(s.doc_in_id_order(d), by_id[d], [&] { return "doc_in_id_order" + ds(); });
    if (s.has_stored()) diffs.Eq(s.stored(d), doc.stored, [&] { return "stored" + ds(); });
    for (uint32_t f = 0; f < c.text_fields; ++f)
      diffs.Eq(s.lengths(f)[d], doc.lengths[f], [&] { return "field " + std::to_string(f) + " length" + ds(); });
  }
  for (const std::string& id : x.absent_ids)
    diffs.Eq(s.FindId(id), std::optional<uint32_t>(), "FindId(" + Quote(id) + ")");
  std::vector<uint32_t> got;
  for (uint32_t f = 0; f < c.text_fields; ++f) {
    const std::string fs = "field " + std::to_string(f);
    const auto& terms = x.terms[f];
    diffs.Eq(s.term_count(f), static_cast<uint32_t>(terms.size()), fs + " term_count");
    if (s.term_count(f) != terms.size()) continue;
    std::vector<uint32_t> dfs;
    uint32_t i = 0;
    for (const auto& term : terms) {
      // Not structured bindings: the lambdas below capture them (clang 14 cannot).
      const auto& name = term.first;
      const auto& postings = term.second;
      const std::string ts = fs + " term " + Quote(name) + " (#" + std::to_string(i) + ")";
      diffs.Eq(s.term(f, i), name, ts + " name");
      diffs.Eq(s.FindTerm(f, name), int64_t{i}, ts + " FindTerm");
      const TermEntry e = s.entry(f, i);
      const auto df = static_cast<uint32_t>(postings.size());
      dfs.push_back(df);
      uint32_t max_tf = 0, min_len = UINT32_MAX, pos_len = 0;
      std::vector<uint32_t> want_docs;
      for (const ExpPosting& p : postings) {
        want_docs.push_back(p.doc);
        max_tf = std::max(max_tf, static_cast<uint32_t>(p.positions.size()));
        min_len = std::min(min_len, x.docs[p.doc]->lengths[f]);
        uint32_t prev = 0;
        for (uint32_t q : p.positions) {
          pos_len += static_cast<uint32_t>(VarintSize(q - prev));
          prev = q;
        }
      }
      const bool is_long = df > kShortList;
      diffs.Eq(e.doc_freq, df, ts + " doc_freq");
      diffs.Eq(s.doc_freq(f, i), df, ts + " doc_freq()");
      diffs.Eq(e.pos_len, pos_len, ts + " pos_len");
      diffs.Eq(e.tf_width, max_tf < 256 ? 1u : 4u, ts + " tf_width");
      diffs.Eq(e.bitmap_len > 0, is_long, ts + " long");
      diffs.Eq(e.skip_shift, is_long ? SkipShift(df, pos_len) : 0u, ts + " skip_shift");
      diffs.Eq(e.whole.max_tf, max_tf, ts + " max_tf");
      diffs.Eq(e.whole.min_len, min_len, ts + " min_len");
      diffs.Eq(e.whole.last_doc, want_docs.back(), ts + " last_doc");
      diffs.Eq(DocsOf(s, e), want_docs, ts + " docs (ForEachDoc)");
      const ConstBitmap bm = s.Postings(e);
      diffs.Eq(BitmapValues(bm.get()), want_docs, ts + " docs (Postings)");
      if (e.doc_freq != df) {
        ++i;
        continue;
      }
      const TfArray tfs = s.Tfs(e);
      for (uint32_t r = 0; r < df; ++r) {
        const auto rs = [&] {
          return " of rank " + std::to_string(r) + " (doc " + std::to_string(postings[r].doc) + ")";
        };
        diffs.Eq(tfs[r], static_cast<uint32_t>(postings[r].positions.size()), [&] { return ts + " tf" + rs(); });
        PositionReader(s, f, i).Decode(r, got);
        diffs.Eq(got, postings[r].positions, [&] { return ts + " positions" + rs(); });
      }
      BlockMax whole;
      const BlockMax* blocks = s.Blocks(e, whole);
      for (uint32_t k = 0; k < BlockCount(df); ++k) {
        uint32_t b_tf = 0, b_len = UINT32_MAX;
        const uint32_t end = std::min<uint32_t>(df, (k + 1) * kPostingBlock);
        for (uint32_t r = k * kPostingBlock; r < end; ++r) {
          b_tf = std::max(b_tf, static_cast<uint32_t>(postings[r].positions.size()));
          b_len = std::min(b_len, x.docs[postings[r].doc]->lengths[f]);
        }
        const auto ks = [&] { return ts + " block " + std::to_string(k); };
        const BlockMax got = blocks[k];  // packed and unaligned in the file: copied, not bound
        diffs.Eq(uint32_t{got.last_doc}, postings[end - 1].doc, [&] { return ks() + " last_doc"; });
        diffs.Eq(uint32_t{got.max_tf}, b_tf, [&] { return ks() + " max_tf"; });
        diffs.Eq(uint32_t{got.min_len}, b_len, [&] { return ks() + " min_len"; });
      }
      ++i;
    }
    // Pair tables: the common terms (pairs.h: the 64 largest dfs >= 1/64
    // of the documents, ties to the lower index) of a segment of at least
    // kMinPairTableDocs documents; a pair's documents, by brute force.
    std::vector<uint32_t> common;
    if (n >= kMinPairTableDocs) {
      const uint32_t min_df = std::max<uint32_t>(1, n / 64);
      for (uint32_t t = 0; t < dfs.size(); ++t)
        if (dfs[t] >= min_df) common.push_back(t);
      std::stable_sort(common.begin(), common.end(), [&](uint32_t a, uint32_t b) { return dfs[a] > dfs[b]; });
      if (common.size() > kMaxCommonTerms) common.resize(kMaxCommonTerms);
      std::sort(common.begin(), common.end());
    }
    std::vector<uint32_t> candidates = PairCandidates(s, f);
    for (uint32_t t : common)
      if (!std::binary_search(candidates.begin(), candidates.end(), t)) candidates.push_back(t);
    std::sort(candidates.begin(), candidates.end());
    // The pairs' documents from the generated tokens: adjacent positions
    // whose terms are both common.
    std::vector<int> common_slot(terms.size(), -1);
    for (size_t k = 0; k < common.size(); ++k) common_slot[common[k]] = static_cast<int>(k);
    std::vector<int> slot_of_word(c.vocab.size(), -1);
    {
      uint32_t t = 0;
      std::map<std::string_view, uint32_t> index_of;
      for (const auto& [name, postings] : terms) index_of[name] = t++;
      for (size_t w = 0; w < c.vocab.size(); ++w) {
        auto it = index_of.find(c.vocab[w]);
        if (it != index_of.end()) slot_of_word[w] = common_slot[it->second];
      }
    }
    std::map<std::pair<int, int>, std::vector<uint32_t>> pair_docs;
    for (uint32_t d = 0; d < n; ++d) {
      const std::vector<Token>& tokens = x.docs[d]->tokens[f];
      for (size_t k = 0; k + 1 < tokens.size(); ++k) {
        const int a = slot_of_word[tokens[k].term], b = slot_of_word[tokens[k + 1].term];
        if (a < 0 || b < 0 || tokens[k + 1].position != tokens[k].position + 1) continue;
        std::vector<uint32_t>& docs = pair_docs[{a, b}];
        if (docs.empty() || docs.back() != d) docs.push_back(d);
      }
    }
    size_t pairs_seen = 0;
    for (uint32_t ti : candidates) {
      const int ci = ti < common_slot.size() ? common_slot[ti] : -1;
      for (uint32_t tj : candidates) {
        const int cj = tj < common_slot.size() ? common_slot[tj] : -1;
        ConstBitmap pd;
        const bool found = s.PairPostings(f, ti, tj, &pd);
        auto ps = [&] { return fs + " pair (" + Quote(s.term(f, ti)) + ", " + Quote(s.term(f, tj)) + ")"; };
        diffs.Eq(found, ci >= 0 && cj >= 0, [&] { return ps() + " present"; });
        if (!found || ci < 0 || cj < 0) continue;
        auto it = pair_docs.find({ci, cj});
        const std::vector<uint32_t> none;
        const std::vector<uint32_t>& want = it == pair_docs.end() ? none : it->second;
        pairs_seen += !want.empty();
        diffs.Eq(BitmapValues(pd.get()), want, [&] { return ps() + " docs"; });
      }
    }
    diffs.Eq(pairs_seen, pair_docs.size(), fs + " pairs found");
  }
  for (uint32_t m = 0; m < c.numeric_fields; ++m) {
    const std::string ns = "numeric " + std::to_string(m);
    std::vector<NumEntry> want;
    bool multi = false, residuals = false;
    for (uint32_t d = 0; d < n; ++d) {
      const auto& values = x.docs[d]->numbers[m];
      double col = std::nan("");
      for (const Number& v : values) {
        if (std::isnan(col) || v.value < col) col = v.value;
        want.push_back(NumEntry{v.value, d, v.residual});
        residuals |= v.residual != 0;
      }
      multi |= values.size() > 1;
      if (!SameDouble(s.column(m)[d], col))
        diffs.Add(ns + " column of doc " + std::to_string(d) + ": got " + std::to_string(s.column(m)[d]) + ", want " +
                  std::to_string(col));
    }
    std::sort(want.begin(), want.end(), [](const NumEntry& a, const NumEntry& b) {
      return a.number() != b.number() ? a.number() < b.number() : a.doc < b.doc;
    });
    const auto sorted = s.sorted(m);
    diffs.Eq(sorted.size(), want.size(), ns + " sorted size");
    for (size_t i = 0; i < std::min(sorted.size(), want.size()); ++i)
      if (sorted[i].number() != want[i].number() || sorted[i].doc != want[i].doc)
        diffs.Add(ns + " sorted[" + std::to_string(i) + "]: got (" + std::to_string(sorted[i].value) + ", " +
                  std::to_string(sorted[i].residual) + ", doc " + std::to_string(sorted[i].doc) + "), want (" +
                  std::to_string(want[i].value) + ", " + std::to_string(want[i].residual) + ", doc " +
                  std::to_string(want[i].doc) + ")");
    diffs.Eq(s.multi_valued(m), multi, ns + " multi_valued");
    diffs.Eq(s.has_residuals(m), residuals, ns + " has_residuals");
  }
}

std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// What a merged segment exercised, so that a test can require that its
// corpora reach the cases it is about (an oracle over inputs without long
// lists or pairs would pass vacuously).
struct Coverage {
  uint32_t merges = 0, long_lists = 0, short_lists = 0, wide_tfs = 0, wide_long_lists = 0, multi_chunk_short = 0,
           pairs = 0, stored_mixed = 0, residuals = 0, multi_valued = 0, zero_length_docs = 0, partial_deletes = 0,
           full_deletes = 0, no_deletes = 0;
  uint32_t max_candidates = 0;  // terms of a field with doc_freq >= 1/64 of the documents
  void Add(const Corpus& c, const Segment& s) {
    ++merges;
    bool some_stored = false, some_not = false;
    for (const GenSegment& g : c.segments) {
      (g.segment->has_stored() ? some_stored : some_not) = true;
      const uint64_t dead = roaring_bitmap_range_cardinality(g.deleted.get(), 0, g.docs.size());
      (dead == 0 ? no_deletes : dead == g.docs.size() ? full_deletes : partial_deletes)++;
    }
    stored_mixed += some_stored && some_not;
    for (uint32_t f = 0; f < c.text_fields; ++f) {
      for (uint32_t d = 0; d < s.doc_count(); ++d) zero_length_docs += s.lengths(f)[d] == 0;
      for (uint32_t i = 0; i < s.term_count(f); ++i) {
        const TermEntry e = s.entry(f, i);
        (e.bitmap_len > 0 ? long_lists : short_lists)++;
        wide_tfs += e.tf_width == 4;
        wide_long_lists += e.tf_width == 4 && e.bitmap_len > 0;
        if (e.bitmap_len == 0) {
          uint32_t first = UINT32_MAX;
          s.ForEachDoc(e, [&](uint32_t d) { first = std::min(first, d); });
          multi_chunk_short += (first >> 16) != (e.whole.last_doc >> 16);
        }
      }
      uint32_t above = 0;
      for (uint32_t i = 0; i < s.term_count(f); ++i)
        above += s.doc_freq(f, i) >= std::max<uint32_t>(1, s.doc_count() / 64);
      max_candidates = std::max(max_candidates, above);
      const std::vector<uint32_t> cand = PairCandidates(s, f);
      for (uint32_t i : cand)
        for (uint32_t j : cand) {
          ConstBitmap b;
          pairs += s.PairPostings(f, i, j, &b) && !roaring_bitmap_is_empty(b.get());
        }
    }
    for (uint32_t m = 0; m < c.numeric_fields; ++m) {
      residuals += s.has_residuals(m);
      multi_valued += s.multi_valued(m);
    }
  }
};

// Merges the corpus both ways and checks both results; returns the
// streaming result's path.
std::string MergeAndCheck(const Corpus& c, const std::string& root, Coverage* coverage = nullptr) {
  const std::string out_dir = root + "/streamed", mem_dir = root + "/in_memory";
  std::filesystem::create_directories(out_dir);
  std::filesystem::create_directories(mem_dir);
  const std::vector<MergeInput> inputs = Inputs(c);
  const Expected x = MakeExpected(c);
  std::atomic<bool> cancel{false};
  auto merged = MergeSegments(inputs, out_dir, "merged.cvs", kFingerprint, c.text_fields, c.numeric_fields, cancel);
  INFO("seed " << c.seed << ": " << c.segments.size() << " inputs, " << x.docs.size() << " live docs, " << c.text_fields
               << " text and " << c.numeric_fields << " numeric fields");
  REQUIRE(merged.ok());
  CHECK(*merged == x.docs.size());
  // Nothing else is left behind: no .tmp, no spill file.
  CHECK(Listing(out_dir) == std::vector<std::string>{"merged.cvs"});
  auto streamed = Segment::Open(out_dir + "/merged.cvs", kFingerprint, c.text_fields, c.numeric_fields);
  REQUIRE(streamed.ok());
  auto in_memory = MergeInMemory(inputs, c.text_fields, c.numeric_fields, mem_dir, "merged.cvs");

  Diffs vs_old("seed " + std::to_string(c.seed) + " streaming vs in-memory");
  CompareSegments(**streamed, *in_memory, c.text_fields, c.numeric_fields, vs_old);
  INFO(vs_old.Report());
  CHECK(vs_old.count() == 0);
  Diffs streamed_vs_truth("seed " + std::to_string(c.seed) + " streaming vs brute force");
  CheckExpected(**streamed, c, x, streamed_vs_truth);
  INFO(streamed_vs_truth.Report());
  CHECK(streamed_vs_truth.count() == 0);
  Diffs old_vs_truth("seed " + std::to_string(c.seed) + " in-memory vs brute force");
  CheckExpected(*in_memory, c, x, old_vs_truth);
  INFO(old_vs_truth.Report());
  CHECK(old_vs_truth.count() == 0);
  if (coverage != nullptr) coverage->Add(c, **streamed);
  return out_dir + "/merged.cvs";
}

// ---------------------------------------------------------------------------

TEST_CASE("streaming merge equals the in-memory merge and a brute force: small inputs", "[merger]") {
  const Shape shape{1, 10, 1, 150, 25, 0.02};
  Coverage cov;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    TempDir dir;
    const Corpus c = MakeCorpus(seed, shape, dir.path());
    MergeAndCheck(c, dir.path(), &cov);
  }
  CHECK(cov.long_lists > 0);
  CHECK(cov.wide_tfs > 0);
  CHECK(cov.stored_mixed > 0);
  CHECK(cov.residuals > 0);
  CHECK(cov.multi_valued > 0);
  CHECK(cov.zero_length_docs > 0);
  CHECK(cov.no_deletes > 0);
  CHECK(cov.partial_deletes > 0);
  CHECK(cov.full_deletes > 0);
}

TEST_CASE("streaming merge equals the in-memory merge and a brute force: pair tables", "[merger]") {
  // Inputs of >= kMinPairTableDocs documents: pair tables in the inputs
  // and in the merged segment, common terms in long lists.
  const Shape shape{1, 4, kMinPairTableDocs, kMinPairTableDocs + 500, 30, 0.01};
  Coverage cov;
  for (uint64_t seed = 101; seed <= 106; ++seed) {
    TempDir dir;
    const Corpus c = MakeCorpus(seed, shape, dir.path());
    MergeAndCheck(c, dir.path(), &cov);
  }
  CHECK(cov.pairs > 0);
  CHECK(cov.wide_long_lists > 0);
  // Small inputs whose merge reaches kMinPairTableDocs.
  const Shape many_small{8, 10, 100, 200, 20, 0.01};
  Coverage small_cov;
  for (uint64_t seed = 111; seed <= 113; ++seed) {
    TempDir dir;
    const Corpus c = MakeCorpus(seed, many_small, dir.path());
    MergeAndCheck(c, dir.path(), &small_cov);
  }
  CHECK(small_cov.pairs > 0);
}

TEST_CASE("streaming merge equals the in-memory merge and a brute force: many common-term candidates", "[merger]") {
  // A flat vocabulary of long documents: more than 16 * kMaxCommonTerms
  // terms pass 1/64 of the documents, most with tied doc_freqs, so the
  // merger trims its candidates on the way and ties decide.
  Shape shape{3, 3, 520, 600, 200, 0.0};
  shape.no_full_deletes = true;  // >= kMinPairTableDocs merged documents
  shape.words = 1400;
  shape.skew = 0;
  TempDir dir;
  const Corpus c = MakeCorpus(151, shape, dir.path());
  Coverage cov;
  MergeAndCheck(c, dir.path(), &cov);
  CHECK(cov.pairs > 0);
  CHECK(cov.max_candidates > 16 * kMaxCommonTerms);
}

TEST_CASE("streaming merge equals the in-memory merge and a brute force: more than 65536 documents", "[merger]") {
  // Doc numbers past 16 bits: short lists of several chunks, and the pair
  // tables built a chunk of input documents at a time, several chunks per input.
  Shape shape{2, 2, 66000, 68000, 2, 0.0003};
  shape.no_full_deletes = true;
  TempDir dir;
  const Corpus c = MakeCorpus(205, shape, dir.path());  // input 0 has no deletes, input 1 ~30%
  Coverage cov;
  MergeAndCheck(c, dir.path(), &cov);
  CHECK(cov.multi_chunk_short > 0);
  CHECK(cov.pairs > 0);
}

TEST_CASE("a segment mapped again reads as the one opened from its own mapping alone", "[merger]") {
  // A merge reads its inputs through MapAgain (read ahead): the same
  // layout, every pointer moved to the new mapping, nothing checked twice.
  const Shape shape{2, 3, kMinPairTableDocs, kMinPairTableDocs + 300, 30, 0.01};  // pair tables too
  TempDir dir;
  const Corpus c = MakeCorpus(107, shape, dir.path());
  for (size_t k = 0; k < c.segments.size(); ++k) {
    const std::string path = dir.path() + "/in" + std::to_string(k) + ".cvs";
    auto first = Segment::Open(path, kFingerprint, c.text_fields, c.numeric_fields);
    REQUIRE(first.ok());
    auto again = (*first)->MapAgain(path, ReadAdvice::kSequential);
    REQUIRE(again.ok());
    first->reset();  // unmapped: a pointer left in it would read unmapped memory below
    Diffs diffs("input " + std::to_string(k) + " mapped again vs opened");
    CompareSegments(**again, *c.segments[k].segment, c.text_fields, c.numeric_fields, diffs);
    INFO(diffs.Report());
    CHECK(diffs.count() == 0);
  }
  // Another file under the name, or none: refused.
  const auto& seg = c.segments[0].segment;
  auto other = seg->MapAgain(dir.path() + "/in1.cvs", ReadAdvice::kSequential);
  CHECK(other.status().code() == StatusCode::kCorruption);
  auto gone = seg->MapAgain(dir.path() + "/none.cvs", ReadAdvice::kSequential);
  CHECK(gone.status().code() == StatusCode::kIOError);
}

TEST_CASE("streaming merge of empty, tiny and fully deleted inputs", "[merger]") {
  {
    Shape shape{1, 4, 1, 50, 10, 0.0};
    shape.all_deleted = true;
    TempDir dir;
    const Corpus c = MakeCorpus(301, shape, dir.path());
    MergeAndCheck(c, dir.path());
  }
  // Inputs of 0 to 3 documents.
  const Shape tiny{1, 6, 0, 3, 4, 0.0};
  uint32_t empty_inputs = 0;
  for (uint64_t seed = 311; seed <= 330; ++seed) {
    TempDir dir;
    const Corpus c = MakeCorpus(seed, tiny, dir.path());
    for (const GenSegment& s : c.segments) empty_inputs += s.docs.empty();
    MergeAndCheck(c, dir.path());
  }
  CHECK(empty_inputs > 0);
  {
    // No inputs at all.
    TempDir dir;
    Corpus c;
    c.text_fields = 2;
    c.numeric_fields = 1;
    MergeAndCheck(c, dir.path());
  }
}

TEST_CASE("a cancelled merge leaves nothing behind", "[merger]") {
  const Shape shape{3, 5, 200, 400, 20, 0.01};
  TempDir dir;
  const Corpus c = MakeCorpus(401, shape, dir.path());
  const std::vector<MergeInput> inputs = Inputs(c);
  const std::string out_dir = dir.path() + "/out";
  std::filesystem::create_directories(out_dir);
  {
    std::atomic<bool> cancel{true};
    auto r = MergeSegments(inputs, out_dir, "merged.cvs", kFingerprint, c.text_fields, c.numeric_fields, cancel);
    CHECK_FALSE(r.ok());
    CHECK(Listing(out_dir).empty());  // neither merged.cvs nor merged.cvs.tmp (nor a spill file)
  }
  // Cancelled while it runs (at some point or other): either a complete,
  // valid segment or nothing at all.
  const uint32_t live = static_cast<uint32_t>(MakeExpected(c).docs.size());
  for (int delay_us : {0, 50, 200, 1000, 3000, 10000}) {
    std::atomic<bool> cancel{false};
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      cancel.store(true);
    });
    auto r = MergeSegments(inputs, out_dir, "merged.cvs", kFingerprint, c.text_fields, c.numeric_fields, cancel);
    t.join();
    INFO("cancelled after " << delay_us << " us");
    if (r.ok()) {
      CHECK(*r == live);
      CHECK(Listing(out_dir) == std::vector<std::string>{"merged.cvs"});
      auto s = Segment::Open(out_dir + "/merged.cvs", kFingerprint, c.text_fields, c.numeric_fields);
      REQUIRE(s.ok());
      CHECK((*s)->doc_count() == live);
      std::filesystem::remove(out_dir + "/merged.cvs");
    } else {
      CHECK(Listing(out_dir).empty());
    }
  }
}

TEST_CASE("DocRemap equals a brute-force remap", "[merger]") {
  Rng rng(501);
  for (uint32_t doc_count : {0u, 1u, 63u, 64u, 65u, 127u, 128u, 1000u, 4096u, 70001u}) {
    for (int pattern = 0; pattern < 7; ++pattern) {
      Bitmap deleted = NewBitmap();
      switch (pattern) {
        case 0:
          break;  // none
        case 1:   // a few
          for (int i = 0; i < 3 && doc_count > 0; ++i)
            roaring_bitmap_add(deleted.get(), static_cast<uint32_t>(rng.Below(doc_count)));
          break;
        case 2:  // ~30%
          for (uint32_t d = 0; d < doc_count; ++d)
            if (rng.Chance(0.3)) roaring_bitmap_add(deleted.get(), d);
          break;
        case 3:
          roaring_bitmap_add_range(deleted.get(), 0, doc_count);
          break;  // all
        case 4:   // only bits past the documents: no deletes at all
          roaring_bitmap_add(deleted.get(), doc_count);
          roaring_bitmap_add(deleted.get(), doc_count + 64);
          roaring_bitmap_add(deleted.get(), UINT32_MAX);
          break;
        case 5:  // ~70%, and bits past the documents
          for (uint32_t d = 0; d < doc_count; ++d)
            if (rng.Chance(0.7)) roaring_bitmap_add(deleted.get(), d);
          roaring_bitmap_add_range(deleted.get(), doc_count, uint64_t{doc_count} + 1000);
          break;
        case 6:  // the first and last of every 64
          for (uint32_t d = 0; d < doc_count; d += 64) {
            roaring_bitmap_add(deleted.get(), d);
            roaring_bitmap_add(deleted.get(), std::min(d + 63, doc_count - 1));
          }
          break;
      }
      for (const roaring_bitmap_t* bits :
           {static_cast<const roaring_bitmap_t*>(deleted.get()), static_cast<const roaring_bitmap_t*>(nullptr)}) {
        if (bits == nullptr && pattern != 0) continue;
        const uint32_t base = static_cast<uint32_t>(rng.Below(1000000));
        const DocRemap remap(bits, doc_count, base);
        INFO("doc_count " << doc_count << ", pattern " << pattern << ", base " << base
                          << (bits ? "" : ", null bitmap"));
        uint32_t next = base, mismatches = 0;
        bool any_deleted = false;
        for (uint32_t d = 0; d < doc_count; ++d) {
          const bool dead = bits != nullptr && roaring_bitmap_contains(bits, d);
          any_deleted |= dead;
          if (remap.live(d) == dead) ++mismatches;
          if (!dead) {
            if (remap(d) != next) ++mismatches;
            ++next;
          }
        }
        CHECK(mismatches == 0);
        CHECK(remap.live_count() == next - base);
        CHECK(remap.base() == base);
        CHECK(remap.has_deletes() == any_deleted);
      }
    }
  }
}

TEST_CASE("a merged segment with any one byte flipped is rejected as corrupt", "[merger]") {
  const Shape shape{3, 3, 20, 40, 8, 0.05};
  TempDir dir;
  const Corpus c = MakeCorpus(601, shape, dir.path());
  const std::string path = MergeAndCheck(c, dir.path());
  std::string image;
  {
    std::ifstream in(path, std::ios::binary);
    image.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  REQUIRE(image.size() > 64 + 16);
  // Every byte of the header and footer; in between, every byte if the
  // file is small, else a sample (the checksum covers all of it).
  std::vector<size_t> offsets;
  const size_t n = image.size();
  const size_t stride = n <= 65536 ? 1 : n / 4096;
  for (size_t i = 0; i < n; i += (i < 64 || i + 16 >= n) ? 1 : stride) offsets.push_back(i);
  for (size_t i = n - 16; i < n; ++i) offsets.push_back(i);
  const int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  size_t rejected = 0;
  std::vector<size_t> accepted;
  for (size_t off : offsets) {
    for (const uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}}) {
      const char flipped = static_cast<char>(image[off] ^ mask);
      REQUIRE(::pwrite(fd, &flipped, 1, static_cast<off_t>(off)) == 1);
      auto s = Segment::Open(path, kFingerprint, c.text_fields, c.numeric_fields);
      if (!s.ok() && s.status().code() == StatusCode::kCorruption)
        ++rejected;
      else
        accepted.push_back(off);
      REQUIRE(::pwrite(fd, &image[off], 1, static_cast<off_t>(off)) == 1);
    }
  }
  ::close(fd);
  INFO(n << "-byte file; first offsets not rejected: "
         << (accepted.empty() ? std::string("none") : std::to_string(accepted[0])));
  CHECK(accepted.empty());
  CHECK(rejected == 2 * offsets.size());
  // Restored, it opens again.
  CHECK(Segment::Open(path, kFingerprint, c.text_fields, c.numeric_fields).ok());
}

}  // namespace
}  // namespace corvid::postings
