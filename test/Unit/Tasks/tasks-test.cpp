//===- tasks-test.cpp - Tasks with verifiable rewards ---------------------===//

#include "../Model/test-util.h"

#include "cac/Runtime/Tasks/Tasks.h"
#include "cac/Runtime/Model/Tokenizer.h"

#include <set>
#include <sys/stat.h>

namespace fs = std::filesystem;
using namespace cac::rt;
using namespace cac::rt::test;

namespace {

ArithmeticTask task(uint64_t seed, int minLevel = 1, int maxLevel = 5) {
  ArithmeticTask::Options o;
  o.seed = seed;
  o.minLevel = minLevel;
  o.maxLevel = maxLevel;
  return ArithmeticTask(o);
}

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == sep)
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}

std::optional<std::string> some(const char *s) { return std::string(s); }

} // namespace

TEST(ArithmeticTask, DeterministicPerSeed) {
  auto a = task(1).problems(Split::Train, 0, 50);
  auto b = task(1).problems(Split::Train, 0, 50);
  auto c = task(2).problems(Split::Train, 0, 50);
  int different = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].solution, b[i].solution);
    EXPECT_EQ(a[i].id, b[i].id);
    different += a[i].prompt != c[i].prompt;
  }
  EXPECT_GT(different, 40) << "seeds 1 and 2 gave nearly the same problems";
  // Problem i does not depend on how the range was requested.
  EXPECT_EQ(task(1).problem(Split::Train, 37).prompt, a[37].prompt);
  EXPECT_EQ(task(1).problems(Split::Train, 30, 10)[7].prompt, a[37].prompt);
}

TEST(ArithmeticTask, ProblemsAreCorrectAndTokenizable) {
  CharTokenizer tok;
  ArithmeticTask t = task(3);
  std::set<int> levels;
  for (const Problem &p : t.problems(Split::Train, 0, 300)) {
    SCOPED_TRACE(p.prompt + " " + p.solution);
    ASSERT_EQ(p.prompt.back(), '=');
    std::string expr = p.prompt.substr(0, p.prompt.size() - 1);
    int64_t value = ArithmeticTask::evaluate(expr);
    EXPECT_EQ(std::to_string(value), p.answer);
    EXPECT_GE(value, 0);
    // Every step of the solution has the same value, and the last is the
    // answer.
    auto steps = split(p.solution, '=');
    EXPECT_EQ(steps.back(), p.answer);
    for (const std::string &s : steps)
      EXPECT_EQ(ArithmeticTask::evaluate(s), value) << s;
    EXPECT_EQ(ArithmeticTask::reward(p, p.solution), 1.0);
    EXPECT_NO_THROW(tok.encode(p.prompt + p.solution));
    EXPECT_GE(p.level, 1);
    EXPECT_LE(p.level, 5);
    levels.insert(p.level);
    if (p.level <= 3) {
      EXPECT_EQ(p.prompt.find('('), std::string::npos);
    }
    EXPECT_EQ(p.id, "arith/train/" + std::to_string(p.level) + "/" + p.prompt);
  }
  EXPECT_EQ(levels.size(), 5u);
  for (const Problem &p : task(4, 1, 1).problems(Split::Train, 0, 50)) {
    EXPECT_EQ(p.prompt.size(), 4u) << p.prompt; // d±d=
    EXPECT_TRUE(p.prompt[1] == '+' || p.prompt[1] == '-') << p.prompt;
  }
}

TEST(ArithmeticTask, EvalSplitIsHeldOut) {
  ArithmeticTask t = task(5, 1, 2);
  std::set<std::string> train;
  for (const Problem &p : t.problems(Split::Train, 0, 3000)) {
    EXPECT_FALSE(t.isEvalPrompt(p.prompt));
    train.insert(p.prompt);
  }
  auto eval = t.evalSet(100);
  EXPECT_EQ(eval.size(), 100u);
  std::set<std::string> distinct;
  for (const Problem &p : eval) {
    EXPECT_TRUE(t.isEvalPrompt(p.prompt));
    EXPECT_EQ(train.count(p.prompt), 0u) << p.prompt;
    EXPECT_EQ(p.id.rfind("arith/eval/", 0), 0u);
    distinct.insert(p.prompt);
  }
  EXPECT_EQ(distinct.size(), 100u);
  // The split is a property of the prompt, not of the seed.
  ArithmeticTask other = task(6, 1, 2);
  for (const Problem &p : eval)
    EXPECT_TRUE(other.isEvalPrompt(p.prompt));
  // Level 1 holds only a few hundred prompts; evalSet returns what exists.
  auto small = task(7, 1, 1).evalSet(300);
  EXPECT_GT(small.size(), 0u);
  EXPECT_LT(small.size(), 200u);
}

TEST(ArithmeticTask, RewardsAndExtraction) {
  Problem p;
  p.answer = "33";
  EXPECT_EQ(ArithmeticTask::reward(p, "12+21=33"), 1.0);
  EXPECT_EQ(ArithmeticTask::reward(p, " 33\n"), 1.0);
  EXPECT_EQ(ArithmeticTask::reward(p, "12+21= 33 "), 1.0);
  EXPECT_EQ(ArithmeticTask::reward(p, "12+21=34"), 0.0);
  EXPECT_EQ(ArithmeticTask::reward(p, "33=34"), 0.0);
  EXPECT_EQ(ArithmeticTask::reward(p, "12+21=33x"), 0.0);
  EXPECT_EQ(ArithmeticTask::reward(p, "12+21=3 3"), 0.0);
  EXPECT_EQ(ArithmeticTask::reward(p, ""), 0.0);
  EXPECT_EQ(ArithmeticTask::reward(p, "="), 0.0);
  EXPECT_EQ(ArithmeticTask::extractAnswer("1+2=-3"), some("-3"));
  EXPECT_EQ(ArithmeticTask::extractAnswer("1+2=-"), std::nullopt);
  // One step a line; the answer and the reward are those of the same text
  // without the breaks.
  EXPECT_EQ(ArithmeticTask::breakLines("40+30+7+8=70+15=85"),
            "40+30+7+8=\n70+15=\n85");
  EXPECT_EQ(ArithmeticTask::breakLines("33"), "33");
  EXPECT_EQ(ArithmeticTask::breakLines(""), "");
  EXPECT_EQ(ArithmeticTask::reward(p, ArithmeticTask::breakLines("12+21=33")),
            1.0);
  EXPECT_EQ(ArithmeticTask::reward(p, "12+21=\n34"), 0.0);
  EXPECT_EQ(ArithmeticTask::evaluate("2+3*4"), 14);
  EXPECT_EQ(ArithmeticTask::evaluate("(2+3)*4"), 20);
  EXPECT_EQ(ArithmeticTask::evaluate("10-(4-1)"), 7);
  EXPECT_EQ(ArithmeticTask::evaluate("10-4-1"), 5);
  EXPECT_ERROR([] { ArithmeticTask::evaluate("2+"); }, {"'2+'",
                                                        "unexpected end"});
  EXPECT_ERROR([] { ArithmeticTask::evaluate("(2+3"); }, {"expected ')'"});
  EXPECT_ERROR([] { ArithmeticTask::evaluate("2 3"); }, {"trailing input"});
  EXPECT_ERROR([] { task(1, 0, 3); }, {"levels"});
  EXPECT_ERROR([] { task(1, 4, 3); }, {"levels"});
  ArithmeticTask::Options o;
  o.evalFraction = 0.0;
  EXPECT_ERROR([&] { ArithmeticTask t(o); }, {"evalFraction"});
}

TEST(Answers, ExtractLastNumber) {
  EXPECT_EQ(extractLastNumber("The answer is 1,234."), some("1234"));
  EXPECT_EQ(extractLastNumber("-5 apples"), some("-5"));
  EXPECT_EQ(extractLastNumber("she has 3-5 left"), some("5"));
  EXPECT_EQ(extractLastNumber("so x = -12"), some("-12"));
  EXPECT_EQ(extractLastNumber("costs $1,234,567.89 total"), some("1234567.89"));
  EXPECT_EQ(extractLastNumber("about .5 of it"), some("0.5"));
  EXPECT_EQ(extractLastNumber("-.25"), some("-0.25"));
  EXPECT_EQ(extractLastNumber("pick 1,2,3"), some("3"));
  EXPECT_EQ(extractLastNumber("12,34"), some("34"));
  EXPECT_EQ(extractLastNumber("3.14 and 2.71."), some("2.71"));
  EXPECT_EQ(extractLastNumber("x2"), some("2"));
  EXPECT_EQ(extractLastNumber("no digits here"), std::nullopt);
  EXPECT_EQ(extractLastNumber(""), std::nullopt);
}

TEST(Answers, NumericMatching) {
  EXPECT_TRUE(answersMatch("72", "72"));
  EXPECT_TRUE(answersMatch("72.0", "72"));
  EXPECT_TRUE(answersMatch("72.00", "72.0"));
  EXPECT_TRUE(answersMatch("-3", "-3.000"));
  EXPECT_TRUE(answersMatch("1,000", "1000"));
  EXPECT_TRUE(answersMatch(" 5 ", "5"));
  EXPECT_TRUE(answersMatch("+5", "5"));
  EXPECT_TRUE(answersMatch("0.1", "0.10"));
  EXPECT_FALSE(answersMatch("72.5", "72"));
  EXPECT_FALSE(answersMatch("-72", "72"));
  EXPECT_FALSE(answersMatch("720", "72"));
  EXPECT_FALSE(answersMatch("1000001", "1000000"));
  EXPECT_FALSE(answersMatch("", "5"));
  EXPECT_FALSE(answersMatch("five", "5"));
  EXPECT_TRUE(answersMatch("yes", " yes"));
}

TEST(Gsm8k, LoadsAndScores) {
  TempDir dir;
  fs::path file = dir / "gsm8k.jsonl";
  writeFile(file,
            R"({"question": "How many?", "answer": "2 + 2 = 4\n#### 1,000"})"
            "\n\n"
            R"({"question": "Debt?", "answer": "She owes.\n#### -7"})"
            "\r\n"
            R"({"question": "Half?", "answer": "#### 2.5", "extra": 1})"
            "\n");
  auto problems = loadGsm8k(file);
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_EQ(problems[0].prompt, "How many?");
  EXPECT_EQ(problems[0].answer, "1000");
  EXPECT_EQ(problems[0].solution, "2 + 2 = 4\n#### 1,000");
  EXPECT_EQ(problems[0].id, file.string() + ":1");
  EXPECT_EQ(problems[1].answer, "-7");
  EXPECT_EQ(problems[1].id, file.string() + ":3");
  EXPECT_EQ(problems[2].answer, "2.5");

  EXPECT_EQ(gsm8kReward(problems[0], "So the total is 1,000."), 1.0);
  EXPECT_EQ(gsm8kReward(problems[0], "#### 1000"), 1.0);
  EXPECT_EQ(gsm8kReward(problems[0], "1000 or maybe 100"), 0.0);
  EXPECT_EQ(gsm8kReward(problems[1], "she owes -7 dollars"), 1.0);
  EXPECT_EQ(gsm8kReward(problems[1], "she owes 7 dollars"), 0.0);
  EXPECT_EQ(gsm8kReward(problems[2], "2.50"), 1.0);
  EXPECT_EQ(gsm8kReward(problems[2], "no idea"), 0.0);
}

TEST(Gsm8k, MalformedLinesNameFileAndLine) {
  TempDir dir;
  fs::path file = dir / "bad.jsonl";
  const std::string good = R"({"question": "q", "answer": "#### 1"})";
  auto expectBad = [&](const std::string &line,
                       std::initializer_list<std::string> parts) {
    SCOPED_TRACE(line);
    writeFile(file, good + "\n" + good + "\n" + line + "\n" + good + "\n");
    std::string msg = errorOf([&] { loadGsm8k(file); });
    EXPECT_NE(msg.find(file.string() + ":3: "), std::string::npos) << msg;
    for (const std::string &p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nwants: " << p;
  };
  expectBad(R"({"question": "q", "answer": "#### 1")", {"invalid JSON"});
  expectBad(R"(["q", "a"])", {"not a JSON object"});
  expectBad(R"({"question": "q"})", {"missing string field 'answer'"});
  expectBad(R"({"question": 5, "answer": "#### 1"})",
            {"missing string field 'question'"});
  expectBad(R"({"question": "q", "answer": "42"})", {"'#### N'"});
  expectBad(R"({"question": "q", "answer": "#### forty"})",
            {"'forty'", "not a number"});
  writeFile(file, "\n  \n");
  EXPECT_ERROR([&] { loadGsm8k(file); }, {file.string(), "no problems"});
  EXPECT_ERROR([&] { loadGsm8k(dir / "absent.jsonl"); }, {"absent.jsonl"});
}

// examples/gsm8k's generated sample (make_sample.py): the loader reads its
// final answers, and the reward gives 1 to the worked answer the SFT warm
// start trains on, and to its reasoning alone, whose last number is the
// answer; no test question is a training question.
TEST(Gsm8k, TheExampleSampleLoadsAndItsSolutionsScore) {
  fs::path folder = fs::path(CAC_TEST_SOURCE_DIR) / "examples" / "gsm8k";
  auto train = loadGsm8k(folder / "train.jsonl");
  auto test = loadGsm8k(folder / "test.jsonl");
  EXPECT_EQ(train.size(), 64u);
  EXPECT_EQ(test.size(), 16u);
  std::set<std::string> questions;
  for (const Problem &p : train)
    questions.insert(p.prompt);
  for (const auto *split : {&train, &test})
    for (const Problem &p : *split) {
      SCOPED_TRACE(p.id);
      // The generator's answers are non-negative integers.
      ASSERT_FALSE(p.answer.empty());
      ASSERT_EQ(p.answer.find_first_not_of("0123456789"), std::string::npos)
          << p.answer;
      EXPECT_NE(p.solution.find("<<"), std::string::npos) << p.solution;
      EXPECT_EQ(gsm8kReward(p, " " + p.solution), 1.0);
      std::string reasoning = p.solution.substr(0, p.solution.rfind("####"));
      EXPECT_EQ(gsm8kReward(p, reasoning), 1.0) << reasoning;
      std::string wrong = std::to_string(std::stol(p.answer) + 1);
      EXPECT_EQ(gsm8kReward(p, reasoning + "#### " + wrong), 0.0);
      if (split == &test)
        EXPECT_EQ(questions.count(p.prompt), 0u) << p.prompt;
    }
}

TEST(Jsonl, LoadsFieldsByName) {
  TempDir dir;
  fs::path file = dir / "data.jsonl";
  writeFile(file,
            R"({"prompt": "reverse abc=", "answer": "cba", "solution": "cba"})"
            "\n\n"
            R"({"prompt": "2+3=", "answer": 5, "extra": [1]})"
            "\r\n"
            R"({"prompt": "free text", "answer": null})"
            "\n");
  auto problems = loadJsonl(file, JsonlKeys{});
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_EQ(problems[0].prompt, "reverse abc=");
  EXPECT_EQ(problems[0].answer, "cba");
  EXPECT_EQ(problems[0].solution, "cba");
  EXPECT_EQ(problems[0].id, file.string() + ":1");
  // A number answer is its JSON text; absent fields are empty.
  EXPECT_EQ(problems[1].answer, "5");
  EXPECT_EQ(problems[1].solution, "");
  EXPECT_EQ(problems[1].id, file.string() + ":3");
  EXPECT_EQ(problems[2].answer, "");

  // Other field names.
  writeFile(file, R"({"q": "Q?", "gold": "A", "worked": " so A"})"
                  "\n");
  JsonlKeys keys;
  keys.prompt = "q";
  keys.answer = "gold";
  keys.solution = "worked";
  problems = loadJsonl(file, keys);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].prompt, "Q?");
  EXPECT_EQ(problems[0].answer, "A");
  EXPECT_EQ(problems[0].solution, " so A");
}

TEST(Jsonl, MatchReward) {
  Problem number;
  number.answer = "5";
  EXPECT_EQ(matchReward(number, "2+3=5"), 1.0);
  EXPECT_EQ(matchReward(number, "it is 5.0 "), 1.0);
  EXPECT_EQ(matchReward(number, "5 or 6"), 0.0);
  EXPECT_EQ(matchReward(number, "five"), 0.0);
  Problem text;
  text.answer = "cba";
  EXPECT_EQ(matchReward(text, "cba"), 1.0);
  EXPECT_EQ(matchReward(text, " cba\n"), 1.0);
  EXPECT_EQ(matchReward(text, "cb a"), 0.0);
  EXPECT_EQ(matchReward(text, "cbax"), 0.0);
}

TEST(Jsonl, MalformedLinesNameFileAndLine) {
  TempDir dir;
  fs::path file = dir / "bad.jsonl";
  const std::string good = R"({"prompt": "p", "answer": "a"})";
  auto expectBad = [&](const std::string &line,
                       std::initializer_list<std::string> parts) {
    SCOPED_TRACE(line);
    writeFile(file, good + "\n" + good + "\n" + line + "\n" + good + "\n");
    std::string msg = errorOf([&] { loadJsonl(file, JsonlKeys{}); });
    EXPECT_NE(msg.find(file.string() + ":3: "), std::string::npos) << msg;
    for (const std::string &p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nwants: " << p;
  };
  expectBad(R"({"prompt": "p")", {"invalid JSON"});
  expectBad(R"("p")", {"not a JSON object"});
  expectBad(R"({"question": "p"})", {"no field 'prompt'"});
  expectBad(R"({"prompt": ""})", {"field 'prompt' is empty"});
  expectBad(R"({"prompt": 5})", {"field 'prompt' is number, not a string"});
  expectBad(R"({"prompt": "p", "answer": [1]})",
            {"field 'answer' is array, not a string or a number"});
  expectBad(R"({"prompt": "p", "solution": 3})",
            {"field 'solution' is number, not a string"});
  writeFile(file, "\n");
  EXPECT_ERROR([&] { loadJsonl(file, JsonlKeys{}); },
               {file.string(), "no problems"});
  EXPECT_ERROR([&] { loadJsonl(dir / "absent.jsonl", JsonlKeys{}); },
               {"cannot open the dataset", "absent.jsonl"});
}

// A device or a FIFO given as a dataset is refused up front: /dev/zero would
// be read forever (one endless line), and opening a FIFO waits for a writer.
TEST(Jsonl, DevicesAndFifosAreRefusedUpFront) {
  TempDir dir;
  fs::path fifo = dir / "data.jsonl";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const fs::path &p : {fs::path("/dev/zero"), fifo}) {
    SCOPED_TRACE(p.string());
    EXPECT_ERROR([&] { loadJsonl(p, JsonlKeys{}); },
                 {"cannot read the dataset '" + p.string() + "'",
                  "not a regular file"});
    EXPECT_ERROR([&] { loadGsm8k(p); },
                 {"cannot read GSM8K file '" + p.string() + "'",
                  "not a regular file"});
  }
}
