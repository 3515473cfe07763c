// A context-free grammar over Unicode code points: the one form that GBNF (gbnf.hpp), JSON
// Schema and regular expressions compile to, and that the matcher (matcher.hpp) runs. Rules are
// lists of alternatives; an alternative is a run of elements (a set of code point ranges, or a
// reference to a rule) ending with End, all in one flat array so that a grammar position is one
// index. Repetition is expanded into helper rules by whoever builds the grammar.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace syslm::grammar {

struct Element {
    enum Kind : uint8_t { End, Chars, Ref };
    Kind kind = End;
    bool negated = false;  // Chars: every code point outside the ranges
    uint32_t ref = 0;      // Ref: the rule
    uint32_t first = 0;    // Chars: the first of its ranges in Grammar::ranges
    uint32_t count = 0;    // Chars: how many
};

struct Grammar {
    std::vector<Element> elements;                      // every alternative, each ending with End
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive code point ranges
    std::vector<std::vector<uint32_t>> rules;           // each rule's alternatives' first positions
    std::vector<std::string> names;                     // each rule's name
    uint32_t root = 0;
    uint64_t id = 0;  // unique to this process's grammar (GrammarBuilder::finish): cache keys

    // Whether the Chars element at pos admits code point cp.
    bool admits(uint32_t pos, uint32_t cp) const;
    // Whether it admits some code point in [lo, hi] (a UTF-8 character still being read).
    bool admits_any(uint32_t pos, uint32_t lo, uint32_t hi) const;
};

// Builds a Grammar rule by rule (parsers and converters use it). Rules may be referenced before
// they are defined; finish() checks that every referenced rule was defined, that `root` exists,
// and that no rule is left-recursive (the matcher would expand it forever), naming the rule.
class GrammarBuilder {
public:
    // The rule of this name, made (empty, not yet defined) on first use.
    uint32_t rule(const std::string& name);
    // A new helper rule named after `base` (base_1, base_2, ...).
    uint32_t fresh_rule(const std::string& base);
    // Alternatives are runs of elements without End; a rule is defined once.
    void define(uint32_t rule, const std::vector<std::vector<Element>>& alternatives);
    bool defined(uint32_t rule) const { return defined_[rule]; }
    // A Chars element over these ranges (negated: their complement).
    Element chars(const std::vector<std::pair<uint32_t, uint32_t>>& ranges, bool negated = false);
    static Element ref(uint32_t rule) { return Element{Element::Ref, false, rule, 0, 0}; }
    Grammar finish(const std::string& root = "root");

private:
    Grammar g_;
    std::vector<std::vector<std::vector<Element>>> alts_;
    std::vector<bool> defined_;
};

// Repetition of a run of elements as llama.cpp's GBNF defines it: min copies, then up to max
// (max < 0: unbounded) more, as helper rules of b named after `base`.
std::vector<Element> repeat(GrammarBuilder& b, const std::string& base,
                            const std::vector<Element>& item, int min, int max);

}  // namespace syslm::grammar
