//===- two-operand-task-test.cpp - arith(digits = D, ops = "..") ----------===//

#include "cac/Runtime/Train/TwoOperandTask.h"

#include <gtest/gtest.h>

#include <set>

using namespace cac::rt;
using namespace cac::rt::train;

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

} // namespace
