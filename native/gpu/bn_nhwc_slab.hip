// One-launch NHWC batch-norm training and backward from registers
// (bn_nhwc_slab.hpp says which calls qualify).
//
// The grid: chunks (each up to 64 vectors of a row's channels) x groups x
// cluster blocks.  A block holds rows [first, first + row_threads * K) of
// its chunk, K vectors a thread, every load issued before any is used.
//   1. Each thread sums its vectors around the channel's center (its value
//      in row 0, or the saved mean); the block adds its threads' sums in a
//      fixed order through shared memory.
//   2. Each block pushes its sums into the shared memory of the cluster
//      block that owns the channel's slice; the owner adds them into the
//      group's scratch entry; then the whole grid meets once, one arrival
//      per cluster (grid_barrier.h: every block is resident, the planner
//      sizes the grid from the occupancy the runtime reports).
//   3. Each block finishes its slice over every group (several threads per
//      channel, 8 loads in flight each, combined in a fixed order) and
//      pushes the coefficients into every cluster block's shared memory.
//   4. y (or dx) from the registers; then group 0 stores the statistics or
//      parameter gradients, off the path the other blocks wait on.
// Pushing (remote stores, then one cluster barrier) rather than pulling
// (a barrier, then remote loads) saves a round trip each time: measured on
// the H100, pulled coefficients cost 14 us of a 28 us kernel.
// Deterministic: fixed orders everywhere, no atomics on values.  Numerics
// as the channel tiles: statistics in float per thread (again in double if
// that overflows), gradient sums in double per value, everything wider in
// double.
#include "gpu/bn_nhwc_slab.hpp"

#include "common/numerics.hpp"
#include "gpu/bn_device_math.h"
#include "gpu/bn_dispatch.hpp"
#include "gpu/cluster_launch.h"
#include "gpu/gn_cluster.h"
#include "gpu/grid_barrier.h"
#include "gpu/param_io.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>

namespace mbn {
namespace gpu {
namespace {

constexpr int kMaxThreads = 512;
constexpr int kMaxLanes = 64;
constexpr int kMaxSlots = 2048;                      // vector lanes a block sums at once: V * threads
constexpr int kMaxChunkChannels = kMaxLanes * 8;     // lanes * V
constexpr int kMostCluster = 8;                      // portable cluster size

struct SlabArgs {
    const void* x;
    const void* dy;
    void* out;  // y or dx
    int channels;
    int rows;         // N * spatial
    int lanes;        // vectors per row chunk
    int row_threads;  // rows a block covers per step
    int groups;       // per chunk
    int cluster;
    double count;
    ChannelParam scale, bias, prev_mean, prev_var, running_mean, running_var, saved_mean, saved_inv_std;
    ChannelParam dscale, dbias;
    double epsilon, exp_avg_factor;
    float alpha, beta, param_alpha, param_beta;
    bool double_math;  // backward: dx in double
    double* partials;  // [chunk][group][chunk channel][2]
    BarrierCounter* counter;
};

struct SlabShared {
    union {
        double rows[2][kMaxSlots];  // per-thread sums, [slot][row][lane]
        struct {
            double coef[kMaxChunkChannels][3];      // this block's slice of the chunk's coefficients
            float gathered[3][kMaxChunkChannels];   // every coefficient of the chunk, pushed by its owner
            double results[kMaxChunkChannels][3];   // the slice's statistics or gradients, stored at the end
        } after;                                    // the grid barrier: every block is done with rows
    } u;
    // The cluster's block sums of this block's slice, pushed by each block
    // ([block][slice channel]); after the barrier, the finishing threads'
    // partial totals.
    double incoming[kMaxChunkChannels + kMostCluster][2];
};

// What a finishing thread reads of its channel besides the sums: fetched at
// the start, while the data loads are in flight.
struct FinisherParams {
    double center = 0.0;  // training: the channel's value in row 0
    double scale = 0.0;
    double bias_or_inv_std = 0.0;  // training: bias; backward: saved inverse std
};

template <typename T, bool kBackward>
__device__ __forceinline__ FinisherParams finisher_params(const SlabArgs& a, int c) {
    FinisherParams f;
    f.scale = a.scale.load_inline(c);
    if (kBackward) {
        f.bias_or_inv_std = a.saved_inv_std.load_inline(c);
    } else {
        f.center = widen(static_cast<const T*>(a.x)[c]);
        f.bias_or_inv_std = a.bias.load_inline(c);
    }
    return f;
}

// The block's barrier too where the cluster's is taken: the cluster barrier
// orders the block's threads as well, but compute-sanitizer's racecheck sees
// only the block barrier.
__device__ __forceinline__ void sync_cluster_or_block(int cluster) {
    __syncthreads();
    if (cluster > 1) cluster_sync();
}

// At most kMaxSlots / V threads: 256 for half and bfloat16 (their registers
// may hold 8 vectors of x and of dy), 512 for float.
template <typename T, bool kBackward, int K>
__global__ void __launch_bounds__(kMaxSlots / (16 / sizeof(T))) bn_nhwc_slab(SlabArgs a) {
    constexpr int V = 16 / sizeof(T);
    __shared__ SlabShared sh;
    const int tid = static_cast<int>(threadIdx.x);
    const int threads = static_cast<int>(blockDim.x);
    const int per_chunk = a.groups * a.cluster;
    const int chunk = static_cast<int>(blockIdx.x) / per_chunk;
    const int slab = static_cast<int>(blockIdx.x) - chunk * per_chunk;
    const int group = slab / a.cluster;
    const int rank = slab - group * a.cluster;
    const int lane = tid % a.lanes;
    const int step_row = tid / a.lanes;
    const int chunk_channels = a.lanes * V;
    const int chunk_first = chunk * chunk_channels;
    const int channel0 = chunk_first + lane * V;
    const bool lane_used = channel0 < a.channels;  // the last chunk may be narrower
    const int first_row = slab * a.row_threads * K;
    const int end_row = min(a.rows, first_row + a.row_threads * K);
    const T* x = static_cast<const T*>(a.x);
    const T* dy = static_cast<const T*>(a.dy);
    // Blocks write into each other's shared memory only once all have
    // started: arrive now, wait before the first such write.
    if (a.cluster > 1) cluster_arrive();
    // Step 3's layout, known now: `ways` threads per channel of the block's
    // slice of the chunk, each summing a strided share of the groups.
    const int slice = (chunk_channels + a.cluster - 1) / a.cluster;
    const int slice_first = rank * slice;
    const int slice_end = min(chunk_channels, slice_first + slice);
    const int slice_size = slice_end - slice_first;
    int ways = 1;
    while (ways * 2 * slice_size <= threads && ways * 2 <= a.groups) ways *= 2;

    Pack<T, V> xv[K];
    Pack<T, V> gv[kBackward ? K : 1];
    bool valid[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int row = first_row + step_row + k * a.row_threads;
        valid[k] = lane_used && row < end_row;
        if (valid[k]) {
            xv[k] = load_pack<V>(x + row * a.channels + channel0);
            if (kBackward) gv[kBackward ? k : 0] = load_pack<V>(dy + row * a.channels + channel0);
        }
    }
    // The first round's finishers read their parameters now.
    FinisherParams early;
    {
        const int u = tid / ways;
        const int c = chunk_first + slice_first + u;
        if (tid % ways == 0 && u < slice_size && c < a.channels) early = finisher_params<T, kBackward>(a, c);
    }
    float center[V] = {};
    if (lane_used) {
        if (kBackward) {
#pragma unroll
            for (int j = 0; j < V; ++j) center[j] = static_cast<float>(a.saved_mean.load_inline(channel0 + j));
        } else {
            const Pack<T, V> first = load_pack<V>(x + channel0);
#pragma unroll
            for (int j = 0; j < V; ++j) center[j] = widen(first.lane[j]);
        }
    }

    // 1. The thread's sums, slot by slot into shared memory (few registers
    // live beside the data), then the block's.
    auto put = [&](int v, double t1, double t2) {
        sh.u.rows[0][v * threads + tid] = t1;
        sh.u.rows[1][v * threads + tid] = t2;
    };
    if (!kBackward) {
        bool finite = true;
#pragma unroll
        for (int v = 0; v < V; ++v) {
            float p1 = 0.0f, p2 = 0.0f;
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const float d = valid[k] ? widen(xv[k].lane[v]) - center[v] : 0.0f;
                p1 += d;
                p2 = fmaf(d, d, p2);
            }
            finite = finite && isfinite(p1) && isfinite(p2);
            put(v, p1, p2);
        }
        // Float overflowed (values near 1e19 and beyond) or met Inf/NaN
        // somewhere in the block: every thread sums again in double.
        if (__syncthreads_or(!finite)) {
#pragma unroll
            for (int v = 0; v < V; ++v) {
                double t1 = 0.0, t2 = 0.0;
#pragma unroll
                for (int k = 0; k < K; ++k) {
                    if (!valid[k]) continue;
                    const double d = static_cast<double>(widen(xv[k].lane[v])) - center[v];
                    t1 += d;
                    t2 += d * d;
                }
                put(v, t1, t2);
            }
        }
    } else {
        // sum(dy) and sum(dy * (x - saved mean)), in double per value: the
        // second often cancels to a small value from large terms.
#pragma unroll
        for (int v = 0; v < V; ++v) {
            double t1 = 0.0, t2 = 0.0;
#pragma unroll
            for (int k = 0; k < K; ++k) {
                if (!valid[k]) continue;
                const double g = widen(gv[kBackward ? k : 0].lane[v]);
                t1 += g;
                t2 += g * (static_cast<double>(widen(xv[k].lane[v])) - center[v]);
            }
            put(v, t1, t2);
        }
    }
    __syncthreads();
    if (a.cluster > 1) cluster_wait();  // (the block's threads met just above)
    for (int u = tid; u < chunk_channels; u += threads) {
        const int v = u / a.lanes, l = u - v * a.lanes;
        double t1 = 0.0, t2 = 0.0;
        for (int r = 0; r < a.row_threads; ++r) {
            t1 += sh.u.rows[0][v * threads + r * a.lanes + l];
            t2 += sh.u.rows[1][v * threads + r * a.lanes + l];
        }
        // Pushed to the block that owns the channel's slice.
        const int lc = l * V + v;
        const int owner = min(lc / slice, a.cluster - 1);
        double* to = cluster_peer_writable(&sh.incoming[rank * slice + lc - owner * slice][0], owner);
        to[0] = t1;
        to[1] = t2;
    }

    // 2. The cluster's sums of the slice, into the group's entry.
    sync_cluster_or_block(a.cluster);
    double* group_sums = a.partials + static_cast<std::int64_t>(chunk * a.groups + group) * chunk_channels * 2;
    for (int u = tid; u < slice_size; u += threads) {
        double t1 = 0.0, t2 = 0.0;
        for (int q = 0; q < a.cluster; ++q) {
            t1 += sh.incoming[q * slice + u][0];
            t2 += sh.incoming[q * slice + u][1];
        }
        group_sums[(slice_first + u) * 2] = t1;
        group_sums[(slice_first + u) * 2 + 1] = t2;
    }
    cluster_grid_barrier(a.counter, 1, a.cluster);

    // 3. The slice's totals over the groups, combined in a fixed order.
    const double* chunk_sums = a.partials + static_cast<std::int64_t>(chunk * a.groups) * chunk_channels * 2;
    for (int base = 0; base < slice_size * ways; base += threads) {
        const int item = base + tid;
        if (item < slice_size * ways) {
            const int u = item / ways, way = item - u * ways;
            const double* q = chunk_sums + (static_cast<std::int64_t>(way) * chunk_channels + slice_first + u) * 2;
            const std::int64_t stride = static_cast<std::int64_t>(ways) * chunk_channels * 2;
            double t1 = 0.0, t2 = 0.0;
            int g = way;
            constexpr int kBatch = 8;  // loads in flight before their sums
            for (; g + (kBatch - 1) * ways < a.groups; g += kBatch * ways, q += kBatch * stride) {
                double v[kBatch][2];
#pragma unroll
                for (int b = 0; b < kBatch; ++b) {
                    v[b][0] = load_after_barrier(q + b * stride);
                    v[b][1] = load_after_barrier(q + b * stride + 1);
                }
#pragma unroll
                for (int b = 0; b < kBatch; ++b) {
                    t1 += v[b][0];
                    t2 += v[b][1];
                }
            }
            for (; g < a.groups; g += ways, q += stride) {
                t1 += load_after_barrier(q);
                t2 += load_after_barrier(q + 1);
            }
            sh.incoming[item % kMaxChunkChannels][0] = t1;  // item < threads <= kMaxChunkChannels when ways > 1
            sh.incoming[item % kMaxChunkChannels][1] = t2;
        }
        if (ways > 1) __syncthreads();
        if (item < slice_size * ways && item % ways == 0) {
            const int u = item / ways;
            const int c = chunk_first + slice_first + u;
            double t1 = 0.0, t2 = 0.0;
            for (int w = 0; w < ways; ++w) {
                t1 += sh.incoming[(item + w) % kMaxChunkChannels][0];
                t2 += sh.incoming[(item + w) % kMaxChunkChannels][1];
            }
            double* coef = sh.u.after.coef[u];
            coef[0] = coef[1] = coef[2] = 0.0;
            if (c < a.channels) {
                const FinisherParams f = base == 0 ? early : finisher_params<T, kBackward>(a, c);
                const double count = a.count;
                if (!kBackward) {
                    const Statistics st = shifted_statistics(f.center, t1, t2, count);
                    const double inv_std = inverse_std(st.variance, a.epsilon);
                    const double factor = f.scale * inv_std;
                    coef[0] = factor;
                    coef[1] = f.bias_or_inv_std - t1 / count * factor;
                    double* result = sh.u.after.results[u];
                    result[0] = st.mean;
                    result[1] = st.variance;
                    result[2] = inv_std;
                } else {
                    const double inv_std = f.bias_or_inv_std;
                    const double dy_xhat = t2 * inv_std;
                    double* result = sh.u.after.results[u];
                    result[0] = dy_xhat;
                    result[1] = t1;
                    const double k0 = f.scale * inv_std;
                    coef[0] = k0;
                    coef[1] = -k0 * inv_std * dy_xhat / count;
                    coef[2] = -k0 * t1 / count;
                }
            }
            // Every block of the cluster gets the channel's coefficients.
            const int lc = slice_first + u;
            for (int q = 0; q < a.cluster; ++q) {
                float(*to)[kMaxChunkChannels] = cluster_peer_writable(sh.u.after.gathered, q);
                to[0][lc] = static_cast<float>(coef[0]);
                to[1][lc] = static_cast<float>(coef[1]);
                to[2][lc] = static_cast<float>(coef[2]);
            }
        }
        if (ways > 1) __syncthreads();  // incoming is reused by the next round
    }
    sync_cluster_or_block(a.cluster);

    auto coef_of = [&](int lc) {  // the double coefficients, in the owner's shared memory
        const int owner = min(lc / slice, a.cluster - 1);
        return cluster_peer(&sh.u.after.coef[0][0], owner) + (lc - owner * slice) * 3;
    };
    // Done with the peers' shared memory, unless dx is taken in double.
    const bool reads_peers_late = kBackward && a.double_math;
    if (a.cluster > 1 && !reads_peers_late) cluster_arrive();
    float k[3][V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
        const int lc = lane * V + v;
        k[0][v] = sh.u.after.gathered[0][lc];
        k[1][v] = sh.u.after.gathered[1][lc];
        k[2][v] = sh.u.after.gathered[2][lc];
    }

    // 4. The output from the registers.
    T* out = static_cast<T*>(a.out);
#pragma unroll
    for (int q = 0; q < K; ++q) {
        if (!valid[q]) continue;
        const int row = first_row + step_row + q * a.row_threads;
        float r[V];
        if (!kBackward) {
#pragma unroll
            for (int v = 0; v < V; ++v) r[v] = (widen(xv[q].lane[v]) - center[v]) * k[0][v] + k[1][v];
        } else if (a.double_math) {  // few values per channel: the coefficients again, in double
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const double* c = coef_of(lane * V + v);
                const double d = static_cast<double>(widen(xv[q].lane[v])) - center[v];
                r[v] = static_cast<float>(c[0] * widen(gv[kBackward ? q : 0].lane[v]) + c[1] * d + c[2]);
            }
        } else {
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const float d = widen(xv[q].lane[v]) - center[v];
                r[v] = k[0][v] * widen(gv[kBackward ? q : 0].lane[v]) + k[1][v] * d + k[2][v];
            }
        }
        store_values<T, V>(out + row * a.channels + channel0, r, a.alpha, a.beta);
    }
    // The statistics (training) or parameter gradients, once per chunk,
    // off the path the other blocks wait on.
    if (group == 0) {
        for (int u = tid; u < slice_size; u += threads) {
            const int c = chunk_first + slice_first + u;
            if (c >= a.channels) continue;
            const double* result = sh.u.after.results[u];
            if (!kBackward) {
                if (a.running_mean.present()) {
                    const double e = a.exp_avg_factor;
                    a.running_mean.store(c, running_update(a.prev_mean.load(c), result[0], e));
                    a.running_var.store(c, running_update(a.prev_var.load(c), unbiased_variance(result[1], a.count), e));
                }
                if (a.saved_mean.present()) {
                    a.saved_mean.store(c, result[0]);
                    a.saved_inv_std.store(c, result[2]);
                }
            } else {
                a.dscale.store_blended(c, result[0], a.param_alpha, a.param_beta);
                a.dbias.store_blended(c, result[1], a.param_alpha, a.param_beta);
            }
        }
    }
    if (a.cluster > 1) {
        if (reads_peers_late) cluster_arrive();
        cluster_wait();  // no block leaves while a peer reads its coefficients
    }
    cluster_grid_barrier_exit(a.counter, 1, a.cluster);
}

// ---- host ---------------------------------------------------------------------------

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Blocks of `kernel` resident at once on the device in clusters of `cluster`
// blocks of `threads` threads; one answer per (instance, device, threads,
// cluster) is kept, the query costing microseconds of host time per call.
template <typename T, bool kBackward, int K>
std::int64_t co_resident_blocks(int threads, int cluster, const DeviceShape& device) {
    constexpr int kDevices = 64;
    static std::atomic<long long> known_key[kDevices];
    static std::atomic<long long> known_blocks[kDevices];
    int ordinal = 0;
    check_runtime(hipGetDevice(&ordinal), "hipGetDevice");
    const long long key = static_cast<long long>(threads) * 64 + cluster + 1;
    const bool cached = ordinal >= 0 && ordinal < kDevices;
    if (cached && known_key[ordinal].load() == key) return known_blocks[ordinal].load();
    long long blocks = 0;
#if MBN_GPU_CUDA
    if (cluster > 1) {
        cudaLaunchAttribute attribute;
        const cudaLaunchConfig_t config =
            cluster_config(dim3(static_cast<unsigned>(cluster)), dim3(static_cast<unsigned>(threads)), 0, nullptr,
                           cluster, attribute);
        int clusters = 0;
        if (cudaOccupancyMaxActiveClusters(&clusters, bn_nhwc_slab<T, kBackward, K>, &config) != cudaSuccess) {
            (void)cudaGetLastError();
            clusters = 0;
        }
        blocks = static_cast<long long>(clusters) * cluster;
    }
#endif
    if (cluster == 1) {
        int per_multiprocessor = 0;
        check_runtime(hipOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, bn_nhwc_slab<T, kBackward, K>,
                                                                   threads, 0),
                      "hipOccupancyMaxActiveBlocksPerMultiprocessor");
        blocks = static_cast<long long>(per_multiprocessor) * device.multiprocessors;
    }
    if (cached) {
        known_blocks[ordinal].store(blocks);
        known_key[ordinal].store(key);
    }
    return blocks;
}

// Calls body(TypeTag<T>{}, integral_constant<K>) for the plan's instance.
template <typename Body>
void with_slab_instance(DType dtype, int per_thread, Body&& body) {
    with_element_type(dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (!std::is_same<T, double>::value) {
            switch (per_thread) {
                case 1: body(tag, std::integral_constant<int, 1>{}); return;
                case 2: body(tag, std::integral_constant<int, 2>{}); return;
                case 4: body(tag, std::integral_constant<int, 4>{}); return;
                default: body(tag, std::integral_constant<int, 8>{}); return;
            }
        }
    });
}

template <bool kBackward>
NhwcSlabPlan plan(const BnGeometry& geom, const TensorArg& x, std::initializer_list<const TensorArg*> data,
                  bool identity, const DeviceShape& device) {
    NhwcSlabPlan p{};
    if (!identity || geom.mode != BnMode::spatial) return p;
    if (x.dtype != DType::f16 && x.dtype != DType::bf16 && x.dtype != DType::f32) return p;
    if (x.order != MemoryOrder::packed_nhwc) return p;
    for (const TensorArg* t : data)
        if (t->dtype != x.dtype || t->order != x.order || !aligned16(*t)) return p;
    if (x.element_count() >= (std::int64_t(1) << 31)) return p;
    const std::int64_t channels = geom.len[kC];
    const std::int64_t rows = geom.reduction_size();
    p.vector = 16 / static_cast<int>(dtype_size(x.dtype));
    if (channels % p.vector != 0 || rows < 1) return p;
    const std::int64_t channel_vectors = channels / p.vector;
    p.chunks = static_cast<int>(ceil_div(channel_vectors, kMaxLanes));
    p.lanes = static_cast<int>(ceil_div(channel_vectors, p.chunks));
    p.row_threads = std::max(1, std::min(kMaxThreads, kMaxSlots / p.vector) / p.lanes);
    const int cluster_most = std::min(kMostCluster, std::max(1, device.cluster_blocks));

    // The fewest vectors a thread that leave the grid at most half the
    // resident blocks (room for the loads of each), else the fewest that fit.
    NhwcSlabPlan fitting{};
    for (int per_thread : {1, 2, 4, 8}) {
        NhwcSlabPlan q = p;
        q.per_thread = per_thread;
        const std::int64_t per_chunk = ceil_div(rows, static_cast<std::int64_t>(q.row_threads) * per_thread);
        q.cluster = 1;
        while (q.cluster < cluster_most && q.cluster * 2 <= per_chunk) q.cluster *= 2;
        q.groups = ceil_div(per_chunk, q.cluster);
        std::int64_t resident = 0;
        with_slab_instance(x.dtype, per_thread, [&](auto tag, auto k) {
            using T = typename decltype(tag)::type;
            resident = co_resident_blocks<T, kBackward, decltype(k)::value>(q.threads(), q.cluster, device);
        });
        if (q.blocks() > resident) continue;
        if (!fitting.usable) {
            fitting = q;
            fitting.usable = true;
        }
        if (2 * q.blocks() <= resident) {
            fitting = q;
            fitting.usable = true;
            break;
        }
    }
    if (!fitting.usable) return p;
    p = fitting;
    p.scratch_bytes = static_cast<std::size_t>(p.chunks * p.groups) * p.lanes * p.vector * 2 * sizeof(double);
    p.counters = 1;
    // Opt-in until compute-sanitizer's racecheck is explained: it reports
    // hazards between the coefficients other cluster blocks push into this
    // block's shared memory and their reads after the cluster barrier that
    // orders them (bench/RESULTS.md, "NHWC slabs").
    p.usable = true;
    return p;
}

template <bool kBackward>
void launch(const SlabArgs& a, DType dtype, const NhwcSlabPlan& p, const LaunchTarget& target) {
    with_slab_instance(dtype, p.per_thread, [&](auto tag, auto k) {
        using T = typename decltype(tag)::type;
        launch_clustered(bn_nhwc_slab<T, kBackward, decltype(k)::value>, dim3(static_cast<unsigned>(p.blocks())),
                         dim3(static_cast<unsigned>(p.threads())), 0, p.cluster, target.stream, "bn_nhwc_slab", a);
    });
}

SlabArgs shape_args(const BnGeometry& geom, const NhwcSlabPlan& p, const LaunchTarget& target) {
    SlabArgs a{};
    a.channels = static_cast<int>(geom.len[kC]);
    a.rows = static_cast<int>(geom.reduction_size());
    a.lanes = p.lanes;
    a.row_threads = p.row_threads;
    a.groups = static_cast<int>(p.groups);
    a.cluster = p.cluster;
    a.count = static_cast<double>(geom.reduction_size());
    a.partials = static_cast<double*>(target.scratch);
    a.counter = target.counters;
    return a;
}

}  // namespace

NhwcSlabPlan plan_nhwc_slabs(const BnForwardTraining& p, const DeviceShape& device) {
    return plan<false>(p.geom, p.x, {&p.x, &p.y}, p.activation.identity(), device);
}

NhwcSlabPlan plan_nhwc_slabs(const BnBackward& p, const DeviceShape& device) {
    // From saved statistics only: without them the statistics need a
    // second round of sums and barriers.
    if (!p.saved_mean.present()) return NhwcSlabPlan{};
    return plan<true>(p.geom, p.x, {&p.x, &p.dy, &p.dx}, p.activation.identity(), device);
}

void run_nhwc_slabs(const BnForwardTraining& p, const NhwcSlabPlan& plan, const LaunchTarget& target) {
    SlabArgs a = shape_args(p.geom, plan, target);
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

void run_nhwc_slabs(const BnBackward& p, const NhwcSlabPlan& plan, const LaunchTarget& target) {
    SlabArgs a = shape_args(p.geom, plan, target);
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
    a.double_math = !float_backprop_enough(p.geom.reduction_size());
    launch<true>(a, p.x.dtype, plan, target);
}

}  // namespace gpu
}  // namespace mbn
