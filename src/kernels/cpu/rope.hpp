// Rotary position embeddings. Each pair of dimensions i (0 <= i < n_rot/2) is rotated by the angle
// pos * inv_freq[i]. The pairing follows llama.cpp's two modes: NORM rotates adjacent elements
// (x[2i], x[2i+1]) — the llama arch, whose converter permutes Q/K rows for it — and NEOX rotates
// the halves (x[i], x[i + n_rot/2]) — qwen2 and HF's rotate_half.
#pragma once

#include <cstdint>
#include <vector>

namespace syslm::kernels {

enum class RopeMode { Norm, Neox };

struct RopeConfig {
    int n_rot = 0;  // rotated dimensions per head (<= head_dim)
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;  // linear scaling: 1 / factor
    std::vector<float>
        freq_factors;  // per pair divisor of the frequency (llama3 rope_freqs), or empty
    // YaRN (used when yarn_orig_ctx > 0): NTK-by-parts mix of interpolated and extrapolated
    // frequencies, and a magnitude correction of cos/sin.
    int yarn_orig_ctx = 0;
    float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
    float yarn_attn_factor = 1.0f;
    // cos/sin magnitude without YaRN: LongRoPE's attention factor (Phi-3), 1 otherwise.
    float attn_factor = 1.0f;
    RopeMode mode = RopeMode::Norm;
};

// Per-model table of inverse frequencies, computed once.
class Rope {
public:
    explicit Rope(RopeConfig cfg);
    // Rotates n_heads vectors of head_dim floats (consecutive) at position pos, in place.
    void apply(float* x, int n_heads, int head_dim, int64_t pos) const;
    // The backward pass: the forward is a scaled rotation y = s R(a) x, so the gradient
    // dx = s R(-a) dy — the rotation by the opposite angle, in place on dy.
    void apply_backward(float* dy, int n_heads, int head_dim, int64_t pos) const;
    const RopeConfig& config() const { return cfg_; }

    // The rotation at one position, for callers that apply it many times (every layer of a
    // forward pass rotates q and k at the same positions): n_rot floats, (cos, sin) per pair,
    // scaled as apply() scales them. apply_angles(angles(pos)) == apply(pos), bit for bit.
    int angle_floats() const { return cfg_.n_rot; }
    void angles(int64_t pos, float* cs) const;
    void apply_angles(const float* cs, float* x, int n_heads, int head_dim) const;
    void apply_angles_backward(const float* cs, float* dy, int n_heads, int head_dim) const;

private:
    void rotate(float* x, int n_heads, int head_dim, int64_t pos, float sin_sign) const;

    RopeConfig cfg_;
    std::vector<double> inv_freq_;
    float mscale_ = 1.0f;
};

}  // namespace syslm::kernels
