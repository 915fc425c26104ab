//===- TwoOperandTask.h - a+b / a-b / a*b with D-digit operands -*- C++ -*-===//
//
// `arith(digits = D, ops = "+-")` of a training file: prompts `47+38=`,
// answer and worked solution `85`, operands of up to D digits, subtraction
// never negative. Unlike the built-in task's levels it can leave out
// multiplication, whose small table (169 products at 12x12) a model
// memorizes while its evaluation split, made of distinct prompts, holds only
// a handful; with + and - alone training and held-out prompts come from the
// same distribution. The split is ArithmeticTask's prompt hash, so held-out
// prompts never appear in training; answers are checked by
// ArithmeticTask::reward.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_TWOOPERANDTASK_H
#define CAC_RUNTIME_TRAIN_TWOOPERANDTASK_H

#include "cac/Runtime/Model/Tasks.h"

#include <cstdint>
#include <string>
#include <vector>

namespace cac::rt::train {

class TwoOperandTask {
public:
  /// \p digits in 1..9; \p ops a non-empty subset of "+-*".
  TwoOperandTask(uint64_t seed, int digits, std::string ops,
                 double evalFraction);

  /// Problem \p index of \p split, a pure function of (seed, split, index).
  Problem problem(Split split, uint64_t index) const;
  /// Up to \p n distinct evaluation problems.
  std::vector<Problem> evalSet(size_t n) const;

private:
  uint64_t seed_;
  int64_t limit_;
  std::string ops_;
  ArithmeticTask splitter_;
};

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_TWOOPERANDTASK_H
