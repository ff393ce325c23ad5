// What the wave-tile kernels take (bn_wave_tile.hip, the NCHW form, and
// bn_wave_tile_nhwc.hip): float32 parameters by channel and the call's
// shape, blending and constants, one struct for both forms and both ops.
#pragma once

#include "gpu/bn_wave_tile.hpp"
#include "gpu/hip_compat.h"

namespace mbn {
namespace gpu {

// The NHWC form: the most threads a block (its launch bound) and 16-byte
// vectors a lane holds per tensor (x and dy: 32 registers at most).
constexpr int kMostNhwcThreads = 256;
constexpr int kMostRowSlots = 4;

// A float32 parameter tensor by channel (the planner takes no other
// type): plain loads and stores, nothing to convert.  Loaded parameters
// stay float until the sums are in: a conversion of a loaded value (to
// double, or from another type) was scheduled at once, and waited for the
// load before the values' loads issued.
struct FloatParam {
    float* data;  // nullptr: absent
    int stride;   // elements from one channel to the next
    bool packed;  // stride 1 and 16-byte aligned: runs of 4 channels load as one vector

    __host__ __device__ bool present() const { return data != nullptr; }
    __device__ __forceinline__ float load(int c) const { return present() ? data[c * stride] : 0.0f; }
    // Channels c0 .. c0 + V - 1 (c0 a multiple of 4 where V is), 0 where absent.
    template <int V>
    __device__ __forceinline__ void load_run(int c0, float (&out)[V]) const {
        if constexpr (V % 4 == 0) {
            if (packed) {
#pragma unroll
                for (int i = 0; i < V; i += 4) {
                    const float4 q = *reinterpret_cast<const float4*>(data + c0 + i);
                    out[i] = q.x;
                    out[i + 1] = q.y;
                    out[i + 2] = q.z;
                    out[i + 3] = q.w;
                }
                return;
            }
        }
#pragma unroll
        for (int i = 0; i < V; ++i) out[i] = load(c0 + i);
    }
    __device__ __forceinline__ void store(int c, float value) const { data[c * stride] = value; }
    // alpha value + beta prior, the prior read only when beta != 0.
    __device__ __forceinline__ void store_blended(int c, float value, float alpha, float beta) const {
        float out = alpha * value;
        if (beta != 0.0f) out += beta * data[c * stride];
        data[c * stride] = out;
    }
};

struct WaveTileArgs {
    const void* x;
    const void* dy;
    void* out;  // y or dx
    int channels;
    int samples;  // N
    int plane;    // D*H*W
    int lanes;    // NHWC: lanes side by side across a row of the tile (1 or 2 vectors of 16 bytes)
    float alpha, beta;  // y or dx blended with its prior content
    double inv_count;       // 1 / (N*D*H*W): the kernel multiplies, it never divides
    double unbiased_ratio;  // count / (count - 1), 1 for a single value
    double epsilon;
    FloatParam scale, saved_mean, saved_inv_std;  // the saved statistics: absent in a backward that recomputes them
    struct Training {
        FloatParam bias, prev_mean, prev_var, running_mean, running_var;
        double exp_avg_factor;
    };
    struct Backward {
        FloatParam dscale, dbias;
        float param_alpha, param_beta;
        bool double_math;  // dx in double
    };
    union {
        Training train;
        Backward back;
    };
};

// The NHWC form's launch (bn_wave_tile_nhwc.hip); host code.
void launch_wave_tiles_nhwc(const WaveTileArgs& a, DType dtype, bool backward, const WaveTilePlan& plan,
                            const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
