// Applying a tuned plan's settings (tune/plan.hpp) to a command's options: `serve --plan` and
// `train --plan` take every setting the plan has, exactly. An option also given on the command
// line must agree with the plan; a contradiction is a usage error, never a silent override.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cli/command.hpp"

namespace syslm::cli {

template <class T, class U>
void take_from_plan(const CLI::Option* option, T& arg, const U& planned, const char* plan_key) {
    const T value = static_cast<T>(planned);
    usage_check(option->count() == 0 || arg == value, option->get_name(), " ", arg,
                " contradicts the plan's ", plan_key, " ", value);
    arg = value;
}

}  // namespace syslm::cli
