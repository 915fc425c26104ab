//===- TwoOperandTask.h - a+b / a-b / a*b with D-digit operands -*- C++ -*-===//
//
// `arith(digits = D, ops = "+-", steps = F)` of a training file: prompts
// `47+38=`, answer `85`, operands of up to D digits, subtraction never
// negative. The worked solution is the bare answer `85`, or, for a fraction
// F of the training problems (a pure function of the seed and the index),
// the answer reached in place-value steps:
//   47+38=40+30+7+8=70+15=85     61-38=60-30+1-8=30-7=23
// (the prompt is the same either way; `*` is always bare). Unlike the built-in task's levels it can leave out
// multiplication, whose small table (169 products at 12x12) a model
// memorizes while its evaluation split, made of distinct prompts, holds only
// a handful; with + and - alone training and held-out prompts come from the
// same distribution. The split is ArithmeticTask's prompt hash, so held-out
// prompts never appear in training; answers are checked by
// ArithmeticTask::reward.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TASKS_TWOOPERANDTASK_H
#define CAC_RUNTIME_TASKS_TWOOPERANDTASK_H

#include "cac/Runtime/Tasks/Tasks.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cac::rt {

class TwoOperandTask {
public:
  /// \p digits in 1..9; \p ops a non-empty subset of "+-*"; \p steps in
  /// [0, 1]: the fraction of worked solutions written in steps.
  TwoOperandTask(uint64_t seed, int digits, std::string ops,
                 double evalFraction, double steps = 0.0);

  /// The stepped solution of `a op b` (after the prompt's `=`), ending in
  /// `=` and the answer: `40+30+7+8=70+15=85`, `60-30+1-8=30-7=23`. For
  /// `*`, the bare answer.
  static std::string steppedSolution(int64_t a, char op, int64_t b);
  /// Whether a completion is written in steps (holds an `=`).
  static bool isStepped(std::string_view completion);

  /// Problem \p index of \p split, a pure function of (seed, split, index).
  Problem problem(Split split, uint64_t index) const;
  /// Up to \p n distinct evaluation problems.
  std::vector<Problem> evalSet(size_t n) const;

private:
  uint64_t seed_;
  int64_t limit_;
  std::string ops_;
  double steps_;
  ArithmeticTask splitter_;
};

} // namespace cac::rt

#endif // CAC_RUNTIME_TASKS_TWOOPERANDTASK_H
