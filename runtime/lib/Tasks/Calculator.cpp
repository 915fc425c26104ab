//===- Calculator.cpp - The calculator tool of multi-turn rollouts --------===//

#include "cac/Runtime/Tasks/Calculator.h"

#include <cctype>

namespace cac::rt {

namespace {

/// Recursive descent over the expression; the first error stops it (every
/// function returns nothing once `error` is set).
class CalcParser {
public:
  explicit CalcParser(std::string_view s) : s_(s) {}

  CalculatorResult run() {
    CalculatorResult r;
    std::optional<int64_t> v = expr(0);
    skip();
    if (v && i_ != s_.size())
      fail("unexpected '" + std::string(1, s_[i_]) + "'");
    if (!error_.empty()) {
      r.error = error_;
      return r;
    }
    r.value = v;
    return r;
  }

private:
  static constexpr int kMaxDepth = 64;

  std::nullopt_t fail(const std::string &what) {
    if (error_.empty())
      error_ = what + " at offset " + std::to_string(i_);
    return std::nullopt;
  }
  void skip() {
    while (i_ < s_.size() && s_[i_] == ' ')
      ++i_;
  }
  std::optional<int64_t> apply(char op, int64_t a, int64_t b) {
    int64_t out = 0;
    bool overflow = false;
    switch (op) {
    case '+':
      overflow = __builtin_add_overflow(a, b, &out);
      break;
    case '-':
      overflow = __builtin_sub_overflow(a, b, &out);
      break;
    case '*':
      overflow = __builtin_mul_overflow(a, b, &out);
      break;
    default: // '/'
      if (b == 0)
        return fail("division by zero");
      overflow = a == INT64_MIN && b == -1;
      out = overflow ? 0 : a / b;
      break;
    }
    if (overflow)
      return fail("result outside the 64-bit integers");
    return out;
  }
  std::optional<int64_t> expr(int depth) {
    std::optional<int64_t> v = term(depth);
    for (skip(); v && i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-');
         skip()) {
      char op = s_[i_++];
      std::optional<int64_t> rhs = term(depth);
      v = rhs ? apply(op, *v, *rhs) : std::nullopt;
    }
    return v;
  }
  std::optional<int64_t> term(int depth) {
    std::optional<int64_t> v = unary(depth);
    for (skip(); v && i_ < s_.size() && (s_[i_] == '*' || s_[i_] == '/');
         skip()) {
      char op = s_[i_++];
      std::optional<int64_t> rhs = unary(depth);
      v = rhs ? apply(op, *v, *rhs) : std::nullopt;
    }
    return v;
  }
  std::optional<int64_t> unary(int depth) {
    skip();
    if (i_ < s_.size() && s_[i_] == '-') {
      if (depth >= kMaxDepth)
        return fail("nested deeper than 64");
      ++i_;
      std::optional<int64_t> v = unary(depth + 1);
      return v ? apply('-', 0, *v) : std::nullopt;
    }
    return primary(depth);
  }
  std::optional<int64_t> primary(int depth) {
    if (i_ >= s_.size())
      return fail("unexpected end");
    if (s_[i_] == '(') {
      if (depth >= kMaxDepth)
        return fail("nested deeper than 64");
      ++i_;
      std::optional<int64_t> v = expr(depth + 1);
      skip();
      if (!v)
        return v;
      if (i_ >= s_.size() || s_[i_] != ')')
        return fail("expected ')'");
      ++i_;
      return v;
    }
    if (!std::isdigit(static_cast<unsigned char>(s_[i_])))
      return fail("expected a number");
    int64_t v = 0;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      if (__builtin_mul_overflow(v, int64_t(10), &v) ||
          __builtin_add_overflow(v, int64_t(s_[i_] - '0'), &v))
        return fail("number outside the 64-bit integers");
      ++i_;
    }
    return v;
  }

  std::string_view s_;
  size_t i_ = 0;
  std::string error_;
};

} // namespace

CalculatorResult evaluateCalculator(std::string_view expression) {
  if (expression.size() > kMaxCalculatorExpression) {
    CalculatorResult r;
    r.error = "expression of " + std::to_string(expression.size()) +
              " characters (at most " +
              std::to_string(kMaxCalculatorExpression) + ")";
    return r;
  }
  return CalcParser(expression).run();
}

std::optional<ClosedCall> findClosedCall(std::string_view text, size_t before,
                                         const ToolSyntax &syntax) {
  const std::string &close = syntax.close;
  if (close.empty() || before >= text.size())
    return std::nullopt;
  size_t from = before + 1 >= close.size() ? before + 1 - close.size() : 0;
  size_t at = text.find(close, from);
  if (at == std::string_view::npos)
    return std::nullopt;
  ClosedCall call;
  size_t open = syntax.open.empty() ? std::string_view::npos
                                    : text.substr(0, at).rfind(syntax.open);
  if (open != std::string_view::npos) {
    call.opened = true;
    size_t start = open + syntax.open.size();
    call.expression = std::string(text.substr(start, at - start));
  }
  return call;
}

std::string calculatorObservation(const CalculatorResult &result,
                                  const ToolSyntax &syntax) {
  return syntax.resultOpen +
         (result.value ? std::to_string(*result.value) : std::string("error")) +
         syntax.resultClose;
}

std::string_view promptExpression(std::string_view prompt) {
  while (!prompt.empty() && (prompt.back() == '=' || prompt.back() == ' '))
    prompt.remove_suffix(1);
  return prompt;
}

} // namespace cac::rt
