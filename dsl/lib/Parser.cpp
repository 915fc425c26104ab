//===- Parser.cpp - ANTLR4 glue: parse tree to AST ------------------------===//
//
// The input is checked before ANTLR sees it (size, NUL bytes, UTF-8), and the
// token stream is checked before the parser runs (nesting depth, statement
// size), so that no input can exhaust the stack of the recursive-descent
// parser or of the tree walks after it.
//
//===----------------------------------------------------------------------===//

#include "cac/DSL/Parser.h"

#include "CacLexer.h"
#include "CacParser.h"
#include "antlr4-runtime.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"

#include <cstdlib>

using namespace cac;
using namespace cac::ast;

mlir::Location cac::toLocation(mlir::MLIRContext &context,
                               const ast::Location &loc) {
  return mlir::FileLineColLoc::get(&context, loc.file ? *loc.file : "<unknown>",
                                   loc.line, loc.col);
}

namespace {

/// Reports the first lexer or parser error through MLIR and remembers that
/// one happened; later errors are usually consequences of the first.
class DiagnosticErrorListener : public antlr4::BaseErrorListener {
public:
  DiagnosticErrorListener(mlir::MLIRContext &ctx,
                          std::shared_ptr<std::string> file)
      : ctx(ctx), file(std::move(file)) {}

  void syntaxError(antlr4::Recognizer *, antlr4::Token *offending, size_t line,
                   size_t charPositionInLine, const std::string &msg,
                   std::exception_ptr) override {
    if (failed)
      return;
    failed = true;
    std::string text = msg;
    // ANTLR spells the end of input "<EOF>"; say it plainly.
    if (offending && offending->getType() == antlr4::Token::EOF)
      text = "unexpected end of file: " + msg;
    mlir::emitError(toLocation(ctx, {file, unsigned(line),
                                     unsigned(charPositionInLine + 1)}))
        << "syntax error: " << text;
  }

  bool failed = false;

private:
  mlir::MLIRContext &ctx;
  std::shared_ptr<std::string> file;
};

/// Finds the first byte that is not valid UTF-8 (or is NUL). Returns its
/// offset, or npos.
size_t findInvalidUtf8(llvm::StringRef s) {
  const unsigned char *p = reinterpret_cast<const unsigned char *>(s.data());
  size_t n = s.size();
  for (size_t i = 0; i < n;) {
    unsigned char c = p[i];
    if (c == 0)
      return i;
    if (c < 0x80) {
      ++i;
      continue;
    }
    unsigned len = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > n)
      return i;
    for (unsigned k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80)
        return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
        (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return llvm::StringRef::npos;
}

/// Line and column (1-based, in characters) of byte `offset`.
std::pair<unsigned, unsigned> lineColOf(llvm::StringRef s, size_t offset) {
  unsigned line = 1, col = 1;
  for (size_t i = 0; i < offset && i < s.size(); ++i) {
    if (s[i] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  return {line, col};
}

class AstBuilder {
public:
  AstBuilder(std::shared_ptr<std::string> file) : file(std::move(file)) {}

  Location loc(antlr4::ParserRuleContext *ctx) {
    return loc(ctx->getStart());
  }
  Location loc(antlr4::Token *tok) {
    return {file, unsigned(tok->getLine()),
            unsigned(tok->getCharPositionInLine() + 1)};
  }
  Location loc(antlr4::tree::TerminalNode *node) {
    return loc(node->getSymbol());
  }

  std::unique_ptr<Estimator> build(cacgen::CacParser::FileContext *file) {
    auto est = std::make_unique<Estimator>();
    auto *decl = file->estimatorDecl();
    est->loc = loc(decl);
    est->name = decl->ID()->getText();
    est->isObjective = decl->kind->getText() == "objective";
    for (auto *imp : file->importDecl()) {
      Import i;
      i.loc = loc(imp);
      std::string quoted = imp->STRING()->getText();
      i.path = unescape(quoted.substr(1, quoted.size() - 2));
      i.alias = imp->ID()->getText();
      est->imports.push_back(std::move(i));
    }
    for (auto *s : decl->stmt())
      est->stmts.push_back(buildStmt(s));
    return est;
  }

private:
  static std::string unescape(const std::string &s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\\' && i + 1 < s.size()) {
        char c = s[++i];
        out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
      } else {
        out += s[i];
      }
    }
    return out;
  }

  Stmt buildStmt(cacgen::CacParser::StmtContext *ctx) {
    Stmt s;
    s.loc = loc(ctx);
    if (auto *in = dynamic_cast<cacgen::CacParser::InputStmtContext *>(ctx)) {
      s.kind = Stmt::Kind::Input;
      s.name = in->ID(0)->getText();
      s.nameLoc = loc(in->ID(0));
      s.domainName = in->ID(1)->getText();
      s.domainLoc = loc(in->ID(1));
    } else if (auto *p =
                   dynamic_cast<cacgen::CacParser::ParamStmtContext *>(ctx)) {
      s.kind = Stmt::Kind::Param;
      s.name = p->ID()->getText();
      s.nameLoc = loc(p->ID());
      if (auto *num = p->number()) {
        double v = std::strtod(num->NUMBER()->getText().c_str(), nullptr);
        s.defaultValue = num->getStart()->getText() == "-" ? -v : v;
      }
    } else if (auto *l = dynamic_cast<cacgen::CacParser::LetStmtContext *>(ctx)) {
      s.kind = Stmt::Kind::Let;
      s.name = l->ID(0)->getText();
      s.nameLoc = loc(l->ID(0));
      if (l->ID().size() > 1) {
        s.domainName = l->ID(1)->getText();
        s.domainLoc = loc(l->ID(1));
      }
      s.value = buildExpr(l->expr());
    } else if (auto *sg =
                   dynamic_cast<cacgen::CacParser::SegmentsStmtContext *>(ctx)) {
      s.kind = Stmt::Kind::Segments;
      s.name = "segments";
      s.nameLoc = s.loc;
      s.value = buildExpr(sg->expr());
    } else if (auto *ls =
                   dynamic_cast<cacgen::CacParser::LossStmtContext *>(ctx)) {
      s.kind = Stmt::Kind::Loss;
      s.name = ls->ID()->getText();
      s.nameLoc = loc(ls->ID());
      s.value = buildExpr(ls->expr());
      for (auto *opt : ls->lossOption()) {
        std::string key = opt->ID()->getText();
        if (key == "mask" && opt->expr() && !s.mask) {
          s.mask = buildExpr(opt->expr());
        } else if (key == "aggregation" && opt->STRING() &&
                   s.aggregation.empty()) {
          std::string quoted = opt->STRING()->getText();
          s.aggregation = unescape(quoted.substr(1, quoted.size() - 2));
          s.aggregationLoc = loc(opt->STRING());
        } else {
          // Sema reports it: keep the option's location in the name.
          s.badOptions.push_back({key, loc(opt)});
        }
      }
    } else {
      auto *o = dynamic_cast<cacgen::CacParser::OutputStmtContext *>(ctx);
      s.kind = Stmt::Kind::Output;
      s.name = o->ID(0)->getText();
      s.nameLoc = loc(o->ID(0));
      s.domainName = o->ID(1)->getText();
      s.domainLoc = loc(o->ID(1));
      s.value = buildExpr(o->expr());
    }
    return s;
  }

  ExprPtr binary(cacgen::CacParser::ExprContext *ctx, antlr4::Token *op,
                 cacgen::CacParser::ExprContext *lhs,
                 cacgen::CacParser::ExprContext *rhs) {
    auto e = std::make_unique<Expr>(Expr::Kind::Binary, loc(op));
    std::string t = op->getText();
    e->op = t == "+"     ? Expr::Op::Add
            : t == "-"   ? Expr::Op::Sub
            : t == "*"   ? Expr::Op::Mul
            : t == "/"   ? Expr::Op::Div
            : t == "<"   ? Expr::Op::Lt
            : t == "<="  ? Expr::Op::Le
            : t == ">"   ? Expr::Op::Gt
            : t == ">="  ? Expr::Op::Ge
            : t == "=="  ? Expr::Op::Eq
            : t == "!="  ? Expr::Op::Ne
            : t == "and" ? Expr::Op::And
                         : Expr::Op::Or;
    e->args.push_back(buildExpr(lhs));
    e->args.push_back(buildExpr(rhs));
    (void)ctx;
    return e;
  }

  ExprPtr buildExpr(cacgen::CacParser::ExprContext *ctx) {
    using P = cacgen::CacParser;
    if (auto *p = dynamic_cast<P::ParenExprContext *>(ctx))
      return buildExpr(p->expr());
    if (auto *n = dynamic_cast<P::NumberExprContext *>(ctx)) {
      auto e = std::make_unique<Expr>(Expr::Kind::Number, loc(ctx));
      e->number = std::strtod(n->NUMBER()->getText().c_str(), nullptr);
      return e;
    }
    if (dynamic_cast<P::BoolExprContext *>(ctx)) {
      auto e = std::make_unique<Expr>(Expr::Kind::Bool, loc(ctx));
      e->number = ctx->getText() == "true" ? 1.0 : 0.0;
      return e;
    }
    if (auto *c = dynamic_cast<P::CallExprContext *>(ctx)) {
      auto e = std::make_unique<Expr>(Expr::Kind::Call, loc(ctx));
      e->name = c->ID()->getText();
      for (auto *a : c->arg()) {
        e->argNames.push_back(a->ID() ? a->ID()->getText() : "");
        e->args.push_back(buildExpr(a->expr()));
      }
      return e;
    }
    if (auto *n = dynamic_cast<P::NameExprContext *>(ctx)) {
      auto e = std::make_unique<Expr>(Expr::Kind::Name, loc(ctx));
      if (n->ID().size() == 2) {
        e->qualifier = n->ID(0)->getText();
        e->name = n->ID(1)->getText();
      } else {
        e->name = n->ID(0)->getText();
      }
      return e;
    }
    if (auto *n = dynamic_cast<P::NegExprContext *>(ctx)) {
      auto e = std::make_unique<Expr>(Expr::Kind::Unary, loc(ctx));
      e->op = Expr::Op::Neg;
      e->args.push_back(buildExpr(n->expr()));
      return e;
    }
    if (auto *n = dynamic_cast<P::NotExprContext *>(ctx)) {
      auto e = std::make_unique<Expr>(Expr::Kind::Unary, loc(ctx));
      e->op = Expr::Op::Not;
      e->args.push_back(buildExpr(n->expr()));
      return e;
    }
    if (auto *b = dynamic_cast<P::MulExprContext *>(ctx))
      return binary(ctx, b->op, b->expr(0), b->expr(1));
    if (auto *b = dynamic_cast<P::AddExprContext *>(ctx))
      return binary(ctx, b->op, b->expr(0), b->expr(1));
    if (auto *b = dynamic_cast<P::CmpExprContext *>(ctx))
      return binary(ctx, b->op, b->expr(0), b->expr(1));
    if (auto *b = dynamic_cast<P::AndExprContext *>(ctx))
      return binary(ctx, b->op, b->expr(0), b->expr(1));
    auto *b = dynamic_cast<P::OrExprContext *>(ctx);
    return binary(ctx, b->op, b->expr(0), b->expr(1));
  }

  std::shared_ptr<std::string> file;
};

/// Rejects token streams whose parse would recurse too deeply: nesting of
/// parentheses and prefix operators, and very long statements.
bool checkTokenLimits(antlr4::CommonTokenStream &tokens,
                      mlir::MLIRContext &context,
                      const std::shared_ptr<std::string> &file,
                      const ParseLimits &limits) {
  unsigned depth = 0, prefixRun = 0, operators = 0;
  auto at = [&](antlr4::Token *t) {
    return toLocation(context, {file, unsigned(t->getLine()),
                                unsigned(t->getCharPositionInLine() + 1)});
  };
  bool prevIsOperand = false;
  for (antlr4::Token *t : tokens.getTokens()) {
    if (t->getType() == antlr4::Token::EOF)
      break;
    std::string s = t->getText();
    if (s == "input" || s == "param" || s == "let" || s == "output" ||
        s == "}" || s == ";") {
      operators = 0;
      depth = 0;
    }
    bool isOperand = t->getType() == cacgen::CacLexer::ID ||
                     t->getType() == cacgen::CacLexer::NUMBER || s == ")" ||
                     s == "true" || s == "false";
    bool isPrefix = (s == "-" && !prevIsOperand) || s == "not";
    if (isPrefix) {
      if (++prefixRun > limits.maxNesting) {
        mlir::emitError(at(t))
            << "expression nested too deeply (more than " << limits.maxNesting
            << " prefix operators in a row)";
        return false;
      }
    } else {
      prefixRun = 0;
    }
    if (s == "(") {
      if (++depth > limits.maxNesting) {
        mlir::emitError(at(t)) << "expression nested too deeply (more than "
                               << limits.maxNesting << " open parentheses)";
        return false;
      }
    } else if (s == ")" && depth > 0) {
      --depth;
    }
    if (s == "+" || s == "-" || s == "*" || s == "/" || s == "<" ||
        s == "<=" || s == ">" || s == ">=" || s == "==" || s == "!=" ||
        s == "and" || s == "or" || s == "not" || s == ",") {
      if (++operators > limits.maxExprOperators) {
        mlir::emitError(at(t))
            << "statement too long (more than " << limits.maxExprOperators
            << " operators); split it with `let`";
        return false;
      }
    }
    prevIsOperand = isOperand;
  }
  return true;
}

} // namespace

std::unique_ptr<Estimator> cac::parseEstimator(llvm::SourceMgr &sourceMgr,
                                               unsigned bufferId,
                                               mlir::MLIRContext &context,
                                               const ParseLimits &limits) {
  const llvm::MemoryBuffer *buf = sourceMgr.getMemoryBuffer(bufferId);
  auto file = std::make_shared<std::string>(buf->getBufferIdentifier().str());
  llvm::StringRef text = buf->getBuffer();

  if (text.size() > limits.maxFileBytes) {
    mlir::emitError(toLocation(context, {file, 1, 1}))
        << "file too large (" << text.size() << " bytes; the limit is "
        << limits.maxFileBytes << ")";
    return nullptr;
  }
  size_t bad = findInvalidUtf8(text);
  if (bad != llvm::StringRef::npos) {
    auto [line, col] = lineColOf(text, bad);
    unsigned byte = static_cast<unsigned char>(text[bad]);
    mlir::InFlightDiagnostic d =
        mlir::emitError(toLocation(context, {file, line, col}));
    if (byte == 0)
      d << "invalid byte: NUL in source text";
    else
      d << "invalid UTF-8: byte 0x" << llvm::utohexstr(byte, false, 2)
        << " at offset " << bad;
    return nullptr;
  }

  try {
    antlr4::ANTLRInputStream input(text.str());
    input.name = *file;
    cacgen::CacLexer lexer(&input);
    DiagnosticErrorListener listener(context, file);
    lexer.removeErrorListeners();
    lexer.addErrorListener(&listener);
    antlr4::CommonTokenStream tokens(&lexer);
    tokens.fill();
    if (listener.failed)
      return nullptr;
    if (!checkTokenLimits(tokens, context, file, limits))
      return nullptr;
    cacgen::CacParser parser(&tokens);
    parser.removeErrorListeners();
    parser.addErrorListener(&listener);
    auto *tree = parser.file();
    if (listener.failed || parser.getNumberOfSyntaxErrors() > 0)
      return nullptr;
    return AstBuilder(file).build(tree);
  } catch (const std::exception &e) {
    mlir::emitError(toLocation(context, {file, 1, 1}))
        << "could not parse: " << e.what();
    return nullptr;
  }
}
