//===- Domain.h - Index spaces of the rollout batch -------------*- C++ -*-===//
//
// Every value of a cac program lives in a domain. The domains and their
// broadcast lattice are the kernel ABI's (abi/include/cac/Abi/Domain.h);
// this header gives the front end their names as LLVM strings.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_DSL_DOMAIN_H
#define CAC_DSL_DOMAIN_H

#include "cac/Abi/Domain.h"

#include "llvm/ADT/StringRef.h"

namespace cac {

/// The index spaces. `Scalar` is the domain of parameters and literals.
using abi::Domain;

/// Element kinds a value can have.
enum class ElemKind { Float, Bool };

/// The spelling of a domain in the language ("token", "seq", ...).
inline llvm::StringRef domainName(Domain d) { return abi::spelling(d); }

/// Parses a user-visible domain name; `scalar` is not one.
using abi::parseDomain;

/// True when a value of domain `from` can be used where `to` is expected by
/// implicit broadcast (or when they are equal).
using abi::broadcastsTo;

/// The domain of `a op b`, or nullopt when neither broadcasts to the other.
using abi::joinDomains;

} // namespace cac

#endif // CAC_DSL_DOMAIN_H
