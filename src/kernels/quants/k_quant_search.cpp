// Scale searches of the K-quant reference quantizers (see k_quant_search.hpp). Every float
// expression keeps ggml's operand order; no fused multiply-adds (GCC: ISO mode implies
// -ffp-contract=off; clang: the pragma below), since contraction would change the chosen levels.
// (This file is compiled for the baseline ISA, which has no FMA to contract into.)
#include "kernels/quants/k_quant_search.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/quants/rounding.hpp"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

namespace syslm::kernels::detail {
namespace {

// Below this magnitude a group is treated as all zeros (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

int clamp_level(int l, int lo, int hi) {
    return std::max(lo, std::min(hi, l));
}

// The element of largest magnitude, with its sign (ties: the first one); *amax gets |max|.
float signed_absmax(int n, const float* x, float* amax) {
    float max = 0;
    *amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > *amax) {
            *amax = ax;
            max = x[i];
        }
    }
    return max;
}

}  // namespace

float make_qx_quants(int n, int nmax, const float* x, int8_t* L, const float* qw) {
    float amax = 0;
    const float max = signed_absmax(n, x, &amax);
    if (amax < kGroupMaxEps) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = static_cast<float>(-nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clamp_level(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = static_cast<int8_t>(l + nmax);
        const float w = qw ? qw[i] : x[i] * x[i];
        const float fl = static_cast<float>(l);
        sumlx += w * x[i] * fl;
        suml2 += w * fl * fl;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_level(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = qw ? qw[i] : x[i] * x[i];
            const float fl = static_cast<float>(l);
            sumlx += w * x[i] * fl;
            suml2 += w * fl * fl;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                const int l = clamp_level(nearest_int(iscale * x[i]), -nmax, nmax - 1);
                L[i] = static_cast<int8_t>(l + nmax);
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
    float amax = 0;
    const float max = signed_absmax(n, x, &amax);
    if (amax < kGroupMaxEps) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    const float iscale = static_cast<float>(-nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clamp_level(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = static_cast<int8_t>(l);
        const float w = x[i] * x[i];
        const float fl = static_cast<float>(l);
        sumlx += w * x[i] * fl;
        suml2 += w * fl * fl;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            const float li = static_cast<float>(L[i]);
            float slx = sumlx - w * x[i] * li;
            if (slx > 0) {
                float sl2 = suml2 - w * li * li;
                const int new_l = clamp_level(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    const float fl = static_cast<float>(new_l);
                    slx += w * x[i] * fl;
                    sl2 += w * fl * fl;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = static_cast<int8_t>(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
    return sumlx / suml2;
}

float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    const float fnmax = static_cast<float>(nmax);
    float iscale = fnmax / (max - min);
    float scale = 1 / iscale;
    float best_mad = 0;
    for (int i = 0; i < n; ++i) {
        L[i] = static_cast<uint8_t>(clamp_level(nearest_int(iscale * (x[i] - min)), 0, nmax));
        float diff = scale * static_cast<float>(L[i]) + min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        best_mad += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * static_cast<float>(is) + fnmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_level(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = static_cast<uint8_t>(l);
            const float w = weights[i];
            const float fl = static_cast<float>(l);
            sum_l += w * fl;
            sum_l2 += w * fl * fl;
            sum_xl += w * fl * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float mad = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
                diff = use_mad ? std::fabs(diff) : diff * diff;
                mad += weights[i] * diff;
            }
            if (mad < best_mad) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_mad = mad;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* weights) {
    float max = 0;
    for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
    if (max == 0.0f) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    const float fnmax = static_cast<float>(nmax);
    float iscale = fnmax / max;
    // ggml stores these first levels unclamped into uint8_t; x <= max keeps them <= nmax.
    for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nearest_int(iscale * x[i]));
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * static_cast<float>(L[i]);
        best_mse += weights[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * static_cast<float>(is) + fnmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
            const float diff = x[i] - scale_is * static_cast<float>(l);
            mse += weights[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::min(nmax, nearest_int(iscale * x[i]));
        L[i] = static_cast<uint8_t>(l);
        const float w = weights[i];
        const float fl = static_cast<float>(l);
        sumlx += w * x[i] * fl;
        suml2 += w * fl * fl;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = weights[i];
            const float li = static_cast<float>(L[i]);
            float slx = sumlx - w * x[i] * li;
            float sl2 = suml2 - w * li * li;
            if (slx > 0 && sl2 > 0) {
                const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    const float fl = static_cast<float>(new_l);
                    slx += w * x[i] * fl;
                    sl2 += w * fl * fl;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = static_cast<uint8_t>(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return sumlx / suml2;
}

}  // namespace syslm::kernels::detail
