// The browser chat page served at / (src/serve/chat_page.html) and its third-party scripts and
// style under /static/ (marked, highlight.js, DOMPurify: Debian's packages, read at build time;
// see CMakeLists.txt and NOTICE-third-party.md). Both are embedded in the binary, so the page
// works offline.
#pragma once

#include <string_view>
#include <vector>

namespace syslm::serve {

std::string_view chat_page_html();

struct ChatAsset {
    std::string_view name;  // under /static/
    std::string_view content_type;
    std::string_view body;
};

// Empty when the build did not find the Debian packages (the page then shows plain text).
const std::vector<ChatAsset>& chat_assets();

}  // namespace syslm::serve
