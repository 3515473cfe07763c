// `data mix --report`: one self-contained HTML page (no scripts, no network) with the strata
// (tokens, levels, weights, repeats), the weights beside the natural and uniform mixtures, and,
// after a search, its proxy runs, the fit (R^2, leave-one-out error, predicted against measured
// loss as a scatter) and the predicted losses of the choice, the uniform and the natural mixture.
#pragma once

#include <string>

#include "curate/mixture.hpp"

namespace syslm::curate {

void write_mixture_report(const MixOptions& o, const MixResult& r, const std::string& path);

}  // namespace syslm::curate
