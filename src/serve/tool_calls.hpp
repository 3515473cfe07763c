// OpenAI tools in chat completions: the request's function definitions and `tool_choice`, the
// grammar that calls keep to in the chat family's own syntax (tokenizer::ToolSyntax: Hermes
// <tool_call> tags, Llama's bare JSON, Mistral's [TOOL_CALLS] list) with each function's
// arguments constrained by its JSON schema, and the parser that turns the model's text into
// `tool_calls`, piece by piece for streams (a call's id and name first, then its arguments).
//
// `required` and a named function constrain the whole answer. `auto` is lazy, as xgrammar's
// structural tags and llama.cpp's grammar triggers: free text until the syntax's trigger appears,
// then the call grammar from there on (infer::GenerationParams::grammar_trigger).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.hpp"
#include "tokenizer/chat_template.hpp"

namespace syslm::serve {

struct Tool {
    std::string name;
    std::string definition;  // {"type": "function", "function": {...}} as the client gave it
    nlohmann::ordered_json parameters;
};

enum class ToolChoice { None, Auto, Required, Named };

struct ToolRequest {
    std::vector<Tool> tools;
    ToolChoice choice = ToolChoice::Auto;
    std::string named;     // the function, for Named
    bool parallel = true;  // several calls in one answer (not for Llama's syntax)
    tokenizer::ToolSyntax syntax = tokenizer::ToolSyntax::Hermes;

    bool active() const { return choice != ToolChoice::None && !tools.empty(); }
    // The definitions for the chat template (none when tool_choice is "none").
    std::vector<std::string> definitions() const;
};

// The call grammar and, for `auto`, the text that switches it on (the grammar then describes
// what follows the trigger). Throws Error for a schema the grammar compiler refuses.
struct CallGrammar {
    std::shared_ptr<const grammar::Grammar> grammar;
    std::string trigger;  // empty: the grammar holds from the first token
};
CallGrammar call_grammar(const ToolRequest& r);

struct ToolCall {
    std::string id, name, arguments;
};

// What a stream sends next: text, or a call's start (id and name) or a piece of its arguments.
struct ToolDelta {
    std::string content;
    int index = -1;  // the call, for a call delta
    std::string id, name, arguments;
};

// Reads an answer's text as it comes. Text before the trigger is content; from the trigger on, the
// calls' syntax. Text that does not keep to it (a lazy grammar that could not start) goes back to
// being content; what a stream already sent of a call stays sent.
class ToolCallParser {
public:
    explicit ToolCallParser(const ToolRequest& r);

    std::vector<ToolDelta> feed(std::string_view text);
    std::vector<ToolDelta> finish();  // the text held back, at the end of the answer

    const std::vector<ToolCall>& calls() const { return calls_; }
    const std::string& content() const { return content_; }

private:
    enum class State { Content, Literal, Name, Args, AfterArgs, AfterCall, Trailing };
    void step(std::vector<ToolDelta>& out);
    // One state's reading; false: wait for more text.
    bool read_content(std::vector<ToolDelta>& out);
    bool read_literal(std::vector<ToolDelta>& out);
    bool read_name(std::vector<ToolDelta>& out);
    void read_args(std::vector<ToolDelta>& out);
    bool read_after_call();
    void content_out(std::string text, std::vector<ToolDelta>& out);
    void fail_to_content(std::vector<ToolDelta>& out);
    bool expect(const std::string& lit, State next);  // false: needs more text

    tokenizer::ToolSyntax syntax_;
    bool parallel_;
    State state_;
    std::string pending_;  // text not yet consumed
    std::string literal_;  // expected in Literal
    State after_literal_ = State::Name;
    std::string region_;  // the call text consumed so far (returned as content on failure)
    std::string name_;
    int depth_ = 0;
    bool in_string_ = false, escaped_ = false;
    std::vector<ToolCall> calls_;
    std::string content_;
};

// A call id as the chat family wants it: Mistral's 9 alphanumerics, else "call_" and 24.
std::string new_call_id(tokenizer::ToolSyntax s);

// The `tools`, `tool_choice` and `parallel_tool_calls` fields; throws ApiError.
ToolRequest parse_tools(const nlohmann::ordered_json& body, tokenizer::ToolSyntax syntax);

}  // namespace syslm::serve
