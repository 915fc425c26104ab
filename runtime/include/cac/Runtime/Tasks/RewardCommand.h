//===- RewardCommand.h - A reward computed by an external program ---------===//
//
// `reward = command("python3 score.py", timeout = 60)` in a training file:
// the program is started once per process, through `/bin/sh -c` in the
// training file's folder, and scores completions one at a time. For each it
// reads one line of JSON on its standard input,
//
//   {"prompt": "..", "completion": "..", "answer": "..", "id": ".."}
//
// and writes exactly one line on its standard output: the reward, a finite
// number (the line must be flushed). A missing line (a timeout, an exit) or
// an extra one is an error naming the completion. Its standard error is the
// run's. The program gets EOF on its input when the run ends, and is killed
// if cac-run dies; it ignores SIGINT, SIGTERM and SIGHUP, which are
// cac-run's to act on (docs/reliability.md).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TASKS_REWARDCOMMAND_H
#define CAC_RUNTIME_TASKS_REWARDCOMMAND_H

#include "cac/Runtime/Support/LineProcess.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace cac::rt {

class RewardCommand {
public:
  /// Starts \p command in \p dir; throws std::runtime_error when it cannot
  /// be started. \p timeoutSeconds bounds the wait for each answer.
  RewardCommand(std::string command, const std::filesystem::path &dir,
                double timeoutSeconds);
  /// Closes the program's input and waits for it (killing it after a few
  /// seconds if it does not exit, or at once after a failure).
  ~RewardCommand();
  RewardCommand(const RewardCommand &) = delete;
  RewardCommand &operator=(const RewardCommand &) = delete;

  /// The program's reward for \p completion of a problem. Throws
  /// std::runtime_error, naming the command and what it did, when the
  /// program exits, times out or answers something other than a number.
  double score(std::string_view prompt, std::string_view completion,
               std::string_view answer, std::string_view id);

  const std::string &command() const { return command_; }
  /// Completions scored so far.
  uint64_t scored() const { return scored_; }

private:
  /// The next line of the program's answers; \p which names the completion
  /// it answers in errors.
  std::string readLine(const std::string &which);
  /// Fails if the program wrote more after its last answer.
  void checkNoStrayOutput();
  [[noreturn]] void fail(const std::string &what);

  std::string command_;
  double timeout_;
  std::unique_ptr<LineProcess> process_;
  std::string lastWhich_; // the last completion sent, for errors
  uint64_t scored_ = 0;
  bool failed_ = false;
};

} // namespace cac::rt

#endif // CAC_RUNTIME_TASKS_REWARDCOMMAND_H
