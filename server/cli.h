// The `corvid` command line (API.md, Command line) but `serve`: import,
// export, status, index, search, results, backup, restore and verify, each
// with --help (CLI11). cli.cc parses and dispatches; cli_import.cc loads
// files.
#pragma once

#include <cstddef>
#include <string>

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

}  // namespace corvid::cli
