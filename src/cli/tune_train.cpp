#include "cli/tune_train.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "core/subprocess.hpp"
#include "core/thread_pool.hpp"
#include "train/batch_plan.hpp"
#include "tune/plan.hpp"
#include "tune/train_report.hpp"
#include "tune/train_search.hpp"

namespace syslm::cli {
namespace {

namespace fs = std::filesystem;

struct TuneTrainArgs {
    std::vector<std::string> train_args;
    std::string config, data, out_dir, memory_limit, goal = "throughput";
    int steps = 4;
    double max_loss_change = 0;  // > 0: precision is searched, with this per-step limit
};

// Options the trials set themselves, or that a single-process trial cannot honour.
const char* const kRefused[] = {"-o", "--out", "--checkpoint", "--resume", "--metrics", "--steps",
                                "--json", "--plan", "--eval-every", "--dp", "--tp", "--pp",
                                "--zero", "--token-budget", "--memory-limit", "--micro-batches",
                                "--checkpoint-every"};
// The knobs: removed from the command before a trial sets them.
const char* const kKnobs[] = {"-b", "--batch",   "--accum", "--recompute",
                               "--precision", "-t", "--threads"};

bool is_option(const std::string& arg, const char* name) {
    return arg == name || arg.rfind(std::string(name) + "=", 0) == 0;
}

// The command without the knobs (each with its value when given as a separate argument).
std::vector<std::string> without_knobs(const std::vector<std::string>& args) {
    std::vector<std::string> out;
    for (size_t i = 0; i < args.size(); ++i) {
        bool knob = false;
        for (const char* k : kKnobs)
            if (is_option(args[i], k)) {
                knob = true;
                if (args[i] == k) ++i;  // its value follows
            }
        if (!knob) out.push_back(args[i]);
    }
    return out;
}

struct TrialOutput {
    tune::TrainMeasurement m;
    nlohmann::json summary;
};

// One `syslm train` run of the command (plus `extra`) for `steps` steps; the losses and per-step
// speeds come from its metrics file, the peak memory from its summary.
TrialOutput run_trial(const TuneTrainArgs& a, const std::vector<std::string>& command,
                      const std::vector<std::string>& extra, const fs::path& metrics) {
    fs::remove(metrics);
    std::vector<std::string> argv{self_executable(), "train"};
    argv.insert(argv.end(), command.begin(), command.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    for (const std::string& s : {std::string("--steps"), std::to_string(a.steps),
                                 std::string("--json"), std::string("--metrics"), metrics.string(),
                                 std::string("--log-every"), std::string("1000000")})
        argv.push_back(s);
    fs::path log = metrics;
    log.replace_extension(".log");
    const ProcessResult pr = run_process(argv, log.string());
    SYSLM_CHECK(pr.status == 0, "the trial `syslm train` exited with status ", pr.status,
                " (its messages: ", log.string(), ")");
    const size_t last = pr.out.find_last_of('{');
    SYSLM_CHECK(last != std::string::npos, "the trial printed no JSON summary");
    TrialOutput t;
    try {
        t.summary = nlohmann::json::parse(pr.out.substr(last));
    } catch (const nlohmann::json::exception& e) {
        fail("the trial's summary is not JSON: ", e.what());
    }
    std::ifstream in(metrics);
    std::vector<double> speeds;
    for (std::string line; std::getline(in, line);) {
        const nlohmann::json j = nlohmann::json::parse(line);
        if (!j.contains("loss")) continue;
        t.m.losses.push_back(j.at("loss").get<double>());
        speeds.push_back(j.at("tokens_per_s").get<double>());
    }
    SYSLM_CHECK(!speeds.empty(), metrics.string(), ": the trial logged no step");
    if (speeds.size() > 1) speeds.erase(speeds.begin());  // the first step warms up
    std::sort(speeds.begin(), speeds.end());
    t.m.tokens_per_s = speeds[speeds.size() / 2];
    t.m.peak_rss_mib = t.summary.at("peak_rss_mib").get<double>();
    return t;
}

// trials.json (every trial, the default and tuned figures), report.html and plan.json.
void write_outputs(const TuneTrainArgs& a, const std::vector<std::string>& command,
                   double limit_mib, const tune::TrainSearchOptions& o,
                   const tune::TrainSearchResult& r) {
    nlohmann::json trials = nlohmann::json::array();
    for (const tune::TrainTrial& t : r.trials)
        trials.push_back({{"micro_batch", t.settings.micro_batch},
                          {"accum", t.settings.accum},
                          {"recompute", t.settings.recompute},
                          {"precision", t.settings.precision},
                          {"threads", t.threads},
                          {"tokens_per_s", t.m.tokens_per_s},
                          {"peak_rss_mib", t.m.peak_rss_mib},
                          {"losses", t.m.losses},
                          {"fits", t.fits},
                          {"same_curve", t.same_curve},
                          {"error", t.error}});
    const nlohmann::json report = {
        {"command", command},
        {"steps", a.steps},
        {"memory_limit_mib", std::isfinite(limit_mib) ? nlohmann::json(limit_mib) : nullptr},
        {"loss_rtol", o.loss_rtol},
        {"max_loss_change", a.max_loss_change > 0 ? nlohmann::json(a.max_loss_change) : nullptr},
        {"trials", trials},
        {"default",
         {{"tokens_per_s", r.baseline.m.tokens_per_s}, {"peak_rss_mib", r.baseline.m.peak_rss_mib}}},
        {"tuned", {{"tokens_per_s", r.best.m.tokens_per_s}, {"peak_rss_mib", r.best.m.peak_rss_mib}}}};
    write_file_atomically((fs::path(a.out_dir) / "trials.json").string(), report.dump(2) + "\n");
    write_file_atomically((fs::path(a.out_dir) / "report.html").string(),
                          tune::train_report_html(r, o, command));
    tune::Plan plan;
    plan.threads = r.best.threads;
    plan.train = r.best.settings;
    tune::save_plan(plan, (fs::path(a.out_dir) / "plan.json").string());
}

// The trial table and the verdict on stdout.
void print_trials(const tune::TrainSearchResult& r, const std::string& out_dir) {
    std::printf("%-12s %6s %-10s %-5s %8s %12s %10s  %s\n", "micro-batch", "accum", "recompute",
                "prec", "threads", "tokens/s", "peak MiB", "");
    for (const tune::TrainTrial& t : r.trials)
        std::printf("%-12d %6d %-10s %-5s %8d %12.1f %10.0f  %s\n", t.settings.micro_batch,
                    t.settings.accum, t.settings.recompute.c_str(), t.settings.precision.c_str(),
                    t.threads, t.m.tokens_per_s, t.m.peak_rss_mib,
                    !t.error.empty() ? "failed"
                    : !t.fits        ? "over the memory limit"
                    : !t.same_curve  ? "another loss curve"
                                     : "");
    std::printf("training: the command's settings %.1f tok/s (peak %.0f MiB), tuned %.1f tok/s "
                "(peak %.0f MiB): %.2fx; wrote %s/{plan.json,trials.json,report.html}\n",
                r.baseline.m.tokens_per_s, r.baseline.m.peak_rss_mib, r.best.m.tokens_per_s,
                r.best.m.peak_rss_mib, r.best.m.tokens_per_s / r.baseline.m.tokens_per_s,
                out_dir.c_str());
}

int run_tune_train(TuneTrainArgs& a) {
    usage_check(a.goal == "throughput", "--goal ", a.goal, ": tune train maximises throughput");
    usage_check(!a.out_dir.empty(), "tune train: give -o DIR");
    std::vector<std::string> command = a.train_args;
    if (!a.config.empty()) command.insert(command.end(), {"--config", a.config});
    if (!a.data.empty()) command.insert(command.end(), {"--data", a.data});
    usage_check(!command.empty(), "tune train: give the training command after `--` (the ",
                "arguments of `syslm train`), or --config");
    for (const std::string& arg : command)
        for (const char* r : kRefused)
            usage_check(!is_option(arg, r), "tune train: ", r, " in the training command: the ",
                        "trials set it themselves or run in one process");
    fs::create_directories(fs::path(a.out_dir) / "trials");
    const double limit_mib = a.memory_limit.empty()
                                 ? std::numeric_limits<double>::infinity()
                                 : static_cast<double>(train::parse_memory_size(a.memory_limit)) /
                                       (1 << 20);

    // The command as given: its own settings, read back from its summary.
    int trial_no = 0;
    auto metrics_path = [&] {
        return fs::path(a.out_dir) / "trials" / (std::to_string(trial_no++) + ".jsonl");
    };
    const TrialOutput first = run_trial(a, command, {}, metrics_path());
    const nlohmann::json& s = first.summary;
    tune::TrainSearchOptions o;
    o.baseline.micro_batch = s.at("micro_batch").get<int>();
    o.baseline.accum = s.at("accum").get<int>();
    o.baseline.recompute = s.at("recompute").get<std::string>();
    o.baseline.precision = s.at("precision").get<std::string>();
    o.baseline_threads = s.at("threads").get<int>();
    o.max_threads = std::max(o.baseline_threads, ThreadPool::resolve(0));
    o.memory_limit_mib = limit_mib;
    o.loss_rtol = tune::loss_order_bound(
        a.steps, std::max(s.at("n_vocab").get<double>(), s.at("tokens_per_step").get<double>()));
    if (a.max_loss_change > 0) {
        o.precisions = {"f32", "bf16"};
        o.precision_rtol = a.max_loss_change;
    }
    o.log = &std::cerr;
    std::cerr << "tune: train: the command's settings: micro-batch " << o.baseline.micro_batch
              << " x " << o.baseline.accum << ", recompute " << o.baseline.recompute << ", "
              << o.baseline.precision << ", " << o.baseline_threads << " threads; losses must "
              << "agree within " << o.loss_rtol << " (relative) step by step";
    if (a.max_loss_change > 0)
        std::cerr << ", within " << a.max_loss_change << " in another precision";
    std::cerr << "\n";

    const std::vector<std::string> base_command = without_knobs(command);
    // The first run above read the command's settings (and warmed the page cache); the search
    // times the command again like every other trial.
    const tune::TrainSearchResult r = tune::search_training(
        [&](const tune::TrainSettings& t, int threads) {
            const TrialOutput out = run_trial(
                a, base_command,
                {"--batch", std::to_string(t.micro_batch), "--accum", std::to_string(t.accum),
                 "--recompute", t.recompute, "--precision", t.precision, "-t",
                 std::to_string(threads)},
                metrics_path());
            return out.m;
        },
        o);

    write_outputs(a, command, limit_mib, o, r);
    print_trials(r, a.out_dir);
    return 0;
}

}  // namespace

std::function<int()> setup_tune_train(CLI::App& sub) {
    auto a = std::make_shared<TuneTrainArgs>();
    sub.footer("Example: syslm tune train -o tuned-train --memory-limit 4GiB -- --arch llama "
               "--layers 4 --dim 256 --data data/ --batch 8 --seq 128\n"
               "Each trial is `syslm train` with the command's arguments for --steps steps; "
               "micro-batch x accumulation (the same global batch), --recompute and threads are "
               "searched, and --precision (f32, bf16) when --max-loss-change is given. A trial "
               "counts when its peak memory fits --memory-limit and its losses equal the "
               "command's own step for step within the order-of-sums bound (the same loss curve), "
               "or, in another precision than the command's, within --max-loss-change. Writes "
               "plan.json (for `syslm train --plan`) and trials.json.");
    sub.add_option("-o,--out", a->out_dir, "Directory for plan.json and trials.json");
    sub.add_option("--goal", a->goal, "throughput: training tokens/s")->capture_default_str();
    sub.add_option("--memory-limit", a->memory_limit,
                   "Largest peak memory a trial may reach (e.g. 4GiB); the command's own "
                   "settings must fit it");
    sub.add_option("--max-loss-change", a->max_loss_change,
                   "Also search --precision (f32, bf16): a trial in another precision than the "
                   "command's counts when every step's loss is within this relative change of "
                   "the command's own (e.g. 0.01); without it precision is not searched")
        ->check(CLI::Range(1e-9, 1.0));
    sub.add_option("--steps", a->steps, "Steps per trial")
        ->capture_default_str()
        ->check(CLI::Range(2, 1000));
    sub.add_option("--config", a->config, "Passed to `syslm train --config`")
        ->check(CLI::ExistingFile);
    sub.add_option("--data", a->data, "Passed to `syslm train --data`")
        ->check(CLI::ExistingDirectory);
    sub.add_option("train_args", a->train_args,
                   "After `--`: the `syslm train` arguments to tune");
    return [a] { return run_tune_train(*a); };
}

}  // namespace syslm::cli
