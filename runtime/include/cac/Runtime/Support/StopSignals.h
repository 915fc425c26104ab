//===- StopSignals.h - SIGINT/SIGTERM/SIGHUP as a stop request --*- C++ -*-===//
//
// A scheduler preempts a job with SIGTERM (SIGHUP when its terminal goes,
// SIGINT on Ctrl-C). cac-run treats the first of them as a request: the
// trainer finishes its step, writes a checkpoint and exits. A second signal
// stops the process at once (docs/reliability.md, "Signals").
//
// The handlers only record the signal (async-signal-safe); the trainer polls
// stopSignal() between steps.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_SUPPORT_STOPSIGNALS_H
#define CAC_RUNTIME_SUPPORT_STOPSIGNALS_H

namespace cac::rt {

/// How the handlers of installStopHandlers() behave.
struct StopHandlerOptions {
  /// Interrupted system calls restart (a trainer's reads and waits go on);
  /// a launcher that must notice the signal in waitpid() turns it off.
  bool restartCalls = true;
  /// The second signal restores the default action and re-raises it, so
  /// the process dies of it at once. A launcher that forwards signals to
  /// its workers turns it off and handles the second one itself.
  bool secondStopsAtOnce = true;
  /// This process is a worker whose launcher forwards its own stop request:
  /// a signal from the parent process is counted apart from the others, so
  /// that a signal that reached both (Ctrl-C, a scheduler signalling every
  /// process of the job) and its forwarded copy make one request, not two.
  bool parentForwards = false;
};

/// Installs the handlers of SIGINT, SIGTERM and SIGHUP. A signal the
/// process ignores (nohup) stays ignored.
void installStopHandlers(const StopHandlerOptions &options = {});

/// The first stop signal received (0: none).
int stopSignal();

/// How many stop signals arrived (the parent's forwarded copies counted
/// apart, see StopHandlerOptions::parentForwards).
int stopSignalCount();

/// Records a stop request as if \p sig had arrived (tests, and a caller
/// that learns of a stop another way); 0 clears the request.
void setStopSignal(int sig);

/// "SIGINT", "SIGTERM", "SIGHUP" (else "a signal").
const char *stopSignalName(int sig);

} // namespace cac::rt

#endif // CAC_RUNTIME_SUPPORT_STOPSIGNALS_H
