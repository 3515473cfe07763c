#include "serve/openapi.hpp"

namespace syslm::serve {

using json = nlohmann::ordered_json;

namespace {

// The sampling fields completions and chat completions share, with the server's limits.
json sampling_properties(const ApiLimits& limits) {
    return {
        {"max_tokens", {{"type", "integer"}, {"minimum", 1}, {"maximum", limits.max_tokens}}},
        {"temperature", {{"type", "number"}, {"minimum", 0}, {"maximum", 2}}},
        {"top_p", {{"type", "number"}, {"minimum", 0}, {"maximum", 1}}},
        {"top_k", {{"type", "integer"}, {"minimum", 0}, {"maximum", 1000}}},
        {"min_p", {{"type", "number"}, {"minimum", 0}, {"maximum", 1}}},
        {"presence_penalty", {{"type", "number"}, {"minimum", -2}, {"maximum", 2}}},
        {"frequency_penalty", {{"type", "number"}, {"minimum", -2}, {"maximum", 2}}},
        {"n", {{"type", "integer"}, {"minimum", 1}, {"maximum", limits.max_n}}},
        {"stream", {{"type", "boolean"}}},
        {"seed", {{"type", "integer"}}},
        {"ignore_eos", {{"type", "boolean"}}},
        {"priority", {{"type", "integer"}, {"minimum", -1000000}, {"maximum", 1000000}}},
        {"grammar", {{"type", "string"}}},
        {"json_schema", {{"type", "object"}}},
        {"regex", {{"type", "string"}}},
        {"lora",
         {{"type", "array"},
          {"items",
           {{"type", "object"},
            {"required", {"id"}},
            {"properties",
             {{"id", {{"type", "integer"}, {"minimum", 0}}},
              {"scale", {{"type", "number"}, {"minimum", -100}, {"maximum", 100}}}}}}}}},
        {"response_format",
         {{"type", "object"},
          {"required", {"type"}},
          {"properties",
           {{"type", {{"type", "string"}, {"enum", {"text", "json_object", "json_schema"}}}},
            {"json_schema", {{"type", "object"}}}}}}},
        {"stop",
         {{"oneOf",
           {{{"type", "string"}},
            {{"type", "array"}, {"items", {{"type", "string"}}}, {"maxItems", 4}}}}}},
        {"model", {{"type", "string"}}},
    };
}

json completion_schema(const json& sampling, const json& token) {
    json completion = {{"type", "object"}, {"required", {"prompt"}}, {"properties", sampling}};
    completion["properties"]["prompt"] = {
        {"oneOf",
         {{{"type", "string"}},
          {{"type", "array"}, {"items", {{"type", "string"}}}, {"minItems", 1}},
          {{"type", "array"}, {"items", token}, {"minItems", 1}}}}};
    completion["properties"]["logprobs"] = {{"type", "integer"}, {"minimum", 0}, {"maximum", 5}};
    completion["properties"]["echo"] = {{"type", "boolean"}};
    return completion;
}

json chat_schema(const json& sampling) {
    const json message = {
        {"type", "object"},
        {"required", {"role", "content"}},
        {"properties",
         {{"role", {{"type", "string"}, {"enum", {"system", "user", "assistant", "developer"}}}},
          {"content", {{"type", "string"}}}}}};
    json chat = {{"type", "object"}, {"required", {"messages"}}, {"properties", sampling}};
    chat["properties"]["messages"] = {{"type", "array"}, {"items", message}, {"minItems", 1}};
    chat["properties"]["logprobs"] = {{"type", "boolean"}};
    chat["properties"]["top_logprobs"] = {{"type", "integer"}, {"minimum", 0}, {"maximum", 20}};
    const json name = {{"type", "string"}, {"pattern", "^[a-zA-Z0-9_-]{1,64}$"}};
    const json function = {
        {"type", "object"},
        {"required", {"name"}},
        {"properties",
         {{"name", name}, {"description", {{"type", "string"}}}, {"parameters", {{"type", "object"}}}}}};
    const json tool = {{"type", "object"},
                       {"required", {"type", "function"}},
                       {"properties", {{"type", {{"type", "string"}, {"enum", {"function"}}}},
                                       {"function", function}}}};
    chat["properties"]["tools"] = {{"type", "array"}, {"items", tool}};
    chat["properties"]["tool_choice"] = {
        {"oneOf",
         {{{"type", "string"}, {"enum", {"none", "auto", "required"}}},
          {{"type", "object"},
           {"required", {"type", "function"}},
           {"properties", {{"type", {{"type", "string"}, {"enum", {"function"}}}},
                           {"function", {{"type", "object"},
                                         {"required", {"name"}},
                                         {"properties", {{"name", name}}}}}}}}}}};
    chat["properties"]["parallel_tool_calls"] = {{"type", "boolean"}};
    return chat;
}

json embeddings_schema(const json& token) {
    return {{"type", "object"},
            {"required", {"input"}},
            {"properties",
             {{"input",
               {{"oneOf",
                 {{{"type", "string"}},
                  {{"type", "array"}, {"items", {{"type", "string"}}}, {"minItems", 1}},
                  {{"type", "array"}, {"items", token}, {"minItems", 1}},
                  {{"type", "array"},
                   {"items", {{"type", "array"}, {"items", token}, {"minItems", 1}}},
                   {"minItems", 1}}}}}},
              {"model", {{"type", "string"}}},
              {"encoding_format", {{"type", "string"}, {"enum", {"float", "base64"}}}}}}};
}

json responses_schema(const json& sampling, const json& chat) {
    return {{"type", "object"},
            {"required", {"input"}},
            {"properties",
             {{"input",
               {{"oneOf",
                 {{{"type", "string"}},
                  {{"type", "array"},
                   {"items", chat["properties"]["messages"]["items"]},
                   {"minItems", 1}}}}}},
              {"instructions", {{"type", "string"}}},
              {"max_output_tokens", sampling["max_tokens"]},
              {"temperature", sampling["temperature"]},
              {"top_p", sampling["top_p"]},
              {"stream", {{"type", "boolean"}}},
              {"model", {{"type", "string"}}}}}};
}

}  // namespace

nlohmann::ordered_json openapi_description(const ApiLimits& limits, int n_vocab) {
    json error_schema = {{"type", "object"},
                         {"required", {"error"}},
                         {"properties", {{"error", {{"type", "object"}}}}}};
    json error = {{"description", "OpenAI error object"}};
    error["content"]["application/json"]["schema"] = error_schema;
    const json ok = {{"description", "OK"}};
    auto post = [&](const char* summary, json schema) {
        return json{{"post",
                     {{"summary", summary},
                      {"requestBody",
                       {{"required", true},
                        {"content", {{"application/json", {{"schema", std::move(schema)}}}}}}},
                      {"responses",
                       {{"200", ok}, {"400", error}, {"404", error}, {"413", error},
                        {"429", error}}}}}};
    };
    auto get = [&](const char* summary) {
        return json{{"get", {{"summary", summary}, {"responses", {{"200", ok}, {"503", ok}}}}}};
    };
    const json token = {{"type", "integer"}, {"minimum", 0}, {"maximum", n_vocab - 1}};
    const json sampling = sampling_properties(limits);
    const json completion = completion_schema(sampling, token);
    const json chat = chat_schema(sampling);
    return {
        {"openapi", "3.0.3"},
        {"info", {{"title", "syslm serve"}, {"version", "1"}}},
        {"paths",
         {{"/v1/completions", post("Text completion (OpenAI)", completion)},
          {"/v1/chat/completions", post("Chat completion (OpenAI)", chat)},
          {"/v1/embeddings", post("Embeddings: pooled, normalised final hidden states (OpenAI)",
                                  embeddings_schema(token))},
          {"/v1/responses",
           post("Responses: text in and out (OpenAI)", responses_schema(sampling, chat))},
          {"/tokenize",
           post("Text to token ids",
                {{"type", "object"},
                 {"required", {"content"}},
                 {"properties",
                  {{"content", {{"type", "string"}}}, {"add_special", {{"type", "boolean"}}}}}})},
          {"/detokenize", post("Token ids to text",
                               {{"type", "object"},
                                {"required", {"tokens"}},
                                {"properties", {{"tokens", {{"type", "array"}, {"items", token}}}}}})},
          {"/apply-template",
           post("The prompt a chat request becomes",
                {{"type", "object"},
                 {"required", {"messages"}},
                 {"properties", {{"messages", chat["properties"]["messages"]}}}})},
          {"/v1/models", get("The served model, and the model with each LoRA adapter")},
          {"/lora-adapters", get("The LoRA adapters requests may pick (llama-server's)")},
          {"/health", get("Readiness")},
          {"/metrics", get("Prometheus metrics")},
          {"/stats", get("Live figures as JSON")}}}};
}

}  // namespace syslm::serve
