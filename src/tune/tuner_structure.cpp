// The tuner's structural knobs: pruned, recovered bases and the distilled draft
// (tuner_phases.hpp).
#include "tune/tuner_phases.hpp"

namespace syslm::tune::detail {

// The draft knob, on the chosen file: plain decoding against speculative decoding at each
// draft setting, from the held-out text's chunk starts; the fastest enters the plan (with the
// draft copied beside it) only when it beats plain decoding.
void Tuner::draft_phase(TuneResult& r) {
    DraftSearchOptions d;
    d.target = file_of(r.chosen->plan);
    d.draft = draft_;
    d.threads = r.chosen->plan.threads;
    d.n_predict = o_.decode_tokens;
    const ptrdiff_t n = std::min(32, o_.n_ctx);
    for (int c = 0; c < o_.draft_prompts && c < eval_chunks_; ++c) {
        const auto at = eval_tokens_.begin() + static_cast<std::ptrdiff_t>(c) * o_.n_ctx;
        std::vector<int32_t> prompt;
        if (c > 0 && calib_bos_ >= 0) prompt.push_back(calib_bos_);
        prompt.insert(prompt.end(), at, at + n);
        d.prompts.push_back(std::move(prompt));
    }
    const double runs = d.rounds * (1.0 + static_cast<double>(default_draft_settings().size()));
    say(cat("timing the draft ", draft_, " on ", r.chosen->label, ": about ",
            static_cast<int>(runs * static_cast<double>(d.prompts.size()) * d.n_predict /
                             std::max(r.chosen->decode_ts, 1e-3)),
            " s"));
    r.draft = search_draft(d, [&](const std::string& line) { say(line); });
    if (!r.draft->best) return;
    r.chosen->plan.draft = r.draft->best->settings;
    fs::copy_file(draft_, fs::path(o_.out_dir) / r.chosen->plan.draft->file,
                  fs::copy_options::overwrite_existing);
}

// A draft distilled on the spot (--draft auto): the input with all but a quarter of its
// layers removed (at least one kept; the layers whose removal costs least on the calibration
// text go), distilled back towards the input on that text like a pruned base, and quantized
// to Q8_0 (a draft's mistakes cost more than its bytes). Charged to the budget before the
// search rounds; empty when it does not fit or the model has one layer.
std::string Tuner::distilled_draft() {
    const model::Model input(o_.model);
    const model::HParams& hp = input.hparams();
    const int keep = std::max(1, hp.n_layer / 4);
    if (keep >= hp.n_layer || dtype_info(in_type_).quantized) {
        say(keep >= hp.n_layer ? "draft: one layer, no smaller draft to distil"
                               : "draft: distilling needs float weight matrices: skipped");
        return "";
    }
    PruneSettings level;
    level.layers = hp.n_layer - keep;
    level.recover_steps = o_.recover_steps >= 0
                              ? o_.recover_steps
                              : default_recover_steps(hp, o_.n_ctx, calib_tokens_.size());
    const double need = predicted_recovery(input, level);
    if (elapsed() + need > o_.budget_s) {
        say(cat("draft: distilling a ", keep, "-layer draft would take ~", static_cast<int>(need),
                " s: past the budget, skipped"));
        return "";
    }
    say(cat("draft: ", hp.n_layer, " -> ", keep, " layers, distilled for ", level.recover_steps,
            " steps (~", static_cast<int>(need), " s predicted)"));
    const PrunedBase base = pruned_base(level, structure_options());
    Plan plan;
    plan.recipe = "Q8_0";
    const fs::path path =
        fs::path(o_.out_dir) / "candidates" / ("draft-" + word_hash_name(key_of(level)) + ".gguf");
    if (!fs::exists(path)) {
        compress::QuantizeOptions q = quantize_options(plan, DType::F32);
        q.threads = o_.threads;
        compress::quantize_model(base.path, path.string(), q);
    }
    return path.string();
}

// Seconds a pruned level's recovery distillation is predicted to take on this machine.
double Tuner::predicted_recovery(const model::Model& input, const PruneSettings& level) const {
    double flops = 0;
    for (const profile::MatrixCost& mc : profile::model_costs(input, DType::F32).matrices)
        flops += mc.flops_per_token;
    const int threads = ThreadPool::resolve(o_.threads);
    const double gflops = profile::cached_or_measured_probe(threads, false).fma_f32_for(threads);
    return predicted_recovery_s(input.hparams(), flops, level, o_.n_ctx, gflops);
}

StructureOptions Tuner::structure_options() const {
    StructureOptions so;
    so.model = o_.model;
    so.calib = o_.calib;
    so.work_dir = (fs::path(o_.out_dir) / "candidates").string();
    so.imatrix = &imatrix_;
    so.calib_tokens = calib_tokens_;
    so.calib_bos = calib_bos_;
    so.n_ctx = o_.n_ctx;
    so.threads = o_.threads;
    so.log = o_.log;
    return so;
}

const Tuner::Base& Tuner::base_of(const PruneSettings& level) const {
    PruneSettings key = level;
    key.n_layer = key.n_head = key.n_ff = 0;
    const std::string k = key_of(key);
    auto it = bases_.find(k);
    if (it != bases_.end()) return it->second;
    Base b;
    b.pruned = pruned_base(key, structure_options());
    const std::string im = b.imatrix_path();
    compress::ImatrixOptions io;
    io.n_ctx = o_.n_ctx;
    io.threads = o_.threads;
    b.imatrix =
        compress::load_or_collect_imatrix(b.pruned.path, fs::exists(im) ? im : o_.calib, io);
    if (!fs::exists(im)) b.imatrix.save(im);
    return bases_.emplace(k, std::move(b)).first->second;
}

std::string Tuner::key_of(const PruneSettings& s) {
    Plan p;
    p.prune = s;
    return p.model_key();
}

// The structure knob: pruned bases (FFN channels by default), each recovered by distillation
// and quantized with the model halves of the fastest plans within the limit so far. A level
// starts only if its predicted recovery and measurement fit the budget.
void Tuner::structure_phase() {
    if (o_.prune.empty() || (o_.prune.size() == 1 && o_.prune[0] == "off")) return;
    if (dtype_info(in_type_).quantized) {
        say("structure: pruning needs float weight matrices (the input's are " +
            std::string(dtype_name(in_type_)) + "): skipped");
        return;
    }
    const model::Model input(o_.model);
    const model::HParams& hp = input.hparams();
    const int steps = o_.recover_steps >= 0
                          ? o_.recover_steps
                          : default_recover_steps(hp, o_.n_ctx, calib_tokens_.size());
    std::vector<PruneSettings> levels;
    if (o_.prune.size() == 1 && o_.prune[0] == "auto")
        levels = default_prune_levels(hp, steps);
    else
        for (const std::string& spec : o_.prune) levels.push_back(parse_prune_level(spec, steps));
    if (levels.empty()) {
        say("structure: no default level for this model (--prune auto narrows dense FFNs of "
            "128 channels or more; give a level with --prune ffn=F,heads=F,layers=N)");
        return;
    }
    const std::vector<Point> plans = best_plans_within_limit(2);
    if (plans.empty()) {
        say(cat("structure: no point is within KL ", o_.max_kl, " to quantize bases with"));
        return;
    }
    for (const PruneSettings& level : levels) {
        const double need = predicted_recovery(input, level) +
                            seconds_per_file_ * static_cast<double>(plans.size());
        const std::string what = cat("ffn ", level.ffn, ", heads ", level.heads, ", layers ",
                                     level.layers, ", ", level.recover_steps, " recovery steps");
        if (elapsed() + need > o_.budget_s) {
            say(cat("structure: ", what, " would take ~", static_cast<int>(need),
                    " s: past the budget, skipped"));
            continue;
        }
        const Base* base = nullptr;
        try {
            base = &base_of(level);
        } catch (const Error& e) {
            say(cat("structure: ", what, ": ", e.what()));
            continue;
        }
        const PruneSettings& shape = base->pruned.level;
        say(cat("structure: ", what, ": ", hp.n_layer, " -> ", shape.n_layer, " layers, ",
                hp.n_head, " -> ", shape.n_head, " heads, FFN ", hp.n_ff, " -> ", shape.n_ff,
                base->pruned.seconds > 0
                    ? cat(", built in ", static_cast<int>(base->pruned.seconds), " s")
                    : std::string(", read back")));
        // The base as recovered first: its KL is what any quantization of it adds to, so the
        // plans tried on it are the predicted-fastest whose own KL leaves that room.
        Point as_is;
        as_is.plan.prune = shape;
        as_is.plan.threads = o_.threads;
        as_is.label = cat("pruned FFN ", shape.n_ff, " (as recovered)");
        measure({as_is});
        const Point* measured = cache_.find(as_is.plan.key());
        const double room = o_.max_kl - (measured ? measured->kl : 0.0);
        const std::vector<Point> fitting = best_plans_within_limit(2, room);
        if (fitting.empty()) {
            say(cat("structure: ", what, ": the base alone is at KL ",
                    measured ? measured->kl : 0.0, "; no plan's KL fits in the ", room, " left"));
            continue;
        }
        measure(pruned_points(*base, fitting, hp));
    }
}

// The points of a base quantized with each plan; a type whose block no longer fits a pruned
// row goes back to the recipe's choice.
std::vector<Point> Tuner::pruned_points(const Base& base, const std::vector<Point>& plans,
                                        const model::HParams& hp) const {
    const PruneSettings& shape = base.pruned.level;
    const io::GGUFFile base_file(base.pruned.path);
    std::vector<Point> points;
    for (const Point& from : plans) {
        Point p;
        p.plan = from.plan;
        p.plan.prune = shape;
        for (auto it = p.plan.tensor_types.begin(); it != p.plan.tensor_types.end();) {
            const io::GGUFTensor* t = base_file.find_tensor(it->first);
            const bool fits = t && t->ne[0] % dtype_info(it->second).block_size == 0;
            it = fits ? std::next(it) : p.plan.tensor_types.erase(it);
        }
        p.label = cat("pruned FFN ", shape.n_ff,
                      shape.n_head != hp.n_head ? cat(" heads ", shape.n_head) : "",
                      shape.n_layer != hp.n_layer ? cat(" layers ", shape.n_layer) : "", " + ",
                      from.label);
        points.push_back(std::move(p));
    }
    return points;
}

}  // namespace syslm::tune::detail
