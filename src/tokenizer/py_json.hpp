// JSON text as Python's json.dumps writes it (ensure_ascii=False; separators ", " and ": ", or
// with indent "," and newlines), which is what Jinja chat templates' `tojson` filter gives under
// transformers' apply_chat_template. Tool definitions and call arguments in a prompt must be
// byte for byte what the model saw in training, so nlohmann's compact dump does not do.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace syslm::tokenizer {

// indent < 0: on one line. Keys keep the object's order (an ordered_json keeps the input's).
std::string py_json_dumps(const nlohmann::ordered_json& j, int indent = -1);

}  // namespace syslm::tokenizer
