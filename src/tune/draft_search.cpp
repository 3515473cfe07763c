#include "tune/draft_search.hpp"

#include <algorithm>
#include <memory>

#include "core/error.hpp"
#include "infer/generate.hpp"
#include "infer/speculative.hpp"
#include "model/transformer.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tune/confirmation.hpp"

namespace syslm::tune {

std::vector<DraftSettings> default_draft_settings() {
    std::vector<DraftSettings> v(1);  // adaptive
    for (int k : {2, 4, 8}) {
        DraftSettings d;
        d.k = k;
        d.adaptive = false;
        v.push_back(d);
    }
    return v;
}

namespace {

// Tokens a generation made and the seconds it spent after its prompt, summed over the prompts.
struct Tally {
    int tokens = 0;
    double seconds = 0;
    void add(const infer::GenerateStats& st) {
        tokens += st.n_generated;
        seconds += st.generate_seconds;
    }
    double ts() const { return seconds > 0 ? tokens / seconds : 0; }
};

infer::SamplingParams greedy() {
    infer::SamplingParams p;
    p.temperature = 0;
    return p;
}

infer::SpeculativeOptions options_of(const DraftSettings& d) {
    infer::SpeculativeOptions o;
    o.k = d.k;
    o.k_min = d.k_min;
    o.k_max = d.k_max;
    o.adaptive = d.adaptive;
    return o;
}

}  // namespace

DraftResult search_draft(const DraftSearchOptions& o,
                         const std::function<void(const std::string&)>& say) {
    SYSLM_CHECK(!o.prompts.empty(), "tune: no held-out prompt to time the draft on");
    const model::Model target(o.target);
    const model::Model draft(o.draft);
    SYSLM_CHECK(draft.hparams().n_vocab == target.hparams().n_vocab, o.draft,
                ": the draft's vocabulary (", draft.hparams().n_vocab,
                " tokens) differs from the model's (", target.hparams().n_vocab, ")");
    const auto tok = tokenizer::Tokenizer::from_gguf(target.file());
    const std::vector<DraftSettings> settings =
        o.settings.empty() ? default_draft_settings() : o.settings;
    size_t longest = 0;
    for (const auto& p : o.prompts) longest = std::max(longest, p.size());
    int k_max = 1;
    for (const DraftSettings& d : settings) k_max = std::max(k_max, d.adaptive ? d.k_max : d.k);
    // Room for the prompt, the tokens and a whole draft past the last one, within both models'
    // contexts (generation stops where the context is full, alike with and without the draft).
    const int n_ctx = std::min({static_cast<int>(longest) + o.n_predict + k_max + 2,
                                target.hparams().n_ctx_train, draft.hparams().n_ctx_train});
    SYSLM_CHECK(static_cast<int>(longest) < n_ctx, "tune: a draft prompt of ", longest,
                " tokens does not fit the models' context of ", n_ctx);
    model::Context tctx(target, n_ctx, o.threads);
    model::Context dctx(draft, n_ctx, o.threads);
    const auto quiet = [](std::string_view) {};

    DraftResult r;
    r.draft_path = o.draft;
    r.rounds = o.rounds;
    r.prompts = static_cast<int>(o.prompts.size());
    r.tokens = o.n_predict;
    std::vector<double> plain;
    std::vector<std::vector<double>> spec(settings.size());
    std::vector<infer::SpeculativeStats> totals(settings.size());
    for (int round = 0; round < o.rounds; ++round) {
        Tally t;
        for (const auto& prompt : o.prompts) {
            tctx.reset();
            infer::Sampler sampler(greedy());
            t.add(infer::generate(tctx, tok, prompt, o.n_predict, sampler, true, quiet));
        }
        plain.push_back(t.ts());
        for (size_t i = 0; i < settings.size(); ++i) {
            Tally s;
            for (const auto& prompt : o.prompts) {
                tctx.reset();
                dctx.reset();
                infer::Sampler sampler(greedy());
                infer::SpeculativeStats st;
                s.add(infer::speculative_generate(tctx, dctx, tok, prompt, o.n_predict, sampler,
                                                  true, quiet, options_of(settings[i]), &st));
                totals[i].drafted += st.drafted;
                totals[i].accepted += st.accepted;
            }
            spec[i].push_back(s.ts());
        }
    }
    r.plain_ts = median(plain);
    say(cat("draft ", o.draft, ": plain decoding ", r.plain_ts, " generated tok/s (median of ",
            o.rounds, " rounds of ", o.prompts.size(), " prompts x ", o.n_predict, " tokens)"));
    for (size_t i = 0; i < settings.size(); ++i) {
        DraftTrial d{settings[i], median(spec[i]), totals[i].acceptance()};
        say(cat("  speculative, ", d.settings.label(), ": ", d.ts, " tok/s (",
                d.ts / std::max(1e-9, r.plain_ts), "x), ", 100 * d.acceptance,
                "% of drafted tokens kept"));
        if (d.ts > r.plain_ts && (!r.best || d.ts > r.best->ts)) r.best = d;
        r.trials.push_back(d);
    }
    say(r.best ? cat("the draft enters the plan: ", r.best->settings.label())
               : std::string("the draft does not beat plain decoding: the plan decodes without it"));
    return r;
}

}  // namespace syslm::tune
