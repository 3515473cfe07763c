// Running another program and collecting its standard output: what `syslm tune train` uses to
// time real training runs (each trial is a `syslm train` process, so its peak memory is its own).
#pragma once

#include <string>
#include <vector>

namespace syslm {

struct ProcessResult {
    int status = -1;     // exit status; 128 + signal number when a signal ended it
    std::string out;     // everything it wrote to stdout
};

// Runs argv[0] (a path) with argv, stdout captured, stderr into the file `stderr_path` (empty:
// inherited). Throws Error when it cannot be started.
ProcessResult run_process(const std::vector<std::string>& argv, const std::string& stderr_path = "");

// This executable's path (/proc/self/exe).
std::string self_executable();

}  // namespace syslm
