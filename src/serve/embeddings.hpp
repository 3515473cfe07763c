// /v1/embeddings (OpenAI's): each input (a string, a list of strings, a list of token ids, or a
// list of those) through the model without sampling; the final norm's hidden states pooled (mean
// over the input's positions, or its last position) and L2-normalised, as OpenAI's are.
//
// Each request runs on its HTTP worker with a context of its own, one request at a time (the
// model is shared, read-only); it competes with the engine's steps for the cores rather than
// joining them.
#pragma once

#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "infer/generator.hpp"

namespace syslm::serve {

enum class Pooling { Mean, Last };
Pooling pooling_from_name(const std::string& name);  // "mean" / "last"; throws Error otherwise

class Embedder {
public:
    Embedder(const infer::Generator& engine, Pooling pooling) : engine_(engine), pooling_(pooling) {}
    // The response body for a request body; throws ApiError (400) for a malformed one.
    nlohmann::ordered_json embed(const nlohmann::ordered_json& body, const std::string& model_name);

private:
    const infer::Generator& engine_;
    Pooling pooling_;
    std::mutex mu_;
};

}  // namespace syslm::serve
