#include "models/tokenizer_files.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "core/error.h"
#include "core/file_io.h"

namespace strata::models {
namespace {

namespace fs = std::filesystem;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

std::string read_whole(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    throw Error("cannot read the model's " + p.filename().string(), p.string(),
                "check the file's permissions");
  }
  return bytes;
}

}  // namespace

bool is_tokenizer_file_name(std::string_view name) {
  for (const char* known : kTokenizerFileNames) {
    if (name == known) return true;
  }
  return false;
}

bool has_tokenizer(const std::string& model_path) {
  std::error_code ec;
  const fs::path dir(model_path);
  if (model_path.empty() || !fs::is_directory(dir, ec)) return false;
  return fs::exists(dir / "tokenizer.json", ec) ||
         (fs::exists(dir / "vocab.json", ec) && fs::exists(dir / "merges.txt", ec));
}

std::vector<ModelFile> read_tokenizer_files(const std::string& model_path) {
  std::vector<ModelFile> files;
  std::error_code ec;
  const fs::path dir(model_path);
  if (model_path.empty() || !fs::is_directory(dir, ec)) return files;
  for (const char* name : kTokenizerFileNames) {
    const fs::path p = dir / name;
    if (!fs::exists(p, ec)) continue;
    if (!is_file(p)) {
      throw Error(std::string("the model folder's ") + name + " is not a regular file", p.string(),
                  "remove it or replace it with the file");
    }
    files.push_back({name, read_whole(p)});
  }
  return files;
}

void write_tokenizer_files(const std::string& dir, const std::vector<ModelFile>& files) {
  for (const ModelFile& f : files) {
    STRATA_ASSERT(is_tokenizer_file_name(f.name), "not a tokenizer file name");
    write_file_atomic((fs::path(dir) / f.name).string(), f.bytes);
  }
}

bool write_tokenizer_files_for_weights(const std::string& weights_path, const std::vector<ModelFile>& files) {
  constexpr std::string_view kSuffix = ".safetensors";
  const bool one_file = weights_path.size() >= kSuffix.size() &&
                        weights_path.compare(weights_path.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
  if (files.empty() || one_file) return false;
  std::error_code ec;
  fs::create_directories(weights_path, ec);
  if (ec) {
    throw Error("cannot create the folder for the weights: " + ec.message(), weights_path,
                "check that its parent exists and is writable");
  }
  write_tokenizer_files(weights_path, files);
  return true;
}

std::string file_names_text(const std::vector<ModelFile>& files) {
  std::string text;
  for (const ModelFile& f : files) text += (text.empty() ? "" : ", ") + f.name;
  return text.empty() ? "none" : text;
}

}  // namespace strata::models
