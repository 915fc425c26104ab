//===- StopSignals.cpp - SIGINT/SIGTERM/SIGHUP as a stop request ----------===//

#include "cac/Runtime/Support/StopSignals.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <initializer_list>
#include <unistd.h>

namespace cac::rt {

namespace {

std::atomic<int> firstSignal{0};
std::atomic<int> othersCount{0}, parentCount{0};
std::atomic<bool> secondStops{true}, countParentApart{false};

static_assert(std::atomic<int>::is_always_lock_free,
              "the handlers need lock-free atomics");

void say(const char *text) { (void)!::write(2, text, std::strlen(text)); }

void onStopSignal(int sig, siginfo_t *info, void *) {
  int saved = errno;
  bool fromParent = countParentApart.load() && info &&
                    info->si_code == SI_USER && info->si_pid == ::getppid();
  int n = fromParent ? ++parentCount : ++othersCount;
  int expected = 0;
  bool first = firstSignal.compare_exchange_strong(expected, sig);
  if (first) {
    say("\ncac-run: ");
    say(stopSignalName(sig));
    say(": stopping after the current step (a checkpoint is written; "
        "--resume continues); send it again to stop at once\n");
  } else if (n >= 2 && secondStops.load()) {
    say("\ncac-run: ");
    say(stopSignalName(sig));
    say(": a second stop signal, stopping at once (the last checkpoint "
        "stays)\n");
    std::signal(sig, SIG_DFL);
    ::raise(sig);
  }
  errno = saved;
}

} // namespace

const char *stopSignalName(int sig) {
  switch (sig) {
  case SIGINT:
    return "SIGINT";
  case SIGTERM:
    return "SIGTERM";
  case SIGHUP:
    return "SIGHUP";
  default:
    return "a signal";
  }
}

void installStopHandlers(const StopHandlerOptions &options) {
  secondStops = options.secondStopsAtOnce;
  countParentApart = options.parentForwards;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN)
      continue;
    struct sigaction sa {};
    sa.sa_sigaction = onStopSignal;
    sa.sa_flags = SA_SIGINFO | (options.restartCalls ? SA_RESTART : 0);
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

int stopSignal() { return firstSignal.load(); }

int stopSignalCount() {
  return othersCount.load() > parentCount.load() ? othersCount.load()
                                                 : parentCount.load();
}

void setStopSignal(int sig) {
  firstSignal = sig;
  othersCount = sig ? 1 : 0;
  parentCount = 0;
}

} // namespace cac::rt
