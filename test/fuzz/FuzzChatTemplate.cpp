//===- FuzzChatTemplate.cpp - libFuzzer target over chat templates --------===//
//
// cac-fuzz-chattemplate: feeds arbitrary bytes, as a chat template, to the
// renderer of tokenizer_config.json's `chat_template`: ChatTemplate's parser,
// then render() of a conversation with every role, tool calls and a
// non-ASCII message, with add_generation_prompt true and false. Each must
// return text or throw std::runtime_error "ORIGIN: LINE:COL: what is wrong"
// (what cac-run and cac-tokenize print); any other exception, a crash, a
// sanitizer report or a hang is a bug.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/ChatTemplate.h"

#include <cstdint>
#include <stdexcept>
#include <string>

using namespace cac::rt;

namespace {

const nlohmann::ordered_json &conversation() {
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "Be exact.\n"},
          {"role": "user", "content": "12*7? caf\u00e9 \ud83d\ude42"},
          {"role": "assistant", "content": "<think>\nx\n</think>\n\ncalling",
           "tool_calls": [{"type": "function", "function": {"name": "calc",
             "arguments": {"expr": "12*7", "n": 2.5, "ok": true}}}]},
          {"role": "tool", "content": "84"},
          {"role": "assistant", "content": "84", "reasoning_content": null}])");
  return messages;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string source(reinterpret_cast<const char *>(data), size);
  try {
    ChatTemplate t(source, "fuzz");
    t.setVariable("bos_token", "<s>");
    for (bool generationPrompt : {true, false}) {
      try {
        t.render(conversation(), generationPrompt,
                 {{"enable_thinking", false}});
      } catch (const std::runtime_error &) {
        // A render error: the template's position and what failed.
      }
    }
  } catch (const std::runtime_error &) {
    // A parse error: outside the subset, or not a template.
  }
  return 0;
}
