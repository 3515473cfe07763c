#include "serve/metrics.hpp"

#include <iterator>
#include <sstream>

namespace syslm::serve {

namespace {

void histogram(std::ostringstream& o, const char* name, const char* help,
               const infer::LatencyHistogram& h) {
    o << "# HELP syslm_" << name << " " << help << "\n# TYPE syslm_" << name << " histogram\n";
    for (size_t i = 0; i < std::size(infer::LatencyHistogram::kBounds); ++i)
        o << "syslm_" << name << "_bucket{le=\"" << infer::LatencyHistogram::kBounds[i] << "\"} "
          << h.buckets[i] << "\n";
    o << "syslm_" << name << "_bucket{le=\"+Inf\"} " << h.count << "\n";
    o << "syslm_" << name << "_sum " << h.sum << "\nsyslm_" << name << "_count " << h.count << "\n";
}

}  // namespace

void prometheus_metric(std::ostringstream& o, const char* name, const char* type, const char* help,
                       double value) {
    o << "# HELP syslm_" << name << " " << help << "\n# TYPE syslm_" << name << " " << type
      << "\nsyslm_" << name << " " << value << "\n";
}

std::string prometheus_text(const infer::EngineStats& s) {
    std::ostringstream o;
    prometheus_metric(o, "requests_running", "gauge", "Requests in the running batch", s.running);
    prometheus_metric(o, "requests_waiting", "gauge", "Requests waiting for a slot or KV pages",
                      s.waiting);
    prometheus_metric(o, "requests_total", "counter", "Requests accepted",
                      static_cast<double>(s.requests));
    prometheus_metric(o, "prompt_tokens_total", "counter", "Prompt tokens accepted",
                      static_cast<double>(s.prompt_tokens));
    prometheus_metric(o, "generation_tokens_total", "counter", "Tokens generated",
                      static_cast<double>(s.generated_tokens));
    prometheus_metric(o, "kv_pages_used", "gauge", "KV pages held by sequences", s.kv_pages_used);
    prometheus_metric(o, "kv_pages_cached", "gauge", "Free KV pages still holding a cached prefix",
                      s.kv_pages_cached);
    prometheus_metric(o, "kv_pages_total", "gauge", "KV pages in the pool", s.kv_pages_total);
    prometheus_metric(o, "kv_bytes_used", "gauge", "Bytes of the KV pages held by sequences",
                      static_cast<double>(s.kv_bytes_used));
    prometheus_metric(o, "kv_bytes_total", "gauge", "Bytes of the KV pool (every page group)",
                      static_cast<double>(s.kv_bytes_total));
    prometheus_metric(o, "kv_positions_used", "gauge", "Positions held by running sequences",
                      static_cast<double>(s.kv_positions));
    prometheus_metric(o, "prefix_cache_hit_tokens_total", "counter",
                      "Prompt tokens served from cached prefix pages",
                      static_cast<double>(s.prefix_hit_tokens));
    const infer::PrefixLookups& pl = s.prefix_pages;
    const auto rate = [&](int64_t hits) {
        return pl.pages > 0 ? static_cast<double>(hits) / static_cast<double>(pl.pages) : 0.0;
    };
    prometheus_metric(o, "prefix_cache_pages_looked_up_total", "counter",
                      "Whole prompt pages looked up in the prefix cache",
                      static_cast<double>(pl.pages));
    prometheus_metric(o, "prefix_cache_pool_hit_rate", "gauge",
                      "Share of looked-up pages found in the KV pool", rate(pl.pool));
    prometheus_metric(o, "prefix_cache_ram_hit_rate", "gauge",
                      "Share of looked-up pages brought back from the RAM tier", rate(pl.ram));
    prometheus_metric(o, "prefix_cache_disk_hit_rate", "gauge",
                      "Share of looked-up pages brought back from the disk tier", rate(pl.disk));
    prometheus_metric(o, "prefix_cache_ram_bytes", "gauge",
                      "Bytes of evicted prefix pages kept in RAM",
                      static_cast<double>(s.prefix_tiers.ram_bytes));
    prometheus_metric(o, "prefix_cache_disk_bytes", "gauge",
                      "Bytes of evicted prefix pages kept on disk",
                      static_cast<double>(s.prefix_tiers.disk_bytes));
    prometheus_metric(o, "grammar_masks_total", "counter",
                      "Token masks applied for constrained output (grammar, JSON mode)",
                      static_cast<double>(s.grammar_masks));
    prometheus_metric(o, "grammar_mask_cache_hits_total", "counter",
                      "Token masks found in the cache by grammar state",
                      static_cast<double>(s.grammar_mask_cache_hits));
    prometheus_metric(o, "grammar_mask_seconds_total", "counter",
                      "Time spent making and applying token masks", s.grammar_mask_seconds);
    prometheus_metric(o, "preemptions_total", "counter",
                      "Sequences preempted for KV pages (recomputed)",
                      static_cast<double>(s.preemptions));
    prometheus_metric(o, "engine_steps_total", "counter", "Batched forward steps",
                      static_cast<double>(s.steps));
    prometheus_metric(o, "generation_tokens_per_second", "gauge",
                      "Generated tokens/s over the last seconds", s.tokens_per_s);
    histogram(o, "time_to_first_token_seconds", "Time from request to its first token", s.ttft);
    histogram(o, "inter_token_latency_seconds", "Time between a request's tokens", s.itl);
    return o.str();
}

std::string prometheus_http_text(const http::TransportStats& s) {
    std::ostringstream o;
    prometheus_metric(o, "http_connections", "gauge", "Open HTTP connections", s.connections);
    prometheus_metric(o, "http_connections_total", "counter", "HTTP connections accepted",
                      static_cast<double>(s.connections_total));
    prometheus_metric(o, "http_connections_refused_total", "counter",
                      "Connections refused with 503: over the connection limit",
                      static_cast<double>(s.connections_refused));
    prometheus_metric(o, "http_requests_total", "counter", "Complete HTTP requests routed",
                      static_cast<double>(s.requests));
    prometheus_metric(o, "http_busy_refused_total", "counter",
                      "Requests refused with 503: every HTTP worker busy",
                      static_cast<double>(s.busy_refused));
    prometheus_metric(o, "http_malformed_total", "counter",
                      "Requests refused by the parser (400, 413, 414, 417, 431, 501, 505)",
                      static_cast<double>(s.malformed));
    prometheus_metric(o, "http_request_timeouts_total", "counter",
                      "Requests not received whole within the request timeout (408)",
                      static_cast<double>(s.timeouts));
    prometheus_metric(
        o, "http_write_timeouts_total", "counter",
        "Connections dropped: the client accepted none of its answer within the write timeout",
        static_cast<double>(s.write_timeouts));
    return o.str();
}

nlohmann::ordered_json stats_json(const infer::EngineStats& s) {
    return {{"running", s.running},
            {"waiting", s.waiting},
            {"kv_pages_used", s.kv_pages_used},
            {"kv_pages_cached", s.kv_pages_cached},
            {"kv_pages_total", s.kv_pages_total},
            {"kv_bytes_used", s.kv_bytes_used},
            {"kv_bytes_total", s.kv_bytes_total},
            {"kv_positions_used", s.kv_positions},
            {"requests", s.requests},
            {"generated_tokens", s.generated_tokens},
            {"tokens_per_s", s.tokens_per_s},
            {"preemptions", s.preemptions},
            {"prefix_hit_tokens", s.prefix_hit_tokens},
            {"prefix_pages_looked_up", s.prefix_pages.pages},
            {"prefix_pages_from_pool", s.prefix_pages.pool},
            {"prefix_pages_from_ram", s.prefix_pages.ram},
            {"prefix_pages_from_disk", s.prefix_pages.disk},
            {"prefix_tier_ram_bytes", s.prefix_tiers.ram_bytes},
            {"prefix_tier_disk_bytes", s.prefix_tiers.disk_bytes},
            {"prefix_tier_bad_files", s.prefix_tiers.bad_files}};
}

}  // namespace syslm::serve
