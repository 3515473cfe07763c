// Random LoRA adapters (llama.cpp's adapter GGUF) for a test model: A and B both random (B is
// zero in training's initialisation, which would leave the model unchanged), with switches that
// break the file in the ways the loader must refuse.
#pragma once

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "io/gguf.hpp"
#include "model/transformer.hpp"

namespace syslm::testing {

struct RandomLora {
    int rank = 3;
    float alpha = 6;
    uint32_t seed = 7;
    std::vector<std::string> targets = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                        "ffn_gate", "ffn_up", "ffn_down"};
    std::string arch;           // empty: the base model's
    bool transposed_a = false;  // lora_a stored [r, n_in]
    bool drop_first_b = false;  // the first pair's lora_b missing
};

inline std::string write_random_lora(const model::Model& base, const std::string& tag,
                                     const RandomLora& s) {
    io::GGUFWriter w;
    w.set("general.architecture",
          io::GGUFValue::string(s.arch.empty() ? base.hparams().arch_name : s.arch));
    w.set("general.type", io::GGUFValue::string("adapter"));
    w.set("adapter.type", io::GGUFValue::string("lora"));
    w.set("adapter.lora.alpha", io::GGUFValue::f32(s.alpha));
    std::mt19937 rng(s.seed);
    std::normal_distribution<float> nd(0.0f, 0.2f);
    const auto values = [&](int64_t n) {
        std::vector<uint8_t> b(static_cast<size_t>(n) * 4);
        for (int64_t i = 0; i < n; ++i) {
            const float v = nd(rng);
            std::memcpy(b.data() + 4 * i, &v, 4);
        }
        return b;
    };
    bool first = true;
    for (int il = 0; il < base.hparams().n_layer; ++il)
        for (const std::string& t : s.targets) {
            const std::string name = "blk." + std::to_string(il) + "." + t + ".weight";
            const io::GGUFTensor& weight = base.file().tensor(name);
            const int64_t n_in = weight.ne[0], n_out = weight.ne.size() > 1 ? weight.ne[1] : 1;
            const std::vector<int64_t> a_ne = s.transposed_a ? std::vector<int64_t>{s.rank, n_in}
                                                             : std::vector<int64_t>{n_in, s.rank};
            w.add_tensor(name + ".lora_a", DType::F32, a_ne, values(n_in * s.rank));
            if (!(first && s.drop_first_b))
                w.add_tensor(name + ".lora_b", DType::F32, {s.rank, n_out}, values(n_out * s.rank));
            first = false;
        }
    std::filesystem::create_directories(SYSLM_TEST_TMP);
    const std::string path = std::string(SYSLM_TEST_TMP) + "/lora_" + tag + ".gguf";
    w.write(path);
    return path;
}

}  // namespace syslm::testing
