//===- Domain.h - Index spaces of the rollout batch -------------*- C++ -*-===//
//
// Every value of a cac program lives in a domain. Coarser domains broadcast
// implicitly to finer ones; the other direction needs an explicit reduction.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_DSL_DOMAIN_H
#define CAC_DSL_DOMAIN_H

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace cac {

/// The index spaces. `Scalar` is the domain of parameters and literals.
enum class Domain { Scalar, Token, Seg, Seq, Group, Node };

/// Element kinds a value can have.
enum class ElemKind { Float, Bool };

/// The spelling of a domain in the language ("token", "seq", ...).
llvm::StringRef domainName(Domain d);

/// Parses a user-visible domain name; `scalar` is not one.
std::optional<Domain> parseDomain(llvm::StringRef name);

/// True when a value of domain `from` can be used where `to` is expected by
/// implicit broadcast (or when they are equal).
bool broadcastsTo(Domain from, Domain to);

/// The domain of `a op b`, or nullopt when neither broadcasts to the other.
std::optional<Domain> joinDomains(Domain a, Domain b);

} // namespace cac

#endif // CAC_DSL_DOMAIN_H
