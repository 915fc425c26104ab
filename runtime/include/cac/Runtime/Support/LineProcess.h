//===- LineProcess.h - A helper program talked to in lines ------*- C++ -*-===//
//
// The process side of the programs a training file names: the reward program
// (`reward = command(..)`, RewardCommand.h) and the tool program (`tools =
// command(..)`, ToolCommand.h). Each is started through `/bin/sh -c` in a
// folder with pipes for its standard input and output (its standard error is
// this process's), and answers in lines that this side waits for with a
// deadline. What the lines mean is the caller's.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_SUPPORT_LINEPROCESS_H
#define CAC_RUNTIME_SUPPORT_LINEPROCESS_H

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace cac::rt {

class LineProcess {
public:
  /// Starts `/bin/sh -c command` in \p dir (empty: the current folder). The
  /// program leads its own process group (kill() ends what it started too,
  /// and a terminal's Ctrl-C reaches only this process), is killed when this
  /// process dies, and ignores SIGINT, SIGTERM and SIGHUP, which are this
  /// process's to act on (docs/reliability.md). Throws std::runtime_error
  /// "cannot start it in 'DIR': WHY".
  LineProcess(const std::string &command, const std::filesystem::path &dir);
  /// finish(5): EOF on its input ends a well-behaved program.
  ~LineProcess();
  LineProcess(const LineProcess &) = delete;
  LineProcess &operator=(const LineProcess &) = delete;

  /// How readLine() ended.
  enum class Read {
    /// A whole line (without its line break).
    Line,
    /// No line break within the time; what came is in pending().
    Timeout,
    /// The program closed its output (it exited, see exitStatus()).
    Closed,
    /// More than the byte limit came without a line break.
    TooLong,
  };

  /// Waits up to \p timeoutSeconds for the program's next line and moves it
  /// into \p line; what came after it stays in pending(). A line over
  /// \p maxBytes bytes is TooLong and stays pending. Throws
  /// std::runtime_error when poll or read fails.
  Read readLine(std::string &line, double timeoutSeconds,
                size_t maxBytes = static_cast<size_t>(-1));
  /// Writes all of \p text to the program's input. False, with its input
  /// closed, when the program no longer reads it (it exited); throws
  /// std::runtime_error on other write errors.
  bool write(std::string_view text);
  /// Reads what the program has written without waiting into pending().
  void drain();
  /// Output read past the last line returned.
  const std::string &pending() const { return pending_; }

  /// After Closed: how the program ended ("it exited with status 3", "it was
  /// killed by signal 11"), waiting up to a second for it to exit; "it
  /// closed its output" if it has not.
  std::string exitStatus();
  /// Kills the program's process group at once and reaps the program.
  void kill();
  /// Closes the program's input, waits up to \p graceSeconds for it to exit,
  /// then kills it.
  void finish(double graceSeconds);

private:
  void closePipes();

  pid_t pid_ = -1;
  int toChild_ = -1, fromChild_ = -1;
  std::string pending_;
};

/// At most \p n bytes of \p s, with NUL and other control bytes written as
/// \xNN so that a message shows them.
std::string shortenForMessage(std::string_view s, size_t n = 80);

} // namespace cac::rt

#endif // CAC_RUNTIME_SUPPORT_LINEPROCESS_H
