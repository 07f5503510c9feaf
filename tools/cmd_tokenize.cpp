// strata tokenize --model DIR --text FILE... --out tokens.bin [--eos-between] [--threads N]: text
// files into one llm.c token file with the model folder's tokenizer, for `strata train --data`.
// Each FILE is one document; the documents are tokenized in parallel pieces that give the ids
// of each whole document (models/text_tokens.h), without special tokens; --eos-between puts the
// tokenizer's eos id between consecutive documents. uint16 tokens (llm.c version 1) for a
// vocabulary of at most 65,536 ids, uint32 (version 7) above (models/io/token_file.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/units.h"
#include "models/io/token_file.h"
#include "models/text_tokens.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer_files.h"
#include "tools/commands.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;

struct TokenizeOptions {
  std::string model;
  std::vector<std::string> texts;
  std::string out;
  bool eos_between = false;
  int threads = 0;
};

// generation_config.json's eos_token_id (the first of a list), beside the tokenizer.
std::optional<std::int32_t> generation_eos(const fs::path& folder) {
  const fs::path file = folder / "generation_config.json";
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::nullopt;
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("eos_token_id")) return std::nullopt;
  const nlohmann::json& e = j["eos_token_id"];
  const nlohmann::json& first = e.is_array() && !e.empty() ? e[0] : e;
  if (!first.is_number_integer()) return std::nullopt;
  return first.get<std::int32_t>();
}

// The id --eos-between puts between documents: tokenizer_config.json's eos_token (or the
// tokenizer's own end-of-text token), else generation_config.json's eos_token_id.
std::int32_t eos_id(const models::Tokenizer& tokenizer, const fs::path& folder) {
  if (const std::optional<std::int32_t> id = tokenizer.eos_id()) return *id;
  if (const std::optional<std::int32_t> id = generation_eos(folder)) {
    if (*id >= 0 && *id < tokenizer.vocab_size()) return *id;
  }
  throw Error("--eos-between: the tokenizer has no eos token", folder.string(),
              "give a folder whose tokenizer_config.json names eos_token (or whose generation_config.json has "
              "eos_token_id), or drop --eos-between");
}

// A progress line: on a terminal rewritten in place about once a second, else a line every 10 s.
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(::isatty(2) == 1) {}
  void operator()(const models::TextTokensProgress& p) {
    if (p.finished) {
      if (printed_ && tty_) std::fputc('\n', stderr);
      return;
    }
    if (!tty_ && p.seconds - last_s_ < 10.0) return;
    last_s_ = p.seconds;
    printed_ = true;
    const double pct = p.bytes_total > 0 ? 100.0 * static_cast<double>(p.bytes_done) / p.bytes_total : 100.0;
    std::fprintf(stderr, "%sstrata tokenize: %s of %s (%.0f%%), %llu tokens, %.0f s%s", tty_ ? "\r" : "",
                 format_bytes(p.bytes_done).c_str(), format_bytes(p.bytes_total).c_str(), pct,
                 static_cast<unsigned long long>(p.tokens), p.seconds, tty_ ? "" : "\n");
  }

 private:
  bool tty_;
  bool printed_ = false;
  double last_s_ = 0;
};

void run_tokenize(const TokenizeOptions& o) {
  std::error_code ec;
  const bool folder = fs::is_directory(o.model, ec);
  if (folder && !models::has_tokenizer(o.model)) {
    throw Error("the model folder has no tokenizer (tokenizer.json, or vocab.json and merges.txt)", o.model,
                "give the Hugging Face folder the model came in, or its tokenizer.json");
  }
  const models::Tokenizer tokenizer = models::Tokenizer::load(o.model);
  const fs::path tokenizer_folder = folder ? fs::path(o.model) : fs::path(o.model).parent_path();

  models::TextTokensOptions options;
  options.threads = o.threads;
  if (o.eos_between) options.separator = eos_id(tokenizer, tokenizer_folder);
  ProgressPrinter printer;
  options.progress = [&printer](const models::TextTokensProgress& p) { printer(p); };
  std::uint64_t bytes = 0;
  for (const std::string& t : o.texts) {
    const std::uintmax_t n = fs::file_size(t, ec);
    if (!ec) bytes += n;
  }

  const auto start = std::chrono::steady_clock::now();
  const models::TokenData data = models::tokenize_files(tokenizer, o.texts, options);
  if (data.size() == 0) throw Error("the text gives no tokens", data.path, "give files with text in them");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  models::write_token_file(o.out, data);

  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::fprintf(stderr,
               "strata tokenize: %zu document(s), %s -> %zu tokens with %s (%d ids) in %.2f s (%s/s, %d threads)%s\n"
               "strata tokenize: wrote %s (llm.c token file, %s tokens: magic %d, version %d)\n",
               o.texts.size(), format_bytes(bytes).c_str(), data.size(), tokenizer.source().c_str(),
               tokenizer.vocab_size(), seconds, format_bytes(static_cast<std::uint64_t>(bytes / std::max(seconds, 1e-9))).c_str(),
               threads,
               options.separator ? fmt::format("; eos {} between documents", *options.separator).c_str() : "",
               o.out.c_str(), data.wide ? "uint32" : "uint16",
               data.wide ? models::kTokenFileMagicU32 : models::kTokenFileMagic,
               data.wide ? models::kTokenFileVersionU32 : models::kTokenFileVersion);
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "text files into an llm.c token file with a model folder's tokenizer, in parallel (for strata "
                  "train --data)");
  cmd->add_option("--model", o->model,
                  "a Hugging Face model folder with its tokenizer (tokenizer.json, or vocab.json and merges.txt), "
                  "or a tokenizer.json")
      ->required();
  cmd->add_option("--text", o->texts,
                  "text files (UTF-8), each one document, tokenized without special tokens (no BOS)")
      ->required()
      ->expected(1, -1);
  cmd->add_option("--out", o->out,
                  "the token file to write: uint16 tokens (llm.c version 1) for a vocabulary of at most 65,536 "
                  "ids, uint32 (version 7, llm.c's Llama 3 kind) above")
      ->required();
  cmd->add_flag("--eos-between", o->eos_between,
                "put the tokenizer's eos token (tokenizer_config.json's eos_token, else generation_config.json's "
                "eos_token_id) between documents");
  cmd->add_option("--threads", o->threads, "threads that tokenize (default: every CPU)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([o] { run_tokenize(*o); });
}

}  // namespace strata::tools
