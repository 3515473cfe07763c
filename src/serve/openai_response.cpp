#include "serve/openai_response.hpp"

#include <utility>

namespace syslm::serve {

using json = nlohmann::ordered_json;

namespace {

json completion_logprobs(const ChoiceResult& c, const tokenizer::Tokenizer& tok, size_t offset0) {
    json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
    size_t off = offset0;
    for (const infer::Event& e : c.tokens) {
        const std::string& piece = tok.token_to_piece(e.token);
        tokens.push_back(piece);
        lps.push_back(e.logprob);
        json top = json::object();
        for (const auto& t : e.top) top[tok.token_to_piece(t.token)] = t.logprob;
        tops.push_back(top);
        offs.push_back(off);
        off += piece.size();
    }
    return {
        {"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

// A chat token's logprobs, with its bytes and the top alternatives.
json chat_logprob(const infer::Event& e, const tokenizer::Tokenizer& tok) {
    auto entry = [&](int32_t id, float lp) {
        const std::string& piece = tok.token_to_piece(id);
        json bytes = json::array();
        for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
        return json{{"token", piece}, {"logprob", lp}, {"bytes", bytes}};
    };
    json j = entry(e.token, e.logprob);
    json top = json::array();
    for (const auto& t : e.top) top.push_back(entry(t.token, t.logprob));
    j["top_logprobs"] = top;
    return j;
}

std::string data(const json& j) {
    return "data: " + dump(j) + "\n\n";
}

json tool_call_json(const ToolCall& c) {
    return {{"id", c.id},
            {"type", "function"},
            {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

// A chat answer's message: its text, or with tools its text before the calls and the calls.
std::pair<json, const char*> chat_message(const ChoiceResult& c, const ParsedRequest& pr) {
    const char* finish = finish_reason_name(c.finish);
    if (!pr.tools.active()) return {{{"role", "assistant"}, {"content", c.text}}, finish};
    ToolCallParser parser(pr.tools);
    parser.feed(c.text);
    parser.finish();
    if (parser.calls().empty()) return {{{"role", "assistant"}, {"content", c.text}}, finish};
    json calls = json::array();
    for (const ToolCall& call : parser.calls()) calls.push_back(tool_call_json(call));
    return {{{"role", "assistant"},
             {"content", parser.content().empty() ? json(nullptr) : json(parser.content())},
             {"tool_calls", calls}},
            c.finish == infer::FinishReason::Stop ? "tool_calls" : finish};
}

}  // namespace

ApiError api_error(const infer::Refusal& r) {
    switch (r.kind) {
        case infer::Failure::QueueFull:
            return {429, "rate_limit_exceeded",
                    "The server is busy (request queue full); retry later", "", ""};
        case infer::Failure::ShuttingDown:
            return {503, "server_error", "The server is shutting down", "", ""};
        case infer::Failure::InvalidRequest:
        case infer::Failure::KvPoolTooSmall:
            return {400, "invalid_request_error", r.message, "", ""};
        case infer::Failure::Upstream:
            return {502, "server_error", r.message, "", "upstream_failed"};
        case infer::Failure::None:
        case infer::Failure::StepFailed:
            break;
    }
    return {500, "server_error", r.message, "", ""};
}

json usage(const std::vector<ChoiceResult>& choices, size_t n_per_prompt) {
    int64_t prompt = 0, completion = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
        if (i % n_per_prompt == 0) prompt += choices[i].n_prompt;
        completion += choices[i].n_generated;
    }
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion}};
}

std::pair<int, json> whole_response(const std::vector<ChoiceResult>& all, const ParsedRequest& pr,
                                    const Envelope& env, const tokenizer::Tokenizer& tok) {
    const size_t n = static_cast<size_t>(pr.n);
    json choices = json::array();
    for (size_t i = 0; i < all.size(); ++i) {
        const ChoiceResult& c = all[i];
        if (c.finish == infer::FinishReason::Error) {
            const ApiError e = api_error(c.error);
            return {e.status, error_body(e)};
        }
        json lp = nullptr;
        if (pr.params.logprobs >= 0) {
            if (env.chat) {
                lp = {{"content", json::array()}};
                for (const auto& e : c.tokens) lp["content"].push_back(chat_logprob(e, tok));
            } else {
                lp = completion_logprobs(c, tok, pr.echo ? pr.prompt_texts[i / n].size() : 0);
            }
        }
        if (env.chat) {
            auto [message, finish] = chat_message(c, pr);
            choices.push_back(
                {{"index", i}, {"message", message}, {"logprobs", lp}, {"finish_reason", finish}});
        } else {
            choices.push_back({{"index", i},
                               {"text", (pr.echo ? pr.prompt_texts[i / n] : "") + c.text},
                               {"logprobs", lp},
                               {"finish_reason", finish_reason_name(c.finish)}});
        }
        if (!c.fallback.empty()) choices.back()["syslm"] = {{"fallback", c.fallback}};
    }
    return {200,
            {{"id", env.id},
             {"object", env.chat ? "chat.completion" : "text_completion"},
             {"created", env.created},
             {"model", env.model},
             {"choices", choices},
             {"usage", usage(all, n)}}};
}

SseChunks::SseChunks(const Envelope& env, size_t n_choices, int logprobs,
                     const tokenizer::Tokenizer& tok, const ToolRequest* tools)
    : env_(env), logprobs_(logprobs), tok_(tok), started_(n_choices, false) {
    if (tools && tools->active())
        for (size_t i = 0; i < n_choices; ++i) parsers_.emplace_back(*tools);
}

std::string SseChunks::event(int index, const infer::Event& e) {
    std::string out;
    if (env_.chat && !started_[static_cast<size_t>(index)]) {
        started_[static_cast<size_t>(index)] = true;
        out += chunk({{"index", index},
                      {"delta", {{"role", "assistant"}, {"content", ""}}},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}});
    }
    if (e.done && e.finish_reason == infer::FinishReason::Error)
        out += data(error_body(api_error(e.error)));
    std::string text = e.text;
    ToolCallParser* parser = parsers_.empty() ? nullptr : &parsers_[static_cast<size_t>(index)];
    std::vector<ToolDelta> calls;  // a call's start or arguments, in the order they came
    if (parser) {
        text.clear();
        std::vector<ToolDelta> deltas = parser->feed(e.text);
        if (e.done) {
            std::vector<ToolDelta> rest = parser->finish();
            deltas.insert(deltas.end(), rest.begin(), rest.end());
        }
        for (ToolDelta& d : deltas) {
            if (d.index >= 0) {
                if (!text.empty()) out += piece(index, std::exchange(text, ""), nullptr, nullptr);
                out += tool_piece(index, d);
            } else {
                text += d.content;
            }
        }
    }
    if (!text.empty() || (e.token >= 0 && logprobs_ >= 0)) {
        json lp = nullptr;
        if (logprobs_ >= 0 && e.token >= 0)
            lp = env_.chat ? json{{"content", json::array({chat_logprob(e, tok_)})}}
                           : json{{"tokens", {tok_.token_to_piece(e.token)}},
                                  {"token_logprobs", {e.logprob}}};
        out += piece(index, text, lp, nullptr);
    }
    if (e.done && e.finish_reason != infer::FinishReason::Error) {
        const bool called =
            parser && !parser->calls().empty() && e.finish_reason == infer::FinishReason::Stop;
        out += piece(index, "", nullptr,
                     called ? "tool_calls" : finish_reason_name(e.finish_reason), e.fallback);
    }
    return out;
}

std::string SseChunks::tool_piece(int index, const ToolDelta& d) const {
    json call = {{"index", d.index}};
    if (!d.id.empty()) {  // the call's first delta: id, type and name
        call["id"] = d.id;
        call["type"] = "function";
        call["function"] = {{"name", d.name}, {"arguments", d.arguments}};
    } else {
        call["function"] = {{"arguments", d.arguments}};
    }
    return chunk({{"index", index},
                  {"delta", {{"tool_calls", json::array({call})}}},
                  {"logprobs", nullptr},
                  {"finish_reason", nullptr}});
}

std::string SseChunks::end(const json* usage) const {
    std::string out;
    if (usage)
        out += data({{"id", env_.id},
                     {"object", env_.chat ? "chat.completion.chunk" : "text_completion"},
                     {"created", env_.created},
                     {"model", env_.model},
                     {"choices", json::array()},
                     {"usage", *usage}});
    return out + "data: [DONE]\n\n";
}

std::string SseChunks::chunk(json choice) const {
    return data({{"id", env_.id},
                 {"object", env_.chat ? "chat.completion.chunk" : "text_completion"},
                 {"created", env_.created},
                 {"model", env_.model},
                 {"choices", json::array({std::move(choice)})}});
}

std::string SseChunks::piece(int index, const std::string& text, json lp, json finish,
                             const std::string& fallback) const {
    json choice =
        env_.chat
            ? json{{"index", index},
                   {"delta", finish.is_null() ? json{{"content", text}} : json::object()},
                   {"logprobs", lp},
                   {"finish_reason", finish}}
            : json{{"index", index}, {"text", text}, {"logprobs", lp}, {"finish_reason", finish}};
    if (!fallback.empty()) choice["syslm"] = {{"fallback", fallback}};
    return chunk(std::move(choice));
}

}  // namespace syslm::serve
