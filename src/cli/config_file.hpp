// Options of a subcommand from a TOML file (CLI11's TOML reader): each key names a long option
// (`layers = 4`, `min-lr = 2e-4`, `data = "runs/x/data"`, `synthetic-data = true`). Options given
// on the command line win over the file; a key that names no option of the command, or a value
// the option rejects, is an error naming the file and the key.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace syslm::cli {

void apply_config_file(CLI::App& app, const std::string& path);

}  // namespace syslm::cli
