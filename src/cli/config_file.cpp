#include "cli/config_file.hpp"

#include "cli/command.hpp"
#include "core/error.hpp"

namespace syslm::cli {

void apply_config_file(CLI::App& app, const std::string& path) {
    std::vector<CLI::ConfigItem> items;
    try {
        items = CLI::ConfigTOML().from_file(path);
    } catch (const CLI::Error& e) {
        throw UsageError(cat(path, ": ", e.what()));
    }
    for (const CLI::ConfigItem& item : items) {
        const std::string key = item.fullname();
        usage_check(item.parents.empty(), path, ": '", key, "': sections are not used here");
        CLI::Option* opt = nullptr;
        try {
            opt = app.get_option("--" + item.name);
        } catch (const CLI::OptionNotFound&) {
        }
        usage_check(opt && opt->get_configurable() && item.name != "config", path, ": '", key,
                    "' is not an option of `syslm ", app.get_name(), "`");
        if (opt->count() > 0) continue;  // the command line wins
        try {
            if (opt->get_type_size() == 0) {  // a flag: true / false
                usage_check(item.inputs.size() == 1, path, ": '", key, "' takes true or false");
                const std::string& v = item.inputs.front();
                usage_check(v == "true" || v == "false", path, ": '", key,
                            "' takes true or false, "
                            "not '",
                            v, "'");
                if (v == "true") opt->add_result("true");
            } else {
                for (const std::string& v : item.inputs) opt->add_result(v);
            }
            if (opt->count() > 0) opt->run_callback();
        } catch (const CLI::Error& e) {
            throw UsageError(cat(path, ": '", key, "': ", e.what()));
        }
    }
}

}  // namespace syslm::cli
