// Helpers shared by the libFuzzer targets in tests/fuzz (README.md there).
// Nothing here is Corvid code: files in a per-process scratch directory, and
// the one way a target reports a broken invariant (a message, then abort, so
// that libFuzzer saves the input as a crash).
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace corvid::fuzz {

// A scratch directory for this process: $FUZZ_TMPDIR (scripts/fuzz.sh sets
// it and removes it afterwards), else /dev/shm (fsync costs nothing there),
// else the system temp directory; then corvid-fuzz-<name>-<pid>. libFuzzer
// ends with _exit (no atexit handlers run), so the directories of earlier
// processes of the same target that are gone are removed here instead.
inline const std::filesystem::path& ScratchDir(std::string_view name) {
  static const std::filesystem::path dir = [name] {
    std::filesystem::path base;
    if (const char* env = std::getenv("FUZZ_TMPDIR"); env && *env) {
      base = env;
    } else if (::access("/dev/shm", W_OK) == 0) {
      base = "/dev/shm";
    } else {
      base = std::filesystem::temp_directory_path();
    }
    const std::string prefix = "corvid-fuzz-" + std::string(name) + "-";
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(base, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
      const std::string entry = it->path().filename().string();
      if (!entry.starts_with(prefix)) continue;
      const std::string pid = entry.substr(prefix.size());
      if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
      if (::kill(static_cast<pid_t>(std::stol(pid)), 0) != 0 && errno == ESRCH) {
        std::error_code ignored;
        std::filesystem::remove_all(it->path(), ignored);
      }
    }
    std::filesystem::path d = base / (prefix + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    });
    return d;
  }();
  return dir;
}

inline void WriteFile(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// A broken invariant: says what, then aborts (libFuzzer keeps the input).
[[noreturn]] inline void Fail(const char* format, ...) {
  std::fprintf(stderr, "\n==FUZZ INVARIANT== ");
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
  std::abort();
}

#define FUZZ_CHECK(cond)                                                                    \
  do {                                                                                      \
    if (!(cond)) ::corvid::fuzz::Fail("%s:%d: check failed: %s", __FILE__, __LINE__, #cond); \
  } while (0)

#define FUZZ_CHECK_MSG(cond, ...)                   \
  do {                                              \
    if (!(cond)) ::corvid::fuzz::Fail(__VA_ARGS__); \
  } while (0)

// A printable prefix of bytes for messages.
inline std::string Printable(std::string_view s, size_t max = 200) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(char(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

}  // namespace corvid::fuzz
