//===- RewardCommand.cpp - A reward computed by an external program -------===//

#include "cac/Runtime/Tasks/RewardCommand.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <stdexcept>

namespace cac::rt {

namespace {

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

std::string shorten(std::string_view s) { return shortenForMessage(s); }

} // namespace

RewardCommand::RewardCommand(std::string command,
                             const std::filesystem::path &dir,
                             double timeoutSeconds)
    : command_(std::move(command)), timeout_(timeoutSeconds) {
  try {
    process_ = std::make_unique<LineProcess>(command_, dir);
  } catch (const std::exception &e) {
    throw std::runtime_error("reward command '" + command_ + "': " + e.what());
  }
}

RewardCommand::~RewardCommand() {
  // One that failed (timed out, or answered nonsense) is killed at once.
  if (process_)
    process_->finish(failed_ ? 0.0 : 5.0);
}

void RewardCommand::fail(const std::string &what) {
  failed_ = true;
  throw std::runtime_error("reward command '" + command_ + "': " + what);
}

std::string RewardCommand::readLine(const std::string &which) {
  std::string line;
  LineProcess::Read r;
  try {
    r = process_->readLine(line, timeout_);
  } catch (const std::exception &e) {
    fail(e.what());
  }
  const std::string &pending = process_->pending();
  switch (r) {
  case LineProcess::Read::Line:
    return line;
  case LineProcess::Read::Timeout:
    fail("no answer within " + shortenForMessage(std::to_string(timeout_), 8) +
         " s to " + which +
         (pending.empty() ? ""
                          : " (it wrote '" + shorten(pending) +
                                "' without a line break)") +
         "; it must write one line per input line and flush it (Python: "
         "print(reward, flush=True)); 'timeout' sets the wait");
  case LineProcess::Read::Closed:
  case LineProcess::Read::TooLong:
    break;
  }
  fail("no answer to " + which + ": " + process_->exitStatus() +
       (pending.empty() ? ""
                        : " after writing '" + shorten(pending) +
                              "' without a line break") +
       " (its error output, if any, is above)");
}

void RewardCommand::checkNoStrayOutput() {
  process_->drain();
  if (!process_->pending().empty())
    fail("wrote more than one line for " + lastWhich_ + ": after its answer "
         "came '" + shorten(process_->pending()) + "'; it must write exactly "
         "one line per completion");
}

double RewardCommand::score(std::string_view prompt,
                            std::string_view completion,
                            std::string_view answer, std::string_view id) {
  if (failed_)
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
  bool sent = false;
  try {
    sent = process_->write(line);
  } catch (const std::exception &e) {
    fail(e.what());
  }
  if (!sent)
    fail("cannot send " + which + ": " + process_->exitStatus() +
         " (its error output, if any, is above)");
  lastWhich_ = which;
  std::string reply = readLine(which);
  auto v = parseReward(reply);
  if (!v) {
    fail("answered '" + shorten(reply) + "' to " + which +
         (reply.find('\0') != std::string::npos ? " (it holds NUL bytes)"
                                                 : "") +
         ": expected one finite number per line");
  }
  if (!process_->pending().empty())
    fail("wrote more than one line for " + which + ": after its answer '" +
         shorten(reply) + "' came '" + shorten(process_->pending()) +
         "'; it must write exactly one line per completion");
  ++scored_;
  return *v;
}

} // namespace cac::rt
