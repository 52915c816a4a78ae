// Small files written crash-safely, and read whole: the one copy every
// component uses (index definitions and `current`, search MANIFESTs).
// WriteFileAtomic writes `name.tmp` in `dir`, fsyncs it, renames it over
// `name` and fsyncs `dir`, so after a crash `name` is the old file or the
// new one, never a mix, and never missing once this returned Ok.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "common/status.h"

namespace corvid {

// The Status of a failed system call (errno): a full disk or quota is
// NoSpace (507 for a write), anything else IOError.
inline Status ErrnoStatus(const std::string& what) {
  const int e = errno;
  std::string msg = what + ": " + std::strerror(e);
  if (e == ENOSPC || e == EDQUOT) return Status::NoSpace(std::move(msg));
  return Status::IOError(std::move(msg));
}

inline Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + dir);
  const int rc = ::fsync(fd);
  const Status s = rc == 0 ? Status::Ok() : ErrnoStatus("fsync " + dir);
  ::close(fd);
  return s;
}

inline Status WriteFileAtomic(const std::string& dir, const std::string& name, std::string_view data) {
  const std::string tmp = dir + "/" + name + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open " + tmp);
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t w = ::write(fd, data.data() + off, data.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      const Status s = ErrnoStatus("write " + tmp);
      ::close(fd);
      return s;
    }
    off += size_t(w);
  }
  if (::fdatasync(fd) != 0) {
    const Status s = ErrnoStatus("fsync " + tmp);
    ::close(fd);
    return s;
  }
  if (::close(fd) != 0) return ErrnoStatus("close " + tmp);
  const std::string path = dir + "/" + name;
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename " + tmp);
  return FsyncDir(dir);
}

// NotFound (its message exactly `path`) when the file does not exist.
inline Status ReadWholeFile(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? Status::NotFound(path) : ErrnoStatus("open " + path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const Status s = ErrnoStatus("stat " + path);
    ::close(fd);
    return s;
  }
  out->resize(size_t(st.st_size));
  size_t off = 0;
  while (off < out->size()) {
    const ssize_t r = ::read(fd, out->data() + off, out->size() - off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const Status s = r < 0 ? ErrnoStatus("read " + path) : Status::IOError("read " + path + ": the file shrank");
      ::close(fd);
      return s;
    }
    off += size_t(r);
  }
  ::close(fd);
  return Status::Ok();
}

}  // namespace corvid
