// The structure knob of `syslm tune`: pruned, recovered float bases that the tuner quantizes like
// the input. A base is the input with whole FFN channels / heads / layers removed
// (compress::prune_structured, scored on the calibration text), then distilled from the input on
// that text for a few hundred steps (`syslm train --teacher`, a child process, so its memory is
// its own). Bases are kept in the tune's directory, so a resumed tune builds each once.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "model/hparams.hpp"
#include "tune/plan.hpp"

namespace syslm::compress {
class ImportanceMatrix;
}

namespace syslm::tune {

struct StructureOptions {
    std::string model, calib, work_dir;  // bases go to work_dir
    const compress::ImportanceMatrix* imatrix = nullptr;  // the input's, for the channel scores
    std::vector<int32_t> calib_tokens;  // for the layer choice
    int32_t calib_bos = -1;
    int n_ctx = 256, threads = 0;
    std::ostream* log = nullptr;
};

// The pruning levels tried by default: FFN channels only (on the models measured so far heads
// and layers cost several times the KL for the same weights, docs/design/tune.md), keeping
// between half and 90% of them, rounded to multiples of 256 where the width allows (the
// K-quants and the grouped Q4_0/Q8_0 decode kernels need rows of 256), else of 64; the widest
// first, at most `max_levels`.
std::vector<PruneSettings> default_prune_levels(const model::HParams& hp, int recover_steps,
                                                int max_levels = 2);

// A level given as "ffn=F,heads=F,layers=N" (compress::parse_structured_spec).
PruneSettings parse_prune_level(const std::string& spec, int recover_steps);

// The recovery steps when the user gives none: 400 (README model: KL 0.008 after 200 steps,
// lower after 400), at most four passes over the calibration text (calib_tokens) so that a short
// text is not learnt by heart, and at least 50.
int default_recover_steps(const model::HParams& hp, int n_ctx, size_t calib_tokens);

// Tokens of the recovery run: steps x 8 sequences of recovery_seq(n_ctx) + 1.
int recovery_seq(const model::HParams& hp, int n_ctx);

// Seconds the recovery of `level` is predicted to take at `fp32_gflops` (the probe's FMA peak
// for the threads used): training FLOPs (3x the forward's) plus the teacher's forward, at a
// quarter of the peak. Used to skip levels that do not fit the budget.
double predicted_recovery_s(const model::HParams& hp, double forward_flops_per_token,
                            const PruneSettings& level, int n_ctx, double fp32_gflops);

struct PrunedBase {
    std::string path;
    PruneSettings level;  // with the shape the base has (n_layer, n_head, n_ff)
    double seconds = 0;   // spent building it now (0: it was there)
};

// The recovered base of `level`: built (pruned, distilled) unless work_dir already holds it.
// Throws Error naming the step and its log file when pruning or the recovery run fails.
PrunedBase pruned_base(const PruneSettings& level, const StructureOptions& o);

}  // namespace syslm::tune
