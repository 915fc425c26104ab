//===- FileUtil.h - Durable, atomic file and directory writes ---*- C++ -*-===//
//
// Everything the runtime persists (weights, checkpoints, configs) goes through
// these helpers so that a crash never leaves a half-written file or folder
// visible under its final name: data is written under a temporary name,
// fsync'ed, renamed into place, and the parent directory is fsync'ed.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_SUPPORT_FILEUTIL_H
#define CAC_RUNTIME_SUPPORT_FILEUTIL_H

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace cac::rt {

/// A buffered writer on a POSIX file descriptor. Every failure throws
/// std::runtime_error naming the file and the system error.
class FileWriter {
public:
  /// Creates (truncates) \p path for writing.
  explicit FileWriter(std::filesystem::path path);
  ~FileWriter();
  FileWriter(const FileWriter &) = delete;
  FileWriter &operator=(const FileWriter &) = delete;

  /// Appends \p size bytes.
  void write(const void *data, size_t size);
  /// Appends a string.
  void write(std::string_view text) { write(text.data(), text.size()); }
  /// Flushes the buffer, fsyncs and closes the file.
  void commit();
  /// Bytes written so far.
  uint64_t bytesWritten() const { return written_; }
  const std::filesystem::path &path() const { return path_; }

private:
  void flush();
  std::filesystem::path path_;
  int fd_ = -1;
  std::vector<char> buffer_;
  uint64_t written_ = 0;
};

/// Writes a file atomically: \p fill writes the contents to `PATH.tmp`, which
/// is then fsync'ed and renamed to \p path, and the directory is fsync'ed. On
/// any exception the temporary file is removed and the old file, if any, is
/// left untouched.
void writeFileAtomic(const std::filesystem::path &path,
                     const std::function<void(FileWriter &)> &fill);

/// writeFileAtomic with fixed contents.
void writeFileAtomic(const std::filesystem::path &path,
                     std::string_view contents);

/// fsyncs a directory so that renames and creations inside it are durable.
void fsyncDirectory(const std::filesystem::path &dir);

/// Appends \p text to \p path (created if missing) in one write, checked:
/// a failure (a full disk) throws std::runtime_error naming the file. Not
/// fsync'ed: a crash may lose or tear the last lines, which readers repair.
void appendToFile(const std::filesystem::path &path, std::string_view text);

/// Removes what killed writes of \p finalPath left beside it: the folders
/// `FINAL.tmp-XXXXXX` of AtomicDirectory (and their `.old` twins) and the
/// file `FINAL.tmp` of writeFileAtomic. Returns how many it removed.
int removeStaleTemporaries(const std::filesystem::path &finalPath);

/// The CRC-32C (Castagnoli) of \p size bytes, continuing \p crc.
uint32_t crc32c(const void *data, size_t size, uint32_t crc = 0);

/// The CRC-32C of a whole file, as 8 hex digits; throws std::runtime_error
/// naming the file when it cannot be read.
std::string fileCrc32c(const std::filesystem::path &path);

/// The test hook of a full disk: with CAC_TEST_ENOSPC=TEXT:N in the
/// environment, a write to a file whose path contains TEXT fails with
/// ENOSPC once N bytes have been written to such files by this process
/// (N = 0: at once; a new value of the variable starts a new count). Every
/// write of FileWriter and appendToFile passes here (docs/reliability.md).
bool injectedWriteFailure(const std::filesystem::path &path, size_t size);

/// Throws std::runtime_error naming \p what and \p path unless \p path is a
/// regular file: a device (/dev/zero), a FIFO or a socket could be read
/// forever, and opening a FIFO waits for a writer.
void requireRegularFile(const std::filesystem::path &path,
                        const std::string &what);

/// Reads a whole regular file (requireRegularFile); throws
/// std::runtime_error naming the file on failure.
std::string readFileToString(const std::filesystem::path &path);

/// A folder that becomes visible under its final name all at once.
///
/// The constructor creates `FINAL.tmp-XXXXXX` beside \p finalPath; the caller
/// writes into path() (with FileWriter, which fsyncs each file) and calls
/// commit(), which fsyncs the folder tree and renames it to \p finalPath. An
/// existing \p finalPath is replaced by an atomic exchange (renameat2
/// RENAME_EXCHANGE) and then deleted, so readers see either the old or the
/// new folder, never a mix. If commit() is never reached the destructor
/// removes the temporary folder.
class AtomicDirectory {
public:
  explicit AtomicDirectory(std::filesystem::path finalPath);
  ~AtomicDirectory();
  AtomicDirectory(const AtomicDirectory &) = delete;
  AtomicDirectory &operator=(const AtomicDirectory &) = delete;

  /// The temporary folder to write into.
  const std::filesystem::path &path() const { return tmp_; }
  /// Publishes the folder under its final name.
  void commit();

private:
  std::filesystem::path final_;
  std::filesystem::path tmp_;
  bool committed_ = false;
};

} // namespace cac::rt

#endif // CAC_RUNTIME_SUPPORT_FILEUTIL_H
