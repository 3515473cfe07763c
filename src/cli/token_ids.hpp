// Comma-separated token ids on the command line (`--ids 1,2,3`), shared by the commands that
// take them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace syslm::cli {

// Throws Error naming `flag` and the offending item; an empty list is an error.
std::vector<int32_t> parse_token_ids(const std::string& text, const char* flag);

}  // namespace syslm::cli
