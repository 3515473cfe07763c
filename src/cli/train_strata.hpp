// `syslm train --stratum-lr / --curriculum` on a `data mix` directory (train/strata_batches.hpp):
// the batch source, the learning-rate scales and the per-stratum evaluation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/strata_batches.hpp"

namespace syslm::cli::train_cmd {

struct TrainArgs;

bool uses_strata(const TrainArgs& a);

std::unique_ptr<train::StrataBatches> open_strata(const TrainArgs& a, int n_vocab, int batch,
                                                  int accum);

// One scale per stratum from "NAME=SCALE,...": NAME a stratum's name, its level or its source;
// a stratum no NAME matches keeps 1. Throws Error for a NAME that matches no stratum.
std::vector<float> stratum_lr_scales(const std::string& spec,
                                     const std::vector<train::StratumInfo>& strata);

// Each stratum's val loss as {"val_loss_<name>": loss}; null for a val split shorter than one
// batch.
nlohmann::json evaluate_strata(train::TrainModel& model,
                               const std::vector<train::StratumInfo>& strata, int batch, int seq,
                               int max_batches, backend::Backend& be);

}  // namespace syslm::cli::train_cmd
