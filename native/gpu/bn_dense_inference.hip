// Spatial batch-norm inference on packed NCHW / NHWC (NCDHW / NDHWC)
// tensors: one elementwise pass, 16 bytes per access, 32-bit indexing.
//
// Each block issues its chunk's loads, derives its channels' (mean,
// scale * inv_std, bias) from the estimates into shared memory meanwhile
// (cheaper than a separate launch, which would cost a small tensor's whole
// pass), then writes its contiguous chunk of the tensor:
// y = (x - mean) * factor + bias, blended.  x - mean is taken first so that
// a channel with mean 1e4 and std 1e-2 keeps its digits.
#include "gpu/bn_dense_inference.hpp"

#include "common/environment.hpp"
#include "common/numerics.hpp"
#include "gpu/bn_device_math.h"
#include "gpu/bn_dispatch.hpp"
#include "gpu/bn_planner.hpp"
#include "gpu/param_io.h"

#include <algorithm>
#include <cstdint>

namespace mbn {
namespace gpu {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxChannels = 2048;
// 16-byte vectors per thread, all loaded before any is used: a block walks
// kThreads * kVectorsPerThread of them (32 KB of half or float).
constexpr int kVectorsPerThread = 4;

struct InferenceArgs {
    const void* x;
    void* y;
    int channels, spatial, elements, chunk;  // chunk: elements per block, a multiple of 16
    ChannelParam scale, bias, mean, var;
    bool var_is_inv_std;
    double epsilon;
    float alpha, beta;
};

struct alignas(16) ChannelTable {
    float mean[kMaxChannels];
    float factor[kMaxChannels];
    float bias[kMaxChannels];
};

// A block walks one contiguous chunk; the channels of its elements get their
// factors in a shared table while the chunk's loads are in flight.  NHWC is
// the same walk with planes of one element (spatial = 1).
template <typename T>
__global__ void __launch_bounds__(kThreads) bn_dense_inference_planes(InferenceArgs a) {
    constexpr int V = 16 / sizeof(T);
    // Per channel, one array each: NHWC vectors read V neighbours at once.
    __shared__ ChannelTable table;
    float* mean = table.mean;
    float* factor = table.factor;
    float* bias = table.bias;
    const int first = static_cast<int>(blockIdx.x) * a.chunk;
    const int end = min(a.elements, first + a.chunk);
    const T* x = static_cast<const T*>(a.x);
    T* y = static_cast<T*>(a.y);
    // first is a multiple of 16 (the chunk is), so only the tensor's tail is
    // not a whole vector.
    const int vector_end = first + (end - first) / V * V;
    Pack<T, V> xv[kVectorsPerThread];
#pragma unroll
    for (int u = 0; u < kVectorsPerThread; ++u) {
        const int e = first + (u * kThreads + static_cast<int>(threadIdx.x)) * V;
        if (e < vector_end) xv[u] = load_pack<V>(x + e);
    }
    // The channels of the chunk's planes.
    const int plane_first = first / a.spatial;
    const int c_first = plane_first % a.channels;
    const int c_count = min(a.channels, (end - 1) / a.spatial - plane_first + 1);
    for (int i = threadIdx.x; i < c_count; i += kThreads) {
        const int c = (c_first + i) % a.channels;
        const double v = a.var.load_inline(c);
        const double inv_std = a.var_is_inv_std ? v : inverse_std(v, a.epsilon);
        mean[c] = static_cast<float>(a.mean.load_inline(c));
        factor[c] = static_cast<float>(a.scale.load_inline(c) * inv_std);
        bias[c] = static_cast<float>(a.bias.load_inline(c));
    }
    __syncthreads();
    auto apply = [&](int c, float v) { return (v - mean[c]) * factor[c] + bias[c]; };
    // NHWC with whole vectors of channels: a vector's channels are c..c+V-1.
    const bool channel_vectors = a.spatial == 1 && a.channels % V == 0;
#pragma unroll
    for (int u = 0; u < kVectorsPerThread; ++u) {
        const int e = first + (u * kThreads + static_cast<int>(threadIdx.x)) * V;
        if (e >= vector_end) continue;
        float result[V];
        if (channel_vectors) {
            const int c0 = e % a.channels;
            float m[V], f[V], b[V];
#pragma unroll
            for (int q = 0; q < V; q += 4) {
                *reinterpret_cast<float4*>(m + q) = *reinterpret_cast<const float4*>(mean + c0 + q);
                *reinterpret_cast<float4*>(f + q) = *reinterpret_cast<const float4*>(factor + c0 + q);
                *reinterpret_cast<float4*>(b + q) = *reinterpret_cast<const float4*>(bias + c0 + q);
            }
#pragma unroll
            for (int v = 0; v < V; ++v) result[v] = (widen(xv[u].lane[v]) - m[v]) * f[v] + b[v];
            store_values<T, V>(y + e, result, a.alpha, a.beta);
            continue;
        }
        int plane = e / a.spatial;
        int r = e - plane * a.spatial;
        int c = plane % a.channels;
#pragma unroll
        for (int v = 0; v < V; ++v) {
            result[v] = apply(c, widen(xv[u].lane[v]));
            if (++r == a.spatial) {
                r = 0;
                if (++c == a.channels) c = 0;
            }
        }
        store_values<T, V>(y + e, result, a.alpha, a.beta);
    }
    for (int e = vector_end + static_cast<int>(threadIdx.x); e < end; e += kThreads)
        store_blended(y, e, apply((e / a.spatial) % a.channels, widen(x[e])), a.alpha, a.beta);
}

// MIOPEN_BN_GPU_DENSE_INFERENCE=0 turns the path off.
bool dense_inference_enabled() {
    static const bool on = switch_from_environment("MIOPEN_BN_GPU_DENSE_INFERENCE", true);
    return on;
}

}  // namespace

bool dense_inference_fits(const BnForwardInference& p) {
    if (!dense_inference_enabled() || p.geom.mode != BnMode::spatial || !p.activation.identity()) return false;
    const TensorArg& x = p.x;
    if (x.dtype != DType::f16 && x.dtype != DType::bf16 && x.dtype != DType::f32) return false;
    if (x.order != MemoryOrder::packed_nchw && x.order != MemoryOrder::packed_nhwc) return false;
    if (p.y.dtype != x.dtype || p.y.order != x.order) return false;
    for (const TensorArg* t : {&p.x, &p.y})
        if (!aligned16(*t)) return false;
    return x.element_count() < (std::int64_t(1) << 31) - 4096 && p.geom.len[kC] <= kMaxChannels;
}

void run_dense_inference(const BnForwardInference& p, const LaunchTarget& target) {
    const TensorArg& x = p.x;
    const std::int64_t elements = x.element_count();
    const std::int64_t channels = p.geom.len[kC];
    const std::int64_t spatial = p.geom.spatial_size();
    const int element = static_cast<int>(dtype_size(x.dtype));

    // One round of kVectorsPerThread 16-byte loads per thread and block.
    const std::int64_t chunk = static_cast<std::int64_t>(kThreads) * kVectorsPerThread * (16 / element);
    const std::int64_t blocks = (elements + chunk - 1) / chunk;

    InferenceArgs a{};
    a.x = x.data;
    a.y = p.y.data;
    a.channels = static_cast<int>(channels);
    a.spatial = x.order == MemoryOrder::packed_nhwc ? 1 : static_cast<int>(spatial);
    a.elements = static_cast<int>(elements);
    a.chunk = static_cast<int>(chunk);
    a.scale = channel_param(p.scale);
    a.bias = channel_param(p.bias);
    a.mean = channel_param(p.mean);
    a.var = channel_param(p.var);
    a.var_is_inv_std = p.var_is_inv_std;
    a.epsilon = p.epsilon;
    a.alpha = p.out.alpha;
    a.beta = p.out.beta;
    with_element_type(x.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (!std::is_same<T, double>::value) {
            bn_dense_inference_planes<T><<<static_cast<unsigned>(blocks), kThreads, 0, target.stream>>>(a);
            check_launch("bn_dense_inference");
        }
    });
}

}  // namespace gpu
}  // namespace mbn
