// Tool calls: the parser reads each chat family's call syntax into calls and content, the same
// whatever pieces the text streams in; the call grammar accepts what the parser reads (from the
// trigger on for `auto`, the whole answer for `required`); text that breaks the syntax is content.
#include "serve/tool_calls.hpp"

#include <gtest/gtest.h>

#include <random>

#include "grammar/matcher.hpp"

namespace syslm::serve {
namespace {

using tokenizer::ToolSyntax;

ToolRequest request(ToolSyntax syntax, ToolChoice choice) {
    const auto body = nlohmann::ordered_json::parse(R"({"tools": [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
         "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
         "required": ["city"]}}},
        {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
         "properties": {"terms": {"type": "array", "items": {"type": "number"}}}}}}]})");
    ToolRequest r = parse_tools(body, syntax);
    r.choice = choice;
    return r;
}

struct Case {
    ToolSyntax syntax;
    std::string trigger, calls;  // the answer: "Let me look. " + trigger + calls
    size_t n_calls;
};

std::vector<Case> cases() {
    return {
        {ToolSyntax::Hermes, "<tool_call>",
         "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo \\\"}\\\" \", \"days\": "
         "3}}"
         "\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"terms\": [1, 2.5]}}"
         "\n</tool_call>",
         2},
        {ToolSyntax::Llama, "{\"name\"",
         ": \"get_weather\", \"parameters\": {\"city\": \"Oslo \\\"}\\\" \", \"days\": 3}}", 1},
        {ToolSyntax::Mistral, "[TOOL_CALLS]",
         "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo \\\"}\\\" \", \"days\": "
         "3}}, "
         "{\"name\": \"add\", \"arguments\": {\"terms\": [1, 2.5]}}]",
         2},
    };
}

struct Read {
    std::string content;
    std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

Read read(const ToolRequest& r, const std::string& text, std::vector<size_t> cuts) {
    ToolCallParser p(r);
    Read out;
    std::vector<ToolDelta> all;
    size_t at = 0;
    cuts.push_back(text.size());
    for (size_t c : cuts) {
        auto d = p.feed(std::string_view(text).substr(at, c - at));
        all.insert(all.end(), d.begin(), d.end());
        at = c;
    }
    auto d = p.finish();
    all.insert(all.end(), d.begin(), d.end());
    for (const ToolDelta& x : all) {
        if (x.index < 0) {
            out.content += x.content;
        } else if (!x.id.empty()) {
            EXPECT_EQ(static_cast<size_t>(x.index), out.calls.size());
            out.calls.push_back({x.name, x.arguments});
        } else {
            out.calls.at(static_cast<size_t>(x.index)).second += x.arguments;
        }
    }
    EXPECT_EQ(out.content, p.content());
    EXPECT_EQ(out.calls.size(), p.calls().size());
    for (size_t i = 0; i < out.calls.size() && i < p.calls().size(); ++i)
        EXPECT_EQ(out.calls[i].second, p.calls()[i].arguments);
    return out;
}

TEST(ToolCalls, EveryFamilysSyntaxReadsTheSameInAnyPieces) {
    std::mt19937 rng(11);
    for (const Case& c : cases()) {
        const ToolRequest r = request(c.syntax, ToolChoice::Auto);
        const std::string text = "Let me look. " + c.trigger + c.calls;
        const Read whole = read(r, text, {});
        EXPECT_EQ(whole.content, "Let me look. ") << text;
        ASSERT_EQ(whole.calls.size(), c.n_calls) << text;
        EXPECT_EQ(whole.calls[0].first, "get_weather");
        EXPECT_EQ(whole.calls[0].second, "{\"city\": \"Oslo \\\"}\\\" \", \"days\": 3}");
        if (c.n_calls > 1) {
            EXPECT_EQ(whole.calls[1].second, "{\"terms\": [1, 2.5]}");
        }
        for (int trial = 0; trial < 60; ++trial) {  // random cut points, one to all bytes apart
            std::vector<size_t> cuts;
            for (size_t i = 1; i < text.size(); ++i)
                if (rng() % (1 + trial % 7) == 0) cuts.push_back(i);
            const Read pieces = read(r, text, cuts);
            EXPECT_EQ(pieces.content, whole.content);
            EXPECT_EQ(pieces.calls, whole.calls);
        }
        // The grammar accepts the calls: after the trigger (auto), the whole answer (required).
        grammar::Matcher lazy(call_grammar(r).grammar);
        EXPECT_EQ(call_grammar(r).trigger, c.trigger);
        EXPECT_TRUE(lazy.accept(c.calls) && lazy.can_end()) << c.calls;
        const ToolRequest req = request(c.syntax, ToolChoice::Required);
        grammar::Matcher required(call_grammar(req).grammar);
        const std::string answer = c.syntax == ToolSyntax::Mistral ? c.calls : c.trigger + c.calls;
        EXPECT_TRUE(required.accept(answer) && required.can_end()) << answer;
        EXPECT_TRUE(call_grammar(req).trigger.empty());
        EXPECT_EQ(read(req, answer, {}).calls, whole.calls);
        // Named: only that function; a call of another breaks the grammar.
        ToolRequest named = request(c.syntax, ToolChoice::Named);
        named.named = "add";
        grammar::Matcher only_add(call_grammar(named).grammar);
        EXPECT_FALSE(only_add.accept(answer));
    }
}

TEST(ToolCalls, TextThatBreaksTheSyntaxIsContentAndACutCallKeepsWhatItHas) {
    for (const Case& c : cases()) {
        const ToolRequest r = request(c.syntax, ToolChoice::Auto);
        const std::string broken = "a " + c.trigger + " oops, not a call";
        const Read b = read(r, broken, {3, 5});
        EXPECT_TRUE(b.calls.empty());
        EXPECT_EQ(b.content, broken);
        const std::string text = "a " + c.trigger + c.calls;
        const size_t args = text.find("{\"city\"");
        const Read cut = read(r, text.substr(0, args + 5), {});  // max_tokens inside arguments
        ASSERT_EQ(cut.calls.size(), 1u);
        EXPECT_EQ(cut.calls[0].second, "{\"cit");
        EXPECT_EQ(cut.content, "a ");
        const Read early = read(r, text.substr(0, text.find("get_") + 2), {});  // before the name
        EXPECT_TRUE(early.calls.empty());
        EXPECT_EQ(early.content, text.substr(0, text.find("get_") + 2));
    }
}

TEST(ToolCalls, CallIdsAreWhatEachFamilyAccepts) {
    const std::string mistral = new_call_id(ToolSyntax::Mistral);
    EXPECT_EQ(mistral.size(), 9u);
    for (char ch : mistral) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)));
    const std::string other = new_call_id(ToolSyntax::Hermes);
    EXPECT_EQ(other.rfind("call_", 0), 0u);
    EXPECT_NE(other, new_call_id(ToolSyntax::Hermes));
}

}  // namespace
}  // namespace syslm::serve
