// error_log: the index error log reader (indexing/error_log.h ErrorLog's
// constructor, which loads <index dir>/errors.log: NDJSON, a torn last
// line ignored) on arbitrary bytes written to the file, then one Append
// (which writes the file again) and a reload.
// Invariants: loading never crashes; recent() holds at most
// kMaxRecentErrors entries; an Append of one error newer than everything
// loaded counts it, and a reload of the file then counts exactly what the
// log counted (nothing appended is lost).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "indexing/error_log.h"
#include "tests/fuzz/fuzz_util.h"

using namespace corvid::indexing;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path file = corvid::fuzz::ScratchDir("error_log") / "errors.log";
  corvid::fuzz::WriteFile(file, std::string_view(reinterpret_cast<const char*>(data), size));
  uint64_t count_after_append = 0;
  {
    ErrorLog log(file);
    FUZZ_CHECK(log.recent().size() <= kMaxRecentErrors);
    uint64_t newest = 0;
    for (const RecordedError& e : log.recent()) newest = std::max(newest, e.etag);
    // Every error loaded is in recent() (no "dropped" line, at most 500):
    // then `newest` is the newest the log has seen, and one error after it
    // is appended.
    const uint64_t before = log.count();
    if (before == log.recent().size() && newest < UINT64_MAX) {
      RecordedError e;
      e.etag = newest + 1;
      e.id = "doc";
      e.message = "a new error";
      e.at = std::chrono::system_clock::now();
      log.Append({&e, 1});
      FUZZ_CHECK(log.count() == before + 1);
      FUZZ_CHECK(log.recent().back().etag == e.etag);
    }
    count_after_append = log.count();
  }
  {
    // What the file holds now is what the log held: nothing appended is
    // lost on the next load.
    ErrorLog again(file);
    FUZZ_CHECK_MSG(again.count() == count_after_append,
                   "reloaded %llu errors, the log held %llu before (file of %zu bytes%s)",
                   static_cast<unsigned long long>(again.count()), static_cast<unsigned long long>(count_after_append),
                   size, size > 0 && data[size - 1] != '\n' ? ", no final newline" : "");
  }
  std::filesystem::remove(file);
  return 0;
}
