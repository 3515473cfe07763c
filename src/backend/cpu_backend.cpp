#include "backend/cpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/activations.hpp"
#include "kernels/cpu/causal_conv.hpp"
#include "kernels/cpu/hadamard.hpp"
#include "kernels/cpu/norm.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::backend {

const char* device_name(Device d) {
    return d == Device::Host ? "host" : "cuda";
}

Buffer::Buffer(Device device, float* data, size_t size, std::function<void(float*)> release)
    : device_(device), data_(data, std::move(release)), size_(size) {}

CpuBackend::CpuBackend(int n_threads) : pool_(n_threads) {}

Buffer CpuBackend::alloc(size_t floats) {
    float* p = floats ? new float[floats]() : nullptr;
    return Buffer(Device::Host, p, floats, [](float* q) { delete[] q; });
}

void CpuBackend::matmul(const kernels::WeightView& w, const float* x, int64_t rows, float* y,
                        const float* bias) {
    kernels::matmul(w, x, rows, y, pool_, bias);
}

void CpuBackend::matmul(const kernels::WeightView& w, kernels::SharedActivations& x, float* y,
                        const float* bias) {
    kernels::matmul(w, x, y, pool_, bias);
}

void CpuBackend::matmul(std::initializer_list<kernels::MatmulOutput> outs,
                        kernels::SharedActivations& x) {
    kernels::matmul(outs, x, pool_);
}

void CpuBackend::lora_update(const float* x, int64_t n_in,
                             std::span<const kernels::LoraSegment> segments, float* dots) {
    kernels::lora_update(x, n_in, segments, dots, pool_);
}

void CpuBackend::norm(kernels::NormKind k, const float* x, float* out, int64_t rows, int64_t dim,
                      const float* weight, const float* bias, float eps) {
    switch (k) {
        case kernels::NormKind::Rms:
            return kernels::rms_norm(x, out, rows, dim, weight, eps, pool_);
        case kernels::NormKind::Layer:
            return kernels::layer_norm(x, out, rows, dim, weight, bias, eps, pool_);
        case kernels::NormKind::LayerNoBias:
            return kernels::layer_norm(x, out, rows, dim, weight, nullptr, eps, pool_);
    }
}

void CpuBackend::ffn_activation(kernels::FfnActivation k, float* a, const float* b, int64_t n) {
    kernels::ffn_activation(k, a, b, n, pool_);
}

void CpuBackend::causal_conv(const float* a, const float* w, int k, int64_t B, int64_t T,
                             int64_t dim, float* out) {
    kernels::causal_conv(a, w, k, B, T, dim, out, pool_);
}

void CpuBackend::swish_beta_glu(float* a, const float* b, const float* beta, int64_t rows,
                                int64_t n_ff) {
    kernels::swish_beta_glu(a, b, beta, rows, n_ff, pool_);
}

void CpuBackend::softcap(float* x, int64_t n, float cap) {
    kernels::softcap(x, n, cap, pool_);
}

void CpuBackend::rope_angles(const kernels::Rope& rope, std::span<const int64_t> positions,
                             float* angles) {
    const int na = rope.angle_floats();
    pool_.parallel_for(static_cast<int64_t>(positions.size()), [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; ++t) rope.angles(positions[t], angles + t * na);
    });
}

void CpuBackend::hadamard_heads(float* x, int64_t rows, int64_t stride, int heads, int head_dim) {
    pool_.parallel_for(rows, [&](int64_t b, int64_t e, int) {
        kernels::hadamard_heads(x + b * stride, e - b, stride, heads, head_dim);
    });
}

void CpuBackend::rope_rows(const kernels::Rope& rope, const float* angles, int64_t seq_len,
                           const float* src, int64_t src_stride, float* dst, int64_t rows,
                           int64_t heads, int64_t head_dim) {
    const int na = rope.angle_floats();
    const int64_t cols = heads * head_dim;
    pool_.parallel_for(rows, [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; ++t) {
            float* d = dst + t * cols;
            if (src + t * src_stride != d)
                std::memmove(d, src + t * src_stride, cols * sizeof(float));
            rope.apply_angles(angles + (t % seq_len) * na, d, static_cast<int>(heads),
                              static_cast<int>(head_dim));
        }
    });
}

void CpuBackend::attention(const kernels::AttentionShape& s, const float* q, const void* k_cache,
                           const void* v_cache, int64_t rows, int64_t n_past, float* out) {
    kernels::attention(s, q, k_cache, v_cache, rows, n_past, out, pool_);
}

void CpuBackend::attention_paged(const kernels::AttentionShape& s,
                                 std::span<const kernels::PagedSequence> seqs) {
    kernels::attention_paged(s, seqs, pool_);
}

void CpuBackend::add(float* y, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuBackend::copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                           int64_t rows, int64_t cols) {
    if (src == dst && src_stride == dst_stride) return;
    for (int64_t t = 0; t < rows; ++t)
        std::memmove(dst + t * dst_stride, src + t * src_stride, cols * sizeof(float));
}

void CpuBackend::gather_rows(const float* src, std::span<const int64_t> rows, int64_t cols,
                             float* dst) {
    auto copy = [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) std::copy_n(src + rows[i] * cols, cols, dst + i * cols);
    };
    const int64_t n = static_cast<int64_t>(rows.size());
    if (n * cols < (int64_t{1} << 16))  // a decode step's few rows: not worth a hand-off
        copy(0, n, 0);
    else
        pool_.parallel_for(n, copy);
}

void CpuBackend::scatter_add_rows(const float* src, std::span<const int64_t> rows,
                                  std::span<const float> scale, int64_t cols, float* dst) {
    SYSLM_CHECK(rows.size() == scale.size(), "scatter_add_rows: ", rows.size(), " rows and ",
                scale.size(), " scales");
    for (size_t j = 0; j < rows.size(); ++j) {
        float* d = dst + rows[j] * cols;
        const float* s = src + static_cast<int64_t>(j) * cols;
        for (int64_t i = 0; i < cols; ++i) d[i] += scale[j] * s[i];
    }
}

void CpuBackend::gated_add(const float* h, const float* gate, const float* src, int64_t rows,
                           int64_t dim, float* dst) {
    for (int64_t t = 0; t < rows; ++t) {
        double g = 0;
        for (int64_t i = 0; i < dim; ++i) g += gate[i] * h[t * dim + i];
        const float s = kernels::sigmoid(static_cast<float>(g));
        for (int64_t i = 0; i < dim; ++i) dst[t * dim + i] += s * src[t * dim + i];
    }
}

void CpuBackend::embed_rows(DType type, const void* table, int64_t dim,
                            std::span<const int64_t> ids, float* dst, bool accumulate) {
    const auto& tt = kernels::type_traits(type);
    const size_t row = row_bytes(type, dim);
    const auto* bytes = static_cast<const uint8_t*>(table);
    thread_local std::vector<float> one;
    if (accumulate) one.resize(static_cast<size_t>(dim));
    for (size_t t = 0; t < ids.size(); ++t) {
        float* d = dst + static_cast<int64_t>(t) * dim;
        if (!accumulate) {
            tt.to_float(bytes + ids[t] * row, d, dim);
            continue;
        }
        tt.to_float(bytes + ids[t] * row, one.data(), dim);
        for (int64_t i = 0; i < dim; ++i) d[i] += one[i];
    }
}

}  // namespace syslm::backend
