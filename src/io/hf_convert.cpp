#include "io/hf_convert.hpp"

#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "core/half.hpp"
#include "io/gguf.hpp"
#include "io/hf_config.hpp"
#include "io/hf_tensor_names.hpp"
#include "io/hf_tokenizer.hpp"
#include "io/safetensors.hpp"

namespace syslm::io {
namespace {

constexpr uint32_t kQuantizationVersion = 2;  // GGML_QNT_VERSION, written by every converter

bool same_type(STDType s, DType d) {
    return (s == STDType::F32 && d == DType::F32) || (s == STDType::F16 && d == DType::F16) ||
           (s == STDType::BF16 && d == DType::BF16);
}

}  // namespace

std::vector<uint8_t> encode_floats(const std::vector<float>& x, DType t) {
    std::vector<uint8_t> out;
    if (t == DType::F32) {
        out.resize(x.size() * 4);
        std::memcpy(out.data(), x.data(), out.size());
        return out;
    }
    out.resize(x.size() * 2);
    for (size_t i = 0; i < x.size(); ++i) {
        const uint16_t h = t == DType::F16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
    }
    return out;
}

namespace {

// The float data of one planned tensor with its transform applied.
std::vector<float> materialise(const HFTensorPlan& p, const SafetensorsModel& st,
                               const HFModelSpec& spec) {
    if (p.sources.empty()) return p.generated;
    std::vector<float> x;
    for (const auto& src : p.sources) {
        std::vector<float> part = st_to_f32(st.tensor(src));
        x.insert(x.end(), part.begin(), part.end());
    }
    const int64_t rows = p.source_shape.empty() ? 1 : p.source_shape[0];
    const int64_t cols = rows ? static_cast<int64_t>(x.size()) / rows : 0;
    switch (p.transform) {
        case HFTransform::Transpose: {
            std::vector<float> y(x.size());
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
            return y;
        }
        case HFTransform::AddOne:  // in f32, as transformers adds it (llama.cpp: in the source
                                   // type)
            for (float& v : x) v += 1.0f;
            return x;
        default:  // the row orders (Q/K RoPE layout, BLOOM's fused QKV), or none
            return reorder_hf_rows(std::move(x), rows, cols, p.transform, spec);
    }
}

}  // namespace

uint32_t hf_file_type(DType out_type) {
    switch (out_type) {
        case DType::F32:
            return 0;
        case DType::F16:
            return 1;
        case DType::BF16:
            return 32;
        default:
            fail("output type ", dtype_name(out_type), " is not supported (f32, f16, bf16)");
    }
}

HFConvertResult convert_hf_model(const HFConvertOptions& opt) {
    namespace fs = std::filesystem;
    const uint32_t file_type = hf_file_type(opt.out_type);
    SYSLM_CHECK(!opt.output.empty(), "convert: no output path");
    const HFModelSpec spec = read_hf_config(opt.model_dir);
    const HFVocab vocab = read_hf_tokenizer(opt.model_dir, spec.n_vocab, opt.pre);

    std::unique_ptr<SafetensorsModel> st;
    std::vector<HFTensorPlan> plans;
    if (!opt.vocab_only) {
        st = std::make_unique<SafetensorsModel>(opt.model_dir);
        HFShapes shapes;
        for (const auto& n : st->names()) shapes[n] = st->tensor(n).shape;
        plans = plan_hf_tensors(spec, shapes, opt.model_dir);
    }

    GGUFWriter w;
    w.set("general.architecture", GGUFValue::string(spec.arch));
    w.set("general.type", GGUFValue::string("model"));
    std::string name = opt.name;
    if (name.empty()) {  // the folder's own name, also for "dir/" and "."
        fs::path p = fs::absolute(opt.model_dir).lexically_normal();
        if (p.filename().empty()) p = p.parent_path();
        name = p.filename().string();
    }
    w.set("general.name", GGUFValue::string(name));
    for (const auto& [k, v] : spec.kv) w.set(k, v);
    w.set("general.file_type", GGUFValue::u32(file_type));
    for (const auto& [k, v] : vocab.kv) w.set(k, v);
    w.set("general.quantization_version", GGUFValue::u32(kQuantizationVersion));

    HFConvertResult res;
    res.hf_arch = spec.hf_arch;
    res.arch = spec.arch;
    res.tokenizer_model = vocab.model;
    res.tokenizer_pre = vocab.pre;
    res.n_tokens = vocab.n_tokens;
    for (const auto& p : plans) {
        const DType t = hf_tensor_forced_f32(p) ? DType::F32 : opt.out_type;
        const STTensor* one = p.sources.size() == 1 ? &st->tensor(p.sources[0]) : nullptr;
        int64_t numel = 1;
        for (int64_t d : p.ne) numel *= d;
        if (one && p.transform == HFTransform::None && same_type(one->dtype, t)) {
            w.add_tensor(p.name, t, p.ne, one->data.data(), one->data.size());  // zero-copy
        } else {
            // Converted while the file is written: one tensor in memory at a time.
            w.add_tensor(
                p.name, t, p.ne, row_bytes(t, p.ne[0]) * static_cast<size_t>(numel / p.ne[0]),
                [&p, &st, &spec, t](uint8_t* dst) {
                    const std::vector<uint8_t> bytes = encode_floats(materialise(p, *st, spec), t);
                    std::memcpy(dst, bytes.data(), bytes.size());
                });
        }
        res.n_params += static_cast<uint64_t>(numel);
        ++res.n_tensors;
        if (opt.log) {
            std::string shape;
            for (int64_t d : p.ne) shape += cat(shape.empty() ? "" : ", ", d);
            opt.log(cat(p.name, " ", dtype_name(t), " {", shape, "}"));
        }
    }
    w.write(opt.output);
    return res;
}

}  // namespace syslm::io
