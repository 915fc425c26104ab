//===- TrainFileSyntax.cpp - Lexer and parser of training files -----------===//

#include "cac/Runtime/Train/TrainFileSyntax.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

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
      diag_.error(t.loc, "number '" + t.text +
                             "' is out of range (it does not fit in a double)");
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
    // Positional calls (`f(f(f(...)))`) come here without parseValue.
    if (depth > 32)
      return fail("values nested too deeply");
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

} // namespace cac::rt::train
