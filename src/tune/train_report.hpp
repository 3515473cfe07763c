// The training goal's report page (`syslm tune train` writes it as report.html): every trial as a
// point of tokens/s against peak memory, coloured by whether it counts (fits the limit, same loss
// curve), with the memory limit, the command's settings and the tuned ones marked and each
// trial's settings on hover; the trial table below it. SVG drawn by the project, no scripts.
#pragma once

#include <string>
#include <vector>

#include "tune/train_search.hpp"

namespace syslm::tune {

std::string train_report_html(const TrainSearchResult& r, const TrainSearchOptions& o,
                              const std::vector<std::string>& command);

}  // namespace syslm::tune
