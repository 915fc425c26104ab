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

#include <fstream>
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
  EXPECT_NE(e.find("no answer to completion 1"), std::string::npos) << e;
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
  // An answer without its line break is shown. The timeout leaves the shell
  // time to write its '1' however busy the machine is (the program never
  // answers, so the test takes the whole timeout).
  e = firstError("read -r l; printf 1; sleep 30", 5.0);
  EXPECT_NE(e.find("it wrote '1' without a line break"), std::string::npos)
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
