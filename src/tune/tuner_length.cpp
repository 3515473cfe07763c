// The length knobs of `syslm tune` (seed 000: adjust the local window, and the number of active
// experts, to the input): on the chosen file, each setting measured over input lengths on the
// held-out text and chosen per length (tune/length_policy.hpp), the policy written into
// model.gguf and run by the plan.
#include "tune/tuner_phases.hpp"

namespace syslm::tune::detail {
namespace {

// The values tried: the file's window and its halves down to 8 (at most four), or its top-p,
// a half and a quarter of it. Smaller is cheaper for both.
std::vector<double> knob_values(const LengthKnob& knob, const model::HParams& hp) {
    std::vector<double> v;
    if (&knob == &window_knob())
        for (int w = hp.sliding_window; w >= 8 && v.size() < 4; w /= 2) v.insert(v.begin(), w);
    else
        v = {hp.expert_top_p / 4.0, hp.expert_top_p / 2.0, double{hp.expert_top_p}};
    return v;
}

}  // namespace

void Tuner::length_phase(TuneResult& r) {
    if (o_.length_max_ppl_increase < 0) return;
    const std::string path = (fs::path(o_.out_dir) / "model.gguf").string();
    const model::HParams hp = model::load_hparams(io::GGUFFile(path));
    std::vector<const LengthKnob*> knobs;
    for (int il = 0; il < hp.n_layer && knobs.empty(); ++il)
        if (hp.window(il) > 0) knobs.push_back(&window_knob());
    if (hp.expert_top_p > 0) knobs.push_back(&experts_knob());
    if (knobs.empty()) return;
    // A quarter of the chunk, the chunk and four of them, where the text holds two of each.
    std::vector<int> lengths;
    for (const int n : {o_.n_ctx / 4, o_.n_ctx, 4 * o_.n_ctx})
        if (n >= 16 && n <= hp.n_ctx_train && eval_tokens_.size() >= 2 * static_cast<size_t>(n))
            lengths.push_back(n);
    if (lengths.empty() || over_budget()) {
        say(lengths.empty() ? "length knobs: the held-out text is too short for two chunks"
                            : "length knobs: the budget is spent; the file keeps its settings");
        return;
    }
    for (const LengthKnob* knob : knobs) {
        LengthSearch s{lengths, knob_values(*knob, hp), o_.threads, eval_chunks_};
        say(cat(knob->name, " by input length: ", s.lengths.size(), " lengths x ", s.values.size(),
                " values on the chosen file"));
        LengthPolicyResult p{knob->name, {}, lengths, {}, o_.length_max_ppl_increase};
        p.table = measure_by_length(
            *knob, path, eval_tokens_, calib_bos_, s, [&](const LengthMeasurement& m) {
                say(cat("  length ", m.length, ", ", knob->name, " ", m.value, ": perplexity ",
                        m.ppl, ", ", static_cast<int>(m.tokens_per_s), " tok/s"));
            });
        p.values = choose_by_length(*knob, p.table, lengths, p.max_increase);
        const std::string tmp = path + ".policy";
        write_length_policy(*knob, io::GGUFFile(path), lengths, p.values, tmp);
        fs::rename(tmp, path);
        (knob == &window_knob() ? r.chosen->plan.window : r.chosen->plan.expert_top_p) = "auto";
        r.length_policies.push_back(std::move(p));
    }
}

}  // namespace syslm::tune::detail
