//===- PreTokenizer.h - The split regexes of byte-level BPE -----*- C++ -*-===//
//
// Private to the tokenizer: how BpeTokenizer cuts text into the pieces that
// BPE merges within.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_PRETOKENIZER_H
#define CAC_RUNTIME_MODEL_PRETOKENIZER_H

#include "cac/Runtime/Model/Tokenizer.h"

#include <string_view>
#include <vector>

namespace cac::rt {

/// Appends the pieces of \p piece under \p style (\p maxDigits: the digit
/// run limit of the Llama 3 style, 0 for none) to \p out; the pieces are
/// views into \p piece and cover it in order. Linear in its length.
void splitPiece(BpeTokenizer::SplitStyle style, int maxDigits,
                std::string_view piece, std::vector<std::string_view> &out);

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_PRETOKENIZER_H
