#include "tools/cli_errors.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace strata::tools {
namespace {

// Optimal string alignment distance (Levenshtein plus adjacent transpositions: "trian").
std::size_t edit_distance(const std::string& a, const std::string& b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

// The subcommand the words on the command line selected: the deepest one parsed.
CLI::App* selected(CLI::App& app) {
  CLI::App* at = &app;
  for (;;) {
    const std::vector<CLI::App*> chosen = at->get_subcommands();
    if (chosen.empty()) return at;
    at = chosen.front();
  }
}

// "strata train", "strata bench step".
std::string command_path(const CLI::App* app) {
  std::string path;
  for (const CLI::App* a = app; a != nullptr; a = a->get_parent()) {
    const std::string name = a->get_parent() == nullptr ? "strata" : a->get_name();
    path = path.empty() ? name : name + " " + path;
  }
  return path;
}

std::vector<std::string> flag_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_group().empty()) continue;  // hidden
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
  }
  return names;
}

std::vector<std::string> command_names(CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
  return names;
}

std::string suggestion(const std::vector<std::string>& near) {
  if (near.empty()) return "";
  std::string text = " (did you mean " + near.front();
  for (std::size_t i = 1; i < near.size() && i < 3; ++i) text += (i + 1 == near.size() || i == 2 ? " or " : ", ") + near[i];
  return text + "?)";
}

}  // namespace

std::vector<std::string> near_names(const std::string& word, const std::vector<std::string>& known) {
  std::vector<std::pair<std::size_t, std::string>> scored;
  for (const std::string& k : known) {
    const std::size_t d = edit_distance(word, k);
    const bool prefix = word.size() >= 3 && k.rfind(word, 0) == 0;
    if (d <= 2 || prefix) scored.emplace_back(prefix ? std::min<std::size_t>(d, 1) : d, k);
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> names;
  for (const auto& [d, k] : scored) {
    if (std::find(names.begin(), names.end(), k) == names.end()) names.push_back(k);
  }
  return names;
}

int report_parse_error(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
  CLI::App* at = selected(app);
  const std::string where = command_path(at);
  for (const std::string& word : at->remaining()) {
    if (word.size() > 1 && word[0] == '-') {
      const std::string flag = word.substr(0, word.find('='));
      std::fprintf(stderr, "strata: error: %s: unknown flag %s%s; `%s --help` lists its flags\n", where.c_str(),
                   flag.c_str(), suggestion(near_names(flag, flag_names(*at))).c_str(), where.c_str());
      return static_cast<int>(CLI::ExitCodes::ExtrasError);
    }
    const std::vector<std::string> commands = command_names(*at);
    if (!commands.empty()) {
      std::string list;
      for (const std::string& c : commands) list += (list.empty() ? "" : ", ") + c;
      std::fprintf(stderr, "strata: error: unknown command `%s %s`%s; the commands: %s\n", where.c_str(),
                   word.c_str(), suggestion(near_names(word, commands)).c_str(), list.c_str());
      return static_cast<int>(CLI::ExitCodes::ExtrasError);
    }
  }
  return app.exit(e);
}

}  // namespace strata::tools
