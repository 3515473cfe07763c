// The server's OpenAPI 3.0 description (GET /openapi.json), with the configured limits
// (max_tokens, n) as the schema's bounds, so tools such as schemathesis can generate requests.
#pragma once

#include <nlohmann/json.hpp>

#include "serve/openai_api.hpp"

namespace syslm::serve {

nlohmann::ordered_json openapi_description(const ApiLimits& limits, int n_vocab);

}  // namespace syslm::serve
