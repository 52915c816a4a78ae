// ErrorLog: NDJSON persistence of index errors (format in error_log.h).
#include "indexing/error_log.h"

#include <algorithm>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <fstream>

namespace corvid::indexing {

namespace {

constexpr uint64_t kCompactAfterLines = 10 * kMaxRecentErrors;

std::string EncodeLine(const RecordedError& e) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  w.Key("etag");
  w.Uint64(e.etag);
  w.Key("id");
  w.String(e.id.data(), rapidjson::SizeType(e.id.size()));
  w.Key("message");
  w.String(e.message.data(), rapidjson::SizeType(e.message.size()));
  w.Key("at");
  w.Int64(std::chrono::duration_cast<std::chrono::milliseconds>(e.at.time_since_epoch()).count());
  w.EndObject();
  std::string line(buf.GetString(), buf.GetSize());
  line.push_back('\n');
  return line;
}

}  // namespace

ErrorLog::ErrorLog(std::filesystem::path path) : path_(std::move(path)) {
  std::ifstream in(path_);
  std::string line;
  uint64_t whole_lines_end = 0;  // the byte after the last '\n'
  bool last_line_kept = false;   // a last line without '\n' that was read as whole
  while (std::getline(in, line)) {
    if (!in.eof()) whole_lines_end += line.size() + 1;
    rapidjson::Document d;
    d.Parse(line.data(), line.size());
    if (d.HasParseError() || !d.IsObject()) continue;  // a damaged line
    ++lines_in_file_;
    last_line_kept = in.eof();
    if (d.HasMember("dropped") && d["dropped"].IsUint64()) {
      count_ += d["dropped"].GetUint64();
      continue;
    }
    if (!d.HasMember("etag") || !d["etag"].IsUint64() || !d.HasMember("id") || !d["id"].IsString() ||
        !d.HasMember("message") || !d["message"].IsString() || !d.HasMember("at") || !d["at"].IsInt64())
      continue;
    // Unix milliseconds within +-9*10^12 (years 1684-2255): beyond, the
    // nanosecond time point would overflow (int64 holds 9.22*10^12 ms);
    // such a line is damaged.
    if (d["at"].GetInt64() > 9'000'000'000'000 || d["at"].GetInt64() < -9'000'000'000'000) continue;
    RecordedError e;
    e.etag = d["etag"].GetUint64();
    e.id = d["id"].GetString();
    e.message = d["message"].GetString();
    e.at = std::chrono::system_clock::time_point(std::chrono::milliseconds(d["at"].GetInt64()));
    ++count_;
    through_ = std::max(through_, e.etag);
    recent_.push_back(std::move(e));
    if (recent_.size() > kMaxRecentErrors) recent_.pop_front();
  }
  // A line torn by a crash mid-append is cut off, so the next append starts
  // a line of its own (it was glued to the torn one, and both were lost).
  // A last line that was read as whole, only its '\n' missing, is kept and
  // given its '\n' (cutting it lost what it counted).
  in.close();
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path_, ec);
  if (!ec && size > whole_lines_end) {
    if (last_line_kept) {
      std::ofstream out(path_, std::ios::app | std::ios::binary);
      out << '\n';
    } else {
      std::filesystem::resize_file(path_, whole_lines_end, ec);
    }
  }
}

void ErrorLog::Append(std::span<const RecordedError> errors) {
  const uint64_t logged = through_;
  std::string text;
  size_t added = 0;
  for (const auto& e : errors) {
    if (e.etag != 0 && e.etag <= logged) continue;  // logged by an earlier run of the same batch
    text += EncodeLine(e);
    ++added;
    ++count_;
    through_ = std::max(through_, e.etag);
    recent_.push_back(e);
    if (recent_.size() > kMaxRecentErrors) recent_.pop_front();
  }
  if (added == 0) return;
  std::ofstream out(path_, std::ios::app | std::ios::binary);
  out << text;
  lines_in_file_ += added;
  out.close();
  if (lines_in_file_ > kCompactAfterLines) Compact();
}

void ErrorLog::Compact() {
  std::filesystem::path tmp = path_;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << "{\"dropped\":" << (count_ - recent_.size()) << "}\n";
    for (const auto& e : recent_) out << EncodeLine(e);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path_, ec);
  if (!ec) lines_in_file_ = recent_.size() + 1;
}

void ErrorLog::Clear() {
  count_ = 0;
  through_ = 0;
  lines_in_file_ = 0;
  recent_.clear();
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

}  // namespace corvid::indexing
