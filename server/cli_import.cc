// `corvid import FILE --collection C` (API.md, Command line): NDJSON, a
// JSON array of objects, or CSV, sent as bulk requests over one keep-alive
// connection. The file is mapped, not read into memory; a record is
// checked (a JSON object, its id a string) and copied into the next bulk
// body as it is, so the bytes stored are the bytes in the file. One thread
// prepares the next batch while another sends the last one.
//
// A record without an id gets "<hash of the file>-<line>": re-running an
// import after a failure rewrites the same documents. A bad record stops
// the import with its line number, after every record before it was
// written (exit 1).
#include <unistd.h>
#include <xxhash.h>

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/reader.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/json_string.h"
#include "common/mapped_file.h"
#include "server/cli.h"

namespace corvid::cli {

void AppendWithIdFirst(std::string_view object, std::string_view id, std::string& out) {
  const std::string_view rest = object.substr(object.find('{') + 1);
  out += "{\"id\":";
  AppendJsonString(id, out);
  const size_t first = rest.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && rest[first] != '}') out.push_back(',');
  out.append(rest);
}

void JoinLines(std::string& out, size_t from) {
  for (size_t i = from; i < out.size(); ++i)
    if (out[i] == '\n' || out[i] == '\r') out[i] = ' ';
}

namespace {

using Clock = std::chrono::steady_clock;

// Checks one record: a JSON object (valid UTF-8), and finds its top-level
// `id_field`. SAX: nothing is built.
struct RecordCheck : rapidjson::BaseReaderHandler<rapidjson::UTF8<>, RecordCheck> {
  std::string_view id_field;
  int depth = 0;
  bool at_id = false;     // the next value is the id field's
  bool has_id = false, id_is_string = false, has_plain_id = false;
  std::string id;
  bool Default() {
    at_id = false;
    return true;
  }
  bool String(const char* s, rapidjson::SizeType n, bool) {
    if (at_id) {
      id_is_string = true;
      id.assign(s, n);
    }
    at_id = false;
    return true;
  }
  bool Key(const char* s, rapidjson::SizeType n, bool) {
    if (depth == 1) {
      const std::string_view k(s, n);
      if (k == id_field) {
        if (has_id) return false;  // twice: which one counts is unclear
        has_id = true;
        at_id = true;
      }
      if (k == "id") has_plain_id = true;
    }
    return true;
  }
  // An object or array opens or closes (a value of the id field: not a string).
  bool Open() {
    at_id = false;
    ++depth;
    return true;
  }
  bool Close() {
    --depth;
    return true;
  }
  bool StartObject() { return Open(); }
  bool StartArray() { return Open(); }
  bool EndObject(rapidjson::SizeType) { return Close(); }
  bool EndArray(rapidjson::SizeType) { return Close(); }
};

// Whether the record visibly opens with a string "id" as its first key
// (`{"id": "`, blanks allowed): then it goes out unparsed, and the server,
// which parses every line anyway, names the line if anything else is
// wrong with it (the import then stops there as for a line found bad here).
bool IdFirst(std::string_view r) {
  size_t i = 0;
  auto blanks = [&] {
    while (i < r.size() && (r[i] == ' ' || r[i] == '\t')) ++i;
  };
  auto take = [&](std::string_view lit) {
    if (r.substr(i, lit.size()) != lit) return false;
    i += lit.size();
    return true;
  };
  blanks();
  if (!take("{")) return false;
  blanks();
  if (!take("\"id\"")) return false;
  blanks();
  if (!take(":")) return false;
  blanks();
  return take("\"");
}

// Appends `record` (one JSON object's text) to `out` as a bulk line,
// giving it an "id" when it needs one (`<file_hash>-<line>` when it has
// none); returns why it is bad, or "" when it went in. `scratch` is a
// reused buffer.
std::string AppendRecord(std::string_view record, const ImportOptions& o, std::string_view file_hash, uint64_t line,
                         std::string& scratch, std::string& out) {
  if (o.id_field == "id" && record.find('\n') == std::string_view::npos && IdFirst(record)) {
    out.append(record);
    out.push_back('\n');
    return {};
  }
  scratch.assign(record.data(), record.size());
  RecordCheck check;
  check.id_field = o.id_field;
  rapidjson::Reader reader;
  rapidjson::StringStream ss(scratch.c_str());
  const auto ok = reader.Parse<rapidjson::kParseValidateEncodingFlag | rapidjson::kParseStopWhenDoneFlag>(ss, check);
  if (ok.IsError()) {
    return std::string("not valid JSON (") + rapidjson::GetParseError_En(ok.Code()) + " at byte " +
           std::to_string(ok.Offset()) + ")";
  }
  for (size_t i = ss.Tell(); i < scratch.size(); ++i)
    if (!std::isspace(static_cast<unsigned char>(scratch[i]))) return "more than one JSON value on the line";
  if (record.find_first_not_of(" \t\r\n") == std::string_view::npos || record[record.find_first_not_of(" \t\r\n")] != '{')
    return "not a JSON object";
  if (check.has_id && !check.id_is_string) return "its \"" + o.id_field + "\" field is not a string";
  if (check.has_id && (check.id.empty() || check.id.size() > 512)) return "its id must be 1 to 512 bytes";
  if (o.id_field != "id" && check.has_plain_id) return "it has an \"id\" field beside --id-field " + o.id_field;
  const size_t before = out.size();
  if (o.id_field == "id" && check.has_id) out.append(record);
  else if (check.has_id) AppendWithIdFirst(record, check.id, out);
  else AppendWithIdFirst(record, std::string(file_hash) + "-" + std::to_string(line), out);
  JoinLines(out, before);  // a record spanning lines (an array element)
  out.push_back('\n');
  return {};
}

// CSV (RFC 4180): a header row, then one document per row; a field that is
// a JSON number becomes a number, anything else a string (the id always a
// string; an empty id cell, no id). Quoted fields may hold commas, "" and
// newlines.
class CsvReader {
 public:
  explicit CsvReader(std::string_view text) : text_(text) {}
  // The next row's fields; false at the end. `line` is the row's first line.
  bool Next(std::vector<std::string>& fields, uint64_t& line, std::string& error) {
    fields.clear();
    if (pos_ >= text_.size()) return false;
    line = line_;
    std::string field;
    bool quoted = false;
    for (;;) {
      if (pos_ >= text_.size()) {
        if (quoted) {
          error = "a quoted field is not closed";
          return false;
        }
        fields.push_back(std::move(field));
        return true;
      }
      const char c = text_[pos_++];
      if (quoted) {
        if (c == '"') {
          if (pos_ < text_.size() && text_[pos_] == '"') {
            field.push_back('"');
            ++pos_;
          } else {
            quoted = false;
          }
        } else {
          if (c == '\n') ++line_;
          field.push_back(c);
        }
      } else if (c == '"' && field.empty()) {
        quoted = true;
      } else if (c == ',') {
        fields.push_back(std::move(field));
        field.clear();
      } else if (c == '\n' || c == '\r') {
        if (c == '\r' && pos_ < text_.size() && text_[pos_] == '\n') ++pos_;
        ++line_;
        fields.push_back(std::move(field));
        return true;
      } else {
        field.push_back(c);
      }
    }
  }
  size_t pos() const { return pos_; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  uint64_t line_ = 1;
};

bool IsJsonNumber(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  if (s[i] == '0' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) return false;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  }
  if (i != s.size()) return false;
  double d = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  return ec == std::errc() && std::isfinite(d);
}

// The end of the JSON value starting at `pos` (an object or array: the
// matching bracket, strings skipped); npos if it does not end.
size_t ValueEnd(std::string_view t, size_t pos) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = pos; i < t.size(); ++i) {
    const char c = t[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    } else if (depth == 0 && (c == ',' || c == ']')) {
      return i;
    }
  }
  return std::string_view::npos;
}

// A batch on its way: the bulk body and the file line of each record.
struct Batch {
  std::string body;
  std::vector<uint64_t> lines;
  size_t file_pos = 0;  // bytes of the file consumed once this batch is in
};

// The line of a bulk a 4xx answer names ({"error": {"line", "message"}}),
// or 0; `why` gets the message without the server's own "line N: ".
uint64_t RefusedLine(const std::string& body, std::string& why) {
  rapidjson::Document d;
  d.Parse(body.c_str());
  if (d.HasParseError() || !d.IsObject() || !d.HasMember("error") || !d["error"].IsObject()) return 0;
  const auto& e = d["error"];
  if (!e.HasMember("line") || !e["line"].IsUint64()) return 0;
  why = e.HasMember("message") && e["message"].IsString() ? e["message"].GetString() : body;
  if (why.starts_with("line ") && why.find(": ") != std::string::npos) why = why.substr(why.find(": ") + 2);
  return e["line"].GetUint64();
}

}  // namespace

int Import(const ImportOptions& o, server::HttpClient& client) {
  auto file = MappedFile::Open(o.file);
  if (!file.ok()) {
    std::fprintf(stderr, "corvid: import: %s\n", file.status().message().c_str());
    return 1;
  }
  file->Advise(ReadAdvice::kSequential);
  const std::string_view text = file->view();
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(XXH3_64bits(text.data(), text.size())));
  const std::string target = "/docs/" + server::PercentEncode(o.collection) + "/_bulk";

  // The sender: one batch in flight while the next one is prepared.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Batch> queue;
  bool done_adding = false;
  std::string send_error;       // set by the sender: stops everything
  uint64_t sent_docs = 0, sent_bytes = 0;
  std::optional<Batch> rejected;  // a batch the server refused for one of its lines
  uint64_t rejected_line = 0;     // that line, in the batch (from 1)
  std::string rejected_why;
  ProgressLine progress("importing", text.size());
  std::thread sender([&] {
    for (;;) {
      Batch b;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return !queue.empty() || done_adding; });
        if (queue.empty()) return;
        b = std::move(queue.front());
        queue.pop_front();
        cv.notify_all();
      }
      auto r = client.Request("POST", target, std::string_view(b.body), "application/x-ndjson");
      std::lock_guard lock(mu);
      if (!r.ok()) {
        send_error = r.status().message();
      } else if (auto line = r->status >= 400 && r->status < 500 ? RefusedLine(r->body, rejected_why) : 0;
                 line >= 1 && line <= b.lines.size()) {
        rejected = std::move(b);  // a record the server refused (400, 413), naming its line
        rejected_line = line;
      } else if (r->status != 200) {
        send_error = "the server answered " + std::to_string(r->status) + ": " + r->body;
      } else {
        sent_docs += b.lines.size();
        sent_bytes = b.file_pos;
        progress.Update(sent_bytes, sent_docs);
        continue;
      }
      // Stop: what is queued after this batch is not sent.
      queue.clear();
      done_adding = true;
      cv.notify_all();
      return;
    }
  });
  auto stopped = [&] {
    std::lock_guard lock(mu);
    return !send_error.empty() || rejected.has_value();
  };
  auto submit = [&](Batch&& b) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return queue.size() < 2 || done_adding; });
    if (done_adding) return;
    queue.push_back(std::move(b));
    cv.notify_all();
  };

  const auto start = Clock::now();
  std::string bad;  // "line N: why"
  Batch batch;
  std::string scratch;
  auto add = [&](std::string_view record, uint64_t line) {
    const std::string error = AppendRecord(record, o, hash, line, scratch, batch.body);
    if (!error.empty()) {
      bad = "line " + std::to_string(line) + ": " + error;
      return false;
    }
    batch.lines.push_back(line);
    return true;
  };
  auto flush = [&](size_t file_pos) {
    batch.file_pos = file_pos;
    if (!batch.lines.empty()) submit(std::move(batch));
    batch = Batch{};
  };

  const size_t first = text.find_first_not_of(" \t\r\n");
  const bool csv = o.file.size() >= 4 && o.file.compare(o.file.size() - 4, 4, ".csv") == 0;
  const bool array = !csv && first != std::string_view::npos && text[first] == '[';
  if (csv) {
    CsvReader reader(text);
    std::vector<std::string> header, row;
    uint64_t line = 0;
    std::string err;
    if (!reader.Next(header, line, err)) bad = err.empty() ? "" : "line 1: " + err;
    rapidjson::StringBuffer sb;
    while (bad.empty() && !stopped() && reader.Next(row, line, err)) {
      if (row.size() == 1 && row[0].empty()) continue;  // a blank line
      if (row.size() != header.size()) {
        bad = "line " + std::to_string(line) + ": " + std::to_string(row.size()) + " fields, the header has " +
              std::to_string(header.size());
        break;
      }
      sb.Clear();
      rapidjson::Writer<rapidjson::StringBuffer> w(sb);
      w.StartObject();
      for (size_t i = 0; i < header.size(); ++i) {
        const bool id = header[i] == o.id_field;
        // An empty id cell is no id: the row goes without the field and
        // gets a generated one (AppendRecord), as a row of a CSV without
        // an id column does.
        if (id && row[i].empty()) continue;
        w.Key(header[i].data(), rapidjson::SizeType(header[i].size()));
        if (!id && IsJsonNumber(row[i])) w.RawValue(row[i].data(), row[i].size(), rapidjson::kNumberType);
        else w.String(row[i].data(), rapidjson::SizeType(row[i].size()));
      }
      w.EndObject();
      if (!add(std::string_view(sb.GetString(), sb.GetSize()), line)) break;
      if (batch.body.size() >= o.batch_bytes) flush(reader.pos());
    }
    if (bad.empty() && !err.empty()) bad = "line " + std::to_string(line) + ": " + err;
  } else if (array) {
    size_t pos = first + 1;
    uint64_t line = 1 + uint64_t(std::count(text.begin(), text.begin() + long(pos), '\n'));
    size_t counted = pos;
    for (;;) {
      pos = text.find_first_not_of(" \t\r\n", pos);
      if (pos == std::string_view::npos) {
        bad = "the array is not closed";
        break;
      }
      line += uint64_t(std::count(text.begin() + long(counted), text.begin() + long(pos), '\n'));
      counted = pos;
      if (text[pos] == ']') break;
      const size_t end = ValueEnd(text, pos);
      if (end == std::string_view::npos || text[pos] != '{') {
        bad = "line " + std::to_string(line) + ": an element that is not a JSON object";
        break;
      }
      if (stopped() || !add(text.substr(pos, end - pos), line)) break;
      pos = text.find_first_not_of(" \t\r\n", end);
      if (pos != std::string_view::npos && text[pos] == ',') ++pos;
      else if (pos == std::string_view::npos || text[pos] != ']') {
        bad = "line " + std::to_string(line) + ": expected ',' or ']' after the element";
        break;
      }
      if (batch.body.size() >= o.batch_bytes) flush(pos);
    }
  } else {
    size_t pos = 0;
    uint64_t line = 0;
    while (pos < text.size() && !stopped()) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string_view::npos) nl = text.size();
      ++line;
      std::string_view rec = text.substr(pos, nl - pos);
      pos = nl + 1;
      if (rec.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // a blank line
      if (!add(rec, line)) break;
      if (batch.body.size() >= o.batch_bytes) flush(std::min(pos, text.size()));
    }
  }
  // Everything before a bad record is written too.
  flush(text.size());
  {
    std::lock_guard lock(mu);
    done_adding = true;
    cv.notify_all();
  }
  sender.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (rejected) {
    // The server named a line of the batch: the records before it are
    // sent again on their own, so that everything before it is written.
    const uint64_t file_line = rejected->lines[rejected_line - 1];
    bool resent = true;
    if (rejected_line > 1) {
      size_t cut = 0;
      for (uint64_t i = 1; i < rejected_line; ++i) cut = rejected->body.find('\n', cut) + 1;
      auto r = client.Request("POST", target, std::string_view(rejected->body).substr(0, cut), "application/x-ndjson");
      resent = r.ok() && r->status == 200;
      if (resent) sent_docs += rejected_line - 1;
    }
    if (!resent) {
      std::fprintf(stderr, "corvid: import of %s stopped at line %llu: %s (the server refused it); sending the %llu "
                   "records before it in its batch failed too: %llu documents were written\n",
                   o.file.c_str(), static_cast<unsigned long long>(file_line), rejected_why.c_str(),
                   static_cast<unsigned long long>(rejected_line - 1), static_cast<unsigned long long>(sent_docs));
      return 1;
    }
    std::fprintf(stderr, "corvid: import of %s stopped at line %llu: %s (the server refused it); the %llu documents "
                 "before it were written\n",
                 o.file.c_str(), static_cast<unsigned long long>(file_line), rejected_why.c_str(),
                 static_cast<unsigned long long>(sent_docs));
    return 1;
  }
  if (!send_error.empty()) {
    std::fprintf(stderr, "\ncorvid: import: %s; %llu documents were written before it\n", send_error.c_str(),
                 static_cast<unsigned long long>(sent_docs));
    return 1;
  }
  progress.Update(text.size(), sent_docs, true);
  if (!bad.empty()) {
    std::fprintf(stderr, "corvid: import of %s stopped at %s; the %llu documents before it were written\n",
                 o.file.c_str(), bad.c_str(), static_cast<unsigned long long>(sent_docs));
    return 1;
  }
  std::printf("imported %llu documents into %s from %s (%.1f MB in %.2f s: %.0f docs/s, %.1f MB/s)\n",
              static_cast<unsigned long long>(sent_docs), o.collection.c_str(), o.file.c_str(),
              double(text.size()) / 1e6, secs, secs > 0 ? double(sent_docs) / secs : 0.0,
              secs > 0 ? double(text.size()) / 1e6 / secs : 0.0);
  return 0;
}

}  // namespace corvid::cli
