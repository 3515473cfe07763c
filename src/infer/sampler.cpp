#include "infer/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/error.hpp"

namespace syslm::infer {

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
    SYSLM_CHECK(params.top_p > 0, "top-p must be > 0, got ", params.top_p);
    SYSLM_CHECK(params.min_p < 1, "min-p must be < 1, got ", params.min_p);
    SYSLM_CHECK(params.repeat_penalty > 0, "repeat penalty must be > 0, got ",
                params.repeat_penalty);
}

void Sampler::accept(int32_t token) {
    if (params_.repeat_last_n <= 0) return;
    recent_.push_back(token);
    while (static_cast<int>(recent_.size()) > params_.repeat_last_n) recent_.pop_front();
}

void Sampler::apply_penalties(std::vector<Candidate>& c) const {
    if (recent_.empty() || (params_.repeat_penalty == 1.0f && params_.presence_penalty == 0.0f &&
                            params_.frequency_penalty == 0.0f))
        return;
    std::unordered_map<int32_t, int> count;
    for (int32_t t : recent_) ++count[t];
    for (const auto& [id, n] : count) {
        if (id < 0 || id >= static_cast<int32_t>(c.size())) continue;
        float& l = c[id].logit;  // candidates are still in id order here
        l = l > 0 ? l / params_.repeat_penalty : l * params_.repeat_penalty;
        l -= static_cast<float>(n) * params_.frequency_penalty + params_.presence_penalty;
    }
}

bool Sampler::has_penalties() const {
    return params_.repeat_last_n > 0 &&
           (params_.repeat_penalty != 1.0f || params_.presence_penalty != 0.0f ||
            params_.frequency_penalty != 0.0f);
}

double Sampler::uniform() {
    return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

int32_t Sampler::sample(std::span<const float> logits) {
    return draw(distribution(logits));
}

int32_t Sampler::draw(std::span<const TokenProb> dist) {
    SYSLM_CHECK(!dist.empty(), "sampler: empty distribution");
    if (dist.size() == 1 && params_.temperature <= 0) return dist[0].id;  // greedy: no draw
    const double u = uniform();
    double cum = 0;
    for (const auto& c : dist) {
        cum += c.p;
        if (u < cum) return c.id;
    }
    return dist.back().id;
}

std::span<const TokenProb> Sampler::distribution(std::span<const float> logits) {
    SYSLM_CHECK(!logits.empty(), "sampler: empty logits");
    cand_.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i)
        cand_[i] = {static_cast<int32_t>(i), logits[i], 0.0f};
    apply_penalties(cand_);

    auto by_logit = [](const Candidate& a, const Candidate& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    };
    dist_.clear();
    if (params_.temperature <= 0) {
        dist_.push_back({std::min_element(cand_.begin(), cand_.end(), by_logit)->id, 1.0f});
        return dist_;
    }

    size_t n = cand_.size();
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) n = params_.top_k;
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(n), cand_.end(),
                      by_logit);
    cand_.resize(n);

    auto softmax = [&](float temp) {
        const float mx = cand_[0].logit;
        double sum = 0;
        for (auto& c : cand_) sum += (c.p = std::exp((c.logit - mx) / temp));
        for (auto& c : cand_) c.p = static_cast<float>(c.p / sum);
    };
    softmax(1.0f);
    if (params_.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p
        double cum = 0;
        size_t keep = cand_.size();
        for (size_t i = 0; i < cand_.size(); ++i) {
            cum += cand_[i].p;
            if (cum >= params_.top_p) {
                keep = i + 1;
                break;
            }
        }
        cand_.resize(keep);
    }
    if (params_.min_p > 0) {  // drop tokens less likely than min_p x the most likely one
        const float floor = cand_[0].p * params_.min_p;
        size_t keep = 1;
        while (keep < cand_.size() && cand_[keep].p >= floor) ++keep;
        cand_.resize(keep);
    }
    softmax(params_.temperature);
    for (const auto& c : cand_) dist_.push_back({c.id, c.p});
    return dist_;
}

}  // namespace syslm::infer
