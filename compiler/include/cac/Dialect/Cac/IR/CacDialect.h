//===- CacDialect.h - The cac dialect ---------------------------*- C++ -*-===//

#ifndef CAC_DIALECT_CAC_IR_CACDIALECT_H
#define CAC_DIALECT_CAC_IR_CACDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "cac/Abi/Domain.h"

#include "cac/Dialect/Cac/IR/CacEnums.h.inc"
#include "cac/Dialect/Cac/IR/CacDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "cac/Dialect/Cac/IR/CacAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "cac/Dialect/Cac/IR/CacTypes.h.inc"

namespace cac::ir {
/// The kernel ABI's domain of a dialect domain; the two enums have the same
/// values (checked in CacDialect.cpp), the ABI's holds the lattice.
inline abi::Domain toAbi(Domain d) { return static_cast<abi::Domain>(d); }
inline Domain fromAbi(abi::Domain d) { return static_cast<Domain>(d); }

/// True when a `from` value can be broadcast to `to`.
inline bool broadcastsTo(Domain from, Domain to) {
  return abi::broadcastsTo(toAbi(from), toAbi(to));
}
} // namespace cac::ir

#define GET_OP_CLASSES
#include "cac/Dialect/Cac/IR/CacOps.h.inc"

#endif // CAC_DIALECT_CAC_IR_CACDIALECT_H
