// syslm generate: stream a continuation of a prompt.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "cli/cache_type_options.hpp"
#include "cli/lora_options.hpp"
#include "cli/command.hpp"
#include "cli/length_options.hpp"
#include "cli/option_checks.hpp"
#include "cli/plan_settings.hpp"
#include "core/error.hpp"
#include "infer/generate.hpp"
#include "infer/speculative.hpp"
#include "model/transformer.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tune/plan.hpp"

namespace syslm::cli {
namespace {

struct GenerateArgs {
    std::string model, prompt, prompt_file, draft, plan;
    infer::SpeculativeOptions spec;
    bool draft_fixed = false;
    int n_predict = 128;
    int n_ctx = 0;
    int threads = 0;
    CacheTypeArgs cache_type;
    LoraArgs lora;
    int batch = 512;
    bool ignore_eos = false;
    bool no_bos = false;
    std::string window, expert_top_p;
    int64_t seed = -1;
    infer::SamplingParams sampling;
    // The options a plan sets (to tell a contradicting command line).
    CLI::Option *threads_opt = nullptr, *batch_opt = nullptr, *draft_opt = nullptr,
                *k_opt = nullptr, *k_min_opt = nullptr, *k_max_opt = nullptr, *fixed_opt = nullptr,
                *window_opt = nullptr, *top_p_opt = nullptr;
};

// `--plan` (from `syslm tune --goal decode`): the model beside it unless -m names one, its
// threads and batch, and its draft (beside it too) with the draft length it was tuned with.
void apply_plan(GenerateArgs& a) {
    const tune::Plan plan = tune::load_plan(a.plan);
    const std::filesystem::path dir = std::filesystem::path(a.plan).parent_path();
    if (a.model.empty()) {
        a.model = (dir / "model.gguf").string();
        SYSLM_CHECK(std::filesystem::exists(a.model), a.plan, ": no model.gguf beside the plan ",
                    "(give it with -m)");
    }
    take_from_plan(a.threads_opt, a.threads, plan.threads, "runtime.threads");
    take_from_plan(a.batch_opt, a.batch, plan.batch, "runtime.batch");
    if (!plan.window.empty()) take_from_plan(a.window_opt, a.window, plan.window, "runtime.window");
    if (!plan.expert_top_p.empty())
        take_from_plan(a.top_p_opt, a.expert_top_p, plan.expert_top_p, "runtime.expert_top_p");
    if (!plan.draft) {
        usage_check(a.draft.empty(),
                    "--draft: the plan decodes without a draft (its tune timed "
                    "none faster than plain decoding, or had none)");
        return;
    }
    const tune::DraftSettings& d = *plan.draft;
    take_from_plan(a.draft_opt, a.draft, (dir / d.file).string(), "draft.file");
    SYSLM_CHECK(std::filesystem::exists(a.draft), a.plan, ": its draft ", a.draft, " is missing");
    take_from_plan(a.k_opt, a.spec.k, d.k, "draft.k");
    take_from_plan(a.k_min_opt, a.spec.k_min, d.k_min, "draft.k_min");
    take_from_plan(a.k_max_opt, a.spec.k_max, d.k_max, "draft.k_max");
    take_from_plan(a.fixed_opt, a.draft_fixed, !d.adaptive, "draft.adaptive (negated)");
}

int run_generate(GenerateArgs& a) {
    if (!a.plan.empty()) apply_plan(a);
    usage_check(!a.model.empty(), "give the model (-m) or a tuned plan (--plan)");
    if (!a.prompt_file.empty()) {
        std::ifstream in(a.prompt_file, std::ios::binary);
        SYSLM_CHECK(in, a.prompt_file, ": cannot open prompt file");
        std::stringstream ss;
        ss << in.rdbuf();
        a.prompt = ss.str();
    }
    model::Model m(a.model);
    const auto tok = tokenizer::Tokenizer::from_gguf(m.file());
    const int n_ctx = a.n_ctx > 0 ? a.n_ctx : std::min(m.hparams().n_ctx_train, 4096);

    std::vector<int32_t> prompt = tok.encode(a.prompt, !a.no_bos, /*parse_special=*/true);
    SYSLM_CHECK(!prompt.empty(), "the prompt is empty: give -p TEXT (or a model that adds BOS)");
    SYSLM_CHECK(static_cast<int>(prompt.size()) < n_ctx, "the prompt has ", prompt.size(),
                " tokens, which does not fit the context of ", n_ctx, " (raise -c)");
    // The input's length for --window auto: the prompt and what is generated (up to n_ctx).
    const int64_t length =
        std::min<int64_t>(n_ctx, static_cast<int64_t>(prompt.size()) + a.n_predict);
    apply_window(m, a.window, length);
    apply_expert_top_p(m, a.expert_top_p, length);
    model::Context ctx(m, n_ctx, a.threads, a.batch, a.cache_type.types());
    const LoadedLoras loras = a.lora.load(m);
    ctx.set_loras(loras.uses);
    a.sampling.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : std::random_device{}();
    infer::Sampler sampler(a.sampling);

    std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
    std::fflush(stdout);
    const auto print = [](std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
    };
    infer::GenerateStats st;
    infer::SpeculativeStats spec;
    if (a.draft.empty()) {
        st = infer::generate(ctx, tok, prompt, a.n_predict, sampler, a.ignore_eos, print);
    } else {
        const model::Model dm(a.draft);
        model::Context dctx(dm, n_ctx, a.threads, a.batch, a.cache_type.types());
        a.spec.adaptive = !a.draft_fixed;
        st = infer::speculative_generate(ctx, dctx, tok, prompt, a.n_predict, sampler, a.ignore_eos,
                                         print, a.spec, &spec);
    }
    std::printf("\n");
    std::fprintf(stderr,
                 "\nprompt: %d tokens in %.3f s (%.1f tok/s) | generated: %d tokens in %.3f s "
                 "(%.1f tok/s)%s | seed %llu\n",
                 st.n_prompt, st.prompt_seconds, st.n_prompt / std::max(1e-9, st.prompt_seconds),
                 st.n_generated, st.generate_seconds,
                 st.n_generated / std::max(1e-9, st.generate_seconds),
                 st.stopped_at_eog ? " | stopped at end-of-generation token" : "",
                 static_cast<unsigned long long>(a.sampling.seed));
    if (!a.draft.empty())
        std::fprintf(stderr,
                     "speculative: %d rounds, %d drafted, %d accepted (%.1f%%), %.2f tokens per "
                     "target call; draft %.3f s, target %.3f s\n",
                     spec.rounds, spec.drafted, spec.accepted, 100.0 * spec.acceptance(),
                     spec.rounds ? static_cast<double>(st.n_generated) / spec.rounds : 0.0,
                     spec.draft_seconds, spec.target_seconds);
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<GenerateArgs>();
    app.add_option("-m,--model", a->model, "GGUF model file (with --plan: the plan's model.gguf)")
        ->check(CLI::ExistingFile);
    app.add_option("--plan", a->plan,
                   "A plan from `syslm tune --goal decode` (its plan.json): its model, threads, "
                   "batch and draft settings, exactly")
        ->check(CLI::ExistingFile);
    auto* p = app.add_option("-p,--prompt", a->prompt, "Prompt text");
    app.add_option("-f,--file", a->prompt_file, "Read the prompt from a file")->excludes(p);
    app.add_option("-n,--n-predict", a->n_predict, "Tokens to generate")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_option("-c,--ctx-size", a->n_ctx, "Context size (default: min(trained, 4096))");
    add_length_options(app, a->window, a->expert_top_p);
    a->window_opt = app.get_option("--window");
    a->top_p_opt = app.get_option("--expert-top-p");
    a->threads_opt = app.add_option("-t,--threads", a->threads, "Threads (default: all cores)");
    add_cache_type_options(app, a->cache_type);
    add_lora_options(app, a->lora);
    a->batch_opt = app.add_option("-b,--batch-size", a->batch, "Prompt tokens per forward batch")
                       ->capture_default_str()
                       ->check(CLI::PositiveNumber);
    app.add_option("--temp", a->sampling.temperature, "Temperature; 0 = greedy")
        ->capture_default_str()
        ->check(non_negative());
    app.add_option("--top-k", a->sampling.top_k, "Top-k; 0 = off")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_option("--top-p", a->sampling.top_p, "Top-p; 1 = off")
        ->capture_default_str()
        ->check(unit_interval());
    app.add_option("--min-p", a->sampling.min_p, "Min-p; 0 = off")
        ->capture_default_str()
        ->check(unit_interval());
    app.add_option("--repeat-penalty", a->sampling.repeat_penalty, "Repetition penalty; 1 = off")
        ->capture_default_str()
        ->check(positive());
    app.add_option("--repeat-last-n", a->sampling.repeat_last_n,
                   "Recent tokens the penalties consider")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_option("--presence-penalty", a->sampling.presence_penalty, "Presence penalty")
        ->capture_default_str()
        ->check(finite_in(-2, 2));
    app.add_option("--frequency-penalty", a->sampling.frequency_penalty, "Frequency penalty")
        ->capture_default_str()
        ->check(finite_in(-2, 2));
    app.add_option("-s,--seed", a->seed, "Random seed (default: random, printed at the end)");
    app.add_flag("--ignore-eos", a->ignore_eos, "Keep generating past end-of-generation tokens");
    app.add_flag("--no-bos", a->no_bos, "Do not add the BOS token to the prompt");
    a->draft_opt =
        app.add_option(
               "--draft", a->draft,
               "Speculative decoding with this draft model (same vocabulary): it proposes "
               "tokens the model verifies in one call; the output is distributed exactly as "
               "without it (greedy: the same tokens)")
            ->check(CLI::ExistingFile);
    a->k_opt =
        app.add_option("--draft-k", a->spec.k, "Initial draft length")->capture_default_str();
    a->k_min_opt = app.add_option("--draft-min", a->spec.k_min, "Smallest adaptive draft length")
                       ->capture_default_str();
    a->k_max_opt = app.add_option("--draft-max", a->spec.k_max, "Largest adaptive draft length")
                       ->capture_default_str();
    a->fixed_opt =
        app.add_flag("--draft-fixed", a->draft_fixed,
                     "Keep the draft length at --draft-k (default: adapt it to the measured "
                     "acceptance rate and draft/target cost)");
    return [a] { return run_generate(*a); };
}

}  // namespace

SYSLM_COMMAND(generate, "generate", "Generate text from a prompt, streaming it", setup);

}  // namespace syslm::cli
