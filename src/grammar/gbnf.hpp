// GBNF, llama.cpp's grammar syntax (grammars/README.md there), to a Grammar:
//   rule ::= alternative | alternative ...      one rule per line; "root" is where matching starts
//   "literal" with \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes, [a-z0-9_] and [^...] classes,
//   . (any character), rule names, ( groups ), and the postfixes * + ? {m} {m,} {m,n};
//   # starts a comment. Newlines end a rule except inside parentheses and after ::= or |.
// Errors name the line and column.
#pragma once

#include <string>
#include <string_view>

#include "grammar/grammar.hpp"

namespace syslm::grammar {

Grammar parse_gbnf(std::string_view text, const std::string& root = "root");

// A GBNF string literal of text ("..." with quotes, backslashes and control bytes escaped).
std::string gbnf_literal(std::string_view text);

// The same GBNF text with every rule name prefixed (literals, classes, repetition counts and
// comments untouched): several grammars, each renamed apart, can live in one file.
std::string prefix_rule_names(std::string_view text, std::string_view prefix);

}  // namespace syslm::grammar
