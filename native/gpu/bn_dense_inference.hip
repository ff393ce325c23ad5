// Spatial batch-norm inference on packed NCHW / NHWC (NCDHW / NDHWC)
// tensors: one elementwise pass, 16 bytes per access, 32-bit indexing.
//
// No shared memory and no barrier: each thread derives the coefficients of
// its own channels from the estimates while its loads are in flight, so its
// stores wait on nothing but its own data.  A block-wide channel table
// (filled, then a barrier, then the stores) held half the occupancy in
// registers and shared memory and a whole block on its slowest load: 0.72x-
// 0.95x of torch.compile's elementwise kernel (bench/RESULTS.md, nineteenth
// session).
//
// y = (x - mean) * factor + bias with factor = scale * inv_std, alpha folded
// into factor and bias; x - mean is taken first so that a channel with mean
// 1e4 and std 1e-2 keeps its digits.
//
// Three walks of the same arithmetic:
// - columns: NHWC (or N x C x 1 x 1) with C a multiple of the vector.  A
//   thread keeps one channel vector and takes it down K rows, so its V
//   channels' coefficients are derived once.
// - planes: NCHW with planes of at least a vector.  Consecutive threads take
//   consecutive vectors; a vector lies in one plane or straddles two, so a
//   thread derives its channel's coefficients per vector, and the next
//   channel's where the vector straddles.
// - lanes: the rest (NHWC with C not a multiple of the vector, NCHW planes
//   shorter than a vector): each lane its own channel.
#include "gpu/bn_dense_inference.hpp"

#include "gpu/bn_planner.hpp"
#include "gpu/divisor.hpp"
#include "gpu/norm_math.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace mbn {
namespace gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kLeastThreads = 64;
// 16-byte vectors per thread (rows of its channel vector in the columns),
// all loaded before any is used.  Planes derive two channels' coefficients
// for each vector, so more vectors cost them registers for little.
constexpr int kMaxVectorsPerThread = 4;
constexpr int kMaxPlaneVectorsPerThread = 2;
// Blocks per multiprocessor below which a call takes fewer vectors per
// thread, then smaller blocks: a small tensor in a few blocks leaves most
// multiprocessors idle.
constexpr std::int64_t kLeastBlocksPerMultiprocessor = 2;

enum class Walk { columns, planes, lanes };

// Kept small: a kernel's parameters are read through the constant cache,
// whose misses a small tensor's whole pass waits on.
struct InferenceArgs {
    const void* x;
    void* y;
    const float* mean;
    const float* var;  // the variance, or inv_std with var_is_inv_std
    const float* scale;
    const float* bias;
    int channels, spatial, elements;
    Divisor plane_of;    // element -> plane (NCHW: / spatial)
    Divisor channel_of;  // plane -> its channel (% channels)
    // columns: rows of `channels` elements, K times a block's rows_per_step
    // (its blockDim.y) a block.
    int rows, channel_vectors;
    float epsilon, alpha, beta;
    bool var_is_inv_std;
    bool vector_estimates;  // 16-byte aligned: read four channels at a time
};

struct Coefficients {
    float mean, factor, bias;
};

// rsqrtf is within 2 ulp of float: far inside the float tolerance, and a
// fraction of IEEE sqrt and division's latency, which a small tensor's pass
// waits on.
__device__ __forceinline__ Coefficients combine(float mean, float var, float scale, float bias, const InferenceArgs& a) {
    const float inv_std = a.var_is_inv_std ? var : rsqrtf(var + a.epsilon);
    return Coefficients{mean, a.alpha * scale * inv_std, a.alpha * bias};
}

// Channel c's (mean, alpha * scale * inv_std, alpha * bias).
__device__ __forceinline__ Coefficients coefficients_of(int c, const InferenceArgs& a) {
    return combine(a.mean[c], a.var[c], a.scale[c], a.bias[c], a);
}

__device__ __forceinline__ float apply(float x, const Coefficients& k) { return (x - k.mean) * k.factor + k.bias; }

// y at p from the V results, blended with the prior y only when beta != 0
// (alpha is already in the coefficients).
template <typename T, int V>
__device__ __forceinline__ void store_result(T* p, const float (&result)[V], float beta) {
    if (beta == 0.0f) {
        Pack<T, V> pack;
#pragma unroll
        for (int v = 0; v < V; ++v) pack.lane[v] = narrow<T>(result[v]);
        store_pack(p, pack);
    } else {
        store_values<T, V>(p, result, 1.0f, beta);
    }
}

// Channels c0 .. c0 + V - 1 (c0 a multiple of V >= 4): from 16-byte
// aligned estimates, one 16-byte load per four channels; scalar loads of
// neighbouring threads' channels 32 bytes apart took four times the load
// wavefronts.
template <int V>
__device__ __forceinline__ void coefficients_of_vector(int c0, const InferenceArgs& a, Coefficients (&c)[V]) {
    if (a.vector_estimates) {
        float mean[V], var[V], scale[V], bias[V];
#pragma unroll
        for (int q = 0; q < V; q += 4) {
            *reinterpret_cast<float4*>(mean + q) = *reinterpret_cast<const float4*>(a.mean + c0 + q);
            *reinterpret_cast<float4*>(var + q) = *reinterpret_cast<const float4*>(a.var + c0 + q);
            *reinterpret_cast<float4*>(scale + q) = *reinterpret_cast<const float4*>(a.scale + c0 + q);
            *reinterpret_cast<float4*>(bias + q) = *reinterpret_cast<const float4*>(a.bias + c0 + q);
        }
#pragma unroll
        for (int v = 0; v < V; ++v) c[v] = combine(mean[v], var[v], scale[v], bias[v], a);
    } else {
#pragma unroll
        for (int v = 0; v < V; ++v) c[v] = coefficients_of(c0 + v, a);
    }
}

// Columns: block (bx, by) takes channel vectors [by * W, by * W + W) (W =
// blockDim.x) of rows bx * K * R + k * R + threadIdx.y, k < K (R =
// blockDim.y).  A warp covers whole rows or a run of one row: contiguous.
// One such step a block: a grid capped at 8 blocks a multiprocessor, each
// stepping over the rows so that its threads' coefficients served several
// steps, ran the large NHWC rows 1.03x-1.07x slower (H200, bench/RESULTS.md,
// thirty-seventh session: 256x64x56x56 float 110.0 -> 103 us).
//
// Blocks a multiprocessor asked for (0: left to the compiler).  Unasked,
// bfloat16's K = 4 took 87 registers, two blocks, and ran 9% behind half on
// the same bytes (ncu: achieved occupancy 23% against 46%); held to four it
// spilled (56 bytes of stack) and lost up to 21%, held to three it takes 80
// registers, no stack, and ran 1.06x-1.15x faster on 6 of 7 NHWC rows
// (H200, run64: 256x64x56x56 64.3 -> 59.3 us).  Half reaches four blocks
// unasked and lost up to 4% when held to three; float did not move.
template <typename T>
constexpr int columns_min_blocks() {
    return std::is_same<T, mbn_bfloat16>::value ? 3 : 0;
}

template <typename T, int K>
__global__ void __launch_bounds__(kThreads, (columns_min_blocks<T>())) bn_inference_columns(InferenceArgs a) {
    constexpr int V = 16 / sizeof(T);
    const int j = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x);
    if (j >= a.channel_vectors) return;  // no barrier below
    const int rows_per_step = static_cast<int>(blockDim.y);
    const T* x = static_cast<const T*>(a.x);
    T* y = static_cast<T*>(a.y);
    Pack<T, V> xv[K];
    auto row_of = [&](int k) {
        return (static_cast<int>(blockIdx.x) * K + k) * rows_per_step + static_cast<int>(threadIdx.y);
    };
#pragma unroll
    for (int k = 0; k < K; ++k)
        if (row_of(k) < a.rows) xv[k] = load_pack<V>(x + row_of(k) * a.channels + j * V);
    Coefficients c[V];
    coefficients_of_vector<V>(j * V, a, c);
#pragma unroll
    for (int k = 0; k < K; ++k) {
        if (row_of(k) >= a.rows) continue;
        float result[V];
#pragma unroll
        for (int v = 0; v < V; ++v) result[v] = apply(widen(xv[k].lane[v]), c[v]);
        store_result<T, V>(y + row_of(k) * a.channels + j * V, result, a.beta);
    }
}

// Element e's channel.
__device__ __forceinline__ int channel_at(int e, const InferenceArgs& a) {
    const int plane = a.plane_of.divide(e);
    return plane - a.channel_of.divide(plane) * a.channels;
}

// Planes and lanes: block b takes vectors b * K * B + k * B + threadIdx.x
// (B = blockDim.x); the tensor's last vector may be partial (NCHW with an
// element count not a multiple of the vector) and is taken lane by lane.
template <typename T, Walk kWalk, int K>
__global__ void __launch_bounds__(kThreads) bn_inference_flat(InferenceArgs a) {
    constexpr int V = 16 / sizeof(T);
    const int threads = static_cast<int>(blockDim.x);
    const int first = static_cast<int>(blockIdx.x) * K * threads + static_cast<int>(threadIdx.x);
    const T* x = static_cast<const T*>(a.x);
    T* y = static_cast<T*>(a.y);
    Pack<T, V> xv[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int e = (first + k * threads) * V;
        if (e + V <= a.elements) xv[k] = load_pack<V>(x + e);
    }
    // Every coefficient before the first store: a load after a store to y
    // could not be moved above it (the compiler cannot rule out aliasing).
    // Planes lie in channel c0, then from lane `spatial - r0` on in the next.
    Coefficients first_set[K], next_set[K];
    int boundary[K];
    if constexpr (kWalk == Walk::planes) {
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const int e = min((first + k * threads) * V, a.elements - 1);
            const int plane = a.plane_of.divide(e);
            const int c0 = plane - a.channel_of.divide(plane) * a.channels;
            boundary[k] = plane * a.spatial + a.spatial - e;
            first_set[k] = coefficients_of(c0, a);
            // Most vectors lie in one plane; a warp whose vectors all do skips the next set.
            next_set[k] = boundary[k] < V ? coefficients_of(c0 + 1 == a.channels ? 0 : c0 + 1, a) : first_set[k];
        }
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int e = (first + k * threads) * V;
        if (e >= a.elements) MBN_UNROLLED_EXIT;
        if (e + V > a.elements) {  // the partial last vector
            for (int i = e; i < a.elements; ++i)
                store_blended(y, i, apply(widen(x[i]), coefficients_of(channel_at(i, a), a)), 1.0f, a.beta);
            break;
        }
        float result[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
            if constexpr (kWalk == Walk::planes) {
                const bool next = v >= boundary[k];
                const Coefficients c{next ? next_set[k].mean : first_set[k].mean,
                                     next ? next_set[k].factor : first_set[k].factor,
                                     next ? next_set[k].bias : first_set[k].bias};
                result[v] = apply(widen(xv[k].lane[v]), c);
            } else {
                result[v] = apply(widen(xv[k].lane[v]), coefficients_of(channel_at(e + v, a), a));
            }
        }
        store_result<T, V>(y + e, result, a.beta);
    }
}

Walk walk_of(const BnForwardInference& p) {
    const int vector = 16 / static_cast<int>(dtype_size(p.x.dtype));
    const bool rows_of_channels = p.x.order == MemoryOrder::packed_nhwc || p.geom.spatial_size() == 1;
    if (rows_of_channels && p.geom.len[kC] % vector == 0) return Walk::columns;
    if (p.x.order == MemoryOrder::packed_nchw && p.geom.spatial_size() >= vector) return Walk::planes;
    return Walk::lanes;
}

// The estimates as the kernels read them: float, one per channel, packed.
// PyTorch and MIOpen's derived descriptors pass them so for half, bfloat16
// and float data; other types and strides take the nest walk.
bool unit_float(const TensorArg& t) { return t.present() && t.dtype == DType::f32 && t.stride[kC] == 1; }

template <typename T>
void launch(Walk walk, int per_thread, dim3 grid, dim3 block, const InferenceArgs& a, hipStream_t stream) {
    if (walk == Walk::columns) {
        static_assert(kMaxVectorsPerThread == 4, "columns are instantiated for 1, 2 and 4 vectors a thread");
        if (per_thread == 4) bn_inference_columns<T, 4><<<grid, block, 0, stream>>>(a);
        if (per_thread == 2) bn_inference_columns<T, 2><<<grid, block, 0, stream>>>(a);
        if (per_thread == 1) bn_inference_columns<T, 1><<<grid, block, 0, stream>>>(a);
    } else if (walk == Walk::planes) {
        static_assert(kMaxPlaneVectorsPerThread == 2, "planes are instantiated for 1 and 2 vectors a thread");
        if (per_thread == 2) bn_inference_flat<T, Walk::planes, 2><<<grid, block, 0, stream>>>(a);
        if (per_thread == 1) bn_inference_flat<T, Walk::planes, 1><<<grid, block, 0, stream>>>(a);
    } else {
        bn_inference_flat<T, Walk::lanes, 1><<<grid, block, 0, stream>>>(a);
    }
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
    for (const TensorArg* t : {&p.mean, &p.var, &p.scale, &p.bias})
        if (!unit_float(*t)) return false;
    return x.element_count() < (std::int64_t(1) << 31) - 4096;
}

void run_dense_inference(const BnForwardInference& p, const DeviceShape& device, const LaunchTarget& target) {
    const TensorArg& x = p.x;
    const std::int64_t elements = x.element_count();
    const std::int64_t channels = p.geom.len[kC];
    const std::int64_t spatial = x.order == MemoryOrder::packed_nhwc ? 1 : p.geom.spatial_size();
    const int vector = 16 / static_cast<int>(dtype_size(x.dtype));
    const Walk walk = walk_of(p);
    const std::int64_t rows = elements / channels;
    const std::int64_t channel_vectors = channels / vector;

    // Blocks of kThreads threads x the walk's vectors a thread, made smaller
    // (fewer vectors a thread, then fewer threads) while the grid would
    // leave multiprocessors short of kLeastBlocksPerMultiprocessor.
    // Columns: blocks of W channel vectors x R rows.
    std::int64_t width = 0, rows_per_step = 0, column_blocks = 1;
    auto grid = [&](int threads, int per_thread) -> std::int64_t {
        if (walk != Walk::columns) {
            const std::int64_t vectors = (elements + vector - 1) / vector;
            return (vectors + std::int64_t(threads) * per_thread - 1) / (std::int64_t(threads) * per_thread);
        }
        width = std::min<std::int64_t>(channel_vectors, threads);
        rows_per_step = std::max<std::int64_t>(1, threads / width);
        column_blocks = (channel_vectors + width - 1) / width;
        const std::int64_t rows_per_block = rows_per_step * per_thread;
        return (rows + rows_per_block - 1) / rows_per_block;
    };
    const std::int64_t least = kLeastBlocksPerMultiprocessor * device.multiprocessors;
    // Lanes take one vector a thread (their coefficients are per lane).
    int threads = kThreads;
    int per_thread = walk == Walk::lanes ? 1 : walk == Walk::planes ? kMaxPlaneVectorsPerThread : kMaxVectorsPerThread;
    std::int64_t blocks = grid(threads, per_thread);
    while (blocks * column_blocks < least && (per_thread > 1 || threads > kLeastThreads)) {
        if (per_thread > 1)
            per_thread /= 2;
        else
            threads /= 2;
        blocks = grid(threads, per_thread);
    }

    InferenceArgs a{};
    a.x = x.data;
    a.y = p.y.data;
    a.mean = static_cast<const float*>(p.mean.data);
    a.var = static_cast<const float*>(p.var.data);
    a.scale = static_cast<const float*>(p.scale.data);
    a.bias = static_cast<const float*>(p.bias.data);
    a.channels = static_cast<int>(channels);
    a.spatial = static_cast<int>(spatial);
    a.elements = static_cast<int>(elements);
    a.plane_of = make_divisor(static_cast<int>(spatial));
    a.channel_of = make_divisor(static_cast<int>(channels));
    a.rows = static_cast<int>(rows);
    a.channel_vectors = static_cast<int>(channel_vectors);
    a.epsilon = static_cast<float>(p.epsilon);
    a.alpha = p.out.alpha;
    a.beta = p.out.beta;
    a.var_is_inv_std = p.var_is_inv_std;
    a.vector_estimates = aligned16(p.mean) && aligned16(p.var) && aligned16(p.scale) && aligned16(p.bias);
    const dim3 grid_shape = walk == Walk::columns
                                ? dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(column_blocks))
                                : dim3(static_cast<unsigned>(blocks));
    const dim3 block = walk == Walk::columns
                           ? dim3(static_cast<unsigned>(width), static_cast<unsigned>(rows_per_step))
                           : dim3(static_cast<unsigned>(threads));
    switch (x.dtype) {
        case DType::f16: launch<__half>(walk, per_thread, grid_shape, block, a, target.stream); break;
        case DType::bf16: launch<mbn_bfloat16>(walk, per_thread, grid_shape, block, a, target.stream); break;
        default: launch<float>(walk, per_thread, grid_shape, block, a, target.stream); break;
    }
    check_launch("bn_dense_inference");
}

}  // namespace gpu
}  // namespace mbn
