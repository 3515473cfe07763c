// JSON Schema to GBNF (then to a Grammar with parse_gbnf), for response_format json_schema and
// llama-server's json_schema field. Every sentence of the grammar is a JSON document the schema
// accepts; not every accepted document is a sentence (the grammar may choose a subset):
//   type (one or a list), const, enum (any JSON values), anyOf / oneOf (alternatives), $ref to
//   #/$defs/... or #/definitions/... (recursive definitions too), objects (properties in their
//   order, required ones always, optional ones may be left out; no properties beyond those
//   declared), arrays (items, prefixItems, minItems / maxItems), strings (minLength /
//   maxLength, enum, or a pattern: grammar/regex.hpp), integers (minimum / maximum, exclusive or not, as digit automata),
//   numbers (bounded ones as integers in range, with fractions strictly inside it), booleans,
//   null, and {} or true (any JSON value).
// Refused with an Error naming the schema path: allOf, not, if/then/else, formats (a keyword the
// grammar ignored could give documents the schema refuses), a pattern with length bounds.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace syslm::grammar {

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);

}  // namespace syslm::grammar
