// Structured logs: one line per event on stderr, as text or as JSON
// (`corvid serve --log-format text|json --log-level debug|info|warn|error`;
// docs/logging.md lists every event). A line is written with one write(2)
// under a mutex, so lines from different threads never interleave.
//
//   logging::Log(logging::Level::kInfo, "index.caught_up", "index caught up",
//                {{"index", name}, {"etag", etag}});
//
// JSON:  {"ts":"2026-12-05T13:40:00.123Z","level":"info","event":"index.caught_up",
//         "msg":"index caught up","index":"s","etag":123}
// text:  2026-12-05T13:40:00.123Z INFO index.caught_up: index caught up index=s etag=123
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>
#include <variant>

#include "common/json_string.h"
#include "common/utf8.h"

namespace corvid::logging {

enum class Level : uint8_t { kDebug, kInfo, kWarn, kError };
enum class Format : uint8_t { kText, kJson };

struct Field {
  using Value = std::variant<std::string_view, int64_t, uint64_t, double, bool>;
  Field(std::string_view k, std::string_view v) : key(k), value(v) {}
  Field(std::string_view k, const std::string& v) : key(k), value(std::string_view(v)) {}
  Field(std::string_view k, const char* v) : key(k), value(std::string_view(v)) {}
  Field(std::string_view k, bool v) : key(k), value(v) {}
  Field(std::string_view k, double v) : key(k), value(v) {}
  template <std::signed_integral T>
  Field(std::string_view k, T v) : key(k), value(int64_t(v)) {}
  template <std::unsigned_integral T>
    requires(!std::same_as<T, bool>)
  Field(std::string_view k, T v) : key(k), value(uint64_t(v)) {}
  std::string_view key;
  Value value;
};

namespace detail {
struct State {
  std::atomic<uint8_t> level{uint8_t(Level::kInfo)};
  std::atomic<uint8_t> format{uint8_t(Format::kText)};
  std::mutex mu;
};
inline State& GetState() {
  static State s;
  return s;
}

// A JSON string of any bytes: invalid UTF-8 replaced (a log line stays
// valid JSON whatever a client sent), then corvid::AppendJsonString.
inline void AppendJsonString(std::string_view s, std::string& out) {
  if (IsValidUtf8(s)) return ::corvid::AppendJsonString(s, out);
  ::corvid::AppendJsonString(ReplaceInvalidUtf8(s), out);
}

// Text values: bare when they hold no space, quote or control byte, else
// JSON-quoted (so a line stays one line and can be split on spaces).
inline void AppendTextValue(std::string_view s, std::string& out) {
  bool bare = !s.empty();
  for (char c : s) bare = bare && static_cast<unsigned char>(c) > 0x20 && c != '"' && c != '=';
  if (bare && IsValidUtf8(s)) out += s;
  else AppendJsonString(s, out);
}

inline void AppendValue(const Field::Value& v, bool json, std::string& out) {
  char buf[32];
  if (const auto* s = std::get_if<std::string_view>(&v)) {
    json ? AppendJsonString(*s, out) : AppendTextValue(*s, out);
  } else if (const auto* i = std::get_if<int64_t>(&v)) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(*i));
    out += buf;
  } else if (const auto* u = std::get_if<uint64_t>(&v)) {
    std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(*u));
    out += buf;
  } else if (const auto* d = std::get_if<double>(&v)) {
    std::snprintf(buf, sizeof buf, "%.6g", *d);
    out += buf;
  } else {
    out += std::get<bool>(v) ? "true" : "false";
  }
}

inline void AppendTimestamp(std::string& out) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];  // room for any int, so the compiler sees no truncation
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, int(ms));
  out += buf;
}

inline constexpr const char* kLevelNames[] = {"debug", "info", "warn", "error"};
inline constexpr const char* kLevelTags[] = {"DEBUG", "INFO", "WARN", "ERROR"};
}  // namespace detail

inline void Configure(Format format, Level level) {
  detail::GetState().format.store(uint8_t(format));
  detail::GetState().level.store(uint8_t(level));
}

inline bool ParseLevel(std::string_view s, Level& out) {
  for (uint8_t i = 0; i < 4; ++i)
    if (s == detail::kLevelNames[i]) {
      out = Level(i);
      return true;
    }
  return false;
}

inline bool ParseFormat(std::string_view s, Format& out) {
  if (s == "text") out = Format::kText;
  else if (s == "json") out = Format::kJson;
  else return false;
  return true;
}

inline bool Enabled(Level level) { return uint8_t(level) >= detail::GetState().level.load(std::memory_order_relaxed); }

// One event: `event` is a stable dotted name ("index.created"), `message`
// a sentence for people; fields carry the values.
inline void Log(Level level, std::string_view event, std::string_view message, std::initializer_list<Field> fields = {}) {
  if (!Enabled(level)) return;
  const bool json = detail::GetState().format.load(std::memory_order_relaxed) == uint8_t(Format::kJson);
  std::string line;
  line.reserve(128 + message.size());
  if (json) {
    line += "{\"ts\":\"";
    detail::AppendTimestamp(line);
    line += "\",\"level\":\"";
    line += detail::kLevelNames[uint8_t(level)];
    line += "\",\"event\":";
    detail::AppendJsonString(event, line);
    line += ",\"msg\":";
    detail::AppendJsonString(message, line);
    for (const Field& f : fields) {
      line.push_back(',');
      detail::AppendJsonString(f.key, line);
      line.push_back(':');
      detail::AppendValue(f.value, true, line);
    }
    line += "}\n";
  } else {
    detail::AppendTimestamp(line);
    line.push_back(' ');
    line += detail::kLevelTags[uint8_t(level)];
    line.push_back(' ');
    line += event;
    line += ": ";
    for (char c : message) line.push_back(c == '\n' ? ' ' : c);
    for (const Field& f : fields) {
      line.push_back(' ');
      line += f.key;
      line.push_back('=');
      detail::AppendValue(f.value, false, line);
    }
    line.push_back('\n');
  }
  std::lock_guard lock(detail::GetState().mu);
  for (size_t off = 0; off < line.size();) {
    const ssize_t n = ::write(2, line.data() + off, line.size() - off);
    if (n <= 0) break;  // stderr gone: nothing to tell anyone
    off += size_t(n);
  }
}

inline void Debug(std::string_view event, std::string_view message, std::initializer_list<Field> fields = {}) {
  Log(Level::kDebug, event, message, fields);
}
inline void Info(std::string_view event, std::string_view message, std::initializer_list<Field> fields = {}) {
  Log(Level::kInfo, event, message, fields);
}
inline void Warn(std::string_view event, std::string_view message, std::initializer_list<Field> fields = {}) {
  Log(Level::kWarn, event, message, fields);
}
inline void Error(std::string_view event, std::string_view message, std::initializer_list<Field> fields = {}) {
  Log(Level::kError, event, message, fields);
}

// At most `burst` lines per `window`; the rest are counted and the count
// is handed to the next line let through (as its "suppressed" field).
class RateLimit {
 public:
  RateLimit(uint32_t burst, std::chrono::milliseconds window) : burst_(burst), window_(window) {}
  // True when a line may be written; `suppressed` is then the number of
  // lines dropped since the last one written.
  bool Allow(uint64_t& suppressed) {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - start_ >= window_) {
      start_ = now;
      used_ = 0;
    }
    if (used_ >= burst_) {
      ++dropped_;
      return false;
    }
    ++used_;
    suppressed = dropped_;
    dropped_ = 0;
    return true;
  }

 private:
  std::mutex mu_;
  const uint32_t burst_;
  const std::chrono::milliseconds window_;
  std::chrono::steady_clock::time_point start_{};
  uint32_t used_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace corvid::logging
