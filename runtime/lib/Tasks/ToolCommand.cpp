//===- ToolCommand.cpp - A tool of multi-turn rollouts as a program -------===//

#include "cac/Runtime/Tasks/ToolCommand.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <optional>
#include <stdexcept>

namespace cac::rt {

namespace {

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::string shorten(std::string_view s, size_t n = 80) {
  return shortenForMessage(s, n);
}

constexpr const char *kReplyShape =
    "expected one line of JSON per call, {\"observation\": \"TEXT\"} or "
    "{\"observation\": \"TEXT\", \"ok\": false}";

/// The reply \p line as an answer, or nothing when it is not
/// {"observation": string[, "ok": bool]}.
std::optional<ToolAnswer> parseReply(const std::string &line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return std::nullopt;
  auto obs = j.find("observation");
  if (obs == j.end() || !obs->is_string())
    return std::nullopt;
  ToolAnswer a;
  a.observation = obs->get<std::string>();
  a.ok = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "observation")
      continue;
    if (it.key() != "ok" || !it.value().is_boolean())
      return std::nullopt;
    a.ok = it.value().get<bool>();
  }
  return a;
}

} // namespace

std::string ToolCommand::failureObservation(const std::string &why) {
  return "[tool error: " + why + "]";
}

ToolCommand::ToolCommand(ToolCommandOptions options)
    : options_(std::move(options)) {
  start();
}

ToolCommand::~ToolCommand() {
  if (process_)
    process_->finish(broken_ ? 0.0 : 5.0);
}

void ToolCommand::fail(const std::string &what) {
  broken_ = true;
  if (process_)
    process_->kill();
  throw std::runtime_error("tool command '" + options_.command + "': " + what);
}

void ToolCommand::start() {
  // After a failed call the error says why the program had to start again.
  std::string again = stoppedBecause_.empty() ? std::string()
                                              : "cannot start it again after " +
                                                    stoppedBecause_ + ": ";
  try {
    process_ = std::make_unique<LineProcess>(options_.command, options_.dir);
  } catch (const std::exception &e) {
    fail(again + e.what());
  }
  std::string line;
  LineProcess::Read r;
  try {
    r = process_->readLine(line, options_.startTimeout, options_.maxBytes);
  } catch (const std::exception &e) {
    fail(again + e.what());
  }
  const std::string &pending = process_->pending();
  switch (r) {
  case LineProcess::Read::Line: {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.size() == 1 &&
        j.contains("ready") && j["ready"] == true)
      return;
    fail(again +
         "its first line must be {\"ready\": true}, written once it "
         "reads calls; it wrote '" +
         shorten(line) + "'");
  }
  case LineProcess::Read::Timeout:
    fail(again + "no ready line within " + seconds(options_.startTimeout) +
         " s" +
         (pending.empty()
              ? ""
              : " (it wrote '" + shorten(pending) + "' without a line break)") +
         "; once it reads calls it must write {\"ready\": true} and flush it "
         "(Python: print(json.dumps({\"ready\": True}), flush=True)); "
         "'start_timeout' sets the wait");
  case LineProcess::Read::Closed:
    fail(again + "it ended before its ready line: " + process_->exitStatus() +
         " (its error output, if any, is above)");
  case LineProcess::Read::TooLong:
    break;
  }
  fail(again + "its first line is over " + std::to_string(options_.maxBytes) +
       " bytes");
}

ToolAnswer ToolCommand::failed(std::string why) {
  process_->kill();
  process_.reset();
  stoppedBecause_ = why + " on call " + std::to_string(calls_);
  ToolAnswer a;
  a.observation = failureObservation(why);
  a.failure = std::move(why);
  return a;
}

ToolAnswer ToolCommand::call(std::string_view call, int64_t turn,
                             std::string_view prompt) {
  if (broken_)
    fail("it failed before");
  if (!process_) {
    ++restarts_;
    start();
  }
  // A line that came after the last reply would be taken as this call's:
  // the program is out of step with its input.
  try {
    process_->drain();
  } catch (const std::exception &e) {
    fail(e.what());
  }
  if (!process_->pending().empty())
    fail("wrote more than one line for call " + std::to_string(calls_) +
         ": after its reply came '" + shorten(process_->pending()) +
         "'; it must write exactly one line per call");
  ++calls_;
  std::string which =
      "call " + std::to_string(calls_) + " ('" + shorten(call, 40) + "')";
  nlohmann::ordered_json j{{"call", call}, {"turn", turn}, {"prompt", prompt}};
  // A byte-level tokenizer's text may end inside a UTF-8 character: invalid
  // bytes become U+FFFD rather than failing the run.
  std::string request =
      j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::string reply;
  LineProcess::Read r;
  try {
    if (!process_->write(request))
      return failed("it exited before reading the call (" +
                    process_->exitStatus() + ")");
    r = process_->readLine(reply, options_.timeout, options_.maxBytes);
  } catch (const std::exception &e) {
    fail(e.what());
  }
  switch (r) {
  case LineProcess::Read::Timeout:
    return failed("no reply within " + seconds(options_.timeout) + " s");
  case LineProcess::Read::Closed:
    return failed(process_->exitStatus());
  case LineProcess::Read::TooLong:
    return failed("a reply over " + std::to_string(options_.maxBytes) +
                  " bytes");
  case LineProcess::Read::Line:
    break;
  }
  std::optional<ToolAnswer> a = parseReply(reply);
  if (!a)
    fail("answered '" + shorten(reply) + "' to " + which + ": " + kReplyShape);
  if (!process_->pending().empty())
    fail("wrote more than one line for " + which + ": after its reply came '" +
         shorten(process_->pending()) +
         "'; it must write exactly one line per call");
  return *a;
}

} // namespace cac::rt
