//===- KernelArgs.h - The kernel argument list and buffer kinds -*- C++ -*-===//
//
// Every kernel of a bundle takes one argument list: a fixed head (the unit
// range, the batch sizes, the structure arrays), then one pointer per buffer,
// then one scalar per parameter (docs/bundle.md). The lowering emits entries
// with this list and the runtime fills it, both from the table below.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_ABI_KERNELARGS_H
#define CAC_ABI_KERNELARGS_H

#include "cac/Abi/Domain.h"

#include <optional>
#include <string_view>

namespace cac::abi {

/// Element types of buffers, structure arrays and scalars.
enum class DType { I32, I64, F32, F64 };

/// What a kernel's grid unit is: a sequence, a group, a tree node, or the
/// whole batch (one unit: the batch-wide reductions).
enum class Grid { Seq, Group, Node, Batch };

/// How the runtime treats a buffer: inputs are given by the caller, outputs
/// are returned, scratch lives for one run. Buffers are listed in this order.
enum class BufferRole { Input, Output, Scratch };

/// How a seg buffer is stored: segment j of sequence b at seq_offsets[b] + j
/// (inputs), or the segment's value on each of its tokens (outputs).
enum class SegLayout { BySegment, ByToken };

/// How an argument is passed.
enum class ArgKind {
  I64,    ///< a 64-bit integer scalar (unit range, sizes)
  Ptr,    ///< a pointer to a structure array or a buffer
  Scalar, ///< a floating-point parameter (f32 or f64)
};

/// The fixed head of the argument list, in order; buffers start at
/// kNumFixed. The values index the argument list.
enum FixedArg : unsigned {
  kUnitBegin,
  kUnitEnd,
  kNumSeqs,
  kNumGroups,
  kNumTokens,
  kNumNodes,
  kSeqOffsets,
  kSeqGroup,
  kGroupOffsets,
  kGroupMembers,
  kNodeParent,
  kTokenNode,
  kNumFixed
};

/// One fixed argument: its name in manifests and how it is passed (the
/// sizes as i64, the structure arrays as pointers to i32).
struct FixedArgInfo {
  const char *name;
  ArgKind kind;
};

/// The fixed arguments, indexed by FixedArg.
inline constexpr FixedArgInfo kFixedArgs[kNumFixed] = {
    {"unit_begin", ArgKind::I64},    {"unit_end", ArgKind::I64},
    {"num_seqs", ArgKind::I64},      {"num_groups", ArgKind::I64},
    {"num_tokens", ArgKind::I64},    {"num_nodes", ArgKind::I64},
    {"seq_offsets", ArgKind::Ptr},   {"seq_group", ArgKind::Ptr},
    {"group_offsets", ArgKind::Ptr}, {"group_members", ArgKind::Ptr},
    {"node_parent", ArgKind::Ptr},   {"token_node", ArgKind::Ptr},
};

/// The element type of a fixed argument (i64 sizes, i32 structure arrays).
constexpr DType fixedArgDType(FixedArg a) {
  return kFixedArgs[a].kind == ArgKind::I64 ? DType::I64 : DType::I32;
}

//===----------------------------------------------------------------------===//
// Spellings (manifests, messages) and their parsers
//===----------------------------------------------------------------------===//

/// A dtype as manifests spell it ("f32", ...).
constexpr const char *spelling(DType t) {
  switch (t) {
  case DType::I32:
    return "i32";
  case DType::I64:
    return "i64";
  case DType::F32:
    return "f32";
  case DType::F64:
    return "f64";
  }
  return "?";
}

/// A grid as manifests spell it ("seq", "group", "node").
constexpr const char *spelling(Grid g) {
  switch (g) {
  case Grid::Seq:
    return "seq";
  case Grid::Group:
    return "group";
  case Grid::Node:
    return "node";
  case Grid::Batch:
    return "batch";
  }
  return "?";
}

/// A role as manifests spell it ("input", ...).
constexpr const char *spelling(BufferRole r) {
  switch (r) {
  case BufferRole::Input:
    return "input";
  case BufferRole::Output:
    return "output";
  case BufferRole::Scratch:
    return "scratch";
  }
  return "?";
}

/// A seg layout as manifests spell it ("by-segment", "by-token").
constexpr const char *spelling(SegLayout l) {
  return l == SegLayout::ByToken ? "by-token" : "by-segment";
}

/// The kind's name in messages ("scalar"); manifests spell a scalar "param".
constexpr const char *spelling(ArgKind k) {
  switch (k) {
  case ArgKind::I64:
    return "i64";
  case ArgKind::Ptr:
    return "ptr";
  case ArgKind::Scalar:
    return "scalar";
  }
  return "?";
}

/// The parsers of the spellings above; nullopt for anything else.
inline std::optional<DType> parseDType(std::string_view s) {
  for (DType t : {DType::I32, DType::I64, DType::F32, DType::F64})
    if (s == spelling(t))
      return t;
  return std::nullopt;
}

inline std::optional<Grid> parseGrid(std::string_view s) {
  for (Grid g : {Grid::Seq, Grid::Group, Grid::Node, Grid::Batch})
    if (s == spelling(g))
      return g;
  return std::nullopt;
}

inline std::optional<BufferRole> parseRole(std::string_view s) {
  for (BufferRole r :
       {BufferRole::Input, BufferRole::Output, BufferRole::Scratch})
    if (s == spelling(r))
      return r;
  return std::nullopt;
}

inline std::optional<SegLayout> parseSegLayout(std::string_view s) {
  for (SegLayout l : {SegLayout::BySegment, SegLayout::ByToken})
    if (s == spelling(l))
      return l;
  return std::nullopt;
}

/// The domain whose units a grid runs over.
constexpr Domain domainOf(Grid g) {
  switch (g) {
  case Grid::Seq:
    return Domain::Seq;
  case Grid::Group:
    return Domain::Group;
  case Grid::Node:
    return Domain::Node;
  case Grid::Batch:
    return Domain::Batch;
  }
  return Domain::Seq;
}

/// The grid over a domain's units; only seq, group, node and batch have one.
constexpr std::optional<Grid> gridOf(Domain d) {
  switch (d) {
  case Domain::Seq:
    return Grid::Seq;
  case Domain::Group:
    return Grid::Group;
  case Domain::Node:
    return Grid::Node;
  case Domain::Batch:
    return Grid::Batch;
  default:
    return std::nullopt;
  }
}

} // namespace cac::abi

#endif // CAC_ABI_KERNELARGS_H
