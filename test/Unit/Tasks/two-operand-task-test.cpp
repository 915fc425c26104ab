//===- two-operand-task-test.cpp - arith(digits = D, ops = "..") ----------===//

#include "cac/Runtime/Tasks/TwoOperandTask.h"

#include <gtest/gtest.h>

#include <set>

using namespace cac::rt;

namespace {

TEST(TwoOperandTask, ProblemsAreWellFormedAndDeterministic) {
  TwoOperandTask task(7, 2, "+-", 0.1);
  for (uint64_t i = 0; i < 500; ++i) {
    Problem p = task.problem(Split::Train, i);
    EXPECT_EQ(p.prompt, task.problem(Split::Train, i).prompt);
    ASSERT_EQ(p.prompt.back(), '=');
    std::string expr = p.prompt.substr(0, p.prompt.size() - 1);
    EXPECT_EQ(expr.find('*'), std::string::npos) << p.prompt;
    int64_t v = ArithmeticTask::evaluate(expr);
    EXPECT_GE(v, 0) << p.prompt;
    EXPECT_LE(v, 198) << p.prompt;
    EXPECT_EQ(p.answer, std::to_string(v));
    EXPECT_EQ(p.solution, p.answer);
    EXPECT_EQ(ArithmeticTask::reward(p, p.solution), 1.0);
  }
  // Another seed, another stream.
  TwoOperandTask other(8, 2, "+-", 0.1);
  int same = 0;
  for (uint64_t i = 0; i < 50; ++i)
    same += task.problem(Split::Train, i).prompt ==
            other.problem(Split::Train, i).prompt;
  EXPECT_LT(same, 5);
}

TEST(TwoOperandTask, EvalSplitIsDisjointAndDistinct) {
  TwoOperandTask task(1, 2, "+-", 0.1);
  std::vector<Problem> eval = task.evalSet(300);
  ASSERT_EQ(eval.size(), 300u);
  std::set<std::string> evalPrompts;
  for (const Problem &p : eval)
    EXPECT_TRUE(evalPrompts.insert(p.prompt).second) << p.prompt;
  for (uint64_t i = 0; i < 3000; ++i)
    EXPECT_EQ(evalPrompts.count(task.problem(Split::Train, i).prompt), 0u);
}

TEST(TwoOperandTask, OpsAndDigits) {
  TwoOperandTask mul(1, 1, "*", 0.2);
  for (uint64_t i = 0; i < 100; ++i) {
    Problem p = mul.problem(Split::Train, i);
    EXPECT_EQ(p.prompt.size(), 4u) << p.prompt; // "a*b="
    EXPECT_EQ(p.prompt[1], '*');
  }
  EXPECT_THROW(TwoOperandTask(1, 0, "+", 0.1), std::runtime_error);
  EXPECT_THROW(TwoOperandTask(1, 2, "/", 0.1), std::runtime_error);
}

TEST(TwoOperandTask, SteppedSolutionsAreCorrectArithmetic) {
  EXPECT_EQ(TwoOperandTask::steppedSolution(47, '+', 38),
            "40+30+7+8=70+15=85");
  EXPECT_EQ(TwoOperandTask::steppedSolution(61, '-', 38),
            "60-30+1-8=30-7=23");
  EXPECT_EQ(TwoOperandTask::steppedSolution(68, '-', 32),
            "60-30+8-2=30+6=36");
  EXPECT_EQ(TwoOperandTask::steppedSolution(7, '+', 5), "0+0+7+5=0+12=12");
  EXPECT_EQ(TwoOperandTask::steppedSolution(12, '*', 3), "36");
  // Every problem of both ops: each `=`-separated part evaluates to the
  // answer, and the text after the last `=` is the answer.
  for (int64_t a = 0; a < 100; ++a)
    for (int64_t b = 0; b < 100; ++b)
      for (char op : {'+', '-'}) {
        if (op == '-' && a < b)
          continue;
        std::string s = TwoOperandTask::steppedSolution(a, op, b);
        int64_t v = op == '+' ? a + b : a - b;
        std::string full = std::to_string(a) + op + std::to_string(b) + "=" + s;
        size_t start = 0;
        int parts = 0;
        while (true) {
          size_t eq = full.find('=', start);
          std::string part = full.substr(start, eq == std::string::npos
                                                    ? std::string::npos
                                                    : eq - start);
          ASSERT_EQ(ArithmeticTask::evaluate(part), v) << full;
          ++parts;
          if (eq == std::string::npos)
            break;
          start = eq + 1;
        }
        EXPECT_EQ(parts, 4) << full;
        EXPECT_EQ(s.substr(s.rfind('=') + 1), std::to_string(v)) << full;
        EXPECT_TRUE(TwoOperandTask::isStepped(s));
        EXPECT_FALSE(TwoOperandTask::isStepped(std::to_string(v)));
      }
}

TEST(TwoOperandTask, RewardScoresTheFinalAnswerOfEitherFormat) {
  TwoOperandTask task(3, 2, "+-", 0.1, 0.5);
  int stepped = 0;
  const int n = 2000;
  for (uint64_t i = 0; i < n; ++i) {
    Problem p = task.problem(Split::Train, i);
    // The prompt and answer do not depend on `steps`.
    Problem bare = TwoOperandTask(3, 2, "+-", 0.1).problem(Split::Train, i);
    EXPECT_EQ(p.prompt, bare.prompt);
    EXPECT_EQ(p.answer, bare.answer);
    EXPECT_EQ(bare.solution, bare.answer);
    if (TwoOperandTask::isStepped(p.solution)) {
      ++stepped;
      EXPECT_EQ(ArithmeticTask::reward(p, p.solution), 1.0) << p.solution;
      // A stepped solution with a wrong final answer scores 0, even when
      // its intermediate results are right.
      std::string wrong = p.solution.substr(0, p.solution.rfind('=') + 1) +
                          std::to_string(std::stoll(p.answer) + 1);
      EXPECT_EQ(ArithmeticTask::reward(p, wrong), 0.0) << wrong;
      // Wrong steps with the right final answer score 1: only the answer
      // is checked.
      EXPECT_EQ(ArithmeticTask::reward(p, "1+1=3=" + p.answer), 1.0);
    } else {
      EXPECT_EQ(p.solution, p.answer);
    }
    EXPECT_EQ(ArithmeticTask::reward(p, p.answer), 1.0);
  }
  EXPECT_GT(stepped, n * 45 / 100);
  EXPECT_LT(stepped, n * 55 / 100);
  // 0 and 1 are all bare and all stepped; the eval split's prompts are the
  // same whatever `steps` is.
  TwoOperandTask all(3, 2, "+-", 0.1, 1.0);
  for (uint64_t i = 0; i < 200; ++i)
    EXPECT_TRUE(TwoOperandTask::isStepped(all.problem(Split::Train, i).solution));
  std::vector<Problem> e1 = all.evalSet(100);
  std::vector<Problem> e0 = TwoOperandTask(3, 2, "+-", 0.1).evalSet(100);
  ASSERT_EQ(e0.size(), e1.size());
  for (size_t i = 0; i < e0.size(); ++i)
    EXPECT_EQ(e0[i].prompt, e1[i].prompt);
  EXPECT_THROW(TwoOperandTask(1, 2, "+", 0.1, 1.5), std::runtime_error);
  EXPECT_THROW(TwoOperandTask(1, 2, "+", 0.1, -0.1), std::runtime_error);
}

} // namespace
