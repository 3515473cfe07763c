// A regular expression (the common subset of PCRE2 and ECMAScript that JSON Schema patterns and
// structured-output requests use) to a GBNF expression: literals and escapes, . and classes
// ([...], [^...], \d \w \s and their negations), groups ((...), (?:...)), alternation, and the
// quantifiers * + ? {m} {m,} {m,n} (lazy forms match the same strings). Leading ^ and trailing $
// are dropped: the expression always matches the whole text, and a whole match is also a match.
// Back-references, look-around, word boundaries and inner anchors are refused with the position.
//
// json_string: the expression produces the characters as they appear inside a JSON string: " and
// \ escaped, control characters left out (so every sentence is a valid JSON string's body whose
// value the regex matches).
#pragma once

#include <string>
#include <string_view>

namespace syslm::grammar {

std::string regex_to_gbnf(std::string_view regex, bool json_string = false);

}  // namespace syslm::grammar
