// The OpenAI API's requests: parsing /v1/completions and /v1/chat/completions bodies into engine
// requests (with every field checked: wrong types, out-of-range values and unknown models are
// ApiErrors with the HTTP status and OpenAI error type to answer with). The response objects and
// streaming chunks are built in openai_response.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "infer/generator.hpp"
#include "serve/tool_calls.hpp"
#include "tokenizer/chat_template.hpp"

namespace syslm::serve {

struct ApiError {
    int status;        // HTTP status
    std::string type;  // "invalid_request_error", "authentication_error", ...
    std::string message;
    std::string param;
    std::string code;
};

nlohmann::ordered_json error_body(const ApiError& e);

// The text of a JSON answer. Model text may hold invalid UTF-8: it is replaced, never thrown.
std::string dump(const nlohmann::ordered_json& j);
int64_t unix_time();

// A body's optional field: `def` when absent or null; a wrong type or a value outside [lo, hi]
// is a 400 ApiError naming the field.
double number_field(const nlohmann::ordered_json& body, const char* key, double def, double lo,
                    double hi);
int64_t integer_field(const nlohmann::ordered_json& body, const char* key, int64_t def, int64_t lo,
                      int64_t hi);

struct ApiLimits {
    int max_tokens = 4096;  // per request (and <= the context)
    int max_n = 8;          // choices per request
};

// One parsed request: the prompt(s) as token ids and the generation parameters.
struct ParsedRequest {
    bool chat = false;
    std::vector<std::vector<int32_t>> prompts;  // completions may send several
    infer::GenerationParams params;
    int n = 1;
    bool stream = false, include_usage = false;
    bool echo = false;  // completions: prompt text before the completion
    std::vector<std::string> prompt_texts;
    ToolRequest tools;  // chat: the functions the model may call
};

// The LoRA adapter a request's "model" names: -1 for the served model itself, the adapter's
// index (EngineConfig::loras) for "<model>:<adapter>"; otherwise a 404 ApiError listing the names.
int adapter_of_model(const std::string& name, const std::string& model_name,
                     const infer::Generator& engine);

// Throws ApiError. `model_name`: the one model served ("model" may be omitted or must match).
ParsedRequest parse_completion(const nlohmann::ordered_json& body, const std::string& model_name,
                               const infer::Generator& engine, const ApiLimits& limits);
ParsedRequest parse_chat(const nlohmann::ordered_json& body, const std::string& model_name,
                         const infer::Generator& engine, tokenizer::ChatFormat format,
                         const ApiLimits& limits);

// The "messages" of a chat request (roles system / developer / user / assistant / tool, string or
// text-part content, an assistant's tool_calls, a tool's tool_call_id); throws ApiError.
std::vector<tokenizer::ChatMessage> parse_messages(const nlohmann::ordered_json& body);
// The prompt of a chat request's messages and tool definitions; throws ApiError (a conversation
// the family's template refuses is a 400 naming why).
std::string chat_prompt(const nlohmann::ordered_json& body, tokenizer::ChatFormat format,
                        const ToolRequest& tools);

}  // namespace syslm::serve
