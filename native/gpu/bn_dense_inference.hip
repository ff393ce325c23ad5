// Spatial batch-norm inference on packed NCHW / NHWC (NCDHW / NDHWC)
// tensors: one elementwise pass, 16 bytes per access, 32-bit indexing.
//
// Each block issues its loads (a contiguous chunk, or an NHWC slice of
// channels across rows), derives its channels' (mean, scale * inv_std,
// bias) from the estimates into shared memory meanwhile (cheaper than a
// separate launch, which would cost a small tensor's whole pass), then
// writes its part of the tensor:
// y = (x - mean) * factor + bias, blended.  x - mean is taken first so that
// a channel with mean 1e4 and std 1e-2 keeps its digits.
#include "gpu/bn_dense_inference.hpp"

#include "common/numerics.hpp"
#include "gpu/block_reduce.h"
#include "gpu/bn_planner.hpp"
#include "gpu/norm_math.h"
#include "gpu/param_io.h"
#include "gpu/type_dispatch.hpp"

#include <algorithm>
#include <cstdint>

namespace mbn {
namespace gpu {
namespace {

constexpr int kMaxThreads = 512;
constexpr int kLeastThreads = 128;
constexpr int kMaxChannels = 2048;
// 16-byte vectors per thread, all loaded before any is used: a block walks
// up to kMaxThreads * kMaxVectorsPerThread of them (32 KB of half or float).
constexpr int kMaxVectorsPerThread = 4;
// Blocks per multiprocessor below which a call takes smaller blocks: a small
// tensor in a few large blocks leaves most multiprocessors idle and each
// block's channel table long (1x2048x7x7 NHWC took 7 blocks of 2048
// channels each).
constexpr std::int64_t kLeastBlocksPerMultiprocessor = 2;

struct InferenceArgs {
    const void* x;
    void* y;
    int channels, spatial, elements;
    int chunk;  // contiguous walk: elements per block, a multiple of 16
    // NHWC slices: a block takes `slice` vectors of `slice_rows` rows, the
    // blocks of a row band side by side across the channels.
    int slice, slices, slice_rows, rows;
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

// Table entry i for channel c: (mean, scale * inv_std, bias) from the estimates.
__device__ __forceinline__ void fill_channel(ChannelTable& table, int i, int c, const InferenceArgs& a) {
    const double v = a.var.load(c);
    const double inv_std = a.var_is_inv_std ? v : inverse_std(v, a.epsilon);
    table.mean[i] = static_cast<float>(a.mean.load(c));
    table.factor[i] = static_cast<float>(a.scale.load(c) * inv_std);
    table.bias[i] = static_cast<float>(a.bias.load(c));
}

// y for V neighbouring channels whose table entries start at i (16-byte aligned).
template <typename T, int V>
__device__ __forceinline__ void store_channel_vector(T* y, const Pack<T, V>& xv, const ChannelTable& table, int i,
                                                     const InferenceArgs& a) {
    float m[V], f[V], b[V], result[V];
#pragma unroll
    for (int q = 0; q < V; q += 4) {
        *reinterpret_cast<float4*>(m + q) = *reinterpret_cast<const float4*>(table.mean + i + q);
        *reinterpret_cast<float4*>(f + q) = *reinterpret_cast<const float4*>(table.factor + i + q);
        *reinterpret_cast<float4*>(b + q) = *reinterpret_cast<const float4*>(table.bias + i + q);
    }
#pragma unroll
    for (int v = 0; v < V; ++v) result[v] = (widen(xv.lane[v]) - m[v]) * f[v] + b[v];
    store_values<T, V>(y, result, a.alpha, a.beta);
}

// NHWC with C a multiple of the vector: block b takes channel vectors
// [s * slice, s * slice + slice) of rows [r * slice_rows, ...), s = b %
// slices; the table holds the slice's channels only, so a small tensor can
// spread over many blocks without each filling a table of every channel.
template <typename T, int K>
__global__ void __launch_bounds__(kMaxThreads) bn_dense_inference_slices(InferenceArgs a) {
    constexpr int V = 16 / sizeof(T);
    __shared__ ChannelTable table;
    const int s = static_cast<int>(blockIdx.x) % a.slices;
    const int row0 = static_cast<int>(blockIdx.x) / a.slices * a.slice_rows;
    const int channel_vectors = a.channels / V;
    const int first_vector = s * a.slice;
    const int width = min(a.slice, channel_vectors - first_vector);  // the last slice may be narrower
    const int threads = static_cast<int>(blockDim.x);
    const T* x = static_cast<const T*>(a.x);
    T* y = static_cast<T*>(a.y);
    Pack<T, V> xv[K];
    int offset[K], entry[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int j = static_cast<int>(threadIdx.x) + k * threads;
        const int row = row0 + j / width;
        entry[k] = j % width * V;
        offset[k] = j < a.slice_rows * width && row < a.rows ? row * a.channels + first_vector * V + entry[k] : -1;
        if (offset[k] >= 0) xv[k] = load_pack<V>(x + offset[k]);
    }
    for (int i = threadIdx.x; i < width * V; i += threads) fill_channel(table, i, first_vector * V + i, a);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < K; ++k) {
        if (offset[k] >= 0) store_channel_vector<T, V>(y + offset[k], xv[k], table, entry[k], a);
    }
}

// A block walks one contiguous chunk; the channels of its elements get their
// factors in a shared table while the chunk's loads are in flight.  NHWC
// whose C is not a multiple of the vector is the same walk with planes of
// one element (spatial = 1).
template <typename T, int K>
__global__ void __launch_bounds__(kMaxThreads) bn_dense_inference_planes(InferenceArgs a) {
    constexpr int V = 16 / sizeof(T);
    __shared__ ChannelTable table;
    const int threads = static_cast<int>(blockDim.x);
    const int first = static_cast<int>(blockIdx.x) * a.chunk;
    const int end = min(a.elements, first + a.chunk);
    const T* x = static_cast<const T*>(a.x);
    T* y = static_cast<T*>(a.y);
    // first is a multiple of 16 (the chunk is), so only the tensor's tail is
    // not a whole vector.
    const int vector_end = first + (end - first) / V * V;
    Pack<T, V> xv[K];
#pragma unroll
    for (int u = 0; u < K; ++u) {
        const int e = first + (u * threads + static_cast<int>(threadIdx.x)) * V;
        if (e < vector_end) xv[u] = load_pack<V>(x + e);
    }
    // The channels of the chunk's planes, at their channel's entry.
    const int plane_first = first / a.spatial;
    const int c_first = plane_first % a.channels;
    const int c_count = min(a.channels, (end - 1) / a.spatial - plane_first + 1);
    for (int i = threadIdx.x; i < c_count; i += threads) {
        const int c = (c_first + i) % a.channels;
        fill_channel(table, c, c, a);
    }
    __syncthreads();
    auto apply = [&](int c, float v) { return (v - table.mean[c]) * table.factor[c] + table.bias[c]; };
#pragma unroll
    for (int u = 0; u < K; ++u) {
        const int e = first + (u * threads + static_cast<int>(threadIdx.x)) * V;
        if (e >= vector_end) continue;
        float result[V];
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
    for (int e = vector_end + static_cast<int>(threadIdx.x); e < end; e += threads)
        store_blended(y, e, apply((e / a.spatial) % a.channels, widen(x[e])), a.alpha, a.beta);
}

// Whether a call takes NHWC channel slices (bn_dense_inference_slices):
// packed NHWC with C a multiple of the 16-byte vector.
bool takes_slices(const BnForwardInference& p) {
    return p.x.order == MemoryOrder::packed_nhwc && p.geom.len[kC] % (16 / dtype_size(p.x.dtype)) == 0;
}

}  // namespace

bool dense_inference_fits(const BnForwardInference& p) {
    if (p.geom.mode != BnMode::spatial || !p.activation.identity()) return false;
    const TensorArg& x = p.x;
    if (x.dtype != DType::f16 && x.dtype != DType::bf16 && x.dtype != DType::f32) return false;
    if (x.order != MemoryOrder::packed_nchw && x.order != MemoryOrder::packed_nhwc) return false;
    if (p.y.dtype != x.dtype || p.y.order != x.order) return false;
    for (const TensorArg* t : {&p.x, &p.y})
        if (!aligned16(*t)) return false;
    // The contiguous walk's table holds every channel; NHWC slices hold a
    // slice's channels only.
    return x.element_count() < (std::int64_t(1) << 31) - 4096 && (takes_slices(p) || p.geom.len[kC] <= kMaxChannels);
}

void run_dense_inference(const BnForwardInference& p, const DeviceShape& device, const LaunchTarget& target) {
    const TensorArg& x = p.x;
    const std::int64_t elements = x.element_count();
    const std::int64_t channels = p.geom.len[kC];
    const std::int64_t spatial = p.geom.spatial_size();
    const int element = static_cast<int>(dtype_size(x.dtype));
    const int vector = 16 / element;
    const bool slices = takes_slices(p);
    const std::int64_t rows = elements / channels;
    const std::int64_t channel_vectors = channels / vector;

    // Blocks of kMaxThreads x kMaxVectorsPerThread vectors, made smaller
    // (fewer vectors per thread, then fewer threads) while the grid would
    // leave multiprocessors short of kLeastBlocksPerMultiprocessor blocks.
    // NHWC slices hold at most one channel per thread of the table.
    auto grid = [&](int threads, int per_thread, std::int64_t& slice, std::int64_t& slice_rows) {
        const std::int64_t vectors = static_cast<std::int64_t>(threads) * per_thread;
        if (!slices) return (elements + vectors * vector - 1) / (vectors * vector);
        slice = std::min<std::int64_t>(channel_vectors, std::max(1, threads / vector));
        slice_rows = std::max<std::int64_t>(1, vectors / slice);
        return (channel_vectors + slice - 1) / slice * ((rows + slice_rows - 1) / slice_rows);
    };
    const std::int64_t least = kLeastBlocksPerMultiprocessor * device.multiprocessors;
    int threads = kMaxThreads, per_thread = kMaxVectorsPerThread;
    std::int64_t slice = 0, slice_rows = 0;
    std::int64_t blocks = grid(threads, per_thread, slice, slice_rows);
    while (blocks < least && (per_thread > 1 || threads > kLeastThreads)) {
        if (per_thread > 1)
            per_thread /= 2;
        else
            threads /= 2;
        blocks = grid(threads, per_thread, slice, slice_rows);
    }

    InferenceArgs a{};
    a.x = x.data;
    a.y = p.y.data;
    a.channels = static_cast<int>(channels);
    a.spatial = x.order == MemoryOrder::packed_nhwc ? 1 : static_cast<int>(spatial);
    a.elements = static_cast<int>(elements);
    a.chunk = threads * per_thread * vector;
    a.slice = static_cast<int>(slice);
    a.slices = slices ? static_cast<int>((channel_vectors + slice - 1) / slice) : 0;
    a.slice_rows = static_cast<int>(slice_rows);
    a.rows = static_cast<int>(rows);
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
            auto go = [&](auto per) {
                constexpr int kK = decltype(per)::value;
                if (slices)
                    bn_dense_inference_slices<T, kK><<<static_cast<unsigned>(blocks), threads, 0, target.stream>>>(a);
                else
                    bn_dense_inference_planes<T, kK><<<static_cast<unsigned>(blocks), threads, 0, target.stream>>>(a);
            };
            switch (per_thread) {
                case 1: go(std::integral_constant<int, 1>{}); break;
                case 2: go(std::integral_constant<int, 2>{}); break;
                default: go(std::integral_constant<int, kMaxVectorsPerThread>{}); break;
            }
            check_launch("bn_dense_inference");
        }
    });
}

}  // namespace gpu
}  // namespace mbn
