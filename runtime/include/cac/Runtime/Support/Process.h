//===- Process.h - Running a program and waiting for it ---------*- C++ -*-===//

#ifndef CAC_RUNTIME_SUPPORT_PROCESS_H
#define CAC_RUNTIME_SUPPORT_PROCESS_H

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace cac::rt {

/// Runs `argv` (argv[0] a path, not looked up in PATH) with this process's
/// standard streams and waits for it. Returns its exit status, 128 + the
/// signal that ended it, or 127 when it could not be started.
int runProcess(const std::vector<std::string> &argv);

/// How spawnProcess() starts a helper program.
struct SpawnOptions {
  /// argv[0] is a path, not looked up in PATH.
  std::vector<std::string> argv;
  /// Descriptors that become the child's standard input and output (-1:
  /// this process's).
  int stdinFd = -1, stdoutFd = -1;
  /// The child's working folder (empty: this process's).
  std::filesystem::path dir;
  /// The child leads a process group of its own: a terminal's Ctrl-C does
  /// not reach it, and killing the group kills what it started.
  bool ownProcessGroup = false;
  /// The child gets SIGKILL when this process dies, however it dies
  /// (PR_SET_PDEATHSIG: tied to the thread that spawns it, so spawn from a
  /// thread that lives as long as the child should).
  bool dieWithParent = false;
  /// The child ignores SIGINT, SIGTERM and SIGHUP: a scheduler that signals
  /// every process of a job stops this one through its parent, which
  /// finishes its step with the child's help first.
  bool ignoreStopSignals = false;
};

/// Starts a program; returns its pid. Throws std::runtime_error saying what
/// failed (its folder cannot be entered, it cannot be executed) with the
/// system error.
pid_t spawnProcess(const SpawnOptions &options);

} // namespace cac::rt

#endif // CAC_RUNTIME_SUPPORT_PROCESS_H
