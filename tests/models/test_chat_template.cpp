// Chat templates (models/chat): every case of chat_templates/goldens.json (rendered by
// transformers' own renderer, make_goldens.py) byte for byte, the template's own errors, and
// unit tests of the Jinja subset: whitespace control, loops, scoping, namespace(), filters,
// tests, methods, errors with line and column, constructs refused at construction, bounds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/chat/chat_template.h"
#include "models/tokenizer/tokenizer.h"

namespace {

using strata::Error;
using strata::models::chat::ChatTemplate;
using strata::models::chat::Message;
using strata::models::chat::RenderOptions;
using Json = nlohmann::json;

const std::string kDir = STRATA_CHAT_TEMPLATES;
const std::string kTokenizers = STRATA_TOKENIZER_FIXTURES;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<Message> to_messages(const Json& j) {
  std::vector<Message> out;
  for (const auto& m : j) out.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  return out;
}

// Renders a source with no messages' worth of setup: `{{ ... }}` snippets.
std::string render(const std::string& source, const std::vector<Message>& messages = {},
                   RenderOptions options = {}) {
  return ChatTemplate::from_source(source, "<s>", "</s>").render(messages, options);
}

// The Error a snippet's construction throws (fails the test when none is thrown).
Error parse_error(const std::string& source) {
  try {
    (void)ChatTemplate::from_source(source, "", "");
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error for: " << source;
  return Error("none");
}

Error render_error(const std::string& source, const std::vector<Message>& messages = {}) {
  const auto t = ChatTemplate::from_source(source, "", "");
  try {
    (void)t.render(messages, {});
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error for: " << source;
  return Error("none");
}

TEST(ChatTemplateGoldens, EveryCaseMatchesTransformers) {
  const Json goldens = Json::parse(read(kDir + "/goldens.json"));
  const auto now = goldens.at("now").get<std::time_t>();
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, t] : goldens.at("templates").items()) {
    templates.emplace(name, ChatTemplate::from_file(kDir + "/" + t.at("file").get<std::string>(),
                                                    t.at("bos_token").get<std::string>(),
                                                    t.at("eos_token").get<std::string>()));
  }
  int rendered = 0;
  int raised = 0;
  for (const auto& c : goldens.at("cases")) {
    const std::string name = c.at("template").get<std::string>();
    const std::string conv = c.at("conversation").get<std::string>();
    RenderOptions options;
    options.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    if (!c.at("enable_thinking").is_null()) options.enable_thinking = c.at("enable_thinking").get<bool>();
    options.now = now;
    const auto messages = to_messages(goldens.at("conversations").at(conv));
    const std::string label = name + " / " + conv + " / add_generation_prompt=" +
                              std::to_string(options.add_generation_prompt) + " / enable_thinking=" +
                              c.at("enable_thinking").dump();
    if (c.contains("error")) {
      try {
        (void)templates.at(name).render(messages, options);
        ADD_FAILURE() << label << ": rendered, transformers raised " << c.at("error");
      } catch (const Error& e) {
        EXPECT_EQ(e.what_happened(), c.at("error").get<std::string>()) << label;
      }
      ++raised;
    } else {
      std::string out;
      EXPECT_NO_THROW(out = templates.at(name).render(messages, options)) << label;
      EXPECT_EQ(out, c.at("output").get<std::string>()) << label;
      ++rendered;
    }
  }
  EXPECT_EQ(templates.size(), 11u);
  EXPECT_GT(rendered, 200);
  EXPECT_GT(raised, 20);
}

TEST(ChatTemplateGoldens, Qwen3ThinkingSwitch) {
  const auto t = ChatTemplate::from_file(kDir + "/qwen3.jinja", "", "<|im_end|>");
  const std::vector<Message> messages = {{"user", "hi"}};
  RenderOptions options;
  EXPECT_EQ(t.render(messages, options), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  options.enable_thinking = false;
  EXPECT_EQ(t.render(messages, options),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplateGoldens, Llama32DateComesFromStrftimeNow) {
  const auto t = ChatTemplate::from_file(kDir + "/llama3_2_3b_instruct.jinja", "<|begin_of_text|>", "<|eot_id|>");
  RenderOptions options;
  options.now = 1725364800;  // 2024-09-03 12:00 UTC
  const std::string out = t.render({{"user", "hi"}}, options);
  EXPECT_NE(out.find("Today Date: 03 Sep 2024\n"), std::string::npos) << out;
  EXPECT_EQ(out.rfind("<|begin_of_text|>", 0), 0u);
}

TEST(ChatTemplateGoldens, FromModelDirReadsTokenizerConfig) {
  const auto dir = std::filesystem::temp_directory_path() / ("strata_chat_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tokenizer_config.json").string();
  auto write = [&](const Json& j) { std::ofstream(path) << j.dump(); };

  write({{"chat_template", "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}"},
         {"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
         {"eos_token", "</s>"}});
  EXPECT_EQ(ChatTemplate::from_model_dir(dir.string()).render({{"user", "x"}}, {}), "<s>x</s>");

  // A list of named templates: "default" is the chat one; a null bos is "".
  write({{"chat_template", Json::array({{{"name", "tool_use"}, {"template", "T"}},
                                        {{"name", "default"}, {"template", "D{{ bos_token }}"}}})},
         {"bos_token", nullptr}});
  EXPECT_EQ(ChatTemplate::from_model_dir(dir.string()).render({}, {}), "D");

  // chat_template.jinja beside it wins over the config's chat_template (transformers 4.50+).
  std::ofstream(dir / "chat_template.jinja") << "J{{ eos_token }}";
  write({{"chat_template", "C"}, {"eos_token", "</s>"}});
  EXPECT_EQ(ChatTemplate::from_model_dir(dir.string()).render({}, {}), "J</s>");
  std::filesystem::remove(dir / "chat_template.jinja");

  // None at all: the error names --chat-template FILE.
  write({{"bos_token", "<s>"}});
  try {
    (void)ChatTemplate::from_model_dir(dir.string());
    ADD_FAILURE() << "no error without a chat_template";
  } catch (const Error& e) {
    EXPECT_NE(e.hint().find("--chat-template FILE"), std::string::npos) << e.what();
  }
  // Newer transformers save the template beside it as chat_template.jinja.
  std::ofstream((dir / "chat_template.jinja").string()) << "J{{ bos_token }}";
  EXPECT_EQ(ChatTemplate::from_model_dir(dir.string()).render({}, {}), "J<s>");
  const strata::models::chat::ModelChatConfig c = strata::models::chat::read_model_chat_config(dir.string());
  EXPECT_EQ(c.bos, "<s>");
  EXPECT_EQ(c.source_name, (dir / "chat_template.jinja").string());
  std::filesystem::remove_all(dir);
  EXPECT_THROW((void)ChatTemplate::from_model_dir(dir.string()), Error);
  EXPECT_FALSE(strata::models::chat::read_model_chat_config(dir.string()).source.has_value());
}

// The rendered prompt already holds bos and the turn markers as text: encoding it with
// add_special = false gives each special token's id once (the tokenizer fixtures of
// test_tokenizer: qwen2's has <|im_start|> = 1 and <|im_end|> = 2, llama2's <s> = 1).
TEST(ChatTemplateTokens, SpecialTokensOfTheRenderedPromptBecomeTheirIds) {
  using strata::models::Tokenizer;
  const std::vector<Message> messages = {{"system", "Be brief."}, {"user", "Hello"}, {"assistant", "Hi"}, {"user", "Bye"}};
  {
    const auto tok = Tokenizer::load(kTokenizers + "/qwen2");
    const auto t = ChatTemplate::from_file(kDir + "/qwen2_5_7b_instruct.jinja", "", "<|im_end|>");
    const auto ids = tok.encode(t.render(messages, {}), /*add_special=*/false);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), 1);  // <|im_start|>
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 5);  // four turns and the generation prompt
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 4);  // <|im_end|> closes the four turns
  }
  {
    const auto tok = Tokenizer::load(kTokenizers + "/llama2");
    const auto t = ChatTemplate::from_file(kDir + "/mistral_7b_instruct_v0_1.jinja", "<s>", "</s>");
    const std::string prompt = t.render({{"user", "Hello"}, {"assistant", "Hi"}, {"user", "Bye"}}, {});
    const auto ids = tok.encode(prompt, /*add_special=*/false);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), 1);                            // the template's own <s>
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 1);  // once: add_special = false adds none
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);  // </s> after the assistant turn
    // With add_special = true the tokenizer would put a second <s> in front.
    const auto doubled = tok.encode(prompt, /*add_special=*/true);
    EXPECT_EQ(std::count(doubled.begin(), doubled.end(), 1), 2);
  }
}

// --- whitespace control: trim_blocks, lstrip_blocks, '-' and '+' ---
TEST(ChatTemplateSyntax, WhitespaceControl) {
  // trim_blocks removes the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render("{% if true %}\n  a\n  {% endif %}\nb"), "  a\nb");
  // Not after }}: the newline stays.
  EXPECT_EQ(render("{{ 'x' }}\ny"), "x\ny");
  // '-' strips every whitespace character, newlines included, on its side.
  EXPECT_EQ(render("a  \n {{- 'x' -}} \n\n b"), "axb");
  EXPECT_EQ(render("a\n\n{%- if true -%}\n\n b {%- endif %}"), "ab");
  // '+' keeps what lstrip_blocks / trim_blocks would remove.
  EXPECT_EQ(render("  {%+ if true +%}\nx{% endif %}"), "  \nx");
  // Indentation before {{ is text.
  EXPECT_EQ(render("  {{ 'x' }}"), "  x");
  // lstrip_blocks only when the tag starts its line.
  EXPECT_EQ(render("a  {% if true %}b{% endif %}"), "a  b");
  // Comments vanish, with the same rules.
  EXPECT_EQ(render("a\n  {# note #}\nb{#- x -#}  c"), "a\nbc");
}

TEST(ChatTemplateSyntax, LoopsAndScopes) {
  const std::vector<Message> m = {{"user", "a"}, {"assistant", "b"}, {"user", "c"}};
  EXPECT_EQ(render("{% for x in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
                   "{{ loop.length }}{{ loop.revindex }} {% endfor %}", m),
            "10TrueFalse33 21FalseFalse32 32FalseTrue31 ");
  EXPECT_EQ(render("{% for x in messages if x.role == 'user' %}{{ loop.index }}{{ x.content }}{% endfor %}", m), "1a2c");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in messages[::-1] %}{{ x.content }}{% endfor %}", m), "cba");
  EXPECT_EQ(render("{% for x in messages[1:] %}{{ x.content }}{% endfor %}", m), "bc");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(render("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}"),
            "02");
  // A set inside a loop does not outlive the iteration; at the top level (even in an if) it does.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 5 %}{{ x }}{% endfor %}{{ x }}"), "15151");
  EXPECT_EQ(render("{% if true %}{% set y = 'in' %}{% endif %}{{ y }}"), "in");
  // namespace() carries state out of a loop.
  EXPECT_EQ(render("{% set ns = namespace(n=0, s='') %}{% for x in messages %}{% set ns.n = ns.n + 1 %}"
                   "{% set ns.s = ns.s ~ x.content %}{% endfor %}{{ ns.n }}{{ ns.s }}",
                   m),
            "3abc");
}

TEST(ChatTemplateSyntax, ExpressionsFiltersTestsMethods) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}"), "7 3 -4 2 3.5 1024");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ 'ab' * 2 }}"), "a1None ab [1, 2] abab");
  EXPECT_EQ(render("{{ 'x' if false else 'y' }}{{ 'z' if false }}|{{ undefined_name }}|{{ none }}"), "y||None");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'q' not in 'abc' }}"), "True True True True");
  EXPECT_EQ(render("{{ not 0 and 'yes' }} {{ 0 or 'fallback' }} {{ '' or [] }}"), "yes fallback []");
  EXPECT_EQ(render("{{ '  a b  ' | trim }}|{{ 'héllo' | length }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}|{{ x | default('d') }}"),
            "a b|5|ABab|d");
  EXPECT_EQ(render("{{ ['a', 'b'] | join(', ') }}|{{ [3, 1] | first }}{{ [3, 1] | last }}|{{ 5 | string }}|{{ [1, 2] | reverse | list }}"),
            "a, b|31|5|[2, 1]");
  EXPECT_EQ(render("{{ {'a': [1, 'é\"'], 'b': none, 'c': true} | tojson }}"), "{\"a\": [1, \"é\\\"\"], \"b\": null, \"c\": true}");
  EXPECT_EQ(render("{{ {'a': [1]} | tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join }}",
                   {{"user", "a"}, {"assistant", "b"}, {"user", "c"}}),
            "ac");
  EXPECT_EQ(render("{{ messages | rejectattr('role', 'eq', 'user') | list | length }}", {{"user", "a"}, {"assistant", "b"}}), "1");
  EXPECT_EQ(render("{{ x is defined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ {} is mapping }}"
                   "{{ 4 is even }}{{ 3 is odd }}{{ 6 is divisibleby 3 }}{{ x is not defined }}"),
            "FalseTrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ ' \\n x \\t'.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\nb'.lstrip('\\n') }}|{{ 'a  '.rstrip() }}"),
            "x|a|b|a");
  EXPECT_EQ(render("{{ 'a</think>b'.split('</think>')[-1] }}{{ 'a b  c'.split() | length }}{{ 'abc'.startswith('ab') }}"
                   "{{ 'abc'.endswith(('x', 'c')) }}{{ 'aXa'.replace('a', 'bb') }}"),
            "b3TrueTruebbXbb");
  EXPECT_EQ(render("{{ {'k': 'v'}.get('k') }}{{ {'k': 'v'}.get('z', 'd') }}{{ {'k': 'v'}.get('z') }}"), "vdNone");
  EXPECT_EQ(render("{{ 'abcdef'[1:4] }}{{ 'abc'[-1] }}{{ [1, 2, 3][-2] }}"), "bcdc2");
  EXPECT_EQ(render("{{ 'tab\\tq\\'\"\\u00e9' }}"), "tab\tq'\"é");
  // Python's whitespace (NBSP, NEL, ideographic space) is stripped; an invalid byte (a lone 0x85
  // in the content, not U+0085) is not a space.
  EXPECT_EQ(render("{{ '\\u00a0 \\u00e9x\\u3000 '.strip() }}|{{ '\\x85a'.strip() }}"), "éx|a");
  EXPECT_EQ(render("{{ messages[0].content.strip() }}", {{"user", "\x85" "a\x85"}}), "\x85" "a\x85");
  // items() gives tuples, printed as Python prints them; split(None, n) keeps the rest as it is.
  EXPECT_EQ(render("{{ {'k': 1}.items() | list }} {{ (1,) }} {{ '  x y  z '.split(none, 1) }}"), "[('k', 1)] (1,) ['x', 'y  z ']");
}

TEST(ChatTemplateSyntax, RaiseExceptionCarriesTheTemplatesMessage) {
  const Error e = render_error("line one\n{{ raise_exception('Roles must alternate') }}");
  EXPECT_EQ(e.what_happened(), "Roles must alternate");
  EXPECT_NE(e.where().find("line 2"), std::string::npos) << e.where();
}

TEST(ChatTemplateSyntax, RuntimeErrorsNameLineAndColumn) {
  // No messages: messages[0] is undefined, and indexing it fails at the second '['.
  const Error e = render_error("{{ messages[0]['role'] }}");
  EXPECT_NE(e.what_happened().find("line 1, column 15"), std::string::npos) << e.what();
  EXPECT_NE(render_error("\n  {{ 1 + 'a' }}").what_happened().find("line 2"), std::string::npos);
  EXPECT_THROW(render("{{ 1 // 0 }}"), Error);
  EXPECT_THROW(render("{{ 9223372036854775807 + 1 }}"), Error);
  EXPECT_THROW(render("{% set ns = 1 %}{% set ns.x = 2 %}"), Error);
  EXPECT_THROW(render("{% set f = '%s' %}{{ f % 'x' }}"), Error);  // formatting: refused when rendered
}

TEST(ChatTemplateSyntax, UnsupportedConstructsAreRefusedAtConstruction) {
  struct Case {
    const char* source;
    const char* construct;
    const char* position;
  };
  const Case cases[] = {
      {"{% macro f() %}x{% endmacro %}", "'{% macro %}'", "line 1, column 4"},
      {"ok\n  {{ x | wordcount }}", "filter '|wordcount'", "line 2, column 10"},
      {"{{ x is sameas y }}", "test 'is sameas'", "line 1, column 9"},
      {"{{ x.append(1) }}", "method '.append()'", "line 1, column 12"},
      {"{{ lipsum() }}", "call of 'lipsum()'", "line 1, column 10"},
      {"{% include 'x' %}", "'{% include %}'", "line 1, column 4"},
      {"{% raw %}x{% endraw %}", "'{% raw %}'", "line 1, column 4"},
      {"{% set x %}y{% endset %}", "'{% set %}' block", "line 1, column 4"},
      {"{{ 1 < 2 < 3 }}", "chained comparison", "line 1, column 10"},
      {"{{ '%s!' % name }}", "string formatting with '%'", "line 1, column 10"},
  };
  for (const auto& c : cases) {
    const Error e = parse_error(c.source);
    EXPECT_NE(e.what_happened().find(c.construct), std::string::npos) << c.source << ": " << e.what();
    EXPECT_NE(e.what_happened().find(c.position), std::string::npos) << c.source << ": " << e.what();
    EXPECT_NE(e.hint().find("--chat-template FILE"), std::string::npos) << c.source;
  }
}

TEST(ChatTemplateSyntax, SyntaxErrorsAreRefusedAtConstruction) {
  for (const char* source : {"{{ x ", "{% if x %}", "{% for %}", "{{ 'abc }}", "{# x", "{% endif %}", "{{ (1 }}",
                             "{{ x | }}", "{% if x %}{% else %}{% elif y %}{% endif %}", "{{ ] }}", "{{ @ }}"}) {
    const Error e = parse_error(source);
    EXPECT_NE(e.what_happened().find("line 1"), std::string::npos) << source << ": " << e.what();
  }
}

TEST(ChatTemplateSyntax, BoundsStopHostileTemplates) {
  // Deep nesting is refused while parsing (no stack overflow).
  EXPECT_THROW((void)ChatTemplate::from_source("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", "", ""), Error);
  EXPECT_THROW((void)ChatTemplate::from_source("{{ x" + std::string(100000, '.') + " }}", "", ""), Error);
  EXPECT_THROW((void)ChatTemplate::from_source("{{ " + std::string(100000, '[') + " }}", "", ""), Error);
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_THROW((void)ChatTemplate::from_source(blocks, "", ""), Error);
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  EXPECT_THROW((void)ChatTemplate::from_source(chain + " }}", "", ""), Error);
  // Endless work and endless output end with an Error.
  EXPECT_THROW(render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"), Error);
  EXPECT_THROW(render("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"), Error);
  EXPECT_THROW(render("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}"), Error);
  EXPECT_THROW(render("{{ range(1000000) }}"), Error);
  // A long string iterated character by character (a fuzzed join of joins ran for seconds).
  EXPECT_THROW(render("{{ ('x' * 200000) | join(',') }}"), Error);
  EXPECT_THROW(render("{% for c in 'ab' * 60000 %}{% endfor %}"), Error);
  EXPECT_EQ(render("{{ ('x' * 100000) | join('') | length }}"), "100000");
  EXPECT_EQ(render("{{ 'h\xc3\xa9!' | join('-') }}"), "h-\xc3\xa9-!");
}

}  // namespace
