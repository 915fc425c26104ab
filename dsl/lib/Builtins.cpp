//===- Builtins.cpp - The table of the built-in functions -----------------===//

#include "cac/DSL/Builtins.h"

using namespace cac;

namespace {

/// The spellings of Builtins.def's Domain and Elem columns.
namespace column {
constexpr std::nullopt_t Args = std::nullopt;
constexpr std::optional<Domain> Token = Domain::Token;
constexpr std::optional<Domain> Seg = Domain::Seg;
constexpr std::optional<Domain> Seq = Domain::Seq;
constexpr std::optional<Domain> Group = Domain::Group;
constexpr std::optional<Domain> Node = Domain::Node;
constexpr std::optional<Domain> Scalar = Domain::Scalar;
constexpr std::optional<Domain> Batch = Domain::Batch;
constexpr std::optional<ElemKind> Float = ElemKind::Float;
constexpr std::optional<ElemKind> Bool = ElemKind::Bool;
} // namespace column

const BuiltinInfo kBuiltins[] = {
#define BUILTIN(Id, Name, MinArgs, MaxArgs, Rule, Domain, Elem, Needs,         \
                Lowering, Op)                                                  \
  {Builtin::Id,       Name,           MinArgs,      MaxArgs,                   \
   BuiltinRule::Rule, column::Domain, column::Elem, BuiltinNeeds::Needs},
#include "cac/DSL/Builtins.def"
};

constexpr bool kRuleTakesNumbers[] = {
#define BUILTIN_RULE(Rule, NumberArgs, Docs) NumberArgs,
#include "cac/DSL/Builtins.def"
};

} // namespace

const BuiltinInfo &cac::builtinInfo(Builtin b) {
  // The table is in the enum's order (both come from Builtins.def).
  return kBuiltins[static_cast<size_t>(b)];
}

std::optional<Builtin> cac::lookupBuiltin(llvm::StringRef name) {
  for (const BuiltinInfo &b : kBuiltins)
    if (name == b.name)
      return b.id;
  return std::nullopt;
}

bool cac::ruleTakesNumbers(BuiltinRule rule) {
  return kRuleTakesNumbers[static_cast<size_t>(rule)];
}
