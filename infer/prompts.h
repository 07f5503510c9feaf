#pragma once
// The files of `strata generate`: the prompts in (--prompts FILE.jsonl) and the completions out
// (--output out.jsonl, or stdout).
//
// --prompts: one JSON object per line, either {"prompt": "text"} (tokenized later) or
// {"ids": [int, ...]} (token ids as they are). Blank lines are skipped; prompts are numbered
// 0, 1, ... in file order, not counting blank lines. Anything else is a strata::Error naming
// the file and line: bad JSON, not an object, both keys or neither, another key, an empty
// prompt or id list, an id that is not an integer in [0, 2^31).
//
// --output: one JSON line per finished prompt, in prompt-index order:
//   {"index": i, "ids": [generated ids], "text": "...", "finish_reason": "stop"|"length",
//    "prompt_tokens": n}
// "text" only when a tokenizer decoded the ids. Lines are written and flushed as soon as every
// lower index has been written (completions that arrive early wait in memory), so after a crash
// the file holds a prefix of the prompts, each line complete.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::infer {

struct Prompt {
  std::size_t index = 0;          // 0, 1, ... in file order (blank lines not counted)
  std::string text;               // the "prompt" text, when has_text
  std::vector<std::int32_t> ids;  // the "ids" as given; filled by tokenizing text otherwise
  bool has_text = false;          // true: {"prompt": ...}; false: {"ids": [...]}
  std::size_t line = 0;           // 1-based line in the file, for messages
};

// Reads --prompts FILE.jsonl. Throws strata::Error naming the file (and line) when it cannot
// be read, holds no prompt, or a line is not one of the two forms above.
std::vector<Prompt> read_prompts(const std::string& path);

// The same on text already in memory; `name` stands for the file in messages.
std::vector<Prompt> parse_prompts(std::string_view jsonl, const std::string& name);

// Throws strata::Error (file:line) when a prompt has an id >= vocab_size.
void check_prompt_ids(const std::vector<Prompt>& prompts, std::int64_t vocab_size,
                      const std::string& name);

enum class FinishReason { kStop, kLength };  // "stop": an end token; "length": the token limit

const char* finish_reason_name(FinishReason reason);

struct Completion {
  std::size_t index = 0;             // the prompt's index
  std::vector<std::int32_t> ids;     // the generated ids (not the prompt's)
  std::optional<std::string> text;   // the decoded ids, when a tokenizer decoded them
  FinishReason finish_reason = FinishReason::kLength;
  std::size_t prompt_tokens = 0;     // the prompt's length in tokens
};

// One JSON line (no newline) for a completion. Invalid UTF-8 in text (a tokenizer cut inside a
// character) is written as U+FFFD rather than failing.
std::string completion_json(const Completion& completion);

// Writes the completions of num_prompts prompts in index order, one flushed line each.
// Not thread-safe: the generation loop calls it from one thread.
class OutputWriter {
 public:
  // path "" or "-": stdout. Otherwise creates (truncates) the file now, so that an unwritable
  // --output fails before any generation (strata::Error naming --output and the path).
  OutputWriter(const std::string& path, std::size_t num_prompts);
  // Writes to a stream the caller owns (borrowed; not closed); `name` is for messages.
  OutputWriter(std::FILE* stream, std::string name, std::size_t num_prompts);
  ~OutputWriter();  // closes an owned file; completions still waiting are dropped
  OutputWriter(const OutputWriter&) = delete;
  OutputWriter& operator=(const OutputWriter&) = delete;

  // Takes one prompt's completion; writes it and every waiting one that now follows in order.
  // Each prompt once, index < num_prompts (programming mistakes: STRATA_ASSERT). Throws
  // strata::Error when writing fails (ENOSPC, EIO).
  void add(Completion completion);

  // After every prompt was added: closes an owned file and reports a failed close. Asserts
  // that nothing is missing.
  void finish();

  std::size_t written() const noexcept { return next_; }          // lines written so far
  std::size_t waiting() const noexcept { return waiting_.size(); }  // held for order

 private:
  void write_line(const std::string& line);

  std::FILE* stream_ = nullptr;
  bool owned_ = false;
  std::string name_;
  std::size_t num_prompts_ = 0;
  std::size_t next_ = 0;  // the index of the next line to write
  std::map<std::size_t, Completion> waiting_;
};

}  // namespace strata::infer
