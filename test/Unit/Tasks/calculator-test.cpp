//===- calculator-test.cpp - The calculator tool's expressions and calls --===//
//
// The calculator of `tools = calculator(..)`: integer expressions and their
// errors (results, never exceptions), and finding the call that a turn's
// last token closes (test/Unit/Train/tool-use-test.cpp runs it in rollouts).
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Tasks/Calculator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace cac::rt;

namespace {

TEST(Calculator, EvaluatesIntegerExpressions) {
  EXPECT_EQ(evaluateCalculator("12*7").value, 84);
  EXPECT_EQ(evaluateCalculator(" 1 + 2 * 3 ").value, 7);
  EXPECT_EQ(evaluateCalculator("(2+3)*-4").value, -20);
  EXPECT_EQ(evaluateCalculator("7/2").value, 3);
  EXPECT_EQ(evaluateCalculator("-7/2").value, -3);
  EXPECT_EQ(evaluateCalculator("10-2-3").value, 5);
  EXPECT_EQ(evaluateCalculator("347*29").value, 10063);
  EXPECT_TRUE(evaluateCalculator("12*7").error.empty());
}

TEST(Calculator, ErrorsAreResultsNotExceptions) {
  std::string deep(100, '(');
  deep += "1" + std::string(100, ')');
  struct Case {
    std::string expr, error;
  };
  for (const Case &c : std::vector<Case>{
           {"1/0", "division by zero"},
           {"12*", "unexpected end"},
           {"(1+2", "expected ')'"},
           {"", "unexpected end"},
           {"a+1", "expected a number"},
           {"1 2", "unexpected '2'"},
           {"9223372036854775807+1", "outside the 64-bit integers"},
           {"99999999999999999999", "outside the 64-bit integers"},
           {deep, "nested deeper than 64"},
           {std::string(300, '1'), "at most 256"}}) {
    CalculatorResult r = evaluateCalculator(c.expr);
    EXPECT_FALSE(r.value) << c.expr;
    EXPECT_NE(r.error.find(c.error), std::string::npos)
        << c.expr << ": " << r.error;
    EXPECT_EQ(calculatorObservation(r, ToolSyntax{}), "<r>error</r>");
  }
  EXPECT_EQ(calculatorObservation(evaluateCalculator("6*7"), ToolSyntax{}),
            "<r>42</r>");
}

TEST(Calculator, FindsTheCallTheLastTokenCloses) {
  ToolSyntax s;
  std::string text = "x<calc>1+2</calc>";
  std::optional<ClosedCall> c = findClosedCall(text, text.size() - 1, s);
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->opened);
  EXPECT_EQ(c->expression, "1+2");
  // Closed before the last token: not a new call.
  EXPECT_FALSE(findClosedCall(text + "y", text.size(), s));
  // A closing tag that ends inside the last token (BPE: `</calc>` and the
  // next text merged into one token).
  std::string merged = "<calc>3*4</calc>ab";
  c = findClosedCall(merged, merged.find("</calc>") + 3, s);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->expression, "3*4");
  // The expression after the last opening tag; none: malformed.
  c = findClosedCall("<calc>1<calc>2+2</calc>", 20, s);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->expression, "2+2");
  c = findClosedCall("1+2</calc>", 5, s);
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->opened);
}

} // namespace
