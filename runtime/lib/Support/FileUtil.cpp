//===- FileUtil.cpp - Durable, atomic file and directory writes -----------===//

#include "cac/Runtime/Support/FileUtil.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <ftw.h>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace cac::rt {

namespace {

/// Removes a folder and what it holds (as std::filesystem::remove_all, which
/// is not called: pip's libtorch.so exports a remove_all of its own that
/// crashes when the program's calls bind to it).
int removeEntry(const char *path, const struct stat *, int, struct FTW *) {
  return ::remove(path);
}
void removeTree(const fs::path &p, std::error_code &ec) {
  ec.clear();
  if (::nftw(p.c_str(), removeEntry, 16, FTW_DEPTH | FTW_PHYS) != 0 &&
      errno != ENOENT)
    ec = std::error_code(errno, std::generic_category());
}

[[noreturn]] void throwErrno(const std::string &what, const fs::path &path) {
  int err = errno;
  throw std::runtime_error(what + " '" + path.string() +
                           "': " + std::strerror(err));
}

constexpr size_t kBufferSize = 1 << 20;

/// fsyncs every file and folder below \p dir (deepest first) and \p dir.
void fsyncTree(const fs::path &dir) {
  for (const auto &entry : fs::directory_iterator(dir)) {
    if (entry.is_directory())
      fsyncTree(entry.path());
  }
  fsyncDirectory(dir);
}

} // namespace

FileWriter::FileWriter(fs::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throwErrno("cannot create", path_);
  buffer_.reserve(kBufferSize);
}

FileWriter::~FileWriter() {
  if (fd_ >= 0)
    ::close(fd_);
}

void FileWriter::flush() {
  const char *p = buffer_.data();
  size_t left = buffer_.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throwErrno("cannot write", path_);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  buffer_.clear();
}

void FileWriter::write(const void *data, size_t size) {
  if (fd_ < 0)
    throw std::runtime_error("write to closed file '" + path_.string() + "'");
  const char *p = static_cast<const char *>(data);
  written_ += size;
  if (buffer_.size() + size > kBufferSize) {
    flush();
    if (size >= kBufferSize) {
      buffer_.assign(p, p + size);
      flush();
      return;
    }
  }
  buffer_.insert(buffer_.end(), p, p + size);
}

void FileWriter::commit() {
  if (fd_ < 0)
    return;
  flush();
  if (::fsync(fd_) != 0)
    throwErrno("cannot fsync", path_);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    throwErrno("cannot close", path_);
}

void fsyncDirectory(const fs::path &dir) {
  fs::path d = dir.empty() ? fs::path(".") : dir;
  int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throwErrno("cannot open directory", d);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some file systems refuse fsync on directories; that is not a data loss.
  if (rc != 0 && err != EINVAL && err != EROFS) {
    errno = err;
    throwErrno("cannot fsync directory", d);
  }
}

void writeFileAtomic(const fs::path &path,
                     const std::function<void(FileWriter &)> &fill) {
  fs::path tmp = path;
  tmp += ".tmp";
  try {
    FileWriter writer(tmp);
    fill(writer);
    writer.commit();
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throwErrno("cannot rename '" + tmp.string() + "' to", path);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  fsyncDirectory(path.parent_path());
}

void writeFileAtomic(const fs::path &path, std::string_view contents) {
  writeFileAtomic(path, [&](FileWriter &w) { w.write(contents); });
}

std::string readFileToString(const fs::path &path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    errno = errno ? errno : ENOENT;
    throwErrno("cannot open", path);
  }
  if (std::filesystem::is_directory(path)) {
    errno = EISDIR;
    throwErrno("cannot read", path);
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad())
    throwErrno("cannot read", path);
  return ss.str();
}

AtomicDirectory::AtomicDirectory(fs::path finalPath)
    : final_(std::move(finalPath)) {
  while (!final_.empty() && !final_.has_filename())
    final_ = final_.parent_path(); // "dir/" → "dir"
  if (final_.empty())
    throw std::runtime_error("atomic directory: empty path");
  fs::path parent = final_.parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec)
      throw std::runtime_error("cannot create directory '" + parent.string() +
                               "': " + ec.message());
  }
  std::string templ = final_.string() + ".tmp-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data()))
    throwErrno("cannot create temporary directory", templ);
  tmp_ = fs::path(buf.data());
}

AtomicDirectory::~AtomicDirectory() {
  if (!committed_) {
    std::error_code ec;
    removeTree(tmp_, ec);
  }
}

void AtomicDirectory::commit() {
  if (committed_)
    return;
  fsyncTree(tmp_);
  std::error_code ec;
  bool exists = fs::exists(final_, ec);
  if (exists) {
    // Swap in one step so the final name never disappears, then delete the
    // old contents, which now live under the temporary name.
    if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, final_.c_str(),
                    RENAME_EXCHANGE) != 0) {
      if (errno != EINVAL && errno != ENOSYS)
        throwErrno("cannot exchange '" + tmp_.string() + "' with", final_);
      // The file system cannot exchange: move the old folder aside first.
      fs::path old = tmp_;
      old += ".old";
      if (::rename(final_.c_str(), old.c_str()) != 0)
        throwErrno("cannot move aside", final_);
      if (::rename(tmp_.c_str(), final_.c_str()) != 0)
        throwErrno("cannot rename '" + tmp_.string() + "' to", final_);
      removeTree(old, ec);
    } else {
      removeTree(tmp_, ec);
    }
  } else if (::rename(tmp_.c_str(), final_.c_str()) != 0) {
    throwErrno("cannot rename '" + tmp_.string() + "' to", final_);
  }
  committed_ = true;
  fsyncDirectory(final_.parent_path());
}

} // namespace cac::rt
