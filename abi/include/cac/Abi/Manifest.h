//===- Manifest.h - What a kernel bundle's manifest.json says ---*- C++ -*-===//
//
// A kernel bundle's manifest says which kernels there are, the one argument
// list they all take, the buffers and the parameters (docs/bundle.md). The
// lowering fills this struct and writes it (ManifestWriter.h); the runtime
// and `cac eval` read it back (ManifestReader.h). Nothing else about a
// bundle's interface is kept anywhere else.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_ABI_MANIFEST_H
#define CAC_ABI_MANIFEST_H

#include "cac/Abi/Domain.h"
#include "cac/Abi/KernelArgs.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cac::abi {

/// The format string of the manifests this header writes and reads.
inline constexpr const char *kBundleFormat = "cac-bundle-1";

/// One buffer of the bundle.
struct BufferSpec {
  std::string name;
  BufferRole role = BufferRole::Input;
  Domain domain = Domain::Token;
  DType dtype = DType::F32;
  /// Only for seg buffers ("layout" in the manifest).
  SegLayout layout = SegLayout::BySegment;
};

/// One parameter; `defaultValue` is empty for a required parameter.
struct ParamSpec {
  std::string name;
  std::optional<double> defaultValue;
};

/// Where the value of an argument comes from.
enum class ArgSource {
  Fixed,  ///< `index` is a FixedArg
  Buffer, ///< `index` is the position in Manifest::buffers
  Param,  ///< `index` is the position in Manifest::params
};

/// One argument of the shared kernel argument list.
struct ArgSpec {
  std::string name;
  ArgKind kind = ArgKind::I64;
  DType dtype = DType::I64; ///< pointee type for Ptr, value type otherwise
  ArgSource source = ArgSource::Fixed;
  int index = 0;
};

/// One kernel; they run in manifest order.
struct KernelSpec {
  std::string name;
  Grid grid = Grid::Seq;
  int64_t block = 128; ///< CUDA threads per block
  /// "unit": "block": on the GPU one block of `block` threads per unit
  /// (grid = units); otherwise ("thread", the default) one thread per unit
  /// (grid = ceil(units / block)). A bundle's CPU code always runs units one
  /// after the other.
  bool perBlock = false;
  /// A block kernel's tokens per thread in a tile and their layout ("auto",
  /// "blocked", "striped"): information, nothing to pass.
  std::optional<int64_t> items;
  std::optional<std::string> layout;
  /// A split block kernel ("split": N, docs/pipeline.md): on the GPU each of
  /// its units is cut into splitParts(N, num_seqs) blocks, so that a launch
  /// has about N blocks (launchUnits). host.so runs one unit per sequence.
  std::optional<int64_t> split;
  /// "carries": true (with "split"): the NAME_carries kernel that a split
  /// kernel with a scan launches first. Only a part that a later part of
  /// its sequence follows has carries to compose, so where every sequence
  /// has one part it has nothing to do and is not launched (launchUnits).
  bool carries = false;
};

/// The most blocks a split kernel gives one sequence.
inline constexpr int64_t kMaxSplitParts = 64;

/// Blocks per sequence of a kernel with "split": `split` over `numSeqs`
/// sequences: min(ceil(split / max(numSeqs, 1)), kMaxSplitParts), so 1 when
/// numSeqs >= split. The kernels compute the same number from their `num_seqs`
/// argument (SeqSplit.cpp), so this is the one rule of the launch.
inline int64_t splitParts(int64_t split, int64_t numSeqs) {
  const int64_t n = numSeqs > 0 ? numSeqs : 1;
  const int64_t parts = (split + n - 1) / n;
  return parts < kMaxSplitParts ? parts : kMaxSplitParts;
}

/// The units a GPU (or gpu-sim) launch of `k` covers when its grid has
/// `units` units and the batch `numSeqs` sequences: `units` times the parts
/// of a split block kernel, else `units`; 0, no launch, for a carries
/// kernel where each sequence is one part.
inline int64_t launchUnits(const KernelSpec &k, int64_t units,
                           int64_t numSeqs) {
  if (!k.perBlock || !k.split)
    return units;
  const int64_t parts = splitParts(*k.split, numSeqs);
  if (k.carries && parts == 1)
    return 0;
  return units * parts;
}

/// An objective's interface: the host scales `loss` and the gradient output
/// (docs/language.md).
struct ObjectiveSpec {
  std::string wrt;
  std::string gradient; ///< the output holding d loss / d wrt ("grad_WRT")
  Domain lossDomain = Domain::Seq;
};

/// The manifest.json of a bundle.
struct Manifest {
  std::string format = kBundleFormat;
  std::string estimator;
  std::string source; ///< the .cac file; empty when unknown (not written)
  DType dtype = DType::F32;
  bool needsGroups = false;
  bool needsTree = false;
  std::optional<ObjectiveSpec> objective;
  std::vector<BufferSpec> buffers; ///< inputs, then outputs, then scratch
  std::vector<ParamSpec> params;
  std::vector<ArgSpec> args;
  std::vector<KernelSpec> kernels;

  /// The argument list docs/bundle.md prescribes for these buffers and
  /// parameters: the fixed head, a pointer per buffer, a scalar of `dtype`
  /// per parameter. The reader checks "args" against it.
  std::vector<ArgSpec> expectedArgs() const {
    std::vector<ArgSpec> out;
    for (unsigned i = 0; i < kNumFixed; ++i)
      out.push_back({kFixedArgs[i].name, kFixedArgs[i].kind,
                     fixedArgDType(FixedArg(i)), ArgSource::Fixed, int(i)});
    for (size_t i = 0; i < buffers.size(); ++i)
      out.push_back({buffers[i].name, ArgKind::Ptr, buffers[i].dtype,
                     ArgSource::Buffer, int(i)});
    for (size_t i = 0; i < params.size(); ++i)
      out.push_back(
          {params[i].name, ArgKind::Scalar, dtype, ArgSource::Param, int(i)});
    return out;
  }

  /// Index of a buffer / parameter by name, or -1.
  int findBuffer(const std::string &name) const {
    for (size_t i = 0; i < buffers.size(); ++i)
      if (buffers[i].name == name)
        return int(i);
    return -1;
  }
  int findParam(const std::string &name) const {
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].name == name)
        return int(i);
    return -1;
  }

  /// Names of the buffers with a role, in manifest order.
  std::vector<std::string> bufferNames(BufferRole role) const {
    std::vector<std::string> out;
    for (const BufferSpec &b : buffers)
      if (b.role == role)
        out.push_back(b.name);
    return out;
  }
};

} // namespace cac::abi

#endif // CAC_ABI_MANIFEST_H
