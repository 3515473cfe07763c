// The OpenAI API's response objects for /v1/completions and /v1/chat/completions: the whole
// answer (`chat.completion` / `text_completion` with choices, logprobs and usage) once every
// choice is done, and the streaming chunks (`chat.completion.chunk` / `text_completion`, a role
// chunk first per chat choice, then `data: [DONE]`). Engine refusals map to HTTP statuses here.
// The requests are parsed in openai_api.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "infer/generator.hpp"
#include "serve/openai_api.hpp"

namespace syslm::serve {

// One choice's events so far.
struct ChoiceResult {
    std::string text;
    std::vector<infer::Event> tokens;  // for logprobs
    infer::FinishReason finish = infer::FinishReason::Stop;
    infer::Refusal error;
    int64_t n_prompt = 0, n_generated = 0;
    std::string fallback;  // infer::Event::fallback
    bool done = false;
};

// What every response object of one request carries.
struct Envelope {
    std::string id, model;
    int64_t created;
    bool chat;
};

// The answer to a request the engine refused or ended in an error: each kind its HTTP status.
ApiError api_error(const infer::Refusal& r);

nlohmann::ordered_json usage(const std::vector<ChoiceResult>& choices, size_t n_per_prompt);

// The whole answer, once every choice is done: (200, the object), or a choice's error and its
// status (400 when the KV pool could not hold the request).
std::pair<int, nlohmann::ordered_json> whole_response(const std::vector<ChoiceResult>& choices,
                                                      const ParsedRequest& pr, const Envelope& env,
                                                      const tokenizer::Tokenizer& tok);

// The SSE chunks of one request, event by event; an error object for a choice that failed.
class SseChunks {
public:
    // tools: a chat request's tools, whose calls stream as tool_calls deltas (null: none).
    SseChunks(const Envelope& env, size_t n_choices, int logprobs, const tokenizer::Tokenizer& tok,
              const ToolRequest* tools = nullptr);

    std::string event(int index, const infer::Event& e);
    // After the last event: the usage object when asked for, then [DONE].
    std::string end(const nlohmann::ordered_json* usage) const;

private:
    std::string chunk(nlohmann::ordered_json choice) const;
    // A text piece (content delta / text) or, with `finish`, a choice's last chunk (with
    // `fallback`: Event::fallback).
    std::string piece(int index, const std::string& text, nlohmann::ordered_json lp,
                      nlohmann::ordered_json finish, const std::string& fallback = {}) const;
    std::string tool_piece(int index, const ToolDelta& d) const;

    const Envelope& env_;
    int logprobs_;
    const tokenizer::Tokenizer& tok_;
    std::vector<bool> started_;
    std::vector<ToolCallParser> parsers_;  // one per choice, with tools
};

}  // namespace syslm::serve
