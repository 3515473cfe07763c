#include "serve/embeddings.hpp"

#include <cmath>

#include "core/error.hpp"
#include "serve/openai_api.hpp"

namespace syslm::serve {

using json = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& message) {
    throw ApiError{400, "invalid_request_error", message, "input", ""};
}

// The request's inputs as token lists.
std::vector<std::vector<int32_t>> inputs(const json& body, const infer::Generator& engine) {
    if (!body.is_object() || !body.contains("input")) bad("'input' is required");
    const json& in = body["input"];
    const auto& tok = engine.tokenizer();
    const int V = engine.model().hparams().n_vocab;
    const auto ids = [&](const json& a) {
        std::vector<int32_t> out;
        for (const json& t : a) {
            if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= V)
                bad("token ids must be integers in [0, " + std::to_string(V) + ")");
            out.push_back(t.get<int32_t>());
        }
        return out;
    };
    std::vector<std::vector<int32_t>> out;
    if (in.is_string()) {
        out.push_back(tok.encode(in.get<std::string>(), true, false));
    } else if (in.is_array() && !in.empty() && in[0].is_number_integer()) {
        out.push_back(ids(in));
    } else if (in.is_array() && !in.empty()) {
        for (const json& x : in) {
            if (x.is_string())
                out.push_back(tok.encode(x.get<std::string>(), true, false));
            else if (x.is_array())
                out.push_back(ids(x));
            else
                bad("'input' must be a string, a list of strings, or token ids");
        }
    } else {
        bad("'input' must be a string, a list of strings, or token ids");
    }
    if (out.size() > 2048) bad("at most 2048 inputs per request");
    for (const auto& t : out) {
        if (t.empty()) bad("an input is empty");
        if (static_cast<int64_t>(t.size()) > engine.n_ctx())
            throw ApiError{400, "invalid_request_error",
                           "an input has " + std::to_string(t.size()) +
                               " tokens; the context size is " +
                               std::to_string(engine.n_ctx()),
                           "input", "context_length_exceeded"};
    }
    return out;
}

// Floats as base64 of their little-endian bytes (x86 is little-endian), as OpenAI sends them.
std::string to_base64(const std::vector<float>& v) {
    static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const auto* b = reinterpret_cast<const uint8_t*>(v.data());
    const size_t n = v.size() * sizeof(float);
    std::string out;
    out.reserve((n + 2) / 3 * 4);
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t x = uint32_t{b[i]} << 16 | (i + 1 < n ? uint32_t{b[i + 1]} << 8 : 0) |
                           (i + 2 < n ? uint32_t{b[i + 2]} : 0);
        out += abc[x >> 18 & 63];
        out += abc[x >> 12 & 63];
        out += i + 1 < n ? abc[x >> 6 & 63] : '=';
        out += i + 2 < n ? abc[x & 63] : '=';
    }
    return out;
}

}  // namespace

Pooling pooling_from_name(const std::string& name) {
    if (name == "mean") return Pooling::Mean;
    if (name == "last") return Pooling::Last;
    fail("pooling '", name, "': expected mean or last");
}

json Embedder::embed(const json& body, const std::string& model_name) {
    // "<model>:<adapter>" embeds with that LoRA adapter (scale 1).
    const model::LoraAdapter* adapter = nullptr;
    if (body.is_object() && body.contains("model") && body["model"].is_string())
        if (const int id = adapter_of_model(body["model"], model_name, engine_); id >= 0)
            adapter = engine_.loras()[static_cast<size_t>(id)].adapter.get();
    bool base64 = false;  // the openai client asks for base64: the floats' little-endian bytes
    if (body.is_object() && body.contains("encoding_format") &&
        !body["encoding_format"].is_null()) {
        const json& f = body["encoding_format"];
        if (f != "float" && f != "base64")
            throw ApiError{400, "invalid_request_error",
                           "encoding_format must be 'float' or 'base64'", "encoding_format", ""};
        base64 = f == "base64";
    }
    const auto texts = inputs(body, engine_);
    size_t longest = 0, total = 0;
    for (const auto& t : texts) {
        longest = std::max(longest, t.size());
        total += t.size();
    }
    const int64_t E = engine_.model().hparams().n_embd;
    json data = json::array();
    std::lock_guard lk(mu_);
    // F32 keys and values: one prefill per input, so exactness costs little memory.
    model::Context ctx(engine_.model(), static_cast<int>(longest), engine_.threads(),
                       static_cast<int>(std::min<size_t>(longest, 512)), DType::F32);
    if (adapter) ctx.set_loras({{adapter, 1.0f, {}}});
    for (size_t i = 0; i < texts.size(); ++i) {
        ctx.reset();
        const std::vector<float> h = ctx.hidden_states(texts[i]);
        const auto T = static_cast<int64_t>(texts[i].size());
        std::vector<double> v(static_cast<size_t>(E), 0.0);
        const int64_t first = pooling_ == Pooling::Last ? T - 1 : 0;
        for (int64_t t = first; t < T; ++t)
            for (int64_t e = 0; e < E; ++e) v[e] += h[static_cast<size_t>(t * E + e)];
        double norm = 0;
        for (double x : v) norm += x * x;
        norm = std::sqrt(norm);
        std::vector<float> out(v.size());
        for (size_t e = 0; e < v.size(); ++e)
            out[e] = static_cast<float>(norm > 0 ? v[e] / norm : 0.0);
        if (base64)
            data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", to_base64(out)}});
        else
            data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", out}});
    }
    return {{"object", "list"},
            {"data", data},
            {"model", model_name},
            {"usage", {{"prompt_tokens", total}, {"total_tokens", total}}}};
}

}  // namespace syslm::serve
