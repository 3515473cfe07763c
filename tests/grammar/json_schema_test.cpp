// JSON Schema to grammar: documents the schema accepts and the grammar allows, documents the
// grammar refuses (each a schema violation), integer ranges checked value by value, and the
// refused keywords named with their path. (200+ generated schemas, validated by the jsonschema
// package on a served model's output: tests/reference/test_json_schema.py.)
#include "grammar/json_schema.hpp"

#include <gtest/gtest.h>

#include <memory>

#include "core/error.hpp"
#include "grammar/gbnf.hpp"
#include "grammar/matcher.hpp"

namespace syslm::grammar {
namespace {

using nlohmann::json;

std::shared_ptr<const Grammar> from(const nlohmann::ordered_json& schema) {
    return std::make_shared<const Grammar>(parse_gbnf(json_schema_to_gbnf(schema)));
}

bool sentence(const std::shared_ptr<const Grammar>& g, std::string_view s) {
    Matcher m(g);
    return m.accept(s) && m.can_end();
}

TEST(JsonSchema, ObjectsWithRequiredAndOptionalPropertiesInOrder) {
    const auto g = from(json::parse(R"({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 5}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 2},
        "ok": {"type": "boolean"}}, "required": ["name", "ok"]})"));
    // Properties come in the order of the schema object (this one's keys are sorted, as
    // nlohmann::json keeps them; the server parses requests in their own order).
    for (const char* yes :
         {R"({"name": "bob", "ok": true})", R"({"age": -12, "name": "", "ok": false})",
          R"({"name": "x", "ok": true, "tags": ["a", 3]})",
          R"({ "age" : 0 , "name" : "abcde" , "ok" : true , "tags" : ["b"] })"})
        EXPECT_TRUE(sentence(g, yes)) << yes;
    for (const char* no :
         {R"({"ok": true})", R"({"name": "abcdef", "ok": true})",
          R"({"name": "x", "ok": true, "extra": 1})", R"({"name": "x", "ok": true, "tags": []})",
          R"({"name": "x", "ok": true, "tags": ["a", "b", "a"]})",
          R"({"name": "x", "ok": true, "tags": ["c"]})", R"({"name": "x", "age": 1, "ok": true})",
          R"({"name": "x", "ok": 1})", R"({"age": 1.5, "name": "x", "ok": true})"})
        EXPECT_FALSE(sentence(g, no)) << no;
}

TEST(JsonSchema, PropertiesFollowTheSchemasOrderAndArraysNeedNoBounds) {
    const auto g = from(nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
        "zeta": {"type": "array", "items": {"type": "number"}}, "alpha": {"type": "array"}},
        "required": ["zeta", "alpha"]})"));
    for (const char* yes : {R"({"zeta": [1, 2.5, -3], "alpha": []})",
                            R"({"zeta": [], "alpha": [{"a": 1}, "x", null, [2]]})"})
        EXPECT_TRUE(sentence(g, yes)) << yes;
    for (const char* no : {R"({"alpha": [], "zeta": []})", R"({"zeta": ["x"], "alpha": []})"})
        EXPECT_FALSE(sentence(g, no)) << no;
}

TEST(JsonSchema, StringFormatsGiveOnlyValidValues) {
    const auto check = [](const char* format, std::vector<const char*> yes,
                          std::vector<const char*> no) {
        const auto g = from({{"type", "string"}, {"format", format}});
        for (const char* y : yes) EXPECT_TRUE(sentence(g, y)) << format << ": " << y;
        for (const char* n : no) EXPECT_FALSE(sentence(g, n)) << format << ": " << n;
    };
    check("date", {R"("2024-02-28")", R"("1999-12-31")", R"("2023-04-30")"},
          {R"("2024-02-30")", R"("2023-04-31")", R"("2023-13-01")", R"("0000-01-01")",
           R"("2023-1-01")"});
    check("time", {R"("23:59:59Z")", R"("00:00:00.123+05:30")"},
          {R"("24:00:00Z")", R"("12:60:00Z")", R"("12:00:00")"});
    check("date-time", {R"("2024-01-15T08:30:00Z")"}, {R"("2024-01-15 08:30:00Z")"});
    check("uuid", {R"("123e4567-e89b-12d3-a456-426614174000")"},
          {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")"});
    check("ipv4", {R"("192.168.0.1")", R"("255.255.255.255")"}, {R"("256.1.1.1")", R"("1.2.3")"});
    check("email", {R"("a.b+c@example.org")"}, {R"("no-at.example.org")", R"("a@b")"});
    EXPECT_THROW(from({{"type", "string"}, {"format", "hostname"}}), Error);
    EXPECT_THROW(from({{"format", "date"}}), Error);  // without a type: any value
}

TEST(JsonSchema, IntegerRangesAreExact) {
    for (const auto& [lo, hi] : {std::pair{-37, 112}, std::pair{0, 9}, std::pair{5, 5},
                                 std::pair{-250, -3}, std::pair{95, 1003}}) {
        const auto g = from({{"type", "integer"}, {"minimum", lo}, {"maximum", hi}});
        for (int v = lo - 30; v <= hi + 30; ++v)
            EXPECT_EQ(sentence(g, std::to_string(v)), v >= lo && v <= hi)
                << lo << ".." << hi << ": " << v;
        EXPECT_FALSE(sentence(g, "-0"));
        EXPECT_FALSE(sentence(g, "007"));
    }
    const auto open_low = from({{"type", "integer"}, {"exclusiveMinimum", 99}});
    EXPECT_FALSE(sentence(open_low, "99"));
    EXPECT_TRUE(sentence(open_low, "100"));
    EXPECT_TRUE(sentence(open_low, "123456789"));
    const auto open_high = from({{"type", "integer"}, {"maximum", -20}});
    EXPECT_TRUE(sentence(open_high, "-20"));
    EXPECT_TRUE(sentence(open_high, "-98765"));
    EXPECT_FALSE(sentence(open_high, "-19"));
    EXPECT_FALSE(sentence(open_high, "5"));
    const auto number = from({{"type", "number"}, {"minimum", 0.5}, {"exclusiveMaximum", 3}});
    // Integers in range, and fractions of those below the last (a subset of what is allowed).
    for (const char* yes : {"1", "2", "1.25", "1.999"}) EXPECT_TRUE(sentence(number, yes)) << yes;
    for (const char* no : {"3", "3.5", "-1", "0", "4", "0.7"})
        EXPECT_FALSE(sentence(number, no)) << no;
}

TEST(JsonSchema, RefsAnyOfTypeListsAndPrefixItems) {
    const auto g = from(json::parse(R"({"$defs": {"node": {"type": "object",
        "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                       "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"]}},
        "anyOf": [{"$ref": "#/$defs/node"}, {"type": ["string", "null"], "maxLength": 3},
                  {"type": "array", "prefixItems": [{"const": "x"}, {"type": "boolean"}],
                   "items": false}]})"));
    for (const char* yes : {R"({"v": 1})", R"({"kids": [{"kids": [{"v": 3}], "v": 2}], "v": 1})",
                            "null", R"("abc")", R"(["x", true])", R"(["x"])", "[]"})
        EXPECT_TRUE(sentence(g, yes)) << yes;
    for (const char* no : {R"({"v": 10})", R"({"kids": [{"v": 1}, {"v": 1}, {"v": 1}], "v": 1})",
                           R"("abcd")", R"(["x", true, 1])", R"(["y"])", "true"})
        EXPECT_FALSE(sentence(g, no)) << no;
}

// A pattern gives strings whose JSON-decoded value the regex matches whole: quotes, backslashes
// and control characters come escaped.
TEST(JsonSchema, PatternsProduceTheEscapedStringsTheyMatch) {
    // The pattern ^[a-c"\\]{1,3}-\d+$ (a quote or a backslash among the letters).
    const auto g = from(json::parse(R"({"type": "string", "pattern": "^[a-c\"\\\\]{1,3}-\\d+$"})"));
    for (const char* yes : {R"("a-1")", R"("\"b-42")", R"("\\-7")", R"("cc\"-0")"})
        EXPECT_TRUE(sentence(g, yes)) << yes;
    for (const char* no : {R"("d-1")", R"("a-")", R"(""-1")", R"("\-1")", R"("abca-1")"})
        EXPECT_FALSE(sentence(g, no)) << no;
    const auto ctl = from(json::parse(R"({"type": "string", "pattern": "x.y"})"));
    EXPECT_TRUE(sentence(ctl, R"("x\u0009y")"));
    EXPECT_TRUE(sentence(ctl, R"("x\"y")"));
    EXPECT_FALSE(sentence(ctl, "\"x\ty\""));       // a raw tab is not JSON
    EXPECT_FALSE(sentence(ctl, R"("x\u000Ay")"));  // . is not a newline
}

TEST(JsonSchema, UnsupportedKeywordsAreRefusedWithTheirPath) {
    for (
        const auto& [schema, says] :
        {std::pair{
             R"({"type": "object", "properties": {"a": {"type": "string", "format": "idn-email"}}})",
             "#/properties/a/format: 'idn-email' is not supported"},
         std::pair{R"({"type": "string", "pattern": "^x", "maxLength": 3})",
                   "'pattern' together with"},
         std::pair{R"({"type": "string", "pattern": "(a)\\1"})", "#/pattern: regex: at position"},
         std::pair{R"({"allOf": [{}]})", "'allOf' is not supported"},
         std::pair{R"({"$ref": "#/$defs/missing"})", "is not defined"},
         std::pair{R"({"type": "integer", "minimum": 5, "maximum": 4})", "no integer"},
         std::pair{R"({"type": "object", "properties": {}, "required": ["x"]})",
                   "not in 'properties'"}}) {
        try {
            json_schema_to_gbnf(json::parse(schema));
            ADD_FAILURE() << "accepted " << schema;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
        }
    }
}

}  // namespace
}  // namespace syslm::grammar
