//===- Calculator.h - The calculator tool of multi-turn rollouts -*- C++
//-*-===//
//
// `tools = calculator(..)` of a training file (docs/training.md, "Tool use"):
// a rollout writes a call such as `<calc>347*29</calc>`; the runtime
// evaluates the expression and appends the result, `<r>10063</r>`, as
// observation tokens. This file holds the text side of that: the call
// syntax, finding a call that a completion has just closed, evaluating its
// expression and writing the result. No LibTorch.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TASKS_CALCULATOR_H
#define CAC_RUNTIME_TASKS_CALCULATOR_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cac::rt {

/// The tags around a call and around its result.
struct ToolSyntax {
  std::string open = "<calc>", close = "</calc>";
  std::string resultOpen = "<r>", resultClose = "</r>";
};

/// Expressions longer than this are an error result (the evaluation is
/// linear in the length, so a call never runs long).
constexpr size_t kMaxCalculatorExpression = 256;

/// The value of a calculator expression, or why it has none.
struct CalculatorResult {
  std::optional<int64_t> value;
  /// Empty when there is a value.
  std::string error;
};

/// Evaluates \p expression: decimal integers, binary + - * /, unary minus,
/// parentheses and spaces; `/` divides integers rounding toward zero. A
/// syntax error, a division by zero, a result outside int64, nesting deeper
/// than 64 or an expression over kMaxCalculatorExpression characters is an
/// error (never an exception).
CalculatorResult evaluateCalculator(std::string_view expression);

/// A call closed by the end of a completion's text.
struct ClosedCall {
  /// The text between the opening and the closing tag; empty with
  /// `opened` false.
  std::string expression;
  /// Whether an opening tag precedes the closing one (else the call is
  /// malformed).
  bool opened = false;
};

/// The call whose closing tag ends after byte \p before of \p text (the
/// text of a turn, \p before the length of its text without the last
/// token): the first closing tag that does, and the expression after the
/// last opening tag before it. Nothing when no closing tag ends there.
std::optional<ClosedCall> findClosedCall(std::string_view text, size_t before,
                                         const ToolSyntax &syntax);

/// The observation text of a result: the value between the result tags, or
/// `error` between them.
std::string calculatorObservation(const CalculatorResult &result,
                                  const ToolSyntax &syntax);

/// The expression of an arithmetic prompt: `347*29=` -> `347*29` (the
/// prompt without its trailing `=` and spaces).
std::string_view promptExpression(std::string_view prompt);

} // namespace cac::rt

#endif // CAC_RUNTIME_TASKS_CALCULATOR_H
