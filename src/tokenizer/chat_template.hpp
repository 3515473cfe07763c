// Chat templates: the prompt text of a conversation for the common model families, recognised
// from the GGUF's `tokenizer.chat_template` (a Jinja template, matched by the markers each family
// uses, as llama.cpp does) or named explicitly. Not a Jinja interpreter: the families' formats
// are written out here. An unknown template is an error naming the choices.
//
// Tools (OpenAI's function definitions) and tool calls render in the family's own format where it
// has one: Qwen2.5's (Hermes: <tools> in the system turn, <tool_call> / <tool_response>), Llama
// 3.1-3.3's (JSON definitions in the first user turn, `{"name", "parameters"}` calls, ipython
// results) and Mistral Nemo's ([AVAILABLE_TOOLS], [TOOL_CALLS], [TOOL_RESULTS]). The other
// families get the Hermes text inside their own turns (tools in the system prompt, calls and
// results as tagged text), as Hermes-2-Pro did on Llama 3.
#pragma once

#include <string>
#include <vector>

namespace syslm::tokenizer {

struct ChatToolCall {
    std::string id, name;
    std::string arguments;  // a JSON object's text
};

struct ChatMessage {
    std::string role;  // "system", "user", "assistant", "tool"
    std::string content;
    std::vector<ChatToolCall> tool_calls = {};  // an assistant's calls
    std::string tool_call_id = {};              // a tool message: the call it answers
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
    Llama31,  // Llama 3.1 and 3.3: a system turn with the knowledge cut-off and a fixed date
    Llama32,  // Llama 3.2: the same with today's date
    Qwen25,   // ChatML with Qwen2.5's default system prompt and its tool format
    Gemma,
    Phi3,
    Zephyr,
};

// "chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1",
// "mistral-v3", "mistral-v3-tekken", "mistral-v7", "llama3", "llama3.1", "llama3.2", "qwen2.5",
// "gemma", "phi3", "zephyr".
const std::vector<std::string>& chat_format_names();
// A name from the list above, or a Jinja template recognised by its markers; Error otherwise.
ChatFormat chat_format(const std::string& name_or_template);
std::string chat_format_name(ChatFormat f);

// How a family writes tool calls in its answers (serve/tool_calls parses and constrains them).
enum class ToolSyntax {
    Hermes,   // <tool_call>\n{"name": .., "arguments": {..}}\n</tool_call>, one or more
    Llama,    // {"name": .., "parameters": {..}}, the whole answer, one call
    Mistral,  // [TOOL_CALLS][{"name": .., "arguments": {..}}, ...]
};
ToolSyntax tool_syntax(ChatFormat f);

// The prompt text; add_assistant: end with the opening of the assistant's turn. `tools`: the
// request's tool definitions as JSON texts ({"type": "function", "function": {...}}), in order.
// A conversation the family's template refuses (Llama: several calls in one turn; Mistral: call
// ids that are not 9 characters) is an Error.
std::string apply_chat_template(ChatFormat f, const std::vector<ChatMessage>& messages,
                                bool add_assistant = true,
                                const std::vector<std::string>& tools = {});

}  // namespace syslm::tokenizer
