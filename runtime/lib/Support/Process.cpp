//===- Process.cpp - Running a program and waiting for it -----------------===//

#include "cac/Runtime/Support/Process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>

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

} // namespace cac::rt
