//===- TwoOperandTask.cpp - a+b / a-b / a*b with D-digit operands ---------===//

#include "cac/Runtime/Tasks/TwoOperandTask.h"
#include "cac/Runtime/Support/Random.h"

#include <stdexcept>
#include <unordered_set>
#include <utility>

namespace cac::rt {

namespace {

ArithmeticTask makeSplitter(double evalFraction) {
  ArithmeticTask::Options o;
  o.evalFraction = evalFraction;
  return ArithmeticTask(o);
}

} // namespace

TwoOperandTask::TwoOperandTask(uint64_t seed, int digits, std::string ops,
                               double evalFraction, double steps)
    : seed_(seed), limit_(1), ops_(std::move(ops)), steps_(steps),
      splitter_(makeSplitter(evalFraction)) {
  if (digits < 1 || digits > 9)
    throw std::runtime_error("arith: digits must be in 1..9");
  if (ops_.empty() || ops_.find_first_not_of("+-*") != std::string::npos)
    throw std::runtime_error("arith: ops must be a non-empty subset of +-*");
  if (!(steps >= 0.0 && steps <= 1.0))
    throw std::runtime_error("arith: steps must be in [0, 1]");
  for (int i = 0; i < digits; ++i)
    limit_ *= 10;
}

Problem TwoOperandTask::problem(Split split, uint64_t index) const {
  uint64_t state =
      seed_ ^ (split == Split::Eval ? 0x5EEDE7A1ULL : 0x5EED7A1ULL);
  splitmixNext(state);
  state ^= index;
  for (int attempt = 0; attempt < 100000; ++attempt) {
    int64_t a = static_cast<int64_t>(splitmixNext(state) % limit_);
    int64_t b = static_cast<int64_t>(splitmixNext(state) % limit_);
    char op = ops_[splitmixNext(state) % ops_.size()];
    if (op == '-' && a < b)
      std::swap(a, b);
    Problem p;
    p.prompt = std::to_string(a) + op + std::to_string(b) + "=";
    if (splitter_.isEvalPrompt(p.prompt) != (split == Split::Eval))
      continue;
    int64_t v = op == '+' ? a + b : op == '-' ? a - b : a * b;
    p.answer = std::to_string(v);
    p.solution = p.answer;
    // A separate draw, after the problem is fixed: `steps` never changes
    // which problems a stream holds.
    if (steps_ > 0.0) {
      uint64_t h = state ^ 0x57E95ULL;
      double u = static_cast<double>(splitmixNext(h) >> 11) * 0x1.0p-53;
      if (u < steps_)
        p.solution = steppedSolution(a, op, b);
    }
    p.id = "arith/" + p.prompt;
    return p;
  }
  throw std::runtime_error("arith: no problem found for the split");
}

std::string TwoOperandTask::steppedSolution(int64_t a, char op, int64_t b) {
  int64_t ah = a - a % 10, al = a % 10, bh = b - b % 10, bl = b % 10;
  auto s = [](int64_t v) { return std::to_string(v); };
  if (op == '+')
    // 47+38=40+30+7+8=70+15=85
    return s(ah) + "+" + s(bh) + "+" + s(al) + "+" + s(bl) + "=" +
           s(ah + bh) + "+" + s(al + bl) + "=" + s(a + b);
  if (op == '-') {
    // 61-38=60-30+1-8=30-7=23, 68-32=60-30+8-2=30+6=36
    int64_t u = al - bl;
    return s(ah) + "-" + s(bh) + "+" + s(al) + "-" + s(bl) + "=" +
           s(ah - bh) + (u < 0 ? "-" : "+") + s(u < 0 ? -u : u) + "=" +
           s(a - b);
  }
  return s(op == '*' ? a * b : 0);
}

bool TwoOperandTask::isStepped(std::string_view completion) {
  return completion.find('=') != std::string_view::npos;
}

std::vector<Problem> TwoOperandTask::evalSet(size_t n) const {
  std::vector<Problem> out;
  std::unordered_set<std::string> seen;
  uint64_t limit = 200 * static_cast<uint64_t>(n) + 1000;
  for (uint64_t i = 0; i < limit && out.size() < n; ++i) {
    Problem p = problem(Split::Eval, i);
    if (seen.insert(p.prompt).second)
      out.push_back(std::move(p));
  }
  return out;
}

} // namespace cac::rt
