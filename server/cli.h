// The `corvid` command line (API.md, Command line) but `serve`: import,
// export, status, index, search, results, backup, restore and verify, each
// with --help (CLI11). cli.cc parses and dispatches; cli_import.cc loads
// files.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/http_client.h"

namespace corvid::cli {

// Runs `corvid <command> ...`; returns the exit status (0 ok, 1 failed,
// 2 usage). `serve_usage` is printed for `corvid serve --help`.
int Run(int argc, char** argv);

struct ImportOptions {
  std::string file;
  std::string collection;
  std::string id_field = "id";
  size_t batch_bytes = size_t{4} << 20;
};
int Import(const ImportOptions& options, server::HttpClient& client);

// "#####......": `fraction` (clamped to 0..1) of `width` characters.
std::string BarText(double fraction, int width);

// A progress line on stderr, redrawn in place on a terminal at most ten
// times a second, silent otherwise: a bar, MB done (of the total, with an
// ETA, when it is known), MB/s, and docs/s when documents are counted.
class ProgressLine {
 public:
  explicit ProgressLine(std::string what, uint64_t total_bytes = 0);
  void SetTotal(uint64_t total_bytes) { total_ = total_bytes; }
  void Update(uint64_t bytes, uint64_t docs = 0, bool final = false);

 private:
  std::string what_;
  uint64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_{};
};

// Appends `object` (a JSON object's text, `{` its first non-blank byte)
// to `out` with `"id": id` as its first member and the rest as it was:
// how import gives a record its id, and export a document that lacks one.
void AppendWithIdFirst(std::string_view object, std::string_view id, std::string& out);

// Turns the line breaks in out[from, end) into spaces, so that a JSON text
// is one NDJSON line (in JSON text they stand only between tokens).
void JoinLines(std::string& out, size_t from);

}  // namespace corvid::cli
