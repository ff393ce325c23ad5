// Spatial batch-norm inference on packed NCHW (NCDHW) tensors: one
// elementwise pass, 16 bytes per access, 32-bit indexing.
//
// Each block first derives every channel's (mean, scale * inv_std, bias)
// from the estimates into shared memory (cheaper than a separate launch,
// which would cost a small tensor's whole pass), then walks one contiguous
// chunk of the tensor: y = (x - mean) * factor + bias, blended.  x - mean is
// taken first so that a channel with mean 1e4 and std 1e-2 keeps its digits.
#include "gpu/bn_dense_inference.hpp"

#include "common/environment.hpp"
#include "common/numerics.hpp"
#include "gpu/bn_device_math.h"
#include "gpu/bn_dispatch.hpp"
#include "gpu/param_io.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace mbn {
namespace gpu {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxChannels = 2048;
// Elements a block walks at least (fewer, larger blocks for small tensors).
constexpr std::int64_t kMinChunkBytes = 32 << 10;

struct InferenceArgs {
    const void* x;
    void* y;
    int channels, spatial, elements, chunk;  // chunk: elements per block, a multiple of 16
    ChannelParam scale, bias, mean, var;
    bool var_is_inv_std;
    double epsilon;
    float alpha, beta;
};

// NCHW: a block walks one contiguous chunk; its planes' channels get their
// factors in a shared table first.
template <typename T>
__global__ void __launch_bounds__(kThreads) bn_dense_inference_planes(InferenceArgs a) {
    constexpr int V = 16 / sizeof(T);
    __shared__ float table[kMaxChannels * 3];
    const int first = static_cast<int>(blockIdx.x) * a.chunk;
    const int end = min(a.elements, first + a.chunk);
    // The channels of the chunk's planes.
    const int plane_first = first / a.spatial;
    const int c_first = plane_first % a.channels;
    const int c_count = min(a.channels, (end - 1) / a.spatial - plane_first + 1);
    for (int i = threadIdx.x; i < c_count; i += kThreads) {
        const int c = (c_first + i) % a.channels;
        const double v = a.var.load(c);
        const double inv_std = a.var_is_inv_std ? v : inverse_std(v, a.epsilon);
        table[c * 3] = static_cast<float>(a.mean.load(c));
        table[c * 3 + 1] = static_cast<float>(a.scale.load(c) * inv_std);
        table[c * 3 + 2] = static_cast<float>(a.bias.load(c));
    }
    __syncthreads();
    const T* x = static_cast<const T*>(a.x);
    T* y = static_cast<T*>(a.y);
    auto channel_of = [&](int e) { return (e / a.spatial) % a.channels; };
    auto apply = [&](int c, float v) {
        const float* k = table + c * 3;
        return (v - k[0]) * k[1] + k[2];
    };
    // first is a multiple of 16 (the chunk is), so only the tensor's tail is
    // not a whole vector.
    const int vector_end = first + (end - first) / V * V;
    for (int e = first + static_cast<int>(threadIdx.x) * V; e < vector_end; e += kThreads * V) {
        float xv[V], result[V];
        load_values<float, V>(x + e, xv);
        int plane = e / a.spatial;
        int r = e - plane * a.spatial;
        int c = plane % a.channels;
#pragma unroll
        for (int v = 0; v < V; ++v) {
            result[v] = apply(c, xv[v]);
            if (++r == a.spatial) {
                r = 0;
                if (++c == a.channels) c = 0;
            }
        }
        store_values<T, V>(y + e, result, a.alpha, a.beta);
    }
    for (int e = vector_end + static_cast<int>(threadIdx.x); e < end; e += kThreads)
        store_blended(y, e, apply(channel_of(e), widen(x[e])), a.alpha, a.beta);
}

// MIOPEN_BN_GPU_DENSE_INFERENCE: "0" never, "force" whenever the layout
// allows, otherwise from 2 MB of x on (below, the nest walk's single launch
// is as fast: bench/RESULTS.md "one-launch batch norm").
int dense_inference_use() {
    static const int use = [] {
        const char* text = std::getenv("MIOPEN_BN_GPU_DENSE_INFERENCE");
        if (text != nullptr && std::strcmp(text, "force") == 0) return 2;
        return switch_from_environment("MIOPEN_BN_GPU_DENSE_INFERENCE", true) ? 1 : 0;
    }();
    return use;
}

}  // namespace

bool dense_inference_fits(const BnForwardInference& p) {
    const int use = dense_inference_use();
    if (use == 0 || p.geom.mode != BnMode::spatial || !p.activation.identity()) return false;
    const TensorArg& x = p.x;
    if (x.dtype != DType::f16 && x.dtype != DType::bf16 && x.dtype != DType::f32) return false;
    // NHWC with C > 1 and spatial > 1 keeps the nest walk: measured no faster.
    const bool planes = x.order == MemoryOrder::packed_nchw ||
                        (x.order == MemoryOrder::packed_nhwc && (p.geom.len[kC] == 1 || p.geom.spatial_size() == 1));
    if (!planes || p.y.dtype != x.dtype || p.y.order != x.order) return false;
    for (const TensorArg* t : {&p.x, &p.y})
        if (reinterpret_cast<std::uintptr_t>(t->data) % 16 != 0) return false;
    const std::int64_t elements = x.element_count();
    if (elements >= (std::int64_t(1) << 31) - 4096 || p.geom.len[kC] > kMaxChannels) return false;
    return use == 2 || elements * static_cast<std::int64_t>(dtype_size(x.dtype)) >= (std::int64_t(2) << 20);
}

void run_dense_inference(const BnForwardInference& p, const DeviceShape& device, const LaunchTarget& target) {
    const TensorArg& x = p.x;
    const std::int64_t elements = x.element_count();
    const std::int64_t channels = p.geom.len[kC];
    const std::int64_t spatial = p.geom.spatial_size();
    const int element = static_cast<int>(dtype_size(x.dtype));

    // Enough blocks for every multiprocessor several times over, each with
    // at least kMinChunkBytes; chunks are whole 16-element multiples.
    const std::int64_t most = static_cast<std::int64_t>(device.multiprocessors) * 4;
    const std::int64_t by_size = std::max<std::int64_t>(1, elements * element / kMinChunkBytes);
    const std::int64_t blocks_wanted = std::min(most, by_size);
    std::int64_t chunk = (elements + blocks_wanted - 1) / blocks_wanted;
    chunk = (chunk + 15) / 16 * 16;
    const std::int64_t blocks = (elements + chunk - 1) / chunk;

    InferenceArgs a{};
    a.x = x.data;
    a.y = p.y.data;
    a.channels = static_cast<int>(channels);
    a.spatial = static_cast<int>(spatial);
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
