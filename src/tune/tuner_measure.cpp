// The tuner's measurements: building candidate files, their quality and speed on the held-out
// text, the re-timing of the best, and the decode cost model fitted to them (tuner_phases.hpp).
#include "tune/tuner_phases.hpp"

namespace syslm::tune::detail {

// llama-quantize's recipes, with and without the importance matrix, measured like the rest.
void Tuner::measure_stock() {
    std::vector<Point> stock;
    for (const char* recipe : kStockRecipes)
        for (bool im : {false, true}) {
            Point p;
            p.label = std::string(recipe) + (im ? " imatrix" : "");
            p.stock = true;
            p.plan.recipe = recipe;
            p.plan.imatrix = im;
            p.plan.threads = o_.threads;
            stock.push_back(p);
        }
    measure(stock);
}

// The plan's file, built unless an earlier run left it.
std::string Tuner::file_of(const Plan& plan) const {
    const fs::path path = candidate_path(plan);
    if (!fs::exists(path)) {
        const Base* base = plan.prune ? &base_of(*plan.prune) : nullptr;
        compress::QuantizeOptions q = quantize_options(plan, base ? DType::F32 : in_type_);
        q.imatrix = !plan.imatrix ? nullptr : base ? &base->imatrix : &imatrix_;
        q.threads = o_.threads;
        compress::quantize_model(base ? base->pruned.path : o_.model, path.string(), q);
    }
    return path.string();
}

fs::path Tuner::candidate_path(const Plan& plan) const {
    return fs::path(o_.out_dir) / "candidates" / (word_hash_name(plan.model_key()) + ".gguf");
}

// Builds the points' files (kept across runs) and measures them with the input as the
// reference, in one pass over the held-out text; each point joins the cache at once.
void Tuner::measure(std::vector<Point> points) {
    points.erase(std::remove_if(points.begin(), points.end(),
                                [&](const Point& p) { return cache_.find(p.plan.key()); }),
                 points.end());
    if (points.empty()) return;
    const double t0 = elapsed();
    std::vector<std::string> paths{o_.model};
    for (const Point& p : points) paths.push_back(file_of(p.plan));
    const compress::EvalReport rep = evaluate_by_halving(paths);
    for (size_t i = 0; i < points.size(); ++i) {
        Point p = points[i];
        const compress::ModelEval& m = rep.models[i + 1];
        const compress::TextEval& q = m.texts.at(0);
        p.file_bytes = m.file_bytes;
        p.kl = q.kl;
        p.ppl = q.ppl;
        p.top1 = q.top1;
        p.eval_tokens = q.n_scored;
        // Medians of the round-robin repetitions: one slow stretch of a shared machine moves
        // a mean, not a median.
        p.decode_ts = median(m.decode_samples);
        p.prefill_ts = median(m.prefill_samples);
        p.decode_bytes = decode_bytes(io::GGUFFile(paths[i + 1]));
        cache_.add(p);
        say(cat(p.label, ": ", p.file_bytes / 1e6, " MB, KL ", p.kl,
                p.predicted_kl >= 0 ? cat(" (predicted ", p.predicted_kl, ")") : "", ", PPL ",
                p.ppl, ", decode ", p.decode_ts, " tok/s, prefill ", p.prefill_ts, " tok/s"));
    }
    seconds_per_file_ = (elapsed() - t0) / static_cast<double>(points.size());
    progress();
    drop_candidate_files(false);
}

// Candidate files are quantized copies of the model, so only those a later phase may time
// again stay: the fastest (smallest, size goal) within the limit of each kind, as many as
// confirm_speed and the serve phase take. At the end none does (the chosen one is
// model.gguf); the pruned bases and drafts stay, being minutes of distillation each. A
// deleted file is rebuilt from its plan if it is needed after all.
void Tuner::drop_candidate_files(bool at_end) const {
    if (o_.keep_candidates) return;
    std::set<std::string> keep;
    if (!at_end) {
        const Goal g = o_.goal == Goal::Size ? Goal::Size : speed_goal();
        std::vector<const Point*> within;
        for (const Point& p : cache_.points())
            if (p.kl <= o_.max_kl && p.streams == 0) within.push_back(&p);
        std::sort(within.begin(), within.end(), [&](const Point* a, const Point* b) {
            return goal_value(*a, g) > goal_value(*b, g);
        });
        int n_tuned = 0, n_stock = 0, n_pruned = 0;
        for (const Point* p : within)
            if (p->stock        ? n_stock++ < 2
                : p->plan.prune ? n_pruned++ < 2
                                : n_tuned++ < std::max(3, o_.serve_files))
                keep.insert(candidate_path(p->plan).filename().string());
    }
    std::error_code ec;
    std::vector<fs::path> drop;  // collected first: no removal while the directory is read
    for (const auto& e : fs::directory_iterator(fs::path(o_.out_dir) / "candidates", ec)) {
        const std::string name = e.path().filename().string();
        if (e.is_regular_file() && e.path().extension() == ".gguf" && name.rfind("base-", 0) != 0 &&
            name.rfind("draft-", 0) != 0 && !keep.count(name))
            drop.push_back(e.path());
    }
    for (const fs::path& f : drop) fs::remove(f, ec);
}

// The bytes decode reads by type, as recorded when the point was measured, or read from its
// file for a point of an older cache; none when that file is gone too.
std::optional<BytesByType> Tuner::bytes_of(const Point& p) const {
    if (!p.decode_bytes.empty()) return p.decode_bytes;
    const fs::path path = candidate_path(p.plan);
    if (!fs::exists(path)) return std::nullopt;
    return decode_bytes(io::GGUFFile(path.string()));
}

// Quality and speed of the files paths[1..] against the input paths[0], by successive
// halving on the held-out text: every file is measured (and timed) on the first quarter of
// the chunks; only those whose KL may be within the limit (mean minus two standard errors
// at most the limit) are measured on the rest, and their figures merged. A file clearly
// outside keeps its first figures, marked by the tokens they are from.
compress::EvalReport Tuner::evaluate_by_halving(const std::vector<std::string>& paths) const {
    compress::EvalOptions eo;
    eo.n_ctx = o_.n_ctx;
    eo.threads = o_.threads;
    eo.speed_prompt = o_.prefill_tokens;
    eo.speed_gen = o_.decode_tokens;
    eo.speed_reps = o_.speed_reps;
    eo.log = o_.log;
    const int rung = eval_chunks_ >= 4 ? eval_chunks_ / 4 : eval_chunks_;
    eo.max_chunks = rung;
    compress::EvalReport rep = compress::evaluate(paths, {o_.eval}, eo);
    if (rung == eval_chunks_) return rep;
    std::vector<size_t> on;
    std::vector<std::string> rest_paths{o_.model};
    for (size_t i = 1; i < paths.size(); ++i) {
        const compress::TextEval& q = rep.models[i].texts.at(0);
        if (q.kl - 2 * q.kl_stderr <= o_.max_kl) {
            on.push_back(i);
            rest_paths.push_back(paths[i]);
        }
    }
    say(cat("successive halving: ", on.size(), " of ", paths.size() - 1,
            " files may be within the limit on ", rung, " of ", eval_chunks_,
            " held-out chunks; they are measured on the rest"));
    if (on.empty()) return rep;
    eo.first_chunk = rung;
    eo.max_chunks = eval_chunks_;
    eo.speed_prompt = eo.speed_gen = 0;
    const compress::EvalReport rest = compress::evaluate(rest_paths, {o_.eval}, eo);
    for (size_t k = 0; k < on.size(); ++k) {
        compress::TextEval& q = rep.models[on[k]].texts.at(0);
        q = compress::merge(q, rest.models[k + 1].texts.at(0));
    }
    return rep;
}

// Speed measured alongside the quality is a few repetitions; before choosing, the best
// points within the limit are timed again, round-robin so that a slow stretch of the machine
// hits them alike, and their median over all repetitions replaces the first figure.
void Tuner::confirm_speed() {
    const int max_threads = ThreadPool::resolve(o_.threads);
    std::vector<Point> top;
    for (const Point& p : cache_.points())
        if (p.kl <= o_.max_kl && p.streams == 0 && p.plan.threads == o_.threads) top.push_back(p);
    std::sort(top.begin(), top.end(), [&](const Point& a, const Point& b) {
        return goal_value(a, speed_goal()) > goal_value(b, speed_goal());
    });
    // Every point within the limit when timing them all again is cheap (a twentieth of the
    // budget): on a small model single timings swing by a third, so choosing which to
    // confirm by them would be the winner's curse again. Otherwise the three fastest tuned
    // points, the fastest pruned one and the two fastest stock recipes. The comparison the
    // report makes is always between confirmed figures.
    const Goal g = speed_goal();
    double all_s = 0;
    for (const Point& p : top)
        all_s += 3.0 * o_.speed_reps * (g == Goal::Prefill ? o_.prefill_tokens : o_.decode_tokens) /
                 std::max(goal_value(p, g), 1e-3);
    const bool time_all = all_s <= 0.05 * o_.budget_s;
    if (!time_all) {
        std::vector<Point> kept;
        int n_tuned = 0, n_stock = 0, n_pruned = 0;
        for (const Point& p : top)
            if (p.stock ? n_stock++ < 2 : (n_tuned++ < 3 || (p.plan.prune && n_pruned == 0))) {
                n_pruned += p.plan.prune ? 1 : 0;
                kept.push_back(p);
            }
        top = std::move(kept);
    }
    // Points also at fewer threads: a small model can run faster on fewer cores (less
    // synchronisation per step), and the stock recipes get the same chance as the tuned
    // files. All of them when timing all is cheap, else the fastest tuned and stock ones.
    std::vector<Point> runs = top;
    if (o_.goal != Goal::Serve) {
        std::set<bool> kinds;
        for (const Point& p : top) {
            if (!kinds.insert(p.stock).second && !time_all) continue;
            for (int t = 1; t < max_threads; t *= 2) {
                Point q = p;
                q.plan.threads = t;
                q.label += cat(" t", t);
                runs.push_back(q);
            }
        }
    }
    if (runs.size() < 2) return;
    std::vector<std::unique_ptr<model::Model>> models;
    for (const Point& p : runs) models.push_back(std::make_unique<model::Model>(file_of(p.plan)));
    const profile::BenchTest test = speed_goal() == Goal::Prefill
                                        ? profile::BenchTest{o_.prefill_tokens, 0}
                                        : profile::BenchTest{0, o_.decode_tokens};
    std::vector<std::vector<double>> ts(runs.size());
    for (int round = 0; round < 3 * o_.speed_reps; ++round)
        for (size_t i = 0; i < runs.size(); ++i) {
            profile::BenchOptions bo;
            bo.threads = runs[i].plan.threads > 0 ? runs[i].plan.threads : max_threads;
            bo.reps = 1;
            ts[i].push_back(profile::run_bench(*models[i], test, bo).avg_ts);
        }
    for (size_t i = 0; i < runs.size(); ++i) {
        const double m = median(ts[i]);
        Point p = runs[i];
        (speed_goal() == Goal::Prefill ? p.prefill_ts : p.decode_ts) = m;
        cache_.add(p);  // the later line of a plan wins
        confirmed_.insert(p.label);
        say(cat(p.label, ": ", goal_name(speed_goal()), " timed again: ", m, " tok/s (median of ",
                ts[i].size(), ")"));
    }
}

// The geometric mean of measured / predicted over the tuned points near the limit: the
// additive model's error where it matters.
double Tuner::refit(double factor) const {
    double sum = 0;
    int n = 0;
    for (const Point& p : cache_.points()) {
        if (p.stock || p.additive_kl <= 0 || p.kl <= 0) continue;
        if (p.kl < 0.2 * o_.max_kl || p.kl > 5 * o_.max_kl) continue;
        sum += std::log(p.kl / p.additive_kl);
        ++n;
    }
    return n ? std::exp(sum / n) : factor;
}

// The share of a token's decode time the weight types act on, from the fitted cost model and
// the fastest stock recipe within the limit (the fastest of all when none is).
std::string Tuner::measured_analysis() const {
    const Point* best = nullptr;
    for (const Point& p : cache_.points())
        if (p.stock && p.streams == 0 && p.plan.threads == o_.threads &&
            (!best || (p.kl <= o_.max_kl) > (best->kl <= o_.max_kl) ||
             ((p.kl <= o_.max_kl) == (best->kl <= o_.max_kl) && p.decode_ts > best->decode_ts)))
            best = &p;
    if (!best) return "";
    const std::optional<BytesByType> bytes = bytes_of(*best);
    if (!bytes) return "";
    const double total = cost_->predict(*bytes);
    const double weights = total - cost_->fixed_s;
    const double share = weights / total;
    std::ostringstream s;
    s.precision(3);
    s << "measured on " << cost_->samples << " files: a decoded token costs "
      << cost_->fixed_s * 1e6 << " us whatever the weight types, plus " << weights * 1e6
      << " us reading " << best->label
      << "'s weights (its measured total: " << 1e6 / best->decode_ts << " us); the types act on "
      << 100 * share << "% of the time, so no choice of types can decode more than "
      << 1 / (1 - share) << "x faster than " << best->label;
    if (share < 0.3)
        s << ": decode is bound by per-token overheads (attention, norms, dispatch), not by "
             "the weights";
    return s.str();
}

// Fits the decode cost model to every model-half point timed so far (their files' bytes by
// type against their decode time); false while fewer than two are.
bool Tuner::fit_cost_model() {
    std::vector<DecodeTimeSample> samples;
    for (const Point& p : cache_.points()) {
        // Pruned files have other fixed costs (fewer heads, layers): not this model's samples.
        if (p.streams > 0 || p.decode_ts <= 0 || p.plan.threads != o_.threads || p.plan.prune)
            continue;
        if (const std::optional<BytesByType> b = bytes_of(p))
            samples.push_back({*b, 1 / p.decode_ts});
    }
    if (samples.size() < 2) return false;
    cost_ = fit_decode_cost(samples);
    std::string rates;
    for (const auto& [t, spb] : cost_->s_per_byte)
        rates += cat(rates.empty() ? "" : ", ", dtype_name(t), " ", 1e-9 / spb);
    say(cat("decode cost model (", samples.size(), " files): ", cost_->fixed_s * 1e6,
            " us per token + bytes at GB/s: ", rates));
    return true;
}

}  // namespace syslm::tune::detail
