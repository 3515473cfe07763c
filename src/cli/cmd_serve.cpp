// syslm serve: the OpenAI-compatible server over the continuous-batching engine. Listens first
// (/health answers 503 while the model loads), binds 127.0.0.1 unless --host says otherwise,
// and on SIGTERM / SIGINT stops accepting, finishes in-flight requests and exits. Slow or
// malicious clients hold only their own connection: requests must arrive whole within
// --request-timeout, and a full set of HTTP workers answers 503 at once.
#include <signal.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "cli/cache_type_options.hpp"
#include "cli/command.hpp"
#include "cli/length_options.hpp"
#include "cli/option_checks.hpp"
#include "cli/plan_settings.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "infer/engine.hpp"
#include "infer/wire_rows.hpp"
#include "serve/api_server.hpp"
#include "serve/edge_generator.hpp"
#include "train/batch_plan.hpp"
#include "tune/plan.hpp"

namespace syslm::cli {
namespace {

struct ServeArgs {
    std::string plan;
    std::string model, host = "127.0.0.1", api_key, alias, chat_template, kv_memory;
    std::string prefix_ram, prefix_dir, prefix_disk = "8GiB", pooling = "mean";
    CacheTypeArgs cache_type;
    std::vector<std::string> loras;  // NAME=FILE or FILE
    std::string window, expert_top_p;
    int port = 8080, parallel = 16, ctx = 4096, kv_pages = 0, page_size = 16, threads = 0;
    int64_t token_budget = 512;
    int max_queue = 256, max_tokens = 4096, max_n = 8, http_threads = 0;
    int max_connections = 1024;
    bool no_kv_ring = false, no_prefix_cache = false;
    // Edge and cloud (docs/design/edge_cloud.md).
    std::string role, verify_at, cascade, split_cloud, wire = "f16", defer = "token", link,
                                                       cloud_key;
    int split_at = -1;
    double defer_below = -1;
    double cloud_timeout = 5, session_timeout = 60;
    int cloud_sessions = 0;
    infer::SpeculativeOptions spec;
    bool draft_fixed = false;
    double spare_cloud = 0.2;
    double request_timeout = 5, keep_alive_timeout = 30, write_timeout = 30;
    size_t max_body = 1 << 20;
    // The options a plan sets (to tell a contradicting command line).
    const CLI::Option *model_opt = nullptr, *parallel_opt = nullptr, *ctx_opt = nullptr,
                      *pages_opt = nullptr, *kv_memory_opt = nullptr, *page_size_opt = nullptr,
                      *budget_opt = nullptr, *threads_opt = nullptr, *window_opt = nullptr,
                      *expert_opt = nullptr;
};

// `--plan`: the model beside the plan unless -m names one, and the plan's engine settings.
void apply_plan(ServeArgs& a) {
    const tune::Plan plan = tune::load_plan(a.plan);
    if (a.model.empty()) {
        a.model = (std::filesystem::path(a.plan).parent_path() / "model.gguf").string();
        SYSLM_CHECK(std::filesystem::exists(a.model), a.plan, ": no model.gguf beside the plan ",
                    "(give -m)");
    }
    take_from_plan(a.threads_opt, a.threads, plan.threads, "runtime.threads");
    if (!plan.window.empty()) take_from_plan(a.window_opt, a.window, plan.window, "runtime.window");
    if (!plan.expert_top_p.empty())
        take_from_plan(a.expert_opt, a.expert_top_p, plan.expert_top_p, "runtime.expert_top_p");
    usage_check(plan.serve.has_value(), a.plan,
                " has no serve settings (tune it with --goal serve)");
    const tune::ServeSettings& s = *plan.serve;
    take_from_plan(a.parallel_opt, a.parallel, s.parallel, "serve.parallel");
    take_from_plan(a.budget_opt, a.token_budget, s.token_budget, "serve.token_budget");
    take_from_plan(a.page_size_opt, a.page_size, s.page_size, "serve.page_size");
    take_from_plan(a.ctx_opt, a.ctx, s.ctx, "serve.ctx");
    const model::KvTypes planned = model::kv_types_from_name(s.cache_type);
    usage_check(!a.cache_type.given() || a.cache_type.types() == planned, "--cache-type ",
                a.cache_type.types().name(), " contradicts the plan's serve.cache_type ",
                s.cache_type);
    a.cache_type = {"", model::kv_cache_type_name(planned.k), model::kv_cache_type_name(planned.v)};
    if (s.kv_pages > 0) {
        usage_check(a.kv_memory_opt->count() == 0, "--kv-memory contradicts the plan's ",
                    "serve.kv_pages ", s.kv_pages);
        take_from_plan(a.pages_opt, a.kv_pages, s.kv_pages, "serve.kv_pages");
    }
}

// Enough workers that the engine's queue (--max-queue, answered 429) is the limit for
// completions, not the HTTP layer: each completion holds a worker for its whole generation,
// sleeping. A few more for /tokenize and the like.
int default_http_threads(const ServeArgs& a) {
    return static_cast<int>(std::min<int64_t>(int64_t{a.parallel} + a.max_queue + 16, 4096));
}

infer::EngineConfig engine_config(const ServeArgs& a) {
    infer::EngineConfig ec;
    ec.threads = a.threads;
    ec.page_size = a.page_size;
    ec.n_pages = a.kv_pages;
    ec.kv_memory = a.kv_memory.empty() ? 0 : train::parse_memory_size(a.kv_memory);
    ec.kv_types = a.cache_type.types();
    ec.parallel = a.parallel;
    ec.token_budget = a.token_budget;
    ec.max_waiting = a.max_queue;
    ec.n_ctx = a.ctx;
    ec.window_auto = a.window == "auto";
    ec.expert_auto = a.expert_top_p == "auto";
    ec.kv_ring = !a.no_kv_ring;
    ec.prefix_cache = !a.no_prefix_cache;
    if (!a.prefix_ram.empty()) ec.prefix_tiers.ram_bytes = train::parse_memory_size(a.prefix_ram);
    if (!a.prefix_dir.empty()) {
        ec.prefix_tiers.disk_dir = a.prefix_dir;
        ec.prefix_tiers.disk_bytes = train::parse_memory_size(a.prefix_disk);
    }
    return ec;
}

// --lora NAME=FILE (or FILE, named by its stem): each adapter loaded and checked against the model.
std::vector<infer::EngineConfig::NamedLora> load_loras(const std::vector<std::string>& specs,
                                                       const model::Model& model) {
    std::vector<infer::EngineConfig::NamedLora> out;
    for (const std::string& spec : specs) {
        const size_t eq = spec.find('=');
        const std::string file = eq == std::string::npos ? spec : spec.substr(eq + 1);
        std::string lora_name = eq == std::string::npos
                                    ? std::filesystem::path(file).stem().string()
                                    : spec.substr(0, eq);
        usage_check(!lora_name.empty() && lora_name.find(':') == std::string::npos, "--lora ", spec,
                    ": the adapter's name must be non-empty, without ':'");
        for (const auto& l : out)
            usage_check(l.name != lora_name, "--lora: two adapters are named '", lora_name, "'");
        out.push_back({lora_name, std::make_shared<const model::LoraAdapter>(file, model)});
    }
    return out;
}

// --role edge|cloud and what each takes.
void add_edge_cloud_options(CLI::App& app, ServeArgs& a) {
    app.add_option("--role", a.role,
                   "cloud: also serve edges' sessions (/v1/syslm/...: they draft, this server's "
                   "model verifies); edge: answer with the cloud at --verify-at verifying this "
                   "model's drafts")
        ->check(CLI::IsMember({"edge", "cloud"}));
    app.add_option(
        "--verify-at", a.verify_at,
        "Edge: the cloud (http://HOST:PORT, a `serve --role cloud`) whose model verifies "
        "this model's drafts; answers follow the cloud model's distribution");
    app.add_option("--split-at", a.split_at,
                   "Edge: run layers [0, L) of the model and the cloud (--cloud) the rest; cloud: "
                   "take edges' split sessions only at layer L")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--cloud", a.split_cloud,
                   "Edge, --split-at: the cloud (http://HOST:PORT, a `serve --role cloud` with the "
                   "same model) that runs the model's other layers");
    app.add_option("--wire", a.wire,
                   "Edge, --split-at: the residual rows' format on the link: f16, int8 (a scale "
                   "per row; half the bytes) or f32 (exact)")
        ->capture_default_str()
        ->check(CLI::IsMember({"f16", "int8", "f32"}));
    app.add_option("--cascade", a.cascade,
                   "Edge: answer with this model and defer to the cloud at this URL whenever "
                   "the model's top token probability is below --defer-below (calibrate it with "
                   "`syslm eval -m cloud.gguf -m edge.gguf --text T --cascade`)");
    app.add_option("--defer-below", a.defer_below,
                   "Edge, --cascade: the confidence (top token probability) under which the cloud "
                   "decides")
        ->check(finite_in(0.0, 1.0));
    app.add_option("--defer", a.defer,
                   "Edge, --cascade: token (the cloud decides that token, then the edge goes on) "
                   "or request (the cloud writes the rest of the answer)")
        ->capture_default_str()
        ->check(CLI::IsMember({"token", "request"}));
    app.add_option("--link", a.link,
                   "Edge: simulate this link on every call to the cloud, RATE,RTT (e.g. "
                   "20mbit,30ms; 0,10ms for the round trip alone)");
    app.add_option("--cloud-key", a.cloud_key, "Edge: the cloud's API key");
    app.add_option("--cloud-timeout", a.cloud_timeout,
                   "Edge: seconds a call to the cloud may take; past it (or when the cloud is "
                   "down) the answer goes on from this model alone, flagged")
        ->capture_default_str()
        ->check(finite_in(0.01, 3600.0));
    app.add_option("--draft-k", a.spec.k, "Edge: initial draft length")->capture_default_str();
    app.add_option("--draft-min", a.spec.k_min, "Edge: smallest adaptive draft length")
        ->capture_default_str();
    app.add_option("--draft-max", a.spec.k_max, "Edge: largest adaptive draft length")
        ->capture_default_str();
    app.add_option("--spare-cloud", a.spare_cloud,
                   "Edge, --verify-at: the adaptive draft length takes the longest drafts (the "
                   "fewest cloud passes per token) predicted within this fraction of the fastest "
                   "(0: the fastest)")
        ->capture_default_str()
        ->check(finite_in(0.0, 1.0));
    app.add_flag("--draft-fixed", a.draft_fixed,
                 "Edge: keep the draft length at --draft-k (default: adapt it to the acceptance "
                 "rate and the measured cost of drafting and of a call to the cloud)");
    app.add_option("--cloud-sessions", a.cloud_sessions,
                   "Cloud: edge sessions open at once, each with its own context (default: "
                   "--parallel); past it a session is refused with 429")
        ->check(CLI::Range(1, 4096));
    app.add_option("--session-timeout", a.session_timeout,
                   "Cloud: seconds an idle edge session is kept")
        ->capture_default_str()
        ->check(finite_in(1.0, 86400.0));
}

// An edge serves its model as it is, in contexts of its own (not the engine's KV pool).
void check_edge_options(const ServeArgs& a) {
    usage_check(a.loras.empty(), "--role edge serves its model as it is: no --lora");
    const auto given = a.pages_opt->count() + a.kv_memory_opt->count() + a.page_size_opt->count() +
                       a.budget_opt->count();
    usage_check(given == 0 && !a.cache_type.given() && a.prefix_ram.empty() &&
                    a.prefix_dir.empty() && !a.no_prefix_cache && !a.no_kv_ring,
                "--role edge has no KV pool: the KV, page, token-budget and prefix-cache "
                "options are for the engine");
}

// The cascade's and the speculative edge's options go with their mode.
void check_mode_options(const ServeArgs& a) {
    usage_check(a.cascade.empty() == (a.defer_below < 0),
                "--cascade and --defer-below go together");
    usage_check(!a.cascade.empty() || a.defer == "token", "--defer is for --cascade");
    const infer::SpeculativeOptions d;
    usage_check(
        !a.verify_at.empty() || (a.spec.k == d.k && a.spec.k_min == d.k_min &&
                                 a.spec.k_max == d.k_max && !a.draft_fixed && a.spare_cloud == 0.2),
        "--draft-k, --draft-min, --draft-max, --draft-fixed and --spare-cloud are for "
        "--verify-at");
}

// The roles' options agree with --role.
void check_roles(const ServeArgs& a) {
    const bool edge = a.role == "edge", cloud = a.role == "cloud";
    const int modes = !a.verify_at.empty() + !a.cascade.empty() + !a.split_cloud.empty();
    usage_check(!edge || modes == 1,
                "--role edge needs its cloud and one mode: --verify-at URL (speculative), "
                "--cascade URL --defer-below P, or --split-at L --cloud URL");
    usage_check(edge || (modes == 0 && a.link.empty() && a.cloud_key.empty()),
                "--verify-at, --cascade, --cloud, --link and --cloud-key are for --role edge");
    usage_check(
        a.split_cloud.empty() == (a.split_at < 0 || cloud),
        edge ? "--split-at and --cloud go together" : "--split-at is for --role edge or cloud");
    usage_check(!a.split_cloud.empty() || a.wire == "f16", "--wire is for --split-at on an edge");
    usage_check(cloud || a.cloud_sessions == 0, "--cloud-sessions is for --role cloud");
    if (edge) check_edge_options(a);
    check_mode_options(a);
    usage_check(edge || a.cloud_timeout == 5, "--cloud-timeout is for --role edge");
    usage_check(cloud || a.session_timeout == 60, "--session-timeout is for --role cloud");
}

// The edge's generator: this model drafts, the cloud verifies.
std::unique_ptr<serve::EdgeGenerator> edge_generator(const ServeArgs& a,
                                                     std::shared_ptr<const model::Model> model,
                                                     const tokenizer::Tokenizer& tok) {
    serve::EdgeConfig ec;
    ec.mode = !a.cascade.empty()       ? serve::EdgeMode::Cascade
              : !a.split_cloud.empty() ? serve::EdgeMode::Split
                                       : serve::EdgeMode::Speculative;
    ec.cloud_url = a.verify_at + a.cascade + a.split_cloud;  // the one given
    ec.split_at = a.split_at;
    ec.wire = infer::wire_type(a.wire);
    ec.defer_below = a.defer_below;
    ec.defer_request = a.defer == "request";
    if (!a.link.empty()) ec.link = serve::parse_link(a.link);
    ec.api_key = a.cloud_key;
    ec.call_timeout_s = a.cloud_timeout;
    // One draft context per slot: a few unless --parallel says otherwise.
    ec.slots = a.parallel_opt->count() ? a.parallel : 4;
    ec.n_ctx = a.ctx;
    ec.threads = a.threads;
    ec.max_waiting = a.max_queue;
    ec.speculative = a.spec;
    ec.speculative.adaptive = !a.draft_fixed;
    ec.speculative.spare_target = a.spare_cloud;
    return std::make_unique<serve::EdgeGenerator>(std::move(model), tok, ec);
}

// The edge's generator in the server, and its ready line.
void start_edge(const ServeArgs& a, serve::Server& server,
                std::shared_ptr<const model::Model> model, const tokenizer::Tokenizer& tok,
                const std::string& name, tokenizer::ChatFormat format) {
    const int slots = a.parallel_opt->count() ? a.parallel : 4;
    server.set_engine(edge_generator(a, model, tok), name, format);
    std::string mode = "drafts verified by " + a.verify_at;
    if (!a.cascade.empty())
        mode = "deferring to " + a.cascade + " below " + std::to_string(a.defer_below) + " (per " +
               a.defer + ")";
    if (!a.split_cloud.empty())
        mode = "layers [0, " + std::to_string(a.split_at) + "), the rest at " + a.split_cloud +
               " (" + a.wire + " rows)";
    std::fprintf(stderr,
                 "syslm serve: ready (edge): model '%s', %s; %d slots, context %d, chat "
                 "template %s\n",
                 name.c_str(), mode.c_str(), slots, a.ctx,
                 tokenizer::chat_format_name(format).c_str());
}

// The continuous-batching engine in the server (and a cloud's sessions beside it), and its ready
// line.
void start_engine(const ServeArgs& a, serve::Server& server,
                  std::shared_ptr<const model::Model> model, const tokenizer::Tokenizer& tok,
                  const std::string& name, tokenizer::ChatFormat format) {
    infer::EngineConfig ec = engine_config(a);
    ec.loras = load_loras(a.loras, *model);
    auto engine = std::make_unique<infer::Engine>(model, tok, ec);
    const infer::KvPagesConfig& kv = engine->kv_config();
    const size_t kv_mib = kv.bytes() >> 20;
    std::string pages = std::to_string(kv.n_pages) + " KV pages";
    if (kv.groups() == 2)  // local/global: the windowed layers' pages are a ring of their own
        pages +=
            " (global layers) and " + std::to_string(kv.ring_pages) + " (windowed layers' ring)";
    const infer::EngineConfig applied = engine->config();
    if (a.role == "cloud") {
        serve::CloudSessionsConfig cc;
        cc.max_sessions = a.cloud_sessions > 0 ? a.cloud_sessions : a.parallel;
        cc.n_ctx = applied.n_ctx;
        cc.threads = ThreadPool::resolve(a.threads);
        cc.idle_timeout_s = a.session_timeout;
        cc.split_at = a.split_at;
        server.set_cloud_sessions(std::make_unique<serve::CloudSessions>(model, cc));
    }
    server.set_engine(std::move(engine), name,
                      format);  // before "ready": clients may wait for it
    std::fprintf(stderr,
                 "syslm serve: ready: model '%s', chat template %s, %s of %d positions "
                 "(%zu MiB, %s), %d parallel, context %d, token budget %lld, %d threads\n",
                 name.c_str(), tokenizer::chat_format_name(format).c_str(), pages.c_str(),
                 applied.page_size, kv_mib, applied.kv_types.name().c_str(), applied.parallel,
                 applied.n_ctx, static_cast<long long>(applied.token_budget),
                 ThreadPool::resolve(applied.threads));
}

// `--role edge --plan`: a plan from `syslm tune edge`: its model (the edge's copy beside it),
// split point, wire format and threads; options also given must agree.
void apply_edge_plan(ServeArgs& a) {
    const tune::Plan plan = tune::load_plan(a.plan);
    usage_check(plan.edge.has_value(), a.plan,
                " has no edge settings (make it with `syslm tune edge`)");
    if (a.model.empty()) {
        a.model = (std::filesystem::path(a.plan).parent_path() / "model.gguf").string();
        SYSLM_CHECK(std::filesystem::exists(a.model), a.plan, ": no model.gguf beside the plan ",
                    "(give -m)");
    }
    usage_check(a.split_at < 0 || a.split_at == plan.edge->split_at, "--split-at ", a.split_at,
                " contradicts the plan's edge.split_at ", plan.edge->split_at);
    usage_check(a.wire == "f16" || a.wire == plan.edge->wire, "--wire ", a.wire,
                " contradicts the plan's edge.wire ", plan.edge->wire);
    usage_check(!a.split_cloud.empty(),
                "--plan with an edge section: give the cloud (--cloud URL)");
    a.split_at = plan.edge->split_at;
    a.wire = plan.edge->wire;
    take_from_plan(a.threads_opt, a.threads, plan.threads, "runtime.threads");
    a.plan.clear();  // applied
}

int run_serve(ServeArgs& a) {
    if (a.role == "edge" && !a.plan.empty()) apply_edge_plan(a);
    check_roles(a);
    if (!a.plan.empty()) apply_plan(a);
    usage_check(!a.model.empty(), "give the model (-m) or a tuned plan (--plan)");
    // Signals go to the waiting main thread only (blocked before any thread starts).
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a kill

    serve::ServerConfig sc;
    sc.host = a.host;
    sc.port = a.port;
    sc.api_key = a.api_key;
    sc.max_body = a.max_body;
    sc.limits.max_tokens = a.max_tokens;
    sc.limits.max_n = a.max_n;
    sc.http_threads = a.http_threads > 0 ? a.http_threads : default_http_threads(a);
    sc.max_connections = a.max_connections;
    sc.pooling = serve::pooling_from_name(a.pooling);
    sc.request_timeout_s = a.request_timeout;
    sc.keep_alive_timeout_s = a.keep_alive_timeout;
    sc.write_timeout_s = a.write_timeout;
    serve::Server server(sc);
    server.start();
    std::fprintf(stderr, "syslm serve: listening on http://%s:%d (loading %s)\n", a.host.c_str(),
                 server.port(), a.model.c_str());

    // --window / --expert-top-p N: every request's; auto: each request's own, by its length (the
    // engine's).
    auto loaded = std::make_shared<model::Model>(a.model);
    if (a.window != "auto") apply_window(*loaded, a.window, 0);
    if (a.expert_top_p != "auto") apply_expert_top_p(*loaded, a.expert_top_p, 0);
    std::shared_ptr<const model::Model> model = std::move(loaded);
    auto tok = tokenizer::Tokenizer::from_gguf(model->file());
    // The flag, else the model's template; a model without one gets ChatML (as llama.cpp).
    const std::string tmpl = !a.chat_template.empty()
                                 ? a.chat_template
                                 : model->file().get_string("tokenizer.chat_template", "");
    if (tmpl.empty())
        std::fprintf(stderr,
                     "syslm serve: the model has no chat template: using chatml "
                     "(--chat-template to choose)\n");
    const tokenizer::ChatFormat format = tokenizer::chat_format(tmpl.empty() ? "chatml" : tmpl);
    std::string name = a.alias;
    if (name.empty()) name = model->file().get_string("general.name", "");
    if (name.empty()) name = std::filesystem::path(a.model).stem().string();
    if (a.role == "edge")
        start_edge(a, server, model, tok, name, format);
    else
        start_engine(a, server, model, tok, name, format);

    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "syslm serve: %s: finishing in-flight requests\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT");
    server.drain_and_stop();
    std::fprintf(stderr, "syslm serve: stopped\n");
    return 0;
}

// The KV pool's size, pages and element type.
void add_kv_options(CLI::App& app, ServeArgs& a) {
    auto pages = app.add_option("--kv-pages", a.kv_pages,
                                "KV pages in the pool (a local/global model: the global layers' "
                                "pages; its windowed layers get a ring of their own beside them)")
                     ->check(CLI::PositiveNumber);
    a.pages_opt = pages;
    a.kv_memory_opt = app.add_option("--kv-memory", a.kv_memory, "KV pool size instead, e.g. 2GiB")
                          ->excludes(pages);
    a.page_size_opt = app.add_option("--page-size", a.page_size, "Positions per KV page")
                          ->capture_default_str()
                          ->check(CLI::Range(1, 4096));
    app.add_flag("--no-kv-ring", a.no_kv_ring,
                 "Sliding-window layers keep every KV page, as global ones do (by default they "
                 "give back the pages before each sequence's window, in a ring of their own when "
                 "the model also has global layers)");
    add_cache_type_options(app, a.cache_type);
    app.add_option("--prefix-cache-ram", a.prefix_ram,
                   "Keep prefix pages the KV pool evicts in RAM, up to this size (e.g. 2GiB), "
                   "and bring them back on a prefix hit");
    auto dir = app.add_option("--prefix-cache-dir", a.prefix_dir,
                              "Then on disk, in a folder of this server's own under this one "
                              "(removed when it stops)");
    app.add_option("--prefix-cache-disk", a.prefix_disk, "The disk tier's size")
        ->capture_default_str()
        ->needs(dir);
    app.add_option("--lora", a.loras,
                   "LoRA adapter requests may pick, NAME=FILE (llama.cpp's adapter GGUF; FILE "
                   "alone: named by its stem); repeatable. A request picks it as the model "
                   "'<model>:NAME' or with \"lora\": [{\"id\": i, \"scale\": s}]; none is "
                   "applied by default");
    app.add_option("--pooling", a.pooling,
                   "How /v1/embeddings pools an input's hidden states: mean or last (token)")
        ->capture_default_str()
        ->check(CLI::IsMember({"mean", "last"}));
    app.add_flag("--no-prefix-cache", a.no_prefix_cache,
                 "Share no KV pages between requests with a common prefix (a baseline; vLLM's "
                 "--no-enable-prefix-caching)")
        ->excludes("--prefix-cache-ram")
        ->excludes(dir);
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<ServeArgs>();
    a->model_opt = app.add_option("-m,--model", a->model,
                                  "GGUF model file (with --plan: the plan's model.gguf)")
                       ->check(CLI::ExistingFile);
    app.add_option("--plan", a->plan,
                   "A plan from `syslm tune --goal serve` (its plan.json): its model and engine "
                   "settings (threads, parallel, token budget, KV pages, page size, context, "
                   "cache type), exactly; an option also given must agree with it. With --role "
                   "edge, a plan from `syslm tune edge`: the edge's model, split point, wire "
                   "and threads (give --cloud)")
        ->check(CLI::ExistingFile);
    app.add_option("--host", a->host, "Address to bind (127.0.0.1: this machine only)")
        ->capture_default_str();
    app.add_option("--port", a->port, "Port (0: any free one)")->capture_default_str();
    app.add_option("--api-key", a->api_key, "Require 'Authorization: Bearer KEY'");
    app.add_option("--alias", a->alias, "Model name in the API (default: general.name)");
    add_length_options(app, a->window, a->expert_top_p);
    a->window_opt = app.get_option("--window");
    a->expert_opt = app.get_option("--expert-top-p");
    app.add_option("--chat-template", a->chat_template,
                   "Chat format instead of the model's template: chatml, llama2, llama2-sys, "
                   "llama3, mistral-v1, mistral-v3, mistral-v7, gemma, phi3, zephyr, ...");
    a->parallel_opt = app.add_option("--parallel", a->parallel, "Sequences per step")
                          ->capture_default_str()
                          ->check(CLI::Range(1, 1024));
    a->ctx_opt =
        app.add_option("-c,--ctx-size", a->ctx, "Positions per sequence (prompt + generated)")
            ->capture_default_str()
            ->check(CLI::PositiveNumber);
    add_kv_options(app, *a);
    a->budget_opt = app.add_option("--token-budget", a->token_budget,
                                   "Tokens per step (decode + prefill chunks)")
                        ->capture_default_str()
                        ->check(CLI::Range(1, 65536));
    app.add_option("--max-queue", a->max_queue, "Waiting requests before 429")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--max-tokens", a->max_tokens, "Largest max_tokens a request may ask for")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--max-n", a->max_n, "Largest n (choices) per request")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));
    app.add_option("--max-body", a->max_body, "Largest request body in bytes")
        ->capture_default_str();
    app.add_option("--http-threads", a->http_threads,
                   "HTTP worker threads; a completion holds one while it generates, and with all "
                   "busy new requests get 503 (0: parallel + max-queue + 16, at most 4096)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_option("--request-timeout", a->request_timeout,
                   "Seconds for a request's headers and body to arrive, from its first byte "
                   "(a total, not per read); then 408 and close")
        ->capture_default_str()
        ->check(finite_in(0.01, 3600.0));
    app.add_option("--keep-alive-timeout", a->keep_alive_timeout,
                   "Seconds an idle keep-alive connection stays open")
        ->capture_default_str()
        ->check(finite_in(0.01, 3600.0));
    app.add_option("--write-timeout", a->write_timeout,
                   "Seconds a client may take none of its pending answer; then the connection "
                   "drops, its request cancelled")
        ->capture_default_str()
        ->check(finite_in(0.01, 3600.0));
    app.add_option("--max-connections", a->max_connections,
                   "Open connections; past it a new one gets 503 and is closed")
        ->capture_default_str()
        ->check(CLI::Range(1, 1000000));
    a->threads_opt =
        app.add_option("-t,--threads", a->threads, "Compute threads (default: all cores)");
    add_edge_cloud_options(app, *a);
    return [a] { return run_serve(*a); };
}

}  // namespace

SYSLM_COMMAND(serve, "serve", "Serve a model over an OpenAI-compatible HTTP API", setup);

}  // namespace syslm::cli
