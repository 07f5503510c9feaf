#include "models/registry.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/gpt/gpt_spec.h"
#include "models/llama/llama_spec.h"

namespace strata::models {
namespace {

std::string supported_architectures() {
  std::string s;
  for (const Family& f : families()) {
    for (const std::string& a : f.architectures) s += fmt::format("{}{}", s.empty() ? "" : ", ", a);
  }
  return s;
}

const Family* family_of(const nlohmann::json& j, std::string_view where) {
  if (j.contains("architectures")) {
    const nlohmann::json& a = j["architectures"];
    if (!a.is_array() || a.empty() || !a[0].is_string()) {
      throw Error("\"architectures\" must be a list of names", std::string(where), "fix the model config");
    }
    const std::string name = a[0].get<std::string>();
    for (const Family& f : families()) {
      for (const std::string& arch : f.architectures) {
        if (arch == name) return &f;
      }
    }
    throw Error(fmt::format("the architecture {} is not supported", name), std::string(where),
                fmt::format("strata trains and serves: {}", supported_architectures()));
  }
  if (j.contains("model_type")) {
    const nlohmann::json& t = j["model_type"];
    const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
    for (const Family& f : families()) {
      for (const std::string& type : f.model_types) {
        if (type == name) return &f;
      }
    }
    throw Error(fmt::format("the model_type {} is not supported", name), std::string(where),
                fmt::format("strata trains and serves: {}", supported_architectures()));
  }
  // strata's own GPT-2 configs before the registry named neither.
  if (j.contains("n_embd")) return &gpt_family();
  throw Error("the model config names no \"architectures\" (nor \"model_type\")", std::string(where),
              fmt::format("give a Hugging Face config.json; strata reads: {}", supported_architectures()));
}

}  // namespace

const std::vector<Family>& families() {
  // One line per family.
  static const std::vector<Family> kFamilies = {
      gpt_family(),
      llama_family(),
  };
  return kFamilies;
}

ModelSpecPtr model_from_json(std::string_view json_text, std::string_view where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw Error(fmt::format("the model config is not valid JSON: {}", e.what()), std::string(where),
                "give a Hugging Face config.json");
  }
  if (!j.is_object()) throw Error("the model config must be a JSON object", std::string(where));
  return family_of(j, where)->from_json(json_text, where);
}

std::string config_json_path(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return (std::filesystem::path(path) / "config.json").string();
  return path;
}

ModelSpecPtr model_from_path(const std::string& path) {
  const std::string file = config_json_path(path);
  std::ifstream in(file);
  if (!in) {
    throw Error("cannot open the model config", file,
                "--model takes a Hugging Face model directory (with config.json) or a config.json");
  }
  std::stringstream text;
  text << in.rdbuf();
  return model_from_json(text.str(), file);
}

ModelSpecPtr model_preset(std::string_view name) {
  for (const Family& f : families()) {
    for (const std::string& p : f.preset_names()) {
      if (p == name) return f.preset(name);
    }
  }
  std::string names;
  for (const std::string& p : preset_names()) names += fmt::format("{}{}", names.empty() ? "" : ", ", p);
  throw Error(fmt::format("unknown model preset \"{}\"", name), "--preset",
              fmt::format("use one of: {}; or give --model DIR", names));
}

ModelSpecPtr model_from_flags(const std::string& model_path, const std::string& preset) {
  if (!model_path.empty() && !preset.empty()) {
    throw Error("both --model and --preset were given", "--model", "give one of them");
  }
  if (!model_path.empty()) return model_from_path(model_path);
  if (!preset.empty()) return model_preset(preset);
  throw Error("no model was given", "--model",
              "give --model DIR (a Hugging Face model folder), --model config.json or --preset NAME");
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const Family& f : families()) {
    for (std::string& p : f.preset_names()) names.push_back(std::move(p));
  }
  return names;
}

}  // namespace strata::models
