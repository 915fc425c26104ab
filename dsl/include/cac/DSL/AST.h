//===- AST.h - The abstract syntax tree of a .cac file ----------*- C++ -*-===//
//
// Every node carries the file:line:col where it starts. Expression nodes are
// annotated in place by semantic analysis (Sema) with their domain and element
// kind, and names with what they resolve to.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_DSL_AST_H
#define CAC_DSL_AST_H

#include "cac/DSL/Domain.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cac::ast {

/// A position in a source file (1-based line and column).
struct Location {
  std::shared_ptr<std::string> file;
  unsigned line = 0;
  unsigned col = 0;
};

/// The static type of an expression: its domain and whether it is a real
/// number or a predicate.
struct Type {
  Domain domain = Domain::Scalar;
  ElemKind elem = ElemKind::Float;
  bool operator==(const Type &o) const {
    return domain == o.domain && elem == o.elem;
  }
  bool operator!=(const Type &o) const { return !(*this == o); }
};

class Expr;
using ExprPtr = std::unique_ptr<Expr>;

/// An expression node.
class Expr {
public:
  enum class Kind { Number, Bool, Name, Call, Unary, Binary };
  enum class Op {
    // Unary.
    Neg,
    Not,
    // Binary.
    Add,
    Sub,
    Mul,
    Div,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
  };

  Expr(Kind kind, Location loc) : kind(kind), loc(std::move(loc)) {}

  Kind kind;
  Location loc;

  double number = 0;       ///< Number, Bool (0/1).
  std::string name;        ///< Name and Call: the identifier.
  std::string qualifier;   ///< Name: `mod.name` refers to an import.
  Op op = Op::Add;         ///< Unary and Binary.
  std::vector<ExprPtr> args;           ///< Call arguments, Unary/Binary operands.
  std::vector<std::string> argNames;   ///< Call: keyword of each argument or "".

  /// Filled by Sema.
  Type type;
};

/// A statement of an estimator body.
struct Stmt {
  enum class Kind { Input, Param, Let, Output, Segments, Loss };
  Kind kind;
  Location loc;
  std::string name;
  Location nameLoc;
  /// Input, Output, optional for Let: the declared domain as written.
  std::string domainName;
  Location domainLoc;
  /// Param: the default value, if any.
  std::optional<double> defaultValue;
  /// Let, Output, Segments, Loss: the defining expression.
  ExprPtr value;
  /// Loss: `name` is the input it is differentiated by; the optional mask
  /// (the elements that count) and the aggregation mode as written.
  ExprPtr mask;
  std::string aggregation;
  Location aggregationLoc;
  /// Loss: options that are unknown, repeated or of the wrong form.
  std::vector<std::pair<std::string, Location>> badOptions;
  /// Filled by Sema: the declared type (Input, Param, Output) or the type of
  /// the value (Let).
  Type type;
};

struct Estimator;

/// `import "path.cac" as name`.
struct Import {
  Location loc;
  std::string path;
  std::string alias;
  /// The imported estimator, parsed and analyzed (set by the driver before
  /// Sema runs on the importer).
  std::shared_ptr<Estimator> module;
};

/// One estimator: the unit a .cac file defines.
struct Estimator {
  Location loc;
  std::string name;
  /// Declared with `objective` (a loss and its gradient) instead of
  /// `estimator`.
  bool isObjective = false;
  std::vector<Import> imports;
  std::vector<Stmt> stmts;
};

/// Prints the tree in an indented, FileCheck-friendly form.
void dump(const Estimator &est, llvm::raw_ostream &os);

const char *opSpelling(Expr::Op op);

} // namespace cac::ast

#endif // CAC_DSL_AST_H
