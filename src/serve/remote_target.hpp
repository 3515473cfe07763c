// The cloud model in a session of the cloud's, across a link (`serve --role edge`; the cloud's
// side is serve/cloud_sessions), as the target of speculative decoding or a cascade's deferrals:
// start opens the session with the prompt and the request's sampling parameters, each verify is
// one call carrying the drafts and the distributions they were drawn from, each defer one call
// with the edge's own tokens since the last, and the session closes with this object; and (split)
// the cloud's layers of a split model in a session (RemoteSplit). A link that fails, passes its
// deadline, or a cloud that answers an error throws CloudError: the caller decides what to do
// without the cloud (the edge answers alone, or a split answer ends with a 502).
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "infer/speculative.hpp"
#include "infer/wire_rows.hpp"
#include "serve/cloud_link.hpp"

namespace syslm::serve {

class CloudError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// One JSON call to the cloud: the answer's object, or CloudError (the link failed, the cloud
// answered an error status, or a body that is not JSON).
nlohmann::ordered_json call_cloud(CloudLink& link, const std::string& path,
                                  const nlohmann::ordered_json& body);
// The same with a body of another type (a split call's header line and rows).
nlohmann::ordered_json call_cloud(CloudLink& link, const std::string& path, std::string_view body,
                                  const std::string& content_type);

// The request's sampling parameters as a session's "sampling" object.
nlohmann::ordered_json sampling_json(const infer::SamplingParams& s);

class RemoteTarget final : public infer::SpeculativeTarget {
public:
    // n_ctx: the positions the session needs (prompt, answer and a round's drafts); n_vocab:
    // the draft's, which every token the cloud answers must be in.
    RemoteTarget(CloudLink& link, const infer::SamplingParams& sampling, int n_ctx, int n_vocab)
        : link_(link), sampling_(sampling), n_ctx_(n_ctx), n_vocab_(n_vocab) {}
    ~RemoteTarget() override;  // closes the session, if open (failures ignored)

    void start(std::span<const int32_t> prompt) override;
    int verify(std::span<const int32_t> drafts, std::span<const std::vector<infer::TokenProb>> q,
               std::vector<int32_t>& emitted) override {
        return round({}, drafts, q, emitted);
    }
    // A cascade's deferral: the tokens the edge took itself since the last call, then the
    // cloud's own next token (returned).
    int32_t defer(std::span<const int32_t> context);
    int n_past() const override { return n_past_; }
    int n_ctx() const override { return n_ctx_; }

private:
    int round(std::span<const int32_t> context, std::span<const int32_t> drafts,
              std::span<const std::vector<infer::TokenProb>> q, std::vector<int32_t>& emitted);
    nlohmann::ordered_json call(const std::string& path, const nlohmann::ordered_json& body);
    CloudLink& link_;
    infer::SamplingParams sampling_;
    int n_ctx_, n_vocab_;
    int n_past_ = 0;
    std::string session_;
    bool failed_ = false;  // the link failed once: the session is left to the cloud's timeout
};

// A split model's session on the cloud (`serve --role edge --split-at L`): opened with the split
// point and the sampling parameters, each call one chunk of residual rows entering layer L (a
// JSON header line, then the rows in the wire format); closed with this object unless the link
// failed.
class RemoteSplit {
public:
    RemoteSplit(CloudLink& link, const infer::SamplingParams& sampling, int split_at, int n_ctx,
                int n_vocab);
    ~RemoteSplit();
    // One chunk's rows; the cloud's next token (-1 when not sampled); its compute time added to
    // *cloud_seconds.
    int32_t call(std::span<const int32_t> tokens, std::span<const float> rows, int64_t width,
                 infer::WireType wire, bool sample, int n_vocab, double* cloud_seconds);

private:
    CloudLink& link_;
    std::string id_;
    int n_past_ = 0;
    bool failed_ = false;
};

}  // namespace syslm::serve
