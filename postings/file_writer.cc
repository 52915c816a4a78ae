// FileWriter: buffered sequential writes with bounded dirty pages.
#include "postings/file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace corvid::postings {

FileWriter::FileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)), hash_(XXH3_createState()) {
  buf_.reserve(kBufferBytes);
  XXH3_64bits_reset(hash_);
}

FileWriter::FileWriter(FileWriter&& o) noexcept
    : fd_(o.fd_), path_(std::move(o.path_)), buf_(std::move(o.buf_)), offset_(o.offset_), flushed_(o.flushed_),
      written_back_(o.written_back_), hash_from_(o.hash_from_), hash_(o.hash_), status_(o.status_) {
  o.fd_ = -1;
  o.hash_ = nullptr;
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (hash_ != nullptr) XXH3_freeState(hash_);
}

Result<FileWriter> FileWriter::Create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError("open " + path + ": " + std::strerror(errno));
  return FileWriter(fd, path);
}

Result<FileWriter> FileWriter::Temporary(const std::string& dir) {
  std::string tmpl = dir + "/spill-XXXXXX";
  const int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) return Status::IOError("mkstemp in " + dir + ": " + std::strerror(errno));
  ::unlink(tmpl.c_str());
  return FileWriter(fd, tmpl);
}

void FileWriter::Fail(const char* what) {
  if (status_.ok()) status_ = Status::IOError(std::string(what) + " " + path_ + ": " + std::strerror(errno));
}

void FileWriter::WriteOut(const char* p, size_t n, uint64_t at) {
  while (n > 0 && status_.ok()) {
    const ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(at));
    if (w < 0) {
      if (errno == EINTR) continue;
      Fail("write");
      return;
    }
    p += w;
    n -= static_cast<size_t>(w);
    at += static_cast<uint64_t>(w);
  }
}

void FileWriter::Flush() {
  if (buf_.empty() || !status_.ok()) {
    buf_.clear();
    return;
  }
  // Hash the bytes at or past hash_from_.
  if (flushed_ + buf_.size() > hash_from_) {
    const uint64_t skip = hash_from_ > flushed_ ? hash_from_ - flushed_ : 0;
    XXH3_64bits_update(hash_, buf_.data() + skip, buf_.size() - skip);
  }
  WriteOut(buf_.data(), buf_.size(), flushed_);
  flushed_ += buf_.size();
  buf_.clear();
  // Start writeback of what was written since the last kWritebackBytes, and
  // wait for the range before it: dirty pages stay under 2 * kWritebackBytes.
  if (flushed_ - written_back_ >= kWritebackBytes) {
    if (written_back_ >= kWritebackBytes)
      (void)::sync_file_range(fd_, static_cast<off_t>(written_back_ - kWritebackBytes), kWritebackBytes,
                              SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    (void)::sync_file_range(fd_, static_cast<off_t>(written_back_), static_cast<off_t>(flushed_ - written_back_),
                            SYNC_FILE_RANGE_WRITE);
    written_back_ = flushed_;
  }
}

void FileWriter::Append(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  offset_ += n;
  while (n > 0) {
    const size_t room = kBufferBytes - buf_.size();
    const size_t take = std::min(room, n);
    buf_.append(c, take);
    c += take;
    n -= take;
    if (buf_.size() == kBufferBytes) Flush();
  }
}

void FileWriter::Zeros(size_t n) {
  static const char zeros[256] = {};
  while (n > 0) {
    const size_t take = std::min(n, sizeof zeros);
    Append(zeros, take);
    n -= take;
  }
}

void FileWriter::WriteAt(uint64_t off, const void* p, size_t n) {
  Flush();
  WriteOut(static_cast<const char*>(p), n, off);
}

void FileWriter::CopyTo(FileWriter& out) {
  Flush();
  std::string chunk(kBufferBytes, '\0');
  for (uint64_t at = 0; at < flushed_ && status_.ok();) {
    const ssize_t r = ::pread(fd_, chunk.data(), std::min<uint64_t>(chunk.size(), flushed_ - at), static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      Fail("read");
      break;
    }
    out.Append(chunk.data(), static_cast<size_t>(r));
    at += static_cast<uint64_t>(r);
  }
  if (!status_.ok() && out.status_.ok()) out.status_ = status_;
}

Status FileWriter::Sync() {
  Flush();
  if (status_.ok() && ::fdatasync(fd_) != 0) Fail("fsync");
  return status_;
}

}  // namespace corvid::postings
