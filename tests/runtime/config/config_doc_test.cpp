// docs/config.md stays true: each of its key tables lists exactly the keys of the section's
// field list (runtime/config/config_fields.h) plus the few keys a list does not hold (the
// sections themselves, optimizer/scheduler `type`, `params.amsgrad`), and where a row's
// default is one JSON value in backticks, it equals what a default Config prints.
#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/config/config_fields.h"
#include "runtime/config/json_reader.h"

namespace strata::runtime::test {
namespace {

using config::detail::Json;

struct DocRow {
  std::string key;
  std::string default_cell;
};

// "### `fp16`" -> "fp16"; "### Top level" -> "".
std::string heading_name(const std::string& line) {
  std::string name = line.substr(4);
  if (name == "Top level") return "";
  name.erase(std::remove(name.begin(), name.end(), '`'), name.end());
  return name;
}

std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::string cell;
  for (std::size_t i = 1; i < row.size(); ++i) {  // row starts with '|'
    if (row[i] == '|' && row[i - 1] != '\\') {
      const auto b = cell.find_first_not_of(' ');
      const auto e = cell.find_last_not_of(' ');
      out.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
      cell.clear();
    } else {
      cell += row[i];
    }
  }
  return out;
}

// Every key table of docs/config.md: heading -> its rows (key without backticks, Default cell).
std::map<std::string, std::vector<DocRow>> doc_tables() {
  std::ifstream in(STRATA_CONFIG_DOC);
  EXPECT_TRUE(in.good()) << "cannot read " << STRATA_CONFIG_DOC;
  std::map<std::string, std::vector<DocRow>> tables;
  std::string line;
  std::string section;
  bool in_keys = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) in_keys = line == "## Keys";
    if (!in_keys) continue;
    if (line.rfind("### ", 0) == 0) section = heading_name(line);
    if (line.rfind("| `", 0) != 0) continue;
    const std::vector<std::string> c = cells(line);
    if (c.size() < 3) continue;
    std::string key = c[0];
    key.erase(std::remove(key.begin(), key.end(), '`'), key.end());
    tables[section].push_back({key, c[2]});
  }
  return tables;
}

template <typename Fields>
std::vector<std::string> keys_of(const Fields& fields, const std::string& prefix = "") {
  std::vector<std::string> keys;
  config::detail::for_each_field(fields, [&](const auto& f) { keys.push_back(prefix + std::string(f.key)); });
  return keys;
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The keys each table must list: the field lists, and the keys outside them.
std::map<std::string, std::vector<std::string>> expected_tables() {
  return {
      {"", plus(keys_of(config::detail::kTopFields),
                {"fp16", "bf16", "optimizer", "scheduler", "zero_optimization", "aio", "data_types", "strata"})},
      {"fp16", keys_of(config::detail::kFp16Fields)},
      {"bf16", keys_of(config::detail::kBf16Fields)},
      {"optimizer",
       plus(keys_of(config::detail::kOptimizerParamFields, "params."), {"type", "params.amsgrad"})},
      {"scheduler", plus(keys_of(config::detail::kSchedulerParamFields, "params."), {"type"})},
      {"zero_optimization", keys_of(config::detail::kZeroFields)},
      {"zero_optimization.offload_param", keys_of(config::detail::kOffloadParamFields)},
      {"zero_optimization.offload_optimizer", keys_of(config::detail::kOffloadOptimizerFields)},
      {"aio", keys_of(config::detail::kAioFields)},
      {"data_types", keys_of(config::detail::kDataTypesFields)},
      {"strata", keys_of(config::detail::kStrataFields)},
  };
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(ConfigDoc, TablesListExactlyTheFieldListsKeys) {
  const auto docs = doc_tables();
  const auto expected = expected_tables();
  std::vector<std::string> doc_sections, list_sections;
  for (const auto& [name, rows] : docs) doc_sections.push_back(name);
  for (const auto& [name, keys] : expected) list_sections.push_back(name);
  EXPECT_EQ(doc_sections, list_sections) << "docs/config.md's key tables vs the config sections";
  for (const auto& [name, keys] : expected) {
    std::vector<std::string> doc_keys;
    if (auto it = docs.find(name); it != docs.end())
      for (const DocRow& r : it->second) doc_keys.push_back(r.key);
    EXPECT_EQ(sorted(doc_keys), sorted(keys))
        << "docs/config.md table '" << name << "' vs runtime/config/config_fields.h";
  }
}

// The printed value of `section.key` in `printed` (a config_to_json_value() result), or null.
const Json* printed_value(const Json& printed, const std::string& section, const std::string& key) {
  const Json* node = &printed;
  std::string path = section.empty() ? key : section + "." + key;
  std::size_t begin = 0;
  while (begin <= path.size()) {
    const std::size_t dot = std::min(path.find('.', begin), path.size());
    const std::string part = path.substr(begin, dot - begin);
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
    begin = dot + 1;
  }
  return node;
}

TEST(ConfigDoc, DefaultsMatchTheStructs) {
  // Defaults as printed, with every scheduler key present in one of two configs.
  config::Config cosine;
  cosine.optimizer = config::OptimizerConfig{};
  cosine.scheduler = config::SchedulerConfig{};
  cosine.scheduler->type = config::SchedulerType::kWarmupCosineLR;
  config::Config decay = cosine;
  decay.scheduler->type = config::SchedulerType::kWarmupDecayLR;
  const Json printed[] = {config::detail::config_to_json_value(cosine), config::detail::config_to_json_value(decay)};

  // amsgrad has no field: it must be false, and parse_optimizer says so.
  int compared = 0;
  for (const auto& [section, rows] : doc_tables()) {
    for (const DocRow& row : rows) {
      if (section == "optimizer" && row.key == "params.amsgrad") continue;
      const std::string& cell = row.default_cell;
      // Only a cell that is one backticked JSON value: "`0.001`", "`[0.9, 0.999]`", "`\"log\"`".
      if (cell.size() < 3 || cell.front() != '`' || cell.back() != '`' ||
          std::count(cell.begin(), cell.end(), '`') != 2)
        continue;
      const Json doc = Json::parse(cell.substr(1, cell.size() - 2), nullptr, false);
      if (doc.is_discarded()) continue;
      const Json* value = printed_value(printed[0], section, row.key);
      if (value == nullptr) value = printed_value(printed[1], section, row.key);
      ASSERT_NE(value, nullptr) << section << "." << row.key << " is not printed";
      EXPECT_EQ(*value, doc) << "default of '" << (section.empty() ? "" : section + ".") << row.key
                             << "': docs/config.md says " << cell << ", the struct prints "
                             << value->dump();
      ++compared;
    }
  }
  EXPECT_GT(compared, 40);  // most rows have a printable default
}

}  // namespace
}  // namespace strata::runtime::test
