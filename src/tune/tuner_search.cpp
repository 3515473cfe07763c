// The tuner's type search: the importance matrix, the per-tensor sensitivities and the rounds
// of allocations along the hull (tuner_phases.hpp).
#include "core/mapped_file.hpp"
#include "tune/tuner_phases.hpp"

namespace syslm::tune::detail {

// Rounds of candidates along the allocation hull, the KL model's correction and (decode
// goal) the cost model refitted after each, until the budget or the proposals run out.
void Tuner::search_rounds(const std::vector<TensorSensitivity>& table, TuneResult& r) {
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
        say(cat("round ", round + 1, ": ", pending.size(), " candidates (KL model x", factor, ")"));
        measure(pending);
        factor = refit(factor);
        refit_cost();
    }
}

// A round's new candidates: for each target (a multiple of the limit), the hull's fewest
// bytes whose corrected KL is within it; the first round also spreads points over the
// hull's costs, so the front has a shape even when every allocation is within the limit.
std::vector<Point> Tuner::round_candidates(const std::vector<TensorSensitivity>& table,
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
            const double target = hull.back().cost + share * (hull.front().cost - hull.back().cost);
            const Allocation* best = &hull.front();
            for (const Allocation& a : hull)
                if (a.cost >= target) best = &a;
            add(*best);
        }
    return pending;
}

// The importance matrix of the input on the calibration text, kept in the tune's directory
// (beside the plan, so `quantize --plan` can rebuild the chosen file) and read back by a
// resumed tune: on L1B it is minutes of forward passes.
void Tuner::load_or_collect_imatrix() {
    const fs::path path = fs::path(o_.out_dir) / "imatrix.gguf";
    const fs::path key_path = fs::path(o_.out_dir) / "imatrix.key.json";
    const nlohmann::json key = input_key();
    if (fs::exists(path) && fs::exists(key_path)) {
        try {
            if (nlohmann::json::parse(read_whole_file(key_path.string())) == key) {
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

std::vector<TensorSensitivity> Tuner::sensitivity() {
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
            const nlohmann::json j = nlohmann::json::parse(read_whole_file(path.string()));
            if (j.at("key") == key) {
                std::vector<TensorSensitivity> table;
                for (const auto& t : j.at("tensors")) {
                    TensorSensitivity s;
                    s.name = t.at("name");
                    for (const auto& o : t.at("options")) {
                        const auto type = dtype_from_name(o.at("type").get<std::string>());
                        SYSLM_CHECK(type, "unknown type ", o.at("type"));
                        TypeCost c{*type, o.at("bytes").get<uint64_t>(), o.at("kl").get<double>()};
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
        say(cat("sensitivity: proxy mode (", matrix_weights_ / 1e6,
                "M weights in matrices): "
                "one type per tensor run, the others scaled by importance-weighted error"));
    const auto t0 = Clock::now();
    so.progress = [&](size_t done, size_t total) {
        if (!o_.log || (done % 16 != 0 && done != total)) return;
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        *o_.log << "tune: sensitivity " << done << "/" << total << " (" << static_cast<int>(s)
                << " s, ETA " << static_cast<int>(s / done * (total - done)) << " s)" << std::endl;
    };
    const std::vector<TensorSensitivity> table = measure_sensitivity(o_.model, calib_tokens_, so);
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

Point Tuner::tuned_point(const std::vector<TensorSensitivity>& table, const Allocation& a,
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

// Copies of the model halves of the n best points within the limit so far (goal value; the
// fastest, or the smallest for the size goal), unpruned, at the tune's threads. For the
// decode goal "fastest" is the fitted cost model's prediction where it has one: it averages
// every file timed, where one timing of one file swings by a fifth on a shared machine (a
// README-model tune gave its pruned base the stock Q4_0 and Q8_0 plans over a faster mix
// that one slow timing had put third).
std::vector<Point> Tuner::best_plans_within_limit(size_t n) const {
    return best_plans_within_limit(n, o_.max_kl);
}

std::vector<Point> Tuner::best_plans_within_limit(size_t n, double max_kl) const {
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

}  // namespace syslm::tune::detail
