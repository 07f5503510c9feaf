#pragma once
// What the command line says when it cannot parse: CLI11 checks required flags before it
// reports unknown ones, so `strata train --step 3` would say only "--steps is required". Here an
// unknown flag or command is named first, with the nearest known ones ("did you mean --steps?").
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace strata::tools {

// The known names within edit distance 2 of `word` (or that start with it), nearest first.
std::vector<std::string> near_names(const std::string& word, const std::vector<std::string>& known);

// After app.parse threw `e`: prints the error (an unknown flag or command with suggestions, else
// CLI11's own message) and returns the exit code (CLI11's: 0 for --help / --version).
int report_parse_error(CLI::App& app, const CLI::ParseError& e);

}  // namespace strata::tools
