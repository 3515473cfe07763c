#include "cli/token_ids.hpp"

#include <sstream>

#include "core/error.hpp"

namespace syslm::cli {

std::vector<int32_t> parse_token_ids(const std::string& text, const char* flag) {
    std::vector<int32_t> ids;
    std::istringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
        try {
            size_t used = 0;
            ids.push_back(std::stoi(item, &used));
            SYSLM_CHECK(item.find_first_not_of(" \t", used) == std::string::npos, "");
        } catch (const std::exception&) {
            fail(flag, ": '", item, "' is not an integer token id");
        }
    }
    SYSLM_CHECK(!ids.empty(), flag, ": no token ids given");
    return ids;
}

}  // namespace syslm::cli
