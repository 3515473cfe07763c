// syslm tune: search weight types, structure, a draft and runtime settings against a measured
// quality limit on the user's own text, and return a measured Pareto front and the chosen plan
// (tune/tuner.hpp; design in docs/design/tune.md).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "cli/tune_by_length.hpp"
#include "cli/tune_edge.hpp"
#include "cli/tune_train.hpp"
#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "tune/report.hpp"
#include "tune/structure.hpp"
#include "tune/tuner.hpp"

namespace syslm::cli {
namespace {

struct TuneArgs {
    tune::TuneOptions o;
    std::string goal = "decode", budget = "30m", p99_ttft, p99_itl, resume;
};

// "90s", "30m", "1h", or seconds.
double parse_duration(const std::string& s) {
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(s, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    const std::string unit = s.substr(used);
    const double scale = unit.empty() || unit == "s" ? 1
                         : unit == "m"               ? 60
                         : unit == "h"               ? 3600
                                                     : 0;
    usage_check(used > 0 && scale > 0 && std::isfinite(v) && v > 0, "'", s,
                "': expected a positive duration such as 90s, 30m or 1h");
    return v * scale;
}

// The serve goal's two ratios: runtime alone (same file), and before / after.
void print_serving(const tune::TuneResult& r, const tune::TuneOptions& o) {
    if (r.serve_default && r.serve_tuned)
        std::printf(
            "serving at %d streams (medians of alternating runs): default settings %.1f "
            "tok/s (TTFT p99 %.3f s), tuned %.1f tok/s (TTFT p99 %.3f s): %.2fx\n",
            o.streams, r.serve_default->serve_ts, r.serve_default->ttft_p99,
            r.serve_tuned->serve_ts, r.serve_tuned->ttft_p99,
            r.serve_tuned->serve_ts / r.serve_default->serve_ts);
    if (r.serve_input && r.serve_plan)
        std::printf(
            "before and after at %d streams (alternating runs): `syslm serve -m %s` at its "
            "defaults %.1f tok/s (TTFT p99 %.3f s), the tuned plan (its file and runtime) %.1f "
            "tok/s (TTFT p99 %.3f s): %.2fx\n",
            o.streams, std::filesystem::path(o.model).filename().c_str(), r.serve_input->serve_ts,
            r.serve_input->ttft_p99, r.serve_plan->serve_ts, r.serve_plan->ttft_p99,
            r.serve_plan->serve_ts / r.serve_input->serve_ts);
}

// Usage errors for what the options cannot say alone; fills a.o from the strings.
void check_tune_args(TuneArgs& a) {
    usage_check(!a.o.model.empty() && !a.o.calib.empty() && !a.o.eval.empty(),
                "tune: give the model (-m), --calib and --eval (or `syslm tune train`, `syslm tune "
                "window`, `syslm tune experts`)");
    usage_check(a.o.out_dir.empty() != a.resume.empty(), "give -o DIR (a new or earlier tune) or ",
                "--resume DIR (an earlier one), one of them");
    if (!a.resume.empty()) {
        usage_check(std::filesystem::exists(std::filesystem::path(a.resume) / "measurements.jsonl"),
                    "--resume ", a.resume, ": no measurements.jsonl there to continue from");
        a.o.out_dir = a.resume;
    }
    a.o.goal = tune::parse_goal(a.goal);
    a.o.budget_s = parse_duration(a.budget);
    if (!a.p99_ttft.empty()) a.o.max_ttft_p99 = parse_duration(a.p99_ttft);
    if (!a.p99_itl.empty()) a.o.max_itl_p99 = parse_duration(a.p99_itl);
    usage_check(a.o.goal == tune::Goal::Serve || (a.p99_ttft.empty() && a.p99_itl.empty()),
                "--p99-ttft and --p99-itl are limits of the serve goal (--goal serve)");
    usage_check(a.o.goal == tune::Goal::Decode || a.o.draft.empty(),
                "--draft is a knob of the decode goal (--goal decode)");
    const bool keyword = a.o.prune.size() == 1 && (a.o.prune[0] == "auto" || a.o.prune[0] == "off");
    if (!keyword)
        for (const std::string& spec : a.o.prune) {
            usage_check(spec != "auto" && spec != "off", "--prune ", spec,
                        " stands alone, not "
                        "beside levels");
            try {
                tune::parse_prune_level(spec, a.o.recover_steps);
            } catch (const Error& e) {
                throw UsageError(e.what());
            }
        }
}

int run_tune(TuneArgs& a) {
    check_tune_args(a);
    a.o.log = &std::cerr;
    const tune::TuneResult r = tune::run_tune(a.o);
    const tune::ReportContext c{a.o.goal, a.o.max_kl,
                                std::filesystem::path(a.o.model).filename().string()};
    const std::filesystem::path dir(a.o.out_dir);
    write_file_atomically((dir / "pareto.json").string(), tune::report_json(r, c));
    write_file_atomically((dir / "front.svg").string(), tune::report_svg(r, c));
    write_file_atomically((dir / "report.html").string(), tune::report_html(r, c));
    std::printf("%s", tune::report_table(r, c).c_str());
    print_serving(r, a.o);
    std::printf("wrote %s/{pareto.json,front.svg,report.html%s} in %.0f s\n", a.o.out_dir.c_str(),
                r.chosen ? ",plan.json,model.gguf" : "", r.seconds);
    return 0;
}

void add_serve_options(CLI::App& app, TuneArgs* a) {
    auto& o = a->o;
    app.add_option("--streams", o.streams, "Serve goal: concurrent streams of requests")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    app.add_option("--p99-ttft", a->p99_ttft,
                   "Serve goal: limit on the p99 time to first token "
                   "(e.g. 2s)");
    app.add_option("--p99-itl", a->p99_itl,
                   "Serve goal: limit on the p99 inter-token latency "
                   "(e.g. 0.2s)");
    app.add_option("--serve-requests", o.serve_requests,
                   "Serve goal: requests per stream in each trial")
        ->capture_default_str()
        ->check(CLI::Range(1, 1000));
    app.add_option("--serve-tokens", o.serve_max_tokens, "Serve goal: tokens generated per request")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 16));
}

// How the model half is searched and measured: texts, sensitivity, rounds, structure, draft.
void add_search_options(CLI::App& app, tune::TuneOptions& o) {
    app.add_option("-c,--ctx-size", o.n_ctx, "Tokens per chunk of the texts")
        ->capture_default_str()
        ->check(CLI::Range(16, 1 << 16));
    app.add_option("--eval-chunks", o.eval_chunks,
                   "Held-out chunks a file is measured on (-1: all); one whose KL on the first "
                   "quarter of them is clearly outside --max-kl stops there")
        ->capture_default_str()
        ->check(CLI::Range(-1, 1 << 20));
    app.add_option("--sensitivity-chunks", o.sensitivity_chunks,
                   "Calibration chunks each sensitivity is measured on")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 16));
    app.add_option("--sensitivity", o.sensitivity_mode,
                   "measured: run every (tensor, type); proxy: run one type per tensor and scale "
                   "the others by importance-weighted error; auto: proxy above 100M weights")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "measured", "proxy"}));
    app.add_option("--rounds", o.max_rounds, "Most rounds of candidates")
        ->capture_default_str()
        ->check(CLI::Range(1, 100));
    app.add_flag("!--no-stock", o.stock, "Do not measure llama-quantize's stock recipes");
    app.add_flag("--keep-candidates", o.keep_candidates,
                 "Keep every measured file in DIR/candidates (by default they are deleted once "
                 "no later phase needs them: each is a quantized copy of the model)");
    app.add_option("--prune", o.prune,
                   "Structure: auto (FFN channels at one or two widths the model allows), off, "
                   "or a level 'ffn=F,heads=F,layers=N' (repeatable). Each pruned model is "
                   "recovered by distillation from the input on --calib and quantized with the "
                   "fastest plans within the limit; a level runs only if it fits the budget")
        ->capture_default_str()
        ->allow_extra_args(false);
    app.add_option("--draft", o.draft,
                   "Decode goal: a draft model (same vocabulary) for speculative decoding, or "
                   "'auto' to distil one on the spot (the input cut to a quarter of its layers, "
                   "distilled back on --calib within the budget); timed on the chosen file "
                   "against plain decoding (adaptive length, and 2, 4, 8), it enters the plan, "
                   "with the draft beside it, only if it wins")
        ->check(CLI::ExistingFile | CLI::IsMember({"auto"}));
    app.add_option("--length-ppl-increase", o.length_max_ppl_increase,
                   "Models with local attention layers (or top-p experts): the chosen file's "
                   "window (top-p) is measured at a quarter, one and four chunks of held-out "
                   "text, and per input length the smallest within this relative perplexity "
                   "increase of that length's best enters model.gguf, which the plan runs with "
                   "--window auto (--expert-top-p auto); -1: not tuned")
        ->capture_default_str()
        ->check(CLI::Range(-1.0, 10.0));
    app.add_option("--recover-steps", o.recover_steps,
                   "Structure: distillation steps (8 sequences each) after pruning (default: "
                   "400, at most 4 passes over --calib; 0: none)")
        ->check(CLI::Range(0, 1000000));
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<TuneArgs>();
    auto& o = a->o;
    app.add_option("-m,--model", o.model, "The model to tune (GGUF, usually F32/F16/BF16)")
        ->check(CLI::ExistingFile);
    app.add_option("--calib", o.calib, "Calibration text: sensitivities and importance matrix")
        ->check(CLI::ExistingFile);
    app.add_option("--eval", o.eval,
                   "Held-out text (disjoint from --calib): quality is measured here")
        ->check(CLI::ExistingFile);
    app.add_option("-o,--out", o.out_dir,
                   "Directory for the report, the plan and the chosen model; a rerun continues "
                   "from its measurements");
    app.add_option("--resume", a->resume,
                   "Continue the tune in this directory (as -o, but it must hold measurements): "
                   "what was measured before a kill is read back, not measured again");
    app.add_option("--goal", a->goal,
                   "What to maximise: decode | prefill tokens/s, size, or serve (generated "
                   "tokens/s at --streams concurrent streams: the file and the engine's settings)")
        ->capture_default_str()
        ->check(CLI::IsMember({"decode", "prefill", "size", "serve"}));
    app.add_option("--max-kl", o.max_kl,
                   "Quality limit: mean KL(input || tuned) on --eval, nats per token")
        ->capture_default_str()
        ->check(finite_in(0, 10, true));
    app.add_option("--budget", a->budget, "Time for the search (90s, 30m, 1h)")
        ->capture_default_str();
    app.add_option("-t,--threads", o.threads, "Threads (default: all cores)")
        ->check(CLI::Range(0, 4096));
    add_search_options(app, o);
    add_serve_options(app, a.get());
    CLI::App* train = app.add_subcommand(
        "train",
        "The training goal: micro-batch, accumulation, recompute and threads of a "
        "`syslm train` command, measured by real runs");
    auto run_train_tune = setup_tune_train(*train);
    CLI::App* window = app.add_subcommand(
        "window",
        "The local attention window by input length: perplexity and speed of each "
        "(length, window) on held-out text, the policy written into the model");
    auto run_window_tune = setup_tune_by_length(*window, tune::window_knob());
    CLI::App* experts = app.add_subcommand(
        "experts",
        "A top-p MoE model's p by input length: perplexity and speed of each (length, p) on "
        "held-out text, the policy written into the model");
    auto run_experts_tune = setup_tune_by_length(*experts, tune::experts_knob());
    CLI::App* edge = app.add_subcommand(
        "edge",
        "A model split between a device and its cloud, for a device profile (--device "
        "2GB,2cores): the split point, the edge copy's weight type and the wire format, each "
        "point measured (memory, KL, the edge's time per token)");
    auto run_edge_tune = setup_tune_edge(*edge);
    return [a, train, run_train_tune, window, run_window_tune, experts, run_experts_tune, edge,
            run_edge_tune] {
        if (train->parsed()) return run_train_tune();
        if (edge->parsed()) return run_edge_tune();
        if (window->parsed()) return run_window_tune();
        if (experts->parsed()) return run_experts_tune();
        return run_tune(*a);
    };
}

}  // namespace

SYSLM_COMMAND(tune, "tune",
              "Search per-tensor weight types against a measured KL limit; report the measured "
              "Pareto front and write the chosen plan and model",
              setup);

}  // namespace syslm::cli
