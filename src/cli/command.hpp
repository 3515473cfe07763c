// The `syslm` binary is one CLI11 app with a subcommand per file (cmd_<name>.cpp). Each file
// registers itself with SYSLM_COMMAND, so adding a command touches no other file.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace syslm::cli {

// Called with the subcommand to configure; returns the action to run once parsing succeeded.
using CommandSetup = std::function<std::function<int()>(CLI::App& sub)>;

struct CommandEntry {
    const char* name;
    const char* description;
    CommandSetup setup;
};

std::vector<CommandEntry>& command_registry();

// Errors are reported as one line, `syslm: error: <what>`, on stderr. The exit status says
// whose mistake it was: 2 for the command line (a CLI11 parse error: unknown or missing option,
// a value the option does not accept; or a UsageError: options that contradict each other, a
// config file's bad value), 1 for everything else (files, data, numbers going bad at run time, a
// distributed job's rank that died or hangs). `train` stopped by Ctrl-C exits 130 (128 + SIGINT)
// after saving its checkpoint.
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Throws UsageError with the message when cond is false.
template <class... Args>
void usage_check(bool cond, Args&&... args) {
    if (!cond) throw UsageError(cat(std::forward<Args>(args)...));
}
// An option's value that can be checked only against the model's shape (a layer pattern for
// so many layers): its Error becomes a command-line error naming the option.
template <class F>
auto option_value(const char* option, F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const Error& e) {
        throw UsageError(cat(option, ": ", e.what()));
    }
}
bool register_command(CommandEntry entry);

}  // namespace syslm::cli

#define SYSLM_COMMAND(ident, name, description, setup) \
    static const bool syslm_command_##ident =          \
        ::syslm::cli::register_command({name, description, setup})
