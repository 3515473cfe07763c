// syslm logits: dump the model's next-token logits for given token ids, as a NumPy .npy file.
// The first --prefill ids go through one batched forward (prefill); the rest are fed one at a
// time through the KV cache (decode), exactly as generation does. Used to check the model math
// against a reference (tests/reference/test_model_logits.py) and to debug.
#include <cstdio>

#include "cli/cache_type_options.hpp"
#include "cli/lora_options.hpp"
#include "cli/command.hpp"
#include "cli/token_ids.hpp"
#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "model/transformer.hpp"

namespace syslm::cli {
namespace {

struct LogitsArgs {
    std::string model, ids, out;
    int prefill = -1;
    int threads = 0;
    CacheTypeArgs cache_type;
    LoraArgs lora;
};

void write_npy(const std::string& path, const std::vector<float>& data, size_t rows, size_t cols) {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                         std::to_string(rows) + ", " + std::to_string(cols) + "), }";
    // Magic (6) + version (2) + length (2) + header must be a multiple of 64, ending in '\n'.
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    AtomicFileWriter w(path);
    const char magic[] = "\x93NUMPY\x01\x00";
    w.write(magic, 8);
    const uint16_t len = static_cast<uint16_t>(header.size());
    w.write(&len, 2);  // little-endian on every platform syslm runs on
    w.write(header.data(), header.size());
    w.write(data.data(), data.size() * sizeof(float));
    w.commit();
}

int run_logits(const LogitsArgs& a) {
    const std::vector<int32_t> ids = parse_token_ids(a.ids, "--ids");
    const int prefill = a.prefill < 0 ? static_cast<int>(ids.size()) : a.prefill;
    SYSLM_CHECK(prefill >= 1 && prefill <= static_cast<int>(ids.size()), "--prefill ", prefill,
                " must be between 1 and the number of ids (", ids.size(), ")");
    const model::Model m(a.model);
    model::Context ctx(m, static_cast<int>(ids.size()), a.threads, 512, a.cache_type.types());
    const LoadedLoras loras = a.lora.load(m);
    ctx.set_loras(loras.uses);
    const size_t V = static_cast<size_t>(m.hparams().n_vocab);
    std::vector<float> all;
    auto logits = ctx.forward(std::span(ids).first(prefill), /*all_logits=*/true);
    all.assign(logits.begin(), logits.end());
    for (size_t i = prefill; i < ids.size(); ++i) {
        logits = ctx.forward(std::span(ids).subspan(i, 1), /*all_logits=*/true);
        all.insert(all.end(), logits.begin(), logits.end());
    }
    write_npy(a.out, all, ids.size(), V);
    std::fprintf(stderr, "wrote %zu x %zu logits to %s\n", ids.size(), V, a.out.c_str());
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto a = std::make_shared<LogitsArgs>();
    app.add_option("-m,--model", a->model, "GGUF model file")->required()->check(CLI::ExistingFile);
    app.add_option("--ids", a->ids, "Comma-separated token ids")->required();
    app.add_option("--prefill", a->prefill,
                   "How many ids go through the first batched forward; the rest are decoded one "
                   "at a time (default: all in one batch)");
    app.add_option("-o,--out", a->out, "Output .npy file (float32, [n_ids, n_vocab])")->required();
    app.add_option("-t,--threads", a->threads, "Threads (default: all cores)");
    add_cache_type_options(app, a->cache_type);
    add_lora_options(app, a->lora);
    return [a] { return run_logits(*a); };
}

}  // namespace

SYSLM_COMMAND(logits, "logits", "Write the logits for token ids to a .npy file (prefill + decode)",
              setup);

}  // namespace syslm::cli
