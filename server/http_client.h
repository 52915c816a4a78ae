// A small blocking HTTP/1.1 client for the command line and a cluster
// node's bootstrap: http:// and https:// (OpenSSL, the peer's certificate
// verified). Beast stays in the .cc file.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace corvid::server {

// Which https:// servers are trusted: those whose certificate chains to
// the system's CAs or to a certificate in `ca_file` (PEM), for the host
// name (or IP address) in the URL. `insecure` skips the check (curl -k).
struct TlsTrust {
  std::string ca_file;
  bool insecure = false;
};

struct DownloadResult {
  int status = 0;
  uint64_t bytes = 0;                         // of the body, written to the file
  std::map<std::string, std::string> headers;  // field names lower-cased
  std::string error_body;                      // a non-2xx answer's body (at most 64 KiB)
};

// GETs `url` (http[s]://HOST[:PORT]/PATH) and streams a 2xx body into `path`
// (created, fsynced); `progress(bytes so far)` is called as it arrives.
// A body cut short (a chunked body without its last chunk, or fewer bytes
// than Content-Length) is an error, and the file is removed.
Result<DownloadResult> DownloadToFile(const std::string& url, const std::string& bearer_token,
                                      const std::string& path, const std::function<void(uint64_t)>& progress,
                                      const TlsTrust& trust = {});

struct HttpResponse {
  int status = 0;
  std::string body;
  std::string content_type;
};

// One keep-alive connection to a server (`--url http[s]://HOST:PORT`), for
// the command line's requests; it reconnects once when the server closed
// an idle connection.
class HttpClient {
 public:
  // `base_url`: http[s]://HOST[:PORT] (a trailing path is ignored).
  static Result<std::unique_ptr<HttpClient>> Connect(const std::string& base_url, std::string bearer_token,
                                                     const TlsTrust& trust = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // `target`: path and query, already percent-encoded. A transport failure
  // is IOError; any HTTP status is a result.
  Result<HttpResponse> Request(std::string_view method, std::string_view target, std::string_view body = {},
                               std::string_view content_type = "application/json");
  const std::string& base_url() const { return base_url_; }

 private:
  struct Impl;
  HttpClient(std::unique_ptr<Impl> impl, std::string base_url);
  std::unique_ptr<Impl> impl_;
  std::string base_url_;
};

// Percent-encodes one path segment or query value (RFC 3986 unreserved
// characters stay).
std::string PercentEncode(std::string_view s);

}  // namespace corvid::server
