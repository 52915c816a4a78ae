// backup: storage/backup_format.h VerifyBackup on arbitrary bytes (written
// to a file first: it reads a path), and RestoreBackup of whatever
// verifies. Every input is tried twice: as it is, and with its checksums
// recomputed where a walk of the format finds them (each part's size and
// XXH3-64, the manifest's entries, the file checksum), so that mutations
// get past the checksums to the checks behind them.
// Invariants: a refusal is Corruption (or IOError); a backup that verifies
// restores, and a restore writes nothing outside its directory (part names
// are relative paths: no "..", no absolute path).
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "storage/backup_format.h"
#include "tests/fuzz/fuzz_util.h"

using corvid::fuzz::Printable;
using namespace corvid::storage;
namespace fs = std::filesystem;

namespace {

uint64_t Le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(s[at + size_t(i)]);
  return v;
}
void PutLe(std::string& s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[at + size_t(i)] = char(v >> (8 * i));
}

// Recomputes what the format checksums, as far as the bytes follow it.
void FixChecksums(std::string& s) {
  struct Part {
    uint64_t size, hash;
  };
  std::vector<Part> parts;
  size_t p = sizeof kBackupMagic + 20;
  if (s.size() < p) return;
  for (;;) {
    if (p >= s.size()) return;
    const char record = s[p++];
    if (record == 'E') break;
    if (record != 'P' || s.size() - p < 2) return;
    const size_t name_len = Le(s, p, 2);
    p += 2;
    if (s.size() - p < name_len) return;
    p += name_len;
    XXH3_state_t* h = XXH3_createState();
    XXH3_64bits_reset(h);
    uint64_t size = 0;
    for (;;) {
      if (s.size() - p < 4) return XXH3_freeState(h), void();
      const uint64_t len = Le(s, p, 4);
      p += 4;
      if (len == 0) break;
      if (len > s.size() - p) return XXH3_freeState(h), void();
      XXH3_64bits_update(h, s.data() + p, len);
      size += len;
      p += len;
    }
    const uint64_t hash = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    if (s.size() - p < 16) return;
    PutLe(s, p, size);
    PutLe(s, p + 8, hash);
    p += 16;
    parts.push_back({size, hash});
  }
  if (s.size() - p < 4) return;
  const uint64_t count = Le(s, p, 4);
  p += 4;
  for (uint64_t i = 0; i < count; ++i) {
    if (s.size() - p < 2) return;
    const size_t name_len = Le(s, p, 2);
    p += 2;
    if (s.size() - p < name_len + 16) return;
    p += name_len;
    if (i < parts.size()) {
      PutLe(s, p, parts[i].size);
      PutLe(s, p + 8, parts[i].hash);
    }
    p += 16;
  }
  if (s.size() - p < 8) return;
  PutLe(s, p, XXH3_64bits(s.data(), p));
}

void Try(const std::string& bytes, const fs::path& dir) {
  const fs::path file = dir / "in.bak";
  corvid::fuzz::WriteFile(file, bytes);
  auto info = VerifyBackup(file.string());
  if (!info.ok()) {
    const auto code = info.status().code();
    FUZZ_CHECK_MSG(code == corvid::StatusCode::kCorruption || code == corvid::StatusCode::kIOError,
                   "VerifyBackup refused with code %d: %s", int(code), info.status().message().c_str());
    return;
  }
  FUZZ_CHECK(info->file_bytes == bytes.size());
  for (const auto& part : info->parts)
    FUZZ_CHECK_MSG(ValidBackupPartName(part.name), "verified a part named '%s'", Printable(part.name).c_str());
  const fs::path restore = dir / "restore";
  auto restored = RestoreBackup(file.string(), restore.string());
  // Nothing outside `restore`.
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    FUZZ_CHECK_MSG(name == "in.bak" || name == "restore", "restore wrote '%s' outside its directory",
                   Printable(name).c_str());
  }
  if (restored.ok()) {
    // Every part is a file under `restore`, of its size.
    FUZZ_CHECK(restored->parts.size() == info->parts.size());
    for (const auto& part : info->parts) {
      const fs::path at = restore / part.name;
      FUZZ_CHECK_MSG(fs::is_regular_file(at) && fs::file_size(at) == part.size, "part '%s' not restored as a file",
                     Printable(part.name).c_str());
    }
  } else {
    // A verified backup may still not restore (parts "a" and "a/b"): then
    // what was written is removed.
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(restore, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
      FUZZ_CHECK_MSG(!it->is_regular_file(), "a failed restore (%s) left '%s' behind",
                     restored.status().message().c_str(), Printable(it->path().string()).c_str());
  }
  fs::remove_all(restore);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path& dir = corvid::fuzz::ScratchDir("backup");
  std::string bytes(reinterpret_cast<const char*>(data), size);
  Try(bytes, dir);
  std::string fixed = bytes;
  FixChecksums(fixed);
  if (fixed != bytes) Try(fixed, dir);
  return 0;
}
