// The tuner's state and phases (syslm tune, tuner.hpp): one class whose phases live in
// tuner.cpp (the run, inputs, choice), tuner_search.cpp (sensitivity and the rounds of type
// allocations), tuner_measure.cpp (building, measuring and re-timing files, the cost model),
// tuner_structure.cpp (pruned bases and the distilled draft) and tuner_serve.cpp (the serve
// goal's runtime search). Private to src/tune.
#pragma once

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

namespace syslm::tune::detail {
namespace fs = std::filesystem;

using Clock = std::chrono::steady_clock;

// llama-quantize's stock recipes the front is compared with (each with and without the
// importance matrix).
inline constexpr const char* kStockRecipes[] = {"Q8_0", "Q6_K",   "Q5_K_M", "Q4_K_M",
                                                "Q4_0", "Q3_K_M", "Q2_K"};

// Types the allocation chooses from: the K-quants for rows of 256, the 32-blocks otherwise, F16
// for rows that fit no block.
inline constexpr DType kDefaultTypes[] = {DType::F16,  DType::Q8_0, DType::Q6_K,
                                          DType::Q5_K, DType::Q4_K, DType::Q3_K,
                                          DType::Q2_K, DType::Q5_0, DType::Q4_0};

class Tuner {
public:
    explicit Tuner(const TuneOptions& o)
        : o_(o),
          start_(Clock::now()),
          cache_((fs::path(o.out_dir) / "measurements.jsonl").string()) {
        fs::create_directories(fs::path(o.out_dir) / "candidates");
    }

    TuneResult run();

private:
    // The input's facts (its matrices' type and weights, whether it has its own output matrix),
    // the analysis, and the tokens of the two texts.
    void read_inputs(TuneResult& r);

    // llama-quantize's recipes, with and without the importance matrix, measured like the rest.
    void measure_stock();

    // Rounds of candidates along the allocation hull, the KL model's correction and (decode
    // goal) the cost model refitted after each, until the budget or the proposals run out.
    void search_rounds(const std::vector<TensorSensitivity>& table, TuneResult& r);

    // A round's new candidates: for each target (a multiple of the limit), the hull's fewest
    // bytes whose corrected KL is within it; the first round also spreads points over the
    // hull's costs, so the front has a shape even when every allocation is within the limit.
    std::vector<Point> round_candidates(const std::vector<TensorSensitivity>& table,
                                        const std::vector<Allocation>& hull, double factor,
                                        int round) const;

    // The best point within the limits (a stock recipe too when it wins: its plan is a plan),
    // written as plan.json and model.gguf, with the base a pruned plan is quantized from.
    void choose_and_write(TuneResult& r);

    // The draft knob, on the chosen file: plain decoding against speculative decoding at each
    // draft setting, from the held-out text's chunk starts; the fastest enters the plan (with the
    // draft copied beside it) only when it beats plain decoding.
    void draft_phase(TuneResult& r);

    // The length knobs (TuneOptions::length_max_ppl_increase) on the chosen file, model.gguf:
    // each policy is written into it and the chosen plan runs it.
    void length_phase(TuneResult& r);

    // A draft distilled on the spot (--draft auto): the input with all but a quarter of its
    // layers removed (at least one kept; the layers whose removal costs least on the calibration
    // text go), distilled back towards the input on that text like a pruned base, and quantized
    // to Q8_0 (a draft's mistakes cost more than its bytes). Charged to the budget before the
    // search rounds; empty when it does not fit or the model has one layer.
    std::string distilled_draft();

    // Seconds a pruned level's recovery distillation is predicted to take on this machine.
    double predicted_recovery(const model::Model& input, const PruneSettings& level) const;

    bool proxy_sensitivity() const;

    bool within_limits(const Point& p) const;
    // The speed the model half is timed by: prefill for that goal, decode otherwise.
    Goal speed_goal() const { return o_.goal == Goal::Prefill ? Goal::Prefill : Goal::Decode; }

    // What every served trial shares: the tokenizer and the load drawn from the held-out text.
    struct ServeRun {
        tokenizer::Tokenizer tok;
        ServeLoad load;
        int max_threads = 0;
    };

    ServeRun serve_run() const;

    // A served point of a file's plan with these settings: from the cache unless `again`.
    Point serve_point(const ServeRun& run, const Point& file, std::shared_ptr<const model::Model> m,
                      const ServeSettings& s, int threads, bool again,
                      const std::string& label) const;

    // The fastest-decoding files within the KL limit, served at `syslm serve`'s defaults; the
    // one serving fastest within the latency limits, and its model.
    std::pair<Point, std::shared_ptr<const model::Model>> best_served_file(const ServeRun& run);

    // The serve goal's runtime half: the best file at the defaults gets the runtime search;
    // every trial is a point (cached: a resumed tune does not repeat it) and the default and
    // tuned figures are confirmed by alternating timings.
    void serve_phase(TuneResult& r);
    // Before and after as a user sees them: `syslm serve -m INPUT` at its defaults against the
    // tuned plan (its file and runtime), timed alternately; the medians go into r.
    void serve_before_after(const ServeRun& run, const Point& file,
                            const std::shared_ptr<const model::Model>& m, TuneResult& r);

    double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
    bool over_budget() const { return elapsed() > o_.budget_s; }
    void say(const std::string& line) const;

    // What the importance matrix and the sensitivities are computed from: a file left by an
    // earlier run with another key is measured again.
    nlohmann::json input_key() const;

    // The importance matrix of the input on the calibration text, kept in the tune's directory
    // (beside the plan, so `quantize --plan` can rebuild the chosen file) and read back by a
    // resumed tune: on L1B it is minutes of forward passes.
    void load_or_collect_imatrix();

    // The sensitivity table, read back when a previous run of the same inputs wrote it.
    std::vector<TensorSensitivity> sensitivity();

    Point tuned_point(const std::vector<TensorSensitivity>& table, const Allocation& a,
                      double factor) const;

    // The plan's file, built unless an earlier run left it.
    std::string file_of(const Plan& plan) const;

    // A pruned, recovered base (tune/structure.hpp) with its own importance matrix (the FFN's
    // input width changed), built once and kept in the candidates directory.
    struct Base {
        PrunedBase pruned;
        compress::ImportanceMatrix imatrix;
        std::string imatrix_path() const {
            return fs::path(pruned.path).replace_extension(".imatrix.gguf").string();
        }
    };

    StructureOptions structure_options() const;

    const Base& base_of(const PruneSettings& level) const;

    static std::string key_of(const PruneSettings& s);

    // The structure knob: pruned bases (FFN channels by default), each recovered by distillation
    // and quantized with the model halves of the fastest plans within the limit so far. A level
    // starts only if its predicted recovery and measurement fit the budget.
    void structure_phase();

    // Copies of the model halves of the n best points within the limit so far (goal value; the
    // fastest, or the smallest for the size goal), unpruned, at the tune's threads. For the
    // decode goal "fastest" is the fitted cost model's prediction where it has one: it averages
    // every file timed, where one timing of one file swings by a fifth on a shared machine (a
    // README-model tune gave its pruned base the stock Q4_0 and Q8_0 plans over a faster mix
    // that one slow timing had put third).
    std::vector<Point> best_plans_within_limit(size_t n) const;
    std::vector<Point> best_plans_within_limit(size_t n, double max_kl) const;

    // The points of a base quantized with each plan; a type whose block no longer fits a pruned
    // row goes back to the recipe's choice.
    std::vector<Point> pruned_points(const Base& base, const std::vector<Point>& plans,
                                     const model::HParams& hp) const;

    fs::path candidate_path(const Plan& plan) const;

    // Builds the points' files (kept across runs) and measures them with the input as the
    // reference, in one pass over the held-out text; each point joins the cache at once.
    void measure(std::vector<Point> points);

    // Candidate files are quantized copies of the model, so only those a later phase may time
    // again stay: the fastest (smallest, size goal) within the limit of each kind, as many as
    // confirm_speed and the serve phase take. At the end none does (the chosen one is
    // model.gguf); the pruned bases and drafts stay, being minutes of distillation each. A
    // deleted file is rebuilt from its plan if it is needed after all.
    void drop_candidate_files(bool at_end) const;

    // The bytes decode reads by type, as recorded when the point was measured, or read from its
    // file for a point of an older cache; none when that file is gone too.
    std::optional<BytesByType> bytes_of(const Point& p) const;

    // Quality and speed of the files paths[1..] against the input paths[0], by successive
    // halving on the held-out text: every file is measured (and timed) on the first quarter of
    // the chunks; only those whose KL may be within the limit (mean minus two standard errors
    // at most the limit) are measured on the rest, and their figures merged. A file clearly
    // outside keeps its first figures, marked by the tokens they are from.
    compress::EvalReport evaluate_by_halving(const std::vector<std::string>& paths) const;

    // The progress line: points measured, the best within the limit so far, time spent.
    void progress() const;

    // Speed measured alongside the quality is a few repetitions; before choosing, the best
    // points within the limit are timed again, round-robin so that a slow stretch of the machine
    // hits them alike, and their median over all repetitions replaces the first figure.
    void confirm_speed();

    // The geometric mean of measured / predicted over the tuned points near the limit: the
    // additive model's error where it matters.
    double refit(double factor) const;

    // The share of a token's decode time the weight types act on, from the fitted cost model and
    // the fastest stock recipe within the limit (the fastest of all when none is).
    std::string measured_analysis() const;

    // Fits the decode cost model to every model-half point timed so far (their files' bytes by
    // type against their decode time); false while fewer than two are.
    bool fit_cost_model();

    const TuneOptions& o_;
    Clock::time_point start_;
    double seconds_per_file_ = 0;      // building + measuring one file, at the last measure()
    std::set<std::string> confirmed_;  // labels of the points re-timed by confirm_speed
    std::optional<DecodeCostModel> cost_;
    bool own_output_ = false;
    double matrix_weights_ = 0;
    MeasurementCache cache_;
    DType in_type_ = DType::F32;
    int eval_chunks_ = 0;               // held-out chunks a file within the limit is measured on
    std::vector<int32_t> eval_tokens_;  // the held-out text's (the draft's prompts)
    std::vector<int32_t> calib_tokens_;
    int32_t calib_bos_ = -1;
    compress::ImportanceMatrix imatrix_;
    mutable std::map<std::string, Base> bases_;  // by the level's key (base_of)
    std::string draft_;  // the draft timed on the chosen file: given, distilled, or none
};

}  // namespace syslm::tune::detail
