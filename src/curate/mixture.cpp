#include "curate/mixture.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "core/subprocess.hpp"
#include "curate/scores.hpp"
#include "data/loader.hpp"

namespace syslm::curate {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> level_names(int k) {
    if (k <= 1) return {""};
    if (k == 2) return {"easy", "hard"};
    if (k == 3) return {"easy", "medium", "hard"};
    std::vector<std::string> names;
    for (int i = 0; i < k; ++i) names.push_back(std::string(1, 'd').append(std::to_string(i)));
    return names;
}

// The difficulty level of each document of a source, in reading order: its perplexity's rank
// cut into k levels of equal counts (ties broken by reading order).
struct SourceLevels {
    std::vector<int> level;
    std::vector<double> ppl;
};

SourceLevels source_levels(const std::vector<std::string>& files, DocUnit unit,
                           const DocumentScores& scores, int k) {
    SourceLevels s;
    std::vector<size_t> per_file(files.size(), 0);
    DocumentReader reader(files, unit);
    Document d;
    while (reader.next(d)) {
        const size_t f = static_cast<size_t>(d.file);
        s.ppl.push_back(scores.ppl(files[f], per_file[f]++));
    }
    for (size_t i = 0; i < files.size(); ++i) scores.check_count(files[i], per_file[i]);
    const size_t n = s.ppl.size();
    std::vector<size_t> rank(n);
    std::iota(rank.begin(), rank.end(), size_t{0});
    std::stable_sort(rank.begin(), rank.end(),
                     [&](size_t a, size_t b) { return s.ppl[a] < s.ppl[b]; });
    s.level.resize(n);
    for (size_t r = 0; r < n; ++r) s.level[rank[r]] = static_cast<int>(r * size_t(k) / n);
    return s;
}

void check_options(const MixOptions& opt) {
    SYSLM_CHECK(!opt.sources.empty(), "data mix: no --source");
    std::vector<std::string> names;
    for (const MixSource& s : opt.sources) {
        SYSLM_CHECK(std::find(names.begin(), names.end(), s.name) == names.end(),
                    "data mix: two sources named '", s.name, "'");
        names.push_back(s.name);
    }
    SYSLM_CHECK(opt.levels >= 0 && opt.levels <= 16, "data mix: difficulty levels ", opt.levels,
                " must be in [0, 16]");
    SYSLM_CHECK(opt.levels == 0 || !opt.scores_path.empty(),
                "data mix: difficulty levels need --scores (from `syslm data score`)");
}

// Tokens [begin, end) of a set of shards taken as one stream.
void read_range(const data::ShardSet& set, uint64_t begin, uint64_t end,
                std::vector<int32_t>& ids) {
    ids.resize(end - begin);
    uint64_t first = 0, done = 0;
    for (const data::Shard& sh : set.shards()) {
        const uint64_t last = first + sh.size();
        const uint64_t a = std::max(begin, first), b = std::min(end, last);
        if (a < b) {
            sh.read(a - first, b - a, ids.data() + done);
            done += b - a;
        }
        first = last;
    }
}

// Writes one source's strata (prepared data sets under strata/) and returns them.
std::vector<Stratum> write_source(const MixOptions& opt, const MixSource& src,
                                  const std::optional<DocumentScores>& scores,
                                  const tokenizer::Tokenizer& tok) {
    const std::vector<std::string> files = input_files(src.paths);
    const int k = std::max(opt.levels, 1);
    SourceLevels lv;
    if (opt.levels > 0) lv = source_levels(files, opt.unit, *scores, k);
    std::vector<Stratum> strata;
    std::vector<std::unique_ptr<data::DatasetWriter>> writers;
    const std::vector<std::string> levels = level_names(k);
    for (int i = 0; i < k; ++i) {
        Stratum s;
        s.source = src.name;
        s.level = levels[static_cast<size_t>(i)];
        s.level_index = i;
        s.name = src.name;
        if (!s.level.empty()) s.name.append(".").append(s.level);
        data::DatasetOptions d = opt.data;
        d.out_dir = (fs::path(opt.data.out_dir) / "strata" / s.name).string();
        writers.push_back(std::make_unique<data::DatasetWriter>(d, tok));
        strata.push_back(s);
    }
    DocumentReader reader(files, opt.unit);
    Document doc;
    for (size_t i = 0; reader.next(doc); ++i) {
        const size_t level = opt.levels > 0 ? static_cast<size_t>(lv.level[i]) : 0;
        Stratum& s = strata[level];
        if (opt.levels > 0) {
            const double p = lv.ppl[i];
            s.ppl_min = s.docs ? std::min(s.ppl_min, p) : p;
            s.ppl_max = s.docs ? std::max(s.ppl_max, p) : p;
        }
        writers[level]->add_document(doc.text);
        ++s.docs;
    }
    if (!reader.skipped().summary().empty())
        std::fprintf(stderr, "data mix: source '%s': %s\n", src.name.c_str(),
                     reader.skipped().summary().c_str());
    for (int i = 0; i < k; ++i) {
        Stratum& s = strata[static_cast<size_t>(i)];
        SYSLM_CHECK(s.docs > 0, "data mix: source '", src.name, "' has no documents",
                    opt.levels > 0 ? " for level " + s.level : std::string());
        const data::DataMeta& m = writers[static_cast<size_t>(i)]->finish();
        s.train_tokens = m.train_tokens;
        s.val_tokens = m.val_tokens;
    }
    return strata;
}

// Each source's weight split over its strata by their train tokens; sums to 1.
void assign_weights(const MixOptions& opt, std::vector<Stratum>& strata) {
    double total = 0;
    for (const MixSource& s : opt.sources) total += s.weight;
    for (const MixSource& src : opt.sources) {
        uint64_t tokens = 0;
        for (const Stratum& s : strata)
            if (s.source == src.name) tokens += s.train_tokens;
        for (Stratum& s : strata)
            if (s.source == src.name)
                s.weight = src.weight / total * double(s.train_tokens) / double(tokens);
    }
}

// (stratum, chunk) of the mixture: each stratum's chunks in a seeded order of its own, repeated
// as needed for its share; sets each stratum's mixed_tokens.
std::vector<std::pair<uint32_t, uint64_t>> plan_chunks(const MixOptions& opt,
                                                       std::vector<Stratum>& strata,
                                                       uint64_t budget) {
    const uint64_t C = opt.data.chunk_tokens;
    std::vector<std::pair<uint32_t, uint64_t>> plan;
    for (size_t si = 0; si < strata.size(); ++si) {
        Stratum& s = strata[si];
        s.mixed_tokens = 0;
        const uint64_t chunks = (s.train_tokens + C - 1) / C;
        const uint64_t want =
            std::max<uint64_t>(static_cast<uint64_t>(std::llround(s.weight * double(budget))), 1);
        for (uint64_t pass = 0; s.mixed_tokens < want; ++pass) {
            const std::vector<uint32_t> order = data::epoch_order(opt.seed + si, pass, chunks);
            for (size_t i = 0; i < order.size() && s.mixed_tokens < want; ++i) {
                plan.push_back({static_cast<uint32_t>(si), order[i]});
                s.mixed_tokens += std::min(C, s.train_tokens - order[i] * C);
            }
        }
    }
    return plan;
}

// The mixture's train split (the planned chunks in a seeded order) and its val (the strata's
// val splits chunk by chunk in turn, so that its first batches, an evaluation capped at a few
// batches, already hold every stratum).
void write_mixture(const MixOptions& opt, const std::vector<Stratum>& strata,
                   const std::vector<std::pair<uint32_t, uint64_t>>& plan,
                   data::DatasetWriter& top) {
    const uint64_t C = opt.data.chunk_tokens;
    std::vector<data::ShardSet> train, val;
    for (const Stratum& s : strata) {
        const std::string dir = (fs::path(opt.data.out_dir) / "strata" / s.name).string();
        train.emplace_back(data::split_shard_paths(dir, "train"));
        if (s.val_tokens > 0) val.emplace_back(data::split_shard_paths(dir, "val"));
    }
    std::vector<int32_t> ids;
    auto put = [&](data::DatasetWriter::Split split) {
        top.add_tokens({reinterpret_cast<const uint32_t*>(ids.data()), ids.size()}, split);
    };
    for (uint32_t i : data::epoch_order(opt.seed, 0, plan.size())) {
        const auto [si, c] = plan[i];
        read_range(train[si], c * C, std::min((c + 1) * C, strata[si].train_tokens), ids);
        put(data::DatasetWriter::Split::Train);
    }
    for (uint64_t t = 0, left = 1; left > 0; t += C) {
        left = 0;
        for (const data::ShardSet& v : val) {
            if (t >= v.n_tokens()) continue;
            read_range(v, t, std::min(t + C, v.n_tokens()), ids);
            put(data::DatasetWriter::Split::Val);
            ++left;
        }
    }
}

nlohmann::json mixture_json(const MixOptions& opt, const MixResult& res) {
    const std::vector<Stratum>& strata = res.strata;
    const data::DataMeta& meta = res.meta;
    nlohmann::json j = {{"version", 1},
                        {"seed", opt.seed},
                        {"chunk_tokens", opt.data.chunk_tokens},
                        {"train_tokens", meta.train_tokens},
                        {"val_tokens", meta.val_tokens},
                        {"difficulty_levels", opt.levels},
                        {"scores", opt.scores_path}};
    for (const MixSource& s : opt.sources)
        j["sources"].push_back({{"name", s.name}, {"paths", s.paths}, {"weight", s.weight}});
    for (const Stratum& s : strata)
        j["strata"].push_back({{"name", s.name},
                               {"source", s.source},
                               {"level", s.level},
                               {"level_index", s.level_index},
                               {"dir", "strata/" + s.name},
                               {"weight", s.weight},
                               {"docs", s.docs},
                               {"train_tokens", s.train_tokens},
                               {"val_tokens", s.val_tokens},
                               {"mixed_tokens", s.mixed_tokens},
                               {"repeats", s.repeats()},
                               {"ppl_min", s.ppl_min},
                               {"ppl_max", s.ppl_max}});
    if (!res.runs.empty()) {
        nlohmann::json runs = nlohmann::json::array();
        for (const SearchRun& r : res.runs)
            runs.push_back({{"weights", r.weights}, {"val_loss", r.val_loss}});
        const ProxySpec& p = opt.proxy;
        j["search"] = {
            {"method", "regmix"},
            {"proxy",
             {{"layers", p.layers},
              {"dim", p.dim},
              {"heads", p.heads},
              {"steps", p.steps},
              {"seq", p.seq},
              {"batch", p.batch},
              {"lr", p.lr}}},
            {"runs", runs},
            {"fit", {{"coef", res.fit.coef}, {"r2", res.fit.r2}, {"loo_rmse", res.fit.loo_rmse}}},
            {"predicted_val_loss",
             {{"chosen", res.predicted_chosen},
              {"uniform", res.predicted_uniform},
              {"natural", res.predicted_natural}}}};
    }
    return j;
}

// One proxy run: the mixture at `weights` under OUT/search/run_i, a proxy trained on it from
// scratch by `syslm train`, its val loss on the mixed val.
double proxy_run(const MixOptions& opt, const tokenizer::Tokenizer& tok,
                 std::vector<Stratum> strata, const std::vector<double>& weights, int i) {
    const ProxySpec& p = opt.proxy;
    for (size_t j = 0; j < strata.size(); ++j) strata[j].weight = weights[j];
    const fs::path dir = fs::path(opt.data.out_dir) / "search" / ("run_" + std::to_string(i));
    const uint64_t budget = static_cast<uint64_t>(p.steps) * p.batch * p.seq + p.seq + 1;
    write_mixture_set(opt, strata, budget, dir.string(), tok);
    auto str = [](double v) {
        std::ostringstream o;
        o << v;
        return o.str();
    };
    std::vector<std::string> argv{self_executable(),
                                  "train",
                                  "--arch",
                                  "llama",
                                  "--tokenizer",
                                  opt.data.tokenizer_path,
                                  "--layers",
                                  std::to_string(p.layers),
                                  "--dim",
                                  std::to_string(p.dim),
                                  "--heads",
                                  std::to_string(p.heads),
                                  "--ctx",
                                  std::to_string(p.seq),
                                  "--data",
                                  dir.string(),
                                  "--steps",
                                  std::to_string(p.steps),
                                  "--seq",
                                  std::to_string(p.seq),
                                  "-b",
                                  std::to_string(p.batch),
                                  "--lr",
                                  str(p.lr),
                                  "--min-lr",
                                  str(p.lr / 10),
                                  "--warmup",
                                  std::to_string(std::max(1, p.steps / 10)),
                                  "--eval-every",
                                  std::to_string(p.steps),
                                  "--eval-batches",
                                  "0",
                                  "--seed",
                                  "1",
                                  "--log-every",
                                  std::to_string(p.steps),
                                  "--json",
                                  "-o",
                                  (dir / "proxy.gguf").string()};
    if (opt.threads > 0) argv.insert(argv.end(), {"-t", std::to_string(opt.threads)});
    const std::string log = (dir / "train.log").string();
    const ProcessResult r = run_process(argv, log);
    SYSLM_CHECK(r.status == 0, "data mix: proxy run ", i, " failed (exit ", r.status,
                "); its output is in ", log);
    // --json prints the run's summary as its last line (npos + 1 = 0: the only line)
    const size_t end = r.out.find_last_not_of('\n');
    const size_t last = end == std::string::npos ? 0 : r.out.rfind('\n', end) + 1;
    try {
        return nlohmann::json::parse(r.out.substr(last, end + 1 - last))
            .at("best_val_loss")
            .get<double>();
    } catch (const std::exception& e) {
        fail("data mix: proxy run ", i, " printed no val loss (", e.what(), "); see ", log);
    }
}

// The RegMix search: runs, fit, choice; the strata's weights become the choice.
void search(const MixOptions& opt, const tokenizer::Tokenizer& tok, MixResult& res) {
    // Around the midpoint of the strata's natural token shares and the uniform mixture, so the
    // runs cover small strata too (RegMix's prior is the token shares alone).
    uint64_t total = 0;
    for (const Stratum& s : res.strata) total += s.train_tokens;
    std::vector<double> prior;
    for (const Stratum& s : res.strata)
        prior.push_back(0.5 * double(s.train_tokens) / double(total) +
                        0.5 / double(res.strata.size()));
    for (int i = 0; i < opt.search_runs; ++i) {
        SearchRun run{run_weights(prior, i, opt.seed), 0};
        run.val_loss = proxy_run(opt, tok, res.strata, run.weights, i);
        std::fprintf(stderr, "search: run %d/%d val loss %.4f at weights", i + 1, opt.search_runs,
                     run.val_loss);
        for (double w : run.weights) std::fprintf(stderr, " %.3f", w);
        std::fprintf(stderr, "\n");
        res.runs.push_back(std::move(run));
    }
    res.fit = fit_mixture_model(res.runs);
    const std::vector<double> chosen = best_mixture(res.fit, prior, opt.seed);
    res.predicted_chosen = res.fit.predict(chosen);
    std::vector<double> natural;
    for (const Stratum& s : res.strata) natural.push_back(double(s.train_tokens) / double(total));
    res.predicted_natural = res.fit.predict(natural);
    res.predicted_uniform =
        res.fit.predict(std::vector<double>(prior.size(), 1.0 / double(prior.size())));
    for (size_t j = 0; j < res.strata.size(); ++j) res.strata[j].weight = chosen[j];
}

}  // namespace

MixSource parse_mix_source(const std::string& spec) {
    const size_t eq = spec.find('=');
    SYSLM_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < spec.size(), "--source '", spec,
                "': expected NAME=PATH[:WEIGHT]");
    MixSource s;
    s.name = spec.substr(0, eq);
    for (char c : s.name)
        SYSLM_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-',
                    "--source '", spec, "': the name may hold letters, digits, '_' and '-'");
    std::string path = spec.substr(eq + 1);
    const size_t colon = path.rfind(':');
    if (colon != std::string::npos) {
        const std::string w = path.substr(colon + 1);
        char* end = nullptr;
        s.weight = std::strtod(w.c_str(), &end);
        SYSLM_CHECK(
            !w.empty() && end == w.c_str() + w.size() && std::isfinite(s.weight) && s.weight > 0,
            "--source '", spec, "': the weight '", w, "' is not a positive number");
        path.resize(colon);
    }
    SYSLM_CHECK(!path.empty(), "--source '", spec, "': no path");
    s.paths.push_back(path);
    return s;
}

std::string mixture_json_path(const std::string& dir) {
    return (fs::path(dir) / "mixture.json").string();
}

data::DataMeta write_mixture_set(const MixOptions& opt, std::vector<Stratum>& strata,
                                 uint64_t budget, const std::string& dir,
                                 const tokenizer::Tokenizer& tok) {
    const std::vector<std::pair<uint32_t, uint64_t>> plan = plan_chunks(opt, strata, budget);
    data::DatasetOptions d = opt.data;
    d.out_dir = dir;
    data::DatasetWriter top(d, tok);
    write_mixture(opt, strata, plan, top);
    return top.finish();
}

MixResult mix_data(const MixOptions& opt, const tokenizer::Tokenizer& tok) {
    check_options(opt);
    // The mixture's description goes first, so a failed run leaves no set that looks complete
    // (meta.json is removed by the writer).
    std::error_code ec;
    fs::create_directories(opt.data.out_dir, ec);
    fs::remove(mixture_json_path(opt.data.out_dir), ec);
    std::optional<DocumentScores> scores;
    if (opt.levels > 0) scores.emplace(opt.scores_path);
    MixResult res;
    for (const MixSource& src : opt.sources)
        for (Stratum& s : write_source(opt, src, scores, tok)) res.strata.push_back(std::move(s));
    assign_weights(opt, res.strata);

    if (opt.search_runs > 0) search(opt, tok, res);
    uint64_t budget = opt.train_tokens;
    if (budget == 0)
        for (const Stratum& s : res.strata) budget += s.train_tokens;
    res.meta = write_mixture_set(opt, res.strata, budget, opt.data.out_dir, tok);
    write_file_atomically(mixture_json_path(opt.data.out_dir),
                          mixture_json(opt, res).dump(2) + "\n");
    return res;
}

}  // namespace syslm::curate
