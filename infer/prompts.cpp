#include "infer/prompts.h"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strata::infer {

namespace {

constexpr const char* kFormatHint =
    "each line must be {\"prompt\": \"text\"} or {\"ids\": [int, ...]} (blank lines are skipped)";

[[noreturn]] void bad_line(const std::string& name, std::size_t line, const std::string& what) {
  throw Error(what, fmt::format("{}:{}", name, line), kFormatHint);
}

bool is_blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos;
}

Prompt parse_line(std::string_view text, const std::string& name, std::size_t line) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    bad_line(name, line, fmt::format("--prompts: not valid JSON ({})", e.what()));
  }
  if (!j.is_object()) bad_line(name, line, "--prompts: the line is not a JSON object");
  const bool has_prompt = j.contains("prompt");
  const bool has_ids = j.contains("ids");
  if (has_prompt && has_ids) bad_line(name, line, "--prompts: both \"prompt\" and \"ids\"; give one");
  if (!has_prompt && !has_ids) bad_line(name, line, "--prompts: neither \"prompt\" nor \"ids\"");
  for (const auto& [key, value] : j.items()) {
    if (key != "prompt" && key != "ids") {
      bad_line(name, line, fmt::format("--prompts: unknown key \"{}\"", key));
    }
  }

  Prompt p;
  p.line = line;
  if (has_prompt) {
    const auto& v = j["prompt"];
    if (!v.is_string()) bad_line(name, line, "--prompts: \"prompt\" must be a string");
    p.text = v.get<std::string>();
    if (p.text.empty()) bad_line(name, line, "--prompts: the prompt is empty");
    p.has_text = true;
    return p;
  }
  const auto& v = j["ids"];
  if (!v.is_array()) bad_line(name, line, "--prompts: \"ids\" must be an array of integers");
  if (v.empty()) bad_line(name, line, "--prompts: \"ids\" is empty");
  p.ids.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto& id = v[i];
    // 3.0 is a float in JSON terms: an id is written as an integer.
    if (!id.is_number_integer()) {
      bad_line(name, line, fmt::format("--prompts: ids[{}] is {}, not an integer", i, id.dump()));
    }
    const bool negative = id.is_number_unsigned() ? false : id.get<std::int64_t>() < 0;
    if (negative) bad_line(name, line, fmt::format("--prompts: ids[{}] is negative ({})", i, id.dump()));
    if (id.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) {
      bad_line(name, line, fmt::format("--prompts: ids[{}] = {} is too large for a token id", i, id.dump()));
    }
    p.ids.push_back(static_cast<std::int32_t>(id.get<std::uint64_t>()));
  }
  return p;
}

}  // namespace

std::vector<Prompt> parse_prompts(std::string_view jsonl, const std::string& name) {
  std::vector<Prompt> prompts;
  std::size_t line = 0;
  std::size_t pos = 0;
  while (pos < jsonl.size()) {
    std::size_t end = jsonl.find('\n', pos);
    if (end == std::string_view::npos) end = jsonl.size();
    std::string_view text = jsonl.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (is_blank(text)) continue;
    Prompt p = parse_line(text, name, line);
    p.index = prompts.size();
    prompts.push_back(std::move(p));
  }
  if (prompts.empty()) {
    throw Error("--prompts: the file holds no prompt", name, kFormatHint);
  }
  return prompts;
}

std::vector<Prompt> read_prompts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int e = errno;
    throw Error(fmt::format("--prompts: cannot open the file ({})", errno_text(e)), path,
                "give a JSONL file of {\"prompt\": ...} or {\"ids\": [...]} lines");
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw Error("--prompts: reading the file failed", path);
  return parse_prompts(buf.str(), path);
}

void check_prompt_ids(const std::vector<Prompt>& prompts, std::int64_t vocab_size,
                      const std::string& name) {
  for (const Prompt& p : prompts) {
    for (std::size_t i = 0; i < p.ids.size(); ++i) {
      if (p.ids[i] >= vocab_size) {
        throw Error(fmt::format("--prompts: ids[{}] = {} is outside the model's vocabulary ({} tokens)",
                                i, p.ids[i], vocab_size),
                    fmt::format("{}:{}", name, p.line), "give ids in [0, vocab_size)");
      }
    }
  }
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
  }
  STRATA_ASSERT(false, "unknown FinishReason");
}

std::string completion_json(const Completion& c) {
  // ordered_json: the keys in the documented order rather than sorted.
  nlohmann::ordered_json j;
  j["index"] = c.index;
  j["ids"] = c.ids;
  if (c.text) j["text"] = *c.text;
  j["finish_reason"] = finish_reason_name(c.finish_reason);
  j["prompt_tokens"] = c.prompt_tokens;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

OutputWriter::OutputWriter(const std::string& path, std::size_t num_prompts)
    : num_prompts_(num_prompts) {
  if (path.empty() || path == "-") {
    stream_ = stdout;
    name_ = "stdout";
    return;
  }
  name_ = path;
  namespace fs = std::filesystem;
  const fs::path parent = fs::absolute(fs::path(path)).parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) {
    throw Error(fmt::format("--output {}: the folder {} does not exist", path, parent.string()),
                "--output", "create the folder first, or give another path");
  }
  stream_ = std::fopen(path.c_str(), "w");
  if (stream_ == nullptr) {
    const int e = errno;
    throw Error(fmt::format("--output {}: cannot create the file ({})", path, errno_text(e)),
                "--output", "give a path in a folder you can write to");
  }
  owned_ = true;
}

OutputWriter::OutputWriter(std::FILE* stream, std::string name, std::size_t num_prompts)
    : stream_(stream), name_(std::move(name)), num_prompts_(num_prompts) {
  STRATA_ASSERT(stream_ != nullptr);
}

OutputWriter::~OutputWriter() {
  if (owned_ && stream_ != nullptr) std::fclose(stream_);
}

void OutputWriter::write_line(const std::string& line) {
  errno = 0;
  const bool ok = std::fwrite(line.data(), 1, line.size(), stream_) == line.size() &&
                  std::fputc('\n', stream_) != EOF && std::fflush(stream_) == 0;
  if (!ok) {
    const int e = errno != 0 ? errno : EIO;
    throw Error(fmt::format("--output: writing a completion failed ({})", errno_text(e)), name_,
                "check the free space of the output's disk");
  }
}

void OutputWriter::add(Completion completion) {
  STRATA_ASSERT(stream_ != nullptr, "OutputWriter::add after finish()");
  STRATA_ASSERT(completion.index < num_prompts_, "a completion's index is past the prompts");
  STRATA_ASSERT(completion.index >= next_ && !waiting_.contains(completion.index),
                "a prompt's completion was added twice");
  const std::size_t index = completion.index;
  waiting_.emplace(index, std::move(completion));
  for (auto it = waiting_.begin(); it != waiting_.end() && it->first == next_;
       it = waiting_.erase(it)) {
    write_line(completion_json(it->second));
    ++next_;
  }
}

void OutputWriter::finish() {
  STRATA_ASSERT(next_ == num_prompts_ && waiting_.empty(),
                "OutputWriter::finish before every prompt's completion was added");
  if (owned_ && stream_ != nullptr) {
    std::FILE* f = stream_;
    stream_ = nullptr;
    if (std::fclose(f) != 0) {
      const int e = errno;
      throw Error(fmt::format("--output: closing the file failed ({})", errno_text(e)), name_,
                  "check the free space of the output's disk");
    }
  } else {
    stream_ = nullptr;
  }
}

}  // namespace strata::infer
