//===- Manifest.h - The manifest.json of a kernel bundle --------*- C++ -*-===//
//
// A kernel bundle's manifest says which kernels there are, the one argument
// list they all take, the buffers and the parameters (docs/bundle.md). This
// is the parsed, validated form: the runtime reads nothing else from JSON.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_KERNELS_MANIFEST_H
#define CAC_RUNTIME_KERNELS_MANIFEST_H

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cac::rt {

/// Every error of the kernel runtime: bad manifests, missing symbols, wrong
/// inputs, driver failures. The message says which file, field or input.
class BundleError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The format string this runtime understands.
inline constexpr const char *kBundleFormat = "cac-bundle-1";

/// Element types of buffers and scalars.
enum class DType { I32, I64, F32, F64 };

/// Index spaces of the batch (docs/bundle.md, "Buffers of each domain").
enum class Domain { Token, Seg, Seq, Group, Node };

/// What a kernel's grid unit is.
enum class Grid { Seq, Group, Node };

/// How the runtime treats a buffer: inputs are given by the caller, outputs
/// are returned, scratch lives for one run.
enum class BufferRole { Input, Output, Scratch };

/// How an argument is passed.
enum class ArgKind {
  I64,    ///< a 64-bit integer scalar (unit range, sizes)
  Ptr,    ///< a pointer to a structure array or a buffer
  Scalar, ///< a floating-point parameter (f32 or f64)
};

/// Where the value of an argument comes from; resolved from its name.
enum class ArgSource {
  UnitBegin,
  UnitEnd,
  NumSeqs,
  NumGroups,
  NumTokens,
  NumNodes,
  SeqOffsets,
  SeqGroup,
  GroupOffsets,
  GroupMembers,
  NodeParent,
  TokenNode,
  Buffer, ///< `index` is the position in Manifest::buffers
  Param,  ///< `index` is the position in Manifest::params
};

/// Spellings used in manifests and messages.
const char *dtypeName(DType t);
const char *domainName(Domain d);
const char *gridName(Grid g);
const char *roleName(BufferRole r);
const char *argKindName(ArgKind k);
std::optional<DType> parseDType(const std::string &s);
std::optional<Domain> parseDomain(const std::string &s);
std::optional<Grid> parseGrid(const std::string &s);
std::optional<BufferRole> parseRole(const std::string &s);

/// One buffer of the bundle.
struct BufferSpec {
  std::string name;
  BufferRole role = BufferRole::Input;
  Domain domain = Domain::Token;
  DType dtype = DType::F32;
};

/// One parameter; `defaultValue` is empty for a required parameter.
struct ParamSpec {
  std::string name;
  std::optional<double> defaultValue;
};

/// One argument of the shared kernel argument list.
struct ArgSpec {
  std::string name;
  ArgKind kind = ArgKind::I64;
  DType dtype = DType::I64; ///< pointee type for Ptr, value type otherwise
  ArgSource source = ArgSource::UnitBegin;
  int index = -1; ///< buffer or parameter index for those sources
};

/// One kernel; they run in manifest order.
struct KernelSpec {
  std::string name;
  Grid grid = Grid::Seq;
  int block = 128; ///< CUDA threads per block
  /// "unit": "block": on the GPU one block of `block` threads per unit
  /// (grid = units); otherwise ("thread", the default) one thread per unit
  /// (grid = ceil(units / block)). A bundle's CPU code always runs units one
  /// after the other.
  bool perBlock = false;
};

/// The parsed manifest.json.
struct Manifest {
  std::string format;
  std::string estimator;
  std::string source;
  DType dtype = DType::F32;
  bool needsGroups = false;
  bool needsTree = false;
  std::vector<BufferSpec> buffers;
  std::vector<ParamSpec> params;
  std::vector<ArgSpec> args;
  std::vector<KernelSpec> kernels;

  /// Parses and validates JSON text. `origin` names the file in errors.
  /// Throws BundleError with "ORIGIN: FIELD: what is wrong".
  static Manifest parse(const std::string &text,
                        const std::string &origin = "manifest.json");

  /// Reads and parses a file.
  static Manifest load(const std::string &path);

  /// The argument list docs/bundle.md prescribes for these buffers and
  /// parameters; `parse` checks the manifest's "args" against it.
  std::vector<ArgSpec> expectedArgs() const;

  /// Index of a buffer / parameter by name, or -1.
  int findBuffer(const std::string &name) const;
  int findParam(const std::string &name) const;

  /// Names of the buffers with a role, in manifest order.
  std::vector<std::string> bufferNames(BufferRole role) const;
};

} // namespace cac::rt

#endif // CAC_RUNTIME_KERNELS_MANIFEST_H
