// The split-phase (data-parallel) batch-norm ops on the GPU: local partial
// statistics, their merge, normalize with given statistics, and the two
// halves of backward.  Simple and deterministic: each per-feature reduction
// is one block that walks the feature's values in a fixed order and reduces
// its threads in a fixed tree (no atomics); the elementwise ops are one
// grid-stride loop.  Everything per feature and per element is computed in
// double, so any layout and type pair gives the same accuracy; speed is
// left to later work on these kernels.
//
// Offsets are computed from each tensor's own strides (TensorArg's
// normalized form: a length-1 dimension has stride 0), so every layout is
// served by the same kernels.  Statistics and parameter tensors are read and
// written through a run-time type switch: only x and dy are template types.
#include "common/bn_split_problem.hpp"
#include "common/numerics.hpp"
#include "gpu/block_reduce.h"
#include "gpu/bn_launch.hpp"
#include "gpu/hip_compat.h"
#include "gpu/norm_math.h"
#include "gpu/type_dispatch.hpp"

#include <algorithm>
#include <cstdint>

namespace mbn {
namespace gpu {
namespace {

constexpr int kSplitThreads = 256;
constexpr std::int64_t kMaxGridBlocks = std::int64_t(1) << 20;

// A tensor as the kernels see it: plain arrays, passed by value.
struct View {
    void* data;
    DType dtype;
    std::int64_t len[kDims];
    std::int64_t stride[kDims];
};

View view_of(const TensorArg& t) {
    View v{};
    v.data = t.data;
    v.dtype = t.dtype;
    for (int d = 0; d < kDims; ++d) {
        v.len[d] = t.len[d];
        v.stride[d] = t.stride[d];
    }
    return v;
}

// Logical coordinates (n, c, d, h, w) of one element.
struct Coords {
    std::int64_t i[kDims];
};

__device__ __forceinline__ std::int64_t offset_of(const View& t, const Coords& at) {
    std::int64_t offset = 0;
#pragma unroll
    for (int d = 0; d < kDims; ++d) offset += at.i[d] * t.stride[d];
    return offset;
}

// Row-major decomposition of `index` over dimensions [first, kDims) of `len`.
__device__ __forceinline__ void decompose(std::int64_t index, const std::int64_t (&len)[kDims], int first,
                                          Coords& at) {
    for (int d = kDims - 1; d >= first; --d) {
        at.i[d] = index % len[d];
        index /= len[d];
    }
}

__device__ double load_any(const View& t, std::int64_t offset) {
    switch (t.dtype) {
        case DType::f16: return widen(static_cast<const __half*>(t.data)[offset]);
        case DType::bf16: return widen(static_cast<const mbn_bfloat16*>(t.data)[offset]);
        case DType::f32: return static_cast<const float*>(t.data)[offset];
        case DType::f64: return static_cast<const double*>(t.data)[offset];
    }
    return 0.0;
}

// t[offset] = alpha * value + beta * t[offset], the prior read only when beta != 0.
__device__ void store_any(const View& t, std::int64_t offset, double value, float alpha = 1.0f, float beta = 0.0f) {
    value *= alpha;
    if (beta != 0.0f) value += static_cast<double>(beta) * load_any(t, offset);
    switch (t.dtype) {
        case DType::f16: static_cast<__half*>(t.data)[offset] = narrow<__half>(value); return;
        case DType::bf16: static_cast<mbn_bfloat16*>(t.data)[offset] = narrow<mbn_bfloat16>(value); return;
        case DType::f32: static_cast<float*>(t.data)[offset] = static_cast<float>(value); return;
        case DType::f64: static_cast<double*>(t.data)[offset] = value; return;
    }
}

// The feature-major walk of one batch-norm problem: feature p's coordinates,
// and the coordinates of its r-th value (0 <= r < M) from them.
struct FeatureWalk {
    std::int64_t len[kDims];  // x's
    bool spatial;

    __device__ std::int64_t reduction() const {
        return spatial ? len[kN] * len[kD] * len[kH] * len[kW] : len[kN];
    }
    __device__ Coords feature(std::int64_t p) const {
        Coords at{};
        if (spatial)
            at.i[kC] = p;
        else
            decompose(p, len, kC, at);
        return at;
    }
    __device__ Coords value(Coords at, std::int64_t r) const {
        if (!spatial) {
            at.i[kN] = r;
            return at;
        }
        decompose(r, len, kD, at);  // (d, h, w), then n from what is left
        at.i[kN] = r / (len[kD] * len[kH] * len[kW]);
        return at;
    }
    // The parameter element of a data element: its (c, d, h, w); a
    // parameter tensor's length-1 dimensions have stride 0.
    __device__ static Coords param(Coords at) {
        at.i[kN] = 0;
        return at;
    }
};

FeatureWalk walk_of(const BnGeometry& geom) {
    FeatureWalk walk{};
    for (int d = 0; d < kDims; ++d) walk.len[d] = geom.len[d];
    walk.spatial = geom.mode == BnMode::spatial;
    return walk;
}

// One block per feature: threads along y, as many as the reduction can use
// (a power of two, 32 to 256).
dim3 reduction_block(const BnGeometry& geom) {
    const std::int64_t m = geom.reduction_size();
    unsigned rows = 32;
    while (rows < static_cast<unsigned>(kSplitThreads) && rows < m) rows *= 2;
    return dim3(1, rows);
}

unsigned elementwise_blocks(std::int64_t count) {
    return static_cast<unsigned>(std::min<std::int64_t>((count + kSplitThreads - 1) / kSplitThreads, kMaxGridBlocks));
}

// ---- kernels -------------------------------------------------------------------

// count = M, mean and M2 per feature, from sums shifted by its first value.
template <typename T>
__global__ void local_statistics_kernel(FeatureWalk walk, View x, View count, View mean, View m2) {
    __shared__ Sums2<double> shared[kSplitThreads];
    const Coords feature = walk.feature(blockIdx.x);
    const std::int64_t m = walk.reduction();
    const T* data = static_cast<const T*>(x.data);
    const double center = statistics_shift(widen(data[offset_of(x, walk.value(feature, 0))]));
    Sums2<double> sums{0.0, 0.0};
    for (std::int64_t r = threadIdx.y; r < m; r += blockDim.y) {
        const double d = static_cast<double>(widen(data[offset_of(x, walk.value(feature, r))])) - center;
        sums.a += d;
        sums.b += d * d;
    }
    sums = reduce_over_rows(sums, shared);
    if (threadIdx.y != 0) return;
    const double n = static_cast<double>(m);
    const double shift = sums.a / n;
    const double squares = sums.b - sums.a * shift;
    const Coords at = FeatureWalk::param(feature);
    store_any(count, offset_of(count, at), n);
    store_any(mean, offset_of(mean, at), center + shift);
    store_any(m2, offset_of(m2, at), squares < 0.0 ? 0.0 : squares);  // rounding below 0
}

struct MergeArgs {
    View count, mean, m2;  // len[kN] = K ranks
    View saved_mean, saved_inv_std, running_mean, running_var;
    bool running;
    double epsilon, factor;
    std::int64_t features;
};

// One thread per feature: Chan's merge rank by rank, in rank order (the
// CPU backend's order, so both give the same bits).
__global__ void merge_statistics_kernel(MergeArgs a) {
    const std::int64_t p = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= a.features) return;
    Coords at{};
    decompose(p, a.count.len, kC, at);
    MergedMoments m;
    for (std::int64_t k = 0; k < a.count.len[kN]; ++k) {
        at.i[kN] = k;
        const double nk = load_any(a.count, offset_of(a.count, at));
        if (nk == 0.0) continue;  // skips the loads; add() would skip it too
        m.add(nk, load_any(a.mean, offset_of(a.mean, at)), load_any(a.m2, offset_of(a.m2, at)));
    }
    if (m.count == 0.0) m.mean = m.m2 = __longlong_as_double(0x7ff8000000000000LL);  // NaN
    const double var = biased_variance(m.m2, m.count);
    at.i[kN] = 0;
    store_any(a.saved_mean, offset_of(a.saved_mean, at), m.mean);
    store_any(a.saved_inv_std, offset_of(a.saved_inv_std, at), inverse_std(var, a.epsilon));
    if (!a.running) return;
    const double unbiased = unbiased_variance(var, m.count);
    const std::int64_t rm = offset_of(a.running_mean, at), rv = offset_of(a.running_var, at);
    store_any(a.running_mean, rm, running_update(load_any(a.running_mean, rm), m.mean, a.factor));
    store_any(a.running_var, rv, running_update(load_any(a.running_var, rv), unbiased, a.factor));
}

// y = alpha * ((x - mean) * inv_std * scale + bias) + beta * y.
template <typename T>
__global__ void normalize_kernel(View x, View y, View scale, View bias, View mean, View inv_std, float alpha,
                                 float beta, std::int64_t total) {
    const T* in = static_cast<const T*>(x.data);
    T* out = static_cast<T*>(y.data);
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        Coords at{};
        decompose(i, x.len, kN, at);
        const Coords pa = FeatureWalk::param(at);
        const double value = (static_cast<double>(widen(in[offset_of(x, at)])) - load_any(mean, offset_of(mean, pa))) *
                                 load_any(inv_std, offset_of(inv_std, pa)) * load_any(scale, offset_of(scale, pa)) +
                             load_any(bias, offset_of(bias, pa));
        store_blended(out, offset_of(y, at), value, alpha, beta);
    }
}

struct ReduceArgs {
    FeatureWalk walk;
    View x, dy, mean, inv_std, sum_dy, sum_dy_xmu, dscale, dbias;
    bool gradients;
    float alpha, beta;  // dscale / dbias blending
};

// Per feature: Σdy and Σdy·(x - mean); dbias = Σdy, dscale = Σdy·(x - mean) * inv_std.
template <typename T, typename G>
__global__ void backward_reduce_kernel(ReduceArgs a) {
    __shared__ Sums2<double> shared[kSplitThreads];
    const Coords feature = a.walk.feature(blockIdx.x);
    const Coords pa = FeatureWalk::param(feature);
    const double mean = load_any(a.mean, offset_of(a.mean, pa));
    const std::int64_t m = a.walk.reduction();
    const T* x = static_cast<const T*>(a.x.data);
    const G* dy = static_cast<const G*>(a.dy.data);
    Sums2<double> sums{0.0, 0.0};
    for (std::int64_t r = threadIdx.y; r < m; r += blockDim.y) {
        const Coords at = a.walk.value(feature, r);
        const double g = widen(dy[offset_of(a.dy, at)]);
        sums.a += g;
        sums.b += g * (static_cast<double>(widen(x[offset_of(a.x, at)])) - mean);
    }
    sums = reduce_over_rows(sums, shared);
    if (threadIdx.y != 0) return;
    store_any(a.sum_dy, offset_of(a.sum_dy, pa), sums.a);
    store_any(a.sum_dy_xmu, offset_of(a.sum_dy_xmu, pa), sums.b);
    if (!a.gradients) return;
    const double inv_std = load_any(a.inv_std, offset_of(a.inv_std, pa));
    store_any(a.dscale, offset_of(a.dscale, pa), sums.b * inv_std, a.alpha, a.beta);
    store_any(a.dbias, offset_of(a.dbias, pa), sums.a, a.alpha, a.beta);
}

struct ElementwiseArgs {
    View x, dy, dx, scale, mean, inv_std, sum_dy, sum_dy_xmu, count;
    float alpha, beta;
    std::int64_t total;
};

// dx = scale * inv_std * (dy - Σdy/n - (x - mean) * inv_std² * Σdy·(x - mean)/n).
template <typename T, typename G>
__global__ void backward_elementwise_kernel(ElementwiseArgs a) {
    const T* x = static_cast<const T*>(a.x.data);
    const G* dy = static_cast<const G*>(a.dy.data);
    G* dx = static_cast<G*>(a.dx.data);
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.total;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        Coords at{};
        decompose(i, a.x.len, kN, at);
        const Coords pa = FeatureWalk::param(at);
        const double inv_std = load_any(a.inv_std, offset_of(a.inv_std, pa));
        const double n = load_any(a.count, offset_of(a.count, pa));
        const double xmu = static_cast<double>(widen(x[offset_of(a.x, at)])) - load_any(a.mean, offset_of(a.mean, pa));
        const double value = load_any(a.scale, offset_of(a.scale, pa)) * inv_std *
                             (static_cast<double>(widen(dy[offset_of(a.dy, at)])) -
                              load_any(a.sum_dy, offset_of(a.sum_dy, pa)) / n -
                              xmu * inv_std * inv_std * load_any(a.sum_dy_xmu, offset_of(a.sum_dy_xmu, pa)) / n);
        store_blended(dx, offset_of(a.dx, at), value, a.alpha, a.beta);
    }
}

}  // namespace

// ---- launches (declared in gpu_backend.hip) --------------------------------------

void run_local_statistics(const BnLocalStatistics& p, const LaunchTarget& target) {
    with_element_type(p.x.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        local_statistics_kernel<T>
            <<<dim3(static_cast<unsigned>(p.geom.feature_count())), reduction_block(p.geom), 0, target.stream>>>(
                walk_of(p.geom), view_of(p.x), view_of(p.count), view_of(p.mean), view_of(p.m2));
        check_launch("local_statistics_kernel");
    });
}

void run_merge_statistics(const BnMergeStatistics& p, const LaunchTarget& target) {
    MergeArgs a{view_of(p.count),         view_of(p.mean),         view_of(p.m2),
                view_of(p.saved_mean),    view_of(p.saved_inv_std), view_of(p.running_mean),
                view_of(p.running_var),   p.running_mean.present(), p.epsilon,
                p.exp_avg_factor,         p.count.element_count() / p.ranks()};
    const unsigned blocks = static_cast<unsigned>((a.features + kSplitThreads - 1) / kSplitThreads);
    merge_statistics_kernel<<<blocks, kSplitThreads, 0, target.stream>>>(a);
    check_launch("merge_statistics_kernel");
}

void run_split_normalize(const BnNormalize& p, const LaunchTarget& target) {
    const std::int64_t total = p.x.element_count();
    with_element_type(p.x.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        normalize_kernel<T><<<elementwise_blocks(total), kSplitThreads, 0, target.stream>>>(
            view_of(p.x), view_of(p.y), view_of(p.scale), view_of(p.bias), view_of(p.mean), view_of(p.inv_std),
            p.out.alpha, p.out.beta, total);
        check_launch("normalize_kernel");
    });
}

void run_backward_reduce(const BnBackwardReduce& p, const LaunchTarget& target) {
    const ReduceArgs a{walk_of(p.geom),      view_of(p.x),          view_of(p.dy),     view_of(p.mean),
                       view_of(p.inv_std),   view_of(p.sum_dy),     view_of(p.sum_dy_xmu), view_of(p.dscale),
                       view_of(p.dbias),     p.dscale.present(),    p.param.alpha,     p.param.beta};
    with_element_type(p.x.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        with_gradient_type<T>(p.x.dtype, p.dy.dtype, [&](auto grad) {
            using G = typename decltype(grad)::type;
            backward_reduce_kernel<T, G>
                <<<dim3(static_cast<unsigned>(p.geom.feature_count())), reduction_block(p.geom), 0, target.stream>>>(a);
            check_launch("backward_reduce_kernel");
        });
    });
}

void run_backward_elementwise(const BnBackwardElementwise& p, const LaunchTarget& target) {
    const ElementwiseArgs a{view_of(p.x),      view_of(p.dy),     view_of(p.dx),         view_of(p.scale),
                            view_of(p.mean),   view_of(p.inv_std), view_of(p.sum_dy),    view_of(p.sum_dy_xmu),
                            view_of(p.count),  p.data.alpha,       p.data.beta,          p.x.element_count()};
    with_element_type(p.x.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        with_gradient_type<T>(p.x.dtype, p.dy.dtype, [&](auto grad) {
            using G = typename decltype(grad)::type;
            backward_elementwise_kernel<T, G><<<elementwise_blocks(a.total), kSplitThreads, 0, target.stream>>>(a);
            check_launch("backward_elementwise_kernel");
        });
    });
}

}  // namespace gpu
}  // namespace mbn
