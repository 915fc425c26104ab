//===- HostMemory.h - What the host can still allocate ----------*- C++ -*-===//
//
// The host memory this process may still allocate, read before a large
// allocation (a model's weights, a training run) so that it is refused with
// the numbers instead of being stopped by the kernel midway.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_SUPPORT_HOSTMEMORY_H
#define CAC_RUNTIME_SUPPORT_HOSTMEMORY_H

#include <string>

namespace cac::rt {

/// Bytes this process can still allocate on the host: /proc/meminfo's
/// MemAvailable, or less where a cgroup (v2, a scheduler's job) limits the
/// process; -1 where neither can be read.
double availableHostMemory();

/// "1.5 GiB": the unit every message about memory uses.
std::string formatGiB(double bytes);

} // namespace cac::rt

#endif // CAC_RUNTIME_SUPPORT_HOSTMEMORY_H
