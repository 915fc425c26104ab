//===- ShapeString.h - A tensor shape for error messages -------*- C++ -*-===//

#ifndef CAC_RUNTIME_MODEL_SHAPESTRING_H
#define CAC_RUNTIME_MODEL_SHAPESTRING_H

#include <c10/util/ArrayRef.h>

#include <string>

namespace cac::rt {

/// "[2, 3]": how the model library's errors write a shape.
inline std::string shapeString(c10::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_SHAPESTRING_H
