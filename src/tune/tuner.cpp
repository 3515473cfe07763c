#include "tune/tuner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>
#include <sstream>

#include "compress/evaluate.hpp"
#include "compress/imatrix.hpp"
#include "compress/quantize_model.hpp"
#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "core/thread_pool.hpp"
#include "io/gguf.hpp"
#include "profile/bench_runner.hpp"
#include "profile/machine_probe.hpp"
#include "profile/model_costs.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tune/allocate.hpp"
#include "tune/confirmation.hpp"
#include "tune/decode_cost.hpp"
#include "tune/sensitivity.hpp"
#include "tune/serve_load.hpp"
#include "tune/serve_search.hpp"
#include "tune/structure.hpp"

namespace syslm::tune {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

// llama-quantize's stock recipes the front is compared with (each with and without the
// importance matrix).
const char* const kStockRecipes[] = {"Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0", "Q3_K_M", "Q2_K"};

// Types the allocation chooses from: the K-quants for rows of 256, the 32-blocks otherwise, F16
// for rows that fit no block.
const DType kDefaultTypes[] = {DType::F16,  DType::Q8_0, DType::Q6_K, DType::Q5_K, DType::Q4_K,
                               DType::Q3_K, DType::Q2_K, DType::Q5_0, DType::Q4_0};

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    SYSLM_CHECK(in, path, ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

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
            cache_bytes += l.bytes * static_cast<size_t>(l.level == 2 ? std::min(l.instances, threads)
                                                                      : l.instances);
    const double q4_bytes = c.decode_weight_bytes * 4.5 / 16;  // about Q4_0's 4.5 bits per weight
    std::ostringstream s;
    s.precision(3);
    s << "decode reads " << c.decode_weight_bytes / 1e6 << " MB of weights per token at F16: "
      << per_token_s * 1e3 << " ms at the probe's " << gbs << " GB/s (" << threads
      << " threads), against " << compute_s * 1e3 << " ms of FP32 arithmetic at its peak; ";
    if (cache_bytes > 0 && q4_bytes < 0.5 * static_cast<double>(cache_bytes))
        s << "at 4-5 bits a weight (" << q4_bytes / 1e6 << " MB) the model stays in the "
          << cache_bytes / 1e6 << " MB of L2/L3 between tokens, so DRAM bandwidth need not bind: "
             "the types' kernel speed and the per-token overheads decide";
    else if (per_token_s >= compute_s)
        s << "bandwidth-bound, so bytes per token decide: lower-bit types on the largest, least "
             "sensitive matrices first";
    else
        s << "compute-bound at this size, so the types' kernel speed matters as much as bytes";
    return s.str();
}

class Tuner {
public:
    explicit Tuner(const TuneOptions& o)
        : o_(o), start_(Clock::now()), cache_((fs::path(o.out_dir) / "measurements.jsonl").string()) {
        fs::create_directories(fs::path(o.out_dir) / "candidates");
    }

    TuneResult run() {
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

private:
    // The input's facts (its matrices' type and weights, whether it has its own output matrix),
    // the analysis, and the tokens of the two texts.
    void read_inputs(TuneResult& r) {
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
        calib_tokens_ = tok.encode(read_text(o_.calib), true, false);
        calib_bos_ = tok.add_bos() ? tok.bos() : -1;
        eval_tokens_ = tok.encode(read_text(o_.eval), true, false);
        const size_t held_out = eval_tokens_.size();
        eval_chunks_ = static_cast<int>(held_out / static_cast<size_t>(o_.n_ctx));
        SYSLM_CHECK(eval_chunks_ > 0, o_.eval, ": ", held_out, " tokens, fewer than one chunk of ",
                    o_.n_ctx);
        if (o_.eval_chunks > 0) eval_chunks_ = std::min(eval_chunks_, o_.eval_chunks);
    }

    // llama-quantize's recipes, with and without the importance matrix, measured like the rest.
    void measure_stock() {
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

    // Rounds of candidates along the allocation hull, the KL model's correction and (decode
    // goal) the cost model refitted after each, until the budget or the proposals run out.
    void search_rounds(const std::vector<TensorSensitivity>& table, TuneResult& r) {
        std::vector<TensorSensitivity> costed = table;
        std::vector<Allocation> hull = allocation_hull(costed);
        say(cat("allocation: ", hull.size(), " points from ", hull.front().bytes / 1e6, " to ",
                hull.back().bytes / 1e6, " MB of matrices"));
        // Decode goal: the allocation minimises the time the cost model fitted to the files timed
        // so far predicts, refitted every round.
        auto refit_cost = [&] {
            if (o_.goal != Goal::Decode || !fit_cost_model()) return;
            for (TensorSensitivity& t : costed)
                for (TypeCost& c : t.options)
                    c.cost = (t.name == "token_embd.weight" && own_output_)
                                 ? 0
                                 : static_cast<double>(c.bytes) * cost_->seconds_per_byte(c.type);
            hull = allocation_hull(costed);
        };
        if (refit_cost(), cost_) {
            r.analysis += "; " + measured_analysis();
            say("measured: " + measured_analysis());
        }
        double factor = 1;  // measured KL / the allocation's sum, fitted round by round
        for (int round = 0; round < o_.max_rounds && !over_budget(); ++round) {
            const std::vector<Point> pending = round_candidates(table, hull, factor, round);
            if (pending.empty()) break;
            // A round starts only if it fits the budget at the pace of the files measured so
            // far (building and measuring a candidate costs about what a stock file did).
            const double round_s = seconds_per_file_ * static_cast<double>(pending.size());
            if (round > 0 && elapsed() + round_s > o_.budget_s) {
                say(cat("round ", round + 1, " would take ~", static_cast<int>(round_s),
                        " s: past the budget, so the search stops here"));
                break;
            }
            say(cat("round ", round + 1, ": ", pending.size(), " candidates (KL model x",
                    factor, ")"));
            measure(pending);
            factor = refit(factor);
            refit_cost();
        }
    }

    // A round's new candidates: for each target (a multiple of the limit), the hull's fewest
    // bytes whose corrected KL is within it; the first round also spreads points over the
    // hull's costs, so the front has a shape even when every allocation is within the limit.
    std::vector<Point> round_candidates(const std::vector<TensorSensitivity>& table,
                                        const std::vector<Allocation>& hull, double factor,
                                        int round) const {
        const std::vector<double> first = {0.1, 0.35, 0.6, 0.85, 1.0, 1.3, 2.0, 4.0};
        const std::vector<double> later = {0.8, 0.9, 1.0, 1.1, 1.25};
        std::vector<Point> pending;
        std::set<std::string> keys;
        auto add = [&](const Allocation& a) {
            Point p = tuned_point(table, a, factor);
            if (keys.insert(p.plan.key()).second && !cache_.find(p.plan.key()))
                pending.push_back(std::move(p));
        };
        for (double m : round == 0 ? first : later) {
            const Allocation* best = nullptr;
            for (const Allocation& a : hull)
                if (a.predicted_kl * factor <= m * o_.max_kl) best = &a;
            if (best) add(*best);
        }
        if (round == 0)
            for (double share : {0.25, 0.5, 0.75}) {
                const double target =
                    hull.back().cost + share * (hull.front().cost - hull.back().cost);
                const Allocation* best = &hull.front();
                for (const Allocation& a : hull)
                    if (a.cost >= target) best = &a;
                add(*best);
            }
        return pending;
    }

    // The best point within the limits (a stock recipe too when it wins: its plan is a plan),
    // written as plan.json and model.gguf, with the base a pruned plan is quantized from.
    void choose_and_write(TuneResult& r) {
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
        save_plan(r.chosen->plan, (dir / "plan.json").string());
        fs::copy_file(file_of(r.chosen->plan), dir / "model.gguf",
                      fs::copy_options::overwrite_existing);
        // A pruned plan is quantized from its recovered base: `quantize --plan` takes it.
        if (r.chosen->plan.prune) {
            const Base& b = base_of(*r.chosen->plan.prune);
            fs::copy_file(b.pruned.path, dir / "base.gguf", fs::copy_options::overwrite_existing);
            fs::copy_file(b.imatrix_path(), dir / "base-imatrix.gguf",
                          fs::copy_options::overwrite_existing);
        }
    }

    // The draft knob, on the chosen file: plain decoding against speculative decoding at each
    // draft setting, from the held-out text's chunk starts; the fastest enters the plan (with the
    // draft copied beside it) only when it beats plain decoding.
    void draft_phase(TuneResult& r) {
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
    std::string distilled_draft() {
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
            say(cat("draft: distilling a ", keep, "-layer draft would take ~",
                    static_cast<int>(need), " s: past the budget, skipped"));
            return "";
        }
        say(cat("draft: ", hp.n_layer, " -> ", keep, " layers, distilled for ",
                level.recover_steps, " steps (~", static_cast<int>(need), " s predicted)"));
        const PrunedBase base = pruned_base(level, structure_options());
        Plan plan;
        plan.recipe = "Q8_0";
        const fs::path path = fs::path(o_.out_dir) / "candidates" /
                              ("draft-" + word_hash_name(key_of(level)) + ".gguf");
        if (!fs::exists(path)) {
            compress::QuantizeOptions q = quantize_options(plan, DType::F32);
            q.threads = o_.threads;
            compress::quantize_model(base.path, path.string(), q);
        }
        return path.string();
    }

    // Seconds a pruned level's recovery distillation is predicted to take on this machine.
    double predicted_recovery(const model::Model& input, const PruneSettings& level) const {
        double flops = 0;
        for (const profile::MatrixCost& mc : profile::model_costs(input, DType::F32).matrices)
            flops += mc.flops_per_token;
        const int threads = ThreadPool::resolve(o_.threads);
        const double gflops =
            profile::cached_or_measured_probe(threads, false).fma_f32_for(threads);
        return predicted_recovery_s(input.hparams(), flops, level, o_.n_ctx, gflops);
    }

    bool proxy_sensitivity() const {
        if (o_.sensitivity_mode == "measured") return false;
        if (o_.sensitivity_mode == "proxy") return true;
        return matrix_weights_ > 100e6;
    }

    bool within_limits(const Point& p) const {
        if (!measures_goal(p, o_.goal) || p.kl > o_.max_kl) return false;
        return o_.goal != Goal::Serve || (p.ttft_p99 <= o_.max_ttft_p99 && p.itl_p99 <= o_.max_itl_p99);
    }
    // The speed the model half is timed by: prefill for that goal, decode otherwise.
    Goal speed_goal() const { return o_.goal == Goal::Prefill ? Goal::Prefill : Goal::Decode; }

    // What every served trial shares: the tokenizer and the load drawn from the held-out text.
    struct ServeRun {
        tokenizer::Tokenizer tok;
        ServeLoad load;
        int max_threads = 0;
    };

    ServeRun serve_run() const {
        const model::Model input(o_.model);
        ServeRun run{tokenizer::Tokenizer::from_gguf(input.file()), {}, ThreadPool::resolve(o_.threads)};
        run.load.streams = o_.streams;
        run.load.requests_per_stream = o_.serve_requests;
        run.load.max_tokens = o_.serve_max_tokens;
        run.load.prompts = cut_prompts(run.tok.encode(read_text(o_.eval), true, false),
                                       4 * o_.streams, o_.serve_prompt_tokens);
        say(cat("serve: ", o_.streams, " streams x ", o_.serve_requests, " requests of ",
                o_.serve_max_tokens, " tokens, prompts up to ", o_.serve_prompt_tokens, " tokens"));
        return run;
    }

    // A served point of a file's plan with these settings: from the cache unless `again`.
    Point serve_point(const ServeRun& run, const Point& file, std::shared_ptr<const model::Model> m,
                      const ServeSettings& s, int threads, bool again,
                      const std::string& label) const {
        Point p = file;
        p.label = label;
        p.plan.threads = threads;
        p.plan.serve = s;
        p.streams = o_.streams;
        if (!again)
            if (const Point* c = cache_.find(p.plan.key())) return *c;
        infer::EngineConfig ec;
        ec.threads = threads;
        ec.parallel = s.parallel;
        ec.token_budget = s.token_budget;
        ec.page_size = s.page_size;
        ec.n_pages = s.kv_pages;
        ec.n_ctx = s.ctx;
        ec.kv_type = s.cache_type == "f32" ? DType::F32 : DType::F16;
        const ServeMeasurement sm = measure_serving(std::move(m), run.tok, ec, run.load);
        p.serve_ts = sm.tokens_per_s;
        p.ttft_p99 = sm.ttft_p99;
        p.itl_p99 = sm.itl_p99;
        return p;
    }

    // The fastest-decoding files within the KL limit, served at `syslm serve`'s defaults; the
    // one serving fastest within the latency limits, and its model.
    std::pair<Point, std::shared_ptr<const model::Model>> best_served_file(const ServeRun& run) {
        std::vector<Point> files;
        for (const Point& p : cache_.points())
            if (p.streams == 0 && p.kl <= o_.max_kl) files.push_back(p);
        SYSLM_CHECK(!files.empty(), "tune: no file is within KL ", o_.max_kl, " to serve");
        std::sort(files.begin(), files.end(),
                  [](const Point& a, const Point& b) { return a.decode_ts > b.decode_ts; });
        if (files.size() > static_cast<size_t>(o_.serve_files)) files.resize(o_.serve_files);
        std::optional<Point> best_file;
        std::shared_ptr<const model::Model> best_model;
        double best_ts = -1;
        for (const Point& f : files) {
            auto m = std::make_shared<const model::Model>(file_of(f.plan));
            const Point p = serve_point(run, f, m, ServeSettings{}, run.max_threads, false,
                                        f.label + " @ serve defaults");
            if (!cache_.find(p.plan.key())) cache_.add(p);
            say(cat(p.label, ": ", p.serve_ts, " tok/s, TTFT p99 ", p.ttft_p99, " s"));
            if (within_limits(p) && p.serve_ts > best_ts) {
                best_ts = p.serve_ts;
                best_file = f;
                best_model = m;
            }
        }
        SYSLM_CHECK(best_file, "tune: no file within KL ", o_.max_kl, " meets the latency limits "
                    "at the default serve settings");
        return {*best_file, best_model};
    }

    // The serve goal's runtime half: the best file at the defaults gets the runtime search;
    // every trial is a point (cached: a resumed tune does not repeat it) and the default and
    // tuned figures are confirmed by alternating timings.
    void serve_phase(TuneResult& r) {
        const ServeRun run = serve_run();
        const auto best = best_served_file(run);
        const Point& f = best.first;
        const std::shared_ptr<const model::Model>& model = best.second;
        ServeSearchOptions so;
        so.streams = o_.streams;
        so.max_threads = run.max_threads;
        so.max_ttft_p99 = o_.max_ttft_p99;
        so.max_itl_p99 = o_.max_itl_p99;
        so.log = o_.log;
        auto label = [&](const ServeSettings& s, int threads) {
            return s == ServeSettings{} && threads == run.max_threads
                       ? f.label + " @ serve defaults"
                       : cat(f.label, " @ serve t", threads, " p", s.parallel, " b",
                             s.token_budget, " pg", s.page_size, " ", s.cache_type);
        };
        const ServeSearchResult sr = search_serving(
            [&](const ServeSettings& s, int threads, bool again) {
                const Point p = serve_point(run, f, model, s, threads, again, label(s, threads));
                if (!again && !cache_.find(p.plan.key())) cache_.add(p);
                ServeMeasurement m;
                m.tokens_per_s = p.serve_ts;
                m.ttft_p99 = p.ttft_p99;
                m.itl_p99 = p.itl_p99;
                return m;
            },
            so);
        // The confirmed figures replace the search's first timings (a later line wins).
        for (const ServeTrial* t : {&sr.baseline, &sr.best}) {
            Point p = serve_point(run, f, model, t->settings, t->threads, false,
                                  label(t->settings, t->threads));
            p.serve_ts = t->m.tokens_per_s;
            p.ttft_p99 = t->m.ttft_p99;
            p.itl_p99 = t->m.itl_p99;
            cache_.add(p);
            (t == &sr.baseline ? r.serve_default : r.serve_tuned) = p;
        }
    }

    double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
    bool over_budget() const { return elapsed() > o_.budget_s; }
    void say(const std::string& line) const {
        if (o_.log) *o_.log << "tune: " << line << std::endl;
    }

    // The sensitivity table, read back when a previous run of the same inputs wrote it.
    // What the importance matrix and the sensitivities are computed from: a file left by an
    // earlier run with another key is measured again.
    nlohmann::json input_key() const {
        return {{"model", fs::absolute(o_.model).string()},
                {"model_bytes", fs::file_size(o_.model)},
                {"calib", fs::absolute(o_.calib).string()},
                {"calib_bytes", fs::file_size(o_.calib)},
                {"n_ctx", o_.n_ctx}};
    }

    // The importance matrix of the input on the calibration text, kept in the tune's directory
    // (beside the plan, so `quantize --plan` can rebuild the chosen file) and read back by a
    // resumed tune: on L1B it is minutes of forward passes.
    void load_or_collect_imatrix() {
        const fs::path path = fs::path(o_.out_dir) / "imatrix.gguf";
        const fs::path key_path = fs::path(o_.out_dir) / "imatrix.key.json";
        const nlohmann::json key = input_key();
        if (fs::exists(path) && fs::exists(key_path)) {
            try {
                if (nlohmann::json::parse(read_text(key_path.string())) == key) {
                    imatrix_ = compress::ImportanceMatrix::load(path.string());
                    say("imatrix: read back from " + path.string());
                    return;
                }
            } catch (const std::exception& e) {
                say(cat("imatrix: ", path.string(), " unusable (", e.what(), "): collecting"));
            }
        }
        compress::ImatrixOptions io;
        io.n_ctx = o_.n_ctx;
        io.threads = o_.threads;
        io.log = o_.log;
        imatrix_ = compress::load_or_collect_imatrix(o_.model, o_.calib, io);
        imatrix_.save(path.string());
        write_file_atomically(key_path.string(), key.dump(1));
    }

    std::vector<TensorSensitivity> sensitivity() {
        std::vector<DType> types =
            o_.types.empty() ? std::vector<DType>(std::begin(kDefaultTypes), std::end(kDefaultTypes))
                             : o_.types;
        types.push_back(in_type_);  // the unquantized choice: KL 0
        std::sort(types.begin(), types.end());
        types.erase(std::unique(types.begin(), types.end()), types.end());
        nlohmann::json key = input_key();
        key["chunks"] = o_.sensitivity_chunks;
        key["proxy"] = proxy_sensitivity();
        for (DType t : types) key["types"].push_back(dtype_name(t));
        const fs::path path = fs::path(o_.out_dir) / "sensitivity.json";
        if (fs::exists(path)) {
            try {
                const nlohmann::json j = nlohmann::json::parse(read_text(path.string()));
                if (j.at("key") == key) {
                    std::vector<TensorSensitivity> table;
                    for (const auto& t : j.at("tensors")) {
                        TensorSensitivity s;
                        s.name = t.at("name");
                        for (const auto& o : t.at("options")) {
                            const auto type = dtype_from_name(o.at("type").get<std::string>());
                            SYSLM_CHECK(type, "unknown type ", o.at("type"));
                            TypeCost c{*type, o.at("bytes").get<uint64_t>(),
                                       o.at("kl").get<double>()};
                            c.weighted_error = o.value("weighted_error", 0.0);
                            c.measured = o.value("measured", true);
                            s.options.push_back(c);
                        }
                        table.push_back(std::move(s));
                    }
                    say("sensitivity: read back from " + path.string());
                    return table;
                }
            } catch (const std::exception& e) {
                say(cat("sensitivity: ", path.string(), " unusable (", e.what(), "): measuring"));
            }
        }
        SensitivityOptions so;
        so.types = types;
        so.n_ctx = o_.n_ctx;
        so.max_chunks = o_.sensitivity_chunks;
        so.threads = o_.threads;
        so.imatrix = &imatrix_;
        so.proxy = proxy_sensitivity();
        if (so.proxy)
            say(cat("sensitivity: proxy mode (", matrix_weights_ / 1e6, "M weights in matrices): "
                    "one type per tensor run, the others scaled by importance-weighted error"));
        const auto t0 = Clock::now();
        so.progress = [&](size_t done, size_t total) {
            if (!o_.log || (done % 16 != 0 && done != total)) return;
            const double s = std::chrono::duration<double>(Clock::now() - t0).count();
            *o_.log << "tune: sensitivity " << done << "/" << total << " (" << static_cast<int>(s)
                    << " s, ETA " << static_cast<int>(s / done * (total - done)) << " s)"
                    << std::endl;
        };
        const std::vector<TensorSensitivity> table =
            measure_sensitivity(o_.model, calib_tokens_, so);
        nlohmann::json j = {{"key", key}, {"tensors", nlohmann::json::array()}};
        for (const TensorSensitivity& s : table) {
            nlohmann::json t = {{"name", s.name}, {"options", nlohmann::json::array()}};
            for (const TypeCost& o : s.options)
                t["options"].push_back({{"type", dtype_name(o.type)},
                                        {"bytes", o.bytes},
                                        {"kl", o.kl},
                                        {"weighted_error", o.weighted_error},
                                        {"measured", o.measured}});
            j["tensors"].push_back(std::move(t));
        }
        write_file_atomically(path.string(), j.dump(1));
        return table;
    }

    Point tuned_point(const std::vector<TensorSensitivity>& table, const Allocation& a,
                      double factor) const {
        Point p;
        p.plan.imatrix = true;
        p.plan.threads = o_.threads;
        for (size_t i = 0; i < table.size(); ++i) p.plan.tensor_types[table[i].name] = a.types[i];
        p.additive_kl = a.predicted_kl;
        p.predicted_kl = a.predicted_kl * factor;
        if (cost_) p.predicted_decode_ts = 1 / (cost_->fixed_s + a.cost);
        p.label = cat("tuned ", a.bytes / 1e6, " MB");
        return p;
    }

    // The plan's file, built unless an earlier run left it.
    std::string file_of(const Plan& plan) const {
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

    // A pruned, recovered base (tune/structure.hpp) with its own importance matrix (the FFN's
    // input width changed), built once and kept in the candidates directory.
    struct Base {
        PrunedBase pruned;
        compress::ImportanceMatrix imatrix;
        std::string imatrix_path() const {
            return fs::path(pruned.path).replace_extension(".imatrix.gguf").string();
        }
    };

    StructureOptions structure_options() const {
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

    const Base& base_of(const PruneSettings& level) const {
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

    static std::string key_of(const PruneSettings& s) {
        Plan p;
        p.prune = s;
        return p.model_key();
    }

    // The structure knob: pruned bases (FFN channels by default), each recovered by distillation
    // and quantized with the model halves of the fastest plans within the limit so far. A level
    // starts only if its predicted recovery and measurement fit the budget.
    void structure_phase() {
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
            for (const std::string& spec : o_.prune)
                levels.push_back(parse_prune_level(spec, steps));
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
                                         level.layers, ", ", level.recover_steps,
                                         " recovery steps");
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
                        measured ? measured->kl : 0.0, "; no plan's KL fits in the ", room,
                        " left"));
                continue;
            }
            measure(pruned_points(*base, fitting, hp));
        }
    }

    // Copies of the model halves of the n best points within the limit so far (goal value; the
    // fastest, or the smallest for the size goal), unpruned, at the tune's threads. For the
    // decode goal "fastest" is the fitted cost model's prediction where it has one: it averages
    // every file timed, where one timing of one file swings by a fifth on a shared machine (a
    // README-model tune gave its pruned base the stock Q4_0 and Q8_0 plans over a faster mix
    // that one slow timing had put third).
    std::vector<Point> best_plans_within_limit(size_t n) const {
        return best_plans_within_limit(n, o_.max_kl);
    }
    std::vector<Point> best_plans_within_limit(size_t n, double max_kl) const {
        const Goal g = o_.goal == Goal::Size ? Goal::Size : speed_goal();
        std::vector<std::pair<double, const Point*>> best;  // (value, point): higher is better
        for (const Point& p : cache_.points()) {
            if (p.kl > max_kl || p.streams != 0 || p.plan.prune || p.plan.threads != o_.threads)
                continue;
            double value = goal_value(p, g);
            if (g == Goal::Decode && cost_)
                if (const std::optional<BytesByType> b = bytes_of(p)) value = 1 / cost_->predict(*b);
            best.emplace_back(value, &p);
        }
        std::stable_sort(best.begin(), best.end(),
                         [](const auto& a, const auto& b) { return a.first > b.first; });
        std::vector<Point> plans;  // copies: measure() adds to the cache's vector
        std::set<std::string> seen;
        for (const auto& [value, p] : best)
            if (plans.size() < n && seen.insert(p->plan.model_key()).second) plans.push_back(*p);
        return plans;
    }

    // The points of a base quantized with each plan; a type whose block no longer fits a pruned
    // row goes back to the recipe's choice.
    std::vector<Point> pruned_points(const Base& base, const std::vector<Point>& plans,
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
                          shape.n_layer != hp.n_layer ? cat(" layers ", shape.n_layer) : "",
                          " + ", from.label);
            points.push_back(std::move(p));
        }
        return points;
    }

    fs::path candidate_path(const Plan& plan) const {
        return fs::path(o_.out_dir) / "candidates" / (word_hash_name(plan.model_key()) + ".gguf");
    }

    // Builds the points' files (kept across runs) and measures them with the input as the
    // reference, in one pass over the held-out text; each point joins the cache at once.
    void measure(std::vector<Point> points) {
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
    void drop_candidate_files(bool at_end) const {
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
                if (p->stock ? n_stock++ < 2
                             : p->plan.prune ? n_pruned++ < 2
                                             : n_tuned++ < std::max(3, o_.serve_files))
                    keep.insert(candidate_path(p->plan).filename().string());
        }
        std::error_code ec;
        std::vector<fs::path> drop;  // collected first: no removal while the directory is read
        for (const auto& e : fs::directory_iterator(fs::path(o_.out_dir) / "candidates", ec)) {
            const std::string name = e.path().filename().string();
            if (e.is_regular_file() && e.path().extension() == ".gguf" &&
                name.rfind("base-", 0) != 0 && name.rfind("draft-", 0) != 0 && !keep.count(name))
                drop.push_back(e.path());
        }
        for (const fs::path& f : drop) fs::remove(f, ec);
    }

    // The bytes decode reads by type, as recorded when the point was measured, or read from its
    // file for a point of an older cache; none when that file is gone too.
    std::optional<BytesByType> bytes_of(const Point& p) const {
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
    compress::EvalReport evaluate_by_halving(const std::vector<std::string>& paths) const {
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

    // The progress line: points measured, the best within the limit so far, time spent.
    void progress() const {
        const Goal g = o_.goal == Goal::Size ? Goal::Size : speed_goal();
        const Point* best = nullptr;
        for (const Point& p : cache_.points())
            if (p.kl <= o_.max_kl && p.streams == 0 &&
                (!best || goal_value(p, g) > goal_value(*best, g)))
                best = &p;
        const std::string figure =
            !best ? "none yet"
                  : g == Goal::Size ? cat(best->label, " (", best->file_bytes / 1e6, " MB)")
                                    : cat(best->label, " (", goal_value(*best, g), " tok/s)");
        say(cat(cache_.points().size(), " points measured; best within KL ", o_.max_kl, ": ",
                figure, "; ", static_cast<int>(elapsed()), " s of the ",
                static_cast<int>(o_.budget_s), " s budget"));
    }

    // Speed measured alongside the quality is a few repetitions; before choosing, the best
    // points within the limit are timed again, round-robin so that a slow stretch of the machine
    // hits them alike, and their median over all repetitions replaces the first figure.
    void confirm_speed() {
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
            all_s += 3.0 * o_.speed_reps *
                     (g == Goal::Prefill ? o_.prefill_tokens : o_.decode_tokens) /
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
    double refit(double factor) const {
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
    std::string measured_analysis() const {
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
          << " us reading " << best->label << "'s weights (its measured total: "
          << 1e6 / best->decode_ts << " us); the types act on " << 100 * share
          << "% of the time, so no choice of types can decode more than " << 1 / (1 - share)
          << "x faster than " << best->label;
        if (share < 0.3)
            s << ": decode is bound by per-token overheads (attention, norms, dispatch), not by "
                 "the weights";
        return s.str();
    }

    // Fits the decode cost model to every model-half point timed so far (their files' bytes by
    // type against their decode time); false while fewer than two are.
    bool fit_cost_model() {
        std::vector<DecodeTimeSample> samples;
        for (const Point& p : cache_.points()) {
            // Pruned files have other fixed costs (fewer heads, layers): not this model's samples.
            if (p.streams > 0 || p.decode_ts <= 0 || p.plan.threads != o_.threads || p.plan.prune)
                continue;
            if (const std::optional<BytesByType> b = bytes_of(p)) samples.push_back({*b, 1 / p.decode_ts});
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

    const TuneOptions& o_;
    Clock::time_point start_;
    double seconds_per_file_ = 0;      // building + measuring one file, at the last measure()
    std::set<std::string> confirmed_;  // labels of the points re-timed by confirm_speed
    std::optional<DecodeCostModel> cost_;
    bool own_output_ = false;
    double matrix_weights_ = 0;
    MeasurementCache cache_;
    DType in_type_ = DType::F32;
    int eval_chunks_ = 0;  // held-out chunks a file within the limit is measured on
    std::vector<int32_t> eval_tokens_;  // the held-out text's (the draft's prompts)
    std::vector<int32_t> calib_tokens_;
    int32_t calib_bos_ = -1;
    compress::ImportanceMatrix imatrix_;
    mutable std::map<std::string, Base> bases_;  // by the level's key (base_of)
    std::string draft_;  // the draft timed on the chosen file: given, distilled, or none
};

}  // namespace

TuneResult run_tune(const TuneOptions& options) {
    SYSLM_CHECK(options.max_kl > 0 && std::isfinite(options.max_kl), "tune: --max-kl must be a "
                "positive number");
    return Tuner(options).run();
}

}  // namespace syslm::tune
