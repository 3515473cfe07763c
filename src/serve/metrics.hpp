// The engine's figures as Prometheus text (/metrics) and as JSON (/stats, for the chat page);
// the HTTP transport's connections and refusals as Prometheus text.
#pragma once

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "infer/generator.hpp"
#include "serve/http_transport.hpp"

namespace syslm::serve {

// One metric of Prometheus text: HELP, TYPE and the value of syslm_<name>.
void prometheus_metric(std::ostringstream& o, const char* name, const char* type, const char* help,
                       double value);
std::string prometheus_text(const infer::EngineStats& s);
nlohmann::ordered_json stats_json(const infer::EngineStats& s);
std::string prometheus_http_text(const http::TransportStats& s);

}  // namespace syslm::serve
