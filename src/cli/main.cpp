#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>

#include "cli/command.hpp"

namespace syslm::cli {

std::vector<CommandEntry>& command_registry() {
    static std::vector<CommandEntry> registry;
    return registry;
}

bool register_command(CommandEntry entry) {
    command_registry().push_back(std::move(entry));
    return true;
}

}  // namespace syslm::cli

int main(int argc, char** argv) {
    using namespace syslm::cli;
    CLI::App app{"syslm: build, train, compress, serve and analyse large language models"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Help for every subcommand");

    auto& registry = command_registry();
    std::sort(registry.begin(), registry.end(), [](const CommandEntry& a, const CommandEntry& b) {
        return std::string_view(a.name) < std::string_view(b.name);
    });
    std::vector<std::pair<CLI::App*, std::function<int()>>> actions;
    for (auto& entry : registry) {
        CLI::App* sub = app.add_subcommand(entry.name, entry.description);
        actions.emplace_back(sub, entry.setup(*sub));
    }
    auto report = [](const char* what, int status) {
        std::fflush(stdout);
        std::fprintf(stderr, "syslm: error: %s\n", what);
        if (status == kExitUsage)
            std::fprintf(stderr, "Run 'syslm <command> --help' for the options.\n");
        return status;
    };
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help, --help-all
        return report(e.what(), kExitUsage);
    }
    try {
        for (auto& [sub, action] : actions)
            if (sub->parsed()) return action();
    } catch (const CLI::ParseError& e) {
        return report(e.what(), kExitUsage);
    } catch (const UsageError& e) {
        return report(e.what(), kExitUsage);
    } catch (const std::exception& e) {
        return report(e.what(), kExitError);
    }
    return 0;
}
