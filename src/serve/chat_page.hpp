// The browser chat page served at /: streams replies from /v1/chat/completions and shows the
// server's live figures from /stats (tokens/s, running / waiting requests, KV pages in use).
#pragma once

#include <string>

namespace syslm::serve {

const std::string& chat_page_html();

}  // namespace syslm::serve
