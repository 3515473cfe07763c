#include "cli/train_strata.hpp"

#include <cmath>
#include <cstdlib>

#include "cli/train_args.hpp"
#include "core/error.hpp"
#include "data/shards.hpp"

namespace syslm::cli::train_cmd {

bool uses_strata(const TrainArgs& a) {
    return !a.stratum_lr.empty() || !a.curriculum.empty();
}

std::unique_ptr<train::StrataBatches> open_strata(const TrainArgs& a, int n_vocab, int batch,
                                                  int accum) {
    SYSLM_CHECK(!a.data.empty(),
                "train: --stratum-lr and --curriculum need --data (a `syslm "
                "data mix` directory)");
    train::StrataOptions o;
    o.seed = a.seed;
    o.n_vocab = n_vocab;
    o.B = batch;
    o.T = a.seq;
    o.calls_per_step = accum;
    o.total_steps = a.steps;
    o.curriculum = a.curriculum == "easy-to-hard";
    return std::make_unique<train::StrataBatches>(a.data, o);
}

std::vector<float> stratum_lr_scales(const std::string& spec,
                                     const std::vector<train::StratumInfo>& strata) {
    std::vector<float> scales(strata.size(), 1.0f);
    if (spec.empty()) return scales;
    for (size_t at = 0; at <= spec.size();) {
        const size_t comma = std::min(spec.find(',', at), spec.size());
        const std::string item = spec.substr(at, comma - at);
        at = comma + 1;
        const size_t eq = item.find('=');
        SYSLM_CHECK(eq != std::string::npos && eq > 0, "--stratum-lr '", item,
                    "': expected NAME=SCALE");
        const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
        char* end = nullptr;
        const double scale = std::strtod(value.c_str(), &end);
        SYSLM_CHECK(!value.empty() && end == value.c_str() + value.size() && std::isfinite(scale) &&
                        scale >= 0,
                    "--stratum-lr '", item, "': the scale is not a number >= 0");
        bool matched = false;
        std::string names;
        for (size_t i = 0; i < strata.size(); ++i) {
            const train::StratumInfo& s = strata[i];
            names.append(names.empty() ? "" : ", ").append(s.name);
            if (s.name == name || s.level == name || s.source == name) {
                scales[i] = static_cast<float>(scale);
                matched = true;
            }
        }
        SYSLM_CHECK(matched, "--stratum-lr: '", name, "' names no stratum, level or source (",
                    names, ")");
    }
    return scales;
}

nlohmann::json evaluate_strata(train::TrainModel& model,
                               const std::vector<train::StratumInfo>& strata, int batch, int seq,
                               int max_batches, backend::Backend& be) {
    nlohmann::json out = nlohmann::json::object();
    for (const train::StratumInfo& s : strata) {
        // A val split shorter than one batch (a small stratum) has no loss to report: null.
        const uint64_t need = static_cast<uint64_t>(batch) * static_cast<uint64_t>(seq) + 1;
        const data::DataMeta m = data::read_meta(s.dir);
        out["val_loss_" + s.name] =
            m.val_tokens >= need
                ? nlohmann::json(train::evaluate(model, s.dir, batch, seq, max_batches, be))
                : nlohmann::json(nullptr);
    }
    return out;
}

}  // namespace syslm::cli::train_cmd
