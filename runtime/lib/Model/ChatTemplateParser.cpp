//===- ChatTemplateParser.cpp - Statements and expressions of a template --===//
//
// A recursive-descent parser with Jinja2's precedence (lowest first):
// `a if c else b`, or, and, not, comparisons and `in`, + -, ~, * / // %, **,
// unary - +, then postfix `.x`, `[i]`, `[a:b:c]`, calls, `| filter` and
// `is test`.
//
//===----------------------------------------------------------------------===//

#include "ChatTemplateBuiltins.h"
#include "ChatTemplateLexer.h"
#include "ChatTemplateSyntax.h"

#include <algorithm>
#include <cstdlib>

namespace cac::rt::chat {

namespace {

/// The statements the subset has, for the error on others.
constexpr const char *kStatements = "for, if/elif/else, set, break, continue";

/// The deepest nesting of expressions or statements a template may have
/// (real chat templates nest a few levels).
constexpr int kMaxDepth = 100;

class Parser {
public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parseAll() {
    std::string end;
    Body body = parseBody({}, end);
    return body;
  }

private:
  const Token &cur() const { return toks_[pos_]; }
  const Token &peek(size_t n = 1) const {
    return toks_[std::min(pos_ + n, toks_.size() - 1)];
  }
  bool isOp(const char *op) const {
    return cur().kind == Token::Kind::Op && cur().text == op;
  }
  bool isName(const char *name) const {
    return cur().kind == Token::Kind::Name && cur().text == name;
  }
  [[noreturn]] void fail(const Token &t, const std::string &what) const {
    throw TemplateError(t.loc, what);
  }
  static std::string describe(const Token &t) {
    switch (t.kind) {
    case Token::Kind::Eof:
      return "the end of the template";
    case Token::Kind::BlockEnd:
      return "'%}'";
    case Token::Kind::VarEnd:
      return "'}}'";
    case Token::Kind::String:
      return "a string";
    default:
      return "'" + t.text + "'";
    }
  }
  void expectOp(const char *op) {
    if (!isOp(op))
      fail(cur(),
           std::string("expected '") + op + "', found " + describe(cur()));
    ++pos_;
  }
  std::string expectName(const char *what) {
    if (cur().kind != Token::Kind::Name)
      fail(cur(),
           std::string("expected ") + what + ", found " + describe(cur()));
    return toks_[pos_++].text;
  }
  void expectBlockEnd() {
    if (cur().kind != Token::Kind::BlockEnd)
      fail(cur(), "expected '%}', found " + describe(cur()));
    ++pos_;
  }

  Body parseBody(const std::vector<std::string> &ends, std::string &endTag);
  Stmt parseStatement(const Token &begin);
  Stmt parseFor(Loc loc);
  Stmt parseIf(Loc loc);
  Stmt parseSet(Loc loc);

  ExprPtr parseExpr(bool allowCond = true);
  ExprPtr parseOr();
  ExprPtr parseAnd();
  ExprPtr parseNot();
  ExprPtr parseCompare();
  ExprPtr parseBinary(int level);
  ExprPtr parseUnary(bool withFilter);
  ExprPtr parsePrimary();
  ExprPtr parsePostfix(ExprPtr e);
  ExprPtr parseFilterExpr(ExprPtr e);
  ExprPtr parseSubscript(ExprPtr e, Loc loc);
  void parseCallArgs(Expr &call);
  ExprPtr parseSequence(Expr::Kind kind, const char *close, Loc loc,
                        ExprPtr first = nullptr);

  /// Makes \p kid (may be null) a child of \p parent. Trees are at most
  /// kMaxDepth deep, so that rendering and freeing them (both recursive)
  /// stay within the stack whatever the template.
  static void adopt(Expr &parent, ExprPtr kid) {
    if (kid) {
      parent.depth = std::max(parent.depth, kid->depth + 1);
      if (parent.depth > kMaxDepth)
        throw TemplateError(parent.loc, "the expression is nested more than " +
                                            std::to_string(kMaxDepth) +
                                            " deep");
    }
    parent.kids.push_back(std::move(kid));
  }

  /// Bounds the parser's recursion (parentheses, `not`, unary signs,
  /// nested statements) at kMaxDepth.
  struct Nest {
    Nest(Parser &p) : p(p) {
      if (++p.nesting_ > kMaxDepth)
        p.fail(p.cur(), "the template is nested more than " +
                            std::to_string(kMaxDepth) + " deep");
    }
    ~Nest() { --p.nesting_; }
    Parser &p;
  };

  static ExprPtr node(Expr::Kind k, Loc loc) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->loc = loc;
    return e;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

Body Parser::parseBody(const std::vector<std::string> &ends,
                       std::string &endTag) {
  Body body;
  while (true) {
    const Token &t = cur();
    if (t.kind == Token::Kind::Eof) {
      if (!ends.empty())
        fail(t, "missing '{% " + ends.back() +
                    " %}' before the end of the "
                    "template");
      return body;
    }
    if (t.kind == Token::Kind::Text) {
      Stmt s;
      s.kind = Stmt::Kind::Text;
      s.loc = t.loc;
      s.text = t.text;
      body.push_back(std::move(s));
      ++pos_;
      continue;
    }
    if (t.kind == Token::Kind::VarBegin) {
      ++pos_;
      Stmt s;
      s.kind = Stmt::Kind::Output;
      s.loc = t.loc;
      s.expr = parseExpr();
      if (cur().kind != Token::Kind::VarEnd)
        fail(cur(), "expected '}}', found " + describe(cur()));
      ++pos_;
      body.push_back(std::move(s));
      continue;
    }
    // A block tag: one that ends this body, or a statement.
    const Token &begin = t;
    ++pos_;
    if (cur().kind == Token::Kind::Name)
      for (const std::string &e : ends)
        if (cur().text == e) {
          endTag = e;
          ++pos_;
          return body;
        }
    body.push_back(parseStatement(begin));
  }
}

Stmt Parser::parseStatement(const Token &begin) {
  Nest nest(*this);
  const Token &kw = cur();
  if (kw.kind != Token::Kind::Name)
    fail(kw, "expected a statement name after '{%', found " + describe(kw));
  std::string name = kw.text;
  ++pos_;
  if (name == "for")
    return parseFor(begin.loc);
  if (name == "if")
    return parseIf(begin.loc);
  if (name == "set")
    return parseSet(begin.loc);
  if (name == "break" || name == "continue") {
    expectBlockEnd();
    Stmt s;
    s.kind = name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
    s.loc = begin.loc;
    return s;
  }
  if (name == "endfor" || name == "endif" || name == "elif" || name == "else" ||
      name == "endset")
    fail(kw, "unexpected '{% " + name + " %}' (nothing open ends here)");
  fail(kw, "unsupported statement '" + name +
               "' (the supported statements: " + kStatements + ")");
}

Stmt Parser::parseFor(Loc loc) {
  Stmt s;
  s.kind = Stmt::Kind::For;
  s.loc = loc;
  s.targets.push_back(expectName("a loop variable"));
  while (isOp(",")) {
    ++pos_;
    s.targets.push_back(expectName("a loop variable"));
  }
  if (!isName("in"))
    fail(cur(), "expected 'in' in the for loop, found " + describe(cur()));
  ++pos_;
  // No conditional expression here: `for x in xs if c` filters the items.
  s.expr = parseOr();
  if (isOp(",")) {
    ExprPtr first = std::move(s.expr);
    s.expr =
        parseSequence(Expr::Kind::Tuple, nullptr, first->loc, std::move(first));
  }
  if (isName("if")) {
    ++pos_;
    s.filter = parseOr();
  }
  if (isName("recursive"))
    fail(cur(), "recursive loops are not supported");
  expectBlockEnd();
  std::string end;
  s.body = parseBody({"else", "endfor"}, end);
  expectBlockEnd();
  if (end == "else") {
    s.elseBody = parseBody({"endfor"}, end);
    expectBlockEnd();
  }
  return s;
}

Stmt Parser::parseIf(Loc loc) {
  Stmt s;
  s.kind = Stmt::Kind::If;
  s.loc = loc;
  // As Jinja2, no `a if b else c` at the top of the condition.
  ExprPtr cond = parseExpr(/*allowCond=*/false);
  while (true) {
    expectBlockEnd();
    std::string end;
    Body body = parseBody({"elif", "else", "endif"}, end);
    s.branches.emplace_back(std::move(cond), std::move(body));
    if (end == "endif")
      break;
    if (end == "else") {
      expectBlockEnd();
      Body other = parseBody({"endif"}, end);
      s.branches.emplace_back(nullptr, std::move(other));
      break;
    }
    cond = parseExpr(/*allowCond=*/false);
  }
  expectBlockEnd();
  return s;
}

Stmt Parser::parseSet(Loc loc) {
  Stmt s;
  s.kind = Stmt::Kind::Set;
  s.loc = loc;
  s.targets.push_back(expectName("a variable name"));
  if (isOp(".")) {
    ++pos_;
    s.attr = expectName("an attribute name");
  } else {
    while (isOp(",")) {
      ++pos_;
      s.targets.push_back(expectName("a variable name"));
    }
  }
  if (cur().kind == Token::Kind::BlockEnd)
    fail(cur(), "block assignments ('{% set x %}...{% endset %}') are not "
                "supported");
  expectOp("=");
  s.expr = parseExpr();
  if (isOp(",")) {
    ExprPtr first = std::move(s.expr);
    s.expr =
        parseSequence(Expr::Kind::Tuple, nullptr, first->loc, std::move(first));
  }
  expectBlockEnd();
  return s;
}

ExprPtr Parser::parseExpr(bool allowCond) {
  Nest nest(*this);
  ExprPtr e = parseOr();
  while (allowCond && isName("if")) {
    Loc loc = cur().loc;
    ++pos_;
    auto c = node(Expr::Kind::Cond, loc);
    ExprPtr test = parseOr();
    ExprPtr other;
    if (isName("else")) {
      ++pos_;
      other = parseExpr();
    }
    adopt(*c, std::move(e));
    adopt(*c, std::move(test));
    adopt(*c, std::move(other));
    e = std::move(c);
  }
  return e;
}

ExprPtr Parser::parseOr() {
  ExprPtr e = parseAnd();
  while (isName("or")) {
    auto n = node(Expr::Kind::Or, cur().loc);
    ++pos_;
    adopt(*n, std::move(e));
    adopt(*n, parseAnd());
    e = std::move(n);
  }
  return e;
}

ExprPtr Parser::parseAnd() {
  ExprPtr e = parseNot();
  while (isName("and")) {
    auto n = node(Expr::Kind::And, cur().loc);
    ++pos_;
    adopt(*n, std::move(e));
    adopt(*n, parseNot());
    e = std::move(n);
  }
  return e;
}

ExprPtr Parser::parseNot() {
  Nest nest(*this);
  if (isName("not")) {
    auto n = node(Expr::Kind::Not, cur().loc);
    ++pos_;
    adopt(*n, parseNot());
    return n;
  }
  return parseCompare();
}

ExprPtr Parser::parseCompare() {
  ExprPtr e = parseBinary(0);
  ExprPtr cmp;
  while (true) {
    std::string op;
    Loc loc = cur().loc;
    if (cur().kind == Token::Kind::Op &&
        (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
         cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
      op = cur().text;
      ++pos_;
    } else if (isName("in")) {
      op = "in";
      ++pos_;
    } else if (isName("not") && peek().kind == Token::Kind::Name &&
               peek().text == "in") {
      op = "not in";
      pos_ += 2;
    } else {
      break;
    }
    if (!cmp) {
      cmp = node(Expr::Kind::Compare, loc);
      adopt(*cmp, std::move(e));
    }
    cmp->ops.push_back(op);
    adopt(*cmp, parseBinary(0));
  }
  return cmp ? std::move(cmp) : std::move(e);
}

/// Levels: 0 `+ -`, 1 `~`, 2 `* / // %`, 3 `**`.
ExprPtr Parser::parseBinary(int level) {
  static const std::vector<std::vector<std::string>> kLevels = {
      {"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
  if (level == 4)
    return parseUnary(true);
  ExprPtr e = parseBinary(level + 1);
  while (cur().kind == Token::Kind::Op) {
    const auto &ops = kLevels[level];
    if (std::find(ops.begin(), ops.end(), cur().text) == ops.end())
      break;
    auto n = node(Expr::Kind::Binary, cur().loc);
    n->name = cur().text;
    ++pos_;
    adopt(*n, std::move(e));
    adopt(*n, parseBinary(level + 1));
    e = std::move(n);
  }
  return e;
}

ExprPtr Parser::parseUnary(bool withFilter) {
  Nest nest(*this);
  ExprPtr e;
  if (isOp("-") || isOp("+")) {
    e = node(isOp("-") ? Expr::Kind::Neg : Expr::Kind::Pos, cur().loc);
    ++pos_;
    adopt(*e, parseUnary(false));
  } else {
    e = parsePrimary();
  }
  e = parsePostfix(std::move(e));
  return withFilter ? parseFilterExpr(std::move(e)) : std::move(e);
}

ExprPtr Parser::parsePrimary() {
  const Token &t = cur();
  switch (t.kind) {
  case Token::Kind::Name: {
    ++pos_;
    const std::string &n = t.text;
    if (n == "true" || n == "True" || n == "false" || n == "False") {
      auto e = node(Expr::Kind::Literal, t.loc);
      e->value = Value::boolean(n[0] == 't' || n[0] == 'T');
      return e;
    }
    if (n == "none" || n == "None") {
      auto e = node(Expr::Kind::Literal, t.loc);
      e->value = Value::none();
      return e;
    }
    auto e = node(Expr::Kind::Name, t.loc);
    e->name = n;
    return e;
  }
  case Token::Kind::String: {
    std::string s;
    Loc loc = t.loc;
    while (cur().kind == Token::Kind::String)
      s += toks_[pos_++].text; // adjacent literals concatenate
    auto e = node(Expr::Kind::Literal, loc);
    e->value = Value::string(std::move(s));
    return e;
  }
  case Token::Kind::Int: {
    ++pos_;
    auto e = node(Expr::Kind::Literal, t.loc);
    errno = 0;
    long long v = std::strtoll(t.text.c_str(), nullptr, 10);
    if (errno == ERANGE)
      fail(t, "integer literal " + t.text + " is too large");
    e->value = Value::integer(v);
    return e;
  }
  case Token::Kind::Float: {
    ++pos_;
    auto e = node(Expr::Kind::Literal, t.loc);
    e->value = Value::number(std::strtod(t.text.c_str(), nullptr));
    return e;
  }
  case Token::Kind::Op:
    if (t.text == "(") {
      ++pos_;
      if (isOp(")")) {
        ++pos_;
        return node(Expr::Kind::Tuple, t.loc);
      }
      ExprPtr e = parseExpr();
      if (isOp(","))
        return parseSequence(Expr::Kind::Tuple, ")", t.loc, std::move(e));
      expectOp(")");
      return e;
    }
    if (t.text == "[") {
      ++pos_;
      return parseSequence(Expr::Kind::List, "]", t.loc);
    }
    if (t.text == "{") {
      ++pos_;
      auto d = node(Expr::Kind::Dict, t.loc);
      while (!isOp("}")) {
        adopt(*d, parseExpr());
        expectOp(":");
        adopt(*d, parseExpr());
        if (!isOp(","))
          break;
        ++pos_;
      }
      expectOp("}");
      return d;
    }
    break;
  default:
    break;
  }
  fail(t, "expected an expression, found " + describe(t));
}

/// Items up to \p close (null: a bare tuple, up to anything else), the
/// first already parsed when given.
ExprPtr Parser::parseSequence(Expr::Kind kind, const char *close, Loc loc,
                              ExprPtr first) {
  auto s = node(kind, loc);
  if (first) {
    adopt(*s, std::move(first));
    if (!isOp(","))
      return s;
    ++pos_;
  }
  auto atEnd = [&] {
    return close ? isOp(close)
                 : (cur().kind == Token::Kind::BlockEnd ||
                    cur().kind == Token::Kind::VarEnd || isName("if"));
  };
  while (!atEnd()) {
    adopt(*s, parseExpr());
    if (!isOp(","))
      break;
    ++pos_;
  }
  if (close)
    expectOp(close);
  return s;
}

ExprPtr Parser::parsePostfix(ExprPtr e) {
  while (true) {
    if (isOp(".")) {
      ++pos_;
      const Token &t = cur();
      if (t.kind == Token::Kind::Int) {
        // x.0 is x[0] in Jinja2.
        auto n = node(Expr::Kind::Item, t.loc);
        auto idx = node(Expr::Kind::Literal, t.loc);
        idx->value = Value::integer(std::strtoll(t.text.c_str(), nullptr, 10));
        ++pos_;
        adopt(*n, std::move(e));
        adopt(*n, std::move(idx));
        e = std::move(n);
        continue;
      }
      auto n = node(Expr::Kind::Attr, t.loc);
      n->name = expectName("an attribute name after '.'");
      adopt(*n, std::move(e));
      e = std::move(n);
    } else if (isOp("[")) {
      Loc loc = cur().loc;
      ++pos_;
      e = parseSubscript(std::move(e), loc);
    } else if (isOp("(")) {
      Loc loc = cur().loc;
      ++pos_;
      // Calls: a global function by name, or a method of a value. Other
      // functions are an error only when called: templates guard the ones
      // Hugging Face adds (`strftime_now is defined`), which are undefined
      // here.
      if (e->kind == Expr::Kind::Attr && !isSupportedMethod(e->name))
        throw TemplateError(e->loc, "unsupported method '" + e->name +
                                        "' (the supported methods: " +
                                        supportedMethodNames() + ")");
      if (e->kind != Expr::Kind::Name && e->kind != Expr::Kind::Attr)
        throw TemplateError(loc, "only functions and methods can be called");
      auto n = node(Expr::Kind::Call, e->loc);
      adopt(*n, std::move(e));
      parseCallArgs(*n);
      e = std::move(n);
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parseSubscript(ExprPtr e, Loc loc) {
  ExprPtr parts[3];
  int colons = 0;
  while (!isOp("]")) {
    if (isOp(":")) {
      if (++colons > 2)
        fail(cur(), "a slice has at most two ':'");
      ++pos_;
      continue;
    }
    if (parts[colons])
      fail(cur(), "expected ']' or ':', found " + describe(cur()));
    parts[colons] = parseExpr();
  }
  ++pos_;
  if (colons == 0) {
    if (!parts[0])
      throw TemplateError(loc, "empty subscript '[]'");
    auto n = node(Expr::Kind::Item, loc);
    adopt(*n, std::move(e));
    adopt(*n, std::move(parts[0]));
    return n;
  }
  auto n = node(Expr::Kind::Slice, loc);
  adopt(*n, std::move(e));
  for (auto &p : parts)
    adopt(*n, std::move(p));
  return n;
}

void Parser::parseCallArgs(Expr &call) {
  while (!isOp(")")) {
    if (isOp("*") || isOp("**"))
      fail(cur(), "'*args' and '**kwargs' in calls are not supported");
    if (cur().kind == Token::Kind::Name && peek().kind == Token::Kind::Op &&
        peek().text == "=") {
      std::string key = cur().text;
      pos_ += 2;
      ExprPtr value = parseExpr();
      call.depth = std::max(call.depth, value->depth + 1);
      call.kwargs.emplace_back(key, std::move(value));
    } else {
      if (!call.kwargs.empty())
        fail(cur(), "a positional argument after a keyword argument");
      adopt(call, parseExpr());
    }
    if (!isOp(","))
      break;
    ++pos_;
  }
  expectOp(")");
}

ExprPtr Parser::parseFilterExpr(ExprPtr e) {
  while (true) {
    if (isOp("|")) {
      ++pos_;
      const Token &t = cur();
      std::string name = expectName("a filter name after '|'");
      if (!isSupportedFilter(name))
        fail(t, "unsupported filter '" + name + "' (the supported filters: " +
                    supportedFilterNames() + ")");
      auto n = node(Expr::Kind::Filter, t.loc);
      n->name = name;
      adopt(*n, std::move(e));
      if (isOp("(")) {
        ++pos_;
        parseCallArgs(*n);
      }
      e = std::move(n);
    } else if (isName("is")) {
      ++pos_;
      auto n = node(Expr::Kind::Test, cur().loc);
      if (isName("not")) {
        n->negated = true;
        ++pos_;
      }
      const Token &t = cur();
      std::string name = expectName("a test name after 'is'");
      if (!isSupportedTest(name))
        fail(t, "unsupported test '" + name +
                    "' (the supported tests: " + supportedTestNames() + ")");
      n->loc = t.loc;
      n->name = name;
      adopt(*n, std::move(e));
      Token::Kind k = cur().kind;
      if (isOp("(")) {
        ++pos_;
        parseCallArgs(*n);
        if (!n->kwargs.empty())
          fail(t, "tests take no keyword arguments");
      } else if ((k == Token::Kind::Name || k == Token::Kind::String ||
                  k == Token::Kind::Int || k == Token::Kind::Float ||
                  isOp("[") || isOp("{")) &&
                 !isName("else") && !isName("or") && !isName("and")) {
        // `x is divisibleby 3`: one argument without parentheses.
        if (isName("is"))
          fail(cur(), "tests cannot be chained with 'is'");
        adopt(*n, parsePostfix(parsePrimary()));
      }
      e = std::move(n);
    } else {
      return e;
    }
  }
}

} // namespace

Body parseTemplate(std::string_view source) {
  return Parser(lexTemplate(source)).parseAll();
}

} // namespace cac::rt::chat
