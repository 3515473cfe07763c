#include "serve/openai_api.hpp"

#include <chrono>
#include <random>

#include "core/error.hpp"
#include "grammar/gbnf.hpp"
#include "grammar/json.hpp"
#include "grammar/json_schema.hpp"
#include "grammar/regex.hpp"

namespace syslm::serve {

using json = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
    throw ApiError{400, "invalid_request_error", message, param, ""};
}

// body[key] when present and not null, checked to be of the kind `pred` accepts.
template <typename Pred>
const json* field(const json& body, const char* key, Pred pred, const char* kind) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return nullptr;
    if (!pred(*it)) bad(key, std::string("'") + key + "' must be " + kind);
    return &*it;
}

bool boolean(const json& body, const char* key, bool def) {
    const json* v = field(body, key, [](const json& j) { return j.is_boolean(); }, "a boolean");
    return v ? v->get<bool>() : def;
}

// "model": the served model's name, or "<name>:<adapter>" for one of its LoRA adapters (scale
// 1); llama-server's "lora": [{"id", "scale"}] adds adapters by index. A later choice of the same
// adapter replaces an earlier one's scale.
void model_and_lora(const json& body, const std::string& model_name, const infer::Generator& engine,
                    infer::GenerationParams& params) {
    const auto choose = [&](int id, float scale) {
        for (auto& c : params.lora)
            if (c.adapter == id) {
                c.scale = scale;
                return;
            }
        params.lora.push_back({id, scale});
    };
    if (const json* m = field(body, "model", [](const json& j) { return j.is_string(); },
                              "a string"))
        if (const int id = adapter_of_model(m->get<std::string>(), model_name, engine); id >= 0)
            choose(id, 1.0f);
    const auto& loras = engine.loras();
    const json* lora = field(body, "lora", [](const json& j) { return j.is_array(); },
                             "an array of {\"id\": ..., \"scale\": ...}");
    if (!lora) return;
    for (const json& l : *lora) {
        if (!l.is_object() || !l.contains("id") || !l["id"].is_number_integer())
            bad("lora", "each 'lora' entry needs an integer 'id'");
        const int64_t id = l["id"].get<int64_t>();
        if (id < 0 || id >= static_cast<int64_t>(loras.size()))
            bad("lora", "LoRA adapter id " + std::to_string(id) + ": this server has " +
                            std::to_string(loras.size()) + " (GET /lora-adapters lists them)");
        const double scale = number_field(l, "scale", 1.0, -100, 100);
        choose(static_cast<int>(id), static_cast<float>(scale));
    }
}

// llama-server's `grammar` (GBNF) and OpenAI's `response_format`: the grammar the output keeps to.
std::shared_ptr<const grammar::Grammar> output_grammar(const json& body) {
    const json* gbnf = field(body, "grammar", [](const json& j) { return j.is_string(); },
                             "a string (GBNF)");
    const json* format = field(body, "response_format", [](const json& j) { return j.is_object(); },
                               "an object");
    const json* regex = field(body, "regex", [](const json& j) { return j.is_string(); },
                              "a string (a regular expression)");
    const json* schema = field(body, "json_schema", [](const json& j) {
        return j.is_object() || j.is_boolean();
    }, "an object (a JSON Schema)");
    if ((gbnf != nullptr) + (format != nullptr) + (schema != nullptr) + (regex != nullptr) > 1)
        bad("grammar",
            "give one of 'grammar', 'json_schema', 'regex' and 'response_format', not several");
    if (regex) {  // the whole output matches it
        try {
            return std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(
                "root ::= " + grammar::regex_to_gbnf(regex->get<std::string>(), false)));
        } catch (const Error& e) {
            bad("regex", e.what());
        }
    }
    const auto from_schema = [](const json& s, const char* param) {
        try {
            return std::make_shared<const grammar::Grammar>(
                grammar::parse_gbnf(grammar::json_schema_to_gbnf(s)));
        } catch (const Error& e) {
            bad(param, e.what());
        } catch (const json::exception& e) {  // a keyword of the wrong JSON type
            bad(param, std::string("not a schema syslm reads: ") + e.what());
        }
    };
    if (schema) return from_schema(*schema, "json_schema");
    if (gbnf) {
        try {
            return std::make_shared<const grammar::Grammar>(
                grammar::parse_gbnf(gbnf->get<std::string>()));
        } catch (const Error& e) {
            bad("grammar", e.what());
        }
    }
    if (!format) return nullptr;
    const json* type = field(*format, "type", [](const json& j) { return j.is_string(); },
                             "a string");
    const std::string kind = type ? type->get<std::string>() : "";
    if (kind == "text") return nullptr;
    if (kind == "json_object") {
        static const auto json_object = std::make_shared<const grammar::Grammar>(
            grammar::parse_gbnf(grammar::json_object_gbnf()));
        return json_object;
    }
    if (kind == "json_schema") {  // OpenAI's {"type": "json_schema", "json_schema": {"schema": ...}}
        const json* js = field(*format, "json_schema", [](const json& j) { return j.is_object(); },
                               "an object");
        if (!js || !js->contains("schema"))
            bad("response_format", "response_format json_schema needs 'json_schema': {'schema': ...}");
        return from_schema((*js)["schema"], "response_format");
    }
    bad("response_format", "response_format 'type' must be 'text', 'json_object' or 'json_schema'");
}

// The fields both endpoints share.
void common(const json& body, ParsedRequest& r, const infer::Generator& engine,
            const ApiLimits& limits, int default_max_tokens) {
    if (!body.is_object()) bad("", "the request body must be a JSON object");
    infer::SamplingParams& s = r.params.sampling;
    s.temperature = static_cast<float>(number_field(body, "temperature", s.temperature, 0, 2));
    s.top_p = static_cast<float>(number_field(body, "top_p", s.top_p, 0, 1));
    if (s.top_p <= 0) {  // keeps only the most likely token: greedy
        s.top_p = 1;
        s.temperature = 0;
    }
    s.top_k = static_cast<int>(integer_field(body, "top_k", s.top_k, 0, 1 << 20));
    s.min_p = static_cast<float>(number_field(body, "min_p", s.min_p, 0, 1));
    s.presence_penalty = static_cast<float>(number_field(body, "presence_penalty", 0, -2, 2));
    s.frequency_penalty = static_cast<float>(number_field(body, "frequency_penalty", 0, -2, 2));
    s.repeat_penalty = static_cast<float>(number_field(body, "repeat_penalty", 1, 0, 10));
    const int64_t seed = integer_field(body, "seed", -1, INT64_MIN, INT64_MAX);
    s.seed = seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}();
    r.params.ignore_eos = boolean(body, "ignore_eos", false);
    // vLLM's: lower values are scheduled first, and preempt running requests of higher ones.
    r.params.priority = static_cast<int>(integer_field(body, "priority", 0, -1000000, 1000000));
    r.params.grammar = output_grammar(body);
    r.n = static_cast<int>(integer_field(body, "n", 1, 1, limits.max_n));
    r.stream = boolean(body, "stream", false);
    if (const json* so = field(body, "stream_options", [](const json& j) { return j.is_object(); },
                               "an object")) {
        if (!r.stream) bad("stream_options", "'stream_options' needs 'stream': true");
        r.include_usage = boolean(*so, "include_usage", false);
    }
    const int max_tokens = std::min(limits.max_tokens, engine.n_ctx());
    r.params.max_tokens = static_cast<int>(
        integer_field(body, "max_tokens", std::min(default_max_tokens, max_tokens), 1, max_tokens));
    if (const json* stop = body.contains("stop") ? &body["stop"] : nullptr; stop && !stop->is_null()) {
        if (stop->is_string()) {
            r.params.stop.push_back(stop->get<std::string>());
        } else if (stop->is_array() && stop->size() <= 4) {
            for (const json& s : *stop) {
                if (!s.is_string()) bad("stop", "'stop' must be a string or up to 4 strings");
                r.params.stop.push_back(s.get<std::string>());
            }
        } else {
            bad("stop", "'stop' must be a string or up to 4 strings");
        }
    }
}

void check_length(const std::vector<int32_t>& p, const infer::Generator& engine) {
    if (static_cast<int64_t>(p.size()) >= engine.n_ctx())
        throw ApiError{400, "invalid_request_error",
                       "This model's maximum context length is " +
                           std::to_string(engine.n_ctx()) + " tokens; the prompt has " +
                           std::to_string(p.size()),
                       "messages", "context_length_exceeded"};
    if (p.empty()) bad("prompt", "the prompt is empty");
}

}  // namespace

double number_field(const json& body, const char* key, double def, double lo, double hi) {
    const json* v = field(body, key, [](const json& j) { return j.is_number(); }, "a number");
    if (!v) return def;
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi))
        bad(key, std::string("'") + key + "' must be between " + json(lo).dump() + " and " +
                     json(hi).dump());
    return x;
}

int64_t integer_field(const json& body, const char* key, int64_t def, int64_t lo, int64_t hi) {
    const json* v = field(body, key, [](const json& j) { return j.is_number_integer(); },
                          "an integer");
    if (!v) return def;
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi)
        bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " +
                     std::to_string(hi));
    return x;
}


json error_body(const ApiError& e) {
    return {{"error",
             {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

int adapter_of_model(const std::string& name, const std::string& model_name,
                     const infer::Generator& engine) {
    if (name == model_name) return -1;
    const auto& loras = engine.loras();
    std::string known = "'" + model_name + "'";
    for (size_t i = 0; i < loras.size(); ++i) {
        if (name == model_name + ":" + loras[i].name) return static_cast<int>(i);
        known += ", '" + model_name + ":" + loras[i].name + "'";
    }
    throw ApiError{404, "invalid_request_error",
                   "The model '" + name + "' does not exist; this server has " + known, "model",
                   "model_not_found"};
}

ParsedRequest parse_completion(const json& body, const std::string& model_name,
                               const infer::Generator& engine, const ApiLimits& limits) {
    ParsedRequest r;
    common(body, r, engine, limits, 16);
    model_and_lora(body, model_name, engine, r.params);
    r.echo = boolean(body, "echo", false);
    r.params.logprobs = static_cast<int>(integer_field(body, "logprobs", -1, 0, 5));
    const tokenizer::Tokenizer& tok = engine.tokenizer();
    const int V = engine.model().hparams().n_vocab;
    auto add_text = [&](const std::string& text) {
        r.prompt_texts.push_back(text);
        r.prompts.push_back(tok.encode(text, true, true));
    };
    auto add_ids = [&](const json& ids) {
        std::vector<int32_t> p;
        for (const json& t : ids) {
            if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= V)
                bad("prompt", "token ids must be integers in [0, " + std::to_string(V) + ")");
            p.push_back(t.get<int32_t>());
        }
        r.prompt_texts.push_back(tok.decode(p));
        r.prompts.push_back(std::move(p));
    };
    auto it = body.find("prompt");
    if (it == body.end() || it->is_null()) bad("prompt", "'prompt' is required");
    const json& prompt = *it;
    if (prompt.is_string()) {
        add_text(prompt.get<std::string>());
    } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
        add_ids(prompt);
    } else if (prompt.is_array() && !prompt.empty()) {
        for (const json& p : prompt) {
            if (p.is_string())
                add_text(p.get<std::string>());
            else if (p.is_array())
                add_ids(p);
            else
                bad("prompt", "'prompt' must be a string, token ids, or a list of either");
        }
    } else {
        bad("prompt", "'prompt' must be a string, token ids, or a list of either");
    }
    if (r.prompts.size() * static_cast<size_t>(r.n) > static_cast<size_t>(limits.max_n))
        bad("n", "prompts x n is limited to " + std::to_string(limits.max_n));
    for (const auto& p : r.prompts) check_length(p, engine);
    return r;
}

namespace {

// A message's content: a string or text parts; null is ''.
std::string message_content(const json& m, bool may_be_null) {
    const json c = m.value("content", json(nullptr));
    if (c.is_string()) return c.get<std::string>();
    std::string content;
    if (c.is_array()) {  // content parts: text only
        for (const json& part : c) {
            if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
                !part["text"].is_string())
                bad("messages", "content parts must be {\"type\": \"text\", \"text\": ...}");
            content += part["text"].get<std::string>();
        }
    } else if (!(c.is_null() && may_be_null)) {
        bad("messages", "'content' must be a string or an array of text parts");
    }
    return content;
}

// An assistant's earlier calls: [{"id", "type": "function", "function": {"name", "arguments"}}].
std::vector<tokenizer::ChatToolCall> message_tool_calls(const json& m) {
    std::vector<tokenizer::ChatToolCall> calls;
    const json tc = m.value("tool_calls", json(nullptr));
    if (tc.is_null()) return calls;
    if (!tc.is_array()) bad("messages", "'tool_calls' must be an array");
    for (const json& c : tc) {
        const json f = c.is_object() ? c.value("function", json(nullptr)) : json(nullptr);
        if (!f.is_object() || !f.contains("name") || !f["name"].is_string())
            bad("messages", "each tool call needs 'function': {'name': ..., 'arguments': ...}");
        const json args = f.value("arguments", json("{}"));
        if (!args.is_string() && !args.is_object())
            bad("messages", "a tool call's 'arguments' must be a string of JSON");
        const json id = c.value("id", json(""));
        if (!id.is_string()) bad("messages", "a tool call's 'id' must be a string");
        calls.push_back({id.get<std::string>(), f["name"].get<std::string>(),
                         args.is_string() ? args.get<std::string>() : args.dump()});
    }
    return calls;
}

}  // namespace

std::vector<tokenizer::ChatMessage> parse_messages(const json& body) {
    if (!body.is_object()) bad("", "the request body must be a JSON object");
    auto it = body.find("messages");
    if (it == body.end() || !it->is_array() || it->empty())
        bad("messages", "'messages' must be a non-empty array");
    std::vector<tokenizer::ChatMessage> messages;
    for (const json& m : *it) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
            bad("messages", "each message needs a string 'role'");
        std::string role = m["role"].get<std::string>();
        if (role == "developer") role = "system";
        if (role != "system" && role != "user" && role != "assistant" && role != "tool")
            bad("messages", "unknown role '" + role + "' (system, user, assistant, tool)");
        tokenizer::ChatMessage msg{role, message_content(m, role == "assistant")};
        if (role == "assistant") msg.tool_calls = message_tool_calls(m);
        if (role == "tool") {
            const json id = m.value("tool_call_id", json(nullptr));
            if (!id.is_string()) bad("messages", "a 'tool' message needs a string 'tool_call_id'");
            msg.tool_call_id = id.get<std::string>();
        }
        messages.push_back(std::move(msg));
    }
    return messages;
}

std::string chat_prompt(const json& body, tokenizer::ChatFormat format, const ToolRequest& tools) {
    try {
        return tokenizer::apply_chat_template(format, parse_messages(body), true,
                                              tools.definitions());
    } catch (const Error& e) {
        bad("messages", e.what());
    }
}

ParsedRequest parse_chat(const json& body, const std::string& model_name,
                         const infer::Generator& engine, tokenizer::ChatFormat format,
                         const ApiLimits& limits) {
    ParsedRequest r;
    r.chat = true;
    common(body, r, engine, limits, limits.max_tokens);
    model_and_lora(body, model_name, engine, r.params);
    if (body.contains("max_completion_tokens") && !body["max_completion_tokens"].is_null())
        r.params.max_tokens = static_cast<int>(integer_field(
            body, "max_completion_tokens", 0, 1, std::min(limits.max_tokens, engine.n_ctx())));
    if (boolean(body, "logprobs", false))
        r.params.logprobs = static_cast<int>(integer_field(body, "top_logprobs", 0, 0, 20));
    r.tools = parse_tools(body, tokenizer::tool_syntax(format));
    if (r.tools.active()) {
        if (r.params.grammar)
            bad("tools",
                "give 'tools' or a constrained output ('response_format', 'grammar', "
                "'json_schema', 'regex'), not both");
        try {
            CallGrammar g = call_grammar(r.tools);
            r.params.grammar = std::move(g.grammar);
            r.params.grammar_trigger = std::move(g.trigger);
        } catch (const Error& e) {
            bad("tools", e.what());
        } catch (const json::exception& e) {  // a schema keyword of the wrong JSON type
            bad("tools",
                std::string("a function's 'parameters' is not a schema syslm reads: ") + e.what());
        }
    }
    const std::string prompt = chat_prompt(body, format, r.tools);
    r.prompt_texts.push_back(prompt);
    r.prompts.push_back(engine.tokenizer().encode(prompt, true, true));
    check_length(r.prompts.back(), engine);
    r.params.max_tokens = std::min<int>(
        r.params.max_tokens,
        engine.n_ctx() - static_cast<int>(r.prompts.back().size()));
    return r;
}

std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

int64_t unix_time() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

}  // namespace syslm::serve
