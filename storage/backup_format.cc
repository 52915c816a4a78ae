#include "storage/backup_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "storage/format.h"

namespace corvid::storage {
namespace {

namespace fs = std::filesystem;

using format::GetLE;
using format::PutLE;

XXH3_state_t* NewHash() {
  XXH3_state_t* s = XXH3_createState();
  if (s == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(s);
  return s;
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

bool ValidBackupPartName(std::string_view name) {
  if (name.empty() || name.size() > kBackupMaxName || name.front() == '/' || name.back() == '/') return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    std::string_view c = name.substr(start, end - start);
    if (c.empty() || c == "." || c == "..") return false;
    for (char ch : c) {
      const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                      ch == '_' || ch == '-';
      if (!ok) return false;
    }
    start = end + 1;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Writer

BackupWriter::BackupWriter(Sink sink, uint64_t etag, uint64_t log_sequence)
    : sink_(std::move(sink)), file_hash_(NewHash()), part_hash_(NewHash()) {
  piece_.reserve(kPiece + 64);
  std::string header(kBackupMagic, sizeof kBackupMagic);
  PutLE(header, kBackupVersion, 4);
  PutLE(header, etag, 8);
  PutLE(header, log_sequence, 8);
  piece_ = header;
  XXH3_64bits_update(static_cast<XXH3_state_t*>(file_hash_), header.data(), header.size());
  written_ = header.size();
}

BackupWriter::~BackupWriter() {
  XXH3_freeState(static_cast<XXH3_state_t*>(file_hash_));
  XXH3_freeState(static_cast<XXH3_state_t*>(part_hash_));
}

Status BackupWriter::Emit(std::string_view bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(file_hash_), bytes.data(), bytes.size());
  written_ += bytes.size();
  if (!piece_.empty() && piece_.size() + bytes.size() > kPiece) {
    if (Status s = Flush(); !s.ok()) return s;
  }
  piece_.append(bytes);
  if (piece_.size() >= kPiece) return Flush();
  return Status::Ok();
}

Status BackupWriter::Flush() {
  if (piece_.empty()) return Status::Ok();
  Status s = sink_(std::move(piece_));  // handed over, not copied
  piece_.clear();
  piece_.reserve(kPiece + 64);
  return s;
}

Status BackupWriter::BeginPart(std::string_view name) {
  if (in_part_) return Status::Internal("backup: a part is already open");
  if (!ValidBackupPartName(name)) return Status::InvalidArgument("backup: bad part name '" + std::string(name) + "'");
  std::string rec;
  rec.push_back('P');
  PutLE(rec, name.size(), 2);
  rec.append(name);
  in_part_ = true;
  part_ = Entry{std::string(name), 0, 0};
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(part_hash_));
  return Emit(rec);
}

Status BackupWriter::FlushChunk() {
  if (chunk_.empty()) return Status::Ok();
  std::string len;
  PutLE(len, chunk_.size(), 4);
  if (Status s = Emit(len); !s.ok()) return s;
  Status s = Emit(chunk_);
  chunk_.clear();
  return s;
}

Status BackupWriter::Write(std::string_view bytes) {
  if (!in_part_) return Status::Internal("backup: no part is open");
  XXH3_64bits_update(static_cast<XXH3_state_t*>(part_hash_), bytes.data(), bytes.size());
  part_.size += bytes.size();
  constexpr size_t kChunk = kPiece - 16;  // a chunk and its length fit one piece
  while (!bytes.empty()) {
    const size_t take = std::min(bytes.size(), kChunk - chunk_.size());
    chunk_.append(bytes.substr(0, take));
    bytes.remove_prefix(take);
    if (chunk_.size() == kChunk) {
      if (Status s = FlushChunk(); !s.ok()) return s;
    }
  }
  return Status::Ok();
}

Status BackupWriter::EndPart() {
  if (!in_part_) return Status::Internal("backup: no part is open");
  if (Status s = FlushChunk(); !s.ok()) return s;
  part_.hash = XXH3_64bits_digest(static_cast<XXH3_state_t*>(part_hash_));
  std::string rec;
  PutLE(rec, 0, 4);
  PutLE(rec, part_.size, 8);
  PutLE(rec, part_.hash, 8);
  in_part_ = false;
  entries_.push_back(part_);
  return Emit(rec);
}

Status BackupWriter::Finish() {
  if (in_part_) return Status::Internal("backup: a part is still open");
  std::string rec;
  rec.push_back('E');
  PutLE(rec, entries_.size(), 4);
  for (const auto& e : entries_) {
    PutLE(rec, e.name.size(), 2);
    rec.append(e.name);
    PutLE(rec, e.size, 8);
    PutLE(rec, e.hash, 8);
  }
  if (Status s = Emit(rec); !s.ok()) return s;
  std::string end;
  PutLE(end, XXH3_64bits_digest(static_cast<XXH3_state_t*>(file_hash_)), 8);
  end.append(kBackupEndMagic, sizeof kBackupEndMagic);
  piece_.append(end);
  written_ += end.size();
  return Flush();
}

// ---------------------------------------------------------------------------
// Reader

namespace {

// Reads a file front to back through a 1 MiB buffer, hashing every byte it
// hands out (unless told not to) and naming offsets in its errors.
class FileReader {
 public:
  explicit FileReader(int fd) : fd_(fd), hash_(NewHash()) { buf_.resize(size_t{1} << 20); }
  ~FileReader() { XXH3_freeState(hash_); }

  uint64_t offset() const { return offset_; }
  uint64_t digest() const { return XXH3_64bits_digest(hash_); }

  // Up to `n` bytes (fewer only at the end of the file) as a view valid
  // until the next call.
  Result<std::string_view> Take(size_t n, bool hashed = true) {
    if (pos_ == len_) {
      ssize_t r;
      do r = ::read(fd_, buf_.data(), buf_.size());
      while (r < 0 && errno == EINTR);
      if (r < 0) return Status::IOError(Errno("read"));
      pos_ = 0;
      len_ = size_t(r);
    }
    std::string_view v(buf_.data() + pos_, std::min(n, len_ - pos_));
    pos_ += v.size();
    offset_ += v.size();
    if (hashed) XXH3_64bits_update(hash_, v.data(), v.size());
    return v;
  }

  // Exactly `n` bytes into `out` (small fields).
  Status Exact(size_t n, std::string& out, bool hashed = true) {
    out.clear();
    while (out.size() < n) {
      auto v = Take(n - out.size(), hashed);
      if (!v.ok()) return v.status();
      if (v->empty()) return Status::Corruption("the file ends at byte " + std::to_string(offset_) + ": truncated");
      out.append(*v);
    }
    return Status::Ok();
  }

  bool AtEnd() {
    if (pos_ < len_) return false;
    auto v = Take(1, false);
    if (!v.ok() || v->empty()) return true;
    --pos_;
    --offset_;
    return false;
  }

 private:
  int fd_;
  XXH3_state_t* hash_;
  std::string buf_;
  size_t pos_ = 0, len_ = 0;
  uint64_t offset_ = 0;
};

// One pass over a backup; `on_data(part index, bytes)` sees each part's
// bytes, `on_begin`/`on_end` its boundaries.
struct Visitor {
  std::function<Status(const std::string& name)> on_begin;
  std::function<Status(std::string_view bytes)> on_data;
  std::function<Status()> on_end;
};

Result<BackupInfo> ReadBackup(const std::string& path, const Visitor& visit, const RestoreProgress& progress,
                              uint64_t progress_base, uint64_t progress_total) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(Errno("open " + path));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::IOError(Errno("stat " + path));
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  BackupInfo info;
  info.file_bytes = uint64_t(st.st_size);
  FileReader in(fd);
  std::string f;
  auto at = [&] { return " at byte " + std::to_string(in.offset()); };
  if (Status s = in.Exact(sizeof kBackupMagic + 20, f); !s.ok()) return Status::Corruption("not a Corvid backup: too short");
  if (std::memcmp(f.data(), kBackupMagic, sizeof kBackupMagic) != 0)
    return Status::Corruption("not a Corvid backup (bad magic)");
  info.version = uint32_t(GetLE(f.data() + 8, 4));
  if (info.version != kBackupVersion)
    return Status::Corruption("backup format version " + std::to_string(info.version) + " is not supported (this build reads " +
                              std::to_string(kBackupVersion) + ")");
  info.etag = GetLE(f.data() + 12, 8);
  info.log_sequence = GetLE(f.data() + 20, 8);
  uint64_t reported = 0;
  for (;;) {
    if (progress && in.offset() - reported >= (uint64_t{8} << 20)) {
      reported = in.offset();
      progress(progress_base + reported, progress_total);
    }
    if (Status s = in.Exact(1, f); !s.ok()) return s;
    if (f[0] == 'E') break;
    if (f[0] != 'P') return Status::Corruption("unknown record" + at());
    if (Status s = in.Exact(2, f); !s.ok()) return s;
    const size_t name_len = size_t(GetLE(f.data(), 2));
    if (Status s = in.Exact(name_len, f); !s.ok()) return s;
    if (!ValidBackupPartName(f)) return Status::Corruption("a part has an invalid name" + at());
    BackupPartInfo part{f, 0, 0};
    for (const auto& p : info.parts)
      if (p.name == part.name) return Status::Corruption("part '" + part.name + "' appears twice");
    if (visit.on_begin) {
      if (Status s = visit.on_begin(part.name); !s.ok()) return s;
    }
    XXH3_state_t* h = NewHash();
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hold(h, &XXH3_freeState);
    for (;;) {
      if (Status s = in.Exact(4, f); !s.ok()) return s;
      uint64_t len = GetLE(f.data(), 4);
      if (len == 0) break;
      if (len > kBackupMaxChunk) return Status::Corruption("a chunk of part '" + part.name + "' is too long" + at());
      part.size += len;
      while (len > 0) {
        auto v = in.Take(size_t(len));
        if (!v.ok()) return v.status();
        if (v->empty()) return Status::Corruption("the file ends inside part '" + part.name + "': truncated");
        XXH3_64bits_update(h, v->data(), v->size());
        if (visit.on_data) {
          if (Status s = visit.on_data(*v); !s.ok()) return s;
        }
        len -= v->size();
      }
    }
    if (Status s = in.Exact(16, f); !s.ok()) return s;
    part.hash = XXH3_64bits_digest(h);
    if (GetLE(f.data(), 8) != part.size) return Status::Corruption("part '" + part.name + "': its size does not match its data");
    if (GetLE(f.data() + 8, 8) != part.hash) return Status::Corruption("part '" + part.name + "': checksum mismatch");
    if (visit.on_end) {
      if (Status s = visit.on_end(); !s.ok()) return s;
    }
    info.parts.push_back(std::move(part));
  }
  // The trailer: the manifest, then the file's checksum and the end magic.
  if (Status s = in.Exact(4, f); !s.ok()) return s;
  if (GetLE(f.data(), 4) != info.parts.size()) return Status::Corruption("the manifest's part count does not match the file");
  for (const auto& p : info.parts) {
    if (Status s = in.Exact(2, f); !s.ok()) return s;
    const size_t name_len = size_t(GetLE(f.data(), 2));
    if (Status s = in.Exact(name_len, f); !s.ok()) return s;
    if (f != p.name) return Status::Corruption("the manifest does not list part '" + p.name + "' in its place");
    if (Status s = in.Exact(16, f); !s.ok()) return s;
    if (GetLE(f.data(), 8) != p.size || GetLE(f.data() + 8, 8) != p.hash)
      return Status::Corruption("the manifest's entry for part '" + p.name + "' does not match it");
  }
  const uint64_t digest = in.digest();
  if (Status s = in.Exact(16, f, /*hashed=*/false); !s.ok()) return s;
  if (GetLE(f.data(), 8) != digest) return Status::Corruption("the file checksum does not match");
  if (std::memcmp(f.data() + 8, kBackupEndMagic, sizeof kBackupEndMagic) != 0)
    return Status::Corruption("the end marker is missing");
  if (!in.AtEnd()) return Status::Corruption("bytes follow the end of the backup");
  if (progress) progress(progress_base + in.offset(), progress_total);
  return info;
}

Status FsyncPath(const fs::path& p, bool directory) {
  int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return Status::IOError(Errno("open " + p.string()));
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? Status::Ok() : Status::IOError(Errno("fsync " + p.string()));
}

}  // namespace

Result<BackupInfo> VerifyBackup(const std::string& path) { return ReadBackup(path, Visitor{}, {}, 0, 0); }

Result<BackupInfo> RestoreBackup(const std::string& path, const std::string& dir, const RestoreProgress& progress) {
  std::error_code ec;
  const fs::path root(dir);
  const bool existed = fs::exists(root, ec);
  if (existed && (!fs::is_directory(root, ec) || !fs::is_empty(root, ec)))
    return Status::InvalidArgument(dir + " exists and is not an empty directory");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::IOError(Errno("stat " + path));
  const uint64_t total = 2 * uint64_t(st.st_size);  // read twice: verify, then write
  auto verified = ReadBackup(path, Visitor{}, progress, 0, total);
  if (!verified.ok()) return verified.status();

  fs::create_directories(root, ec);
  if (ec) return Status::IOError("create " + dir + ": " + ec.message());
  int out = -1;
  fs::path current;
  std::vector<fs::path> dirs{root};
  Visitor write;
  write.on_begin = [&](const std::string& name) -> Status {
    current = root / name;
    fs::create_directories(current.parent_path(), ec);
    if (ec) return Status::IOError("create " + current.parent_path().string() + ": " + ec.message());
    for (fs::path d = current.parent_path(); d != root && d.has_relative_path(); d = d.parent_path()) dirs.push_back(d);
    out = ::open(current.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    return out < 0 ? Status::IOError(Errno("create " + current.string())) : Status::Ok();
  };
  write.on_data = [&](std::string_view bytes) -> Status {
    while (!bytes.empty()) {
      ssize_t n = ::write(out, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::IOError(Errno("write " + current.string()));
      bytes.remove_prefix(size_t(n));
    }
    return Status::Ok();
  };
  write.on_end = [&]() -> Status {
    const bool ok = ::fsync(out) == 0;
    const int err = errno;
    ::close(out);
    out = -1;
    errno = err;
    return ok ? Status::Ok() : Status::IOError(Errno("fsync " + current.string()));
  };
  auto written = ReadBackup(path, write, progress, uint64_t(st.st_size), total);
  if (out >= 0) ::close(out);
  Status s = written.ok() ? Status::Ok() : written.status();
  if (s.ok()) {
    std::sort(dirs.begin(), dirs.end());
    dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
    for (auto it = dirs.rbegin(); it != dirs.rend() && s.ok(); ++it) s = FsyncPath(*it, true);
    if (s.ok()) s = FsyncPath(root.parent_path().empty() ? fs::path(".") : root.parent_path(), true);
  }
  if (!s.ok()) {
    // Nothing half-restored is left behind (the directory was empty).
    for (const auto& e : fs::directory_iterator(root, ec)) fs::remove_all(e.path(), ec);
    if (!existed) fs::remove(root, ec);
    return s;
  }
  return written;
}

}  // namespace corvid::storage
