//===- CrashReporter.cpp - The stack of a crash on stderr -----------------===//

#include "CacRun.h"

#include <csignal>
#include <cstring>
#include <execinfo.h>
#include <unistd.h>

namespace cac::rt::run {

namespace {

/// A crash (a bug of cac's or of a library's, never of the user's input)
/// prints where it happened before the process dies with its signal, so a
/// report can name the function.
void reportCrash(int sig) {
  const char *what = sig == SIGSEGV  ? "segmentation fault"
                     : sig == SIGBUS ? "bus error"
                     : sig == SIGFPE ? "arithmetic exception"
                     : sig == SIGILL ? "illegal instruction"
                                     : "abort";
  const char *head = "cac-run: crashed (";
  const char *tail = "); this is a bug in cac, please report it with "
                     "the stack below:\n";
  (void)!::write(2, head, std::strlen(head));
  (void)!::write(2, what, std::strlen(what));
  (void)!::write(2, tail, std::strlen(tail));
  void *frames[64];
  int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, 2);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

} // namespace

void installCrashReporter() {
  // backtrace() loads libgcc on first use: not inside the handler.
  void *warm[1];
  ::backtrace(warm, 1);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
    std::signal(sig, reportCrash);
}

} // namespace cac::rt::run
