//===- TrainFileChecker.h - Checking a training file's values ---*- C++ -*-===//
//
// The schema's tools: type and range checks of single values (Checker), the
// arguments of a call against their known names (Args), and "did you mean"
// suggestions for unknown names. Every problem is reported through the
// DiagnosticEngine with its file:line:col. Private to cac_runtime_train.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_LIB_TRAIN_TRAINFILECHECKER_H
#define CAC_LIB_TRAIN_TRAINFILECHECKER_H

#include "cac/Runtime/Train/TrainFile.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

namespace cac::rt::train::schema {

namespace fs = std::filesystem;

/// Levenshtein distance, for "did you mean".
inline size_t editDistance(const std::string &a, const std::string &b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1,
                         prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

inline std::string suggest(const std::string &name,
                    const std::vector<std::string> &known) {
  std::string best;
  size_t bestD = 3;
  for (const auto &k : known) {
    size_t d = editDistance(name, k);
    if (d < bestD) {
      bestD = d;
      best = k;
    }
  }
  return best.empty() ? "" : "; did you mean '" + best + "'?";
}

inline std::string joinNames(const std::vector<std::string> &names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i ? ", " : "") + names[i];
  return out;
}

/// Type and range checks of single values; each reports and returns false
/// (or nothing) on a problem.
class Checker {
public:
  Checker(DiagnosticEngine &diag, fs::path baseDir)
      : diag_(diag), base_(std::move(baseDir)) {}

  DiagnosticEngine &diag() { return diag_; }

  std::optional<double> number(const Value &v, const std::string &what,
                               double lo, double hi, bool loOpen = false) {
    if (v.kind != Value::Kind::Number) {
      diag_.error(v.loc, what + " must be a number, got " + v.kindName() +
                             " '" + v.spelling() + "'");
      return std::nullopt;
    }
    bool ok = (loOpen ? v.number > lo : v.number >= lo) && v.number <= hi;
    if (!ok) {
      std::ostringstream os;
      os << what << " must be in " << (loOpen ? "(" : "[") << lo << ", " << hi
         << "], got " << v.text;
      diag_.error(v.loc, os.str());
      return std::nullopt;
    }
    return v.number;
  }

  std::optional<int64_t> integer(const Value &v, const std::string &what,
                                 int64_t lo, int64_t hi) {
    if (v.kind != Value::Kind::Number) {
      diag_.error(v.loc, what + " must be an integer, got " + v.kindName() +
                             " '" + v.spelling() + "'");
      return std::nullopt;
    }
    if (v.number != std::floor(v.number) || std::fabs(v.number) > 9.0e15) {
      diag_.error(v.loc, what + " must be an integer, got " + v.text);
      return std::nullopt;
    }
    auto i = static_cast<int64_t>(v.number);
    if (i < lo || i > hi) {
      diag_.error(v.loc, what + " must be in [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + "], got " + v.text);
      return std::nullopt;
    }
    return i;
  }

  std::optional<std::string> string(const Value &v, const std::string &what) {
    if (v.kind != Value::Kind::String) {
      diag_.error(v.loc, what + " must be a string, got " + v.kindName() +
                             " '" + v.spelling() + "'");
      return std::nullopt;
    }
    return v.text;
  }

  std::optional<bool> boolean(const Value &v, const std::string &what) {
    if (v.kind == Value::Kind::Name && (v.text == "true" || v.text == "false"))
      return v.text == "true";
    diag_.error(v.loc, what + " must be true or false, got " + v.kindName() +
                           " '" + v.spelling() + "'");
    return std::nullopt;
  }

  std::optional<fs::path> path(const Value &v, const std::string &what) {
    auto s = string(v, what);
    if (!s)
      return std::nullopt;
    if (s->empty()) {
      diag_.error(v.loc, what + " must not be empty");
      return std::nullopt;
    }
    fs::path p(*s);
    return p.is_absolute() ? p : (base_ / p).lexically_normal();
  }

  bool isNone(const Value &v) {
    return v.kind == Value::Kind::Name && v.text == "none";
  }

  /// Reports a value that is none of \p forms.
  void expected(const Value &v, const std::string &what,
                const std::string &forms) {
    diag_.error(v.loc, what + " must be " + forms + ", got " + v.kindName() +
                           " '" + v.spelling() + "'");
  }

private:
  DiagnosticEngine &diag_;
  fs::path base_;
};

/// The arguments of one call, checked against a list of known names.
/// Positional arguments map to \p positional in order.
class Args {
public:
  Args(Checker &c, const Value &call, std::vector<std::string> known,
       std::vector<std::string> positional = {}, bool allowUnknown = false)
      : c_(c), call_(call) {
    std::set<std::string> seen;
    size_t pos = 0;
    for (const auto &a : call.args) {
      std::string key = a.key;
      SourceLoc loc = a.keyLoc;
      if (key.empty()) {
        if (pos >= positional.size()) {
          c.diag().error(
              a.value().loc,
              "too many positional arguments to '" + call.text + "'" +
                  (positional.empty()
                       ? " (it takes only key = value arguments)"
                       : " (it takes " + std::to_string(positional.size()) +
                             ")"));
          ok_ = false;
          continue;
        }
        key = positional[pos++];
        loc = a.value().loc;
      }
      if (!seen.insert(key).second) {
        c.diag().error(loc, "argument '" + key + "' of '" + call.text +
                                "' is given twice");
        ok_ = false;
        continue;
      }
      bool isKnown = std::find(known.begin(), known.end(), key) != known.end();
      if (!isKnown && !allowUnknown) {
        c.diag().error(loc, "unknown argument '" + key + "' of '" + call.text +
                                "' (arguments: " + joinNames(known) + ")" +
                                suggest(key, known));
        ok_ = false;
        continue;
      }
      if (isKnown)
        byName_[key] = &a.value();
      else
        extra_.push_back({key, loc, &a.value()});
    }
  }

  bool ok() const { return ok_; }
  const Value *get(const std::string &name) const {
    auto it = byName_.find(name);
    return it == byName_.end() ? nullptr : it->second;
  }
  std::string what(const std::string &name) const {
    return "'" + name + "' of '" + call_.text + "'";
  }

  template <typename T>
  void num(const std::string &name, T &out, double lo, double hi,
           bool loOpen = false) {
    if (const Value *v = get(name)) {
      if (auto x = c_.number(*v, what(name), lo, hi, loOpen))
        out = static_cast<T>(*x);
      else
        ok_ = false;
    }
  }
  template <typename T>
  void integer(const std::string &name, T &out, int64_t lo, int64_t hi) {
    if (const Value *v = get(name)) {
      if (auto x = c_.integer(*v, what(name), lo, hi))
        out = static_cast<T>(*x);
      else
        ok_ = false;
    }
  }
  void path(const std::string &name, fs::path &out) {
    if (const Value *v = get(name)) {
      if (auto p = c_.path(*v, what(name)))
        out = *p;
      else
        ok_ = false;
    }
  }
  void str(const std::string &name, std::string &out) {
    if (const Value *v = get(name)) {
      if (auto s = c_.string(*v, what(name)))
        out = *s;
      else
        ok_ = false;
    }
  }
  bool require(const std::string &name) {
    if (get(name))
      return true;
    c_.diag().error(call_.loc,
                    "'" + call_.text + "' needs the argument '" + name + "'");
    ok_ = false;
    return false;
  }

  struct Extra {
    std::string key;
    SourceLoc loc;
    const Value *value;
  };
  const std::vector<Extra> &extra() const { return extra_; }

private:
  Checker &c_;
  const Value &call_;
  std::map<std::string, const Value *> byName_;
  std::vector<Extra> extra_;
  bool ok_ = true;
};

inline bool isCall(const Value &v, const char *name) {
  return v.kind == Value::Kind::Call && v.text == name;
}

//===--- The value of each field (TrainFileValues.cpp) --------------------===//

bool parseModel(Checker &c, const Value &v, ModelSpec &m,
                const std::string &what);
bool parseReward(Checker &c, const Value &v, RewardSpec &r);
bool parseTask(Checker &c, const Value &v, TaskSpec &t);
bool parseEstimator(Checker &c, const Value &v, EstimatorSpec &e);
bool parseCritic(Checker &c, const Value &v, CriticSpec &cr);
bool parseRollout(Checker &c, const Value &v, RolloutSpec &r);
bool parseObjective(Checker &c, const Value &v, ObjectiveSpec &o);
bool parseKl(Checker &c, const Value &v, KlSpec &k);
bool parseOptimizer(Checker &c, const Value &v, OptimizerSpec &o);
bool parseSchedule(Checker &c, const Value &v, ScheduleSpec &s);
bool parseSft(Checker &c, const Value &v, SftSpec &s);
bool parseEval(Checker &c, const Value &v, EvalSpec &e);
/// TrainFileChat.cpp.
bool parseChat(Checker &c, const Value &v, ChatSpec &chat);
/// `tools = calculator(..)` or `command(..)` (TrainFileTools.cpp).
bool parseTools(Checker &c, const Value &v, ToolSpec &t);

} // namespace cac::rt::train::schema

#endif // CAC_LIB_TRAIN_TRAINFILECHECKER_H
