#include "cluster/log_entry.h"

#include "storage/format.h"

namespace corvid::cluster {

namespace {

constexpr uint8_t kVersion = 1;
using storage::format::GetLE;
using storage::format::PutLE;

void PutString(std::string& out, std::string_view s) {
  PutLE(out, s.size(), 4);
  out.append(s);
}

// Reads from the front of `in`, failing once anything would run past it.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool U(int bytes, uint64_t& v) {
    if (in_.size() < size_t(bytes)) return false;
    v = GetLE(in_.data(), bytes);
    in_.remove_prefix(bytes);
    return true;
  }
  bool Str(int len_bytes, std::string_view& s) {
    uint64_t n;
    if (!U(len_bytes, n) || n > in_.size()) return false;
    s = in_.substr(0, n);
    in_.remove_prefix(n);
    return true;
  }
  std::string_view rest() const { return in_; }
  bool empty() const { return in_.empty(); }

 private:
  std::string_view in_;
};

Status Bad(std::string_view what) { return Status::Corruption("log entry: " + std::string(what)); }

}  // namespace

void EncodeHeader(const EntryHeader& h, std::string& out) {
  out.push_back(char(kVersion));
  out.push_back(char(h.type));
  PutLE(out, h.request_id, 8);
  PutLE(out, uint64_t(h.deadline_ms), 8);
  PutLE(out, h.origin.size(), 2);
  out.append(h.origin);
}

void EncodeWritePayload(const storage::WriteRequest& request, std::string& out) {
  size_t bytes = 5;
  for (const auto& op : request.ops) bytes += 22 + op.collection.size() + op.id.size() + op.body.size();
  out.reserve(out.size() + bytes);
  out.push_back(char(request.single ? 1 : 0));
  PutLE(out, request.ops.size(), 4);
  for (const auto& op : request.ops) {
    out.push_back(char(op.kind == storage::WriteKind::kPut ? 0 : 1));
    const uint8_t conditions = (op.if_match ? 1 : 0) | (op.if_match_any ? 2 : 0) | (op.if_none_match_any ? 4 : 0);
    out.push_back(char(conditions));
    if (op.if_match) PutLE(out, *op.if_match, 8);
    PutString(out, op.collection);
    PutString(out, op.id);
    PutString(out, op.body);
  }
}

void EncodeChunkPayload(uint32_t index, std::string_view bytes, std::string& out) {
  PutLE(out, index, 4);
  out.append(bytes);
}

void EncodeCommitPayload(uint32_t chunks, uint64_t bytes, std::string& out) {
  PutLE(out, chunks, 4);
  PutLE(out, bytes, 8);
}

void EncodeIndexPayload(std::string_view name, std::string_view definition, std::string& out) {
  PutString(out, name);
  if (!definition.empty()) PutString(out, definition);
}

Status DecodeHeader(std::string_view entry, EntryHeader& h, std::string_view& payload) {
  Reader r(entry);
  uint64_t version, type, deadline;
  std::string_view origin;
  if (!r.U(1, version) || !r.U(1, type) || !r.U(8, h.request_id) || !r.U(8, deadline) || !r.Str(2, origin))
    return Bad("truncated header");
  if (version != kVersion) return Bad("unknown version " + std::to_string(version));
  if (type < uint64_t(EntryType::kWrite) || type > uint64_t(EntryType::kIndexDelete))
    return Bad("unknown type " + std::to_string(type));
  h.type = EntryType(type);
  h.deadline_ms = int64_t(deadline);
  h.origin.assign(origin);
  payload = r.rest();
  return Status::Ok();
}

Status DecodeWritePayload(std::string_view payload, storage::WriteRequest& request) {
  Reader r(payload);
  uint64_t single, count;
  if (!r.U(1, single) || !r.U(4, count) || single > 1) return Bad("write header");
  // Each op takes at least 14 bytes: a count beyond that is a lie.
  if (count > payload.size() / 14) return Bad("op count");
  request.single = single == 1;
  request.ops.clear();
  request.ops.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t kind, conditions;
    if (!r.U(1, kind) || !r.U(1, conditions) || kind > 1 || conditions > 7) return Bad("op header");
    storage::WriteOp op;
    op.kind = kind == 0 ? storage::WriteKind::kPut : storage::WriteKind::kDelete;
    if (conditions & 1) {
      uint64_t e;
      if (!r.U(8, e)) return Bad("op etag");
      op.if_match = e;
    }
    op.if_match_any = conditions & 2;
    op.if_none_match_any = conditions & 4;
    std::string_view coll, id, body;
    if (!r.Str(4, coll) || !r.Str(4, id) || !r.Str(4, body)) return Bad("op strings");
    op.collection.assign(coll);
    op.id.assign(id);
    op.body.assign(body);
    request.ops.push_back(std::move(op));
  }
  if (!r.empty()) return Bad("trailing bytes");
  return Status::Ok();
}

Status DecodeChunkPayload(std::string_view payload, uint32_t& index, std::string_view& bytes) {
  Reader r(payload);
  uint64_t i;
  if (!r.U(4, i)) return Bad("chunk header");
  index = uint32_t(i);
  bytes = r.rest();
  return Status::Ok();
}

Status DecodeCommitPayload(std::string_view payload, uint32_t& chunks, uint64_t& bytes) {
  Reader r(payload);
  uint64_t c;
  if (!r.U(4, c) || !r.U(8, bytes) || !r.empty()) return Bad("commit");
  chunks = uint32_t(c);
  return Status::Ok();
}

Status DecodeIndexPayload(std::string_view payload, EntryType type, std::string& name, std::string& definition) {
  Reader r(payload);
  std::string_view n, d;
  if (!r.Str(4, n)) return Bad("index name");
  if (type == EntryType::kIndexPut && !r.Str(4, d)) return Bad("index definition");
  if (!r.empty()) return Bad("trailing bytes");
  name.assign(n);
  definition.assign(d);
  return Status::Ok();
}

}  // namespace corvid::cluster
