// The engine's figures as Prometheus text (/metrics) and as JSON (/stats, for the chat page).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "infer/engine.hpp"

namespace syslm::serve {

std::string prometheus_text(const infer::EngineStats& s);
nlohmann::json stats_json(const infer::EngineStats& s);

}  // namespace syslm::serve
