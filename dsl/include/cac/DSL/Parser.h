//===- Parser.h - From .cac text to the AST ---------------------*- C++ -*-===//
//
// The ANTLR4 parser stays behind this interface: no ANTLR type leaves dsl/.
// Every error, lexical and syntactic included, is reported through the MLIR
// context's diagnostic engine at file:line:col.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_DSL_PARSER_H
#define CAC_DSL_PARSER_H

#include "cac/DSL/AST.h"

#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"

#include <memory>

namespace cac {

/// Limits that keep the front end safe on hostile input.
struct ParseLimits {
  unsigned maxNesting = 256;        ///< Parentheses and unary operators.
  unsigned maxExprOperators = 4096; ///< Operators in one statement.
  size_t maxFileBytes = 16u << 20;
};

/// Parses buffer `bufferId` of `sourceMgr`. Returns null after reporting an
/// error.
std::unique_ptr<ast::Estimator> parseEstimator(llvm::SourceMgr &sourceMgr,
                                               unsigned bufferId,
                                               mlir::MLIRContext &context,
                                               const ParseLimits &limits = {});

/// The MLIR location of an AST location.
mlir::Location toLocation(mlir::MLIRContext &context, const ast::Location &loc);

} // namespace cac

#endif // CAC_DSL_PARSER_H
