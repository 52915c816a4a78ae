// The cluster log's entry format (cluster/log_entry.h): round trips, and
// every truncation gives Corruption (arbitrary bytes: tests/fuzz).
#include "cluster/log_entry.h"

#include <catch2/catch.hpp>

namespace corvid::cluster {

TEST_CASE("a write entry round-trips with its preconditions", "[cluster][log]") {
  storage::WriteRequest r;
  r.single = true;
  storage::WriteOp put;
  put.collection = "users";
  put.id = "ü/1";
  put.body = R"({"a":1})";
  put.if_match = 42;
  storage::WriteOp del;
  del.kind = storage::WriteKind::kDelete;
  del.collection = "users";
  del.id = "x";
  del.if_match_any = true;
  del.if_none_match_any = true;
  r.ops = {put, del};
  std::string e;
  EncodeHeader({EntryType::kWrite, 7, 123456789, "n1"}, e);
  EncodeWritePayload(r, e);

  EntryHeader h;
  std::string_view payload;
  REQUIRE(DecodeHeader(e, h, payload).ok());
  CHECK(h.type == EntryType::kWrite);
  CHECK(h.request_id == 7);
  CHECK(h.deadline_ms == 123456789);
  CHECK(h.origin == "n1");
  storage::WriteRequest back;
  REQUIRE(DecodeWritePayload(payload, back).ok());
  REQUIRE(back.ops.size() == 2);
  CHECK(back.single);
  CHECK(back.ops[0].kind == storage::WriteKind::kPut);
  CHECK(back.ops[0].id == "ü/1");
  CHECK(back.ops[0].body == R"({"a":1})");
  CHECK(back.ops[0].if_match == std::optional<uint64_t>(42));
  CHECK(back.ops[1].kind == storage::WriteKind::kDelete);
  CHECK(!back.ops[1].if_match);
  CHECK(back.ops[1].if_match_any);
  CHECK(back.ops[1].if_none_match_any);
}

TEST_CASE("chunk, commit and index entries round-trip", "[cluster][log]") {
  std::string c;
  EncodeChunkPayload(3, "abc", c);
  uint32_t index;
  std::string_view bytes;
  REQUIRE(DecodeChunkPayload(c, index, bytes).ok());
  CHECK(index == 3);
  CHECK(bytes == "abc");
  std::string m;
  EncodeCommitPayload(4, 1 << 20, m);
  uint32_t chunks;
  uint64_t total;
  REQUIRE(DecodeCommitPayload(m, chunks, total).ok());
  CHECK(chunks == 4);
  CHECK(total == 1 << 20);
  std::string p, name, def;
  EncodeIndexPayload("by_name", R"({"type":"search"})", p);
  REQUIRE(DecodeIndexPayload(p, EntryType::kIndexPut, name, def).ok());
  CHECK(name == "by_name");
  CHECK(def == R"({"type":"search"})");
  std::string d;
  EncodeIndexPayload("gone", {}, d);
  REQUIRE(DecodeIndexPayload(d, EntryType::kIndexDelete, name, def).ok());
  CHECK(name == "gone");
  CHECK(def.empty());
}

TEST_CASE("every truncation of an entry is Corruption", "[cluster][log]") {
  storage::WriteRequest r;
  r.single = false;
  for (int i = 0; i < 5; ++i) {
    storage::WriteOp op;
    op.collection = "c";
    op.id = std::to_string(i);
    op.body = "{\"i\":" + std::to_string(i) + "}";
    r.ops.push_back(op);
  }
  std::string e;
  EncodeHeader({EntryType::kWrite, 1, 2, "node"}, e);
  const size_t header = e.size();
  EncodeWritePayload(r, e);
  for (size_t n = 0; n < e.size(); ++n) {
    EntryHeader h;
    std::string_view payload;
    const std::string cut = e.substr(0, n);
    Status s = DecodeHeader(cut, h, payload);
    if (n < header) {
      CHECK(s.code() == StatusCode::kCorruption);
      continue;
    }
    REQUIRE(s.ok());
    storage::WriteRequest back;
    CHECK(DecodeWritePayload(payload, back).code() == StatusCode::kCorruption);
  }
  // Arbitrary bytes: the log_entry fuzz target (tests/fuzz).
}

}  // namespace corvid::cluster
