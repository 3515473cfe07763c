#include "tokenizer/chat_template.hpp"

#include <cctype>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "core/utc_time.hpp"
#include "tokenizer/py_json.hpp"

namespace syslm::tokenizer {

namespace {

const std::vector<std::pair<std::string, ChatFormat>>& table() {
    static const std::vector<std::pair<std::string, ChatFormat>> t = {
        {"chatml", ChatFormat::ChatML},
        {"llama2", ChatFormat::Llama2},
        {"llama2-sys", ChatFormat::Llama2Sys},
        {"llama2-sys-bos", ChatFormat::Llama2SysBos},
        {"llama2-sys-strip", ChatFormat::Llama2SysStrip},
        {"mistral-v1", ChatFormat::MistralV1},
        {"mistral-v3", ChatFormat::MistralV3},
        {"mistral-v3-tekken", ChatFormat::MistralV3Tekken},
        {"mistral-v7", ChatFormat::MistralV7},
        {"llama3", ChatFormat::Llama3},
        {"llama3.1", ChatFormat::Llama31},
        {"llama3.2", ChatFormat::Llama32},
        {"qwen2.5", ChatFormat::Qwen25},
        {"gemma", ChatFormat::Gemma},
        {"phi3", ChatFormat::Phi3},
        {"zephyr", ChatFormat::Zephyr},
    };
    return t;
}

std::string trim(const std::string& s) {
    size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    return s.substr(b, e - b);
}

}  // namespace

const std::vector<std::string>& chat_format_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> n;
        for (const auto& [name, f] : table()) n.push_back(name);
        return n;
    }();
    return names;
}

std::string chat_format_name(ChatFormat f) {
    for (const auto& [name, g] : table())
        if (g == f) return name;
    return "?";
}

ChatFormat chat_format(const std::string& t) {
    for (const auto& [name, f] : table())
        if (t == name) return f;
    auto has = [&](const char* s) { return t.find(s) != std::string::npos; };
    if (has("<|im_start|>") && !has("<|im_sep|>") && !has("<end_of_utterance>"))
        return has("You are Qwen, created by Alibaba Cloud") ? ChatFormat::Qwen25
                                                             : ChatFormat::ChatML;
    if (t.rfind("mistral", 0) == 0 || has("[INST]")) {
        if (has("[SYSTEM_PROMPT]")) return ChatFormat::MistralV7;
        if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
            if (has(" [INST]")) return ChatFormat::MistralV1;
            if (has("\"[INST]\"")) return ChatFormat::MistralV3Tekken;
            return ChatFormat::MistralV3;
        }
        if (has("content.strip()")) return ChatFormat::Llama2SysStrip;
        if (has("bos_token + '[INST]")) return ChatFormat::Llama2SysBos;
        if (has("<<SYS>>")) return ChatFormat::Llama2Sys;
        return ChatFormat::Llama2;
    }
    if (has("<|assistant|>") && has("<|end|>")) return ChatFormat::Phi3;
    if (has("<|user|>") && (has("<|endoftext|>") || has("eos_token"))) return ChatFormat::Zephyr;
    if (has("<start_of_turn>")) return ChatFormat::Gemma;
    if (has("<|start_header_id|>") && has("<|end_header_id|>")) {
        if (!has("Cutting Knowledge Date")) return ChatFormat::Llama3;
        return has("strftime_now") ? ChatFormat::Llama32 : ChatFormat::Llama31;
    }
    std::string names;
    for (const auto& n : chat_format_names()) names += (names.empty() ? "" : ", ") + n;
    fail("chat template not recognised (", t.size(), " characters",
         t.empty() ? ": none in the model" : "", "); choose one of: ", names);
}

namespace {

// Mistral v1 / v3: turns open with [INST], the system text leads the user's.
void write_mistral(std::ostream& ss, ChatFormat f, const std::vector<ChatMessage>& messages) {
    const std::string lead = f == ChatFormat::MistralV1 ? " " : "";
    bool in_turn = false;
    for (const auto& m : messages) {
        if (!in_turn) {
            ss << lead << "[INST] ";
            in_turn = true;
        }
        if (m.role == "system") {
            ss << m.content << "\n\n";
        } else if (m.role == "user") {
            ss << m.content << lead << "[/INST]";
        } else {
            ss << " " << (f == ChatFormat::MistralV3 ? trim(m.content) : m.content) << "</s>";
            in_turn = false;
        }
    }
}

void write_mistral_v7(std::ostream& ss, const std::vector<ChatMessage>& messages) {
    for (const auto& m : messages) {
        if (m.role == "system")
            ss << "[SYSTEM_PROMPT] " << m.content << "[/SYSTEM_PROMPT]";
        else if (m.role == "user")
            ss << "[INST] " << m.content << "[/INST]";
        else
            ss << " " << m.content << "</s>";
    }
}

// Llama 2 and its variants: the system text in <<SYS>> (or plain), BOS between turns (SysBos),
// contents trimmed (SysStrip).
void write_llama2(std::ostream& ss, ChatFormat f, const std::vector<ChatMessage>& messages) {
    const bool sys = f != ChatFormat::Llama2;
    bool in_turn = true;
    ss << "[INST] ";
    for (const auto& m : messages) {
        const std::string c = f == ChatFormat::Llama2SysStrip ? trim(m.content) : m.content;
        if (!in_turn) {
            in_turn = true;
            ss << (f == ChatFormat::Llama2SysBos ? "<s>[INST] " : "[INST] ");
        }
        if (m.role == "system") {
            if (sys)
                ss << "<<SYS>>\n" << c << "\n<</SYS>>\n\n";
            else
                ss << c << "\n";
        } else if (m.role == "user") {
            ss << c << " [/INST]";
        } else {
            ss << c << "</s>";
            in_turn = false;
        }
    }
}

// Gemma has no system turn: the system text opens the next user turn.
void write_gemma(std::ostream& ss, const std::vector<ChatMessage>& messages, bool add_assistant) {
    std::string system;
    for (const auto& m : messages) {
        if (m.role == "system") {
            system += trim(m.content);
            continue;
        }
        const std::string role = m.role == "assistant" ? "model" : m.role;
        ss << "<start_of_turn>" << role << "\n";
        if (!system.empty() && role != "model") {
            ss << system << "\n\n";
            system.clear();
        }
        ss << trim(m.content) << "<end_of_turn>\n";
    }
    if (add_assistant) ss << "<start_of_turn>model\n";
}

// Formats whose every turn is `open role sep content close`.
void write_tagged(std::ostream& ss, const std::vector<ChatMessage>& messages, bool add_assistant,
                  const char* open, const char* sep, const char* close, bool trimmed) {
    for (const auto& m : messages)
        ss << open << m.role << sep << (trimmed ? trim(m.content) : m.content) << close;
    if (add_assistant) ss << open << "assistant" << sep;
}

using json = nlohmann::ordered_json;

// A call's arguments as the templates' `arguments | tojson` shows them: the object, or (text
// that is not JSON) the text as a JSON string.
std::string arguments_json(const std::string& args) {
    json j = json::parse(args, nullptr, false);
    if (j.is_discarded()) j = args;
    return py_json_dumps(j);
}

json tool_json(const std::string& text) {
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
        fail("chat template: a tool definition is not a JSON object");
    return j;
}

// Qwen2.5's (and Hermes 2 Pro's) tool block, for the system turn.
std::string hermes_tools(const std::vector<std::string>& tools) {
    std::string s =
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
        "provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const auto& t : tools) {
        s += '\n';
        s += py_json_dumps(tool_json(t));
    }
    return s +
           "\n</tools>\n\nFor each function call, return a json object with function name and "
           "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
           "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
}

std::string hermes_call(const ChatToolCall& c) {
    return "<tool_call>\n{\"name\": \"" + c.name +
           "\", \"arguments\": " + arguments_json(c.arguments) + "}\n</tool_call>";
}

// ChatML as Qwen2.5's template writes it (its default system prompt only for Qwen25).
void write_qwen(std::ostream& ss, ChatFormat f, const std::vector<ChatMessage>& messages,
                bool add_assistant, const std::vector<std::string>& tools) {
    const std::string fallback =
        f == ChatFormat::Qwen25
            ? "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
            : "";
    const bool has_system = !messages.empty() && messages[0].role == "system";
    const std::string system = has_system ? messages[0].content : fallback;
    if (!tools.empty())
        ss << "<|im_start|>system\n" << system << "\n\n" << hermes_tools(tools) << "<|im_end|>\n";
    else if (has_system || !fallback.empty())
        ss << "<|im_start|>system\n" << system << "<|im_end|>\n";
    for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "tool") {
            if (i == 0 || messages[i - 1].role != "tool") ss << "<|im_start|>user";
            ss << "\n<tool_response>\n" << m.content << "\n</tool_response>";
            if (i + 1 == messages.size() || messages[i + 1].role != "tool") ss << "<|im_end|>\n";
        } else if (m.role == "assistant" && !m.tool_calls.empty()) {
            ss << "<|im_start|>assistant";
            if (!m.content.empty()) ss << "\n" << m.content;
            for (const auto& c : m.tool_calls) ss << "\n" << hermes_call(c);
            ss << "<|im_end|>\n";
        } else {
            ss << "<|im_start|>" << m.role << "\n" << m.content << "<|im_end|>\n";
        }
    }
    if (add_assistant) ss << "<|im_start|>assistant\n";
}

std::string today() {  // as strftime_now("%d %b %Y") in transformers: the local date
    return format_now("%d %b %Y", false);
}

// Llama 3.1-3.3: a system turn with the knowledge cut-off and the date; tools in the first user
// turn; a call is the whole answer, `{"name": .., "parameters": ..}`; results as ipython turns.
void write_llama31(std::ostream& ss, ChatFormat f, const std::vector<ChatMessage>& messages,
                   bool add_assistant, const std::vector<std::string>& tools) {
    const auto header = [&](const std::string& role) {
        ss << "<|start_header_id|>" << role << "<|end_header_id|>\n\n";
    };
    size_t i = 0;
    std::string system;
    if (!messages.empty() && messages[0].role == "system") system = trim(messages[i++].content);
    header("system");
    if (!tools.empty()) ss << "Environment: ipython\n";
    ss << "Cutting Knowledge Date: December 2023\nToday Date: "
       << (f == ChatFormat::Llama32 ? today() : "26 Jul 2024") << "\n\n"
       << system << "<|eot_id|>";
    if (!tools.empty()) {
        if (i == messages.size())
            fail("chat template llama3: tools need a first user message to go in");
        header("user");
        ss << "Given the following functions, please respond with a JSON for a function call with "
              "its proper arguments that best answers the given prompt.\n\nRespond in the format "
              "{\"name\": function name, \"parameters\": dictionary of argument name and its "
              "value}.Do not use variables.\n\n";
        for (const auto& t : tools) ss << py_json_dumps(tool_json(t), 4) << "\n\n";
        ss << trim(messages[i++].content) << "<|eot_id|>";
    }
    for (; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "tool") {
            header("ipython");  // the template shows a string result as a JSON string
            ss << py_json_dumps(json(m.content)) << "<|eot_id|>";
        } else if (!m.tool_calls.empty()) {
            if (m.tool_calls.size() != 1)
                fail("chat template llama3: this model only supports single tool-calls at once");
            header("assistant");
            ss << "{\"name\": \"" << m.tool_calls[0].name
               << "\", \"parameters\": " << arguments_json(m.tool_calls[0].arguments)
               << "}<|eot_id|>";
        } else {
            header(m.role);
            ss << trim(m.content) << "<|eot_id|>";
        }
    }
    if (add_assistant) header("assistant");
}

// Mistral Nemo (v3-Tekken): the system text joins the last user turn, when the conversation ends
// with one; tools come before the last user turn.
void write_mistral_nemo(std::ostream& ss, const std::vector<ChatMessage>& messages,
                        const std::vector<std::string>& tools) {
    const bool has_system = !messages.empty() && messages[0].role == "system";
    size_t last_user = messages.size();
    for (size_t i = 0; i < messages.size(); ++i)
        if (messages[i].role == "user") last_user = i;
    const auto check_id = [](const std::string& id) {
        if (id.size() != 9)
            fail("chat template mistral: tool call ids must be 9 characters, not '", id, "'");
    };
    for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user") {
            if (!tools.empty() && i == last_user) {
                ss << "[AVAILABLE_TOOLS][";
                for (size_t t = 0; t < tools.size(); ++t) {
                    ss << (t ? ", " : "") << "{\"type\": \"function\", \"function\": {";
                    const json fn = tool_json(tools[t]).value("function", json::object());
                    bool first = true;
                    for (auto it = fn.begin(); it != fn.end(); ++it) {
                        if (it.key() == "return") continue;
                        ss << (first ? "" : ", ") << "\"" << it.key() << "\": ";
                        if (it->is_string())  // unescaped, as the template concatenates it
                            ss << '"' << it->get<std::string>() << '"';
                        else
                            ss << py_json_dumps(*it);
                        first = false;
                    }
                    ss << "}}";
                }
                ss << "][/AVAILABLE_TOOLS]";
            }
            ss << "[INST]";
            if (i + 1 == messages.size() && has_system) ss << messages[0].content << "\n\n";
            ss << m.content << "[/INST]";
        } else if (!m.tool_calls.empty()) {
            ss << "[TOOL_CALLS][";
            for (size_t c = 0; c < m.tool_calls.size(); ++c) {
                check_id(m.tool_calls[c].id);
                ss << (c ? ", " : "") << "{\"name\": " << py_json_dumps(json(m.tool_calls[c].name))
                   << ", \"arguments\": " << arguments_json(m.tool_calls[c].arguments)
                   << ", \"id\": \"" << m.tool_calls[c].id << "\"}";
            }
            ss << "]</s>";
        } else if (m.role == "tool") {
            check_id(m.tool_call_id);
            ss << "[TOOL_RESULTS]{\"content\": " << m.content << ", \"call_id\": \""
               << m.tool_call_id << "\"}[/TOOL_RESULTS]";
        } else {
            ss << m.content << "</s>";
        }
    }
}

// Families without a tool format: Hermes text in their own turns.
std::vector<ChatMessage> with_hermes_tools(const std::vector<ChatMessage>& messages,
                                           const std::vector<std::string>& tools) {
    std::vector<ChatMessage> out;
    if (!tools.empty()) {
        if (!messages.empty() && messages[0].role == "system")
            out.push_back({"system", messages[0].content + "\n\n" + hermes_tools(tools)});
        else
            out.push_back({"system", hermes_tools(tools)});
    }
    for (size_t i = out.empty() ? 0 : (messages[0].role == "system" ? 1 : 0); i < messages.size();
         ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "tool") {
            const std::string r = "<tool_response>\n" + m.content + "\n</tool_response>";
            if (i > 0 && messages[i - 1].role == "tool")
                out.back().content += "\n" + r;
            else
                out.push_back({"user", r});
        } else if (!m.tool_calls.empty()) {
            std::string text = m.content;
            for (const auto& c : m.tool_calls) {
                if (!text.empty()) text += '\n';
                text += hermes_call(c);
            }
            out.push_back({"assistant", text});
        } else {
            out.push_back({m.role, m.content});
        }
    }
    return out;
}
}  // namespace

ToolSyntax tool_syntax(ChatFormat f) {
    switch (f) {
        case ChatFormat::Llama31:
        case ChatFormat::Llama32:
            return ToolSyntax::Llama;
        case ChatFormat::MistralV3Tekken:
            return ToolSyntax::Mistral;
        default:
            return ToolSyntax::Hermes;
    }
}

std::string apply_chat_template(ChatFormat f, const std::vector<ChatMessage>& in_messages,
                                bool add_assistant, const std::vector<std::string>& tools) {
    std::ostringstream ss;
    switch (f) {  // the families with a tool format of their own
        case ChatFormat::ChatML:
        case ChatFormat::Qwen25:
            write_qwen(ss, f, in_messages, add_assistant, tools);
            return ss.str();
        case ChatFormat::Llama31:
        case ChatFormat::Llama32:
            write_llama31(ss, f, in_messages, add_assistant, tools);
            return ss.str();
        case ChatFormat::MistralV3Tekken:
            write_mistral_nemo(ss, in_messages, tools);
            return ss.str();
        default:
            break;
    }
    const std::vector<ChatMessage> messages = with_hermes_tools(in_messages, tools);
    switch (f) {
        case ChatFormat::MistralV7:
            write_mistral_v7(ss, messages);
            break;
        case ChatFormat::MistralV1:
        case ChatFormat::MistralV3:
            write_mistral(ss, f, messages);
            break;
        case ChatFormat::Llama2:
        case ChatFormat::Llama2Sys:
        case ChatFormat::Llama2SysBos:
        case ChatFormat::Llama2SysStrip:
            write_llama2(ss, f, messages);
            break;
        case ChatFormat::Llama3:
            write_tagged(ss, messages, add_assistant, "<|start_header_id|>",
                         "<|end_header_id|>\n\n", "<|eot_id|>", true);
            break;
        case ChatFormat::Gemma:
            write_gemma(ss, messages, add_assistant);
            break;
        case ChatFormat::Phi3:
            write_tagged(ss, messages, add_assistant, "<|", "|>\n", "<|end|>\n", false);
            break;
        case ChatFormat::Zephyr:
            write_tagged(ss, messages, add_assistant, "<|", "|>\n", "<|endoftext|>\n", false);
            break;
        default:
            break;
    }
    return ss.str();
}

}  // namespace syslm::tokenizer
