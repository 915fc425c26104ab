//===- Domain.cpp - Index spaces of the rollout batch ---------------------===//

#include "cac/DSL/Domain.h"

namespace cac {

llvm::StringRef domainName(Domain d) {
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
  }
  return "?";
}

std::optional<Domain> parseDomain(llvm::StringRef name) {
  if (name == "token")
    return Domain::Token;
  if (name == "seg")
    return Domain::Seg;
  if (name == "seq")
    return Domain::Seq;
  if (name == "group")
    return Domain::Group;
  if (name == "node")
    return Domain::Node;
  return std::nullopt;
}

bool broadcastsTo(Domain from, Domain to) {
  if (from == to || from == Domain::Scalar)
    return true;
  switch (from) {
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

std::optional<Domain> joinDomains(Domain a, Domain b) {
  if (broadcastsTo(a, b))
    return b;
  if (broadcastsTo(b, a))
    return a;
  return std::nullopt;
}

} // namespace cac
