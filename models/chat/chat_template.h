#pragma once
// Chat templates for `strata serve`: OpenAI-style messages rendered into the prompt text the
// model was trained on, with the model's own Jinja `chat_template` (tokenizer_config.json), as
// transformers' apply_chat_template renders it. No C++ Jinja library is packaged by Debian, so
// strata carries a small interpreter of the Jinja subset that chat templates use (lexer.h,
// parser.h, evaluator.h, builtins.h here; docs/chat_templates.md lists the subset).
//
// Semantics are Jinja2's as transformers configures it: trim_blocks and lstrip_blocks on,
// whitespace control with `-`, undefined values print as "" and test false, loop.*,
// namespace(), raise_exception(), strftime_now(). Tested byte for byte against transformers'
// renderer on the templates of Llama 2 / 3 / 3.1 / 3.2, Mistral v0.1 / v0.3, Mixtral, Qwen2 /
// 2.5 / 3 and ChatML (tests/models/chat_templates/goldens.json).
//
// The template is parsed once, when the ChatTemplate is made: a template using Jinja outside
// the subset is refused then (strata::Error naming the construct, line and column, and
// --chat-template FILE as the way out), never in the middle of serving.
//
// What the template sees: messages (a list of {role, content}), bos_token, eos_token,
// add_generation_prompt, enable_thinking (only when RenderOptions sets it: Qwen3 tests
// `enable_thinking is defined`), tools and documents (none: tool calls are out of scope for now,
// as are messages whose content is a list of parts), raise_exception, strftime_now, namespace,
// range, dict.
//
// bos: templates that need the bos token write it themselves ({{ bos_token }}), so the rendered
// prompt must be tokenized WITHOUT the tokenizer adding its own (Tokenizer::encode(text,
// add_special = false)); the special tokens written in the text become their ids.
//
// Thread safety: a ChatTemplate is immutable after construction; render() may run on several
// threads at once.
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace strata::models::chat {

struct Message {
  std::string role;     // "system", "user", "assistant" (others are passed through to the template)
  std::string content;  // text only
};

struct RenderOptions {
  // Append the assistant header so that the model writes the reply (transformers' default is
  // false; a server always wants true).
  bool add_generation_prompt = true;
  // Qwen3's switch; unset: not defined in the template (the template's default, thinking on).
  std::optional<bool> enable_thinking;
  // The time strftime_now() formats, in local time as Python's datetime.now(); unset: now.
  // Tests set it so that Llama 3.2's "Today Date" is fixed.
  std::optional<std::time_t> now;
};

// What a model folder says about chat: its template (chat_template.jinja when present, as
// transformers 4.50+ saves it and prefers it; else tokenizer_config.json's chat_template, a
// string or the "default" of a list of {name, template}) and the bos / eos token texts the
// template is given (tokenizer_config.json's).
struct ModelChatConfig {
  std::optional<std::string> source;  // none: the folder has no template
  std::string source_name;            // where it came from, for messages
  std::string bos, eos;
};

// Throws strata::Error for a tokenizer_config.json that is malformed or whose chat_template is
// neither form. A folder with neither file has no template and empty tokens.
ModelChatConfig read_model_chat_config(const std::string& dir);

struct Program;

class ChatTemplate {
 public:
  // The folder's template: chat_template.jinja when present (transformers 4.50+ saves it there,
  // and it wins), else tokenizer_config.json's chat_template (a string, or a list of {name,
  // template} of which "default" is used); bos_token / eos_token from tokenizer_config.json (a
  // string, or {"content": ...}; absent or null: ""). Throws strata::Error when the folder has
  // no template (hint: --chat-template FILE), when the JSON is malformed, or when the template
  // is outside the subset.
  static ChatTemplate from_model_dir(const std::string& dir);
  // --chat-template FILE: a Jinja file, with the bos and eos tokens to give it (from the
  // model's tokenizer_config.json where it has one, else ""). Throws strata::Error for an
  // unreadable file or a template outside the subset.
  static ChatTemplate from_file(const std::string& path, std::string bos, std::string eos);
  // `source_name` names the template in error messages.
  static ChatTemplate from_source(std::string source, std::string bos, std::string eos,
                                  std::string source_name = "chat template");

  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ChatTemplate(const ChatTemplate&) = delete;
  ChatTemplate& operator=(const ChatTemplate&) = delete;

  // The prompt text. Throws strata::Error when the template fails on these messages; for a
  // raise_exception() in the template (Mistral's "Conversation roles must alternate
  // user/assistant/user/assistant/..."), what_happened() is the template's message exactly, for
  // a server to answer 400 with. Any other failure (reading an attribute of an undefined value,
  // a runtime bound) names the template's line and column.
  std::string render(const std::vector<Message>& messages, const RenderOptions& options) const;

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }

 private:
  ChatTemplate(std::string source, std::string bos, std::string eos, std::string source_name);

  std::string source_;
  std::string bos_;
  std::string eos_;
  std::unique_ptr<Program> program_;  // owned, immutable
};

}  // namespace strata::models::chat
