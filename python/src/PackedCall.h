//===- PackedCall.h - The packed CPU call in one step ---------------------===//
//
// The _cac function run_packed (PackedCall.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_PYTHON_PACKEDCALL_H
#define CAC_PYTHON_PACKEDCALL_H

#include <pybind11/pybind11.h>

/// Adds run_packed to the module.
void bindPackedCall(pybind11::module &m);

#endif // CAC_PYTHON_PACKEDCALL_H
