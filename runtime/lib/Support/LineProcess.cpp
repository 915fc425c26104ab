//===- LineProcess.cpp - A helper program talked to in lines --------------===//

#include "cac/Runtime/Support/LineProcess.h"

#include "cac/Runtime/Support/Process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace cac::rt {

namespace {

std::string errnoText(int e) { return std::strerror(e); }

} // namespace

std::string shortenForMessage(std::string_view s, size_t n) {
  std::string out;
  for (char c : s.substr(0, n)) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  if (s.size() > n)
    out += "...";
  return out;
}

LineProcess::LineProcess(const std::string &command,
                         const std::filesystem::path &dir) {
  // A program that exits while we write must not kill this process with
  // SIGPIPE: writes report EPIPE instead (the program gets SIGPIPE's
  // default back).
  std::signal(SIGPIPE, SIG_IGN);
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe: " + errnoText(errno));
  if (pipe2(out, O_CLOEXEC) != 0) {
    int e = errno;
    close(in[0]);
    close(in[1]);
    throw std::runtime_error("pipe: " + errnoText(e));
  }
  std::string folder = dir.empty() ? std::string(".") : dir.string();
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", command};
  o.stdinFd = in[0];
  o.stdoutFd = out[1];
  o.dir = folder;
  o.ownProcessGroup = true;
  o.dieWithParent = true;
  o.ignoreStopSignals = true;
  try {
    pid_ = spawnProcess(o);
  } catch (const std::exception &e) {
    for (int fd : {in[0], in[1], out[0], out[1]})
      close(fd);
    throw std::runtime_error("cannot start it in '" + folder +
                             "': " + e.what());
  }
  close(in[0]);
  close(out[1]);
  toChild_ = in[1];
  fromChild_ = out[0];
}

LineProcess::~LineProcess() { finish(5.0); }

void LineProcess::closePipes() {
  if (toChild_ >= 0)
    close(toChild_);
  if (fromChild_ >= 0)
    close(fromChild_);
  toChild_ = fromChild_ = -1;
}

void LineProcess::finish(double graceSeconds) {
  closePipes();
  if (pid_ <= 0)
    return;
  auto steps = static_cast<int>(std::max(0.0, graceSeconds) * 100);
  for (int i = 0; i < steps; ++i) {
    int status;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill();
}

void LineProcess::kill() {
  closePipes();
  if (pid_ <= 0)
    return;
  ::kill(-pid_, SIGKILL);
  int status;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

std::string LineProcess::exitStatus() {
  if (pid_ <= 0)
    return "it is not running";
  for (int i = 0; i < 100; ++i) {
    int status;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      if (WIFEXITED(status))
        return "it exited with status " + std::to_string(WEXITSTATUS(status));
      if (WIFSIGNALED(status))
        return "it was killed by signal " + std::to_string(WTERMSIG(status));
      return "it stopped";
    }
    if (r < 0 && errno != EINTR)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "it closed its output";
}

LineProcess::Read LineProcess::readLine(std::string &line,
                                        double timeoutSeconds,
                                        size_t maxBytes) {
  using Clock = std::chrono::steady_clock;
  auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(timeoutSeconds));
  for (;;) {
    size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      if (nl > maxBytes)
        return Read::TooLong;
      line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return Read::Line;
    }
    if (pending_.size() > maxBytes)
      return Read::TooLong;
    if (fromChild_ < 0)
      return Read::Closed;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - Clock::now())
                    .count();
    if (left <= 0)
      return Read::Timeout;
    pollfd p{fromChild_, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (r < 0) {
      if (errno == EINTR)
        continue;
      throw std::runtime_error("poll: " + errnoText(errno));
    }
    if (r == 0)
      continue;
    char buf[4096];
    ssize_t n = read(fromChild_, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      throw std::runtime_error("read: " + errnoText(errno));
    }
    if (n == 0) {
      close(fromChild_);
      fromChild_ = -1;
      return Read::Closed;
    }
    pending_.append(buf, static_cast<size_t>(n));
  }
}

void LineProcess::drain() {
  while (fromChild_ >= 0) {
    pollfd p{fromChild_, POLLIN, 0};
    int r = poll(&p, 1, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return;
    char buf[4096];
    ssize_t n = read(fromChild_, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n <= 0)
      return; // it exited: the next write or read reports it
    pending_.append(buf, static_cast<size_t>(n));
  }
}

bool LineProcess::write(std::string_view text) {
  size_t off = 0;
  while (off < text.size()) {
    if (toChild_ < 0)
      return false;
    ssize_t n = ::write(toChild_, text.data() + off, text.size() - off);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      int e = errno;
      close(toChild_);
      toChild_ = -1;
      if (e == EPIPE)
        return false;
      throw std::runtime_error("write: " + errnoText(e));
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

} // namespace cac::rt
