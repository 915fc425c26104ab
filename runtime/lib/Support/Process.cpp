//===- Process.cpp - Running a program and waiting for it -----------------===//

#include "cac/Runtime/Support/Process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <stdexcept>

namespace cac::rt {

int runProcess(const std::vector<std::string> &argv) {
  std::vector<char *> args;
  for (const auto &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  // The child's output must follow what this process printed before it.
  std::cout.flush();
  std::cerr.flush();
  pid_t pid = fork();
  if (pid < 0)
    return 127;
  if (pid == 0) {
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return 127;
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

namespace {

/// The child's side of spawnProcess: only async-signal-safe calls (the
/// parent may have threads). A failure writes its step and errno to
/// \p report and exits.
[[noreturn]] void becomeChild(const SpawnOptions &o, char *const *argv,
                              const char *dir, pid_t parent, int report) {
  auto fail = [&](int step) {
    int msg[2] = {step, errno};
    (void)!::write(report, msg, sizeof msg);
  };
  if (o.dieWithParent) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
      fail(0);
      _exit(127);
    }
    if (::getppid() != parent) // it died before the request took effect
      _exit(127);
  }
  if (o.ownProcessGroup && ::setpgid(0, 0) != 0) {
    fail(0);
    _exit(127);
  }
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    std::signal(sig, o.ignoreStopSignals ? SIG_IGN : SIG_DFL);
  std::signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  int step = 0;
  if ((o.stdinFd < 0 || ::dup2(o.stdinFd, STDIN_FILENO) >= 0) &&
      (o.stdoutFd < 0 || ::dup2(o.stdoutFd, STDOUT_FILENO) >= 0) &&
      (step = 1, !dir || ::chdir(dir) == 0)) {
    step = 2;
    ::execv(argv[0], argv);
  }
  fail(step);
  _exit(127);
}

} // namespace

pid_t spawnProcess(const SpawnOptions &o) {
  if (o.argv.empty())
    throw std::runtime_error("spawn: no program");
  std::vector<char *> argv;
  for (const auto &a : o.argv)
    argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  std::string dir = o.dir.string();
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0)
    throw std::runtime_error("spawn '" + o.argv[0] +
                             "': pipe: " + std::strerror(errno));
  std::cout.flush();
  std::cerr.flush();
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(report[0]);
    ::close(report[1]);
    throw std::runtime_error("spawn '" + o.argv[0] +
                             "': fork: " + std::strerror(e));
  }
  if (pid == 0) {
    ::close(report[0]);
    becomeChild(o, argv.data(), dir.empty() ? nullptr : dir.c_str(), parent,
                report[1]);
  }
  ::close(report[1]);
  // exec closes the report pipe (O_CLOEXEC): EOF means it started.
  int msg[2];
  ssize_t n;
  do
    n = ::read(report[0], msg, sizeof msg);
  while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof msg)) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::string why = std::strerror(msg[1]);
    if (msg[0] == 1)
      throw std::runtime_error("cannot enter '" + dir + "': " + why);
    throw std::runtime_error("cannot " +
                             std::string(msg[0] == 2 ? "run" : "set up") +
                             " '" + o.argv[0] + "': " + why);
  }
  return pid;
}

} // namespace cac::rt
