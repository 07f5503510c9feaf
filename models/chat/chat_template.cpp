#include "models/chat/chat_template.h"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/chat/evaluator.h"
#include "models/chat/parser.h"

namespace strata::models::chat {
namespace {

using Json = nlohmann::json;

constexpr const char* kNoTemplateHint =
    "the model has no chat template: pass one with --chat-template FILE (a Jinja file, e.g. the "
    "chat_template of the model's instruct variant)";

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw Error("the path is a folder, not a Jinja file", path, "pass the template file itself");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int e = errno;
    throw Error(fmt::format("cannot open the chat template: {}", errno_text(e)), path,
                "check the path and its permissions");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error("reading the chat template failed", path, "check the disk");
  return std::move(ss).str();
}

// bos_token / eos_token: a string, {"content": "..."} (an AddedToken), or absent / null ("").
std::string config_token(const Json& cfg, const char* key, const std::string& where) {
  const auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  throw Error(fmt::format("\"{}\" is neither a string nor {{\"content\": string}}", key), where,
              "fix tokenizer_config.json, or pass the template with --chat-template FILE");
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string bos, std::string eos, std::string source_name)
    : source_(std::move(source)),
      bos_(std::move(bos)),
      eos_(std::move(eos)),
      program_(std::make_unique<Program>(parse_template(source_, source_name))) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

ChatTemplate ChatTemplate::from_source(std::string source, std::string bos, std::string eos, std::string source_name) {
  return ChatTemplate(std::move(source), std::move(bos), std::move(eos), std::move(source_name));
}

ChatTemplate ChatTemplate::from_file(const std::string& path, std::string bos, std::string eos) {
  return ChatTemplate(read_file(path), std::move(bos), std::move(eos), path);
}

ModelChatConfig read_model_chat_config(const std::string& dir) {
  ModelChatConfig out;
  const std::string path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  const std::string jinja_path = (std::filesystem::path(dir) / "chat_template.jinja").string();
  std::error_code ec;
  Json cfg = Json::object();
  if (std::filesystem::exists(path, ec)) {
    try {
      cfg = Json::parse(read_file(path));
    } catch (const Json::exception& e) {
      throw Error(fmt::format("not valid JSON: {}", e.what()), path, "download the model's tokenizer_config.json again");
    }
    if (!cfg.is_object()) throw Error("not a JSON object", path, "download the model's tokenizer_config.json again");
  }
  out.bos = config_token(cfg, "bos_token", path);
  out.eos = config_token(cfg, "eos_token", path);
  // transformers (4.50+) saves the template as chat_template.jinja beside tokenizer_config.json,
  // and when that file is there it wins over the config's "chat_template" (as in
  // PreTrainedTokenizerBase.from_pretrained).
  if (std::filesystem::exists(jinja_path, ec)) {
    out.source = read_file(jinja_path);
    out.source_name = jinja_path;
    return out;
  }
  const std::string where = path + ", key \"chat_template\"";
  const auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) return out;
  if (it->is_string()) {
    out.source = it->get<std::string>();
  } else if (it->is_array()) {
    // Several named templates (e.g. "default", "tool_use", "rag"): a plain chat uses "default".
    for (const auto& entry : *it) {
      if (!entry.is_object()) continue;
      const auto name = entry.find("name");
      const auto text = entry.find("template");
      if (name != entry.end() && name->is_string() && name->get<std::string>() == "default" && text != entry.end() &&
          text->is_string()) {
        out.source = text->get<std::string>();
        break;
      }
    }
    if (!out.source) throw Error("chat_template is a list without a {\"name\": \"default\"} template", where, kNoTemplateHint);
  } else {
    throw Error("chat_template is neither a string nor a list of {name, template}", where, kNoTemplateHint);
  }
  out.source_name = where;
  return out;
}

ChatTemplate ChatTemplate::from_model_dir(const std::string& dir) {
  ModelChatConfig c = read_model_chat_config(dir);
  if (!c.source) {
    throw Error("the model folder has no chat template (neither chat_template.jinja nor a chat_template in "
                "tokenizer_config.json)", dir, kNoTemplateHint);
  }
  return ChatTemplate(std::move(*c.source), std::move(c.bos), std::move(c.eos), c.source_name);
}

std::string ChatTemplate::render(const std::vector<Message>& messages, const RenderOptions& options) const {
  Array list;
  list.reserve(messages.size());
  for (const auto& m : messages) {
    list.push_back(Value::object({{"role", Value::string(m.role)}, {"content", Value::string(m.content)}}));
  }
  Object globals = {
      {"messages", Value::array(std::move(list))},
      {"bos_token", Value::string(bos_)},
      {"eos_token", Value::string(eos_)},
      {"add_generation_prompt", Value::boolean(options.add_generation_prompt)},
      // transformers passes tools=None and documents=None when there are none: defined, none.
      {"tools", Value::none()},
      {"documents", Value::none()},
      {"raise_exception", Value::function("raise_exception")},
      {"strftime_now", Value::function("strftime_now")},
      {"namespace", Value::function("namespace")},
      {"range", Value::function("range")},
      {"dict", Value::function("dict")},
  };
  if (options.enable_thinking) globals.emplace_back("enable_thinking", Value::boolean(*options.enable_thinking));
  return render_program(*program_, globals, options.now);
}

}  // namespace strata::models::chat
