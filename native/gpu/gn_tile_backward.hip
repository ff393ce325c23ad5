// Backward group norm on chip (gn_tile.hpp), one launch, from the saved
// mean and rstd.  With xhat = (x - mean) * rstd, z = xhat * w + b and
// g = dy * act'(z) (g = dy without activation):
//   dbias[c]   = sum over samples and positions of g
//   dweight[c] = sum over samples and positions of g * xhat
//   dx         = rstd * (w g - mean(w g) - xhat * mean(w g xhat))
// (group means; gn_backward.hip derives them).
//
// Each block loads its part of a tile, x and dy, into registers and sums
// g and g * xhat per channel; the tile's blocks add theirs through the
// cluster's shared memory (rank order), which gives the group means, and
// each block writes dx from its registers.  dweight and dbias add the
// per-sample sums: the first block of each tile stores its sample's sums,
// and the last tile of the same channels to arrive (gn_arrival.h) adds
// them in sample order.  Nothing waits for another cluster; every order is
// fixed, so results are bitwise repeatable.
#include "gpu/gn_activation.h"
#include "gpu/gn_arrival.h"
#include "gpu/gn_launch.hpp"
#include "gpu/gn_stat_io.h"
#include "gpu/gn_tile_device.h"
#include "gpu/gn_tile_launch.h"
#include "gpu/type_dispatch.hpp"

#include <type_traits>

namespace mbn {
namespace gpu {
namespace {

template <typename P>
struct GnTileBackwardArgs {
    GnTileWalk walk;
    const P* weight;  // nullptr: w = 1, and no dweight / dbias
    const P* bias;    // nullptr: b = 0 (only the activation needs it)
    P* dweight;
    P* dbias;
    std::int64_t weight_stride;
    std::int64_t bias_stride;
    std::int64_t dweight_stride;
    std::int64_t dbias_stride;
    GnStatTensor mean;
    GnStatTensor rstd;
    bool swish;
    float swish_beta;
    GnTileBackwardScratch scratch;  // when dweight is wanted
};

// What the elements of one lane (or row) share.
struct GnLaneTerms {
    float mean, rstd;  // the group's saved statistics
    float weight, bias;
};

// xhat and the pre-activation gradient g of one element, in the element
// arithmetic A.  The exact walk (A = double) takes the swish's derivative
// exactly too: there dx is a small remainder of w g, and g's float rounding
// (the special-function unit's derivative) showed in it (emulator, float32
// 4x32x2x2 groups of 16 with x within 1e-3 of 3: 1 value in 512 about 2e-5
// off in half the seeds tried).
template <typename A, typename P>
__device__ __forceinline__ void element_gradient(const GnTileBackwardArgs<P>& a, const GnLaneTerms& t, float x,
                                                 float dy, A& xhat, A& g) {
    xhat = (static_cast<A>(x) - static_cast<A>(t.mean)) * static_cast<A>(t.rstd);
    if constexpr (std::is_same<A, double>::value)
        g = a.swish ? dy * swish_derivative(xhat * t.weight + t.bias, static_cast<double>(a.swish_beta)) : dy;
    else
        g = a.swish ? dy * fast_swish_derivative(static_cast<float>(xhat) * t.weight + t.bias, a.swish_beta,
                                                swish_exponent_scale(a.swish_beta))
                    : dy;
}

// The block's sums of g and g * xhat per channel (block_channels()) into
// `block_sums` (every thread calls).  Positions fastest, a row's threads in
// a wave add theirs by shuffles and one per wave stores them; channels
// fastest, every thread stores its own.  Then a few threads per channel add
// its entries in a fixed order.
template <int W, int K, bool kInner, typename A>
__device__ void block_channel_sums(const GnTileWalk& w, const GnTileThread& at, A (&sum_g)[K], A (&sum_gx)[K],
                                   Sums2<A>* entries, Sums2<double>* block_sums) {
    const std::int64_t channels = w.block_channels();
    if (kInner) {
        if (at.active()) {
#pragma unroll
            for (int j = 0; j < K; ++j)
                entries[at.ty * channels + static_cast<std::int64_t>(at.tx) * W + j] = Sums2<A>{sum_g[j], sum_gx[j]};
        }
    } else {
        // A row's threads add by shuffles, every slot's sums one level at a
        // time: the level loop (bounded at run time) is paid once, not per
        // slot and sum.  The same additions in the same order per value.
        wave_sum(1, w.columns, sum_g, sum_gx);
        if ((at.tx & (MBN_WAVE_SIZE - 1)) == 0) {
            const int part = at.tx / MBN_WAVE_SIZE;
#pragma unroll
            for (int a = 0; a < K; ++a) {
                const std::int64_t row = at.ty + static_cast<std::int64_t>(a) * w.row_threads;
                if (row < at.part.rows) entries[part * channels + row] = Sums2<A>{sum_g[a], sum_gx[a]};
            }
        }
    }
    __syncthreads();
    // `team` consecutive threads (a power of two within a wave) per channel,
    // each adding every team-th entry, then among themselves by shuffles.
    const int rows = entry_rows(w, true, MBN_WAVE_SIZE);
    int team = 1;
    while (team < MBN_WAVE_SIZE && 2 * team * channels <= w.threads && team < rows) team *= 2;
    const int member = static_cast<int>(threadIdx.x) % team;
    const std::int64_t per_round = w.threads / team;
    for (std::int64_t first = 0; first < channels; first += per_round) {  // the same rounds for every thread
        const std::int64_t c = first + threadIdx.x / team;
        Sums2<double> sum{0.0, 0.0};
        if (c < channels)
            for (int e = member; e < rows; e += team) {
                const Sums2<A> entry = entries[e * channels + c];
                sum.a += static_cast<double>(entry.a);
                sum.b += static_cast<double>(entry.b);
            }
        wave_sum(1, team, sum);
        if (member == 0 && c < channels) block_sums[c] = sum;
    }
    __syncthreads();
}

// mean(w g) and mean(w g xhat) of each of the tile's groups into `terms`,
// from the tile's per-channel sums and the block's channels' weights
// (every thread calls; a wave per group).
template <bool kInner>
__device__ void group_terms(const GnTileWalk& w, const Sums2<double>* totals, const float* weights,
                            Sums2<double>* terms) {
    const int lane = static_cast<int>(threadIdx.x) % MBN_WAVE_SIZE;
    const int waves = w.threads / MBN_WAVE_SIZE;
    const int channels = static_cast<int>(w.channels);
    for (int group = static_cast<int>(threadIdx.x) / MBN_WAVE_SIZE; group < w.tile_groups; group += waves) {
        Sums2<double> sum{0.0, 0.0};
        for (int k = lane; k < channels; k += MBN_WAVE_SIZE) {
            const int c = (kInner ? group * channels : 0) + k;
            const double weight = weights[c];
            sum.a += weight * totals[c].a;
            sum.b += weight * totals[c].b;
        }
        wave_sum(1, MBN_WAVE_SIZE, sum);
        if (lane == 0) terms[group] = Sums2<double>{sum.a * w.inv_group_size, sum.b * w.inv_group_size};
    }
}

// dweight and dbias of the tile's channels: the cluster's first block
// stores this sample's sums; the last tile of these channels to arrive adds
// every sample's in order (every thread of the block calls).
template <typename P>
__device__ void parameter_gradients(const GnTileBackwardArgs<P>& args, const GnTileThread& at,
                                    const Sums2<double>* totals, std::int64_t channel0, int* last) {
    const GnTileWalk& w = args.walk;
    const std::int64_t channels = w.tile_channels();
    const std::int64_t samples = w.samples;
    const GnTileBackwardScratch& s = args.scratch;
    if (at.rank != 0) return;  // the same for the whole block
    for (std::int64_t c = threadIdx.x; c < channels; c += w.threads) {
        const std::int64_t at_c = (channel0 + c) * samples + at.n;
        s.sum_g[at_c] = totals[c].a;
        s.sum_g_xhat[at_c] = totals[c].b;
    }
    __threadfence();  // each thread's stores before the block's arrival
    __syncthreads();
    ArrivalCounter* counter = s.arrivals + at.tile;
    if (threadIdx.x == 0) *last = arrive(counter, static_cast<ArrivalCounter>(samples));
    __syncthreads();
    if (!*last) return;
    for (std::int64_t c = threadIdx.x; c < channels; c += w.threads) {
        const std::int64_t channel = channel0 + c;
        double g = 0.0, gx = 0.0;
        for (std::int64_t n = 0; n < samples; ++n) {
            g += load_coherent(s.sum_g + channel * samples + n);
            gx += load_coherent(s.sum_g_xhat + channel * samples + n);
        }
        args.dbias[channel * args.dbias_stride] = narrow<P>(g);
        args.dweight[channel * args.dweight_stride] = narrow<P>(gx);
    }
    if (threadIdx.x == 0) release(counter);
}

// Launched as tile_shared / launch_tile_kernel say.  dx may be x or dy:
// each thread reads its elements before it writes them, and no other
// thread reads them.  A: the element arithmetic, float, or double where
// the walk is exact (kGnTileExactGroup).
template <typename T, typename P, bool kInner, typename A>
__global__ void __launch_bounds__(kGnTileBackwardThreads, 1)
    gn_tile_backward(const T* x, const T* dy, T* dx, GnTileBackwardArgs<P> args) {
    constexpr int W = static_cast<int>(16 / sizeof(T));
    constexpr int R = std::is_same<A, double>::value ? kGnTileExactBackwardSlots : kGnTileBackwardSlots;
    constexpr int K = kInner ? W : R;  // sums per thread: per lane or per slot
    extern __shared__ double gn_tile_backward_shared[];
    const GnTileWalk& w = args.walk;
    require_cluster_support(w.cluster);
    const GnTileShared layout = tile_shared(w, true);
    const GnTileThread at(w, W);
    const unsigned held = held_slots<R>(at);
    Pack<T, W> raw_x[R], raw_dy[R];
    load_slots<R, W>(x, at, held, raw_x);
    load_slots<R, W>(dy, at, held, raw_dy);

    // A column past the part's vectors holds nothing (and names no group).
    const bool active = at.active();
    const GnLaneGroups lanes = lane_groups<W, kInner>(w, at.tx);
    const int split = kInner ? lanes.split : W;
    const std::int64_t group0 = static_cast<std::int64_t>(at.tile) * w.tile_groups;
    const std::int64_t channel0 = static_cast<std::int64_t>(at.tile) * w.tile_channels();
    void* shared = gn_tile_backward_shared;
    // The block's channels' weights for the group terms, fetched now so that
    // they arrive with x (the first barrier publishes them).
    float* block_weights = shared_at<float>(shared, layout.weights);
    for (int c = static_cast<int>(threadIdx.x); c < w.block_channels(); c += w.threads)
        block_weights[c] = channel_param(args.weight, args.weight_stride, channel0 + c, 1.0f);
    GnLaneTerms lo{0.0f, 0.0f, 1.0f, 0.0f}, hi = lo;
    if (active) {
        lo.mean = static_cast<float>(read_stat(args.mean, at.n, group0 + lanes.lo));
        lo.rstd = static_cast<float>(read_stat(args.rstd, at.n, group0 + lanes.lo));
        if (split < W) {
            hi.mean = static_cast<float>(read_stat(args.mean, at.n, group0 + lanes.lo + 1));
            hi.rstd = static_cast<float>(read_stat(args.rstd, at.n, group0 + lanes.lo + 1));
        }
    }
    // What the elements of a lane share (channels fastest: the lane is the
    // channel) or of a slot (positions fastest: the row is the channel),
    // fetched once for both passes.
    constexpr int kTerms = kInner ? W : R;
    GnLaneTerms terms_of[kTerms];
#pragma unroll
    for (int k = 0; k < kTerms; ++k) {
        terms_of[k] = kInner && k >= split ? hi : lo;
        const bool wanted = kInner ? active : (held & (1u << k)) != 0;
        if (wanted) {
            const std::int64_t c = channel0 + (kInner ? at.tx * W + k : at.row(w, k));
            terms_of[k].weight = channel_param(args.weight, args.weight_stride, c, 1.0f);
            terms_of[k].bias = channel_param(args.bias, args.bias_stride, c, 0.0f);
        }
    }
    auto element_terms = [&](int a, int j) -> const GnLaneTerms& { return terms_of[kInner ? j : a]; };

    // g of every element, kept for dx (dy is dead once g is known: the
    // registers are x's and g's, not x's, dy's and a second exp).
    A grad[R][W];
    A sum_g[K], sum_gx[K];
#pragma unroll
    for (int k = 0; k < K; ++k) sum_g[k] = sum_gx[k] = A(0);
#pragma unroll
    for (int a = 0; a < R; ++a) {
        if (!(held & (1u << a))) continue;
#pragma unroll
        for (int j = 0; j < W; ++j) {
            A xhat, g;
            element_gradient<A>(args, element_terms(a, j), widen(raw_x[a].lane[j]), widen(raw_dy[a].lane[j]), xhat,
                                g);
            grad[a][j] = g;
            const int k = kInner ? j : a;
            sum_g[k] += g;
            sum_gx[k] += g * xhat;
        }
    }

    Sums2<double>* block_sums = shared_at<Sums2<double>>(shared, layout.block);
    block_channel_sums<W, K, kInner>(w, at, sum_g, sum_gx, shared_at<Sums2<A>>(shared, layout.entries), block_sums);

    // The tile's sums per channel from every block's, in rank order.
    if (w.cluster > 1) cluster_sync();
    Sums2<double>* totals = shared_at<Sums2<double>>(shared, layout.totals);
    for (std::int64_t c = threadIdx.x; c < w.block_channels(); c += w.threads)
        totals[c] = cluster_total(block_sums + c, w.cluster);
    __syncthreads();
    // No more reads of other blocks' memory (nothing to publish: relaxed).
    if (w.cluster > 1) cluster_arrive_relaxed();

    Sums2<double>* terms = shared_at<Sums2<double>>(shared, layout.terms);
    group_terms<kInner>(w, totals, block_weights, terms);
    if (args.dweight != nullptr) parameter_gradients(args, at, totals, channel0, shared_at<int>(shared, layout.flag));
    __syncthreads();

    // Per lane: its group's mean(w g) and mean(w g xhat).
    A mean_wg[W], mean_wgx[W];
    {
        Sums2<double> lo_terms{0.0, 0.0}, hi_terms{0.0, 0.0};
        if (active) {
            lo_terms = terms[lanes.lo];
            if (split < W) hi_terms = terms[lanes.lo + 1];
        }
#pragma unroll
        for (int j = 0; j < W; ++j) {
            mean_wg[j] = static_cast<A>(j < split ? lo_terms.a : hi_terms.a);
            mean_wgx[j] = static_cast<A>(j < split ? lo_terms.b : hi_terms.b);
        }
    }
#pragma unroll
    for (int a = 0; a < R; ++a) {
        if (!(held & (1u << a))) continue;
        Pack<T, W> out;
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const GnLaneTerms& t = element_terms(a, j);
            const A xhat = (static_cast<A>(widen(raw_x[a].lane[j])) - static_cast<A>(t.mean)) * static_cast<A>(t.rstd);
            const A v = static_cast<A>(t.rstd) *
                        ((static_cast<A>(t.weight) * grad[a][j] - mean_wg[j]) - xhat * mean_wgx[j]);
            out.lane[j] = narrow<T>(v);
        }
        store_pack(dx + at.offset(a), out);
    }
    if (w.cluster > 1) cluster_wait();
}

template <typename T, typename P, bool kInner>
void launch_backward(const GnBackward& p, const GnTileWalk& walk, const LaunchTarget& target) {
    GnTileBackwardArgs<P> args{};
    args.walk = walk;
    if (p.affine) {
        args.weight = static_cast<const P*>(p.weight.data);
        args.weight_stride = p.weight.stride[kC];
        args.dweight = static_cast<P*>(p.dweight.data);
        args.dweight_stride = p.dweight.stride[kC];
        args.dbias = static_cast<P*>(p.dbias.data);
        args.dbias_stride = p.dbias.stride[kC];
        if (p.bias.present()) {
            args.bias = static_cast<const P*>(p.bias.data);
            args.bias_stride = p.bias.stride[kC];
        }
        args.scratch = carve_tile_backward_scratch(target.scratch, target.counters, walk);
    }
    args.mean = stat_tensor(p.mean);
    args.rstd = stat_tensor(p.rstd);
    args.swish = p.activation == Activation::swish;
    args.swish_beta = p.swish_beta;
    const auto* x = static_cast<const T*>(p.x.data);
    const auto* dy = static_cast<const T*>(p.dy.data);
    auto* dx = static_cast<T*>(p.dx.data);
    if constexpr (std::is_same<T, float>::value) {
        if (walk.exact) {
            launch_tile_kernel(gn_tile_backward<T, P, kInner, double>, walk, target.stream, "gn_tile_backward", x,
                               dy, dx, args);
            return;
        }
    }
    launch_tile_kernel(gn_tile_backward<T, P, kInner, float>, walk, target.stream, "gn_tile_backward", x, dy, dx,
                       args);
}

}  // namespace

void run_gn_tile_backward(const GnBackward& p, const GnTileWalk& walk, const LaunchTarget& target) {
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        if constexpr (std::is_same<T, double>::value) {
            fail(miopenStatusInternalError, "GPU backend: no on-chip group-norm kernel for float64");
        } else {
            const DType param_dtype = p.affine ? p.weight.dtype : DType::f32;
            with_parameter_type<T>(param_dtype, [&](auto p_tag) {
                using P = typename decltype(p_tag)::type;
                if (walk.channels_inner)
                    launch_backward<T, P, true>(p, walk, target);
                else
                    launch_backward<T, P, false>(p, walk, target);
            });
        }
    });
}

int gn_tile_backward_resident_clusters(int blocks) {
#if MBN_GPU_CUDA
    return resident_clusters(gn_tile_backward<__half, float, true, float>, kGnTileBackwardThreads, blocks);
#else
    // No clusters on AMD; naming the kernel here would ask hipcc for a host
    // stub of an instance it never emits (a link error).
    (void)blocks;
    return 0;
#endif
}

}  // namespace gpu
}  // namespace mbn
