#include "train/strata_batches.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace syslm::train {

std::vector<StratumInfo> read_strata(const std::string& mix_dir) {
    const std::string path = (std::filesystem::path(mix_dir) / "mixture.json").string();
    std::ifstream in(path);
    SYSLM_CHECK(in, path, ": cannot open it (strata need a `syslm data mix` directory)");
    std::vector<StratumInfo> strata;
    try {
        const nlohmann::json j = nlohmann::json::parse(in);
        for (const nlohmann::json& s : j.at("strata")) {
            StratumInfo st;
            st.name = s.at("name").get<std::string>();
            st.source = s.at("source").get<std::string>();
            st.level = s.at("level").get<std::string>();
            st.level_index = s.at("level_index").get<int>();
            st.weight = s.at("weight").get<double>();
            st.dir = (std::filesystem::path(mix_dir) / s.at("dir").get<std::string>()).string();
            SYSLM_CHECK(st.weight >= 0 && st.level_index >= 0, path, ": stratum '", st.name,
                        "' has a negative weight or level");
            strata.push_back(st);
        }
    } catch (const nlohmann::json::exception& e) {
        fail(path, ": not a mixture.json of `syslm data mix`: ", e.what());
    }
    SYSLM_CHECK(!strata.empty(), path, ": no strata");
    return strata;
}

int difficulty_levels(const std::vector<StratumInfo>& strata) {
    int k = 0;
    for (const StratumInfo& s : strata) k = std::max(k, s.level_index + 1);
    return k;
}

StrataBatches::StrataBatches(const std::string& mix_dir, const StrataOptions& opt)
    : strata_(read_strata(mix_dir)), opt_(opt), levels_(difficulty_levels(strata_)) {
    SYSLM_CHECK(opt.calls_per_step >= 1, "strata: micro-batches per step must be positive");
    SYSLM_CHECK(!opt.curriculum || levels_ > 1, mix_dir,
                ": a curriculum needs difficulty levels (data mix --strata difficulty:K)");
    for (size_t i = 0; i < strata_.size(); ++i)
        sources_.push_back(std::make_unique<ShardBatches>(strata_[i].dir, opt.seed + i, opt.n_vocab,
                                                          opt.B, opt.T));
}

StrataBatches::~StrataBatches() = default;

int StrataBatches::stratum_at(int64_t step) const {
    // The curriculum's phase: levels above it are not drawn yet.
    int max_level = levels_ - 1;
    if (opt_.curriculum && opt_.total_steps > 0)
        max_level = static_cast<int>(std::min<int64_t>(
            levels_ - 1, step * levels_ / std::max<int64_t>(opt_.total_steps, 1)));
    double total = 0;
    for (const StratumInfo& s : strata_)
        if (s.level_index <= max_level) total += s.weight;
    uint64_t x = opt_.seed ^ (static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;  // splitmix64's finaliser
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    const double u = static_cast<double>(x >> 11) * 0x1.0p-53 * total;  // [0, total)
    double acc = 0;
    int last = -1;
    for (size_t i = 0; i < strata_.size(); ++i) {
        if (strata_[i].level_index > max_level) continue;
        last = static_cast<int>(i);
        acc += strata_[i].weight;
        if (u < acc) return last;
    }
    return last;  // u rounding to total
}

void StrataBatches::next(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
    if (calls_ % opt_.calls_per_step == 0) current_ = stratum_at(calls_ / opt_.calls_per_step);
    ++calls_;
    sources_[static_cast<size_t>(current_)]->next(tokens, targets);
}

// "strata CALLS | <position of stratum 0> | <position of stratum 1> ..."
std::string StrataBatches::position() const {
    std::string p = "strata " + std::to_string(calls_);
    for (const auto& s : sources_) p.append(" | ").append(s->position());
    return p;
}

void StrataBatches::seek(const std::string& position) {
    std::vector<std::string> parts;
    for (size_t at = 0;;) {
        const size_t bar = position.find(" | ", at);
        parts.push_back(position.substr(at, bar == std::string::npos ? bar : bar - at));
        if (bar == std::string::npos) break;
        at = bar + 3;
    }
    SYSLM_CHECK(parts.size() == sources_.size() + 1 && parts[0].rfind("strata ", 0) == 0,
                "checkpoint: the data position is not that of these ", sources_.size(), " strata");
    std::istringstream in(parts[0].substr(7));
    int64_t calls = -1;
    in >> calls;
    SYSLM_CHECK(in && calls >= 0, "checkpoint: a bad strata position '", parts[0], "'");
    for (size_t i = 0; i < sources_.size(); ++i) sources_[i]->seek(parts[i + 1]);
    calls_ = calls;
    current_ = calls_ > 0 ? stratum_at((calls_ - 1) / opt_.calls_per_step) : -1;
}

double StrataBatches::waited_s() const {
    double w = 0;
    for (const auto& s : sources_) w += s->waited_s();
    return w;
}

}  // namespace syslm::train
