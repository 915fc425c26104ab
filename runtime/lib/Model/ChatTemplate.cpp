//===- ChatTemplate.cpp - Loading and rendering chat templates ------------===//

#include "cac/Runtime/Model/ChatTemplate.h"

#include "ChatTemplateSyntax.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace cac::rt {

struct ChatTemplate::Impl {
  std::string source;
  chat::Body body;
};

namespace {

/// "ORIGIN: LINE:COL: what", then the template's line and a caret.
std::runtime_error located(const std::string &origin, const std::string &source,
                           const chat::TemplateError &e) {
  std::string msg = origin + ": " + std::to_string(e.loc.line) + ":" +
                    std::to_string(e.loc.col) + ": " + e.what();
  std::istringstream in(source);
  std::string line;
  for (int k = 0; k < e.loc.line && std::getline(in, line); ++k) {
  }
  if (!line.empty() && line.back() == '\r')
    line.pop_back();
  // The caret goes under the column's character (columns count characters).
  std::string pad;
  int col = 1;
  for (size_t k = 0; k < line.size() && col < e.loc.col; ++k)
    if ((static_cast<unsigned char>(line[k]) & 0xC0) != 0x80) {
      pad += line[k] == '\t' ? '\t' : ' ';
      ++col;
    }
  if (line.size() <= 300)
    msg += "\n  " + line + "\n  " + pad + "^";
  return std::runtime_error(msg);
}

nlohmann::ordered_json readJson(const fs::path &file) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw std::runtime_error(file.string() +
                             ": cannot read it (a chat template needs the "
                             "folder's tokenizer_config.json)");
  try {
    return nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception &e) {
    throw std::runtime_error(file.string() + ": not valid JSON: " + e.what());
  }
}

/// The text of a special token entry: a string, or an AddedToken object's
/// "content"; nullopt for null.
std::optional<std::string> tokenText(const nlohmann::ordered_json &j) {
  if (j.is_string())
    return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string())
    return j["content"].get<std::string>();
  return std::nullopt;
}

} // namespace

ChatTemplate::ChatTemplate(std::string_view source, std::string origin)
    : impl_(std::make_unique<Impl>()), origin_(std::move(origin)) {
  impl_->source = std::string(source);
  try {
    impl_->body = chat::parseTemplate(impl_->source);
  } catch (const chat::TemplateError &e) {
    throw located(origin_, impl_->source, e);
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate &&) noexcept = default;
ChatTemplate &ChatTemplate::operator=(ChatTemplate &&) noexcept = default;

void ChatTemplate::setVariable(const std::string &name,
                               nlohmann::ordered_json value) {
  variables_[name] = std::move(value);
}

std::string
ChatTemplate::render(const nlohmann::ordered_json &messages,
                     bool addGenerationPrompt,
                     const nlohmann::ordered_json &variables) const {
  chat::Dict context;
  auto add = [&](const std::string &k, chat::Value v) {
    for (auto &[name, x] : context)
      if (name == k) {
        x = std::move(v);
        return;
      }
    context.emplace_back(k, std::move(v));
  };
  try {
    for (const nlohmann::ordered_json *vars : {&variables_, &variables}) {
      if (vars->is_null())
        continue;
      if (!vars->is_object())
        throw std::runtime_error("the template's variables must be a JSON "
                                 "object");
      for (const auto &[k, v] : vars->items())
        add(k, chat::fromJson(v));
    }
    if (!messages.is_array())
      throw std::runtime_error("the messages must be a JSON list");
    add("messages", chat::fromJson(messages));
    add("add_generation_prompt", chat::Value::boolean(addGenerationPrompt));
  } catch (const chat::ValueError &e) {
    throw std::runtime_error(origin_ + ": " + e.what());
  }
  try {
    return chat::renderTemplate(impl_->body, context);
  } catch (const chat::TemplateError &e) {
    throw located(origin_, impl_->source, e);
  }
}

ChatTemplate loadChatTemplate(const fs::path &folder) {
  fs::path configFile = folder / "tokenizer_config.json";
  fs::path jinjaFile = folder / "chat_template.jinja";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  std::error_code ec;
  bool haveJinja = fs::is_regular_file(jinjaFile, ec);
  if (!haveJinja || fs::exists(configFile, ec))
    config = readJson(configFile);
  if (!config.is_object())
    throw std::runtime_error(configFile.string() + ": not a JSON object");

  std::string source, origin;
  if (haveJinja) {
    std::ifstream in(jinjaFile, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in)
      throw std::runtime_error(jinjaFile.string() + ": cannot read it");
    source = ss.str();
    origin = jinjaFile.string();
  } else {
    origin = configFile.string() + ": field 'chat_template'";
    if (!config.contains("chat_template"))
      throw std::runtime_error(configFile.string() +
                               ": no field 'chat_template' (the tokenizer "
                               "has no chat template)");
    const auto &t = config["chat_template"];
    if (t.is_string()) {
      source = t.get<std::string>();
    } else if (t.is_array()) {
      for (const auto &named : t)
        if (named.is_object() && named.value("name", "") == "default" &&
            named.contains("template") && named["template"].is_string())
          source = named["template"].get<std::string>();
      if (source.empty())
        throw std::runtime_error(origin +
                                 ": a list of templates without one named "
                                 "\"default\"");
      origin += " (the template named \"default\")";
    } else {
      throw std::runtime_error(origin + ": must be a string (or a list of "
                                        "{\"name\", \"template\"} objects)");
    }
  }

  ChatTemplate tmpl(source, origin);
  for (const char *key : {"bos_token", "eos_token", "unk_token", "sep_token",
                          "pad_token", "cls_token", "mask_token"})
    if (config.contains(key))
      if (auto text = tokenText(config[key]))
        tmpl.setVariable(key, *text);
  if (config.contains("additional_special_tokens") &&
      config["additional_special_tokens"].is_array()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto &x : config["additional_special_tokens"])
      if (auto text = tokenText(x))
        list.push_back(*text);
    tmpl.setVariable("additional_special_tokens", list);
  }
  return tmpl;
}

nlohmann::ordered_json promptMessages(const std::string &system,
                                      const std::string &prompt) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system.empty())
    messages.push_back({{"role", "system"}, {"content", system}});
  messages.push_back({{"role", "user"}, {"content", prompt}});
  return messages;
}

} // namespace cac::rt
