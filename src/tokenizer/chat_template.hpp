// Chat templates: the prompt text of a conversation for the common model families, recognised
// from the GGUF's `tokenizer.chat_template` (a Jinja template, matched by the markers each family
// uses, as llama.cpp does) or named explicitly. Not a Jinja interpreter: the families' formats
// are written out here. An unknown template is an error naming the choices.
#pragma once

#include <string>
#include <vector>

namespace syslm::tokenizer {

struct ChatMessage {
    std::string role;  // "system", "user", "assistant"
    std::string content;
};

enum class ChatFormat {
    ChatML,
    Llama2,        // [INST] ... [/INST], system folded into the first turn without <<SYS>>
    Llama2Sys,     // with <<SYS>> ... <</SYS>>
    Llama2SysBos,  // and <s> before every later turn
    Llama2SysStrip,
    MistralV1,
    MistralV3,
    MistralV3Tekken,
    MistralV7,
    Llama3,
    Gemma,
    Phi3,
    Zephyr,
};

// "chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1",
// "mistral-v3", "mistral-v3-tekken", "mistral-v7", "llama3", "gemma", "phi3", "zephyr".
const std::vector<std::string>& chat_format_names();
// A name from the list above, or a Jinja template recognised by its markers; Error otherwise.
ChatFormat chat_format(const std::string& name_or_template);
std::string chat_format_name(ChatFormat f);

// The prompt text; add_assistant: end with the opening of the assistant's turn.
std::string apply_chat_template(ChatFormat f, const std::vector<ChatMessage>& messages,
                                bool add_assistant = true);

}  // namespace syslm::tokenizer
