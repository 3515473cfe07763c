#include "tune/tuner.hpp"

#include "core/mapped_file.hpp"
#include "tune/tuner_phases.hpp"

namespace syslm::tune {
namespace detail {

namespace {

// The decode bottleneck of the input model, in a sentence, from the probe and the model's bytes
// (before anything is timed; the measured split follows once the stock recipes are).
std::string analyse(const model::Model& m, int threads) {
    const profile::ProbeResult probe = profile::cached_or_measured_probe(threads, false);
    const profile::ModelCosts c = profile::model_costs(m, DType::F16);
    const double gbs = probe.read_gbs_for(threads);
    const double per_token_s = c.decode_weight_bytes / (gbs * 1e9);
    double flops = 0;
    for (const profile::MatrixCost& mc : c.matrices) flops += mc.flops_per_token;
    const double compute_s = flops / (probe.fma_f32_for(threads) * 1e9);
    // The caches the weights could stay in between tokens (L2 and below per core, L3 shared).
    size_t cache_bytes = 0;
    for (const profile::CacheLevel& l : probe.caches)
        if (l.level >= 2 && l.type != "Instruction")
            cache_bytes +=
                l.bytes *
                static_cast<size_t>(l.level == 2 ? std::min(l.instances, threads) : l.instances);
    const double q4_bytes = c.decode_weight_bytes * 4.5 / 16;  // about Q4_0's 4.5 bits per weight
    std::ostringstream s;
    s.precision(3);
    s << "decode reads " << c.decode_weight_bytes / 1e6
      << " MB of weights per token at F16: " << per_token_s * 1e3 << " ms at the probe's " << gbs
      << " GB/s (" << threads << " threads), against " << compute_s * 1e3
      << " ms of FP32 arithmetic at its peak; ";
    if (cache_bytes > 0 && q4_bytes < 0.5 * static_cast<double>(cache_bytes))
        s << "at 4-5 bits a weight (" << q4_bytes / 1e6 << " MB) the model stays in the "
          << cache_bytes / 1e6
          << " MB of L2/L3 between tokens, so DRAM bandwidth need not bind: "
             "the types' kernel speed and the per-token overheads decide";
    else if (per_token_s >= compute_s)
        s << "bandwidth-bound, so bytes per token decide: lower-bit types on the largest, least "
             "sensitive matrices first";
    else
        s << "compute-bound at this size, so the types' kernel speed matters as much as bytes";
    return s.str();
}

}  // namespace

TuneResult Tuner::run() {
    TuneResult r;
    read_inputs(r);
    load_or_collect_imatrix();
    const std::vector<TensorSensitivity> table = sensitivity();
    SYSLM_CHECK(!table.empty(), o_.model, ": no weight matrix to quantize");
    if (o_.stock) measure_stock();
    if (o_.draft == "auto") draft_ = distilled_draft();  // charged to the budget first
    search_rounds(table, r);
    structure_phase();
    if (o_.goal != Goal::Size) confirm_speed();
    if (o_.goal == Goal::Serve) serve_phase(r);
    r.points = cache_.points();
    r.front = pareto_front(r.points, o_.goal);
    choose_and_write(r);
    drop_candidate_files(true);
    r.seconds = elapsed();
    return r;
}

// The input's facts (its matrices' type and weights, whether it has its own output matrix),
// the analysis, and the tokens of the two texts.
void Tuner::read_inputs(TuneResult& r) {
    auto file = std::make_shared<const io::GGUFFile>(o_.model);
    in_type_ = matrices_type(*file);
    own_output_ = file->find_tensor("output.weight") != nullptr;
    for (const io::GGUFTensor& t : file->tensors())
        if (compress::is_quantizable_weight(t.name, t.ne)) matrix_weights_ += t.numel();
    const model::Model m(file);
    r.analysis = analyse(m, ThreadPool::resolve(o_.threads));
    say("analysis: " + r.analysis);
    if (!o_.draft.empty() && o_.draft != "auto") {
        // A draft that cannot serve fails now, not after the search.
        draft_ = o_.draft;
        const model::Model dm(o_.draft);
        SYSLM_CHECK(dm.hparams().n_vocab == m.hparams().n_vocab, o_.draft,
                    ": the draft's vocabulary (", dm.hparams().n_vocab,
                    " tokens) differs from the model's (", m.hparams().n_vocab, ")");
    }
    const auto tok = tokenizer::Tokenizer::from_gguf(m.file());
    calib_tokens_ = tok.encode(read_whole_file(o_.calib), true, false);
    calib_bos_ = tok.add_bos() ? tok.bos() : -1;
    eval_tokens_ = tok.encode(read_whole_file(o_.eval), true, false);
    const size_t held_out = eval_tokens_.size();
    eval_chunks_ = static_cast<int>(held_out / static_cast<size_t>(o_.n_ctx));
    SYSLM_CHECK(eval_chunks_ > 0, o_.eval, ": ", held_out, " tokens, fewer than one chunk of ",
                o_.n_ctx);
    if (o_.eval_chunks > 0) eval_chunks_ = std::min(eval_chunks_, o_.eval_chunks);
}

// The best point within the limits (a stock recipe too when it wins: its plan is a plan),
// written as plan.json and model.gguf, with the base a pruned plan is quantized from.
void Tuner::choose_and_write(TuneResult& r) {
    // Serving: the search's confirmed result (its other trials are single timings).
    if (o_.goal == Goal::Serve)
        r.chosen = r.serve_tuned;
    else
        // Among the re-timed points when there are any: a point timed once can win on a
        // lucky run (the winner's curse), so single timings do not decide.
        for (const Point& p : r.points)
            if (within_limits(p) && (confirmed_.empty() || confirmed_.count(p.label)) &&
                (!r.chosen || goal_value(p, o_.goal) > goal_value(*r.chosen, o_.goal)))
                r.chosen = p;
    if (!r.chosen) return;
    const fs::path dir(o_.out_dir);
    if (!draft_.empty()) draft_phase(r);
    fs::copy_file(file_of(r.chosen->plan), dir / "model.gguf",
                  fs::copy_options::overwrite_existing);
    length_phase(r);
    save_plan(r.chosen->plan, (dir / "plan.json").string());
    // A pruned plan is quantized from its recovered base: `quantize --plan` takes it.
    if (r.chosen->plan.prune) {
        const Base& b = base_of(*r.chosen->plan.prune);
        fs::copy_file(b.pruned.path, dir / "base.gguf", fs::copy_options::overwrite_existing);
        fs::copy_file(b.imatrix_path(), dir / "base-imatrix.gguf",
                      fs::copy_options::overwrite_existing);
    }
}

bool Tuner::proxy_sensitivity() const {
    if (o_.sensitivity_mode == "measured") return false;
    if (o_.sensitivity_mode == "proxy") return true;
    return matrix_weights_ > 100e6;
}

bool Tuner::within_limits(const Point& p) const {
    if (!measures_goal(p, o_.goal) || p.kl > o_.max_kl) return false;
    return o_.goal != Goal::Serve || (p.ttft_p99 <= o_.max_ttft_p99 && p.itl_p99 <= o_.max_itl_p99);
}

void Tuner::say(const std::string& line) const {
    if (o_.log) *o_.log << "tune: " << line << std::endl;
}

// The sensitivity table, read back when a previous run of the same inputs wrote it.
// What the importance matrix and the sensitivities are computed from: a file left by an
// earlier run with another key is measured again.
nlohmann::json Tuner::input_key() const {
    return {{"model", fs::absolute(o_.model).string()},
            {"model_bytes", fs::file_size(o_.model)},
            {"calib", fs::absolute(o_.calib).string()},
            {"calib_bytes", fs::file_size(o_.calib)},
            {"n_ctx", o_.n_ctx}};
}

// The progress line: points measured, the best within the limit so far, time spent.
void Tuner::progress() const {
    const Goal g = o_.goal == Goal::Size ? Goal::Size : speed_goal();
    const Point* best = nullptr;
    for (const Point& p : cache_.points())
        if (p.kl <= o_.max_kl && p.streams == 0 &&
            (!best || goal_value(p, g) > goal_value(*best, g)))
            best = &p;
    const std::string figure = !best ? "none yet"
                               : g == Goal::Size
                                   ? cat(best->label, " (", best->file_bytes / 1e6, " MB)")
                                   : cat(best->label, " (", goal_value(*best, g), " tok/s)");
    say(cat(cache_.points().size(), " points measured; best within KL ", o_.max_kl, ": ", figure,
            "; ", static_cast<int>(elapsed()), " s of the ", static_cast<int>(o_.budget_s),
            " s budget"));
}

}  // namespace detail

TuneResult run_tune(const TuneOptions& options) {
    SYSLM_CHECK(options.max_kl > 0 && std::isfinite(options.max_kl),
                "tune: --max-kl must be a "
                "positive number");
    return detail::Tuner(options).run();
}

}  // namespace syslm::tune
