// A small blocking HTTP/1.1 client for the command line (`corvid backup`).
// Beast stays in the .cc file.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "common/status.h"

namespace corvid::server {

struct DownloadResult {
  int status = 0;
  uint64_t bytes = 0;                         // of the body, written to the file
  std::map<std::string, std::string> headers;  // field names lower-cased
  std::string error_body;                      // a non-2xx answer's body (at most 64 KiB)
};

// GETs `url` (http://HOST[:PORT]/PATH) and streams a 2xx body into `path`
// (created, fsynced); `progress(bytes so far)` is called as it arrives.
// A body cut short (a chunked body without its last chunk, or fewer bytes
// than Content-Length) is an error, and the file is removed.
Result<DownloadResult> DownloadToFile(const std::string& url, const std::string& bearer_token,
                                      const std::string& path, const std::function<void(uint64_t)>& progress);

}  // namespace corvid::server
