// Segment files: encode, memory-map, read back postings, term
// frequencies, positions, lengths, numeric columns; corruption detection.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>

#include "common/resident_pages.h"
#include "postings/posting_cursor.h"
#include "postings/segment.h"
#include "postings/segment_format.h"
#include "tests/postings/test_util.h"

namespace corvid::postings {
namespace {

using testing::TempDir;

TEST_CASE("segment round trip", "[postings]") {
  TempDir dir;
  SegmentBuilder b(2, 1);
  // 300 docs so term "a" spans several 64-posting blocks.
  for (uint32_t d = 0; d < 300; ++d) {
    uint32_t doc = b.AddDoc("doc" + std::to_string(d));
    REQUIRE(doc == d);
    uint32_t len = 0;
    for (uint32_t p = 0; p < (d % 7) + 1; ++p, ++len) b.AddToken(0, doc, "a", p * 2);
    if (d % 3 == 0) {
      b.AddToken(0, doc, "b", 100);
      ++len;
    }
    b.SetLength(0, doc, len);
    if (d % 5 == 0) {
      b.AddToken(1, doc, "only5", 0);
      b.SetLength(1, doc, 1);
    }
    if (d % 2 == 0) {
      b.AddNumber(0, doc, Number{1000.0 - d});
      b.AddNumber(0, doc, Number{5000.0 + d});
    }
  }
  // A tf of 300 needs wide term frequencies.
  uint32_t big = b.AddDoc("big");
  for (uint32_t p = 0; p < 300; ++p) b.AddToken(1, big, "zzz", p);
  b.SetLength(1, big, 300);
  std::string image = b.Encode(42);
  REQUIRE(WriteFileAtomic(dir.path(), "s.cvs", image).ok());
  auto seg = Segment::Open(dir.path() + "/s.cvs", 42, 2, 1);
  REQUIRE(seg.ok());
  const Segment& s = **seg;
  CHECK(s.doc_count() == 301);
  CHECK(s.id(7) == "doc7");
  CHECK(s.id(300) == "big");
  CHECK(s.term_count(0) == 2);
  CHECK(s.term(0, 0) == "a");
  CHECK(s.term(0, 1) == "b");
  CHECK(s.FindTerm(0, "b") == 1);
  CHECK(s.FindTerm(0, "c") == -1);
  CHECK(s.LowerBound(0, "aa") == 1);
  auto a = s.Postings(0, 0);
  REQUIRE(a);
  CHECK(roaring_bitmap_get_cardinality(a.get()) == 300);
  auto tfs = s.Tfs(0, 0);
  std::vector<uint32_t> pos;
  for (uint32_t r = 0; r < 300; ++r) {
    CHECK(tfs[r] == (r % 7) + 1);
    PositionReader(s, 0, 0).Decode(r, pos);
    REQUIRE(pos.size() == (r % 7) + 1);
    for (uint32_t k = 0; k < pos.size(); ++k) CHECK(pos[k] == 2 * k);
  }
  auto bb = s.Postings(0, 1);
  CHECK(roaring_bitmap_get_cardinality(bb.get()) == 100);
  for (uint32_t f = 0; f < 2; ++f) {
    for (uint32_t i = 0; i < s.term_count(f); ++i) {
      auto bm = s.Postings(f, i);
      std::vector<uint32_t> want(roaring_bitmap_get_cardinality(bm.get())), got;
      roaring_bitmap_to_uint32_array(bm.get(), want.data());
      s.ForEachDoc(s.entry(f, i), [&](uint32_t d) { got.push_back(d); });
      CHECK(got == want);
    }
  }
  CHECK(s.lengths(0)[3] == 5);
  CHECK(s.lengths(1)[5] == 1);
  CHECK(s.lengths(1)[6] == 0);
  int64_t z = s.FindTerm(1, "zzz");
  REQUIRE(z >= 0);
  const uint32_t width = s.entry(1, z).tf_width;
  CHECK(width == 4);
  CHECK(s.Tfs(1, z)[0] == 300);
  PositionReader(s, 1, z).Decode(0, pos);
  CHECK(pos.size() == 300);
  CHECK(pos[299] == 299);
  CHECK(s.column(0)[4] == 996.0);
  CHECK(std::isnan(s.column(0)[3]));
  auto sorted = s.sorted(0);
  CHECK(sorted.size() == 300);
  for (size_t i = 1; i < sorted.size(); ++i) CHECK(sorted[i - 1].value <= sorted[i].value);
  // Block maxima bound every posting of their block.
  BlockMax whole;
  const BlockMax* blocks = s.Blocks(0, 0, whole);
  for (uint32_t r = 0; r < 300; ++r) {
    const uint32_t max_tf = blocks[r / kPostingBlock].max_tf;  // copy: BlockMax is packed
    CHECK(max_tf >= tfs[r]);
  }

  SECTION("a segment of another format version is unknown") {
    // Format 4 (a skip entry per 64 postings) must not be read as format
    // 5: the version is checked before anything else. An older version is
    // believed (its checksum may be another); a version no build wrote
    // before this one only with this format's checksum sound, so that a
    // flipped bit in the version is damage, not a quiet rebuild.
    auto with_version = [&](uint32_t version, bool resum) {
      std::string other = image;
      std::memcpy(other.data() + 8, &version, 4);
      if (resum) {
        const uint64_t sum = segment_format::FileChecksum(other.data(), other.size() - 16);
        std::memcpy(other.data() + other.size() - 16, &sum, 8);
      }
      REQUIRE(WriteFileAtomic(dir.path(), "v.cvs", other).ok());
      auto opened = Segment::Open(dir.path() + "/v.cvs", 42, 2, 1);
      REQUIRE(opened.status().code() == StatusCode::kCorruption);
      return opened.status();
    };
    CHECK(IsOutdated(with_version(kSegmentFormatVersion - 1, false)));
    CHECK(IsOutdated(with_version(kSegmentFormatVersion + 1, true)));
    CHECK(with_version(kSegmentFormatVersion - 1, false).message().find("unknown format version") != std::string::npos);
    for (uint32_t flipped : {kSegmentFormatVersion + 1, kSegmentFormatVersion ^ 0x40, 0u}) {
      const Status st = with_version(flipped, false);
      CHECK(!IsOutdated(st));
      CHECK(st.message().find("checksum mismatch") != std::string::npos);
    }
  }
  SECTION("wrong fingerprint or field counts") {
    CHECK(Segment::Open(dir.path() + "/s.cvs", 43, 2, 1).status().code() == StatusCode::kCorruption);
    CHECK(IsOutdated(Segment::Open(dir.path() + "/s.cvs", 43, 2, 1).status()));  // sound: another definition's
    CHECK(Segment::Open(dir.path() + "/s.cvs", 42, 3, 1).status().code() == StatusCode::kCorruption);
    std::string flipped = image;  // a flipped bit in the fingerprint: damage
    flipped[16] ^= 0x01;
    REQUIRE(WriteFileAtomic(dir.path(), "f.cvs", flipped).ok());
    const Status st = Segment::Open(dir.path() + "/f.cvs", 42, 2, 1).status();
    CHECK(!IsOutdated(st));
    CHECK(st.message().find("checksum mismatch") != std::string::npos);
  }
  SECTION("every flipped byte is detected") {
    for (size_t at : {size_t{0}, size_t{9}, size_t{70}, image.size() / 2, image.size() - 20, image.size() - 1}) {
      std::string bad = image;
      bad[at] ^= 0x5a;
      REQUIRE(WriteFileAtomic(dir.path(), "bad.cvs", bad).ok());
      CHECK(Segment::Open(dir.path() + "/bad.cvs", 42, 2, 1).status().code() == StatusCode::kCorruption);
    }
    std::string truncated = image.substr(0, image.size() - 100);
    REQUIRE(WriteFileAtomic(dir.path(), "bad.cvs", truncated).ok());
    CHECK(!Segment::Open(dir.path() + "/bad.cvs", 42, 2, 1).ok());
  }
}

// Deterministic pseudo-random batch `seed`: documents with terms from a
// small vocabulary (so batches share terms), some terms new to the batch.
void FillBatch(SegmentBuilder& b, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  auto next = [&] { return x = x * 1103515245u + 12345u; };
  const uint32_t docs = 50 + next() % 100;
  for (uint32_t d = 0; d < docs; ++d) {
    std::string id = "s";
    id.append(std::to_string(seed)).append("d").append(std::to_string(d));
    const uint32_t doc = b.AddDoc(id);
    std::vector<std::string> terms;
    std::vector<uint32_t> positions;
    const uint32_t n = next() % 40;
    for (uint32_t p = 0; p < n; ++p) {
      const uint32_t r = next() >> 8;
      std::string t = r % 5 == 0 ? "new" : "t";
      if (r % 5 == 0) {
        t.append(std::to_string(seed)).append("_").append(std::to_string(r % 7));
      } else {
        t.append(std::to_string(r % 300)).append(r % 23, 'x');
      }
      terms.push_back(std::move(t));
      positions.push_back(p * (1 + r % 3) + (r % 200 == 0 ? 300 : 0));
    }
    std::sort(positions.begin(), positions.end());
    for (uint32_t i = 0; i < n; ++i) b.AddToken(0, doc, terms[i], positions[i]);
    b.SetLength(0, doc, n);
    if (next() % 3 == 0) b.AddNumber(0, doc, Number{static_cast<double>(next() % 1000)});
  }
}

// The VmFlags line /proc/self/smaps gives the mapping that starts at `at`.
std::string MappingFlags(const void* at) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  char start[32];
  std::snprintf(start, sizeof start, "%lx-", static_cast<unsigned long>(reinterpret_cast<uintptr_t>(at)));
  while (std::getline(smaps, line)) {
    const size_t space = line.find(' ');
    if (line.find('-') < space && line.find(':') > space) in = line.rfind(start, 0) == 0;  // "a-b perms offset dev:..."
    if (in && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

TEST_CASE("a segment for queries reads a page per fault; one for a merge reads ahead", "[postings]") {
  // The kernel's default reads around a faulting page as much as the
  // device's readahead (8 MiB on some machines): under a memory cap every
  // cold page a query touches would read and evict that much.
  TempDir dir;
  SegmentBuilder b(1, 0);
  for (uint32_t d = 0; d < 2000; ++d) {
    const uint32_t doc = b.AddDoc("doc" + std::to_string(d));
    b.AddToken(0, doc, "w" + std::to_string(d % 97), 0);
    b.SetLength(0, doc, 1);
  }
  REQUIRE(WriteFileAtomic(dir.path(), "s.cvs", b.Encode(7)).ok());
  auto queries = Segment::Open(dir.path() + "/s.cvs", 7, 1, 0);
  REQUIRE(queries.ok());
  auto merge = (*queries)->MapAgain(dir.path() + "/s.cvs", ReadAdvice::kSequential);
  REQUIRE(merge.ok());
  const std::string q = MappingFlags((*queries)->file().data()), m = MappingFlags((*merge)->file().data());
  INFO(q << "\n" << m);
  REQUIRE(!q.empty());
  REQUIRE(!m.empty());
  CHECK(q.find(" rr") != std::string::npos);  // MADV_RANDOM
  CHECK(q.find(" sr") == std::string::npos);
  CHECK(m.find(" sr") != std::string::npos);  // MADV_SEQUENTIAL
  CHECK(m.find(" rr") == std::string::npos);
  CHECK((*queries)->FindTerm(0, "w5") == (*merge)->FindTerm(0, "w5"));
}

TEST_CASE("a cold term lookup reads a few pages and not a readahead window", "[postings]") {
  TempDir dir;
  SegmentBuilder b(1, 0);
  for (uint32_t d = 0; d < 60000; ++d) {
    const uint32_t doc = b.AddDoc("doc" + std::to_string(d));
    b.AddToken(0, doc, "term" + std::to_string(d * 7919 % 60000), 0);
    b.AddToken(0, doc, "common", 1);
    b.SetLength(0, doc, 2);
  }
  REQUIRE(WriteFileAtomic(dir.path(), "s.cvs", b.Encode(7)).ok());  // fsynced: its pages are clean
  auto seg = Segment::Open(dir.path() + "/s.cvs", 7, 1, 0);
  REQUIRE(seg.ok());
  const std::string_view file = (*seg)->file();
  const size_t pages = file.size() >> 12;
  REQUIRE(file.size() > (size_t{1} << 20));
  if (!testing::EvictSegmentFiles(dir.path(), file)) {
    WARN("the page cache kept the file (tmpfs?): nothing to measure");
    return;
  }
  // A lookup reads the term offsets and names around the term.
  CHECK((*seg)->FindTerm(0, "term12345") >= 0);
  const size_t read = testing::ResidentPages(file.data(), file.size());
  INFO("file pages " << pages << ", read by one lookup " << read);
  CHECK(read >= 1);
  CHECK(read <= 8);  // the default read-around: 32 pages (128 KiB) up to the whole file (8 MiB)
}

TEST_CASE("stored fields round trip per document, and a segment without them has none", "[postings]") {
  TempDir dir;
  for (const bool with_stored : {true, false}) {
    INFO(with_stored);
    SegmentBuilder b(1, 0);
    std::vector<std::string> stored;
    for (uint32_t d = 0; d < 200; ++d) {
      // Lengths 0 (a document with none of the paths: "{}" in practice,
      // but the segment does not care) up to a few hundred bytes.
      stored.push_back(with_stored ? std::string(d % 13 == 0 ? 0 : d * 3 % 301, static_cast<char>('a' + d % 26)) : "");
      const uint32_t doc = b.AddDoc(std::to_string(d), stored.back());
      b.AddToken(0, doc, "x", 0);
      b.SetLength(0, doc, 1);
    }
    REQUIRE(WriteFileAtomic(dir.path(), "s.cvs", b.Encode(5)).ok());
    auto seg = Segment::Open(dir.path() + "/s.cvs", 5, 1, 0);
    REQUIRE(seg.ok());
    REQUIRE((*seg)->has_stored() == with_stored);
    if (!with_stored) continue;
    for (uint32_t d = 0; d < 200; ++d) CHECK((*seg)->stored(d) == stored[d]);
    // A reused builder keeps no stored bytes of its last batch.
    b.Reset();
    b.AddDoc("only", "{}");
    REQUIRE(WriteFileAtomic(dir.path(), "r.cvs", b.Encode(5)).ok());
    auto reused = Segment::Open(dir.path() + "/r.cvs", 5, 1, 0);
    REQUIRE(reused.ok());
    CHECK((*reused)->stored(0) == "{}");
  }
}

TEST_CASE("a reused builder encodes exactly what a fresh one does", "[postings]") {
  SegmentBuilder reused(1, 1);
  std::string image;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    reused.Reset();
    if (seed % 2 == 0) reused.ReleaseBuffers();  // keeps only the dictionary
    FillBatch(reused, seed);
    reused.Encode(7, image);
    SegmentBuilder fresh(1, 1);
    FillBatch(fresh, seed);
    INFO("batch " << seed);
    CHECK(image == fresh.Encode(7));
  }
}

TEST_CASE("tokens encode exactly as the same postings added whole", "[postings][heavy]") {
  // A batch's tokens are encoded from the sorted log; postings added whole
  // go to per-term lists. Tokens wait for their probe in a window (terms
  // over 40 bytes skip it), interleaved across two fields here. Past
  // kMaxLogTokens the log is moved to lists mid-batch, and a term's
  // postings come from both.
  for (const size_t target : {size_t{20000}, kMaxLogTokens + 50000}) {
    SegmentBuilder by_token(2, 0), by_term(2, 0);
    uint32_t x = 99;
    auto next = [&] { return x = x * 1103515245u + 12345u; };
    size_t tokens = 0;
    std::map<std::pair<uint32_t, std::string>, std::vector<uint32_t>> postings;
    for (uint32_t d = 0; tokens <= target; ++d) {
      const std::string id = std::string("d").append(std::to_string(d));
      const uint32_t doc = by_token.AddDoc(id);
      REQUIRE(by_term.AddDoc(id) == doc);
      postings.clear();
      const uint32_t n = 100 + next() % 400;
      uint32_t p[2] = {0, 0}, len[2] = {0, 0};
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t r = next() >> 8;
        const uint32_t f = i % 3 == 0 ? 1 : 0;
        std::string term = std::string("w").append(std::to_string(r % 97 == 0 ? r % 5000 : r % 60));
        if (r % 13 == 0) term.append(45, 'l');
        p[f] += 1 + (r % 11 == 0);
        ++len[f];
        by_token.AddToken(f, doc, term, p[f]);
        postings[{f, term}].push_back(p[f]);
      }
      tokens += n;
      // The same tokens grouped by term (and field): another order through
      // the window and the log.
      for (const auto& [key, pos] : postings)
        for (uint32_t at : pos) by_term.AddToken(key.first, doc, key.second, at);
      for (uint32_t f = 0; f < 2; ++f) {
        by_token.SetLength(f, doc, len[f]);
        by_term.SetLength(f, doc, len[f]);
      }
    }
    INFO(tokens << " tokens");
    CHECK(by_token.Encode(3) == by_term.Encode(3));
  }
}

TEST_CASE("fields share the builder's dictionary; each encodes only its own terms", "[postings][heavy]") {
  // Field 0 draws from a large vocabulary; field 1 mostly from three of
  // its words and rarely from 40 more (its terms are a small part of the
  // dictionary, and words common in field 0 are rare in it); field 2 from
  // words no other field has; field 3 only in the first batch. Batches
  // reuse the builder (its dictionary holds every earlier batch's terms)
  // and hold enough documents for pair tables.
  SegmentBuilder b(4, 0);
  std::mt19937 rng(5);
  auto zipf = [&](int n) {  // rank r with probability ~ 1 / (r + 1)
    return static_cast<int>(std::exp(std::uniform_real_distribution<double>(0, std::log(n + 1.0))(rng))) - 1;
  };
  for (int batch = 0; batch < 3; ++batch) {
    b.Reset();
    // field -> term -> doc -> positions; field -> (term, next term) -> docs.
    std::map<std::string, std::map<uint32_t, std::vector<uint32_t>>> want[4];
    std::map<std::pair<std::string, std::string>, std::set<uint32_t>> want_pairs[4];
    const uint32_t ndocs = 1100;
    for (uint32_t d = 0; d < ndocs; ++d) {
      const uint32_t doc = b.AddDoc("b" + std::to_string(batch) + "d" + std::to_string(d));
      for (uint32_t f = 0; f < 4; ++f) {
        if (f == 3 && batch > 0) continue;
        const uint32_t n = 1 + static_cast<uint32_t>(rng() % 30);
        std::string prev;
        for (uint32_t p = 0; p < n; ++p) {
          std::string t;
          if (f == 0 || f == 3) t = "w" + std::to_string(zipf(3000));
          else if (f == 1) t = "w" + std::to_string(rng() % 50 == 0 ? 4 + rng() % 40 : 1 + rng() % 3);
          else t = "x" + std::to_string(zipf(300));
          b.AddToken(f, doc, t, p);
          want[f][t][doc].push_back(p);
          if (p > 0) want_pairs[f][{prev, t}].insert(doc);
          prev = t;
        }
        b.SetLength(f, doc, n);
      }
    }
    TempDir dir;
    REQUIRE(WriteFileAtomic(dir.path(), "s.cvs", b.Encode(3)).ok());
    auto opened = Segment::Open(dir.path() + "/s.cvs", 3, 4, 0);
    REQUIRE(opened.ok());
    const Segment& s = **opened;
    std::vector<uint32_t> pos;
    for (uint32_t f = 0; f < 4; ++f) {
      INFO("batch " << batch << " field " << f);
      REQUIRE(s.term_count(f) == want[f].size());
      uint32_t i = 0;
      for (const auto& [term, docs] : want[f]) {
        REQUIRE(s.term(f, i) == term);
        std::vector<uint32_t> got;
        s.ForEachDoc(s.entry(f, i), [&](uint32_t d) { got.push_back(d); });
        REQUIRE(got.size() == docs.size());
        const TfArray tfs = s.Tfs(f, i);
        uint32_t rank = 0;
        for (const auto& [doc, positions] : docs) {
          CHECK(got[rank] == doc);
          CHECK(tfs[rank] == positions.size());
          PositionReader(s, f, i).Decode(rank, pos);
          CHECK(pos == positions);
          ++rank;
        }
        ++i;
      }
      // Pair tables: every pair of the field's common terms, exactly.
      size_t answered = 0;
      for (uint32_t x = 0; x < s.term_count(f); ++x) {
        for (uint32_t y = 0; y < s.term_count(f); ++y) {
          ConstBitmap got;
          if (!s.PairPostings(f, x, y, &got)) continue;
          ++answered;
          std::vector<uint32_t> docs(roaring_bitmap_get_cardinality(got.get()));
          roaring_bitmap_to_uint32_array(got.get(), docs.data());
          auto it = want_pairs[f].find({std::string(s.term(f, x)), std::string(s.term(f, y))});
          CHECK(std::set<uint32_t>(docs.begin(), docs.end()) ==
                (it == want_pairs[f].end() ? std::set<uint32_t>{} : it->second));
        }
      }
      if (f < 3 || batch == 0) CHECK(answered > 0);
    }
  }
}

// A segment of one document in which names[i] is at position i.
Result<std::shared_ptr<const Segment>> OneDocumentSegment(const TempDir& dir, const std::vector<std::string>& names) {
  SegmentBuilder b(1, 0);
  const uint32_t doc = b.AddDoc("d");
  for (uint32_t i = 0; i < names.size(); ++i) b.AddToken(0, doc, names[i], i);
  b.SetLength(0, doc, static_cast<uint32_t>(names.size()));
  REQUIRE(WriteFileAtomic(dir.path(), "s.cvs", b.Encode(1)).ok());
  auto s = Segment::Open(dir.path() + "/s.cvs", 1, 1, 0);
  REQUIRE(s.ok());
  return s;
}

TEST_CASE("the dictionary is sorted bytewise, with shared prefixes and NUL bytes", "[postings]") {
  using namespace std::string_literals;
  // Names equal in their first 8 bytes, NULs where the sort pads short
  // names, and bytes above 0x7f (unsigned order).
  const std::vector<std::string> names = {"abcdefgh"s, "abcdefgh\0"s, "abcdefghz"s, "abcdefgha"s, "ab"s, "ab\0"s,
                                          "ab\0\0x"s, "a\xff"s, "a\x01"s, "b"s, "abcdefg"s, "abcdefgg\xff"s};
  TempDir dir;
  auto s = OneDocumentSegment(dir, names);
  std::vector<std::string> want = names;
  std::sort(want.begin(), want.end());
  std::vector<std::string> got;
  for (uint32_t i = 0; i < (*s)->term_count(0); ++i) got.emplace_back((*s)->term(0, i));
  CHECK(got == want);
  for (const auto& n : names) CHECK((*s)->FindTerm(0, n) >= 0);
}

TEST_CASE("dictionary lookups equal a lower bound over the sorted names", "[postings]") {
  // Enough names for many sampled keys (Segment::kKeyStride), runs of names
  // that share their first 8 bytes, NULs and bytes above 0x7f; probes that
  // are absent, prefixes, and extensions of the names.
  using namespace std::string_literals;
  std::mt19937 rng(5);
  std::set<std::string> unique;
  const std::string alphabet = {'\0', '\x01', 'a', 'z', '\x7f', '\x80', '\xff'};
  while (unique.size() < 3000) {
    std::string name = rng() % 3 == 0 ? "sharedpf"s : ""s;
    for (uint32_t k = 1 + rng() % 10; k > 0; --k) name += alphabet[rng() % alphabet.size()];
    unique.insert(name);
  }
  const std::vector<std::string> sorted(unique.begin(), unique.end());
  TempDir dir;
  auto s = OneDocumentSegment(dir, sorted);
  REQUIRE((*s)->term_count(0) == sorted.size());
  std::vector<std::string> probes = {""s, "\0"s, "\xff\xff\xff\xff\xff\xff\xff\xff\xff"s, "sharedpf"s, "sharedp"s};
  for (const auto& n : sorted) {
    probes.push_back(n);
    probes.push_back(n + "\0"s);
    probes.push_back(n + "\xff"s);
    probes.push_back(n.substr(0, n.size() / 2));
  }
  for (const auto& p : probes) {
    const auto at = std::lower_bound(sorted.begin(), sorted.end(), p) - sorted.begin();
    CHECK((*s)->LowerBound(0, p) == at);
    const bool present = at < static_cast<std::ptrdiff_t>(sorted.size()) && sorted[at] == p;
    CHECK((*s)->FindTerm(0, p) == (present ? at : -1));
  }
}

TEST_CASE("posting lists read back alike on both sides of the short-list bound", "[postings]") {
  // Lengths around kShortList (varint doc numbers up to it, a frozen
  // bitmap above), lists crossing 65536-doc chunks, consecutive docs (run
  // containers), and wide term frequencies in a short and a long list.
  TempDir dir;
  constexpr uint32_t kDocs = 140000;
  SegmentBuilder b(1, 0);
  for (uint32_t d = 0; d < kDocs; ++d) b.AddDoc(std::to_string(d));
  struct Want {
    std::string term;
    std::vector<uint32_t> docs, tfs;
  };
  std::vector<Want> wants;
  // 30000 spread: bitset containers.
  for (uint32_t n :
       {1u, 2u, 3u, kShortList - 1, kShortList, kShortList + 1, 2 * kShortList, 2 * kShortList + 1, 5000u, 30000u}) {
    for (bool dense : {false, true}) {
      Want w;
      w.term = std::to_string(n).append(dense ? "dense" : "spread");
      for (uint32_t j = 0; j < n; ++j) {
        w.docs.push_back(dense ? 65500 + j : j * ((kDocs - 1) / n) + n % 7);
        w.tfs.push_back(1 + j % 3 + (j == n / 2 && n % 2 == 1 ? 300 : 0));
      }
      wants.push_back(std::move(w));
    }
  }
  // Long lists of ~7, ~13, ~25 and ~41 positions a posting (a byte each):
  // skip tables of every 8th, 4th, 2nd and every posting (SkipShift).
  const std::vector<std::pair<uint32_t, uint32_t>> strides = {{6, 3}, {12, 2}, {24, 1}, {40, 0}};
  for (const auto& [tf, shift] : strides) {
    Want w{"stride" + std::to_string(shift), {}, {}};
    for (uint32_t j = 0; j < 300; ++j) {
      w.docs.push_back(j * 401 + 3);
      w.tfs.push_back(tf + j % 3);
    }
    wants.push_back(std::move(w));
  }
  // A bitset container in the last, partial chunk (MarkDocs writes only
  // the words below kDocs).
  Want tail{"tailbits", {}, {}};
  for (uint32_t d = 131072; d < kDocs; d += 2) {
    tail.docs.push_back(d);
    tail.tfs.push_back(1);
  }
  wants.push_back(std::move(tail));
  std::sort(wants.begin(), wants.end(), [](const Want& x, const Want& y) { return x.term < y.term; });
  std::vector<uint32_t> lens(kDocs, 0);
  // Fed document by document, as documents are indexed: (want, rank).
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> by_doc(kDocs);
  for (uint32_t i = 0; i < wants.size(); ++i)
    for (uint32_t j = 0; j < wants[i].docs.size(); ++j) by_doc[wants[i].docs[j]].emplace_back(i, j);
  for (uint32_t d = 0; d < kDocs; ++d)
    for (const auto& [i, j] : by_doc[d]) {
      const Want& w = wants[i];
      for (uint32_t k = 0; k < w.tfs[j]; ++k) b.AddToken(0, d, w.term, 3 * k + j % 5);
      lens[d] += w.tfs[j];
    }
  for (uint32_t d = 0; d < kDocs; ++d) b.SetLength(0, d, lens[d] + d % 11);
  REQUIRE(WriteFileAtomic(dir.path(), "s.cvs", b.Encode(7)).ok());
  auto opened = Segment::Open(dir.path() + "/s.cvs", 7, 1, 0);
  REQUIRE(opened.ok());
  const Segment& s = **opened;
  REQUIRE(s.term_count(0) == wants.size());
  std::vector<uint32_t> pos;
  for (uint32_t i = 0; i < wants.size(); ++i) {
    const Want& w = wants[i];
    INFO(w.term);
    REQUIRE(s.term(0, i) == w.term);
    const TermEntry e = s.entry(0, i);
    REQUIRE(e.doc_freq == w.docs.size());
    CHECK((e.bitmap_len == 0) == (w.docs.size() <= kShortList));
    // ForEachDoc: the doc numbers in order.
    std::vector<uint32_t> got;
    s.ForEachDoc(e, [&](uint32_t d) { got.push_back(d); });
    CHECK(got == w.docs);
    // MarkDocs: the same set in a dense bitset (over marks left in it).
    std::vector<uint64_t> words((kDocs + 63) / 64, 0);
    words[5] = 1;  // doc 320: already marked stays marked
    s.MarkDocs(e, words);
    std::vector<uint32_t> marked;
    for (uint32_t d = 0; d < words.size() * 64; ++d)
      if ((words[d >> 6] >> (d & 63) & 1) != 0) marked.push_back(d);
    std::vector<uint32_t> want_marked = w.docs;
    want_marked.push_back(320);
    std::sort(want_marked.begin(), want_marked.end());
    want_marked.erase(std::unique(want_marked.begin(), want_marked.end()), want_marked.end());
    CHECK(marked == want_marked);
    // Postings: the same set as a bitmap the library builds, usable in
    // the algebra queries do, and freed (ASan checks the one allocation).
    auto bm = s.Postings(0, i);
    REQUIRE(bm);
    Bitmap lib(roaring_bitmap_of_ptr(w.docs.size(), w.docs.data()));
    CHECK(roaring_bitmap_equals(bm.get(), lib.get()));
    CHECK(roaring_bitmap_get_cardinality(bm.get()) == w.docs.size());
    CHECK(roaring_bitmap_contains(bm.get(), w.docs.back()));
    CHECK_FALSE(roaring_bitmap_contains(bm.get(), w.docs.back() + 1));
    Bitmap evens(roaring_bitmap_from_range(0, kDocs, 2));
    Bitmap both(roaring_bitmap_and(bm.get(), evens.get()));
    Bitmap either(roaring_bitmap_or(bm.get(), evens.get()));
    uint64_t even = 0;
    for (uint32_t d : w.docs) even += d % 2 == 0;
    CHECK(roaring_bitmap_get_cardinality(both.get()) == even);
    CHECK(roaring_bitmap_get_cardinality(either.get()) == kDocs / 2 + w.docs.size() - even);
    // Term frequencies, positions and the block maxima.
    const TfArray tfs = s.Tfs(0, i);
    CHECK(tfs.width == (*std::max_element(w.tfs.begin(), w.tfs.end()) < 256 ? 1u : 4u));
    BlockMax whole;
    const BlockMax* blocks = s.Blocks(0, i, whole);
    for (uint32_t r = 0; r < w.docs.size(); ++r) {
      REQUIRE(tfs[r] == w.tfs[r]);
      PositionReader(s, 0, i).Decode(r, pos);
      REQUIRE(pos.size() == w.tfs[r]);
      CHECK(pos.back() == 3 * (w.tfs[r] - 1) + r % 5);
      const BlockMax bm_r = blocks[r / kPostingBlock];  // a copy: BlockMax is packed
      CHECK(bm_r.max_tf >= w.tfs[r]);
      CHECK(bm_r.min_len <= s.lengths(0)[w.docs[r]]);
      if (r % kPostingBlock == kPostingBlock - 1 || r + 1 == w.docs.size()) CHECK(bm_r.last_doc == w.docs[r]);
    }
    CHECK(e.whole.last_doc == w.docs.back());
    CHECK(e.whole.max_tf == *std::max_element(w.tfs.begin(), w.tfs.end()));
    if (w.term.starts_with("stride")) CHECK(e.skip_shift == static_cast<uint32_t>(w.term.back() - '0'));
    if (w.term == "5000spread") CHECK(e.skip_shift == 4);
  }
}

TEST_CASE("frozen bitmaps are written exactly as CRoaring writes them", "[postings]") {
  uint32_t x = 12345;
  auto next = [&] { return x = x * 1103515245u + 12345u; };
  for (int round = 0; round < 3000; ++round) {
    // Sparse, dense (runs), around the array/run threshold, across chunks, above 4096.
    std::vector<uint32_t> docs;
    const uint32_t n = round % 50 == 0 ? 4000 + next() % 5000 : 1 + next() % 300;
    const uint32_t gap = 1 + (round % 4 == 0 ? 0 : next() % (round % 3 == 0 ? 3 : 900));
    uint32_t d = (round % 7 == 0 ? 65530 : 0) + next() % 100;
    for (uint32_t i = 0; i < n; ++i) {
      docs.push_back(d);
      d += round % 5 == 0 ? 1 + next() % 2 : gap;
    }
    std::string mine = "xyz";
    AppendFrozenBitmap(mine, docs);
    Bitmap bm(roaring_bitmap_of_ptr(docs.size(), docs.data()));
    roaring_bitmap_run_optimize(bm.get());
    std::string lib(roaring_bitmap_frozen_size_in_bytes(bm.get()), '\0');
    roaring_bitmap_frozen_serialize(bm.get(), lib.data());
    INFO("round " << round << " n " << n);
    REQUIRE(mine == "xyz" + lib);
  }
}

TEST_CASE("frozen bitmaps are read in place exactly as CRoaring reads them", "[postings]") {
  // The reader must agree on this library, or every query would take the
  // slower fallback without anyone noticing.
  REQUIRE(FrozenReaderAgrees());
  uint32_t x = 777;
  auto next = [&] { return x = x * 1103515245u + 12345u; };
  for (int round = 0; round < 2000; ++round) {
    // Arrays, runs and bitsets, alone and mixed over several chunks.
    Bitmap bm = NewBitmap();
    const int chunks = 1 + round % 4;
    for (int c = 0; c < chunks; ++c) {
      const uint32_t base = (next() % 8) * 65536;
      const uint32_t kind = next() % 3, n = kind == 2 ? 5000 + next() % 20000 : 1 + next() % 3000;
      for (uint32_t i = 0, d = base + next() % 100; i < n && d < base + 65536; ++i)
        roaring_bitmap_add(bm.get(), kind == 1 ? d++ : (d += 1 + next() % (kind == 2 ? 4 : 40)));
    }
    roaring_bitmap_run_optimize(bm.get());
    std::vector<uint32_t> want(roaring_bitmap_get_cardinality(bm.get()));
    roaring_bitmap_to_uint32_array(bm.get(), want.data());
    std::string buf(roaring_bitmap_frozen_size_in_bytes(bm.get()), '\0');
    roaring_bitmap_frozen_serialize(bm.get(), buf.data());
    std::vector<uint32_t> got;
    ForEachFrozen(buf.data(), buf.size(), [&](uint32_t v) { got.push_back(v); });
    INFO("round " << round);
    REQUIRE(got == want);
  }
}

// Skipping varints reads whole words (8 bytes) only while that many
// varints remain: every count from every seventh start lands where decoding one
// varint at a time does, on streams of short, long and mixed varints held
// in a buffer of exactly their size (ASan reports any read past it).
TEST_CASE("skipping varints lands where decoding them does", "[postings]") {
  std::mt19937 rng(3);
  for (int shape = 0; shape < 4; ++shape) {
    std::string bytes;
    std::vector<uint32_t> values;
    for (int i = 0; i < 300; ++i) {
      const uint32_t bits = shape == 0 ? 7 : shape == 1 ? 14 : shape == 2 ? 1 + rng() % 32 : (i % 17 == 0 ? 32 : 5);
      const uint32_t v = static_cast<uint32_t>(rng() & (bits == 32 ? ~0u : (1u << bits) - 1));
      values.push_back(v);
      PutVarint(bytes, v);
    }
    const std::vector<uint8_t> buf(bytes.begin(), bytes.end());
    std::vector<const uint8_t*> at{buf.data()};  // at[i]: the start of varint i
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t v;
      at.push_back(GetVarint(at.back(), &v));
      REQUIRE(v == values[i]);
    }
    REQUIRE(at.back() == buf.data() + buf.size());
    for (size_t from = 0; from < values.size(); from += 7)
      for (size_t n = 0; from + n <= values.size(); ++n) {
        INFO("shape " << shape << " from " << from << " n " << n);
        REQUIRE(SkipVarints(at[from], n) == at[from + n]);
      }
  }
}

}  // namespace
}  // namespace corvid::postings
