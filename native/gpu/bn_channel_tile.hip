// Spatial batch-norm training and backward with each tile of channels owned
// by one block, or by one thread-block cluster (bn_channel_tile.hpp).
//
// A tile is one channel of packed NCHW, or 8-16 neighbouring channels of
// packed NHWC.  The tile's blocks load their share of x (and dy) into
// registers, a few vectors (16 bytes, or the widest that divides an NCHW
// plane) per thread, all loads issued before any is used; sum it; meet the
// other blocks of the cluster through distributed shared memory; and write
// y (or dx) from the registers.  One launch, no
// scratch, each value read from DRAM once and its loads in flight together:
// what small and medium tensors need, where a grid-wide barrier, a second
// launch or a second read would cost more than the data.
// Numerics as bn_resident.hip: values around the channel's first value,
// statistics summed in float per vector then double, gradient sums in double.
#include "gpu/bn_channel_tile.hpp"

#include "common/environment.hpp"
#include "common/numerics.hpp"
#include "gpu/bn_device_math.h"
#include "gpu/bn_dispatch.hpp"
#include "gpu/cluster_launch.h"
#include "gpu/gn_cluster.h"
#include "gpu/param_io.h"

#include <algorithm>
#include <cstdint>

namespace mbn {
namespace gpu {
namespace {

constexpr int kMaxThreads = 512;
constexpr int kMaxWaves = kMaxThreads / 32;
constexpr int kMaxTileChannels = 16;  // NHWC: 2 lanes of 8 half channels
constexpr int kMaxPerThread = 4;      // vectors per thread and tensor, in registers
// Threads per multiprocessor the grid aims at (a block's share of them).
constexpr std::int64_t kResidentThreadsAimed = 1024;
// The most vectors a block of a cluster of several takes by default.
constexpr std::int64_t kMostClusteredUnits = 512;

struct TileArgs {
    const void* x;
    const void* dy;
    void* out;  // y or dx
    int channels;
    int plane_units;  // NCHW: vectors per plane (S / V)
    int units;        // per tile: NCHW vectors of the channel, NHWC rows (N*H*W)
    int block_units;  // units per block of a tile
    int lanes;        // threads side by side across a row of the tile (NHWC), else 1
    int cluster;      // blocks per tile, one cluster
    double count;     // values per channel
    ChannelParam scale, bias, prev_mean, prev_var, running_mean, running_var, saved_mean, saved_inv_std;
    ChannelParam dscale, dbias;
    double epsilon, exp_avg_factor;
    float alpha, beta, param_alpha, param_beta;
    bool saved;        // backward: saved statistics given
    bool double_math;  // backward: dx in double
};

// The block's shared memory: per-wave partial sums, the block's sums as its
// cluster peers read them, the tile's totals and per-channel constants.
struct TileShared {
    double wave_part[kMaxWaves][kMaxTileChannels][2];
    double block_part[kMaxTileChannels][2];
    double totals[kMaxTileChannels][2];
    double coef[kMaxTileChannels][3];
    double stat[kMaxTileChannels][2];  // mean offset from the center, inverse std
    float center[kMaxTileChannels];
};

// Sums each of the tile's channels over the tile's blocks: a thread brings
// NC channels' pairs (a, b), it gets nothing back; sh.totals holds every
// channel's sums after the call.  Fixed order throughout: deterministic.
template <int NC>
__device__ void tile_sum(double (&a)[NC], double (&b)[NC], const TileArgs& args, int lane, TileShared& sh) {
    // Threads of one wave with the same lane hold the same channels.
    for (int mask = args.lanes; mask < MBN_WAVE_SIZE; mask *= 2) {
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            a[j] += shuffle_xor(a[j], mask);
            b[j] += shuffle_xor(b[j], mask);
        }
    }
    const int wave = threadIdx.x / MBN_WAVE_SIZE;
    const int waves = blockDim.x / MBN_WAVE_SIZE;
    if (static_cast<int>(threadIdx.x % MBN_WAVE_SIZE) < args.lanes) {
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            sh.wave_part[wave][lane * NC + j][0] = a[j];
            sh.wave_part[wave][lane * NC + j][1] = b[j];
        }
    }
    __syncthreads();
    const int t = threadIdx.x;
    const bool owner = t < args.lanes * NC;
    if (owner) {
        double s = 0.0, q = 0.0;
        for (int w = 0; w < waves; ++w) {
            s += sh.wave_part[w][t][0];
            q += sh.wave_part[w][t][1];
        }
        double* to = args.cluster > 1 ? sh.block_part[t] : sh.totals[t];
        to[0] = s;
        to[1] = q;
    }
    if (args.cluster > 1) {
        cluster_sync();
        if (owner) {
            double s = 0.0, q = 0.0;
            for (int r = 0; r < args.cluster; ++r) {
                const double* peer = cluster_peer(&sh.block_part[t][0], r);
                s += peer[0];
                q += peer[1];
            }
            sh.totals[t][0] = s;
            sh.totals[t][1] = q;
        }
        // No block rewrites block_part, or exits, while a peer still reads it.
        cluster_sync();
    }
    __syncthreads();
}

template <typename T, bool kBackward, bool kNhwc, int V, int K>
__global__ void __launch_bounds__(kMaxThreads) bn_channel_tile(TileArgs a) {
    constexpr int NC = kNhwc ? V : 1;  // channels one thread's vectors span
    __shared__ TileShared sh;
    const int rank = a.cluster > 1 ? static_cast<int>(blockIdx.x) % a.cluster : 0;
    const int tile = static_cast<int>(blockIdx.x) / a.cluster;
    const int lane = static_cast<int>(threadIdx.x) % a.lanes;
    const int row0 = static_cast<int>(threadIdx.x) / a.lanes;
    const int rows = static_cast<int>(blockDim.x) / a.lanes;
    const int tile_channels = kNhwc ? a.lanes * V : 1;
    const int first_channel = tile * tile_channels;
    const int channel = kNhwc ? first_channel + lane * V : tile;  // of the thread's first slot
    const bool lane_used = channel < a.channels;  // NHWC: the last tile may be narrower
    const int begin = rank * a.block_units;
    const int end = min(a.units, begin + a.block_units);
    const T* x = static_cast<const T*>(a.x);
    const T* dy = static_cast<const T*>(a.dy);

    auto offset_of = [&](int u) {
        if (kNhwc) return u * a.channels + channel;
        const int n = u / a.plane_units;
        return ((n * a.channels + channel) * a.plane_units + (u - n * a.plane_units)) * V;
    };
    // The center of each channel: the saved mean, or its first value.
    const int t = threadIdx.x;
    const bool finisher = t < tile_channels && first_channel + t < a.channels;
    const int finisher_channel = first_channel + t;
    const bool saved = kBackward && a.saved;

    Pack<T, V> xv[K];
    Pack<T, V> gv[kBackward ? K : 1];
    bool valid[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int u = begin + row0 + k * rows;
        valid[k] = lane_used && u < end;
        if (valid[k]) {
            xv[k] = load_pack<V>(x + offset_of(u));
            if (kBackward) gv[kBackward ? k : 0] = load_pack<V>(dy + offset_of(u));
        }
    }
    // The finishers' parameters, read while the data loads are in flight:
    // scale, then bias and the prior running mean and variance (training)
    // or the saved inverse std (backward with saved statistics).
    double param[4] = {};
    if (finisher) {
        const int c = finisher_channel;
        const int first = kNhwc ? c : c * a.plane_units * V;
        sh.center[t] = saved ? static_cast<float>(a.saved_mean.load_inline(c)) : widen(x[first]);
        param[0] = a.scale.load_inline(c);
        if (!kBackward) {
            param[1] = a.bias.load_inline(c);
            if (a.running_mean.present()) {
                param[2] = a.prev_mean.load_inline(c);
                param[3] = a.prev_var.load_inline(c);
            }
        } else if (saved) {
            param[1] = a.saved_inv_std.load_inline(c);
        }
    }
    __syncthreads();
    float center[NC];
#pragma unroll
    for (int j = 0; j < NC; ++j) center[j] = sh.center[kNhwc ? lane * V + j : 0];
    auto slot = [](int v) { return kNhwc ? v : 0; };
    const double count = a.count;

    if (!saved) {
        double d1[NC] = {}, d2[NC] = {};
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (!valid[k]) continue;
            float p1[NC] = {}, p2[NC] = {};
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const float d = widen(xv[k].lane[v]) - center[slot(v)];
                p1[slot(v)] += d;
                p2[slot(v)] = fmaf(d, d, p2[slot(v)]);
            }
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                d1[j] += p1[j];
                d2[j] += p2[j];
            }
        }
        bool finite = true;
#pragma unroll
        for (int j = 0; j < NC; ++j) finite = finite && isfinite(d1[j]) && isfinite(d2[j]);
        if (!finite) {  // float overflowed (values near 1e19 and beyond) or Inf/NaN: again in double
#pragma unroll
            for (int j = 0; j < NC; ++j) d1[j] = d2[j] = 0.0;
#pragma unroll
            for (int k = 0; k < K; ++k) {
                if (!valid[k]) continue;
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    const double d = static_cast<double>(widen(xv[k].lane[v])) - center[slot(v)];
                    d1[slot(v)] += d;
                    d2[slot(v)] += d * d;
                }
            }
        }
        tile_sum<NC>(d1, d2, a, lane, sh);
        if (finisher) {
            const double s1 = sh.totals[t][0];
            const Statistics st = shifted_statistics(sh.center[t], s1, sh.totals[t][1], count);
            const double inv_std = inverse_std(st.variance, a.epsilon);
            sh.stat[t][0] = s1 / count;
            sh.stat[t][1] = inv_std;
            if (!kBackward && rank == 0) {
                const int c = finisher_channel;
                if (a.running_mean.present()) {
                    const double f = a.exp_avg_factor;
                    a.running_mean.store(c, running_update(param[2], st.mean, f));
                    a.running_var.store(c, running_update(param[3], unbiased_variance(st.variance, count), f));
                }
                if (a.saved_mean.present()) {
                    a.saved_mean.store(c, st.mean);
                    a.saved_inv_std.store(c, inv_std);
                }
            }
        }
    } else if (finisher) {
        sh.stat[t][0] = 0.0;
        sh.stat[t][1] = param[1];
    }

    if (!kBackward) {
        if (finisher) {
            const double factor = param[0] * sh.stat[t][1];
            sh.coef[t][0] = factor;
            sh.coef[t][1] = param[1] - sh.stat[t][0] * factor;
        }
        __syncthreads();
        float factor[NC], shift[NC];
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const int i = kNhwc ? lane * V + j : 0;
            factor[j] = static_cast<float>(sh.coef[i][0]);
            shift[j] = static_cast<float>(sh.coef[i][1]);
        }
        T* y = static_cast<T*>(a.out);
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (!valid[k]) continue;
            float r[V];
#pragma unroll
            for (int v = 0; v < V; ++v) r[v] = (widen(xv[k].lane[v]) - center[slot(v)]) * factor[slot(v)] + shift[slot(v)];
            store_values<T, V>(y + offset_of(begin + row0 + k * rows), r, a.alpha, a.beta);
        }
        return;
    }

    // Backward: sum(dy) and sum(dy * (x - center)), in double per value.
    __syncthreads();  // stat written (saved statistics: no sum ran)
    {
        double g1[NC] = {}, g2[NC] = {};
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (!valid[k]) continue;
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const double g = widen(gv[kBackward ? k : 0].lane[v]);
                g1[slot(v)] += g;
                g2[slot(v)] += g * (static_cast<double>(widen(xv[k].lane[v])) - center[slot(v)]);
            }
        }
        tile_sum<NC>(g1, g2, a, lane, sh);
    }
    if (finisher) {
        const int c = finisher_channel;
        const double mean_offset = sh.stat[t][0], inv_std = sh.stat[t][1];
        const double g1 = sh.totals[t][0];
        const double dy_xhat = (sh.totals[t][1] - mean_offset * g1) * inv_std;
        if (rank == 0) {
            a.dscale.store_blended(c, dy_xhat, a.param_alpha, a.param_beta);
            a.dbias.store_blended(c, g1, a.param_alpha, a.param_beta);
        }
        const double k0 = param[0] * inv_std;
        const double k1 = -k0 * inv_std * dy_xhat / count;
        sh.coef[t][0] = k0;
        sh.coef[t][1] = k1;
        sh.coef[t][2] = -k0 * g1 / count - k1 * mean_offset;
    }
    __syncthreads();
    T* dx = static_cast<T*>(a.out);
    double k[3][NC];
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        const int i = kNhwc ? lane * V + j : 0;
        k[0][j] = sh.coef[i][0];
        k[1][j] = sh.coef[i][1];
        k[2][j] = sh.coef[i][2];
    }
#pragma unroll
    for (int q = 0; q < K; ++q) {
        if (!valid[q]) continue;
        float r[V];
        if (a.double_math) {
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const int s = slot(v);
                const double d = static_cast<double>(widen(xv[q].lane[v])) - center[s];
                r[v] = static_cast<float>(k[0][s] * widen(gv[kBackward ? q : 0].lane[v]) + k[1][s] * d + k[2][s]);
            }
        } else {
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const int s = slot(v);
                const float d = widen(xv[q].lane[v]) - center[s];
                r[v] = static_cast<float>(k[0][s]) * widen(gv[kBackward ? q : 0].lane[v]) +
                       static_cast<float>(k[1][s]) * d + static_cast<float>(k[2][s]);
            }
        }
        store_values<T, V>(dx + offset_of(begin + row0 + q * rows), r, a.alpha, a.beta);
    }
}

// MIOPEN_BN_GPU_CHANNEL_TILES: "0" never, "force" whenever the call fits,
// otherwise where the tiles keep the device busy or the tensor is small.
PathUse channel_tiles_use() {
    static const PathUse use = path_use_from_environment("MIOPEN_BN_GPU_CHANNEL_TILES");
    return use;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

ChannelTilePlan plan(const BnGeometry& geom, const TensorArg& x, std::initializer_list<const TensorArg*> data,
                     bool identity, const DeviceShape& device) {
    ChannelTilePlan p{};
    const PathUse use = channel_tiles_use();
    if (use == PathUse::never || !identity || geom.mode != BnMode::spatial) return p;
    if (x.dtype != DType::f16 && x.dtype != DType::bf16 && x.dtype != DType::f32) return p;
    const bool nhwc = x.order == MemoryOrder::packed_nhwc;
    if (x.order != MemoryOrder::packed_nchw && !nhwc) return p;
    bool aligned = true;
    for (const TensorArg* t : data) {
        if (t->dtype != x.dtype || t->order != x.order) return p;
        aligned = aligned && aligned16(*t);
    }
    if (x.element_count() >= (std::int64_t(1) << 31)) return p;

    const std::int64_t channels = geom.len[kC];
    const std::int64_t spatial = geom.spatial_size();
    const std::int64_t m = geom.reduction_size();
    const int element = static_cast<int>(dtype_size(x.dtype));
    const int full = 16 / element;
    if (nhwc) {
        // A thread's vector holds neighbouring channels: C must split into them.
        if (!aligned || channels % full != 0) return p;
        p.vector = full;
        const std::int64_t channel_vectors = channels / full;
        p.lanes = channel_vectors % 2 == 0 ? 2 : 1;  // a 32-byte sector per row where C allows
        p.tiles = ceil_div(channel_vectors, p.lanes);
        p.units = m;
    } else {
        // The widest access (up to 16 bytes) that divides a plane.
        p.vector = aligned ? full : 1;
        while (p.vector > 1 && spatial % p.vector != 0) p.vector /= 2;
        p.lanes = 1;
        p.tiles = channels;
        p.units = m / p.vector;
    }
    // Blocks per tile: enough tiles to cover the multiprocessors where
    // clusters allow it, and enough that a block's share fits its registers
    // at up to kMaxPerThread vectors a thread (more cost occupancy: 8 took
    // 128 registers a thread and ran 1.2-3x slower on the H100).
    const std::int64_t per_block_most = static_cast<std::int64_t>(kMaxThreads / p.lanes) * kMaxPerThread;
    const int cluster_most = std::max(1, device.cluster_blocks);
    p.cluster = 1;
    while (p.cluster < cluster_most &&
           (p.tiles * p.cluster < device.multiprocessors || ceil_div(p.units, p.cluster) > per_block_most))
        p.cluster *= 2;
    p.block_units = ceil_div(p.units, p.cluster);
    if (p.block_units > per_block_most) return p;
    // Blocks small enough that the whole grid is resident at once where the
    // tiles allow (each block's loads, sums and stores then overlap the
    // others'), then the fewest vectors per thread that fit.
    const int wave = std::max(1, device.wave_size);
    const std::int64_t blocks = p.tiles * p.cluster;
    std::int64_t threads = std::max<std::int64_t>(
        2 * wave, std::min<std::int64_t>(kMaxThreads, device.multiprocessors * kResidentThreadsAimed / blocks));
    p.per_thread = 1;
    while (p.per_thread < kMaxPerThread && p.block_units * p.lanes > threads * p.per_thread) p.per_thread *= 2;
    threads = std::min<std::int64_t>(kMaxThreads, ceil_div(ceil_div(p.block_units, p.per_thread) * p.lanes, wave) * wave);
    p.threads = static_cast<int>(threads);
    if (p.threads % p.lanes != 0 || p.lanes > wave) return p;
    p.nhwc = nhwc;

    // Left to the other paths: few tiles (a handful of busy multiprocessors
    // would read a large tensor slowly), and clusters whose blocks hold more
    // than kMostClusteredUnits (measured 0.37-0.96x of the other paths on
    // the H100 for training, bench/RESULTS.md "channel tiles"; small shares
    // in clusters measured 2x faster).
    const std::int64_t bytes = x.element_count() * element;
    const bool busy = p.tiles * p.cluster * 2 >= device.multiprocessors || bytes <= (std::int64_t(1) << 20);
    const bool cluster_ok = p.cluster == 1 || p.block_units * p.lanes <= kMostClusteredUnits;
    p.usable = use == PathUse::forced || (busy && cluster_ok);
    return p;
}

template <bool kBackward>
void launch(const TileArgs& a, DType dtype, const ChannelTilePlan& p, const LaunchTarget& target) {
    with_element_type(dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (!std::is_same<T, double>::value) {
            constexpr int kFull = 16 / sizeof(T);
            auto go = [&](auto nhwc, auto vector, auto per_thread) {
                constexpr bool kNhwc = decltype(nhwc)::value;
                constexpr int kV = decltype(vector)::value;
                constexpr int kK = decltype(per_thread)::value;
                launch_clustered(bn_channel_tile<T, kBackward, kNhwc, kV, kK>,
                                 dim3(static_cast<unsigned>(p.tiles * p.cluster)), dim3(static_cast<unsigned>(p.threads)),
                                 0, p.cluster, target.stream, "bn_channel_tile", a);
            };
            auto with_k = [&](auto nhwc, auto vector) {
                switch (p.per_thread) {
                    case 1: go(nhwc, vector, std::integral_constant<int, 1>{}); return;
                    case 2: go(nhwc, vector, std::integral_constant<int, 2>{}); return;
                    default: go(nhwc, vector, std::integral_constant<int, kMaxPerThread>{}); return;
                }
            };
            if (p.nhwc) {
                with_k(std::true_type{}, std::integral_constant<int, kFull>{});
                return;
            }
            if (p.vector == kFull)
                with_k(std::false_type{}, std::integral_constant<int, kFull>{});
            else if (p.vector == 4)  // half and bfloat16 only: float's 4 is kFull
                with_k(std::false_type{}, std::integral_constant<int, 4>{});
            else if (p.vector == 2)
                with_k(std::false_type{}, std::integral_constant<int, 2>{});
            else
                with_k(std::false_type{}, std::integral_constant<int, 1>{});
        }
    });
}

TileArgs shape_args(const BnGeometry& geom, const ChannelTilePlan& p) {
    TileArgs a{};
    a.channels = static_cast<int>(geom.len[kC]);
    a.plane_units = static_cast<int>(geom.spatial_size() / (p.nhwc ? 1 : p.vector));
    a.units = static_cast<int>(p.units);
    a.block_units = static_cast<int>(p.block_units);
    a.lanes = p.lanes;
    a.cluster = p.cluster;
    a.count = static_cast<double>(geom.reduction_size());
    return a;
}

}  // namespace

ChannelTilePlan plan_channel_tiles(const BnForwardTraining& p, const DeviceShape& device) {
    return plan(p.geom, p.x, {&p.x, &p.y}, p.activation.identity(), device);
}

ChannelTilePlan plan_channel_tiles(const BnBackward& p, const DeviceShape& device) {
    return plan(p.geom, p.x, {&p.x, &p.dy, &p.dx}, p.activation.identity(), device);
}

void run_channel_tiles(const BnForwardTraining& p, const ChannelTilePlan& plan, const LaunchTarget& target) {
    TileArgs a = shape_args(p.geom, plan);
    a.x = p.x.data;
    a.out = p.y.data;
    a.scale = channel_param(p.scale);
    a.bias = channel_param(p.bias);
    a.prev_mean = channel_param(p.prev_running_mean);
    a.prev_var = channel_param(p.prev_running_var);
    a.running_mean = channel_param(p.running_mean);
    a.running_var = channel_param(p.running_var);
    a.saved_mean = channel_param(p.saved_mean);
    a.saved_inv_std = channel_param(p.saved_inv_std);
    a.epsilon = p.epsilon;
    a.exp_avg_factor = p.exp_avg_factor;
    a.alpha = p.out.alpha;
    a.beta = p.out.beta;
    launch<false>(a, p.x.dtype, plan, target);
}

void run_channel_tiles(const BnBackward& p, const ChannelTilePlan& plan, const LaunchTarget& target) {
    TileArgs a = shape_args(p.geom, plan);
    a.x = p.x.data;
    a.dy = p.dy.data;
    a.out = p.dx.data;
    a.scale = channel_param(p.scale);
    a.saved_mean = channel_param(p.saved_mean);
    a.saved_inv_std = channel_param(p.saved_inv_std);
    a.dscale = channel_param(p.dscale);
    a.dbias = channel_param(p.dbias);
    a.epsilon = p.epsilon;
    a.alpha = p.data.alpha;
    a.beta = p.data.beta;
    a.param_alpha = p.param.alpha;
    a.param_beta = p.param.beta;
    a.saved = p.saved_mean.present();
    a.double_math = !float_backprop_enough(p.geom.reduction_size());
    launch<true>(a, p.x.dtype, plan, target);
}

}  // namespace gpu
}  // namespace mbn
