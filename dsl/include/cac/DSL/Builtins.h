//===- Builtins.h - The built-in functions of the language ------*- C++ -*-===//
//
// The enum and the table of the built-ins, both generated from Builtins.def.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_DSL_BUILTINS_H
#define CAC_DSL_BUILTINS_H

#include "cac/DSL/Domain.h"

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace cac {

/// The built-in functions and values of the language.
enum class Builtin {
#define BUILTIN(Id, Name, MinArgs, MaxArgs, Rule, Domain, Elem, Needs,         \
                Lowering, Op)                                                  \
  Id,
#include "cac/DSL/Builtins.def"
};

/// How Sema checks the arguments of a call and derives its type.
enum class BuiltinRule {
#define BUILTIN_RULE(Rule, NumberArgs, Docs) Rule,
#include "cac/DSL/Builtins.def"
};

/// What an estimator must declare before it calls a built-in.
enum class BuiltinNeeds { None, Group, Tree, Segments };

/// One row of Builtins.def.
struct BuiltinInfo {
  Builtin id;
  llvm::StringRef name;
  unsigned minArgs, maxArgs;
  BuiltinRule rule;
  /// The result's domain and element kind; none where the rule derives them
  /// from the arguments.
  std::optional<Domain> domain;
  std::optional<ElemKind> elem;
  BuiltinNeeds needs;
};

/// The row of a built-in.
const BuiltinInfo &builtinInfo(Builtin b);

/// Looks up a built-in by its name in the language.
std::optional<Builtin> lookupBuiltin(llvm::StringRef name);

/// True where every argument of the rule must be a number.
bool ruleTakesNumbers(BuiltinRule rule);

} // namespace cac

#endif // CAC_DSL_BUILTINS_H
