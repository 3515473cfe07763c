#include "tokenizer/chat_template.hpp"

#include <cctype>
#include <sstream>

#include "core/error.hpp"

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
        return ChatFormat::ChatML;
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
    if (has("<|start_header_id|>") && has("<|end_header_id|>")) return ChatFormat::Llama3;
    std::string names;
    for (const auto& n : chat_format_names()) names += (names.empty() ? "" : ", ") + n;
    fail("chat template not recognised (", t.size(), " characters", t.empty() ? ": none in the model" : "",
         "); choose one of: ", names);
}

namespace {

// Mistral v1 / v3 / v3-Tekken: turns open with [INST], the system text leads the user's.
void write_mistral(std::ostream& ss, ChatFormat f, const std::vector<ChatMessage>& messages) {
    const std::string lead = f == ChatFormat::MistralV1 ? " " : "";
    const std::string trail = f == ChatFormat::MistralV3Tekken ? "" : " ";
    bool in_turn = false;
    for (const auto& m : messages) {
        if (!in_turn) {
            ss << lead << "[INST]" << trail;
            in_turn = true;
        }
        if (m.role == "system") {
            ss << m.content << "\n\n";
        } else if (m.role == "user") {
            ss << m.content << lead << "[/INST]";
        } else {
            ss << trail << (f == ChatFormat::MistralV3 ? trim(m.content) : m.content) << "</s>";
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

}  // namespace

std::string apply_chat_template(ChatFormat f, const std::vector<ChatMessage>& messages,
                                bool add_assistant) {
    std::ostringstream ss;
    switch (f) {
        case ChatFormat::ChatML:
            write_tagged(ss, messages, add_assistant, "<|im_start|>", "\n", "<|im_end|>\n", false);
            break;
        case ChatFormat::MistralV7:
            write_mistral_v7(ss, messages);
            break;
        case ChatFormat::MistralV1:
        case ChatFormat::MistralV3:
        case ChatFormat::MistralV3Tekken:
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
    }
    return ss.str();
}

}  // namespace syslm::tokenizer
