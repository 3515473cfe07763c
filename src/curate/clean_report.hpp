// `data clean --report`: one self-contained HTML page (no scripts, no network) with what each
// step removed and why, a bar chart of the removals, the largest near-duplicate clusters, and
// examples of removed documents beside the document they duplicate.
#pragma once

#include "curate/clean.hpp"

namespace syslm::curate {

void write_report(const CleanOptions& o, const CleanReport& r);

}  // namespace syslm::curate
