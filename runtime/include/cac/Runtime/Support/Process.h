//===- Process.h - Running a program and waiting for it ---------*- C++ -*-===//

#ifndef CAC_RUNTIME_SUPPORT_PROCESS_H
#define CAC_RUNTIME_SUPPORT_PROCESS_H

#include <string>
#include <vector>

namespace cac::rt {

/// Runs `argv` (argv[0] a path, not looked up in PATH) with this process's
/// standard streams and waits for it. Returns its exit status, 128 + the
/// signal that ended it, or 127 when it could not be started.
int runProcess(const std::vector<std::string> &argv);

} // namespace cac::rt

#endif // CAC_RUNTIME_SUPPORT_PROCESS_H
