#pragma once
// The model families strata knows, and how a model is named on the command line: a Hugging Face
// config.json (or the directory holding it) or a preset. Adding a family is a folder under
// models/ (its StackParts and StackSpec: models/block_stack.h, models/stack_spec.h; CMake
// finds its sources) and one line in registry.cpp's list (with its #include).
#include <string>
#include <string_view>
#include <vector>

#include "models/model_spec.h"

namespace strata::models {

const std::vector<Family>& families();

// The family of a config.json: its "architectures" (first entry), else its "model_type", else a
// GPT-2 config without either (strata's own older files); throws strata::Error naming `where`
// and listing the supported architectures when none matches.
ModelSpecPtr model_from_json(std::string_view json_text, std::string_view where = "config.json");
// `path` is a config.json, or a directory holding one (a Hugging Face model directory).
ModelSpecPtr model_from_path(const std::string& path);
// The config.json of a model path: `path` itself, or path/config.json for a directory.
std::string config_json_path(const std::string& path);
ModelSpecPtr model_preset(std::string_view name);  // throws listing every preset when unknown
// The model of a command line: --model PATH (model_from_path) or --preset NAME, exactly one of
// them (strata::Error naming the flag otherwise).
ModelSpecPtr model_from_flags(const std::string& model_path, const std::string& preset);
std::vector<std::string> preset_names();           // of every family

}  // namespace strata::models
