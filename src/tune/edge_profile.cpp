#include "tune/edge_profile.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>

#include "compress/evaluate.hpp"
#include "compress/quantize_model.hpp"
#include "core/error.hpp"
#include "infer/wire_rows.hpp"
#include "model/transformer.hpp"
#include "train/batch_plan.hpp"
#include "tune/plan.hpp"

namespace syslm::tune {

namespace fs = std::filesystem;

namespace {

// The model's layer a tensor belongs to ("blk.3.attn_q.weight" -> 3), -1 for the others.
int layer_of(const std::string& name) {
    if (!name.starts_with("blk.")) return -1;
    return std::atoi(name.c_str() + 4);
}

// Bytes a token reads at the edge (the embedding row and layers [0, L)) and at the cloud
// (layers [L, n) and the head), from a file's tensors.
struct SideBytes {
    uint64_t edge_weights = 0;  // whole tensors the edge holds: embedding and its layers
    double edge_per_token = 0, cloud_per_token = 0;
};
SideBytes side_bytes(const io::GGUFFile& f, int split_at, int64_t n_vocab) {
    SideBytes b;
    for (const io::GGUFTensor& t : f.tensors()) {
        const int layer = layer_of(t.name);
        const bool embedding =
            t.name.starts_with("token_embd") || t.name.starts_with("position_embd");
        if (embedding || (layer >= 0 && layer < split_at)) b.edge_weights += t.nbytes;
        if (embedding)
            b.edge_per_token += static_cast<double>(t.nbytes) / static_cast<double>(n_vocab);
        else if (layer >= 0 && layer < split_at)
            b.edge_per_token += static_cast<double>(t.nbytes);
        else
            b.cloud_per_token += static_cast<double>(t.nbytes);  // its layers, norm and output
    }
    // A tied output reads the embedding matrix whole at the cloud.
    if (!f.find_tensor("output.weight"))
        for (const io::GGUFTensor& t : f.tensors())
            if (t.name == "token_embd.weight") b.cloud_per_token += static_cast<double>(t.nbytes);
    return b;
}

// The edge's memory besides its weights: its context's KV cache (every layer, as Context
// allocates it) and working buffers for a batch of 512 rows (the activations of the widest
// layer, the residual out, the logits row), from the shapes.
uint64_t edge_buffers(const model::HParams& hp, int n_ctx) {
    const uint64_t kv = static_cast<uint64_t>(hp.n_layer) * n_ctx * hp.kv_dim() * 2 * 2;
    const uint64_t rows = 512;
    const uint64_t act = rows * (6 * static_cast<uint64_t>(hp.n_embd) + 3 * hp.n_ff) * 4;
    return kv + act + static_cast<uint64_t>(hp.n_vocab) * 4;
}

// The edge's time for its layers, per token, on `cores` threads: a 32-token prompt, then 32
// tokens one at a time; the median.
double edge_ms_per_token(const std::string& file, int split_at, int cores) {
    const model::Model m(file);
    model::Context ctx(m, 128, cores);
    std::vector<int32_t> tokens(64);
    for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = static_cast<int32_t>((i * 2654435761u) % m.hparams().n_vocab);
    ctx.residual_until(split_at, std::span<const int32_t>(tokens).first(32));
    std::vector<double> ms;
    for (size_t i = 32; i < tokens.size(); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        ctx.residual_until(split_at, std::span<const int32_t>(tokens).subspan(i, 1));
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
    }
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    return ms[ms.size() / 2];
}

// A split call's bodies, as the link simulator counts them: the header line and the row up,
// the answer down (syslm's own JSON; representative ids and positions).
double wire_bytes_per_token(infer::WireType wire, int64_t n_embd) {
    const double header = 96, answer = 56;
    return header + static_cast<double>(infer::wire_bytes(wire, 1, n_embd)) + answer;
}

std::string cat_path(const fs::path& dir, const std::string& name) {
    return (dir / name).string();
}

}  // namespace

DeviceProfile parse_device(std::string_view spec) {
    const size_t comma = spec.find(',');
    SYSLM_CHECK(comma != std::string_view::npos, "--device '", std::string(spec),
                "': expected MEMORY,CORES such as 2GB,2cores");
    DeviceProfile d;
    try {
        d.memory_bytes = train::parse_memory_size(std::string(spec.substr(0, comma)));
    } catch (const Error& e) {
        fail("--device '", std::string(spec), "': ", e.what());
    }
    const std::string_view cores = spec.substr(comma + 1);
    const size_t digits = cores.find_first_not_of("0123456789");
    const std::string_view unit = digits == std::string_view::npos ? "" : cores.substr(digits);
    SYSLM_CHECK(digits > 0 && (unit == "cores" || unit == "core" || unit.empty()), "--device '",
                std::string(spec), "': cores as 2cores");
    d.cores = std::stoi(std::string(cores.substr(0, digits)));
    SYSLM_CHECK(d.memory_bytes > 0 && d.cores > 0, "--device '", std::string(spec),
                "': memory and cores must be positive");
    return d;
}

namespace {

// The points of one edge file (the input in one type): every split point and wire format.
void measure_type(const EdgeTuneOptions& o, const std::string& type, const std::string& file,
                  const io::GGUFFile& input, const model::HParams& hp, int cores,
                  EdgeTuneResult& r) {
    const io::GGUFFile edge_file(file);
    const SideBytes whole = side_bytes(input, hp.n_layer, hp.n_vocab);
    const double total = whole.edge_per_token + whole.cloud_per_token;
    for (int L = 1; L <= hp.n_layer; ++L) {
        compress::EvalOptions e;
        e.n_ctx = o.eval_ctx;
        e.max_chunks = o.eval_chunks;
        e.threads = o.threads;
        e.speed_prompt = e.speed_gen = 0;
        e.split_at = L;
        e.wires = o.wires;
        e.split_edge = file;
        const compress::EvalReport er = compress::evaluate({o.model}, {o.eval}, e);
        const SideBytes sb = side_bytes(edge_file, L, hp.n_vocab);
        const double ms = edge_ms_per_token(file, L, cores);
        for (size_t w = 0; w < o.wires.size(); ++w) {
            EdgePoint p;
            p.split_at = L;
            p.type = type;
            p.wire = o.wires[w];
            p.weight_bytes = sb.edge_weights;
            p.memory_bytes = sb.edge_weights + edge_buffers(hp, o.n_ctx);
            p.kl = er.models[w + 1].texts[0].kl;
            p.top1 = er.models[w + 1].texts[0].top1;
            p.edge_ms = ms;
            p.wire_bytes = wire_bytes_per_token(infer::wire_type(p.wire), hp.n_embd);
            p.link_ms =
                1e3 * (o.link_rtt_s +
                       (o.link_bits_per_s > 0 ? 8 * p.wire_bytes / o.link_bits_per_s : 0.0));
            p.cloud_share = side_bytes(input, L, hp.n_vocab).cloud_per_token / total;
            p.fits = p.memory_bytes <= o.device.memory_bytes;
            p.within_kl = p.kl <= o.max_kl;
            p.fast_enough = o.max_edge_ms <= 0 || p.edge_ms <= o.max_edge_ms;
            r.points.push_back(p);
        }
        if (o.log)
            *o.log << "tune edge: " << type << " split at " << L << " measured\n" << std::flush;
    }
}

// The most layers at the edge, then the fewest bytes on the wire, the least KL, memory.
std::optional<size_t> choose(const std::vector<EdgePoint>& points) {
    std::optional<size_t> chosen;
    auto key = [](const EdgePoint& p) {
        return std::tuple(-p.split_at, p.wire_bytes, p.kl, p.memory_bytes);
    };
    for (size_t i = 0; i < points.size(); ++i)
        if (points[i].ok() && (!chosen || key(points[i]) < key(points[*chosen]))) chosen = i;
    return chosen;
}

}  // namespace

EdgeTuneResult tune_edge(const EdgeTuneOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    EdgeTuneResult r;
    const io::GGUFFile input(o.model);
    const model::Model base(o.model);
    const model::HParams& hp = base.hparams();
    r.n_layer = hp.n_layer;
    SYSLM_CHECK(hp.n_layer >= 1, o.model, ": no layers to split");
    SYSLM_CHECK(!o.types.empty() && !o.wires.empty(), "tune edge: no types or wires to try");
    const fs::path dir(o.out_dir), cands = dir / "candidates";
    fs::create_directories(cands);
    const int cores =
        std::min<int>(o.device.cores, std::max(1u, std::thread::hardware_concurrency()));
    for (const std::string& type : o.types) {
        const auto target = compress::parse_quant_target(type);
        SYSLM_CHECK(target.has_value(), "tune edge: unknown type '", type, "'");
        const std::string file = cat_path(cands, "edge-" + type + ".gguf");
        if (!fs::exists(file)) {  // a rerun reuses the files of an earlier one
            compress::QuantizeOptions q;
            q.target = *target;
            q.threads = o.threads;
            compress::quantize_model(o.model, file + ".tmp", q);
            fs::rename(file + ".tmp", file);
        }
        measure_type(o, type, file, input, hp, cores, r);
    }
    r.chosen = choose(r.points);
    if (r.chosen) {
        const EdgePoint& c = r.points[*r.chosen];
        fs::copy_file(cat_path(cands, "edge-" + c.type + ".gguf"), dir / "model.gguf.tmp",
                      fs::copy_options::overwrite_existing);
        fs::rename(dir / "model.gguf.tmp", dir / "model.gguf");
        Plan plan;
        plan.recipe = c.type;
        plan.threads = cores;
        plan.edge = EdgeSettings{c.split_at, c.wire};
        save_plan(plan, cat_path(dir, "plan.json"));
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

std::string edge_report_table(const EdgeTuneResult& r, const EdgeTuneOptions& o) {
    std::string s =
        "| split at | edge type | wire | edge MiB | KL | top-1 | edge ms/token | link ms/token | "
        "wire bytes/token | cloud share | within limits |\n| ---: | --- | --- | ---: | ---: | "
        "---: | ---: | ---: | ---: | ---: | --- |\n";
    char buf[512];
    for (size_t i = 0; i < r.points.size(); ++i) {
        const EdgePoint& p = r.points[i];
        std::string why = p.ok() ? "yes" : "";
        if (!p.fits) why += "memory ";
        if (!p.within_kl) why += "KL ";
        if (!p.fast_enough) why += "edge time ";
        if (r.chosen && *r.chosen == i) why += " (chosen)";
        std::snprintf(
            buf, sizeof buf,
            "| %d/%d | %s | %s | %.1f | %.5f | %.1f%% | %.2f | %.2f | %.0f | %.1f%% | %s |\n",
            p.split_at, r.n_layer, p.type.c_str(), p.wire.c_str(),
            static_cast<double>(p.memory_bytes) / (1 << 20), p.kl, 100 * p.top1, p.edge_ms,
            p.link_ms, p.wire_bytes, 100 * p.cloud_share, why.c_str());
        s += buf;
    }
    if (r.chosen) {
        const EdgePoint& c = r.points[*r.chosen];
        std::snprintf(buf, sizeof buf,
                      "chosen: layers [0, %d) at the edge as %s, %s rows: %.1f MiB of %.1f, KL "
                      "%.5f of %.5f, the cloud reads %.1f%% of the bytes a token reads\n"
                      "  cloud: syslm serve -m %s --role cloud --split-at %d\n"
                      "  edge:  syslm serve --role edge --plan %s/plan.json --cloud URL\n",
                      c.split_at, c.type.c_str(), c.wire.c_str(),
                      static_cast<double>(c.memory_bytes) / (1 << 20),
                      static_cast<double>(o.device.memory_bytes) / (1 << 20), c.kl, o.max_kl,
                      100 * c.cloud_share, o.model.c_str(), c.split_at, o.out_dir.c_str());
        s += buf;
    } else {
        s += "no point is within the limits: nothing chosen (a larger device, a looser --max-kl, "
             "or more types)\n";
    }
    return s;
}

std::string edge_report_json(const EdgeTuneResult& r, const EdgeTuneOptions& o) {
    nlohmann::json j = {
        {"model", o.model},
        {"device", {{"memory_bytes", o.device.memory_bytes}, {"cores", o.device.cores}}},
        {"link", {{"rtt_s", o.link_rtt_s}, {"bits_per_s", o.link_bits_per_s}}},
        {"max_kl", o.max_kl},
        {"n_layer", r.n_layer},
        {"seconds", r.seconds},
        {"points", nlohmann::json::array()}};
    for (size_t i = 0; i < r.points.size(); ++i) {
        const EdgePoint& p = r.points[i];
        j["points"].push_back({{"split_at", p.split_at},
                               {"type", p.type},
                               {"wire", p.wire},
                               {"memory_bytes", p.memory_bytes},
                               {"weight_bytes", p.weight_bytes},
                               {"kl", p.kl},
                               {"top1", p.top1},
                               {"edge_ms_per_token", p.edge_ms},
                               {"link_ms_per_token", p.link_ms},
                               {"wire_bytes_per_token", p.wire_bytes},
                               {"cloud_share", p.cloud_share},
                               {"fits", p.fits},
                               {"within_kl", p.within_kl},
                               {"fast_enough", p.fast_enough},
                               {"chosen", r.chosen && *r.chosen == i}});
    }
    return j.dump(1);
}

}  // namespace syslm::tune
