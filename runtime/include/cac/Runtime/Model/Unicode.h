//===- Unicode.h - UTF-8 coding and NFC normalization -----------*- C++ -*-===//
//
// What the tokenizers need of Unicode beyond character classes: decoding and
// encoding UTF-8 one code point at a time, and Normalization Form C (the
// `NFC` normalizer of a tokenizer.json), from tables generated out of the
// Unicode database (gen-nfc-tables.py writes NfcTables.inc).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_UNICODE_H
#define CAC_RUNTIME_MODEL_UNICODE_H

#include <cstdint>
#include <string>
#include <string_view>

namespace cac::rt {

/// Decodes the UTF-8 code point at byte \p i of \p s and advances \p i past
/// it. A byte that does not start a well-formed sequence decodes as U+FFFD
/// and advances \p i by one.
uint32_t decodeUtf8(std::string_view s, size_t &i);

/// Appends the UTF-8 encoding of \p cp to \p out.
void appendUtf8(std::string &out, uint32_t cp);

/// The Unicode version of the tables behind nfc().
const char *nfcUnicodeVersion();

/// \p text in Normalization Form C: canonical decomposition, canonical
/// ordering by combining class, then canonical composition (without the
/// composition exclusions; Hangul composed algorithmically). Bytes that are
/// not well-formed UTF-8 are kept as they are and act as a boundary that
/// nothing composes or reorders across. Linear in the length of \p text
/// (n log n within one run of combining marks); text that is already NFC
/// comes back unchanged byte for byte.
std::string nfc(std::string_view text);

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_UNICODE_H
