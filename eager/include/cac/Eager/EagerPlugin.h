//===- EagerPlugin.h - The eager backend's plugin interface -----*- C++ -*-===//
//
// The eager backend is also built as a module (libcac_eager_plugin.so) that
// `cac` loads with dlopen only when it runs the eager backend, so that
// `cac compile` never pays for LibTorch's start-up. The module exports one C
// function, kEagerPluginEntry, returning cac::runEager.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_EAGER_EAGERPLUGIN_H
#define CAC_EAGER_EAGERPLUGIN_H

#include "cac/Eager/Eager.h"

namespace cac {

/// The signature of cac::runEager.
using RunEagerFn = llvm::Expected<std::vector<OutputArray>> (*)(
    mlir::ModuleOp module, const Batch &batch, bool autograd);

/// The name of the plugin's entry point: `RunEagerFn cacEagerPluginEntry()`.
inline constexpr const char *kEagerPluginEntry = "cacEagerPluginEntry";

} // namespace cac

#endif // CAC_EAGER_EAGERPLUGIN_H
