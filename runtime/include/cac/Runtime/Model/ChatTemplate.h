//===- ChatTemplate.h - Chat templates of Hugging Face tokenizers -*- C++
//-*-===//
//
// A renderer for the Jinja2 subset that chat templates use (Qwen2.5's and
// Qwen3's `<|im_start|>` format, Llama 3's `<|start_header_id|>` format):
// a message list in, the prompt text out, byte for byte as Hugging Face's
// `apply_chat_template` renders it. docs/runtime.md, "Chat templates", lists
// the subset. Anything outside it is an error naming the template's origin
// and line:col, when the template is parsed (statements, filters, tests,
// functions and methods the subset lacks) or, for what only rendering shows
// (an undefined value used, a type error, raise_exception), when it is
// rendered. No LibTorch.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_CHATTEMPLATE_H
#define CAC_RUNTIME_MODEL_CHATTEMPLATE_H

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace cac::rt {

/// A parsed chat template.
class ChatTemplate {
public:
  /// Parses \p source. \p origin names it in errors ("FOLDER/
  /// tokenizer_config.json: field 'chat_template'"). Throws
  /// std::runtime_error "ORIGIN: LINE:COL: what is wrong" (with the line and
  /// a caret) for syntax errors and constructs outside the subset.
  ChatTemplate(std::string_view source, std::string origin);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate &&) noexcept;
  ChatTemplate &operator=(ChatTemplate &&) noexcept;

  /// Renders \p messages (a JSON list of objects such as {"role": "user",
  /// "content": "..."}) with `add_generation_prompt` and the template's
  /// variables, then \p variables (a JSON object, e.g. {"enable_thinking":
  /// false}; these override). Throws std::runtime_error "ORIGIN: LINE:COL:
  /// what" when rendering fails (raise_exception included).
  std::string render(const nlohmann::ordered_json &messages,
                     bool addGenerationPrompt,
                     const nlohmann::ordered_json &variables = {}) const;

  /// Sets a variable every rendering gets (loadChatTemplate sets the special
  /// tokens: bos_token, eos_token, ...).
  void setVariable(const std::string &name, nlohmann::ordered_json value);

  /// Where the template comes from, as errors name it.
  const std::string &origin() const { return origin_; }

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string origin_;
  nlohmann::ordered_json variables_ = nlohmann::ordered_json::object();
};

/// Loads the chat template of a Hugging Face model folder: the file
/// `chat_template.jinja` when the folder has one, else the `chat_template`
/// field of `tokenizer_config.json` (a string, or a list of {"name",
/// "template"} objects, of which the one named "default"). The special
/// tokens of tokenizer_config.json (bos_token, eos_token, unk_token,
/// pad_token, sep_token, cls_token, mask_token, additional_special_tokens)
/// become variables as Hugging Face passes them. Throws std::runtime_error
/// naming the file and field for a missing or malformed template.
ChatTemplate loadChatTemplate(const std::filesystem::path &folder);

/// The messages of a task's prompt: a system message when \p system is not
/// empty, then the user's \p prompt.
nlohmann::ordered_json promptMessages(const std::string &system,
                                      const std::string &prompt);

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_CHATTEMPLATE_H
