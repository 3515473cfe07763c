#include "serve/remote_target.hpp"

#include <nlohmann/json.hpp>

#include "infer/wire_rows.hpp"
#include "serve/http_client.hpp"

namespace syslm::serve {

using json = nlohmann::ordered_json;

json call_cloud(CloudLink& link, const std::string& path, const json& body) {
    return call_cloud(link, path, body.dump(), "application/json");
}

json call_cloud(CloudLink& link, const std::string& path, std::string_view body,
                const std::string& content_type) {
    http::ClientResponse r;
    try {
        r = link.post(path, body, content_type);
    } catch (const http::HttpClientError& e) {
        throw CloudError(e.what());
    }
    json answer;
    try {
        answer = json::parse(r.body);
    } catch (const json::exception&) {
        throw CloudError("the cloud answered " + path + " with " + std::to_string(r.status) +
                         " and a body that is not JSON");
    }
    if (r.status != 200) {
        const json* msg = answer.contains("error") && answer["error"].is_object() &&
                                  answer["error"].contains("message")
                              ? &answer["error"]["message"]
                              : nullptr;
        throw CloudError("the cloud answered " + path + " with " + std::to_string(r.status) +
                         (msg && msg->is_string() ? ": " + msg->get<std::string>() : ""));
    }
    return answer;
}

json RemoteTarget::call(const std::string& path, const json& body) {
    try {
        return call_cloud(link_, path, body);
    } catch (const CloudError&) {
        failed_ = true;
        throw;
    }
}

RemoteTarget::~RemoteTarget() {
    if (session_.empty() || failed_) return;  // a failed link: no second wait for it
    try {
        call("/v1/syslm/close", {{"session", session_}});
    } catch (const CloudError&) {  // the cloud ends idle sessions by itself
    }
}

void RemoteTarget::start(std::span<const int32_t> prompt) {
    const json s = sampling_json(sampling_);
    const json a =
        call("/v1/syslm/session", {{"prompt", std::vector<int32_t>(prompt.begin(), prompt.end())},
                                   {"n_ctx", n_ctx_},
                                   {"n_vocab", n_vocab_},
                                   {"sampling", s}});
    if (!a.contains("session") || !a["session"].is_string() || !a.contains("n_past") ||
        !a["n_past"].is_number_integer())
        throw CloudError("the cloud's session answer lacks 'session' or 'n_past'");
    session_ = a["session"].get<std::string>();
    n_past_ = a["n_past"].get<int>();
}

namespace {

// A verify answer: the kept drafts and the cloud's next token into `emitted`; returns how many
// drafts were kept. Anything inconsistent is a CloudError, never a token taken on trust.
int read_round(const json& a, std::span<const int32_t> drafts, int n_vocab,
               std::vector<int32_t>& emitted) {
    if (!a.contains("accepted") || !a["accepted"].is_number_integer() || !a.contains("tokens") ||
        !a["tokens"].is_array() || a["tokens"].empty())
        throw CloudError("the cloud's verify answer lacks 'accepted' or 'tokens'");
    const int kept = a["accepted"].get<int>();
    if (kept < 0 || kept > static_cast<int>(drafts.size()) ||
        a["tokens"].size() != static_cast<size_t>(kept) + 1)
        throw CloudError("the cloud's verify answer is inconsistent: " + a.dump());
    emitted.clear();
    for (const json& t : a["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab)
            throw CloudError("the cloud answered a token outside the vocabulary: " + t.dump());
        emitted.push_back(t.get<int32_t>());
    }
    for (int i = 0; i < kept; ++i)
        if (emitted[static_cast<size_t>(i)] != drafts[static_cast<size_t>(i)])
            throw CloudError("the cloud kept a draft it did not receive");
    return kept;
}

}  // namespace

int32_t RemoteTarget::defer(std::span<const int32_t> context) {
    std::vector<int32_t> emitted;
    round(context, {}, {}, emitted);
    return emitted.back();
}

int RemoteTarget::round(std::span<const int32_t> context, std::span<const int32_t> drafts,
                        std::span<const std::vector<infer::TokenProb>> q,
                        std::vector<int32_t>& emitted) {
    json qs = json::array();
    for (const auto& dist : q) {
        json d = json::array();
        for (const infer::TokenProb& t : dist) d.push_back({t.id, t.p});
        qs.push_back(std::move(d));
    }
    const json a =
        call("/v1/syslm/verify", {{"session", session_},
                                  {"n_past", n_past_},
                                  {"tokens", std::vector<int32_t>(context.begin(), context.end())},
                                  {"drafts", std::vector<int32_t>(drafts.begin(), drafts.end())},
                                  {"q", std::move(qs)}});
    const int kept = read_round(a, drafts, n_vocab_, emitted);
    n_past_ += 1 + static_cast<int>(context.size()) + kept;
    return kept;
}

json sampling_json(const infer::SamplingParams& s) {
    return {{"temperature", s.temperature},
            {"top_k", s.top_k},
            {"top_p", s.top_p},
            {"min_p", s.min_p},
            {"repeat_penalty", s.repeat_penalty},
            {"repeat_last_n", s.repeat_last_n},
            {"presence_penalty", s.presence_penalty},
            {"frequency_penalty", s.frequency_penalty},
            {"seed", s.seed & 0x7fffffffffffffffull}};
}

RemoteSplit::RemoteSplit(CloudLink& link, const infer::SamplingParams& sampling, int split_at,
                         int n_ctx, int n_vocab)
    : link_(link) {
    const json a = call_cloud(link, "/v1/syslm/session",
                              {{"split_at", split_at},
                               {"n_ctx", n_ctx},
                               {"n_vocab", n_vocab},
                               {"sampling", sampling_json(sampling)}});
    if (!a.contains("session") || !a["session"].is_string())
        throw CloudError("the cloud's session answer lacks 'session'");
    id_ = a["session"].get<std::string>();
}

RemoteSplit::~RemoteSplit() {
    if (failed_) return;
    try {
        call_cloud(link_, "/v1/syslm/close", {{"session", id_}});
    } catch (const CloudError&) {
    }
}

int32_t RemoteSplit::call(std::span<const int32_t> tokens, std::span<const float> rows,
                          int64_t width, infer::WireType wire, bool sample, int n_vocab,
                          double* cloud_seconds) {
    const json head = {{"session", id_},
                       {"n_past", n_past_},
                       {"tokens", std::vector<int32_t>(tokens.begin(), tokens.end())},
                       {"wire", infer::wire_name(wire)},
                       {"sample", sample}};
    const std::string body =
        head.dump() + "\n" +
        infer::encode_rows(wire, rows, static_cast<int64_t>(tokens.size()), width);
    json a;
    try {
        a = call_cloud(link_, "/v1/syslm/split", body, "application/octet-stream");
    } catch (const CloudError&) {
        failed_ = true;
        throw;
    }
    n_past_ += static_cast<int>(tokens.size());
    if (a.contains("seconds") && a["seconds"].is_number())
        *cloud_seconds += a["seconds"].get<double>();
    if (!sample) return -1;
    if (!a.contains("token") || !a["token"].is_number_integer() || a["token"].get<int64_t>() < 0 ||
        a["token"].get<int64_t>() >= n_vocab)
        throw CloudError("the cloud's split answer lacks a token in the vocabulary");
    return a["token"].get<int32_t>();
}

}  // namespace syslm::serve
