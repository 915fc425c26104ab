//===- TrainFile.cpp - Lexer, parser and schema of training files ---------===//

#include "cac/Runtime/Train/TrainFile.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace cac::rt::train {

const char *Value::kindName() const {
  switch (kind) {
  case Kind::Number:
    return "number";
  case Kind::String:
    return "string";
  case Kind::Name:
    return "name";
  case Kind::Call:
    return "call";
  }
  return "value";
}

std::string Value::spelling() const {
  switch (kind) {
  case Kind::Number: {
    std::ostringstream os;
    os << number;
    return os.str();
  }
  case Kind::String:
    return "\"" + text + "\"";
  case Kind::Name:
    return text;
  case Kind::Call:
    return text + "(...)";
  }
  return {};
}

const char *RolloutSpec::kindName() const {
  switch (kind) {
  case Kind::Group:
    return "group";
  case Kind::Chain:
    return "chain";
  case Kind::Tree:
    return "tree";
  case Kind::Forest:
    return "forest";
  }
  return "group";
}

const char *aggregationName(Aggregation a) {
  switch (a) {
  case Aggregation::TokenMean:
    return "token-mean";
  case Aggregation::SeqMeanTokenMean:
    return "seq-mean-token-mean";
  case Aggregation::SeqMeanTokenSum:
    return "seq-mean-token-sum";
  case Aggregation::SeqMeanTokenSumNorm:
    return "seq-mean-token-sum-norm";
  }
  return "?";
}

std::optional<Aggregation> parseAggregation(const std::string &s) {
  for (Aggregation a :
       {Aggregation::TokenMean, Aggregation::SeqMeanTokenMean,
        Aggregation::SeqMeanTokenSum, Aggregation::SeqMeanTokenSumNorm})
    if (s == aggregationName(a))
      return a;
  return std::nullopt;
}

SourceLoc TrainConfig::locOf(const std::string &field) const {
  for (const auto &[k, loc] : fieldLocs)
    if (k == field)
      return loc;
  return {};
}

//===----------------------------------------------------------------------===//
// Lexer
//===----------------------------------------------------------------------===//

namespace {

enum class Tok {
  Ident,
  Number,
  String,
  LBrace,
  RBrace,
  LParen,
  RParen,
  Equals,
  Comma,
  Semi,
  End,
  Error,
};

struct Token {
  Tok kind = Tok::End;
  SourceLoc loc;
  std::string text; // identifier, string contents, number spelling
  double number = 0;
};

class Lexer {
public:
  Lexer(const std::string &src, DiagnosticEngine &diag)
      : src_(src), diag_(diag) {}

  Token next() {
    skipSpaceAndComments();
    Token t;
    t.loc = {line_, col_};
    if (pos_ >= src_.size()) {
      t.kind = Tok::End;
      return t;
    }
    char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      t.kind = Tok::Ident;
      while (pos_ < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[pos_])) ||
              src_[pos_] == '_'))
        t.text += advance();
      return t;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.' ||
        ((c == '-' || c == '+') && pos_ + 1 < src_.size() &&
         (std::isdigit(static_cast<unsigned char>(src_[pos_ + 1])) ||
          src_[pos_ + 1] == '.')))
      return number(t);
    if (c == '"')
      return string(t);
    advance();
    switch (c) {
    case '{':
      t.kind = Tok::LBrace;
      return t;
    case '}':
      t.kind = Tok::RBrace;
      return t;
    case '(':
      t.kind = Tok::LParen;
      return t;
    case ')':
      t.kind = Tok::RParen;
      return t;
    case '=':
      t.kind = Tok::Equals;
      return t;
    case ',':
      t.kind = Tok::Comma;
      return t;
    case ';':
      t.kind = Tok::Semi;
      return t;
    default:
      break;
    }
    std::string shown = std::isprint(static_cast<unsigned char>(c))
                            ? std::string(1, c)
                            : "\\x" + hex(static_cast<unsigned char>(c));
    diag_.error(t.loc, "unexpected character '" + shown + "'");
    t.kind = Tok::Error;
    return t;
  }

private:
  static std::string hex(unsigned v) {
    const char *d = "0123456789abcdef";
    return {d[v >> 4], d[v & 15]};
  }

  char advance() {
    char c = src_[pos_++];
    if (c == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    return c;
  }

  void skipSpaceAndComments() {
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (std::isspace(static_cast<unsigned char>(c))) {
        advance();
      } else if (c == '#' || (c == '/' && pos_ + 1 < src_.size() &&
                              src_[pos_ + 1] == '/')) {
        while (pos_ < src_.size() && src_[pos_] != '\n')
          advance();
      } else {
        break;
      }
    }
  }

  Token number(Token &t) {
    size_t start = pos_;
    if (src_[pos_] == '-' || src_[pos_] == '+')
      advance();
    while (pos_ < src_.size() &&
           std::isdigit(static_cast<unsigned char>(src_[pos_])))
      advance();
    if (pos_ < src_.size() && src_[pos_] == '.') {
      advance();
      while (pos_ < src_.size() &&
             std::isdigit(static_cast<unsigned char>(src_[pos_])))
        advance();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t save = pos_;
      int saveLine = line_, saveCol = col_;
      advance();
      if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-'))
        advance();
      if (pos_ < src_.size() &&
          std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
        while (pos_ < src_.size() &&
               std::isdigit(static_cast<unsigned char>(src_[pos_])))
          advance();
      } else {
        pos_ = save;
        line_ = saveLine;
        col_ = saveCol;
      }
    }
    t.text = src_.substr(start, pos_ - start);
    // A letter or '_' glued to a number ("3x") is a typo, not two tokens.
    if (pos_ < src_.size() &&
        (std::isalpha(static_cast<unsigned char>(src_[pos_])) ||
         src_[pos_] == '_')) {
      diag_.error(t.loc, "malformed number '" + t.text + src_[pos_] + "...'");
      t.kind = Tok::Error;
      return t;
    }
    char *end = nullptr;
    t.number = std::strtod(t.text.c_str(), &end);
    if (t.text == "." || t.text == "-" || t.text == "+" ||
        end != t.text.c_str() + t.text.size()) {
      diag_.error(t.loc, "malformed number '" + t.text + "'");
      t.kind = Tok::Error;
      return t;
    }
    if (!std::isfinite(t.number)) {
      diag_.error(t.loc, "number '" + t.text + "' does not fit in a double");
      t.kind = Tok::Error;
      return t;
    }
    t.kind = Tok::Number;
    return t;
  }

  Token string(Token &t) {
    advance(); // opening quote
    while (true) {
      if (pos_ >= src_.size() || src_[pos_] == '\n') {
        diag_.error(t.loc, "unterminated string");
        t.kind = Tok::Error;
        return t;
      }
      char c = advance();
      if (c == '"')
        break;
      if (c == '\\') {
        if (pos_ >= src_.size()) {
          diag_.error(t.loc, "unterminated string");
          t.kind = Tok::Error;
          return t;
        }
        SourceLoc escLoc{line_, col_ - 1};
        char e = advance();
        switch (e) {
        case 'n':
          t.text += '\n';
          break;
        case 't':
          t.text += '\t';
          break;
        case '"':
        case '\\':
          t.text += e;
          break;
        default:
          diag_.error(escLoc, std::string("unknown escape '\\") + e + "'");
          t.kind = Tok::Error;
          return t;
        }
        continue;
      }
      t.text += c;
    }
    t.kind = Tok::String;
    return t;
  }

  const std::string &src_;
  DiagnosticEngine &diag_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

//===----------------------------------------------------------------------===//
// Parser
//===----------------------------------------------------------------------===//

const char *tokName(Tok k) {
  switch (k) {
  case Tok::Ident:
    return "a name";
  case Tok::Number:
    return "a number";
  case Tok::String:
    return "a string";
  case Tok::LBrace:
    return "'{'";
  case Tok::RBrace:
    return "'}'";
  case Tok::LParen:
    return "'('";
  case Tok::RParen:
    return "')'";
  case Tok::Equals:
    return "'='";
  case Tok::Comma:
    return "','";
  case Tok::Semi:
    return "';'";
  case Tok::End:
    return "end of file";
  case Tok::Error:
    return "an invalid token";
  }
  return "?";
}

class Parser {
public:
  Parser(const std::string &src, DiagnosticEngine &diag)
      : lex_(src, diag), diag_(diag) {
    tok_ = lex_.next();
  }

  std::optional<TrainBlock> parseFile() {
    TrainBlock block;
    if (tok_.kind != Tok::Ident || tok_.text != "train")
      return fail("expected 'train NAME { ... }'");
    block.loc = tok_.loc;
    consume();
    if (tok_.kind != Tok::Ident)
      return fail("expected the name of the training run after 'train'");
    block.name = tok_.text;
    consume();
    if (!expect(Tok::LBrace, "after the run's name"))
      return std::nullopt;
    while (tok_.kind != Tok::RBrace) {
      if (tok_.kind == Tok::Semi || tok_.kind == Tok::Comma) {
        consume();
        continue;
      }
      if (tok_.kind == Tok::End)
        return fail("expected '}' to close 'train " + block.name + "'");
      if (tok_.kind != Tok::Ident)
        return fail("expected a field name, found " +
                    std::string(tokName(tok_.kind)));
      Field f;
      f.key = tok_.text;
      f.keyLoc = tok_.loc;
      consume();
      if (!expect(Tok::Equals, "after '" + f.key + "'"))
        return std::nullopt;
      auto v = parseValue();
      if (!v)
        return std::nullopt;
      f.value = std::move(*v);
      block.fields.push_back(std::move(f));
    }
    consume();
    if (tok_.kind != Tok::End)
      return fail("expected end of file after the training block");
    return block;
  }

private:
  void consume() { tok_ = lex_.next(); }

  std::nullopt_t fail(const std::string &msg) {
    if (tok_.kind != Tok::Error) // the lexer already reported it
      diag_.error(tok_.loc, msg);
    return std::nullopt;
  }

  bool expect(Tok k, const std::string &where) {
    if (tok_.kind != k) {
      fail(std::string("expected ") + tokName(k) + " " + where + ", found " +
           tokName(tok_.kind));
      return false;
    }
    consume();
    return true;
  }

  std::optional<Value> parseValue(int depth = 0) {
    if (depth > 32)
      return fail("values nested too deeply");
    Value v;
    v.loc = tok_.loc;
    switch (tok_.kind) {
    case Tok::Number:
      v.kind = Value::Kind::Number;
      v.number = tok_.number;
      v.text = tok_.text;
      consume();
      return v;
    case Tok::String:
      v.kind = Value::Kind::String;
      v.text = tok_.text;
      consume();
      return v;
    case Tok::Ident: {
      Token name = tok_;
      consume();
      return parseAfterName(name, depth);
    }
    default:
      return fail(std::string("expected a value (number, string, name or "
                              "call), found ") +
                  tokName(tok_.kind));
    }
  }

  /// A name or a call whose name \p name was just consumed.
  std::optional<Value> parseAfterName(const Token &name, int depth) {
    Value v;
    v.loc = name.loc;
    v.text = name.text;
    if (tok_.kind != Tok::LParen) {
      v.kind = Value::Kind::Name;
      return v;
    }
    v.kind = Value::Kind::Call;
    consume();
    while (tok_.kind != Tok::RParen) {
      Value::Arg arg;
      if (tok_.kind == Tok::Ident) {
        // `key = value`, or a positional name/call.
        Token first = tok_;
        consume();
        std::optional<Value> a;
        if (tok_.kind == Tok::Equals) {
          arg.key = first.text;
          arg.keyLoc = first.loc;
          consume();
          a = parseValue(depth + 1);
        } else {
          a = parseAfterName(first, depth + 1);
        }
        if (!a)
          return std::nullopt;
        arg.values.push_back(std::move(*a));
      } else {
        auto a = parseValue(depth + 1);
        if (!a)
          return std::nullopt;
        arg.values.push_back(std::move(*a));
      }
      v.args.push_back(std::move(arg));
      if (tok_.kind == Tok::Comma) {
        consume();
        continue;
      }
      if (tok_.kind != Tok::RParen)
        return fail("expected ',' or ')' in the arguments of '" + v.text +
                    "', found " + tokName(tok_.kind));
    }
    consume();
    return v;
  }

  Lexer lex_;
  DiagnosticEngine &diag_;
  Token tok_;
};

} // namespace

std::optional<TrainBlock> parseTrainFile(const std::string &source,
                                         DiagnosticEngine &diag) {
  Parser p(source, diag);
  auto block = p.parseFile();
  if (diag.hasErrors())
    return std::nullopt;
  return block;
}

//===----------------------------------------------------------------------===//
// Schema
//===----------------------------------------------------------------------===//

namespace {

/// Levenshtein distance, for "did you mean".
size_t editDistance(const std::string &a, const std::string &b) {
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

std::string suggest(const std::string &name,
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

std::string joinNames(const std::vector<std::string> &names) {
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

bool isCall(const Value &v, const char *name) {
  return v.kind == Value::Kind::Call && v.text == name;
}

bool parseModel(Checker &c, const Value &v, ModelSpec &m,
                const std::string &what) {
  m.loc = v.loc;
  if (isCall(v, "builtin")) {
    Args a(c, v,
           {"size", "hidden", "layers", "heads", "kv_heads", "ffn",
            "max_positions"},
           {"size"});
    a.str("size", m.size);
    if (m.size == "tiny") {
      m.hidden = 64, m.layers = 2, m.heads = 4, m.kvHeads = 2, m.ffn = 192;
    } else if (m.size == "small") {
      // ModelConfig::builtinSmall.
      m.hidden = 128, m.layers = 4, m.heads = 4, m.kvHeads = 2, m.ffn = 384;
    } else if (m.size != "custom") {
      c.diag().error(a.get("size")->loc, "unknown builtin model size '" +
                                             m.size +
                                             "' (sizes: tiny, small, custom)");
      return false;
    }
    a.integer("hidden", m.hidden, 8, 8192);
    a.integer("layers", m.layers, 1, 256);
    a.integer("heads", m.heads, 1, 256);
    a.integer("kv_heads", m.kvHeads, 1, 256);
    a.integer("ffn", m.ffn, 1, 65536);
    a.integer("max_positions", m.maxPositions, 16, 1 << 20);
    if (!a.ok())
      return false;
    if (m.hidden % m.heads != 0 || (m.hidden / m.heads) % 2 != 0) {
      c.diag().error(v.loc, "builtin model: hidden (" +
                                std::to_string(m.hidden) +
                                ") must be an even multiple of heads (" +
                                std::to_string(m.heads) + ")");
      return false;
    }
    if (m.heads % m.kvHeads != 0) {
      c.diag().error(v.loc, "builtin model: heads (" + std::to_string(m.heads) +
                                ") must be a multiple of kv_heads (" +
                                std::to_string(m.kvHeads) + ")");
      return false;
    }
    m.kind = ModelSpec::Kind::Builtin;
    return true;
  }
  if (isCall(v, "hf")) {
    Args a(c, v, {"path"}, {"path"});
    if (!a.require("path"))
      return false;
    a.path("path", m.path);
    m.kind = ModelSpec::Kind::HuggingFace;
    return a.ok();
  }
  c.expected(v, what, "builtin(\"tiny\"|\"small\", ...) or hf(\"FOLDER\")");
  return false;
}

bool parseReward(Checker &c, const Value &v, RewardSpec &r) {
  r.loc = v.loc;
  if (isCall(v, "command")) {
    Args a(c, v, {"cmd", "timeout"}, {"cmd"});
    if (!a.require("cmd"))
      return false;
    a.str("cmd", r.command);
    a.num("timeout", r.timeout, 0.0, 86400.0, true);
    if (a.ok() &&
        r.command.find_first_not_of(" \t\n") == std::string::npos) {
      c.diag().error(a.get("cmd")->loc,
                     "the reward command is empty: give the program and its "
                     "arguments, e.g. command(\"python3 score.py\")");
      return false;
    }
    r.kind = RewardSpec::Kind::Command;
    return a.ok();
  }
  c.expected(v, "'reward'",
             "command(\"PROGRAM ARGS\", timeout = 60)");
  return false;
}

bool parseTask(Checker &c, const Value &v, TaskSpec &t) {
  t.loc = v.loc;
  if (isCall(v, "arith")) {
    Args a(c, v,
           {"min_level", "max_level", "digits", "ops", "steps", "lines",
            "eval_fraction"});
    a.integer("min_level", t.minLevel, 1, 5);
    a.integer("max_level", t.maxLevel, 1, 5);
    a.integer("digits", t.digits, 1, 9);
    a.str("ops", t.ops);
    a.num("steps", t.steps, 0.0, 1.0);
    a.num("eval_fraction", t.evalFraction, 0.0, 0.9, true);
    int64_t lines = 0;
    a.integer("lines", lines, 0, 1);
    t.lines = lines != 0;
    if (t.lines && a.get("digits") && !(t.steps > 0.0)) {
      c.diag().error(a.get("lines")->loc,
                     "'lines' of 'arith' breaks stepped solutions into lines: "
                     "with 'digits' it needs 'steps' > 0 (every solution is "
                     "a bare answer otherwise)");
      return false;
    }
    if (a.get("ops") && (t.ops.empty() ||
                         t.ops.find_first_not_of("+-*") != std::string::npos)) {
      c.diag().error(a.get("ops")->loc, "'ops' of 'arith' must be a non-empty "
                                        "subset of \"+-*\", got \"" +
                                            t.ops + "\"");
      return false;
    }
    if (a.get("ops") && !a.get("digits")) {
      c.diag().error(a.get("ops")->loc,
                     "'ops' of 'arith' needs 'digits' (the levels fix "
                     "their own operators)");
      return false;
    }
    if (a.get("steps") && !a.get("digits")) {
      c.diag().error(a.get("steps")->loc,
                     "'steps' of 'arith' needs 'digits' (the levels write "
                     "their own solutions)");
      return false;
    }
    if (a.get("digits") && (a.get("min_level") || a.get("max_level"))) {
      c.diag().error(a.get("digits")->loc,
                     "'digits' and 'min_level'/'max_level' of 'arith' "
                     "exclude each other");
      return false;
    }
    if (a.ok() && t.minLevel > t.maxLevel) {
      c.diag().error(v.loc, "arith: min_level (" + std::to_string(t.minLevel) +
                                ") exceeds max_level (" +
                                std::to_string(t.maxLevel) + ")");
      return false;
    }
    t.kind = TaskSpec::Kind::Arith;
    return a.ok();
  }
  if (isCall(v, "gsm8k")) {
    Args a(c, v, {"train", "eval"}, {"train"});
    if (!a.require("train") || !a.require("eval"))
      return false;
    a.path("train", t.trainPath);
    a.path("eval", t.evalPath);
    t.kind = TaskSpec::Kind::Gsm8k;
    return a.ok();
  }
  if (isCall(v, "jsonl")) {
    Args a(c, v, {"train", "eval", "prompt", "answer", "solution"}, {"train"});
    if (!a.require("train") || !a.require("eval"))
      return false;
    a.path("train", t.trainPath);
    a.path("eval", t.evalPath);
    for (auto [name, key] : {std::pair{"prompt", &t.keys.prompt},
                             std::pair{"answer", &t.keys.answer},
                             std::pair{"solution", &t.keys.solution}}) {
      a.str(name, *key);
      if (a.get(name) && key->empty()) {
        c.diag().error(a.get(name)->loc,
                       std::string("'") + name +
                           "' of 'jsonl' names a field: it must not be empty");
        return false;
      }
    }
    t.kind = TaskSpec::Kind::Jsonl;
    return a.ok();
  }
  c.expected(v, "'task'",
             "arith(min_level = .., max_level = ..), arith(digits = .., "
             "ops = \"+-\"), "
             "gsm8k(\"train.jsonl\", eval = \"test.jsonl\") or "
             "jsonl(\"train.jsonl\", eval = \"eval.jsonl\")");
  return false;
}

bool parseEstimator(Checker &c, const Value &v, EstimatorSpec &e) {
  e.loc = v.loc;
  if (v.kind == Value::Kind::String) {
    auto p = c.path(v, "'estimator'");
    if (!p)
      return false;
    e.path = *p;
    e.kind = p->extension() == ".cac" ? EstimatorSpec::Kind::Source
                                      : EstimatorSpec::Kind::Bundle;
    return true;
  }
  if (isCall(v, "cac") || isCall(v, "bundle")) {
    Args a(c, v, {"path"}, {"path"}, /*allowUnknown=*/true);
    if (!a.require("path"))
      return false;
    a.path("path", e.path);
    e.kind = v.text == "cac" ? EstimatorSpec::Kind::Source
                             : EstimatorSpec::Kind::Bundle;
    bool ok = a.ok();
    for (const auto &x : a.extra()) {
      auto n = c.number(*x.value, "estimator parameter '" + x.key + "'", -1e300,
                        1e300);
      if (!n) {
        ok = false;
        continue;
      }
      e.params.push_back({x.key, *n, x.loc});
    }
    return ok;
  }
  c.expected(v, "'estimator'",
             "a path to a .cac file or a bundle folder, "
             "cac(\"FILE.cac\", param = value, ...) or "
             "bundle(\"DIR\", param = value, ...)");
  return false;
}

bool parseCritic(Checker &c, const Value &v, CriticSpec &cr) {
  cr.loc = v.loc;
  if (c.isNone(v)) {
    cr.kind = CriticSpec::Kind::None;
    return true;
  }
  if (isCall(v, "value_head") || isCall(v, "value_model")) {
    bool separate = v.text == "value_model";
    std::vector<std::string> known = {"coef", "clip"};
    if (separate)
      known.insert(known.begin(), {"model", "lr"});
    Args a(c, v, known,
           separate ? std::vector<std::string>{"model"}
                    : std::vector<std::string>{});
    a.num("coef", cr.coef, 0.0, 1e6);
    a.num("clip", cr.clip, 0.0, 1e6);
    if (separate) {
      a.num("lr", cr.lr, 0.0, 10.0);
      if (!a.require("model"))
        return false;
      if (!parseModel(c, *a.get("model"), cr.model, a.what("model")))
        return false;
      cr.kind = CriticSpec::Kind::ValueModel;
    } else {
      cr.kind = CriticSpec::Kind::ValueHead;
    }
    return a.ok();
  }
  c.expected(v, "'critic'",
             "none, value_head(coef = .., clip = ..) or "
             "value_model(builtin(...), lr = .., coef = .., clip = ..)");
  return false;
}

bool parseRollout(Checker &c, const Value &v, RolloutSpec &r) {
  r.loc = v.loc;
  static const char *forms =
      "group(n = .., temperature = .., top_p = .., top_k = .., max_tokens = "
      "..), chain(n = .., samples = .., ...), tree(branches = \"4-2-2\", "
      "seg_len = .., ...) or forest(n = .., trees = .., tau = .., children = "
      ".., ...)";
  std::vector<std::string> common = {"temperature", "top_p", "top_k",
                                     "max_tokens"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return extra;
  };
  std::vector<std::string> known;
  if (isCall(v, "group")) {
    r.kind = RolloutSpec::Kind::Group;
    known = with({"n"});
  } else if (isCall(v, "chain")) {
    r.kind = RolloutSpec::Kind::Chain;
    known = with({"n", "samples", "dedup"});
  } else if (isCall(v, "tree")) {
    r.kind = RolloutSpec::Kind::Tree;
    known = with({"branches", "seg_len", "replay_steps", "replay_take"});
  } else if (isCall(v, "forest")) {
    r.kind = RolloutSpec::Kind::Forest;
    known = with({"n", "trees", "children", "tau", "tau_step", "tau_min",
                  "delimiters", "distinct", "entropy_top_k"});
  } else {
    c.expected(v, "'rollout'", forms);
    return false;
  }
  Args a(c, v, known);
  a.integer("n", r.n, 1, 4096);
  a.num("temperature", r.temperature, 0.0, 100.0, true);
  a.num("top_p", r.topP, 0.0, 1.0, true);
  a.integer("top_k", r.topK, 0, 1 << 30);
  a.integer("max_tokens", r.maxTokens, 1, 1 << 20);
  a.integer("samples", r.samples, 1, 1024);
  int64_t dedup = r.dedup ? 1 : 0;
  a.integer("dedup", dedup, 0, 1);
  r.dedup = dedup != 0;
  a.integer("seg_len", r.segLen, 1, 1 << 20);
  a.integer("replay_steps", r.replaySteps, 0, 1 << 20);
  a.integer("replay_take", r.replayTake, 0, 1 << 20);
  a.integer("trees", r.trees, 1, 4096);
  a.integer("children", r.children, 2, 64);
  a.num("tau", r.tau, 0.0, 100.0);
  a.num("tau_step", r.tauStep, 0.0, 100.0);
  a.num("tau_min", r.tauMin, 0.0, 100.0);
  a.integer("entropy_top_k", r.entropyTopK, 0, 1 << 30);
  int64_t distinct = r.distinct ? 1 : 0;
  a.integer("distinct", distinct, 0, 1);
  r.distinct = distinct != 0;
  bool ok = a.ok();
  if (r.kind == RolloutSpec::Kind::Tree) {
    // Branch factors in the papers' notation: "6-6-6".
    std::string spec;
    if (!a.require("branches"))
      return false;
    a.str("branches", spec);
    if (!a.ok())
      return false;
    const Value &bv = *a.get("branches");
    r.branches.clear();
    std::string part;
    int64_t leaves = 1;
    auto flush = [&]() {
      if (part.empty() || part.size() > 4 ||
          part.find_first_not_of("0123456789") != std::string::npos ||
          std::stoll(part) < 1) {
        c.diag().error(bv.loc, "'branches' of 'tree' must be positive "
                               "integers separated by '-' (e.g. \"6-6-6\"), "
                               "got \"" + spec + "\"");
        return false;
      }
      r.branches.push_back(std::stoll(part));
      leaves *= r.branches.back();
      part.clear();
      return true;
    };
    for (char ch : spec) {
      if (ch == '-') {
        if (!flush())
          return false;
      } else {
        part += ch;
      }
    }
    if (!flush())
      return false;
    if (r.branches.size() > 16 || leaves > 4096) {
      c.diag().error(bv.loc, "'branches' of 'tree': at most 16 depths and "
                             "4096 leaves per prompt, got \"" + spec + "\"");
      return false;
    }
  }
  if (r.kind == RolloutSpec::Kind::Tree && r.replayTake > 0 &&
      r.replaySteps == 0) {
    c.diag().error(a.get("replay_take")->loc,
                   "'replay_take' of 'tree' caps what the replay buffer trains "
                   "per question: set 'replay_steps' (how many steps a node "
                   "sample may wait, e.g. 8) too");
    ok = false;
  }
  if (r.kind == RolloutSpec::Kind::Forest) {
    if (r.n % r.trees != 0) {
      const Value *tv = a.get("trees");
      c.diag().error(tv ? tv->loc : v.loc,
                     "'n' of 'forest' (" + std::to_string(r.n) +
                         " leaves per prompt) must be a multiple of 'trees' (" +
                         std::to_string(r.trees) + ")");
      ok = false;
    }
    std::string delims;
    a.str("delimiters", delims);
    // Several delimiters are separated by '|' ("." and "\n" are one each).
    r.delimiters.clear();
    size_t from = 0;
    while (!delims.empty() && from <= delims.size()) {
      size_t bar = delims.find('|', from);
      std::string d = delims.substr(
          from, bar == std::string::npos ? std::string::npos : bar - from);
      if (!d.empty())
        r.delimiters.push_back(d);
      if (bar == std::string::npos)
        break;
      from = bar + 1;
    }
    ok = ok && a.ok();
  }
  return ok;
}


bool parseObjective(Checker &c, const Value &v, ObjectiveSpec &o) {
  o.loc = v.loc;
  if (v.kind == Value::Kind::String || isCall(v, "cac") ||
      isCall(v, "bundle")) {
    EstimatorSpec e;
    if (!parseEstimator(c, v, e))
      return false;
    o.compiled = std::move(e);
    return true;
  }
  if (!isCall(v, "ppo_clip")) {
    c.expected(v, "'objective'",
               "ppo_clip(eps = .., eps_high = ..), a .cac objective file, "
               "cac(\"FILE.cac\", param = value, ...) or a bundle compiled "
               "from one, bundle(\"DIR\", param = value, ...)");
    return false;
  }
  Args a(c, v, {"eps", "eps_high"});
  a.num("eps", o.epsLow, 0.0, 1.0);
  o.epsHigh = o.epsLow;
  a.num("eps_high", o.epsHigh, 0.0, 100.0);
  return a.ok();
}

bool parseKl(Checker &c, const Value &v, KlSpec &k) {
  k.loc = v.loc;
  if (c.isNone(v)) {
    k.kind = KlSpec::Kind::None;
    return true;
  }
  if (isCall(v, "k1") || isCall(v, "k3")) {
    Args a(c, v, {"coef", "in_reward", "target", "horizon"}, {"coef"});
    if (!a.require("coef"))
      return false;
    a.num("coef", k.coef, 0.0, 1e6);
    int64_t inReward = 0;
    a.integer("in_reward", inReward, 0, 1);
    k.inReward = inReward != 0;
    a.num("target", k.target, 0.0, 1e6);
    a.num("horizon", k.horizon, 1.0, 1e12);
    if (k.target > 0 && !k.inReward) {
      c.diag().error(a.get("target")->loc,
                     "an adaptive KL coefficient ('target') adjusts the KL "
                     "penalty in the reward: set in_reward = 1");
      return false;
    }
    k.kind = v.text == "k1" ? KlSpec::Kind::K1 : KlSpec::Kind::K3;
    return a.ok();
  }
  c.expected(v, "'kl'",
             "none, k1(coef = .., in_reward = 0|1, target = .., horizon = "
             "..) or k3(coef = .., ...)");
  return false;
}

bool parseOptimizer(Checker &c, const Value &v, OptimizerSpec &o) {
  o.loc = v.loc;
  if (!isCall(v, "adamw")) {
    c.expected(v, "'optimizer'",
               "adamw(lr = .., beta1 = .., beta2 = .., eps = .., "
               "weight_decay = .., grad_clip = ..)");
    return false;
  }
  Args a(c, v, {"lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"});
  a.num("lr", o.lr, 0.0, 10.0, true);
  a.num("beta1", o.beta1, 0.0, 1.0);
  a.num("beta2", o.beta2, 0.0, 1.0);
  a.num("eps", o.eps, 0.0, 1.0, true);
  a.num("weight_decay", o.weightDecay, 0.0, 10.0);
  a.num("grad_clip", o.gradClip, 0.0, 1e9);
  return a.ok();
}

bool parseSchedule(Checker &c, const Value &v, ScheduleSpec &s) {
  s.loc = v.loc;
  if (isCall(v, "constant") ||
      (v.kind == Value::Kind::Name && v.text == "constant")) {
    s.kind = ScheduleSpec::Kind::Constant;
    if (v.kind == Value::Kind::Name)
      return true;
    Args a(c, v, {"warmup"});
    a.integer("warmup", s.warmup, 0, 1LL << 40);
    return a.ok();
  }
  if (isCall(v, "cosine") ||
      (v.kind == Value::Kind::Name && v.text == "cosine")) {
    s.kind = ScheduleSpec::Kind::Cosine;
    if (v.kind == Value::Kind::Name)
      return true;
    Args a(c, v, {"warmup", "min_ratio"});
    a.integer("warmup", s.warmup, 0, 1LL << 40);
    a.num("min_ratio", s.minRatio, 0.0, 1.0);
    return a.ok();
  }
  c.expected(v, "'schedule'",
             "constant(warmup = ..) or cosine(warmup = .., min_ratio = ..)");
  return false;
}

bool parseSft(Checker &c, const Value &v, SftSpec &s) {
  s.loc = v.loc;
  if (c.isNone(v)) {
    s.steps = 0;
    return true;
  }
  if (!isCall(v, "sft")) {
    c.expected(v, "'warm_start'",
               "none or sft(steps = .., batch = .., lr = .., schedule = ..)");
    return false;
  }
  Args a(c, v, {"steps", "batch", "lr", "schedule"});
  a.integer("steps", s.steps, 0, 1LL << 40);
  a.integer("batch", s.batch, 1, 1 << 20);
  a.num("lr", s.lr, 0.0, 10.0, true);
  if (const Value *sv = a.get("schedule")) {
    ScheduleSpec sched;
    if (!parseSchedule(c, *sv, sched))
      return false;
    s.schedule = sched;
  }
  return a.ok();
}

bool parseEval(Checker &c, const Value &v, EvalSpec &e) {
  e.loc = v.loc;
  if (c.isNone(v)) {
    e.size = 0;
    return true;
  }
  if (!isCall(v, "greedy")) {
    c.expected(v, "'eval'",
               "none or greedy(every = .., size = .., samples = ..)");
    return false;
  }
  Args a(c, v, {"every", "size", "samples"});
  a.integer("every", e.every, 0, 1LL << 40);
  a.integer("size", e.size, 1, 1 << 24);
  a.integer("samples", e.samples, 0, 1 << 24);
  return a.ok();
}

} // namespace

std::optional<TrainConfig> buildTrainConfig(const TrainBlock &block,
                                            const fs::path &file,
                                            DiagnosticEngine &diag) {
  TrainConfig cfg;
  cfg.name = block.name;
  cfg.file = file;
  fs::path base = file.parent_path();
  if (base.empty())
    base = ".";
  Checker c(diag, base);

  using Handler = std::function<bool(const Value &)>;
  auto intField = [&](int64_t &out, const char *name, int64_t lo,
                      int64_t hi) -> Handler {
    return [&c, &out, name, lo, hi](const Value &v) {
      auto i = c.integer(v, std::string("'") + name + "'", lo, hi);
      if (i)
        out = *i;
      return i.has_value();
    };
  };
  int64_t seed = 1;
  const std::vector<std::pair<std::string, Handler>> fields = {
      {"model",
       [&](const Value &v) { return parseModel(c, v, cfg.model, "'model'"); }},
      {"task", [&](const Value &v) { return parseTask(c, v, cfg.task); }},
      {"estimator",
       [&](const Value &v) { return parseEstimator(c, v, cfg.estimator); }},
      {"critic", [&](const Value &v) { return parseCritic(c, v, cfg.critic); }},
      {"rollout",
       [&](const Value &v) { return parseRollout(c, v, cfg.rollout); }},
      {"prompts", intField(cfg.prompts, "prompts", 1, 1 << 20)},
      {"objective",
       [&](const Value &v) { return parseObjective(c, v, cfg.objective); }},
      {"aggregation",
       [&](const Value &v) {
         auto s = c.string(v, "'aggregation'");
         if (!s)
           return false;
         auto a = parseAggregation(*s);
         if (!a) {
           diag.error(v.loc,
                      "unknown aggregation '" + *s +
                          "' (token-mean, seq-mean-token-mean, "
                          "seq-mean-token-sum, seq-mean-token-sum-norm)");
           return false;
         }
         cfg.aggregation = *a;
         return true;
       }},
      {"reward",
       [&](const Value &v) { return parseReward(c, v, cfg.reward); }},
      {"kl", [&](const Value &v) { return parseKl(c, v, cfg.kl); }},
      {"epochs", intField(cfg.epochs, "epochs", 1, 1 << 20)},
      {"minibatches", intField(cfg.minibatches, "minibatches", 1, 1 << 20)},
      {"whiten",
       [&](const Value &v) {
         auto b = c.boolean(v, "'whiten'");
         if (b)
           cfg.whiten = *b;
         return b.has_value();
       }},
      {"optimizer",
       [&](const Value &v) { return parseOptimizer(c, v, cfg.optimizer); }},
      {"schedule",
       [&](const Value &v) { return parseSchedule(c, v, cfg.schedule); }},
      {"warm_start", [&](const Value &v) { return parseSft(c, v, cfg.sft); }},
      {"steps", intField(cfg.steps, "steps", 0, 1LL << 40)},
      {"eval", [&](const Value &v) { return parseEval(c, v, cfg.eval); }},
      {"checkpoint_every",
       intField(cfg.checkpointEvery, "checkpoint_every", 0, 1LL << 40)},
      {"seed", intField(seed, "seed", 0, (1LL << 53))},
      {"out",
       [&](const Value &v) {
         auto s = c.string(v, "'out'");
         if (s && s->empty()) {
           diag.error(v.loc, "'out' must not be empty");
           return false;
         }
         if (s)
           cfg.out = *s;
         return s.has_value();
       }},
      {"threads", intField(cfg.threads, "threads", 0, 1024)},
  };
  std::vector<std::string> known;
  for (const auto &f : fields)
    known.push_back(f.first);

  std::map<std::string, SourceLoc> seen;
  for (const Field &f : block.fields) {
    auto it = std::find_if(fields.begin(), fields.end(),
                           [&](const auto &p) { return p.first == f.key; });
    if (it == fields.end()) {
      diag.error(f.keyLoc,
                 "unknown field '" + f.key + "'" + suggest(f.key, known));
      continue;
    }
    auto [prev, inserted] = seen.emplace(f.key, f.keyLoc);
    if (!inserted) {
      diag.error(f.keyLoc, "field '" + f.key + "' is set twice");
      diag.note(prev->second, "first set here");
      continue;
    }
    cfg.fieldLocs.emplace_back(f.key, f.keyLoc);
    it->second(f.value);
  }
  for (const char *required : {"model", "task", "estimator", "steps"})
    if (!seen.count(required))
      diag.error(block.loc, "training run '" + block.name +
                                "' is missing the required field '" + required +
                                "'");
  cfg.seed = static_cast<uint64_t>(seed);

  // Cross-field checks.
  if (!diag.hasErrors()) {
    // Sequences per step: a tree has at least branches[0] leaves a prompt.
    int64_t perPrompt = cfg.rollout.kind == RolloutSpec::Kind::Tree &&
                                !cfg.rollout.branches.empty()
                            ? cfg.rollout.branches.front()
                            : cfg.rollout.n;
    int64_t batch = cfg.prompts * perPrompt;
    if (cfg.minibatches > batch)
      diag.error(cfg.locOf("minibatches"),
                 "minibatches (" + std::to_string(cfg.minibatches) +
                     ") exceeds the sequences per step (prompts * n = " +
                     std::to_string(batch) + ")");
    if (cfg.critic.kind == CriticSpec::Kind::ValueModel &&
        cfg.critic.model.kind == ModelSpec::Kind::Builtin &&
        cfg.model.kind != ModelSpec::Kind::Builtin)
      diag.error(cfg.critic.loc,
                 "a builtin critic needs a builtin policy (it uses the "
                 "builtin character tokenizer)");
  }
  if (diag.hasErrors())
    return std::nullopt;
  return cfg;
}

std::optional<TrainConfig> loadTrainFile(const fs::path &file,
                                         std::string &errors) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    errors = file.string() + ": error: cannot read the training file\n";
    return std::nullopt;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  DiagnosticEngine diag(file.string(), ss.str());
  auto block = parseTrainFile(ss.str(), diag);
  std::optional<TrainConfig> cfg;
  if (block)
    cfg = buildTrainConfig(*block, file, diag);
  errors = diag.render();
  return cfg;
}

void applyOverrides(TrainConfig &config, const Overrides &o) {
  if (o.steps)
    config.steps = *o.steps;
  if (o.sftSteps)
    config.sft.steps = *o.sftSteps;
  if (o.evalEvery)
    config.eval.every = *o.evalEvery;
  if (o.seed)
    config.seed = static_cast<uint64_t>(*o.seed);
  if (o.threads)
    config.threads = *o.threads;
  if (o.out)
    config.out = *o.out;
}

} // namespace cac::rt::train
