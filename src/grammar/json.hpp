// JSON (RFC 8259) as GBNF: any object (response_format {"type": "json_object"}), and the rules the
// JSON Schema converter builds on. Whitespace is bounded (a space, or a newline and up to 20
// spaces or tabs) so that a model cannot pad forever, as llama.cpp's json.gbnf does.
#pragma once

#include <string_view>

namespace syslm::grammar {

// Rules root (an object), value, object, array, string, number, ws.
std::string_view json_object_gbnf();

}  // namespace syslm::grammar
