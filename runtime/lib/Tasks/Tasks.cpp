//===- Tasks.cpp - Tasks with verifiable rewards --------------------------===//

#include "cac/Runtime/Tasks/Tasks.h"

#include "cac/Runtime/Support/FileUtil.h"
#include "cac/Runtime/Support/Random.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <unordered_set>

namespace fs = std::filesystem;

namespace cac::rt {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

bool isDigit(char c) { return c >= '0' && c <= '9'; }

/// A number with optional sign, commas and decimal point, if \p s is one.
std::optional<long double> parseNumber(std::string_view s) {
  std::string clean;
  for (char c : trim(s))
    if (c != ',')
      clean.push_back(c);
  if (!clean.empty() && clean.back() == '.')
    clean.pop_back();
  if (clean.empty())
    return std::nullopt;
  size_t i = (clean[0] == '-' || clean[0] == '+') ? 1 : 0;
  bool digits = false, dot = false;
  for (; i < clean.size(); ++i) {
    if (isDigit(clean[i]))
      digits = true;
    else if (clean[i] == '.' && !dot)
      dot = true;
    else
      return std::nullopt;
  }
  if (!digits)
    return std::nullopt;
  return std::strtold(clean.c_str(), nullptr);
}

//===----------------------------------------------------------------------===//
// Deterministic randomness
//===----------------------------------------------------------------------===//

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ULL;
  }
  return h;
}

struct Rng {
  uint64_t state;
  uint64_t next() { return splitmixNext(state); }
  /// Uniform in [lo, hi].
  int64_t range(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
};

//===----------------------------------------------------------------------===//
// Expression trees
//===----------------------------------------------------------------------===//

struct Node {
  char op = 0; // 0: a number
  int64_t value = 0;
  std::unique_ptr<Node> left, right;
};

int precedence(char op) { return op == '*' ? 2 : 1; }

int64_t apply(char op, int64_t a, int64_t b) {
  return op == '+' ? a + b : op == '-' ? a - b : a * b;
}

/// Prints with the parentheses the tree needs, so that parsing the text gives
/// back the same tree (a right operand of equal precedence is parenthesized).
void print(const Node &n, std::string &out, char parentOp = 0,
           bool isRight = false) {
  if (!n.op) {
    out += std::to_string(n.value);
    return;
  }
  bool parens = parentOp && (precedence(n.op) < precedence(parentOp) ||
                             (isRight && precedence(n.op) == precedence(parentOp)));
  if (parens)
    out += '(';
  print(*n.left, out, n.op, false);
  out += n.op;
  print(*n.right, out, n.op, true);
  if (parens)
    out += ')';
}

std::string print(const Node &n) {
  std::string s;
  print(n, s);
  return s;
}

/// Evaluates; false if an intermediate result is negative or above \p cap.
bool check(const Node &n, int64_t cap, int64_t &value) {
  if (!n.op) {
    value = n.value;
    return true;
  }
  int64_t a, b;
  if (!check(*n.left, cap, a) || !check(*n.right, cap, b))
    return false;
  value = apply(n.op, a, b);
  return value >= 0 && value <= cap;
}

/// Reduces the first operation (in evaluation order) whose operands are both
/// numbers. Returns false when \p n is already a number.
bool reduceOne(Node &n) {
  if (!n.op)
    return false;
  if (reduceOne(*n.left) || reduceOne(*n.right))
    return true;
  n.value = apply(n.op, n.left->value, n.right->value);
  n.op = 0;
  n.left.reset();
  n.right.reset();
  return true;
}

struct LevelSpec {
  int minLeaves, maxLeaves;
  int64_t maxNumber, maxFactor, cap;
  const char *ops;
  bool parens;
};

const LevelSpec &levelSpec(int level) {
  static const LevelSpec specs[] = {
      {2, 2, 9, 9, 99, "+-", false},
      {2, 2, 99, 12, 999, "+-*", false},
      {3, 3, 20, 12, 999, "+-*", false},
      {3, 4, 20, 12, 9999, "+-*", true},
      {4, 5, 50, 12, 9999, "+-*", true},
  };
  return specs[level - 1];
}

std::unique_ptr<Node> randomTree(Rng &rng, const LevelSpec &spec, int leaves,
                                 char parentOp) {
  auto n = std::make_unique<Node>();
  if (leaves == 1) {
    n->value = rng.range(0, parentOp == '*' ? spec.maxFactor : spec.maxNumber);
    return n;
  }
  std::string_view ops(spec.ops);
  n->op = ops[rng.range(0, static_cast<int64_t>(ops.size()) - 1)];
  int left = static_cast<int>(rng.range(1, leaves - 1));
  n->left = randomTree(rng, spec, left, n->op);
  n->right = randomTree(rng, spec, leaves - left, n->op);
  return n;
}

//===----------------------------------------------------------------------===//
// Parsing (for evaluate)
//===----------------------------------------------------------------------===//

struct Parser {
  std::string_view s;
  size_t i = 0;

  [[noreturn]] void fail(const std::string &what) {
    throw std::runtime_error("arithmetic expression '" + std::string(s) +
                             "': " + what + " at offset " + std::to_string(i));
  }
  void skip() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
      ++i;
  }
  int64_t expr() {
    int64_t v = term();
    for (skip(); i < s.size() && (s[i] == '+' || s[i] == '-'); skip()) {
      char op = s[i++];
      v = apply(op, v, term());
    }
    return v;
  }
  int64_t term() {
    int64_t v = factor();
    for (skip(); i < s.size() && s[i] == '*'; skip()) {
      ++i;
      v *= factor();
    }
    return v;
  }
  int64_t factor() {
    skip();
    if (i >= s.size())
      fail("unexpected end");
    if (s[i] == '(') {
      ++i;
      int64_t v = expr();
      skip();
      if (i >= s.size() || s[i] != ')')
        fail("expected ')'");
      ++i;
      return v;
    }
    if (s[i] == '-') {
      ++i;
      return -factor();
    }
    if (!isDigit(s[i]))
      fail(std::string("unexpected '") + s[i] + "'");
    int64_t v = 0;
    while (i < s.size() && isDigit(s[i])) {
      if (v > 1'000'000'000'000LL)
        fail("number too large");
      v = v * 10 + (s[i++] - '0');
    }
    return v;
  }
};

} // namespace

//===----------------------------------------------------------------------===//
// Answers
//===----------------------------------------------------------------------===//

std::optional<std::string> extractLastNumber(std::string_view text) {
  std::optional<std::string> last;
  size_t n = text.size(), i = 0;
  auto digitAt = [&](size_t k) { return k < n && isDigit(text[k]); };
  while (i < n) {
    // ".5" is a number; "1.5" is handled below as one number.
    bool leadingDot = text[i] == '.' && digitAt(i + 1) &&
                      (i == 0 || !isDigit(text[i - 1]));
    if (!isDigit(text[i]) && !leadingDot) {
      ++i;
      continue;
    }
    size_t start = i;
    // A minus sign counts unless it is a binary minus ("3-5" ends in 5).
    bool negative = start > 0 && text[start - 1] == '-' &&
                    (start < 2 || !std::isalnum(static_cast<unsigned char>(
                                      text[start - 2])));
    std::string num = leadingDot ? "0" : "";
    while (digitAt(i))
      num.push_back(text[i++]);
    // Thousands separators: ",ddd" groups of exactly three digits, so that
    // a list "1,2,3" stays three numbers.
    while (i < n && text[i] == ',' && digitAt(i + 1) && digitAt(i + 2) &&
           digitAt(i + 3) && !digitAt(i + 4)) {
      num.append(text.substr(i + 1, 3));
      i += 4;
    }
    if (i < n && text[i] == '.' && digitAt(i + 1)) {
      num.push_back(text[i++]);
      while (digitAt(i))
        num.push_back(text[i++]);
    }
    last = (negative ? "-" : "") + num;
  }
  return last;
}

bool answersMatch(std::string_view predicted, std::string_view reference) {
  auto a = parseNumber(predicted), b = parseNumber(reference);
  if (a && b)
    return std::fabs(static_cast<double>(*a - *b)) <=
           1e-9 * std::max(1.0, std::fabs(static_cast<double>(*b)));
  return trim(predicted) == trim(reference);
}

//===----------------------------------------------------------------------===//
// ArithmeticTask
//===----------------------------------------------------------------------===//

ArithmeticTask::ArithmeticTask(Options options) : options_(options) {
  if (options_.minLevel < 1 || options_.maxLevel > 5 ||
      options_.minLevel > options_.maxLevel)
    throw std::runtime_error("arithmetic task: levels must satisfy 1 <= "
                             "minLevel <= maxLevel <= 5, got " +
                             std::to_string(options_.minLevel) + ".." +
                             std::to_string(options_.maxLevel));
  if (!(options_.evalFraction > 0 && options_.evalFraction < 1))
    throw std::runtime_error("arithmetic task: evalFraction must be in (0, 1)");
}

bool ArithmeticTask::isEvalPrompt(std::string_view prompt) const {
  uint64_t h = fnv1a(prompt);
  uint64_t mixed = splitmixNext(h);
  return static_cast<double>(mixed % 1'000'000) <
         options_.evalFraction * 1'000'000.0;
}

Problem ArithmeticTask::problem(Split split, uint64_t index) const {
  uint64_t state = options_.seed;
  state = splitmixNext(state) ^ (split == Split::Eval ? 0xE7A1ULL : 0x7A1ULL);
  state = splitmixNext(state) ^ index;
  Rng rng{splitmixNext(state)};
  for (int attempt = 0; attempt < 100000; ++attempt) {
    int level =
        static_cast<int>(rng.range(options_.minLevel, options_.maxLevel));
    const LevelSpec &spec = levelSpec(level);
    int leaves = static_cast<int>(rng.range(spec.minLeaves, spec.maxLeaves));
    std::unique_ptr<Node> tree = randomTree(rng, spec, leaves, 0);
    int64_t value;
    if (!check(*tree, spec.cap, value))
      continue;
    std::string text = print(*tree);
    if (!spec.parens && text.find('(') != std::string::npos)
      continue;
    Problem p;
    p.prompt = text + "=";
    if (isEvalPrompt(p.prompt) != (split == Split::Eval))
      continue;
    p.level = level;
    p.answer = std::to_string(value);
    p.id = std::string("arith/") + (split == Split::Eval ? "eval/" : "train/") +
           std::to_string(level) + "/" + p.prompt;
    while (reduceOne(*tree)) {
      if (!p.solution.empty())
        p.solution += '=';
      p.solution += print(*tree);
    }
    return p;
  }
  throw std::runtime_error("arithmetic task: no problem found (evalFraction " +
                           std::to_string(options_.evalFraction) +
                           " too small?)");
}

std::vector<Problem> ArithmeticTask::problems(Split split, uint64_t start,
                                              size_t count) const {
  std::vector<Problem> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i)
    out.push_back(problem(split, start + i));
  return out;
}

std::vector<Problem> ArithmeticTask::evalSet(size_t n) const {
  std::vector<Problem> out;
  std::unordered_set<std::string> seen;
  uint64_t limit = 200 * static_cast<uint64_t>(n) + 1000;
  for (uint64_t i = 0; out.size() < n && i < limit; ++i) {
    Problem p = problem(Split::Eval, i);
    if (seen.insert(p.prompt).second)
      out.push_back(std::move(p));
  }
  return out;
}

std::optional<std::string>
ArithmeticTask::extractAnswer(std::string_view completion) {
  std::string_view s = trim(completion);
  size_t eq = s.rfind('=');
  if (eq != std::string_view::npos)
    s = trim(s.substr(eq + 1));
  if (s.empty())
    return std::nullopt;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size())
    return std::nullopt;
  for (size_t k = i; k < s.size(); ++k)
    if (!isDigit(s[k]))
      return std::nullopt;
  return std::string(s);
}

double ArithmeticTask::reward(const Problem &problem,
                              std::string_view completion) {
  auto a = extractAnswer(completion);
  return a && answersMatch(*a, problem.answer) ? 1.0 : 0.0;
}

std::string ArithmeticTask::breakLines(std::string_view solution) {
  std::string out;
  out.reserve(solution.size() + 4);
  for (char ch : solution) {
    out.push_back(ch);
    if (ch == '=')
      out.push_back('\n');
  }
  return out;
}

int64_t ArithmeticTask::evaluate(std::string_view expression) {
  Parser p{expression};
  int64_t v = p.expr();
  p.skip();
  if (p.i != expression.size())
    p.fail("trailing input");
  return v;
}

//===----------------------------------------------------------------------===//
// GSM8K
//===----------------------------------------------------------------------===//

std::vector<Problem> loadGsm8k(const fs::path &path) {
  requireRegularFile(path, "GSM8K file");
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot open GSM8K file '" + path.string() + "'");
  std::vector<Problem> out;
  std::string line;
  for (size_t lineNo = 1; std::getline(in, line); ++lineNo) {
    std::string where = path.string() + ":" + std::to_string(lineNo) + ": ";
    if (trim(line).empty())
      continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception &e) {
      throw std::runtime_error(where + "invalid JSON: " + e.what());
    }
    if (!j.is_object())
      throw std::runtime_error(where + "not a JSON object");
    for (const char *key : {"question", "answer"})
      if (!j.contains(key) || !j[key].is_string())
        throw std::runtime_error(where + "missing string field '" + key + "'");
    Problem p;
    p.prompt = j["question"].get<std::string>();
    p.solution = j["answer"].get<std::string>();
    size_t mark = p.solution.rfind("####");
    if (mark == std::string::npos)
      throw std::runtime_error(where +
                               "answer has no final '#### N' line");
    std::string_view final = trim(std::string_view(p.solution).substr(mark + 4));
    if (!parseNumber(final))
      throw std::runtime_error(where + "final answer '" + std::string(final) +
                               "' is not a number");
    for (char c : final)
      if (c != ',')
        p.answer.push_back(c);
    p.id = path.string() + ":" + std::to_string(lineNo);
    out.push_back(std::move(p));
  }
  if (in.bad())
    throw std::runtime_error("error reading '" + path.string() + "'");
  if (out.empty())
    throw std::runtime_error("GSM8K file '" + path.string() +
                             "' holds no problems");
  return out;
}

std::vector<Problem> loadJsonl(const fs::path &path, const JsonlKeys &keys) {
  requireRegularFile(path, "the dataset");
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot open the dataset '" + path.string() + "'");
  std::vector<Problem> out;
  std::string line;
  for (size_t lineNo = 1; std::getline(in, line); ++lineNo) {
    std::string where = path.string() + ":" + std::to_string(lineNo) + ": ";
    if (trim(line).empty())
      continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception &e) {
      throw std::runtime_error(where + "invalid JSON: " + e.what());
    }
    if (!j.is_object())
      throw std::runtime_error(where + "not a JSON object");
    Problem p;
    auto text = [&](const std::string &key, bool numberToo,
                    std::string &to) {
      auto it = j.find(key);
      if (it == j.end() || it->is_null())
        return false;
      if (it->is_string())
        to = it->get<std::string>();
      else if (numberToo && it->is_number())
        to = it->dump();
      else
        throw std::runtime_error(where + "field '" + key + "' is " +
                                 it->type_name() + ", not a string" +
                                 (numberToo ? " or a number" : ""));
      return true;
    };
    if (!text(keys.prompt, false, p.prompt))
      throw std::runtime_error(where + "no field '" + keys.prompt +
                               "' (the prompt; `prompt = \"KEY\"` names "
                               "another)");
    if (p.prompt.empty())
      throw std::runtime_error(where + "field '" + keys.prompt +
                               "' is empty");
    text(keys.answer, true, p.answer);
    text(keys.solution, false, p.solution);
    p.id = path.string() + ":" + std::to_string(lineNo);
    out.push_back(std::move(p));
  }
  if (in.bad())
    throw std::runtime_error("error reading '" + path.string() + "'");
  if (out.empty())
    throw std::runtime_error("the dataset '" + path.string() +
                             "' holds no problems");
  return out;
}

double matchReward(const Problem &problem, std::string_view completion) {
  if (parseNumber(problem.answer)) {
    auto n = extractLastNumber(completion);
    return n && answersMatch(*n, problem.answer) ? 1.0 : 0.0;
  }
  return trim(completion) == trim(problem.answer) ? 1.0 : 0.0;
}

double gsm8kReward(const Problem &problem, std::string_view completion) {
  auto n = extractLastNumber(completion);
  return n && answersMatch(*n, problem.answer) ? 1.0 : 0.0;
}

} // namespace cac::rt
