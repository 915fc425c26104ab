//===- AST.cpp - Printing the AST ------------------------------------------===//

#include "cac/DSL/AST.h"

using namespace cac;
using namespace cac::ast;

const char *ast::opSpelling(Expr::Op op) {
  switch (op) {
  case Expr::Op::Neg:
    return "-";
  case Expr::Op::Not:
    return "not";
  case Expr::Op::Add:
    return "+";
  case Expr::Op::Sub:
    return "-";
  case Expr::Op::Mul:
    return "*";
  case Expr::Op::Div:
    return "/";
  case Expr::Op::Lt:
    return "<";
  case Expr::Op::Le:
    return "<=";
  case Expr::Op::Gt:
    return ">";
  case Expr::Op::Ge:
    return ">=";
  case Expr::Op::Eq:
    return "==";
  case Expr::Op::Ne:
    return "!=";
  case Expr::Op::And:
    return "and";
  case Expr::Op::Or:
    return "or";
  }
  return "?";
}

namespace {

void printLoc(const Location &loc, llvm::raw_ostream &os) {
  os << " @" << loc.line << ":" << loc.col;
}

void printType(const Type &t, llvm::raw_ostream &os) {
  os << " : " << domainName(t.domain);
  if (t.elem == ElemKind::Bool)
    os << " bool";
}

void dumpExpr(const Expr &e, unsigned indent, llvm::raw_ostream &os) {
  os.indent(indent);
  switch (e.kind) {
  case Expr::Kind::Number:
    os << "Number " << e.number;
    break;
  case Expr::Kind::Bool:
    os << "Bool " << (e.number != 0 ? "true" : "false");
    break;
  case Expr::Kind::Name:
    os << "Name " << (e.qualifier.empty() ? "" : e.qualifier + ".") << e.name;
    break;
  case Expr::Kind::Call:
    os << "Call " << e.name;
    break;
  case Expr::Kind::Unary:
  case Expr::Kind::Binary:
    os << (e.kind == Expr::Kind::Unary ? "Unary '" : "Binary '")
       << opSpelling(e.op) << "'";
    break;
  }
  printType(e.type, os);
  printLoc(e.loc, os);
  os << "\n";
  for (const auto &a : e.args)
    dumpExpr(*a, indent + 2, os);
}

} // namespace

void ast::dump(const Estimator &est, llvm::raw_ostream &os) {
  os << (est.isObjective ? "Objective " : "Estimator ") << est.name;
  printLoc(est.loc, os);
  os << "\n";
  for (const Import &i : est.imports)
    os << "  Import \"" << i.path << "\" as " << i.alias << "\n";
  for (const Stmt &s : est.stmts) {
    os << "  ";
    switch (s.kind) {
    case Stmt::Kind::Input:
      os << "Input " << s.name;
      break;
    case Stmt::Kind::Param:
      os << "Param " << s.name;
      if (s.defaultValue)
        os << " = " << *s.defaultValue;
      break;
    case Stmt::Kind::Let:
      os << "Let " << s.name;
      break;
    case Stmt::Kind::Output:
      os << "Output " << s.name;
      break;
    case Stmt::Kind::Segments:
      os << "Segments";
      break;
    case Stmt::Kind::Loss:
      os << "Loss wrt " << s.name;
      if (!s.aggregation.empty())
        os << " aggregation \"" << s.aggregation << "\"";
      break;
    }
    printType(s.type, os);
    printLoc(s.loc, os);
    os << "\n";
    if (s.value)
      dumpExpr(*s.value, 4, os);
    if (s.mask) {
      os << "    mask\n";
      dumpExpr(*s.mask, 6, os);
    }
  }
}
