#include "tokenizer/py_json.hpp"

namespace syslm::tokenizer {

namespace {

using json = nlohmann::ordered_json;

void dump(const json& j, int indent, int depth, std::string& out) {
    const bool nested = j.is_object() || j.is_array();
    if (!nested || j.empty()) {  // scalars escape as Python does ("\u001f", UTF-8 kept)
        out += j.dump(-1, ' ', false, json::error_handler_t::replace);
        return;
    }
    const std::string pad =
        indent >= 0 ? "\n" + std::string(size_t(indent) * (depth + 1), ' ') : "";
    const char* sep = indent >= 0 ? "," : ", ";
    out += j.is_object() ? '{' : '[';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
        out += first ? "" : sep;
        out += pad;
        first = false;
        if (j.is_object()) {
            out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace);
            out += ": ";
        }
        dump(*it, indent, depth + 1, out);
    }
    if (indent >= 0) out += "\n" + std::string(size_t(indent) * depth, ' ');
    out += j.is_object() ? '}' : ']';
}

}  // namespace

std::string py_json_dumps(const nlohmann::ordered_json& j, int indent) {
    std::string out;
    dump(j, indent, 0, out);
    return out;
}

}  // namespace syslm::tokenizer
