//===- Tokenizer.h - Character and byte-level BPE tokenizers ----*- C++ -*-===//
//
// Two tokenizers behind one interface: CharTokenizer, a fixed vocabulary of
// printable ASCII for the built-in arithmetic task, and BpeTokenizer, which
// reads a Hugging Face `tokenizer.json` of the byte-level BPE kind (GPT-2,
// Llama 3, Qwen2). Neither depends on LibTorch.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_TOKENIZER_H
#define CAC_RUNTIME_MODEL_TOKENIZER_H

#include "cac/Runtime/Model/BpeMerges.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cac::rt {

/// Maps text to token ids and back.
class Tokenizer {
public:
  virtual ~Tokenizer();

  /// Token ids of \p text. With \p addSpecialTokens the tokenizer adds what
  /// its model expects around a sequence (BOS for CharTokenizer; the
  /// TemplateProcessing post-processor of a tokenizer.json).
  virtual std::vector<int64_t> encode(std::string_view text,
                                      bool addSpecialTokens = false) const = 0;
  /// Text of \p ids; special tokens are dropped with \p skipSpecialTokens.
  /// Throws std::runtime_error for ids outside the vocabulary.
  virtual std::string decode(const std::vector<int64_t> &ids,
                             bool skipSpecialTokens = true) const = 0;
  /// One more than the largest id.
  virtual int64_t vocabSize() const = 0;
  /// The id of a token string (a vocabulary entry, or an added token).
  virtual std::optional<int64_t> tokenToId(std::string_view token) const = 0;
  /// The token string of an id (in the vocabulary's own spelling).
  virtual std::string idToToken(int64_t id) const = 0;
  /// Whether \p id is a special token (dropped by decode when asked).
  virtual bool isSpecial(int64_t id) const = 0;

  std::optional<int64_t> bosId() const { return bos_; }
  std::optional<int64_t> eosId() const { return eos_; }
  std::optional<int64_t> padId() const { return pad_; }
  void setBosId(std::optional<int64_t> id) { bos_ = id; }
  void setEosId(std::optional<int64_t> id) { eos_ = id; }
  void setPadId(std::optional<int64_t> id) { pad_ = id; }

protected:
  std::optional<int64_t> bos_, eos_, pad_;
};

/// One token per character: `<pad>`=0, `<bos>`=1, `<eos>`=2, `\n`=3, then the
/// 95 printable ASCII characters ' '..'~' (ids 4..98). Digits, operators,
/// parentheses, space and letters are all there, so the arithmetic task and
/// simple natural-language prompts both encode. Other bytes are rejected.
class CharTokenizer : public Tokenizer {
public:
  CharTokenizer();

  static constexpr int64_t kPad = 0, kBos = 1, kEos = 2;

  /// Throws std::runtime_error naming the byte and offset for characters
  /// outside the vocabulary.
  std::vector<int64_t> encode(std::string_view text,
                              bool addSpecialTokens = false) const override;
  std::string decode(const std::vector<int64_t> &ids,
                     bool skipSpecialTokens = true) const override;
  int64_t vocabSize() const override { return 99; }
  std::optional<int64_t> tokenToId(std::string_view token) const override;
  std::string idToToken(int64_t id) const override;
  bool isSpecial(int64_t id) const override { return id >= 0 && id < 3; }
};

/// A token added on top of the BPE vocabulary (`added_tokens` of
/// tokenizer.json); matched verbatim in the input before pre-tokenization.
struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool special = false;
};

/// Hugging Face byte-level BPE (tokenizer.json with model.type "BPE" and a
/// ByteLevel pre-tokenizer/decoder).
///
/// Supported: the GPT-2 byte-to-unicode map; ranked merges (both the
/// "a b" and the ["a", "b"] spellings); `ignore_merges`; added and special
/// tokens; the ByteLevel pre-tokenizer (with `add_prefix_space` and its GPT-2
/// regex) and a Sequence of Split + ByteLevel whose pattern is the Llama 3 or
/// Qwen2 regex; a TemplateProcessing post-processor for single sequences.
///
/// The split regexes are implemented by hand, without a regex engine, over
/// \p{L}, \p{N} and \s tables generated from the Unicode database
/// (UnicodeTables.inc); on random text over all of Unicode they split exactly
/// as Python's `regex` module does with the original patterns. The NFC
/// normalizer is real NFC (Unicode.h). Pre-tokenization is linear in the
/// text and the merges of a piece of n bytes take O(n log n) (BpeMerges.h).
/// Added-token flags (lstrip, rstrip, single_word, normalized) are ignored:
/// added tokens are matched in the text before normalization.
class BpeTokenizer : public Tokenizer {
public:
  /// Parses a tokenizer.json; \p source names it in error messages.
  static std::unique_ptr<BpeTokenizer> fromJson(const nlohmann::json &j,
                                                const std::string &source);
  /// Reads and parses a tokenizer.json file.
  static std::unique_ptr<BpeTokenizer>
  fromFile(const std::filesystem::path &path);

  std::vector<int64_t> encode(std::string_view text,
                              bool addSpecialTokens = false) const override;
  std::string decode(const std::vector<int64_t> &ids,
                     bool skipSpecialTokens = true) const override;
  int64_t vocabSize() const override { return vocabSize_; }
  std::optional<int64_t> tokenToId(std::string_view token) const override;
  std::string idToToken(int64_t id) const override;
  bool isSpecial(int64_t id) const override;

  /// The added tokens, by id.
  const std::map<int64_t, AddedToken> &addedTokens() const { return added_; }

  /// How the text between added tokens is split before BPE.
  enum class SplitStyle {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
    /// \s+(?!\S)|\s+`
    Gpt2,
    /// `(?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,K}|
    /// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+` (Llama 3: K=3,
    /// Qwen2: K=1)
    Llama3,
    /// No split: the whole text is one piece.
    None,
  };

  /// Splits \p text as the pre-tokenizer does (before the byte mapping).
  std::vector<std::string_view> preTokenize(std::string_view text) const;

private:
  BpeTokenizer() = default;
  static std::unique_ptr<BpeTokenizer> parse(const nlohmann::json &j,
                                             const std::string &source);
  void bpe(std::string_view piece, std::vector<int64_t> &out) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> idToToken_;
  /// Merges by (left id << 32 | right id).
  std::unordered_map<uint64_t, BpeMerge> merges_;
  /// The vocabulary id of each byte's symbol, or -1.
  std::array<int64_t, 256> byteIds_{};
  /// Whether some added token starts with the byte.
  std::array<bool, 256> addedFirstByte_{};
  bool nfc_ = false;
  std::map<int64_t, AddedToken> added_;
  std::unordered_map<std::string, int64_t> addedByContent_;
  /// Added-token contents sorted longest first, for matching.
  std::vector<const AddedToken *> addedByLength_;
  std::optional<int64_t> unkId_;
  bool ignoreMerges_ = false;
  bool addPrefixSpace_ = false;
  /// Pre-tokenizer stages applied one after the other; the int is the digit
  /// run limit of Llama3 style (0: unlimited).
  std::vector<std::pair<SplitStyle, int>> splits_;
  std::vector<int64_t> prefixIds_, suffixIds_;
  /// Set when the post-processor is of a kind we do not implement; encode
  /// with addSpecialTokens then throws naming it.
  std::string unsupportedPostProcessor_;
  int64_t vocabSize_ = 0;
  std::string source_;
  mutable std::mutex cacheMutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

/// Loads the tokenizer of a Hugging Face model folder: `tokenizer.json`, with
/// BOS/EOS/PAD from `tokenizer_config.json` (bos_token, eos_token, pad_token)
/// or, failing that, the ids in `config.json`.
std::unique_ptr<Tokenizer> loadTokenizer(const std::filesystem::path &folder);

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_TOKENIZER_H
