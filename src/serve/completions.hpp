// /v1/completions and /v1/chat/completions: one HTTP request's choices (prompts x n) submitted
// to the engine, then answered whole (one JSON object once every choice is done) or as a
// server-sent-event stream (a chunk per event, usage, `data: [DONE]`). The handler holds its
// worker for the whole generation, waiting on the engine's events; a client that goes away
// (the transport says so) cancels the engine requests, whose pages are freed at the next step.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "infer/generator.hpp"
#include "serve/http_responder.hpp"
#include "serve/openai_api.hpp"

namespace syslm::serve {

struct CompletionContext {
    std::shared_ptr<infer::Generator> engine;
    std::string model_name;
    tokenizer::ChatFormat format;
    ApiLimits limits;
};

// Throws ApiError for a request refused before it runs: a bad field (400), an unknown model
// (404), a full queue (429), a server shutting down (503).
void serve_completion(const CompletionContext& ctx, const nlohmann::ordered_json& body, bool chat,
                      http::Responder& res);
// /v1/responses (OpenAI's Responses API, text in and out): instructions and input as a chat's
// messages; the answer as one response object, or streamed as its events (response.created,
// output_item / content_part added, output_text.delta..., the done events, then
// response.completed, or response.incomplete at max_output_tokens).
void serve_response(const CompletionContext& ctx, const nlohmann::ordered_json& body, http::Responder& res);

}  // namespace syslm::serve
