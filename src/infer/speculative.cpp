#include "infer/speculative.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/matmul.hpp"
#include "tokenizer/utf8.hpp"

namespace syslm::infer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double prob_of(std::span<const TokenProb> dist, int32_t id) {
    for (const TokenProb& t : dist)
        if (t.id == id) return t.p;
    return 0.0;
}

// Running least-squares fit of a target call's time against the tokens it verifies,
// t(n) = v0 + v1 * n, with older rounds decaying: bandwidth-bound targets show v1 ~ 0 (a call
// costs the same for 1 or 8 tokens), compute-bound ones v1 ~ v0.
struct VerifyCost {
    double s0 = 0, s1 = 0, s2 = 0, t0 = 0, t1 = 0;
    void add(int n, double t) {
        constexpr double kDecay = 0.95;
        s0 = kDecay * s0 + 1;
        s1 = kDecay * s1 + n;
        s2 = kDecay * s2 + static_cast<double>(n) * n;
        t0 = kDecay * t0 + t;
        t1 = kDecay * t1 + n * t;
    }
    // Until two call sizes have been seen the slope is unknown: take it as 0 (bandwidth-bound).
    double at(int n) const {
        if (s0 <= 0) return 0;
        const double det = s0 * s2 - s1 * s1;
        double v1 = det > 1e-9 * s0 * s2 ? (s0 * t1 - s1 * t0) / det : 0.0;
        v1 = std::max(v1, 0.0);
        const double v0 = std::max((t0 - v1 * s1) / s0, 0.0);
        return v0 + v1 * n;
    }
};

// The draft length with the most expected tokens per second: a round of k drafts yields
// (1 - a^(k+1)) / (1 - a) tokens and costs k draft steps plus one target call of k + 1 tokens;
// k = 0 is plain decoding (one token per call of one).
int best_k(double a, double draft_step, const VerifyCost& verify, int lo, int hi) {
    a = std::clamp(a, 0.0, 0.999);
    int best = 0;
    double best_rate = 1.0 / std::max(verify.at(1), 1e-12);
    for (int k = lo; k <= hi; ++k) {
        const double tokens = (1 - std::pow(a, k + 1)) / (1 - a);
        const double rate = tokens / std::max(k * draft_step + verify.at(k + 1), 1e-12);
        if (rate > best_rate) {
            best_rate = rate;
            best = k;
        }
    }
    return best;
}

}  // namespace

int32_t speculative_verify(std::span<const TokenProb> p, std::span<const TokenProb> q, int32_t d,
                           double u_accept, double u_draw, bool* kept) {
    const double pd = prob_of(p, d), qd = prob_of(q, d);
    if (qd > 0 && u_accept * qd < pd) {
        *kept = true;
        return d;
    }
    *kept = false;
    // Residual max(0, p - q), normalised; p's support holds all of it. q is looked up by id once
    // (both can span the whole vocabulary when top-k is off).
    std::unordered_map<int32_t, double> q_of;
    q_of.reserve(q.size());
    for (const TokenProb& t : q) q_of.emplace(t.id, t.p);
    auto residual = [&](const TokenProb& t) {
        const auto it = q_of.find(t.id);
        return std::max(0.0, t.p - (it == q_of.end() ? 0.0 : it->second));
    };
    double total = 0;
    for (const TokenProb& t : p) total += residual(t);
    if (total <= 0) {  // p == q on its support (not reachable after a rejection): draw from p
        double cum = 0;
        for (const TokenProb& t : p)
            if (u_draw < (cum += t.p)) return t.id;
        return p.back().id;
    }
    const double target = u_draw * total;
    double cum = 0;
    int32_t last = p.front().id;
    for (const TokenProb& t : p) {
        const double r = residual(t);
        if (r <= 0) continue;
        last = t.id;
        if (target < (cum += r)) return t.id;
    }
    return last;
}

GenerateStats speculative_generate(model::Context& target, model::Context& draft,
                                   const tokenizer::Tokenizer& tok,
                                   std::span<const int32_t> prompt, int n_predict,
                                   Sampler& sampler, bool ignore_eos,
                                   const std::function<void(std::string_view)>& on_text,
                                   const SpeculativeOptions& o, SpeculativeStats* stats) {
    SYSLM_CHECK(!prompt.empty(), "the prompt is empty (no tokens to start from)");
    SYSLM_CHECK(target.n_past() == 0 && draft.n_past() == 0,
                "speculative decoding starts from empty contexts");
    SYSLM_CHECK(target.model().hparams().n_vocab == draft.model().hparams().n_vocab,
                "the draft model's vocabulary (", draft.model().hparams().n_vocab,
                " tokens) differs from the target's (", target.model().hparams().n_vocab, ")");
    SYSLM_CHECK(!sampler.has_penalties(),
                "repetition / presence / frequency penalties are not supported with a draft "
                "model (they depend on the history at every drafted position)");
    SYSLM_CHECK(o.k_min >= 1 && o.k_max >= o.k_min && o.k >= 1, "draft lengths must be >= 1");
    SpeculativeStats local;
    SpeculativeStats& st = stats ? *stats : local;
    GenerateStats gs;
    gs.n_prompt = static_cast<int>(prompt.size());
    SamplingParams dp = sampler.params();
    dp.seed = sampler.params().seed ^ 0x9e3779b97f4a7c15ull;
    Sampler draft_sampler(dp);

    std::vector<int32_t> tokens(prompt.begin(), prompt.end());
    auto t0 = Clock::now();
    if (prompt.size() > 1) {  // all but the last: it is fed with the first round's drafts
        target.forward(prompt.first(prompt.size() - 1));
        draft.forward(prompt.first(prompt.size() - 1));
    }
    gs.prompt_seconds = seconds(t0);

    tokenizer::Utf8StreamBuffer stream;
    int k = std::clamp(o.k, o.k_min, o.k_max);
    double acc_sum = 1, trials = 2;  // acceptance prior 0.5
    double draft_step = 0;           // running seconds per draft token
    VerifyCost verify;
    int64_t round = 0;
    std::vector<std::vector<TokenProb>> q;
    std::vector<int32_t> drafts, batch;
    bool done = false;
    t0 = Clock::now();
    while (!done) {
        const int n_ctx = target.n_ctx();
        const int remaining = n_predict - gs.n_generated;
        // Adaptive: every 16th round tries the other regime (drafting when it is off, plain
        // decoding when on), so both the acceptance and the cost of small calls stay measured.
        int planned = k;
        if (o.adaptive && ++round % 16 == 0) planned = k == 0 ? o.k_min : 0;
        // Room: the target takes pending + k drafts; the draft the catch-up + k - 1.
        int kk = std::min({planned, remaining - 1, n_ctx - target.n_past() - 1,
                           draft.n_ctx() - static_cast<int>(tokens.size())});
        kk = std::max(kk, 0);
        if (target.n_past() + 1 > n_ctx) break;

        // Draft kk tokens.
        q.clear();
        drafts.clear();
        const auto td = Clock::now();
        if (kk > 0) {
            std::span<const int32_t> feed(tokens.data() + draft.n_past(),
                                          tokens.size() - static_cast<size_t>(draft.n_past()));
            for (int i = 0; i < kk; ++i) {
                const std::span<const float> logits = draft.forward(feed);
                const std::span<const TokenProb> dist = draft_sampler.distribution(logits);
                q.emplace_back(dist.begin(), dist.end());
                drafts.push_back(draft_sampler.draw(q.back()));
                feed = std::span<const int32_t>(&drafts.back(), 1);
                if (i + 1 == kk) break;  // the last draft is not fed (the target checks it)
            }
        }
        const double t_draft = seconds(td);

        // Verify: pending + drafts in one call.
        const auto tv = Clock::now();
        const int base = target.n_past();
        batch.assign(1, tokens.back());
        batch.insert(batch.end(), drafts.begin(), drafts.end());
        const std::span<const float> rows = [&] {
            // Each position's logits exactly as plain decoding computes them.
            const kernels::ExactSmallBatches exact;
            return target.forward(batch, /*all_logits=*/true);
        }();
        const int V = target.model().hparams().n_vocab;
        int a = 0;
        bool rejected = false;
        std::vector<int32_t> emitted;
        for (int i = 0; i <= kk; ++i) {
            const std::span<const TokenProb> p =
                sampler.distribution(rows.subspan(static_cast<size_t>(i) * V, V));
            int32_t next;
            if (i < kk) {
                const double u1 = sampler.uniform(), u2 = sampler.uniform();
                bool kept = false;
                next = speculative_verify(p, q[i], drafts[i], u1, u2, &kept);
                if (kept) ++a;
                rejected = !kept;
            } else {
                next = sampler.draw(p);  // every draft kept: one more from the target
            }
            emitted.push_back(next);
            if (rejected) break;
        }
        const double t_verify = seconds(tv);

        ++st.rounds;
        st.drafted += kk;
        st.accepted += a;
        st.draft_seconds += t_draft;
        st.target_seconds += t_verify;
        target.truncate(base + 1 + a);  // pending + kept drafts
        draft.truncate(std::min(draft.n_past(), base + 1 + a));

        for (int32_t t : emitted) {
            tokens.push_back(t);
            ++gs.n_generated;
            if (!ignore_eos && tok.is_eog(t)) {
                gs.stopped_at_eog = true;
                done = true;
                break;
            }
            if (std::string text = stream.push(tok.token_to_piece(t)); !text.empty())
                on_text(text);
            if (gs.n_generated >= n_predict) {
                done = true;
                break;
            }
        }

        if (o.adaptive) {
            verify.add(kk + 1, t_verify);
            if (kk > 0) {
                acc_sum = 0.9 * acc_sum + a;
                trials = 0.9 * trials + a + (rejected ? 1 : 0);
                const double per_draft = t_draft / kk;
                draft_step = draft_step > 0 ? 0.8 * draft_step + 0.2 * per_draft : per_draft;
            }
            if (draft_step > 0)
                k = best_k(acc_sum / trials, draft_step, verify, o.k_min, o.k_max);
        }
    }
    if (std::string rest = stream.flush(); !rest.empty()) on_text(rest);
    gs.generate_seconds = seconds(t0);
    return gs;
}

}  // namespace syslm::infer
