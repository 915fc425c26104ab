//===- Padded.h - Right-padded rows to packed tokens, on the CPU ----------===//
//
// The _cac functions mask_rows, pack_rows and unpack_rows (Padded.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_PYTHON_PADDED_H
#define CAC_PYTHON_PADDED_H

#include <pybind11/pybind11.h>

/// Adds mask_rows, pack_rows and unpack_rows to the module.
void bindPadded(pybind11::module &m);

#endif // CAC_PYTHON_PADDED_H
