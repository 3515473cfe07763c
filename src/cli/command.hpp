// The `syslm` binary is one CLI11 app with a subcommand per file (cmd_<name>.cpp). Each file
// registers itself with SYSLM_COMMAND, so adding a command touches no other file.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace syslm::cli {

// Called with the subcommand to configure; returns the action to run once parsing succeeded.
using CommandSetup = std::function<std::function<int()>(CLI::App& sub)>;

struct CommandEntry {
    const char* name;
    const char* description;
    CommandSetup setup;
};

std::vector<CommandEntry>& command_registry();
bool register_command(CommandEntry entry);

}  // namespace syslm::cli

#define SYSLM_COMMAND(ident, name, description, setup) \
    static const bool syslm_command_##ident =          \
        ::syslm::cli::register_command({name, description, setup})
