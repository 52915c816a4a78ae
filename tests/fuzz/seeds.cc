// Writes the binary seeds of the reader targets with Corvid's own encoders,
// so that each corpus starts from real, valid files:
//   fuzz_seeds <dir>   (scripts/fuzz.sh passes tests/fuzz/corpus)
// writes <dir>/<target>/<name> for body_format, log_entry, backup,
// manifest, segment and mapreduce_format. The text targets' seeds are
// written by hand. Deterministic: running it again rewrites the same bytes.
#include <roaring/roaring.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cluster/log_entry.h"
#include "mapreduce/format.h"
#include "postings/manifest.h"
#include "postings/segment.h"
#include "storage/backup_format.h"
#include "storage/body_format.h"
#include "storage/format.h"
#include "tests/fuzz/fuzz_util.h"

namespace fs = std::filesystem;
using namespace corvid;

namespace {

fs::path root;

void Seed(const char* target, const std::string& name, const std::string& bytes) {
  const fs::path dir = root / target;
  fs::create_directories(dir);
  fuzz::WriteFile(dir / name, bytes);
}

// The same dictionary as body_format_fuzzer.cc's TheDictionary (id 1).
std::shared_ptr<const storage::body::Dictionary> Dictionary() {
  std::string content;
  for (int i = 0; i < 40; ++i)
    content += R"({"id":"doc-)" + std::to_string(i) +
               R"(","title":"The quick brown fox","body":"jumps over the lazy dog","tags":["a","b"],"n":)" +
               std::to_string(i * 7) + "}";
  return storage::body::Dictionary::Load(1, content, 3);
}

void BodyFormat() {
  const std::string small =
      R"({"id":"doc-7","title":"The quick brown fox","body":"jumps over the lazy dog, the lazy dog, the lazy dog",)"
      R"("tags":["a","b"],"n":49,"more":"The quick brown fox jumps over the lazy dog. The quick brown fox."})";
  std::string large = R"({"id":"big","title":"a large document","n":1,"items":[)";
  for (int i = 0; i < 600; ++i) large += (i ? "," : "") + std::string(R"({"k":)") + std::to_string(i) + R"(,"v":"value )" + std::to_string(i * 31) + "\"}";
  large += R"(],"z":"end"})";
  auto dict = Dictionary();
  struct Case {
    const char* name;
    const std::string* json;
    const storage::body::Dictionary* dict;
    size_t threshold;
    uint8_t options;
  };
  const Case cases[] = {
      {"raw", &small, nullptr, SIZE_MAX, 1},
      {"zstd", &small, nullptr, 0, 2},
      {"dict", &small, dict.get(), 0, 3},
      {"structured", &large, nullptr, 1024, 2},
      {"structured-fix", &large, nullptr, 1024, 4 | 3},
      {"structured-dict", &large, dict.get(), 0, 1},
  };
  for (const Case& c : cases) {
    std::string stored;
    const uint8_t flags = storage::body::Encode(*c.json, c.dict, 1, c.threshold, stored);
    Seed("body_format", c.name, std::string(1, char(flags)) + char(c.options) + stored);
  }
  // Round-trip mode: options bit 7 (+ bit 6: padded to be structured, bit 3: dictionary).
  Seed("body_format", "roundtrip", std::string("\x00\x82", 2) + small);
  Seed("body_format", "roundtrip-pad", std::string("\x01\xc1", 2) + R"({"a":[1,2,{"b":null}],"n":-0.5e3,"z":"\u00e9"})");
  Seed("body_format", "roundtrip-dict", std::string("\x00\x8b", 2) + small);
  // Padded last (bit 5): the object's members are its head; names {"id"}.
  Seed("body_format", "roundtrip-head", std::string("\x00\xe1", 2) + R"({"id":"x","n":[1,{"b":"}"}],"id.x":2})");
  // A head, read as one (decode mode, names {"body","id","title"}).
  const std::string head = storage::body::HeadOf(large);
  Seed("body_format", "head", std::string(1, '\0') + char(16 | 2) + head);
}

void LogEntry() {
  cluster::EntryHeader h;
  h.request_id = 0x0102030405060708ull;
  h.deadline_ms = 1700000000000;
  h.origin = "node-1";
  auto entry = [&](cluster::EntryType type) {
    std::string out;
    h.type = type;
    cluster::EncodeHeader(h, out);
    return out;
  };
  storage::WriteRequest w;
  w.single = true;
  storage::WriteOp put;
  put.collection = "c";
  put.id = "doc-1";
  put.body = R"({"a":1})";
  put.if_match = 7;
  w.ops.push_back(put);
  std::string write = entry(cluster::EntryType::kWrite);
  cluster::EncodeWritePayload(w, write);
  Seed("log_entry", "write", write);
  w.single = false;
  storage::WriteOp del;
  del.kind = storage::WriteKind::kDelete;
  del.collection = "c";
  del.id = "doc-2";
  del.if_none_match_any = true;
  w.ops.push_back(del);
  std::string bulk = entry(cluster::EntryType::kWrite);
  cluster::EncodeWritePayload(w, bulk);
  Seed("log_entry", "bulk", bulk);
  std::string chunk = entry(cluster::EntryType::kChunk);
  cluster::EncodeChunkPayload(3, "a slice of a write payload", chunk);
  Seed("log_entry", "chunk", chunk);
  std::string commit = entry(cluster::EntryType::kCommit);
  cluster::EncodeCommitPayload(4, 123456, commit);
  Seed("log_entry", "commit", commit);
  std::string index_put = entry(cluster::EntryType::kIndexPut);
  cluster::EncodeIndexPayload("by_month", R"({"type":"search","collection":"c","fields":{"t":{}}})", index_put);
  Seed("log_entry", "index-put", index_put);
  std::string index_delete = entry(cluster::EntryType::kIndexDelete);
  cluster::EncodeIndexPayload("by_month", "", index_delete);
  Seed("log_entry", "index-delete", index_delete);
}

void Backup() {
  auto write = [](const std::vector<std::pair<std::string, std::string>>& parts) {
    std::string file;
    storage::BackupWriter w(
        [&file](std::string&& piece) {
          file += piece;
          return Status::Ok();
        },
        42, 7);
    for (const auto& [name, bytes] : parts) {
      if (!w.BeginPart(name).ok() || !w.Write(bytes).ok() || !w.EndPart().ok()) std::abort();
    }
    if (!w.Finish().ok()) std::abort();
    return file;
  };
  Seed("backup", "empty", write({}));
  Seed("backup", "two-parts", write({{"store/data.mdb", std::string(300, 'x')}, {"indexes/s/current", "v1\n"}}));
  Seed("backup", "nested", write({{"indexes/m/v1/definition.json", R"({"type":"mapreduce"})"},
                                  {"indexes/m/v1/state/data.mdb", "\x01\x02\x03"},
                                  {"a", ""}}));
}

void Manifest() {
  using namespace postings;
  Bitmap none = NewBitmap();
  Bitmap some = NewBitmap();
  for (uint32_t d : {1u, 5u, 70000u}) roaring_bitmap_add(some.get(), d);
  Bitmap run = NewBitmap();
  roaring_bitmap_add_range(run.get(), 100, 5000);
  roaring_bitmap_run_optimize(run.get());
  const ManifestEntry two[] = {{1, 10, none.get()}, {2, 80000, some.get()}};
  Seed("manifest", "two", EncodeManifest(0xfeedfacecafebeefull, 99, 3, two));
  const ManifestEntry runs[] = {{7, 6000, run.get()}};
  Seed("manifest", "run", EncodeManifest(1, 2, 8, runs));
  Seed("manifest", "empty", EncodeManifest(5, 0, 1, {}));
}

void SegmentSeeds() {
  using namespace postings;
  {
    SegmentBuilder b(2, 1);
    for (uint32_t d = 0; d < 90; ++d) {
      const uint32_t doc = b.AddDoc("doc" + std::to_string(d));
      uint32_t len = 0;
      for (uint32_t p = 0; p < (d % 3) + 1; ++p, ++len) b.AddToken(0, doc, "a", p * 2);
      if (d % 4 == 0) b.AddToken(0, doc, "brown", 10), ++len;
      b.SetLength(0, doc, len);
      if (d % 5 == 0) {
        b.AddToken(1, doc, "fox", 0);
        b.SetLength(1, doc, 1);
      }
      if (d % 2 == 0) b.AddNumber(0, doc, Number{1000.0 - d});
    }
    Seed("segment", "two-text-one-number", b.Encode(42));
  }
  {
    SegmentBuilder b(1, 0);
    const uint32_t doc = b.AddDoc("only", R"({"title":"x"})");
    b.AddToken(0, doc, "only", 0);
    b.SetLength(0, doc, 1);
    Seed("segment", "one-doc-stored", b.Encode(7));
  }
  {
    SegmentBuilder b(0, 0);
    Seed("segment", "empty", b.Encode(1));
  }
}

void MapReduceFormat() {
  namespace f = mapreduce::format;
  std::string s;
  for (uint64_t v : {0ull, 1ull, 127ull, 128ull, 300ull, 1ull << 35, ~0ull}) f::PutVarint(s, v);
  Seed("mapreduce_format", "varints", s);
  std::string keys;
  f::PutKeyInt(keys, 9007199254740993ll);
  f::PutKeyDouble(keys, -2.5);
  f::PutKeyInt(keys, -1);
  f::PutKeyDouble(keys, 1e308);
  // Only the 16-byte bodies (without the tag bytes).
  std::string bodies;
  for (size_t at = 0; at < keys.size(); at += 17) bodies += keys.substr(at + 1, 16);
  Seed("mapreduce_format", "numbers", bodies);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  root = argv[1];
  BodyFormat();
  LogEntry();
  Backup();
  Manifest();
  SegmentSeeds();
  MapReduceFormat();
  return 0;
}
