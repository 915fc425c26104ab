//===- RewardCommand.cpp - A reward computed by an external program -------===//

#include "cac/Runtime/Tasks/RewardCommand.h"

#include "cac/Runtime/Support/Process.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <poll.h>
#include <stdexcept>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace cac::rt {

namespace {

std::string errnoText(int e) { return std::strerror(e); }

/// A line as a reward: one finite number, surrounding blanks ignored.
std::optional<double> parseReward(std::string_view line) {
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())))
    line.remove_suffix(1);
  while (!line.empty() &&
         std::isspace(static_cast<unsigned char>(line.front())))
    line.remove_prefix(1);
  if (line.empty())
    return std::nullopt;
  std::string s(line);
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v))
    return std::nullopt;
  return v;
}

/// At most \p n bytes of \p s, with NUL and other control bytes written as
/// \xNN so that the message shows them.
std::string shorten(std::string_view s, size_t n = 80) {
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

} // namespace

RewardCommand::RewardCommand(std::string command,
                             const std::filesystem::path &dir,
                             double timeoutSeconds)
    : command_(std::move(command)), timeout_(timeoutSeconds) {
  // A program that exits while we write must not kill the run with SIGPIPE:
  // writes report EPIPE instead (the program gets SIGPIPE's default back).
  std::signal(SIGPIPE, SIG_IGN);
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0)
    throw std::runtime_error("reward command: pipe: " + errnoText(errno));
  if (pipe2(out, O_CLOEXEC) != 0) {
    int e = errno;
    close(in[0]);
    close(in[1]);
    throw std::runtime_error("reward command: pipe: " + errnoText(e));
  }
  std::string folder = dir.empty() ? std::string(".") : dir.string();
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", command_};
  o.stdinFd = in[0];
  o.stdoutFd = out[1];
  o.dir = folder;
  // Its own process group, so that a program that has to be killed is
  // killed with its children and a terminal's Ctrl-C reaches only cac-run;
  // it dies with cac-run, and the stop signals a scheduler sends every
  // process are cac-run's to act on: the step in progress still needs it.
  o.ownProcessGroup = true;
  o.dieWithParent = true;
  o.ignoreStopSignals = true;
  try {
    pid_ = spawnProcess(o);
  } catch (const std::exception &e) {
    close(in[0]);
    close(out[1]);
    close(in[1]);
    close(out[0]);
    pid_ = -1;
    throw std::runtime_error("reward command '" + command_ +
                             "': cannot start it in '" + folder +
                             "': " + e.what());
  }
  close(in[0]);
  close(out[1]);
  toChild_ = in[1];
  fromChild_ = out[0];
}

RewardCommand::~RewardCommand() {
  if (toChild_ >= 0)
    close(toChild_);
  if (fromChild_ >= 0)
    close(fromChild_);
  if (pid_ <= 0)
    return;
  // EOF on its input ends a well-behaved program; give it 5 s. One that
  // failed (timed out, or answered nonsense) is killed at once.
  for (int i = 0; i < (failed_ ? 0 : 500); ++i) {
    int status;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR))
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(-pid_, SIGKILL);
  int status;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

std::string RewardCommand::exitStatus() {
  if (pid_ <= 0)
    return "it is not running";
  // It closed its output; give it a moment to exit.
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

void RewardCommand::fail(const std::string &what) {
  failed_ = true;
  throw std::runtime_error("reward command '" + command_ + "': " + what);
}

std::string RewardCommand::readLine(const std::string &which) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_));
  for (;;) {
    size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - Clock::now())
                    .count();
    if (left <= 0)
      fail("no answer within " + shorten(std::to_string(timeout_), 8) +
           " s to " + which +
           (pending_.empty() ? ""
                             : " (it wrote '" + shorten(pending_) +
                                   "' without a line break)") +
           "; it must write one line per input line and flush it (Python: "
           "print(reward, flush=True)); 'timeout' sets the wait");
    pollfd p{fromChild_, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (r < 0) {
      if (errno == EINTR)
        continue;
      fail("poll: " + errnoText(errno));
    }
    if (r == 0)
      continue;
    char buf[4096];
    ssize_t n = read(fromChild_, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      fail("read: " + errnoText(errno));
    }
    if (n == 0)
      fail("no answer to " + which + ": " + exitStatus() +
           (pending_.empty() ? ""
                             : " after writing '" + shorten(pending_) +
                                   "' without a line break") +
           " (its error output, if any, is above)");
    pending_.append(buf, static_cast<size_t>(n));
  }
}

void RewardCommand::checkNoStrayOutput() {
  for (;;) {
    pollfd p{fromChild_, POLLIN, 0};
    int r = poll(&p, 1, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    char buf[4096];
    ssize_t n = read(fromChild_, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n <= 0)
      break; // it exited: sending the next completion reports it
    pending_.append(buf, static_cast<size_t>(n));
  }
  if (!pending_.empty())
    fail("wrote more than one line for " + lastWhich_ + ": after its answer "
         "came '" + shorten(pending_) + "'; it must write exactly one line "
         "per completion");
}

double RewardCommand::score(std::string_view prompt,
                            std::string_view completion,
                            std::string_view answer, std::string_view id) {
  if (failed_ || toChild_ < 0)
    fail("it failed before");
  // A line that came after the last answer would be taken as this
  // completion's reward: the program is out of step with its input.
  if (scored_ > 0)
    checkNoStrayOutput();
  std::string which = "completion " + std::to_string(scored_ + 1) +
                      " (problem '" + shorten(id) + "')";
  nlohmann::json j{{"prompt", prompt},
                   {"completion", completion},
                   {"answer", answer},
                   {"id", id}};
  // Completions of byte-level tokenizers may end inside a UTF-8 character:
  // invalid bytes become U+FFFD rather than failing the run.
  std::string line =
      j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = write(toChild_, line.data() + off, line.size() - off);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      int e = errno;
      close(toChild_);
      toChild_ = -1;
      if (e == EPIPE)
        fail("cannot send " + which + ": " + exitStatus() +
             " (its error output, if any, is above)");
      fail("write: " + errnoText(e));
    }
    off += static_cast<size_t>(n);
  }
  lastWhich_ = which;
  std::string reply;
  try {
    reply = readLine(which);
  } catch (...) {
    close(toChild_);
    toChild_ = -1;
    throw;
  }
  auto v = parseReward(reply);
  if (!v) {
    close(toChild_);
    toChild_ = -1;
    fail("answered '" + shorten(reply) + "' to " + which +
         (reply.find('\0') != std::string::npos ? " (it holds NUL bytes)"
                                                 : "") +
         ": expected one finite number per line");
  }
  if (!pending_.empty())
    fail("wrote more than one line for " + which + ": after its answer '" +
         shorten(reply) + "' came '" + shorten(pending_) +
         "'; it must write exactly one line per completion");
  ++scored_;
  return *v;
}

} // namespace cac::rt
