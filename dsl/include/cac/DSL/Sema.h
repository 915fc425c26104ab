//===- Sema.h - Names, types and domains of a .cac estimator ----*- C++ -*-===//

#ifndef CAC_DSL_SEMA_H
#define CAC_DSL_SEMA_H

#include "cac/DSL/AST.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/LogicalResult.h"

#include <optional>

namespace cac {

/// The built-in functions and values of the language.
enum class Builtin {
  // Elementwise, any domain.
  Exp,
  Log,
  Sqrt,
  Abs,
  Sigmoid,
  Floor,
  Ceil,
  Min,
  Max,
  Pow,
  Mod,
  Clip,
  Select,
  Float,
  // Objectives: stop-gradient and the KL estimators of (logp, logp_ref).
  StopGrad,
  KlK1,
  KlK2,
  KlK3,
  // Inside a sequence.
  Next,
  Prev,
  Scan,
  RScan,
  CumSum,
  RCumSum,
  Pos,
  IsFirst,
  IsLast,
  Length,
  Rank,
  TopK,
  // Segmentation rules (token predicates) and segment structure.
  After,
  Every,
  Nth,
  Balanced,
  SegStart,
  SegEnd,
  SegLen,
  SegPos,
  NumSegs,
  // token -> seg.
  SegSum,
  SegMean,
  SegFirst,
  SegLast,
  // token (or seg) -> seq.
  SeqSum,
  SeqMean,
  SeqMin,
  SeqMax,
  SeqFirst,
  SeqLast,
  // seq -> group.
  GroupSum,
  GroupMean,
  GroupMin,
  GroupMax,
  GroupVar,
  GroupStd,
  GroupVarUnbiased,
  GroupStdUnbiased,
  GroupCount,
  // seq -> seq through the group.
  GroupLooMean,
  // Rollout trees (`input tree : node`).
  IsRoot,
  IsLeaf,
  NumChildren,
  LeafMean,    // seq -> node: over the sequences that end at the node
  SubtreeMean, // seq -> node: over the sequences whose leaf is in the subtree
  SubtreeMax,
  SubtreeCount,
  ChildMean,   // node -> node
  TreeMean,    // node -> node, bottom-up
  Parent,      // node -> node
};

/// Looks up a built-in by its name in the language.
std::optional<Builtin> lookupBuiltin(llvm::StringRef name);

/// True for the built-ins that read the grouping input.
bool usesGroups(Builtin b);

/// The aggregation modes of an objective's token loss (docs/language.md),
/// in the order of their codes (the `aggregation` parameter).
extern const char *const kAggregationModes[4];

/// The code of an aggregation mode, or -1.
int aggregationCode(llvm::StringRef mode);

/// Resolves names, checks types and domains and annotates the AST in place.
/// Reports every error through the context's diagnostic engine.
mlir::LogicalResult analyze(ast::Estimator &est, mlir::MLIRContext &context);

} // namespace cac

#endif // CAC_DSL_SEMA_H
