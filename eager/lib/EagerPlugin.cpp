//===- EagerPlugin.cpp - The eager backend as a loadable plugin -----------===//
//
// `cac` does not link LibTorch, whose loading and static initialisation
// would dominate a `cac compile` (docs/eager.md). `cac eval --backend eager`
// loads this module with dlopen and calls cac::runEager through the one C
// symbol below. The cac dialect lives in the shared libcac_compiler both
// sides link, so the module that cac built is the module this plugin walks.
//
//===----------------------------------------------------------------------===//

#include "cac/Eager/EagerPlugin.h"

extern "C" cac::RunEagerFn cacEagerPluginEntry() { return &cac::runEager; }
