//===- ToolCommand.h - A tool program of multi-turn rollouts ----*- C++ -*-===//
//
// `tools = command("python3 tool.py", timeout = 10, ..)` in a training file
// (docs/training.md, "Tool programs"): the program is started once per
// process, through `/bin/sh -c` in the training file's folder, and answers
// the calls of the rollouts one at a time. Once ready it writes one line,
//
//   {"ready": true}
//
// then for each call it reads one line of JSON on its standard input,
//
//   {"call": "12*7", "turn": 1, "prompt": ".."}
//
// (the text between the call's tags, the call's number in its rollout, the
// rollout's prompt) and writes one line on its standard output (flushed):
//
//   {"observation": "84"}            or  {"observation": "..", "ok": false}
//
// Its standard error is the run's. A call the program fails on (no reply
// within the timeout, an exit or a crash, a reply over the byte limit) is an
// answer whose observation says so, and the program is started again for
// the next call: a tool failing on what a policy wrote is part of RL. A
// program that cannot start (no ready line) or breaks the protocol (a line
// that is not such an object, more than one line per call) is an error.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TASKS_TOOLCOMMAND_H
#define CAC_RUNTIME_TASKS_TOOLCOMMAND_H

#include "cac/Runtime/Support/LineProcess.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace cac::rt {

/// How to run a tool program.
struct ToolCommandOptions {
  /// The command line, run by `/bin/sh -c`.
  std::string command;
  /// The folder it runs in.
  std::filesystem::path dir;
  /// Seconds to wait for the reply to a call, and for the ready line.
  double timeout = 10.0, startTimeout = 60.0;
  /// Bytes a reply line may hold at most.
  size_t maxBytes = 65536;
};

/// The tool's answer to one call.
struct ToolAnswer {
  /// What the policy sees (between the result tags).
  std::string observation;
  /// The tool answered and did not say `"ok": false`.
  bool ok = false;
  /// Why the program failed on this call (then the observation is
  /// `[tool error: WHY]`); empty when it replied.
  std::string failure;
};

class ToolCommand {
public:
  /// Starts the program and waits for its ready line. Throws
  /// std::runtime_error, naming the command, when it cannot be started,
  /// ends or writes something else first, or is not ready in time.
  explicit ToolCommand(ToolCommandOptions options);
  /// Closes the program's input and waits for it (killing it after a few
  /// seconds if it does not exit, or at once after a failure).
  ~ToolCommand();
  ToolCommand(const ToolCommand &) = delete;
  ToolCommand &operator=(const ToolCommand &) = delete;

  /// The program's answer to \p call, the \p turn-th call of a rollout
  /// whose prompt is \p prompt. A program that fails on the call is
  /// stopped, and started again for the next one. Throws
  /// std::runtime_error, naming the command and the call, when it breaks
  /// the protocol or cannot be started again.
  ToolAnswer call(std::string_view call, int64_t turn, std::string_view prompt);

  const ToolCommandOptions &options() const { return options_; }
  /// Calls answered so far (failed ones included), and the program's starts
  /// after the first.
  uint64_t calls() const { return calls_; }
  uint64_t restarts() const { return restarts_; }

  /// `[tool error: WHY]`: the observation of a failed call.
  static std::string failureObservation(const std::string &why);

private:
  /// Starts the program and waits for its ready line.
  void start();
  /// The answer of a failed call: the program is stopped.
  ToolAnswer failed(std::string why);
  [[noreturn]] void fail(const std::string &what);

  ToolCommandOptions options_;
  std::unique_ptr<LineProcess> process_;
  uint64_t calls_ = 0, restarts_ = 0;
  /// Why the program was stopped last, for the error when it cannot start
  /// again.
  std::string stoppedBecause_;
  bool broken_ = false;
};

} // namespace cac::rt

#endif // CAC_RUNTIME_TASKS_TOOLCOMMAND_H
