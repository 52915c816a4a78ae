// The web console's static files (server/console/), embedded in the binary
// at build time (cmake/embed_assets.cmake): nothing is read from disk or
// fetched from elsewhere at run time. Served by the router at GET / and
// GET /ui/<name>.
#pragma once

#include <span>
#include <string_view>

namespace corvid::server {

struct ConsoleAsset {
  std::string_view name;          // "index.html", "console.js", ...
  std::string_view content_type;
  std::string_view data;
};

std::span<const ConsoleAsset> ConsoleAssets();

}  // namespace corvid::server
