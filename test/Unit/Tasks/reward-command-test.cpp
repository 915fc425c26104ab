//===- reward-command-test.cpp - Rewards from an external program ---------===//
//
// RewardCommand against small shell programs: the JSON it sends, the numbers
// it reads back, the folder the program runs in, and a clear error (never a
// hang or a SIGPIPE) when the program exits, answers something that is not
// a number, or does not answer in time.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Tasks/RewardCommand.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace cac::rt;
namespace fs = std::filesystem;

namespace {

class RewardCommandTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cac-reward-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// The error \p cmd's first score throws (empty if none).
  std::string firstError(const std::string &cmd, double timeout = 10.0) {
    RewardCommand r(cmd, dir_, timeout);
    try {
      r.score("1+1=", "2", "2", "arith/1+1=");
    } catch (const std::exception &e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

} // namespace

TEST_F(RewardCommandTest, SendsJsonLinesAndReadsNumbers) {
  // Logs each request; answers 0.25, then 0.5 between blanks, then 0.75 in
  // exponent form.
  RewardCommand r("n=0; while IFS= read -r l; do n=$((n+1)); "
                  "printf '%s\\n' \"$l\" >>got.jsonl; case $n in "
                  "1) echo 0.25;; 2) echo ' 0.5 ';; *) echo 7.5e-1;; esac; "
                  "done",
                  dir_, 10.0);
  EXPECT_EQ(r.score("47+38=", "40+30+7+8=70+15=85", "85", "arith/47+38="),
            0.25);
  EXPECT_EQ(r.score("Question: \"q\"\nAnswer:", " 7\n", "7", "gsm8k/1"), 0.5);
  // Invalid UTF-8 (a byte-level token cut inside a character) is replaced.
  EXPECT_EQ(r.score("p", std::string("a\xff") + "b", "x", "i"), 0.75);
  EXPECT_EQ(r.scored(), 3u);
  std::ifstream in(dir_ / "got.jsonl");
  std::string line;
  std::vector<nlohmann::json> got;
  while (std::getline(in, line))
    got.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0]["prompt"], "47+38=");
  EXPECT_EQ(got[0]["completion"], "40+30+7+8=70+15=85");
  EXPECT_EQ(got[0]["answer"], "85");
  EXPECT_EQ(got[0]["id"], "arith/47+38=");
  EXPECT_EQ(got[1]["prompt"], "Question: \"q\"\nAnswer:");
  EXPECT_EQ(got[1]["completion"], " 7\n");
  EXPECT_EQ(got[2]["completion"], "a\xef\xbf\xbd" "b");
}

TEST_F(RewardCommandTest, RunsInTheGivenFolder) {
  std::ofstream(dir_ / "value.txt") << "-1.5\n";
  RewardCommand r("while read -r l; do cat value.txt; done", dir_, 10.0);
  EXPECT_EQ(r.score("p", "c", "a", "i"), -1.5);
  EXPECT_EQ(r.score("p", "c", "a", "i"), -1.5);
}

TEST_F(RewardCommandTest, AProgramThatExitsIsReported) {
  std::string e = firstError("echo 'scorer: missing model' >&2; exit 3");
  EXPECT_NE(e.find("reward command 'echo 'scorer: missing model' >&2; exit "
                   "3': "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("it exited with status 3"), std::string::npos) << e;
  // Exits after reading the request, before answering.
  e = firstError("read -r l; exit 0");
  EXPECT_NE(e.find("no answer to completion 1 (problem 'arith/1+1=')"),
            std::string::npos)
      << e;
  // A program that cannot be found: the shell's status 127.
  e = firstError("./no-such-scorer");
  EXPECT_NE(e.find("status 127"), std::string::npos) << e;
}

TEST_F(RewardCommandTest, AnswersThatAreNotNumbersAreReported) {
  for (const char *bad : {"yes", "1.0 2.0", "nan", "inf", "", "1e999"}) {
    std::string e =
        firstError(std::string("read -r l; echo '") + bad + "'");
    EXPECT_NE(e.find(std::string("answered '") + bad +
                     "' to completion 1 (problem 'arith/1+1='): expected "
                     "one finite number per line"),
              std::string::npos)
        << bad << ": " << e;
  }
  // After a failure the command is not used again.
  RewardCommand r("read -r l; echo x; cat >/dev/null", dir_, 10.0);
  EXPECT_THROW(r.score("p", "c", "a", "i"), std::runtime_error);
  try {
    r.score("p", "c", "a", "i");
    ADD_FAILURE() << "no error";
  } catch (const std::exception &e) {
    EXPECT_NE(std::string(e.what()).find("it failed before"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(RewardCommandTest, ASilentProgramTimesOut) {
  std::string e = firstError("read -r l; sleep 30", 0.2);
  EXPECT_NE(e.find("no answer within 0.2"), std::string::npos) << e;
  EXPECT_NE(e.find("flush"), std::string::npos) << e;
  // An answer without its line break is shown, here when the program exits
  // after it (so the test does not depend on how soon a busy machine runs
  // the program's printf).
  e = firstError("read -r l; printf 1");
  EXPECT_NE(e.find("no answer to completion 1 (problem 'arith/1+1='): "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(" after writing '1' without a line break"),
            std::string::npos)
      << e;
}

TEST_F(RewardCommandTest, AFolderThatDoesNotExistIsReported) {
  try {
    RewardCommand r("cat", dir_ / "missing", 10.0);
    ADD_FAILURE() << "started";
  } catch (const std::exception &e) {
    EXPECT_NE(std::string(e.what()).find("cannot start it in"),
              std::string::npos)
        << e.what();
  }
}

// Exactly one line per completion: a second line is not taken as the next
// completion's reward.
TEST_F(RewardCommandTest, ExtraLinesAreAnErrorNamingTheCompletion) {
  // Both lines in one write: seen with the first answer.
  std::string e = firstError("read -r l; printf '1\\n2\\n'; cat >/dev/null");
  EXPECT_NE(e.find("wrote more than one line for completion 1 (problem "
                   "'arith/1+1='): after its answer '1' came '2\\x0a'"),
            std::string::npos)
      << e;
  // The extra line comes after the answer was read (the test says when, by
  // a file): seen before the next completion is sent. The program says when
  // it wrote it (a file), so the test does not wait for time.
  RewardCommand r("read -r l; echo 1; until [ -e go ]; do sleep 0.01; done; "
                  "echo 2; touch wrote; cat >/dev/null",
                  dir_, 10.0);
  EXPECT_EQ(r.score("p", "c", "a", "first"), 1.0);
  std::ofstream(dir_ / "go") << "";
  for (int i = 0; i < 100000 && !fs::exists(dir_ / "wrote"); ++i)
    usleep(1000);
  ASSERT_TRUE(fs::exists(dir_ / "wrote"));
  try {
    r.score("p", "c", "a", "second");
    ADD_FAILURE() << "the extra line was taken as a reward";
  } catch (const std::exception &ex) {
    EXPECT_NE(std::string(ex.what()).find(
                  "wrote more than one line for completion 1 (problem "
                  "'first'): after its answer came '2\\x0a'"),
              std::string::npos)
        << ex.what();
  }
}

TEST_F(RewardCommandTest, NulBytesInAnAnswerAreShown) {
  std::string e = firstError("read -r l; printf '1\\0002\\n'");
  EXPECT_NE(e.find("answered '1\\x002' to completion 1 (problem "
                   "'arith/1+1=') (it holds NUL bytes)"),
            std::string::npos)
      << e;
}

namespace {
/// The process \p pid has ended (gone, or a zombie nobody reaped yet).
bool ended(pid_t pid) {
  if (kill(pid, 0) != 0)
    return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)),
                   std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  return paren == std::string::npos || text.size() < paren + 3 ||
         text[paren + 2] == 'Z' || text[paren + 2] == 'X';
}
} // namespace

// A reward program dies with the process that runs it, even one killed by
// SIGKILL (which runs no destructor), and a program that does not read its
// input (which EOF would not end).
TEST_F(RewardCommandTest, TheProgramDiesWithItsParent) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    RewardCommand r("echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 1000",
                    dir_, 10.0);
    pause();
    _exit(0);
  }
  for (int i = 0; i < 100000 && !fs::exists(dir_ / "pid"); ++i)
    usleep(1000);
  ASSERT_TRUE(fs::exists(dir_ / "pid"));
  pid_t program = 0;
  std::ifstream(dir_ / "pid") >> program;
  ASSERT_GT(program, 0);
  EXPECT_FALSE(ended(program));
  kill(child, SIGKILL);
  int status;
  waitpid(child, &status, 0);
  // The kernel delivers the parent-death signal as the parent exits; the
  // bound only keeps a regression from hanging the suite.
  for (int i = 0; i < 20000 && !ended(program); ++i)
    usleep(1000);
  EXPECT_TRUE(ended(program)) << "reward program " << program << " outlived "
                              << "its parent";
  if (!ended(program))
    kill(program, SIGKILL);
}

// A scheduler's SIGTERM to every process of the job does not end the
// program: cac-run still needs it to finish its step.
TEST_F(RewardCommandTest, TheProgramIgnoresStopSignals) {
  RewardCommand r("echo $$ > pid; while read -r l; do echo 0.5; done", dir_,
                  10.0);
  EXPECT_EQ(r.score("p", "c", "a", "i"), 0.5);
  pid_t program = 0;
  std::ifstream(dir_ / "pid") >> program;
  ASSERT_GT(program, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    kill(program, sig);
  EXPECT_EQ(r.score("p", "c", "a", "i"), 0.5);
}
