//===- cac-tokenize.cpp - A model folder's tokenizer on the command line --===//
//
//   cac-tokenize FOLDER [--add-special-tokens]
//       one line of text in, one JSON list of ids out
//   cac-tokenize FOLDER --decode [--skip-special-tokens]
//       one JSON list of ids in, one line of text out
//   cac-tokenize FOLDER --chat [--chat-text] [--no-generation-prompt]
//                [--var NAME=JSON]...
//       one JSON list of messages in, its prompt through the folder's chat
//       template out: the ids (as cac-run tokenizes a chat prompt), or with
//       --chat-text the text as a JSON string
//
// FOLDER is a Hugging Face model folder (tokenizer.json, with BOS/EOS from
// tokenizer_config.json), loaded as cac-run loads it, so users can check what
// their prompts become. The newline that ends an input line is not part of
// the text. Errors name the folder, the file or the input line, and exit 1.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/ChatTemplate.h"
#include "cac/Runtime/Model/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <iostream>
#include <optional>
#include <string>

namespace {

const char *const kUsage =
    "usage: cac-tokenize FOLDER [--add-special-tokens]\n"
    "       cac-tokenize FOLDER --decode [--skip-special-tokens]\n"
    "       cac-tokenize FOLDER --chat [--chat-text] [--no-generation-prompt]\n"
    "                    [--var NAME=JSON]...\n"
    "Encodes each line of standard input with the tokenizer of the model\n"
    "folder FOLDER and prints its ids as a JSON list, one line each; with\n"
    "--decode, reads JSON lists of ids and prints their text. With --chat,\n"
    "each line is a JSON list of messages ([{\"role\": \"user\", \"content\":\n"
    "\"...\"}]) rendered by the folder's chat template "
    "(tokenizer_config.json)\n"
    "with add_generation_prompt (unless --no-generation-prompt) and the\n"
    "--var variables (e.g. --var enable_thinking=false); it prints the ids\n"
    "of the prompt, or with --chat-text its text as a JSON string.\n";

struct Options {
  std::string folder;
  bool decode = false, addSpecial = false, skipSpecial = false;
  bool chat = false, chatText = false, generationPrompt = true;
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
};

/// Parses one --var NAME=JSON; a value that is not JSON is a string.
bool parseVar(const std::string &spec, Options &o) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0)
    return false;
  std::string value = spec.substr(eq + 1);
  try {
    o.vars[spec.substr(0, eq)] = nlohmann::ordered_json::parse(value);
  } catch (const nlohmann::json::exception &) {
    o.vars[spec.substr(0, eq)] = value;
  }
  return true;
}

/// Parses argv; prints the usage and returns false on a bad command line.
bool parseArgs(int argc, char **argv, Options &o, int &exitCode) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      exitCode = 0;
      return false;
    }
    if (a == "--decode") {
      o.decode = true;
    } else if (a == "--add-special-tokens") {
      o.addSpecial = true;
    } else if (a == "--skip-special-tokens") {
      o.skipSpecial = true;
    } else if (a == "--chat") {
      o.chat = true;
    } else if (a == "--chat-text") {
      o.chat = o.chatText = true;
    } else if (a == "--no-generation-prompt") {
      o.generationPrompt = false;
    } else if (a == "--var" && i + 1 < argc && parseVar(argv[i + 1], o)) {
      ++i;
    } else if (a.rfind("-", 0) == 0 || !o.folder.empty()) {
      std::cerr << "cac-tokenize: unexpected argument '" << a << "'\n"
                << kUsage;
      exitCode = 2;
      return false;
    } else {
      o.folder = a;
    }
  }
  const char *wrong = o.decode && o.addSpecial     ? "--add-special-tokens"
                      : !o.decode && o.skipSpecial ? "--skip-special-tokens"
                                                   : nullptr;
  bool chatOnly = !o.generationPrompt || !o.vars.empty();
  if (o.folder.empty() || wrong || (o.chat && (o.decode || o.addSpecial)) ||
      (!o.chat && chatOnly)) {
    if (wrong)
      std::cerr << "cac-tokenize: " << wrong << " does not apply "
                << (o.decode ? "to --decode" : "without --decode") << "\n";
    else if (o.chat && (o.decode || o.addSpecial))
      std::cerr << "cac-tokenize: --chat excludes "
                << (o.decode ? "--decode" : "--add-special-tokens")
                << " (a chat template writes its own special tokens)\n";
    else if (!o.chat && chatOnly)
      std::cerr << "cac-tokenize: --no-generation-prompt and --var apply to "
                   "--chat\n";
    std::cerr << kUsage;
    exitCode = 2;
    return false;
  }
  return true;
}

/// The ids of one --decode input line; throws naming what is wrong.
std::vector<int64_t> parseIds(const std::string &line) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception &) {
    throw std::runtime_error("not JSON (want a list of ids such as [1, 2])");
  }
  if (!j.is_array())
    throw std::runtime_error("not a JSON list (want a list of ids such as "
                             "[1, 2])");
  std::vector<int64_t> ids;
  for (size_t k = 0; k < j.size(); ++k) {
    if (!j[k].is_number_integer())
      throw std::runtime_error("element " + std::to_string(k) + " (" +
                               j[k].dump() + ") is not an integer id");
    ids.push_back(j[k].get<int64_t>());
  }
  return ids;
}

/// The prompt of one --chat input line: its ids or, with --chat-text, its
/// text as a JSON string.
std::string chatLine(const std::string &line, const Options &o,
                     const cac::rt::ChatTemplate &tmpl,
                     const cac::rt::Tokenizer *tok) {
  nlohmann::ordered_json messages;
  try {
    messages = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::json::exception &) {
    throw std::runtime_error("not JSON (want a list of messages such as "
                             "[{\"role\": \"user\", \"content\": \"Hi\"}])");
  }
  if (!messages.is_array())
    throw std::runtime_error("not a JSON list of messages");
  std::string text = tmpl.render(messages, o.generationPrompt, o.vars);
  if (o.chatText)
    return nlohmann::ordered_json(text).dump(
        -1, ' ', false, nlohmann::json::error_handler_t::replace);
  nlohmann::json ids = tok->encode(text, false);
  return ids.dump();
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  int exitCode = 0;
  if (!parseArgs(argc, argv, o, exitCode))
    return exitCode;
  std::unique_ptr<cac::rt::Tokenizer> tok;
  std::optional<cac::rt::ChatTemplate> tmpl;
  try {
    // --chat-text needs only the template: a folder may hold just
    // tokenizer_config.json to check one.
    if (!o.chatText)
      tok = cac::rt::loadTokenizer(o.folder);
    if (o.chat)
      tmpl.emplace(cac::rt::loadChatTemplate(o.folder));
  } catch (const std::exception &e) {
    std::cerr << "cac-tokenize: " << e.what() << "\n";
    return 1;
  }
  std::ios::sync_with_stdio(false);
  std::string line;
  for (size_t lineNo = 1; std::getline(std::cin, line); ++lineNo) {
    try {
      if (o.chat) {
        std::cout << chatLine(line, o, *tmpl, tok.get()) << '\n';
      } else if (o.decode) {
        std::cout << tok->decode(parseIds(line), o.skipSpecial) << '\n';
      } else {
        nlohmann::json ids = tok->encode(line, o.addSpecial);
        std::cout << ids.dump() << '\n';
      }
    } catch (const std::exception &e) {
      std::cout.flush();
      std::cerr << "cac-tokenize: <stdin>:" << lineNo << ": " << e.what()
                << "\n";
      return 1;
    }
  }
  return 0;
}
