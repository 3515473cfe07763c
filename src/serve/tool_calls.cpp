#include "serve/tool_calls.hpp"

#include <random>

#include "core/error.hpp"
#include "grammar/gbnf.hpp"
#include "grammar/json_schema.hpp"
#include "serve/openai_api.hpp"

namespace syslm::serve {

namespace {

using json = nlohmann::ordered_json;
using tokenizer::ToolSyntax;

// A syntax's fixed text: trigger first name "mid" arguments close (between name mid arguments
// close)* end. The name is one of the tools' (letters, digits, _ and -: nothing to escape).
struct Syntax {
    std::string trigger, first, mid, close, between, end;
    bool trigger_when_required;  // false: a control token the masks cannot force (Mistral's)
};

const Syntax& syntax_of(ToolSyntax s) {
    static const Syntax hermes{"<tool_call>",
                               "\n{\"name\": \"",
                               "\", \"arguments\": ",
                               "}\n</tool_call>",
                               "\n<tool_call>\n{\"name\": \"",
                               "",
                               true};
    static const Syntax llama{"{\"name\"", ": \"", "\", \"parameters\": ", "}", "", "", true};
    static const Syntax mistral{
        "[TOOL_CALLS]", "[{\"name\": \"", "\", \"arguments\": ", "}", ", {\"name\": \"", "]",
        false};
    switch (s) {
        case ToolSyntax::Llama:
            return llama;
        case ToolSyntax::Mistral:
            return mistral;
        case ToolSyntax::Hermes:
            break;
    }
    return hermes;
}

bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

[[noreturn]] void bad(const std::string& param, const std::string& message) {
    throw ApiError{400, "invalid_request_error", message, param, ""};
}

bool valid_name(const std::string& n) {
    if (n.empty() || n.size() > 64) return false;
    for (char c : n)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
    return true;
}

}  // namespace

std::vector<std::string> ToolRequest::definitions() const {
    std::vector<std::string> out;
    if (choice == ToolChoice::None) return out;
    for (const Tool& t : tools) out.push_back(t.definition);
    return out;
}

CallGrammar call_grammar(const ToolRequest& r) {
    const Syntax& s = syntax_of(r.syntax);
    std::string g, alts;
    for (size_t i = 0; i < r.tools.size(); ++i) {
        const Tool& t = r.tools[i];
        if (r.choice == ToolChoice::Named && t.name != r.named) continue;
        const std::string p = std::string("t").append(std::to_string(i)).append("-");
        g += grammar::prefix_rule_names(grammar::json_schema_to_gbnf(t.parameters), p);
        g += p + "call ::= " + grammar::gbnf_literal(t.name) + " " + grammar::gbnf_literal(s.mid) +
             " " + p + "root " + grammar::gbnf_literal(s.close) + "\n";
        alts.append(alts.empty() ? "" : " | ").append(p).append("call");
    }
    g += "call ::= " + alts + "\n";
    const bool many = r.parallel && !s.between.empty() && r.choice != ToolChoice::Named;
    std::string calls = grammar::gbnf_literal(s.first) + " call";
    if (many) calls.append(" (").append(grammar::gbnf_literal(s.between)).append(" call)*");
    if (!s.end.empty()) calls.append(" ").append(grammar::gbnf_literal(s.end));
    CallGrammar out;
    if (r.choice == ToolChoice::Auto) {
        out.trigger = s.trigger;
    } else if (s.trigger_when_required) {
        calls = grammar::gbnf_literal(s.trigger) + " " + calls;
    }
    g += "root ::= " + calls + "\n";
    out.grammar = std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(g));
    return out;
}

std::string new_call_id(ToolSyntax s) {
    static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::string id = s == ToolSyntax::Mistral ? "" : "call_";
    const size_t n = s == ToolSyntax::Mistral ? 9 : 24;
    for (size_t i = 0; i < n; ++i) id += kChars[rng() % (sizeof kChars - 1)];
    return id;
}

ToolCallParser::ToolCallParser(const ToolRequest& r)
    : syntax_(r.syntax), parallel_(r.parallel), state_(State::Content) {
    const Syntax& s = syntax_of(r.syntax);
    if (r.choice != ToolChoice::Auto && !s.trigger_when_required) {  // the calls from the start
        state_ = State::Literal;
        literal_ = s.first;
    }
}

void ToolCallParser::content_out(std::string text, std::vector<ToolDelta>& out) {
    if (text.empty()) return;
    content_ += text;
    if (!out.empty() && out.back().index < 0)
        out.back().content += text;
    else
        out.push_back({std::move(text), -1, "", "", ""});
}

void ToolCallParser::fail_to_content(std::vector<ToolDelta>& out) {
    content_out(region_ + pending_, out);
    region_.clear();
    pending_.clear();
    state_ = State::Trailing;
}

bool ToolCallParser::expect(const std::string& lit, State next) {
    literal_ = lit;
    after_literal_ = next;
    state_ = State::Literal;
    return true;
}

std::vector<ToolDelta> ToolCallParser::feed(std::string_view text) {
    pending_ += text;
    std::vector<ToolDelta> out;
    step(out);
    return out;
}

// Consumes pending_ as far as it can be read; what might still turn out either way stays.
void ToolCallParser::step(std::vector<ToolDelta>& out) {
    bool more = true;
    while (more && !pending_.empty()) {
        switch (state_) {
            case State::Content:
                more = read_content(out);
                break;
            case State::Literal:
                more = read_literal(out);
                break;
            case State::Name:
                more = read_name(out);
                break;
            case State::Args:
                read_args(out);
                break;
            case State::AfterArgs:
                if (is_space(pending_[0])) {
                    region_ += pending_[0];
                    pending_.erase(0, 1);
                } else {
                    expect(syntax_of(syntax_).close, State::AfterCall);
                }
                break;
            case State::AfterCall:
                more = read_after_call();
                break;
            case State::Trailing:
                content_out(pending_, out);
                pending_.clear();
                break;
        }
    }
}

bool ToolCallParser::read_content(std::vector<ToolDelta>& out) {
    const std::string& trigger = syntax_of(syntax_).trigger;
    const size_t at = pending_.find(trigger);
    if (at != std::string::npos) {
        content_out(pending_.substr(0, at), out);
        region_ = trigger;
        pending_.erase(0, at + trigger.size());
        return expect(syntax_of(syntax_).first, State::Name);
    }
    size_t keep = std::min(pending_.size(), trigger.size() - 1);  // maybe a trigger's start
    while (keep > 0 && pending_.compare(pending_.size() - keep, keep, trigger, 0, keep) != 0)
        --keep;
    content_out(pending_.substr(0, pending_.size() - keep), out);
    pending_.erase(0, pending_.size() - keep);
    return false;
}

bool ToolCallParser::read_literal(std::vector<ToolDelta>& out) {
    const size_t n = std::min(pending_.size(), literal_.size());
    if (pending_.compare(0, n, literal_, 0, n) != 0) {
        fail_to_content(out);
        return false;
    }
    region_ += pending_.substr(0, n);
    pending_.erase(0, n);
    literal_.erase(0, n);
    if (!literal_.empty()) return false;
    state_ = after_literal_;
    return true;
}

bool ToolCallParser::read_name(std::vector<ToolDelta>& out) {
    const size_t q = pending_.find('"');
    name_ += pending_.substr(0, q);
    region_ += pending_.substr(0, q);
    pending_.erase(0, q == std::string::npos ? pending_.size() : q);
    if (q == std::string::npos) return false;
    calls_.push_back({new_call_id(syntax_), name_, ""});
    out.push_back({"", static_cast<int>(calls_.size() - 1), calls_.back().id, name_, ""});
    name_.clear();
    depth_ = 0;
    in_string_ = escaped_ = false;
    return expect(syntax_of(syntax_).mid, State::Args);
}

// The arguments object, up to its closing brace (found by depth, strings skipped).
void ToolCallParser::read_args(std::vector<ToolDelta>& out) {
    std::string& args = calls_.back().arguments;
    size_t i = 0;
    for (; i < pending_.size() && !(depth_ == 0 && !args.empty()); ++i) {
        const char c = pending_[i];
        if (args.empty() && c != '{') return fail_to_content(out);
        if (in_string_) {
            if (escaped_)
                escaped_ = false;
            else if (c == '\\')
                escaped_ = true;
            else if (c == '"')
                in_string_ = false;
        } else if (c == '"') {
            in_string_ = true;
        } else if (c == '{' || c == '[') {
            ++depth_;
        } else if (c == '}' || c == ']') {
            --depth_;
        }
        args += c;
    }
    const std::string piece = pending_.substr(0, i);
    region_ += piece;
    pending_.erase(0, i);
    const int index = static_cast<int>(calls_.size() - 1);
    if (!out.empty() && out.back().index == index)
        out.back().arguments += piece;
    else
        out.push_back({"", index, "", "", piece});
    if (depth_ == 0) state_ = State::AfterArgs;
}

// After a call: the next one's opening, the list's end, or text that follows the calls.
bool ToolCallParser::read_after_call() {
    const Syntax& s = syntax_of(syntax_);
    region_.clear();
    const size_t n = std::min(pending_.size(), s.between.size());
    if (parallel_ && !s.between.empty() && pending_.compare(0, n, s.between, 0, n) == 0) {
        if (n < s.between.size()) return false;  // may be the next call's opening
        pending_.erase(0, n);
        state_ = State::Name;
    } else if (!s.end.empty()) {
        expect(s.end, State::Trailing);
    } else {
        state_ = State::Trailing;
    }
    return true;
}

std::vector<ToolDelta> ToolCallParser::finish() {
    std::vector<ToolDelta> out;
    step(out);
    switch (state_) {
        case State::Content:
        case State::Trailing:
            content_out(pending_, out);
            break;
        case State::AfterCall:  // a held opening of another call that never came
            if (pending_.find_first_not_of(" \n\t\r") != std::string::npos)
                content_out(pending_, out);
            break;
        default:  // cut short (max_tokens): a call already named stays, with what it has
            if (state_ == State::Args || state_ == State::AfterArgs ||
                (state_ == State::Literal && after_literal_ != State::Name))
                break;
            fail_to_content(out);
            break;
    }
    pending_.clear();
    return out;
}

ToolRequest parse_tools(const json& body, ToolSyntax syntax) {
    ToolRequest r;
    r.syntax = syntax;
    const auto tools = body.find("tools");
    if (tools != body.end() && !tools->is_null()) {
        if (!tools->is_array()) bad("tools", "'tools' must be an array of function definitions");
        for (const json& t : *tools) {
            if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
                !t["function"].is_object())
                bad("tools", "each tool must be {\"type\": \"function\", \"function\": {...}}");
            const json& f = t["function"];
            if (!f.contains("name") || !f["name"].is_string() || !valid_name(f["name"]))
                bad("tools", "a function's 'name' must be 1 to 64 letters, digits, '_' or '-'");
            Tool tool;
            tool.name = f["name"].get<std::string>();
            for (const Tool& other : r.tools)
                if (other.name == tool.name)
                    bad("tools", "two tools are named '" + tool.name + "'");
            if (f.contains("description") && !f["description"].is_string())
                bad("tools", "a function's 'description' must be a string");
            tool.parameters = f.value("parameters", json{{"type", "object"}});
            if (!tool.parameters.is_object())
                bad("tools", "a function's 'parameters' must be a JSON Schema object");
            tool.definition = t.dump(-1, ' ', false, json::error_handler_t::replace);
            r.tools.push_back(std::move(tool));
        }
    }
    const auto choice = body.find("tool_choice");
    if (choice != body.end() && !choice->is_null()) {
        if (r.tools.empty()) bad("tool_choice", "'tool_choice' needs 'tools'");
        if (choice->is_string() && *choice == "none") {
            r.choice = ToolChoice::None;
        } else if (choice->is_string() && *choice == "auto") {
            r.choice = ToolChoice::Auto;
        } else if (choice->is_string() && *choice == "required") {
            r.choice = ToolChoice::Required;
        } else if (choice->is_object() && choice->value("type", "") == "function" &&
                   choice->contains("function") && (*choice)["function"].is_object() &&
                   (*choice)["function"].contains("name") &&
                   (*choice)["function"]["name"].is_string()) {
            r.choice = ToolChoice::Named;
            r.named = (*choice)["function"]["name"].get<std::string>();
            bool known = false;
            for (const Tool& t : r.tools) known |= t.name == r.named;
            if (!known)
                bad("tool_choice",
                    "'tool_choice' names '" + r.named + "', which is not in 'tools'");
        } else {
            bad("tool_choice",
                "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", "
                "\"function\": {\"name\": ...}}");
        }
    }
    const auto parallel = body.find("parallel_tool_calls");
    if (parallel != body.end() && !parallel->is_null()) {
        if (!parallel->is_boolean())
            bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        r.parallel = parallel->get<bool>();
    }
    if (syntax == ToolSyntax::Llama) r.parallel = false;  // the template holds one call per turn
    return r;
}

}  // namespace syslm::serve
