// End to end: a small Llama folder written by hand (config.json, BF16 safetensors, tokenizer.json)
// converted to GGUF and read back with syslm's GGUF reader. The Python suite
// (tests/reference/test_convert.py) checks real transformers checkpoints against gguf-py.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "io/gguf.hpp"
#include "io/hf_convert.hpp"

namespace syslm::io {
namespace {

namespace fs = std::filesystem;

constexpr int kEmbd = 8, kHead = 2, kKv = 1, kFf = 12, kVocab = 13;

struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;  // already representable in BF16
};

void write_safetensors(const fs::path& path, const std::vector<Tensor>& ts) {
    std::string header = "{";
    std::vector<uint8_t> data;
    for (const auto& t : ts) {
        const size_t begin = data.size();
        for (float v : t.values) {
            const uint16_t h = f32_to_bf16(v);
            data.push_back(static_cast<uint8_t>(h));
            data.push_back(static_cast<uint8_t>(h >> 8));
        }
        std::string shape;
        for (int64_t d : t.shape) shape += cat(shape.empty() ? "" : ",", d);
        if (header.size() > 1) header += ",";
        header += "\"" + t.name + R"(":{"dtype":"BF16","shape":[)" + shape;
        header += "],\"data_offsets\":[" + std::to_string(begin) + ",";
        header += std::to_string(data.size()) + "]}";
    }
    header += "}";
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header;
    out.write(reinterpret_cast<const char*>(data.data()),
              static_cast<std::streamsize>(data.size()));
}

class HFConvert : public ::testing::Test {
protected:
    void SetUp() override {
        // One folder per test: CTest runs the tests of this fixture in parallel processes.
        dir_ = fs::path(SYSLM_TEST_TMP) /
               ::testing::UnitTest::GetInstance()->current_test_info()->name() /
               "hf_convert_llama";
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        std::ofstream(dir_ / "config.json") << R"({"architectures": ["LlamaForCausalLM"],
          "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1,
          "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32,
          "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "vocab_size": 13, "hidden_act": "silu"})";
        std::ofstream(dir_ / "tokenizer.json") << R"({
          "added_tokens": [{"id": 0, "content": "<unk>", "special": true},
                           {"id": 1, "content": "<s>", "special": true},
                           {"id": 2, "content": "</s>", "special": true}],
          "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                         {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
          "pre_tokenizer": null, "post_processor": null,
          "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
                    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "▁": 4, "a": 5,
                              "b": 6, "▁a": 7, "ab": 8, "▁ab": 9, "c": 10, "bc": 11, "▁c": 12},
                    "merges": [["▁", "a"], ["a", "b"], ["▁a", "b"], ["b", "c"], ["▁", "c"]]}})";
        std::mt19937 rng(9);
        std::normal_distribution<float> nd;
        auto rnd = [&](std::vector<int64_t> shape) {
            int64_t n = 1;
            for (int64_t d : shape) n *= d;
            std::vector<float> v(n);
            for (auto& x : v) x = bf16_to_f32(f32_to_bf16(nd(rng)));
            return v;
        };
        const std::string L = "model.layers.0.";
        for (auto [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
                 {"model.embed_tokens.weight", {kVocab, kEmbd}},
                 {"model.norm.weight", {kEmbd}},
                 {"lm_head.weight", {kVocab, kEmbd}},
                 {L + "input_layernorm.weight", {kEmbd}},
                 {L + "post_attention_layernorm.weight", {kEmbd}},
                 {L + "self_attn.q_proj.weight", {kHead * 4, kEmbd}},
                 {L + "self_attn.k_proj.weight", {kKv * 4, kEmbd}},
                 {L + "self_attn.v_proj.weight", {kKv * 4, kEmbd}},
                 {L + "self_attn.o_proj.weight", {kEmbd, kHead * 4}},
                 {L + "mlp.gate_proj.weight", {kFf, kEmbd}},
                 {L + "mlp.up_proj.weight", {kFf, kEmbd}},
                 {L + "mlp.down_proj.weight", {kEmbd, kFf}}})
            tensors_.push_back({name, shape, rnd(shape)});
        write_safetensors(dir_ / "model.safetensors", tensors_);
    }

    const Tensor& hf(const std::string& name) const {
        for (const auto& t : tensors_)
            if (t.name == name) return t;
        throw std::runtime_error(name);
    }

    fs::path dir_;
    std::vector<Tensor> tensors_;
};

std::vector<float> read_f32(const GGUFTensor& t) {
    std::vector<float> out(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
        if (t.type == DType::F32) {
            std::memcpy(&out[i], t.data + 4 * i, 4);
        } else {
            uint16_t h;
            std::memcpy(&h, t.data + 2 * i, 2);
            out[i] = t.type == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
    }
    return out;
}

TEST_F(HFConvert, Bf16CheckpointToF16AndF32) {
    for (DType out_type : {DType::F32, DType::F16, DType::BF16}) {
        HFConvertOptions opt;
        opt.model_dir = dir_.string();
        opt.output = (dir_ / "out.gguf").string();
        opt.out_type = out_type;
        const HFConvertResult r = convert_hf_model(opt);
        EXPECT_EQ(r.arch, "llama");
        EXPECT_EQ(r.n_tensors, 12u);
        const GGUFFile f(opt.output);
        EXPECT_EQ(f.get_string("general.architecture"), "llama");
        EXPECT_EQ(f.get_string("general.name"), "hf_convert_llama");
        EXPECT_EQ(f.get_u32("general.file_type"), hf_file_type(out_type));
        EXPECT_EQ(f.get_u32("llama.attention.head_count_kv"), 1u);
        EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
        EXPECT_EQ(f.get("tokenizer.ggml.tokens").size(), 13u);

        // Q rows: within each head of 4, HF order [x0 x1 | y0 y1] becomes [x0 y0 x1 y1].
        const auto& q = f.tensor("blk.0.attn_q.weight");
        EXPECT_EQ(q.type, out_type);
        EXPECT_EQ(q.ne, (std::vector<int64_t>{kEmbd, kHead * 4}));
        const auto qv = read_f32(q);
        const auto& hq = hf("model.layers.0.self_attn.q_proj.weight").values;
        const int order[4] = {0, 2, 1, 3};
        for (int h = 0; h < kHead; ++h)
            for (int r = 0; r < 4; ++r)
                for (int c = 0; c < kEmbd; ++c) {
                    const float want = hq[(h * 4 + order[r]) * kEmbd + c];
                    const float conv = out_type == DType::F16 ? f16_to_f32(f32_to_f16(want)) : want;
                    EXPECT_EQ(qv[(h * 4 + r) * kEmbd + c], conv);
                }
        // Norms stay F32 and exact; V is copied as is.
        const auto& norm = f.tensor("blk.0.attn_norm.weight");
        EXPECT_EQ(norm.type, DType::F32);
        EXPECT_EQ(read_f32(norm), hf("model.layers.0.input_layernorm.weight").values);
        if (out_type != DType::F16) {
            EXPECT_EQ(read_f32(f.tensor("blk.0.attn_v.weight")),
                      hf("model.layers.0.self_attn.v_proj.weight").values);
        }
        EXPECT_EQ(f.tensor("output.weight").ne, (std::vector<int64_t>{kEmbd, kVocab}));
    }
}

TEST_F(HFConvert, FailureLeavesNoFile) {
    std::ofstream(dir_ / "config.json") << R"({"architectures": ["LlamaForCausalLM"],
      "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
      "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32,
      "rms_norm_eps": 1e-06, "vocab_size": 13})";
    HFConvertOptions opt;
    opt.model_dir = dir_.string();
    opt.output = (dir_ / "bad.gguf").string();
    try {
        convert_hf_model(opt);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(
            std::string(e.what()).find("'model.layers.0.mlp.gate_proj.weight' has shape [12, 8], "
                                       "expected [16, 8]"),
            std::string::npos)
            << e.what();
    }
    EXPECT_FALSE(fs::exists(opt.output));
    for (const auto& e : fs::directory_iterator(dir_))
        EXPECT_EQ(e.path().filename().string().find("bad.gguf"), std::string::npos);
    opt.out_type = DType::Q4_0;
    EXPECT_THROW(convert_hf_model(opt), Error);
}

}  // namespace
}  // namespace syslm::io
