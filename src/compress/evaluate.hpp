// `syslm eval`: the measured trade-off of model files — size, quality and speed side by side.
// For every model and held-out text: perplexity (llama-perplexity's method: chunks of n_ctx
// tokens starting with BOS, the second half of each chunk scored), the KL divergence of its
// next-token distribution from the reference model's (the first one) and how often their top-1
// tokens agree, both over the same scored positions; then prefill and decode tokens/s with
// llama-bench's method (profile/bench_runner.hpp). The models run over each chunk in lockstep,
// so only the reference's log-probabilities of one chunk are held. Speed repetitions go
// round-robin over the models, so that a slow stretch of a shared machine hits them alike.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace syslm::compress {

struct EvalOptions {
    int n_ctx = 512;         // tokens per chunk
    int max_chunks = -1;     // per text, counted from its start; < 0: all
    int first_chunk = 0;     // the first of them scored (successive halving's later rungs)
    int threads = 0;         // <= 0: all cores
    int speed_prompt = 128;  // pp test tokens; 0: no speed test
    int speed_gen = 32;      // tg test tokens; 0: no decode test
    int speed_reps = 3;
    int speed_depth = 0;  // positions cached before each speed test (llama-bench -d)
    // KV cache types (model::KvTypes::name(): "f16", "q8_0", "q8_0/q4_0" for K then V): every
    // model is evaluated with each, the reference being the first model with the first type.
    // Empty: f16 alone.
    std::vector<std::string> cache_types;
    // The cascade curve of every model against the reference (an edge model against its cloud):
    // see CascadePoint.
    bool cascade = false;
    // A model split between an edge and a cloud (docs/design/edge_cloud.md): with split_at >= 0
    // every entry is also run split at that layer, its residual rows rounded as each wire format
    // carries them ("f16", "int8", "f32"), beside itself unsplit; their KL against the reference
    // is what the link's format costs. Speed is not measured for them (it is the link's).
    int split_at = -1;
    std::vector<std::string> wires;
    // The split's first half from this file instead (an edge's compressed copy of the model,
    // same shape and vocabulary); empty: the model itself.
    std::string split_edge;
    std::ostream* log = nullptr;
};

// One point of a cascade's curve (docs/design/edge_cloud.md): the model answers where its
// confidence (its top token's probability) is at least `threshold` and defers the rest, the
// least confident `share` of the scored positions, to the reference, whose answer then counts as
// agreeing with itself (KL 0). Beside it, deferring the same share at random.
struct CascadePoint {
    double share = 0;      // of the positions deferred
    double threshold = 0;  // defer where confidence < threshold (ties may defer more or fewer)
    double agreement = 0;  // top-1 agreement with the reference over all positions
    double kl = 0;         // mean KL(reference || answer) over all positions
    double random_agreement = 0, random_kl = 0;  // the same share deferred at random (expected)
};

struct TextEval {
    int n_scored = 0;
    double ppl = 0, ppl_stderr = 0;
    double kl = 0, kl_stderr = 0;       // mean KL(reference || model), nats per token
    double top1 = 0;                    // fraction of positions whose argmax equals the reference's
    std::vector<CascadePoint> cascade;  // with EvalOptions::cascade, non-reference models: shares
                                        // 0, 0.1, ..., 1
};

struct ModelEval {
    std::string path;
    std::string cache_type = "f16";    // its KV cache's types (EvalOptions::cache_types)
    std::string split;                 // "" or, split (EvalOptions::split_at), "L/wire"
    double kv_bytes_per_position = 0;  // K and V of one position, every layer, in those types
    uint64_t file_bytes = 0;
    uint64_t tensor_bytes = 0;
    int64_t n_params = 0;
    double bits_per_weight = 0;  // 8 * tensor bytes / parameters
    std::string types;           // tensor types by share of bytes, e.g. "Q4_K 71%, Q6_K 25%"
    std::vector<TextEval> texts;
    double prefill_ts = 0, prefill_ts_stddev = 0;  // mean and sample deviation, as llama-bench
    double decode_ts = 0, decode_ts_stddev = 0;
    std::vector<double> prefill_samples, decode_samples;  // tokens/s of each repetition
};

struct EvalReport {
    std::vector<std::string> texts;  // paths
    std::vector<int64_t> text_tokens;
    int n_ctx = 0;
    int threads = 0;
    std::vector<ModelEval> models;  // models[0] is the reference; each model x cache type
    bool cache_types = false;       // several cache types, or one that is not f16: label them
};

// The figures of two disjoint sets of scored tokens of one text, as if measured together
// (weighted by their scored tokens; the standard errors combined as independent).
TextEval merge(const TextEval& a, const TextEval& b);

// Throws an Error naming the file if a model cannot be read, the vocabularies differ, or a text
// is shorter than one chunk.
EvalReport evaluate(const std::vector<std::string>& models, const std::vector<std::string>& texts,
                    const EvalOptions& options);

// A row's model: its file name, with its KV cache types when the report compares them.
std::string eval_label(const EvalReport& r, const ModelEval& m);
// A Markdown table: one row per model and text.
std::string eval_markdown(const EvalReport& r);
// The report as JSON (numbers as measured).
std::string eval_json(const EvalReport& r);
// A self-contained HTML page (inline CSS and SVG, no scripts, no network): the table and two
// charts per text, quality (perplexity) against size and against decode speed.
std::string eval_html(const EvalReport& r);

}  // namespace syslm::compress
