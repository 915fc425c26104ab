//===- Domain.h - Index spaces of the rollout batch -------------*- C++ -*-===//
//
// Every value of a cac program lives in a domain, and every buffer of a
// kernel bundle has one. Coarser domains broadcast implicitly to finer ones
// (batch -> group -> seq -> seg -> token, node -> token); the other direction needs
// an explicit reduction. The language (dsl/), the dialect (compiler/) and the
// runtime all take the lattice from here.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_ABI_DOMAIN_H
#define CAC_ABI_DOMAIN_H

#include <cstdint>
#include <optional>
#include <string_view>

namespace cac::abi {

/// The index spaces. `Scalar` is the domain of parameters and literals; it is
/// no buffer's domain. `Batch` holds one value for the whole batch, computed
/// by a reduction over all its sequences or tokens (a scratch buffer of one
/// element). The values are the dialect's (CacBase.td), which CacDialect.cpp
/// checks.
enum class Domain : uint32_t { Scalar = 0, Token, Seg, Seq, Group, Node, Batch };

/// The spelling of a domain in the language and in manifests ("token", ...).
constexpr const char *spelling(Domain d) {
  switch (d) {
  case Domain::Scalar:
    return "scalar";
  case Domain::Token:
    return "token";
  case Domain::Seg:
    return "seg";
  case Domain::Seq:
    return "seq";
  case Domain::Group:
    return "group";
  case Domain::Node:
    return "node";
  case Domain::Batch:
    return "batch";
  }
  return "?";
}

/// Parses a user-visible domain name; `scalar` is not one (nothing is
/// declared or stored on it).
inline std::optional<Domain> parseDomain(std::string_view name) {
  for (Domain d : {Domain::Token, Domain::Seg, Domain::Seq, Domain::Group,
                   Domain::Node, Domain::Batch})
    if (name == spelling(d))
      return d;
  return std::nullopt;
}

/// True when a value of domain `from` can be used where `to` is expected by
/// implicit broadcast (or when they are equal).
constexpr bool broadcastsTo(Domain from, Domain to) {
  if (from == to || from == Domain::Scalar)
    return true;
  switch (from) {
  case Domain::Batch:
    return to == Domain::Group || to == Domain::Seq || to == Domain::Seg ||
           to == Domain::Token;
  case Domain::Group:
    return to == Domain::Seq || to == Domain::Seg || to == Domain::Token;
  case Domain::Seq:
    return to == Domain::Seg || to == Domain::Token;
  case Domain::Seg:
  case Domain::Node:
    return to == Domain::Token;
  default:
    return false;
  }
}

/// The domain of `a op b`, or nullopt when neither broadcasts to the other.
constexpr std::optional<Domain> joinDomains(Domain a, Domain b) {
  if (broadcastsTo(a, b))
    return b;
  if (broadcastsTo(b, a))
    return a;
  return std::nullopt;
}

} // namespace cac::abi

#endif // CAC_ABI_DOMAIN_H
