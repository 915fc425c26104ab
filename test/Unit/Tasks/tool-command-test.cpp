//===- tool-command-test.cpp - Tool calls answered by a program -----------===//
//
// ToolCommand against small shell programs: the ready line, the JSON it
// sends and the replies it reads back; a call the program hangs on, exits
// on, crashes on or answers at length becomes a failed answer and the
// program starts again; a program that cannot start or breaks the protocol
// is an error naming the command.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Tasks/ToolCommand.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <unistd.h>

using namespace cac::rt;
namespace fs = std::filesystem;

namespace {

/// A shell program that is ready at once and runs \p body for each request
/// line `$l`.
std::string readyLoop(const std::string &body) {
  return "printf '{\"ready\": true}\\n'; while IFS= read -r l; do " + body +
         "; done";
}

class ToolCommandTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cac-tool-command-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  ToolCommandOptions options(const std::string &cmd, double timeout = 10.0) {
    ToolCommandOptions o;
    o.command = cmd;
    o.dir = dir_;
    o.timeout = timeout;
    return o;
  }
  /// The error that starting \p cmd, or its first call, throws.
  std::string error(const std::string &cmd, double startTimeout = 60.0) {
    ToolCommandOptions o = options(cmd);
    o.startTimeout = startTimeout;
    try {
      ToolCommand t(o);
      t.call("12*7", 1, "12*7=");
    } catch (const std::exception &e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

} // namespace

TEST_F(ToolCommandTest, SendsCallsAndReadsObservations) {
  // Logs each request in its folder; answers 84, then a call it rejects.
  ToolCommand t(options(readyLoop(
      "printf '%s\\n' \"$l\" >>got.jsonl; case $l in "
      "*12*) echo '{\"observation\": \"84\"}';; "
      "*) echo '{\"ok\": false, \"observation\": \"bad call\"}';; esac")));
  ToolAnswer a = t.call("12*7", 1, "What is 12*7?\n");
  EXPECT_EQ(a.observation, "84");
  EXPECT_TRUE(a.ok);
  EXPECT_EQ(a.failure, "");
  a = t.call("7*", 2, "q");
  EXPECT_EQ(a.observation, "bad call");
  EXPECT_FALSE(a.ok);
  EXPECT_EQ(a.failure, "");
  EXPECT_EQ(t.calls(), 2u);
  EXPECT_EQ(t.restarts(), 0u);
  std::ifstream in(dir_ / "got.jsonl");
  std::string line;
  std::vector<nlohmann::json> got;
  while (std::getline(in, line))
    got.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0]["call"], "12*7");
  EXPECT_EQ(got[0]["turn"], 1);
  EXPECT_EQ(got[0]["prompt"], "What is 12*7?\n");
  EXPECT_EQ(got[1]["call"], "7*");
  EXPECT_EQ(got[1]["turn"], 2);
}

// A program blocked reading forever (here on everything after a `hang`
// call) is cut at the timeout; the call's observation says so, and the next
// call goes to a new program.
TEST_F(ToolCommandTest, ACallThatHangsIsCutAtTheTimeout) {
  ToolCommand t(options(readyLoop("case $l in *hang*) cat >/dev/null;; "
                                  "*) echo '{\"observation\": \"fine\"}';; "
                                  "esac"),
                        1.0));
  ToolAnswer a = t.call("hang", 1, "p");
  EXPECT_FALSE(a.ok);
  EXPECT_EQ(a.failure, "no reply within 1 s");
  EXPECT_EQ(a.observation, "[tool error: no reply within 1 s]");
  EXPECT_EQ(t.restarts(), 0u);
  a = t.call("1+1", 2, "p");
  EXPECT_TRUE(a.ok);
  EXPECT_EQ(a.observation, "fine");
  EXPECT_EQ(t.restarts(), 1u);
}

TEST_F(ToolCommandTest, ACallThatEndsTheProgramIsAFailedCall) {
  ToolCommand t(
      options(readyLoop("case $l in *exit*) exit 3;; *segv*) kill -SEGV $$;; "
                        "*) echo '{\"observation\": \"fine\"}';; esac")));
  ToolAnswer a = t.call("exit", 1, "p");
  EXPECT_FALSE(a.ok);
  EXPECT_EQ(a.failure, "it exited with status 3");
  EXPECT_EQ(a.observation, "[tool error: it exited with status 3]");
  EXPECT_EQ(t.call("x", 1, "p").observation, "fine");
  a = t.call("segv", 1, "p");
  EXPECT_EQ(a.failure, "it was killed by signal 11");
  EXPECT_EQ(t.call("x", 1, "p").observation, "fine");
  EXPECT_EQ(t.restarts(), 2u);
}

TEST_F(ToolCommandTest, AReplyOverTheByteLimitIsAFailedCall) {
  ToolCommandOptions o = options(
      readyLoop("case $l in *long*) printf '{\"observation\": \"%0100d\"}\\n' "
                "0;; *) echo '{\"observation\": \"ok\"}';; esac"));
  o.maxBytes = 40;
  ToolCommand t(o);
  ToolAnswer a = t.call("long", 1, "p");
  EXPECT_FALSE(a.ok);
  EXPECT_EQ(a.failure, "a reply over 40 bytes");
  EXPECT_EQ(t.call("short", 1, "p").observation, "ok");
}

TEST_F(ToolCommandTest, AProgramThatCannotStartIsAnError) {
  std::string e = error("./no-such-tool");
  EXPECT_NE(e.find("tool command './no-such-tool': it ended before its ready "
                   "line: it exited with status 127"),
            std::string::npos)
      << e;
  e = error("echo hello; cat");
  EXPECT_NE(e.find("its first line must be {\"ready\": true}, written once it "
                   "reads calls; it wrote 'hello'"),
            std::string::npos)
      << e;
  e = error("cat", 0.2);
  EXPECT_NE(e.find("no ready line within 0.2 s"), std::string::npos) << e;
  ToolCommandOptions o = options("cat");
  o.dir = dir_ / "missing";
  try {
    ToolCommand t(o);
    ADD_FAILURE() << "started";
  } catch (const std::exception &ex) {
    EXPECT_NE(std::string(ex.what()).find("cannot start it in"),
              std::string::npos)
        << ex.what();
  }
}

// The second start fails (the program refuses to run twice): the error
// says why it had to start again.
TEST_F(ToolCommandTest, AProgramThatCannotStartAgainIsAnError) {
  ToolCommand t(options("if [ -e started ]; then echo 'once only' >&2; exit 1; "
                        "fi; touch started; " +
                            readyLoop("exit 4"),
                        10.0));
  EXPECT_EQ(t.call("a", 1, "p").failure, "it exited with status 4");
  try {
    t.call("b", 1, "p");
    ADD_FAILURE() << "no error";
  } catch (const std::exception &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "cannot start it again after it exited with status 4 on "
                  "call 1: it ended before its ready line: it exited with "
                  "status 1"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ToolCommandTest, RepliesOutsideTheProtocolAreErrors) {
  for (const char *bad :
       {"84", "{\"observation\": 84}", "{\"observation\": \"a\", \"extra\": 1}",
        "{\"observation\": \"a\", \"ok\": 1}", "[\"a\"]"}) {
    std::string e = error(readyLoop(std::string("echo '") + bad + "'"));
    EXPECT_NE(e.find(std::string("answered '") + bad +
                     "' to call 1 ('12*7'): expected one line of JSON per "
                     "call"),
              std::string::npos)
        << bad << ": " << e;
  }
  // Both lines in one write: seen with the reply.
  std::string e = error(readyLoop("printf '{\"observation\": \"a\"}\\nx\\n'"));
  EXPECT_NE(e.find("wrote more than one line for call 1"), std::string::npos)
      << e;
  // After a protocol error the program is not used again.
  ToolCommand t(options(readyLoop("echo nonsense")));
  EXPECT_THROW(t.call("a", 1, "p"), std::runtime_error);
  try {
    t.call("a", 1, "p");
    ADD_FAILURE() << "no error";
  } catch (const std::exception &ex) {
    EXPECT_NE(std::string(ex.what()).find("it failed before"),
              std::string::npos)
        << ex.what();
  }
}
