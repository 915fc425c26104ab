//===- Tasks.h - Tasks with verifiable rewards ------------------*- C++ -*-===//
//
// Problems whose answers are checked exactly: a built-in generator of
// arithmetic expressions (deterministic from a seed, with a held-out split
// that never overlaps training), and GSM8K-style JSONL files.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TASKS_TASKS_H
#define CAC_RUNTIME_TASKS_TASKS_H

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cac::rt {

/// One problem.
struct Problem {
  /// Stable identifier ("arith/train/<level>/<prompt>", "FILE:LINE").
  std::string id;
  /// What the model is given.
  std::string prompt;
  /// The reference final answer (normalized: an integer or decimal string).
  std::string answer;
  /// A worked solution to append after the prompt for supervised warm start
  /// (it ends with the final answer).
  std::string solution;
  /// Difficulty level (arithmetic only; 0 otherwise).
  int level = 0;
};

/// Which part of a task.
enum class Split { Train, Eval };

/// The last number in \p text, normalized: thousands separators (",ddd"
/// groups) removed ("-1,234.5" → "-1234.5"), a sentence's final '.' not part
/// of it ("is 42." → "42"), ".5" → "0.5"; a '-' counts as a sign unless it
/// follows a letter or digit ("3-5" → "5"). Nothing when there is no digit.
std::optional<std::string> extractLastNumber(std::string_view text);

/// Whether two numeric answers are equal as numbers ("72" == "72.0" ==
/// "72.00"); non-numeric strings compare after trimming.
bool answersMatch(std::string_view predicted, std::string_view reference);

/// Built-in arithmetic: expressions over non-negative integers with + - *
/// and parentheses, every intermediate result non-negative.
///
/// Prompt `12+7*3=`, solution `12+21=33` (one operation per step, in the
/// usual order), answer `33`. Levels (1..5): 1 `a±b` with one-digit
/// numbers; 2 two operands up to 99 with `*` (factors up to 12); 3 three
/// operands up to 20; 4 three or four operands with parentheses; 5 four or
/// five operands up to 50 with parentheses.
///
/// Problem i of a split is a pure function of (seed, split, i), so workers
/// can draw disjoint indices without coordination. The split of a problem is
/// a hash of its prompt (independent of the seed), so no evaluation prompt
/// is ever a training prompt, whatever seeds are used.
class ArithmeticTask {
public:
  struct Options {
    uint64_t seed = 0;
    int minLevel = 1;
    int maxLevel = 3;
    /// Fraction of all prompts reserved for evaluation, by hash.
    double evalFraction = 0.1;
  };

  /// Throws std::runtime_error for levels outside 1..5 or a fraction outside
  /// (0, 1).
  explicit ArithmeticTask(Options options);

  /// Problem \p index of \p split.
  Problem problem(Split split, uint64_t index) const;
  /// Problems [start, start + count) of \p split.
  std::vector<Problem> problems(Split split, uint64_t start,
                                size_t count) const;
  /// Up to \p n distinct evaluation problems (fewer only when the levels hold
  /// fewer distinct evaluation prompts).
  std::vector<Problem> evalSet(size_t n) const;
  /// Whether \p prompt belongs to the evaluation split.
  bool isEvalPrompt(std::string_view prompt) const;

  /// The answer a completion states: the integer after its last '=' (or the
  /// whole completion when it has none), surrounding whitespace ignored.
  static std::optional<std::string> extractAnswer(std::string_view completion);
  /// 1 when the completion's answer equals the problem's, else 0.
  static double reward(const Problem &problem, std::string_view completion);
  /// Value of an expression of the task's form (integers, + - *,
  /// parentheses); throws std::runtime_error on a syntax error.
  static int64_t evaluate(std::string_view expression);
  /// \p solution with a line break after every '=': each step of a stepped
  /// solution on its own line (`arith(.., lines = 1)`), so that VinePPO's
  /// newline steps are the task's steps. The answer is unchanged: it is still
  /// the number after the last '='.
  static std::string breakLines(std::string_view solution);

  const Options &options() const { return options_; }

private:
  Options options_;
};

/// Loads a GSM8K-style JSONL file: one object per line with string fields
/// `question` and `answer`, the answer ending in `#### N`. Problem.prompt is
/// the question, Problem.answer the normalized N, Problem.solution the whole
/// answer text. Blank lines are skipped; anything else malformed throws
/// std::runtime_error "FILE:LINE: what is wrong".
std::vector<Problem> loadGsm8k(const std::filesystem::path &path);

/// GSM8K reward: 1 when the last number of \p completion matches the
/// problem's answer, else 0.
double gsm8kReward(const Problem &problem, std::string_view completion);

/// The fields a JSONL dataset's objects hold (`jsonl(.., prompt = "..",
/// answer = "..", solution = "..")` in a training file).
struct JsonlKeys {
  std::string prompt = "prompt";
  std::string answer = "answer";
  std::string solution = "solution";
};

/// Loads a JSONL dataset of your own: one object per line. Its \p keys.prompt
/// field (a string) is Problem.prompt, given to the model verbatim; the
/// optional \p keys.answer (a string or a number) is Problem.answer and the
/// optional \p keys.solution (a string) Problem.solution, the SFT target;
/// absent, they are empty. Problem.id is "FILE:LINE". Blank lines are
/// skipped; anything else malformed throws std::runtime_error "FILE:LINE:
/// what is wrong".
std::vector<Problem> loadJsonl(const std::filesystem::path &path,
                               const JsonlKeys &keys);

/// The default reward of a JSONL dataset: when the answer is a number, 1
/// when the last number of \p completion equals it (as gsm8kReward); else 1
/// when the completion, surrounding whitespace ignored, is the answer.
double matchReward(const Problem &problem, std::string_view completion);

} // namespace cac::rt

#endif // CAC_RUNTIME_TASKS_TASKS_H
