//===- HostMemory.cpp - What the host can still allocate ------------------===//

#include "cac/Runtime/Support/HostMemory.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

namespace cac::rt {

namespace {

/// MemAvailable of /proc/meminfo in bytes; -1 where it cannot be read.
double memAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = -1;
  std::string unit;
  while (in >> key) {
    if (key == "MemAvailable:") {
      in >> kb >> unit;
      return kb * 1024;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return -1;
}

/// What the process's cgroup (v2) still allows: memory.max - memory.current
/// of its group; -1 without a limit ("max") or a cgroup v2 to read.
double cgroupHeadroom() {
  std::ifstream self("/proc/self/cgroup");
  std::string line, group;
  while (std::getline(self, line))
    if (line.rfind("0::", 0) == 0)
      group = line.substr(3);
  if (group.empty())
    return -1;
  std::string dir = "/sys/fs/cgroup" + (group == "/" ? std::string() : group);
  std::ifstream maxIn(dir + "/memory.max"), curIn(dir + "/memory.current");
  std::string max;
  double current = 0;
  if (!(maxIn >> max) || max == "max" || !(curIn >> current))
    return -1;
  try {
    return std::max(0.0, std::stod(max) - current);
  } catch (const std::exception &) {
    return -1;
  }
}

} // namespace

double availableHostMemory() {
  double host = memAvailable(), group = cgroupHeadroom();
  if (host < 0 || group < 0)
    return std::max(host, group);
  return std::min(host, group);
}

std::string formatGiB(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g GiB", bytes / double(int64_t(1) << 30));
  return buf;
}

} // namespace cac::rt
