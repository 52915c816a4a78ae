// The `corvid` commands but `serve` (cli.h). Every command that talks to a
// server takes --url (or CORVID_URL, default http://127.0.0.1:8080),
// --api-key (or CORVID_API_KEY), and for https:// --cacert (or
// CORVID_CACERT) and --insecure. Exit status: 0 done, 1 failed (the
// server's error is printed), 2 usage (CLI11's message).
#include "server/cli.h"

#include <CLI/CLI.hpp>
#include <rapidjson/document.h>
#include <rapidjson/reader.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "common/json_string.h"
#include "common/version.h"
#include "indexing/index_engine.h"
#include "storage/backup_format.h"
#include "storage/document_store.h"

namespace corvid::cli {

std::string BarText(double fraction, int width) {
  const int fill = std::clamp(int(std::clamp(fraction, 0.0, 1.0) * width), 0, width);
  return std::string(size_t(fill), '#') + std::string(size_t(width - fill), '.');
}

ProgressLine::ProgressLine(std::string what, uint64_t total_bytes)
    : what_(std::move(what)), total_(total_bytes), tty_(::isatty(2) == 1), start_(std::chrono::steady_clock::now()) {}

void ProgressLine::Update(uint64_t bytes, uint64_t docs, bool final) {
  if (!tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!final && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double mb = double(bytes) / 1e6;
  std::string line = "\r" + what_;
  char buf[160];
  if (total_ > 0) {
    const double frac = std::min(1.0, double(bytes) / double(total_));
    const double eta = frac > 0 && frac < 1 ? secs * (1 - frac) / frac : 0;
    std::snprintf(buf, sizeof buf, " [%s] %3d%% %.1f/%.1f MB, ETA %.0f s", BarText(frac, 28).c_str(), int(frac * 100), mb,
                  double(total_) / 1e6, eta);
  } else {
    std::snprintf(buf, sizeof buf, " %.1f MB", mb);
  }
  line += buf;
  std::snprintf(buf, sizeof buf, ", %.0f MB/s", secs > 0 ? mb / secs : 0.0);
  line += buf;
  if (docs > 0) {
    std::snprintf(buf, sizeof buf, ", %.0f docs/s", secs > 0 ? double(docs) / secs : 0.0);
    line += buf;
  }
  line += "   ";
  if (final) line += "\n";
  std::fputs(line.c_str(), stderr);
}

namespace {

struct Remote {
  std::string url = "http://127.0.0.1:8080";
  std::string api_key;
  server::TlsTrust trust;  // for https:// URLs
};

// CORVID_URL and CORVID_API_KEY are read here rather than with CLI11's
// envname: every command binds the same variables, and CLI11 applies an
// option's environment variable even for commands not given.
void AddRemote(CLI::App* cmd, Remote& r) {
  if (const char* url = std::getenv("CORVID_URL"); url && *url) r.url = url;
  if (const char* key = std::getenv("CORVID_API_KEY"); key && *key) r.api_key = key;
  cmd->add_option("--url", r.url, "the server, http[s]://HOST:PORT (default: $CORVID_URL, else http://127.0.0.1:8080)");
  cmd->add_option("--api-key", r.api_key, "the server's API key or a read key (default: $CORVID_API_KEY)");
  if (const char* ca = std::getenv("CORVID_CACERT"); ca && *ca) r.trust.ca_file = ca;
  cmd->add_option("--cacert", r.trust.ca_file,
                  "https: also trust the certificates in this PEM file (default: $CORVID_CACERT; the system's CAs "
                  "are always trusted)");
  cmd->add_flag("-k,--insecure", r.trust.insecure, "https: do not verify the server's certificate");
}

std::unique_ptr<server::HttpClient> ConnectOrSay(const Remote& r) {
  auto c = server::HttpClient::Connect(r.url, r.api_key, r.trust);
  if (!c.ok()) {
    std::fprintf(stderr, "corvid: %s\n", c.status().message().c_str());
    return nullptr;
  }
  return std::move(*c);
}

// The answer's error message ({"error": {"message"}}), or its body.
std::string ErrorText(const server::HttpResponse& r) {
  rapidjson::Document d;
  d.Parse(r.body.c_str());
  if (!d.HasParseError() && d.IsObject() && d.HasMember("error") && d["error"].IsObject() &&
      d["error"].HasMember("message") && d["error"]["message"].IsString())
    return std::to_string(r.status) + " " + d["error"]["message"].GetString();
  return std::to_string(r.status) + " " + r.body;
}

// The body of a 2xx answer `r` to `method target`; otherwise prints why
// and returns nullopt.
std::optional<std::string> Checked(Result<server::HttpResponse> r, std::string_view method, const std::string& target) {
  if (!r.ok()) {
    std::fprintf(stderr, "corvid: %s\n", r.status().message().c_str());
    return std::nullopt;
  }
  if (r->status < 200 || r->status >= 300) {
    std::fprintf(stderr, "corvid: %s %s: %s\n", std::string(method).c_str(), target.c_str(), ErrorText(*r).c_str());
    return std::nullopt;
  }
  return std::move(r->body);
}

// One request whose 2xx body is wanted (Checked).
std::optional<std::string> Call(server::HttpClient& c, std::string_view method, const std::string& target,
                                std::string_view body = {}) {
  return Checked(c.Request(method, target, body), method, target);
}

std::string Compact(const rapidjson::Value& v) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  v.Accept(w);
  return std::string(sb.GetString(), sb.GetSize());
}

std::string Cell(const rapidjson::Value& v) {
  if (v.IsString()) return std::string(v.GetString(), v.GetStringLength());
  return Compact(v);
}

// Prints rows as an aligned table (cells cut at 60 characters).
void PrintTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  auto cut = [](std::string s) {
    for (char& c : s)
      if (c == '\n' || c == '\t') c = ' ';
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return s;
  };
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], cut(row[i]).size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t i = 0; i < header.size(); ++i) {
      std::string c = i < cells.size() ? cut(cells[i]) : "";
      out += c;
      if (i + 1 < header.size()) out += std::string(width[i] - c.size() + 2, ' ');
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    std::printf("%s\n", out.c_str());
  };
  line(header);
  for (const auto& row : rows) line(row);
}

// ---- export ----------------------------------------------------------------

// Turns one page of GET /docs/{c} into NDJSON lines: each result's "doc"
// exactly as the server wrote it (SAX with offsets, so numbers stay as
// they are), with its id put first where the document has no "id".
struct PageScan : rapidjson::BaseReaderHandler<rapidjson::UTF8<>, PageScan> {
  rapidjson::StringStream* is = nullptr;
  const char* base = nullptr;
  int depth = 0;
  std::string key;           // the last key at the current depth's parent
  bool in_results = false, in_doc = false, doc_has_id = false;
  size_t doc_start = 0;
  std::string entry_id, next;
  bool has_next = false;
  std::string lines;  // the page's NDJSON
  uint64_t docs = 0;
  // The document's own "id" member: where its value lies in the page, and
  // whether it is the string that is the document's id. (RapidJSON calls
  // Key, String and number handlers with the stream still at the token's
  // start: a value's end is found as the next member's start, or the
  // object's end, less the blanks and the comma before it.)
  bool id_open = false, id_is_entry_id = false;
  size_t id_start = 0, id_end = 0;
  uint64_t ids_rewritten = 0;  // documents whose "id" was not their id

  bool Blank(char c) const { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
  // The "id" value ends before `at` (the next key's quote, or the '}').
  void CloseId(size_t at) {
    if (!id_open) return;
    id_open = false;
    while (at > id_start && (Blank(base[at - 1]) || base[at - 1] == ',')) --at;
    id_end = at;
  }
  bool Default() { return true; }
  bool Key(const char* s, rapidjson::SizeType n, bool) {
    key.assign(s, n);
    if (in_doc && depth == 4) {
      CloseId(is->Tell());
      if (key == "id") {
        doc_has_id = true;
        id_open = true;
        id_is_entry_id = false;
        size_t p = is->Tell() + 1;  // past the key's opening quote
        while (base[p] != '"') p += base[p] == '\\' ? 2 : 1;
        ++p;
        while (Blank(base[p]) || base[p] == ':') ++p;
        id_start = p;
      }
    }
    return true;
  }
  bool String(const char* s, rapidjson::SizeType n, bool) {
    if (depth == 3 && in_results && key == "id") entry_id.assign(s, n);
    if (depth == 1 && key == "next") {
      next.assign(s, n);
      has_next = true;
    }
    if (in_doc && depth == 4 && id_open) id_is_entry_id = std::string_view(s, n) == entry_id;
    return true;
  }
  bool StartObject() {
    ++depth;
    if (depth == 4 && in_results && key == "doc") {
      in_doc = true;
      doc_has_id = false;
      id_open = false;
      doc_start = is->Tell() - 1;
    }
    return true;
  }
  bool EndObject(rapidjson::SizeType) {
    if (depth == 4 && in_doc) {
      in_doc = false;
      CloseId(is->Tell() - 1);  // before the '}'
      const std::string_view text(base + doc_start, is->Tell() - doc_start);
      const size_t line_start = lines.size();
      if (!doc_has_id) {
        AppendWithIdFirst(text, entry_id, lines);
      } else if (id_is_entry_id) {
        lines.append(text);
      } else {
        // An "id" that is not the document's id (a number, another
        // string: PUT /docs/C/ID keeps the body as sent) would import
        // under another id, or not at all: it is written as the id.
        lines.append(text.substr(0, id_start - doc_start));
        AppendJsonString(entry_id, lines);
        lines.append(text.substr(id_end - doc_start));
        ++ids_rewritten;
      }
      JoinLines(lines, line_start);  // a body PUT as it was typed, over several lines
      lines.push_back('\n');
      ++docs;
    }
    --depth;
    return true;
  }
  bool StartArray() {
    ++depth;
    if (depth == 2 && key == "results") in_results = true;
    return true;
  }
  bool EndArray(rapidjson::SizeType) {
    if (depth == 2) in_results = false;
    --depth;
    return true;
  }
};

int Export(const Remote& remote, const std::string& collection, const std::string& out_path) {
  auto c = ConnectOrSay(remote);
  if (!c) return 1;
  std::FILE* out = stdout;
  const std::string tmp = out_path + ".part";
  if (!out_path.empty() && out_path != "-") {
    out = std::fopen(tmp.c_str(), "wb");
    if (!out) {
      std::fprintf(stderr, "corvid: export: cannot create %s\n", tmp.c_str());
      return 1;
    }
  }
  std::string after;
  bool first = true;
  uint64_t docs = 0, bytes = 0, rewritten = 0;
  const auto start = std::chrono::steady_clock::now();
  // Pages of up to 1,000 documents (the listing's most); a page the server
  // finds too large for one answer (--max-response-bytes: large
  // documents) is asked again with half the limit, and the limit grows
  // back after each page that fits.
  size_t limit = 1000;
  for (;;) {
    std::string target = "/docs/" + server::PercentEncode(collection) + "?limit=" + std::to_string(limit);
    if (!first) target += "&after=" + server::PercentEncode(after);
    auto r = c->Request("GET", target, {});
    if (r.ok() && r->status == 400 && limit > 1 && r->body.find("\"response_too_large\"") != std::string::npos) {
      limit /= 2;
      continue;
    }
    auto body = Checked(std::move(r), "GET", target);
    if (!body) return 1;
    first = false;
    limit = std::min<size_t>(limit * 2, 1000);
    PageScan scan;
    rapidjson::StringStream ss(body->c_str());
    scan.is = &ss;
    scan.base = body->c_str();
    rapidjson::Reader reader;
    if (reader.Parse(ss, scan).IsError()) {
      std::fprintf(stderr, "corvid: export: the server's page is not JSON\n");
      return 1;
    }
    if (std::fwrite(scan.lines.data(), 1, scan.lines.size(), out) != scan.lines.size()) {
      std::fprintf(stderr, "corvid: export: writing failed\n");
      return 1;
    }
    docs += scan.docs;
    rewritten += scan.ids_rewritten;
    bytes += scan.lines.size();
    if (!scan.has_next) break;
    after = scan.next;
  }
  if (out != stdout) {
    if (std::fflush(out) != 0 || ::fsync(fileno(out)) != 0 || std::fclose(out) != 0 ||
        std::rename(tmp.c_str(), out_path.c_str()) != 0) {
      std::fprintf(stderr, "corvid: export: cannot finish %s\n", out_path.c_str());
      return 1;
    }
  } else {
    std::fflush(stdout);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "exported %llu documents of %s (%.1f MB in %.2f s)\n", static_cast<unsigned long long>(docs),
               collection.c_str(), double(bytes) / 1e6, secs);
  if (rewritten > 0)
    std::fprintf(stderr, "%llu of them had an \"id\" field that was not their id: it is written as their id\n",
                 static_cast<unsigned long long>(rewritten));
  return 0;
}

// ---- status ----------------------------------------------------------------

// Draws every index's progress; returns whether all are idle (caught up).
bool DrawStatus(const rapidjson::Document& d, bool redraw, int& lines_drawn) {
  const uint64_t last = d.HasMember("lastEtag") && d["lastEtag"].IsUint64() ? d["lastEtag"].GetUint64() : 0;
  std::vector<std::string> out;
  bool all_idle = true;
  char buf[512];
  if (!d.HasMember("indexes") || !d["indexes"].IsArray()) return true;
  for (const auto& ix : d["indexes"].GetArray()) {
    auto num = [&](const char* k) { return ix.HasMember(k) && ix[k].IsNumber() ? ix[k].GetDouble() : 0.0; };
    auto str = [&](const char* k) { return ix.HasMember(k) && ix[k].IsString() ? std::string(ix[k].GetString()) : ""; };
    const std::string state = str("state");
    const double progress = std::clamp(num("progress"), 0.0, 1.0);
    const std::string bar = BarText(progress, 24);
    const uint64_t errors =
        ix.HasMember("errors") && ix["errors"].IsObject() && ix["errors"].HasMember("count") ? ix["errors"]["count"].GetUint64() : 0;
    std::snprintf(buf, sizeof buf, "%-20s %-9s %-8s [%s] %5.1f%%  %llu/%llu  %.0f docs/s  ETA %s  %llu errors",
                  str("name").c_str(), str("type").c_str(), state.c_str(), bar.c_str(), progress * 100,
                  static_cast<unsigned long long>(num("lastIndexedEtag")), static_cast<unsigned long long>(last),
                  num("docsPerSec"), num("backlog") > 0 ? (std::to_string(int64_t(num("etaSeconds"))) + " s").c_str() : "-",
                  static_cast<unsigned long long>(errors));
    out.push_back(buf);
    if (ix.HasMember("replacing") && ix["replacing"].IsObject()) {
      const auto& r = ix["replacing"];
      const double rp = r.HasMember("progress") && r["progress"].IsNumber() ? std::clamp(r["progress"].GetDouble(), 0.0, 1.0) : 0;
      std::snprintf(buf, sizeof buf, "  replacing: %5.1f%%", rp * 100);
      out.push_back(buf);
      all_idle = false;
    }
    if (state != "idle" && state != "paused" && state != "error") all_idle = false;
    if (num("backlog") > 0 && state != "paused" && state != "error") all_idle = false;
  }
  if (out.empty()) out.push_back("no indexes");
  if (redraw && lines_drawn > 0) std::printf("\x1b[%dA", lines_drawn);
  for (const auto& l : out) std::printf(redraw ? "%s\x1b[K\n" : "%s\n", l.c_str());
  std::fflush(stdout);
  lines_drawn = int(out.size());
  return all_idle;
}

int Status(const Remote& remote, bool once, double interval_s) {
  auto c = ConnectOrSay(remote);
  if (!c) return 1;
  const bool tty = ::isatty(1) == 1;
  int lines = 0;
  for (;;) {
    auto body = Call(*c, "GET", "/admin/indexes");
    if (!body) return 1;
    rapidjson::Document d;
    d.Parse(body->c_str());
    if (d.HasParseError() || !d.IsObject()) {
      std::fprintf(stderr, "corvid: status: the server's answer is not JSON\n");
      return 1;
    }
    const bool idle = DrawStatus(d, tty, lines);
    if (once || idle) return 0;
    if (!tty) std::printf("\n");
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  }
}

// ---- index, search, results ------------------------------------------------

int IndexCommand(const Remote& remote, const std::string& action, const std::string& name, const std::string& file) {
  auto c = ConnectOrSay(remote);
  if (!c) return 1;
  const std::string path = "/indexes/" + server::PercentEncode(name);
  if (action == "list") {
    auto body = Call(*c, "GET", "/admin/indexes");
    if (!body) return 1;
    rapidjson::Document d;
    d.Parse(body->c_str());
    std::vector<std::vector<std::string>> rows;
    if (d.IsObject() && d.HasMember("indexes") && d["indexes"].IsArray())
      for (const auto& ix : d["indexes"].GetArray())
        rows.push_back({Cell(ix["name"]), Cell(ix["type"]), Cell(ix["collection"]), Cell(ix["state"]),
                        Cell(ix["lastIndexedEtag"]), Cell(ix["entries"]), Cell(ix["errors"]["count"])});
    PrintTable({"NAME", "TYPE", "COLLECTION", "STATE", "INDEXED ETAG", "ENTRIES", "ERRORS"}, rows);
    return 0;
  }
  std::optional<std::string> body;
  if (action == "show") {
    body = Call(*c, "GET", path);
  } else if (action == "pause" || action == "resume" || action == "reset") {
    body = Call(*c, "POST", "/admin/indexes/" + server::PercentEncode(name) + "/" + action);
  } else if (action == "delete") {
    body = Call(*c, "DELETE", path);
  } else if (action == "create") {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "corvid: index create: cannot read %s\n", file.c_str());
      return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    body = Call(*c, "PUT", path, ss.str());
  }
  if (!body) return 1;
  std::printf("%s\n", body->c_str());
  return 0;
}

// GETs `target` for a command that prints a table: the answer parsed
// when it holds the array `member`, else nullopt with `rc` set - 1 when
// the call failed, 0 when the answer was printed as it is (--json, or an
// answer the table cannot show).
std::optional<rapidjson::Document> QueryForTable(const Remote& remote, const std::string& target, const char* member,
                                                bool json, int& rc) {
  rc = 1;
  auto c = ConnectOrSay(remote);
  if (!c) return std::nullopt;
  auto body = Call(*c, "GET", target);
  if (!body) return std::nullopt;
  rc = 0;
  rapidjson::Document d;
  if (!json) d.Parse(body->c_str());
  if (json || d.HasParseError() || !d.IsObject() || !d.HasMember(member) || !d[member].IsArray()) {
    std::printf("%s\n", body->c_str());
    return std::nullopt;
  }
  return d;
}

int Search(const Remote& remote, const std::string& index, const std::string& query, int limit, bool json) {
  int rc;
  auto d = QueryForTable(remote, "/indexes/" + server::PercentEncode(index) + "/search?q=" + server::PercentEncode(query) +
                                     "&limit=" + std::to_string(limit),
                         "hits", json, rc);
  if (!d) return rc;
  std::vector<std::vector<std::string>> rows;
  for (const auto& h : (*d)["hits"].GetArray()) {
    if (!h.IsObject()) continue;
    std::vector<std::string> row{h.HasMember("id") ? Cell(h["id"]) : "", h.HasMember("score") ? Cell(h["score"]) : ""};
    std::string rest;
    auto add = [&](const std::string& k, const rapidjson::Value& v) { rest += (rest.empty() ? "" : " ") + k + "=" + Cell(v); };
    for (const auto& m : h.GetObject()) {
      const std::string k = m.name.GetString();
      if (k == "id" || k == "score" || k == "sort") continue;
      if ((k == "fields" || k == "highlights") && m.value.IsObject()) {
        for (const auto& f : m.value.GetObject()) add(f.name.GetString(), f.value);
      } else {
        add(k, m.value);
      }
    }
    row.push_back(rest);
    rows.push_back(std::move(row));
  }
  PrintTable({"ID", "SCORE", "FIELDS"}, rows);
  std::printf("%s of %s hits%s\n", std::to_string(rows.size()).c_str(),
              d->HasMember("total") ? Cell((*d)["total"]).c_str() : "?",
              d->HasMember("stale") && (*d)["stale"].IsTrue() ? " (stale: the index is still catching up)" : "");
  return 0;
}

int Results(const Remote& remote, const std::string& index, int group_level, bool json) {
  std::string target = "/indexes/" + server::PercentEncode(index) + "/results?limit=10000";
  if (group_level >= 0) target += "&groupLevel=" + std::to_string(group_level);
  int rc;
  auto d = QueryForTable(remote, target, "rows", json, rc);
  if (!d) return rc;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : (*d)["rows"].GetArray()) {
    if (!r.IsObject()) continue;
    if (header.empty())
      for (const auto& m : r.GetObject()) header.emplace_back(m.name.GetString());
    std::vector<std::string> row;
    for (const auto& h : header) row.push_back(r.HasMember(h.c_str()) ? Cell(r[h.c_str()]) : "");
    rows.push_back(std::move(row));
  }
  if (header.empty()) header.push_back("(no rows)");
  PrintTable(header, rows);
  return 0;
}

// ---- backup, restore, verify -------------------------------------------------

int Backup(const Remote& remote, const std::string& file) {
  std::string url = remote.url;
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.find("/admin/backup") == std::string::npos) url += "/admin/backup";
  ProgressLine bar("backing up");
  auto got = server::DownloadToFile(url, remote.api_key, file, [&](uint64_t n) { bar.Update(n); }, remote.trust);
  if (!got.ok()) {
    std::fprintf(stderr, "\ncorvid: backup failed: %s\n", got.status().message().c_str());
    return 1;
  }
  if (got->status != 200) {
    std::fprintf(stderr, "corvid: backup failed: %s answered %d: %s\n", url.c_str(), got->status, got->error_body.c_str());
    return 1;
  }
  bar.Update(got->bytes, 0, true);
  auto info = storage::VerifyBackup(file);  // the file is whole only if it checks out
  if (!info.ok()) {
    std::fprintf(stderr, "corvid: the backup written to %s does not verify: %s\n", file.c_str(),
                 info.status().message().c_str());
    return 1;
  }
  std::fprintf(stderr, "corvid: backup of etag %llu written to %s (%llu bytes, %zu files, verified)\n",
               static_cast<unsigned long long>(info->etag), file.c_str(), static_cast<unsigned long long>(got->bytes),
               info->parts.size());
  return 0;
}

int Restore(const std::string& from, const std::string& data) {
  ProgressLine bar("restoring");
  auto info = storage::RestoreBackup(from, data, [&](uint64_t done, uint64_t total) {
    bar.SetTotal(total);
    bar.Update(done);
  });
  if (!info.ok()) {
    std::fprintf(stderr, "\ncorvid: restore from %s failed: %s\n(nothing was written to %s)\n", from.c_str(),
                 info.status().message().c_str(), data.c_str());
    return 1;
  }
  bar.Update(info->file_bytes * 2, 0, true);
  std::fprintf(stderr, "corvid: restored %zu files (%llu bytes of backup) up to etag %llu into %s\n", info->parts.size(),
               static_cast<unsigned long long>(info->file_bytes), static_cast<unsigned long long>(info->etag),
               data.c_str());
  return 0;
}

// With the server stopped, checks the store and every index without
// changing anything (as SQLite's integrity_check or Lucene's CheckIndex).
int Verify(const std::string& data_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(data_dir, ec)) {
    std::fprintf(stderr, "corvid: verify: %s is not a directory\n", data_dir.c_str());
    return 2;
  }
  VerifyReport report;
  corvid::Status s = storage::DocumentStore::Verify(data_dir + "/store", report);
  if (s.ok()) s = indexing::IndexEngine::Verify(data_dir + "/indexes", report);
  if (!s.ok()) {
    std::fprintf(stderr, "corvid: verify of %s could not finish: %s\n", data_dir.c_str(), s.ToString().c_str());
    return 1;
  }
  for (const auto& line : report.sound) std::printf("ok       %s\n", line.c_str());
  for (const auto& line : report.notes) std::printf("note     %s\n", line.c_str());
  for (const auto& line : report.damaged) std::printf("DAMAGED  %s\n", line.c_str());
  if (report.damaged.empty()) std::printf("corvid: %s verifies: nothing is damaged\n", data_dir.c_str());
  else std::printf("corvid: %s: %zu problem%s found\n", data_dir.c_str(), report.damaged.size(),
                   report.damaged.size() == 1 ? "" : "s");
  return report.damaged.empty() ? 0 : 1;
}

}  // namespace

int Run(int argc, char** argv) {
  CLI::App app{"corvid: a document store with full-text and map/reduce indexes"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("corvid ") + kVersion);
  int rc = 0;

  // `serve` has its own parser (main.cc); listed here for --help.
  app.add_subcommand("serve", "run the server (corvid serve --help for its flags)")->allow_extras()->prefix_command();

  Remote remote;
  ImportOptions import;
  auto* imp = app.add_subcommand("import", "load NDJSON, a JSON array of objects, or CSV (*.csv) into a collection");
  imp->add_option("file", import.file, "the file")->required()->check(CLI::ExistingFile);
  imp->add_option("--collection,-c", import.collection, "the collection")->required();
  imp->add_option("--id-field", import.id_field, "the field holding each document's id")->capture_default_str();
  imp->add_option("--batch-bytes", import.batch_bytes, "bytes per bulk request")->capture_default_str()->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  AddRemote(imp, remote);

  std::string collection, out_path;
  auto* exp = app.add_subcommand("export", "write a collection as NDJSON (each line re-imports as it was)");
  exp->add_option("collection", collection, "the collection")->required();
  exp->add_option("-o,--output", out_path, "the file (default: stdout)");
  AddRemote(exp, remote);

  bool once = false;
  double interval = 1.0;
  auto* st = app.add_subcommand("status", "every index's progress, live until all are idle");
  st->add_flag("--once", once, "print once and exit");
  st->add_option("--interval", interval, "seconds between updates")->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  AddRemote(st, remote);

  std::string index_name, def_file;
  auto* ix = app.add_subcommand("index", "list, show, create, pause, resume, reset or delete indexes");
  ix->require_subcommand(1);
  AddRemote(ix, remote);
  std::string action;
  for (const char* a : {"list", "show", "create", "pause", "resume", "reset", "delete"}) {
    auto* sub = ix->add_subcommand(a, std::string(a) + (std::string(a) == "list" ? " every index" : " an index"));
    if (std::string(a) != "list") sub->add_option("name", index_name, "the index")->required();
    if (std::string(a) == "create") sub->add_option("--file,-f", def_file, "the definition (JSON)")->required()->check(CLI::ExistingFile);
    AddRemote(sub, remote);
    sub->callback([&action, a] { action = a; });
  }

  std::string query;
  int limit = 10;
  bool json = false;
  auto* se = app.add_subcommand("search", "query a search index (Lucene syntax)");
  se->add_option("index", index_name, "the search index")->required();
  se->add_option("query", query, "the query")->required();
  se->add_option("--limit", limit, "hits to show")->capture_default_str()->check(CLI::Range(1, 10000));
  se->add_flag("--json", json, "print the server's JSON answer");
  AddRemote(se, remote);

  int group_level = -1;
  auto* re = app.add_subcommand("results", "the rows of a map/reduce index");
  re->add_option("index", index_name, "the map/reduce index")->required();
  re->add_option("--group-level", group_level, "roll rows up over the first N group fields")->check(CLI::NonNegativeNumber);
  re->add_flag("--json", json, "print the server's JSON answer");
  AddRemote(re, remote);

  std::string backup_file;
  auto* bk = app.add_subcommand("backup", "save an online backup of the whole server (GET /admin/backup)");
  bk->add_option("-o,--output", backup_file, "the backup file")->required();
  AddRemote(bk, remote);

  std::string from, data_dir = "./corvid-data";
  auto* rs = app.add_subcommand("restore", "create a data directory from a backup");
  rs->add_option("--from", from, "the backup file")->required()->check(CLI::ExistingFile);
  rs->add_option("--data", data_dir, "the new data directory (must not exist or be empty)")->required();

  auto* vf = app.add_subcommand("verify", "check every checksum of a stopped server's data directory (exit 1 if damaged)");
  vf->add_option("--data", data_dir, "the data directory")->capture_default_str();
  // API.md gives every command --url and --api-key: these two work on
  // files, with the server stopped, so they take them and use neither.
  Remote unused;
  for (CLI::App* offline : {rs, vf}) {
    offline->add_option("--url", unused.url, "not used: this command works on files, with the server stopped");
    offline->add_option("--api-key", unused.api_key, "not used: this command works on files, with the server stopped");
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (imp->parsed()) {
    auto c = ConnectOrSay(remote);
    return c ? Import(import, *c) : 1;
  }
  if (exp->parsed()) return Export(remote, collection, out_path);
  if (st->parsed()) return Status(remote, once, interval);
  if (ix->parsed()) return IndexCommand(remote, action, index_name, def_file);
  if (se->parsed()) return Search(remote, index_name, query, limit, json);
  if (re->parsed()) return Results(remote, index_name, group_level, json);
  if (bk->parsed()) return Backup(remote, backup_file);
  if (rs->parsed()) return Restore(from, data_dir);
  if (vf->parsed()) return Verify(data_dir);
  return rc;
}

}  // namespace corvid::cli
