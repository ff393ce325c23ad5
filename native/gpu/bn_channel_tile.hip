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
// launch or a second read would cost more than the data.  An NCHW channel
// larger than a block's registers stays one block's, or for float data
// one cluster's where the channels are fewer than the multiprocessors
// (streamed tiles): the values past the registers are summed as they
// stream in and read again, from L2 where they are still there, for the
// output.
// Numerics: values around the channel's first value (or the saved mean);
// the statistics summed in float per vector, then in double (docs/numerics.md,
// "Channel tiles"); gradient sums in double per value.
#include "gpu/bn_channel_tile.hpp"

#include "common/numerics.hpp"
#include "gpu/block_reduce.h"
#include "gpu/cluster_launch.h"
#include "gpu/divisor.hpp"
#include "gpu/gn_cluster.h"
#include "gpu/norm_math.h"
#include "gpu/param_io.h"
#include "gpu/type_dispatch.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace mbn {
namespace gpu {
namespace {

constexpr int kMaxThreads = 512;
constexpr int kMaxWaves = kMaxThreads / MBN_WAVE_SIZE;  // sizes the waves' parts: 8 KiB (32 lanes) or 4 (64)
constexpr int kMaxTileChannels = 16;  // NHWC: 2 lanes of 8 half channels
constexpr int kMaxPerThread = 4;      // vectors per thread and tensor, in registers
// Threads per multiprocessor the grid aims at (a block's share of them).
constexpr std::int64_t kResidentThreadsAimed = 1024;
// The most vectors a block of a cluster of several takes by default: past
// it, NCHW tiles yield to the streamed tiles where those serve, NHWC tiles
// to the other paths unless their grid is small (plan()).
constexpr std::int64_t kMostClusteredUnits = 512;
// An NHWC grid of clusters of at most this many blocks may be small (plan()).
constexpr int kMostSmallGridCluster = 4;

// A channel parameter as the tiles read it: 16 bytes, not ChannelParam's 24
// (kernel arguments are read through the constant cache, whose misses the
// small kernels' profiles show).  The planner takes no stride past 2^31.
struct TileParam {
    void* data;  // nullptr: absent
    int stride;  // elements from one channel to the next
    DType dtype;

    __host__ __device__ bool present() const { return data != nullptr; }
    __device__ __forceinline__ double load(int c) const {
        return load_param(data, dtype, static_cast<std::int64_t>(c) * stride);
    }
    __device__ __forceinline__ void store(int c, double value) const {
        store_param(data, dtype, static_cast<std::int64_t>(c) * stride, value);
    }
    // As ParamRef::store_blended (the prior read only when beta != 0), with
    // one address for the four types: load_param and store_param form one
    // per type, and in the backward writer's stores those 64-bit addresses
    // and the four predicated loads of the prior value stood beside the
    // tile's data (the peak of the NCHW backward K=4 instances).
    __device__ __forceinline__ void store_blended(int c, double value, float alpha, float beta) const {
        const int shift = dtype == DType::f64 ? 3 : dtype == DType::f32 ? 2 : 1;
        char* const at = static_cast<char*>(data) + (static_cast<std::int64_t>(c) * stride << shift);
        double out = static_cast<double>(alpha) * value;
        if (beta != 0.0f) out += static_cast<double>(beta) * load_at(at);
        if (dtype == DType::f16) *reinterpret_cast<__half*>(at) = narrow<__half>(out);
        if (dtype == DType::bf16) *reinterpret_cast<mbn_bfloat16*>(at) = narrow<mbn_bfloat16>(out);
        if (dtype == DType::f32) *reinterpret_cast<float*>(at) = static_cast<float>(out);
        if (dtype == DType::f64) *reinterpret_cast<double*>(at) = out;
    }
    // load_param's value at `at`: absent loads as 0, each type's load
    // predicated on its own.
    __device__ __forceinline__ double load_at(const char* at) const {
        const bool present = data != nullptr;
        const bool is_half = present && dtype == DType::f16, is_bf16 = present && dtype == DType::bf16;
        const bool is_float = present && dtype == DType::f32, is_double = present && dtype == DType::f64;
        __half h = narrow<__half>(0.0f);
        mbn_bfloat16 b = narrow<mbn_bfloat16>(0.0f);
        float f = 0.0f;
        double d = 0.0;
        if (is_half) h = *reinterpret_cast<const __half*>(at);
        if (is_bf16) b = *reinterpret_cast<const mbn_bfloat16*>(at);
        if (is_float) f = *reinterpret_cast<const float*>(at);
        if (is_double) d = *reinterpret_cast<const double*>(at);
        const float narrow_value = is_half ? widen(h) : is_bf16 ? widen(b) : f;
        return is_double ? d : static_cast<double>(narrow_value);
    }
};

// The kernels' arguments, 240 bytes (they were 376): first what the loads
// need, then what finishing a channel needs, the parameters of the two ops
// sharing their space.
struct TileArgs {
    const void* x;
    const void* dy;
    void* out;  // y or dx
    int channels;
    int tiles;
    int plane_units;  // NCHW: vectors per plane (S / V)
    int units;        // per tile: NCHW vectors of the channel, NHWC rows (N*H*W)
    int block_units;  // units per block of a tile
    int lanes;        // threads side by side across a row of the tile (NHWC), else 1 (a power of two)
    int cluster;      // blocks per tile, one cluster (a power of two)
    int lanes_shift, cluster_shift;  // their base-2 logarithms
    Divisor by_plane;  // NCHW: divides by plane_units
    float alpha, beta;  // y or dx blended with its prior content
    double inv_count;       // 1 / values per channel
    double unbiased_ratio;  // count / (count - 1), 1 for a single value
    double epsilon;
    TileParam scale, saved_mean, saved_inv_std;
    struct Training {
        TileParam bias, prev_mean, prev_var, running_mean, running_var;
        double exp_avg_factor;
    };
    struct Backward {
        TileParam dscale, dbias;
        float param_alpha, param_beta;
        bool saved;        // saved statistics given
        bool double_math;  // dx in double
    };
    union {
        Training train;
        Backward back;
    };
};
static_assert(sizeof(TileParam) == 16 && sizeof(TileArgs) <= 256, "the tiles' arguments grew");

// What finishing one channel needs besides its sums, read while the data
// loads are in flight: the center the values are taken around (the saved
// mean, or the channel's first value), the scale, then the bias and the
// prior running mean and variance (training) or the saved inverse std
// (backward with saved statistics).
struct ChannelInputs {
    float center;
    double param[4];
};

template <typename T, bool kBackward, bool kNhwc, int V>
__device__ __forceinline__ ChannelInputs read_channel(const TileArgs& a, const T* x, int c) {
    ChannelInputs in{};
    const bool saved = kBackward && a.back.saved;
    const int first = kNhwc ? c : c * a.plane_units * V;
    in.center = saved ? static_cast<float>(a.saved_mean.load(c)) : widen(x[first]);
    in.param[0] = a.scale.load(c);
    // Absent tensors load as 0: no branch stands between the loads.
    if (!kBackward) {
        in.param[1] = a.train.bias.load(c);
        in.param[2] = a.train.prev_mean.load(c);
        in.param[3] = a.train.prev_var.load(c);
    } else {
        in.param[1] = a.saved_inv_std.load(c);
    }
    return in;
}

// A channel's statistics from its shifted sums (mean offset from the
// center, inverse std); training's writer stores the running and saved ones.
template <bool kBackward>
__device__ __forceinline__ void finish_statistics(const TileArgs& a, int c, const ChannelInputs& in, double s1,
                                                  double s2, bool writer, double (&stat)[2]) {
    const ShiftedStatistics st = finish_shifted(s1, s2, a.inv_count, a.epsilon);
    stat[0] = st.offset;
    stat[1] = st.inv_std;
    if (!kBackward && writer) {
        const double mean = in.center + st.offset;
        if (a.train.running_mean.present()) {
            const double f = a.train.exp_avg_factor;
            a.train.running_mean.store(c, running_update(in.param[2], mean, f));
            a.train.running_var.store(c, running_update(in.param[3], st.variance * a.unbiased_ratio, f));
        }
        if (a.saved_mean.present()) {
            a.saved_mean.store(c, mean);
            a.saved_inv_std.store(c, st.inv_std);
        }
    }
}

// Training: y = (x - center) * coef[0] + coef[1].
__device__ __forceinline__ void forward_coefficients(const ChannelInputs& in, const double (&stat)[2],
                                                     double (&coef)[3]) {
    coef[0] = in.param[0] * stat[1];
    coef[1] = in.param[1] - stat[0] * coef[0];
    coef[2] = 0.0;
}

// Backward from the gradient sums g1 = Σdy, g2 = Σdy·(x - center):
// dx = dy·coef[0] + (x - center)·coef[1] + coef[2], and dscale's value
// dy_xhat (dbias's is g1).
__device__ __forceinline__ void backward_coefficients(const TileArgs& a, double scale, const double (&stat)[2],
                                                      double g1, double g2, double (&coef)[3], double& dy_xhat) {
    const double mean_offset = stat[0], inv_std = stat[1];
    dy_xhat = (g2 - mean_offset * g1) * inv_std;
    const double k0 = scale * inv_std;
    const double k1 = -k0 * inv_std * dy_xhat * a.inv_count;
    coef[0] = k0;
    coef[1] = k1;
    coef[2] = -k0 * g1 * a.inv_count - k1 * mean_offset;
}

// The writer's dscale and dbias, once the coefficients are taken: the
// statistics and the scale are then no longer live beside the stores'
// reads of the prior values.
__device__ __forceinline__ void store_parameter_grads(const TileArgs& a, int c, double dy_xhat, double g1) {
    a.back.dscale.store_blended(c, dy_xhat, a.back.param_alpha, a.back.param_beta);
    a.back.dbias.store_blended(c, g1, a.back.param_alpha, a.back.param_beta);
}

// The block's shared memory: per round (the statistics', the gradients')
// the waves' partial sums and the block's sums as its cluster peers read
// them, then the tile's per-channel constants.  A round has its own parts:
// no barrier stands between one round's reads and the next round's writes.
struct TileShared {
    double wave_part[2][kMaxWaves][kMaxTileChannels][2];
    double block_part[2][kMaxTileChannels][2];
    double coef[kMaxTileChannels][3];
};

// Sums each of the tile's channels over the tile's blocks: a thread brings
// the sums (a, b) over its wave of its lane's channel `slot` (wave_scatter_sum:
// the first NC rows of each wave's lanes hold one slot each).  Thread t below
// args.lanes * NC owns the tile's channel t: it gets the channel's totals
// in `total`, with no barrier after the sum: the owner finishes the channel
// at once.  Fixed order throughout: deterministic.
//
// A cluster's blocks meet twice a round.  The first barrier publishes each
// block's sums (block_part[round]) to its peers: a release arrival, which
// the PTX memory model needs for a peer's read of this block's shared
// memory to see the writes before it (on sm_90 it is a MEMBAR.ALL.GPU, the
// only fence of the kernel).  The second only tells the peers that this
// block has read theirs: a relaxed arrival (no fence), waited for before
// the block's next round (`pending`) or its exit (finish_cluster), so that
// no block leaves while a peer still reads its shared memory, with the
// block's own work in between.
template <int NC>
__device__ void tile_sum(double a, double b, int slot, const TileArgs& args, int lane, int round, bool& pending,
                         TileShared& sh, double (&total)[2]) {
    const int wave = threadIdx.x / MBN_WAVE_SIZE;
    const int waves = blockDim.x / MBN_WAVE_SIZE;
    auto& part = sh.wave_part[round];
    if (static_cast<int>(threadIdx.x % MBN_WAVE_SIZE) >> args.lanes_shift < NC) {
        part[wave][lane * NC + slot][0] = a;
        part[wave][lane * NC + slot][1] = b;
    }
    __syncthreads();
    const int t = threadIdx.x;
    const bool owner = t < args.lanes * NC;
    if (owner) {
        // Rolled by 4 (as the peers' loop below): fully unrolled, the two
        // loops took a third of a small kernel's code, run by a few threads.
        double s = 0.0, q = 0.0;
#pragma unroll 4
        for (int w = 0; w < waves; ++w) {
            s += part[w][t][0];
            q += part[w][t][1];
        }
        total[0] = s;
        total[1] = q;
    }
    if (args.cluster > 1) {
        if (owner) {
            sh.block_part[round][t][0] = total[0];
            sh.block_part[round][t][1] = total[1];
        }
        if (pending) cluster_wait();
        cluster_sync();
        if (owner) {
            double s = 0.0, q = 0.0;
#pragma unroll 4
            for (int r = 0; r < args.cluster; ++r) {
                const double* peer = cluster_peer(&sh.block_part[round][t][0], r);
                s += peer[0];
                q += peer[1];
            }
            total[0] = s;
            total[1] = q;
        }
        cluster_arrive_relaxed();
        pending = true;
    }
}

// Before a block of a cluster exits: its peers have read its shared memory.
__device__ __forceinline__ void finish_cluster(bool pending) {
    if (pending) cluster_wait();
}

// Sums NC channels' pairs (a[j], b[j]) over the rows of the wave (lanes `lanes`
// apart hold other channels) and returns the slot j whose sums the thread then
// holds in a[0], b[0].  The first log2(NC) levels of the butterfly halve the
// slots a thread keeps (it sends its partner the half it gives up and adds the
// partner's half of the ones it keeps), the rest add the one slot left: for
// NHWC's 8 channels and 4 levels, 8 exchanges of a value where the butterfly of
// every slot took 32 (SHFL was 12-13% of the NHWC tiles' instructions in ncu).
// Row r < NC of a lane holds slot bitreverse(r); every thread with the same low
// row bits holds the same bits (IEEE addition commutes); fixed order:
// deterministic.  The wave needs NC rows (MBN_WAVE_SIZE / lanes >= NC:
// lanes <= 2, NC <= 8).
template <int NC, typename A, typename B>
__device__ __forceinline__ int wave_scatter_sum(int lanes, A (&a)[NC], B (&b)[NC]) {
    const int l = static_cast<int>(threadIdx.x % MBN_WAVE_SIZE);
    int slot = 0, mask = lanes;
#pragma unroll
    for (int n = NC; n > 1; n /= 2) {
        const bool upper = (l & mask) != 0;
#pragma unroll
        for (int i = 0; i < n / 2; ++i) {
            const A a_send = upper ? a[i] : a[i + n / 2], a_keep = upper ? a[i + n / 2] : a[i];
            const B b_send = upper ? b[i] : b[i + n / 2], b_keep = upper ? b[i + n / 2] : b[i];
            a[i] = a_keep + shuffle_xor(a_send, mask);
            b[i] = b_keep + shuffle_xor(b_send, mask);
        }
        if (upper) slot += n / 2;
        mask *= 2;
    }
    wave_sum(mask, MBN_WAVE_SIZE, a[0], b[0]);
    return slot;
}

// The shifted moments of the thread's register values, s1 = sum(x - center)
// and s2 = sum((x - center)^2), summed over the thread's wave: in float per
// vector, then in double (again in double per value where float overflowed,
// near 1e19 and beyond, or x holds Inf/NaN), then through wave_scatter_sum.
// kStream adds a streamed tile's sums of its other values (`streamed`; NC
// is 1 there).  Returns the slot whose sums the thread holds.
template <typename T, bool kStream, int V, int K, int NC>
__device__ __forceinline__ int wave_moments(const Pack<T, V> (&xv)[K], const bool (&valid)[K],
                                            const float (&center)[NC], int lanes, const double (&streamed)[4],
                                            double& s1, double& s2) {
    auto slot_of = [](int v) { return NC > 1 ? v : 0; };
    double d1[NC] = {}, d2[NC] = {};
#pragma unroll
    for (int k = 0; k < K; ++k) {
        if (!valid[k]) continue;
        float p1[NC] = {}, p2[NC] = {};
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const float d = widen(xv[k].lane[v]) - center[slot_of(v)];
            p1[slot_of(v)] += d;
            p2[slot_of(v)] = fmaf(d, d, p2[slot_of(v)]);
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
    if (!finite) {
#pragma unroll
        for (int j = 0; j < NC; ++j) d1[j] = d2[j] = 0.0;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (!valid[k]) continue;
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const double d = static_cast<double>(widen(xv[k].lane[v])) - center[slot_of(v)];
                d1[slot_of(v)] += d;
                d2[slot_of(v)] += d * d;
            }
        }
    }
    if (kStream) {
        d1[0] += streamed[0];
        d2[0] += streamed[1];
    }
    const int slot = wave_scatter_sum(lanes, d1, d2);
    s1 = d1[0];
    s2 = d2[0];
    return slot;
}

// The streamed part of a block's share (kStream): the units past the K a
// thread holds in registers, kStreamLoads loads in flight at a time.  The first walk
// sums them; the output walk reads them again, last first, so that what the
// first walk read last is still in L2.
constexpr int kStreamLoads = 4;
// Streamed tiles' blocks: small, with one vector a thread in registers, so
// that several blocks share a multiprocessor and one's loads overlap
// another's sums and stores.  Measured on the H100 against 512 threads x 4
// vectors (one block a multiprocessor at 128 registers): 64x1024x14x14 half
// backward 85.8 -> 50.3 us, training 50.2 -> 34.3 (bench/RESULTS.md,
// "streamed channel tiles").
constexpr int kStreamThreads = 256;
constexpr int kStreamPerThread = 1;

// A thread's walk over units of one NCHW channel, `step` units at a time,
// forward or back, without a division per unit: the position is kept as the
// plane's first vector (`base`) and the vector within the plane (`s`).
struct PlaneStepper {
    int base, s;
    int plane_units, plane_stride;  // vectors per plane; between the channel's planes of consecutive n
    int step_planes, step_rest;     // the step as whole planes and a remainder

    __device__ PlaneStepper(int u, int step, int channel, int channels, int units_per_plane)
        : plane_units(units_per_plane), plane_stride(channels * units_per_plane) {
        const int n = u / plane_units;
        s = u - n * plane_units;
        base = n * plane_stride + channel * plane_units;
        step_planes = step / plane_units;
        step_rest = step - step_planes * plane_units;
    }
    __device__ __forceinline__ int offset() const { return base + s; }  // in vectors
    __device__ __forceinline__ void forward() {
        s += step_rest;
        base += step_planes * plane_stride;
        if (s >= plane_units) {
            s -= plane_units;
            base += plane_stride;
        }
    }
    __device__ __forceinline__ void back() {
        s -= step_rest;
        base -= step_planes * plane_stride;
        if (s < 0) {
            s += plane_units;
            base -= plane_stride;
        }
    }
};

// Sums of the thread's streamed units: the shifted moments s1, s2 of x
// (unless `moments` is false) and, for backward, g1 = sum(dy), g2 =
// sum(dy * (x - center)), in double per value as the register part's.
template <typename T, bool kBackward, int V>
__device__ __forceinline__ void stream_sums(const T* x, const T* dy, int first, int end, int step, float center,
                                            bool moments, PlaneStepper at, double (&sums)[4]) {
    for (int u0 = first; u0 < end; u0 += kStreamLoads * step) {
        Pack<T, V> xs[kStreamLoads];
        Pack<T, V> gs[kBackward ? kStreamLoads : 1];
#pragma unroll
        for (int j = 0; j < kStreamLoads; ++j) {
            if (u0 + j * step < end) {
                xs[j] = load_pack<V>(x + at.offset() * V);
                if (kBackward) gs[kBackward ? j : 0] = load_pack<V>(dy + at.offset() * V);
                at.forward();
            }
        }
        if (moments) {
            float p1 = 0.0f, p2 = 0.0f;
#pragma unroll
            for (int j = 0; j < kStreamLoads; ++j) {
                if (u0 + j * step >= end) continue;
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    const float d = widen(xs[j].lane[v]) - center;
                    p1 += d;
                    p2 = fmaf(d, d, p2);
                }
            }
            if (isfinite(p1) && isfinite(p2)) {
                sums[0] += p1;
                sums[1] += p2;
            } else {  // float overflowed or Inf/NaN: this chunk again in double
#pragma unroll
                for (int j = 0; j < kStreamLoads; ++j) {
                    if (u0 + j * step >= end) continue;
#pragma unroll
                    for (int v = 0; v < V; ++v) {
                        const double d = static_cast<double>(widen(xs[j].lane[v])) - center;
                        sums[0] += d;
                        sums[1] += d * d;
                    }
                }
            }
        }
        if (kBackward) {
#pragma unroll
            for (int j = 0; j < kStreamLoads; ++j) {
                if (u0 + j * step >= end) continue;
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    const double g = widen(gs[kBackward ? j : 0].lane[v]);
                    sums[2] += g;
                    sums[3] += g * (static_cast<double>(widen(xs[j].lane[v])) - center);
                }
            }
        }
    }
}

// The output walk over the streamed units, last first: `value` turns a
// unit's x (and dy) into its outputs.
template <typename T, bool kBackward, int V, typename Value>
__device__ __forceinline__ void stream_outputs(const T* x, const T* dy, T* out, int first, int end, int step,
                                               int channel, int channels, int plane_units, Value value, float alpha,
                                               float beta) {
    if (first >= end) return;
    const int count = (end - first + step - 1) / step;  // this thread's streamed units
    PlaneStepper at(first + (count - 1) * step, step, channel, channels, plane_units);
    for (int j0 = count - 1; j0 >= 0; j0 -= kStreamLoads) {
        Pack<T, V> xs[kStreamLoads];
        Pack<T, V> gs[kBackward ? kStreamLoads : 1];
        int offset[kStreamLoads];
#pragma unroll
        for (int q = 0; q < kStreamLoads; ++q) {
            if (j0 - q < 0) continue;
            offset[q] = at.offset() * V;
            xs[q] = load_pack<V>(x + offset[q]);
            if (kBackward) gs[kBackward ? q : 0] = load_pack<V>(dy + offset[q]);
            at.back();
        }
#pragma unroll
        for (int q = 0; q < kStreamLoads; ++q) {
            if (j0 - q < 0) continue;
            float r[V];
            value(xs[q], gs[kBackward ? q : 0], r);
            store_values<T, V>(out + offset[q], r, alpha, beta);
        }
    }
}

// The block, or a cluster of blocks, owns one tile; kStream: the
// tile is an NCHW channel larger than its blocks' registers, the rest streamed.
// The streamed backward's instances held to 3 blocks of kStreamThreads a
// multiprocessor (80 registers): bfloat16 and float at 4 values a thread
// (86 and 84 registers unbounded: 2 blocks) and every type at one value
// (unbounded, 8 bytes of stack).  H200, two rounds (bench/RESULTS.md,
// forty-first session): bfloat16 64x1024x14x14 1.27x, float 56x56 and
// 112x112 planes 1.03x-1.10x, 128x512x7x7 1.05x.  Half at 4 values (62
// registers, 4 blocks: 0.94x bounded) and 16-bit at 8 (spills: down to
// 0.54x) stay as they are.
template <typename T, bool kBackward, bool kStream, int V>
constexpr bool stream_bounded() {
    return kStream && kBackward && (V == 1 || (V == 4 && (std::is_same<T, float>::value ||
                                                          std::is_same<T, mbn_bfloat16>::value)));
}

template <typename T, bool kBackward, bool kNhwc, bool kStream, int V, int K>
__global__ void __launch_bounds__((stream_bounded<T, kBackward, kStream, V>() ? kStreamThreads : kMaxThreads),
                                  (stream_bounded<T, kBackward, kStream, V>() ? 3 : 0))
    bn_channel_tile(TileArgs a) {
    static_assert(!kStream || !kNhwc, "streamed tiles are NCHW channels");
    constexpr int NC = kNhwc ? V : 1;  // channels one thread's vectors span
    __shared__ TileShared sh;
    const int tile_threads = static_cast<int>(blockDim.x);
    // threadIdx.x itself, but taken modulo the block: without the modulo
    // nvcc gave several instances more registers (half backward, 16-byte
    // vectors, 4 a thread: 64 -> 73, one block a multiprocessor instead of
    // two) and the half NCHW backward rows of 28x28 and 56x56 planes ran
    // 1.26x-1.47x slower (H200, bench/RESULTS.md, fifty-fourth session).
    const int t = static_cast<int>(threadIdx.x) % tile_threads;
    // No division before the loads: the cluster and lanes are powers of two.
    const int rank = static_cast<int>(blockIdx.x) & (a.cluster - 1);
    const int tile = static_cast<int>(blockIdx.x) >> a.cluster_shift;
    const int lane = t & (a.lanes - 1);
    const int row0 = t >> a.lanes_shift;
    const int rows = tile_threads >> a.lanes_shift;
    const int tile_channels = kNhwc ? a.lanes * V : 1;
    const int first_channel = tile * tile_channels;
    const int channel = kNhwc ? first_channel + lane * V : tile;  // of the thread's first slot
    const bool lane_used = channel < a.channels;  // NHWC: the last tile may be narrower
    const int begin = rank * a.block_units;
    const int end = min(a.units, begin + a.block_units);
    const T* x = static_cast<const T*>(a.x);
    const T* dy = static_cast<const T*>(a.dy);

    // Thread t < tile_channels owns channel first_channel + t in tile_sum,
    // finishes it (its statistics kept between the rounds, in its registers
    // or its own slot of sh.coef: kPark below) and hands the output's
    // constants over through shared memory, the only barrier after a round.
    const bool finisher = t < tile_channels && first_channel + t < a.channels;
    const int finisher_channel = first_channel + t;
    const bool saved = kBackward && a.back.saved;
    const bool writer = finisher && rank == 0;
    bool cluster_pending = false;  // a relaxed cluster arrival not yet waited for (tile_sum)

    Pack<T, V> xv[K];
    Pack<T, V> gv[kBackward ? K : 1];
    bool valid[K];
    int at[K];  // each slot's offset, for the loads and the output
    // NCHW: the slots' units are `rows` apart; one division for the first,
    // then steps (a slot's division and index products had made most of
    // the ~270 instructions a small tile issued before its first load).
    int plane_base = 0, plane_s = 0, step_planes = 0, step_rest = 0;
    if constexpr (!kNhwc) {
        const int u0 = begin + row0;
        const int n0 = a.by_plane.divide(u0);
        plane_s = u0 - n0 * a.plane_units;
        plane_base = (n0 * a.channels + channel) * a.plane_units;
        step_planes = a.by_plane.divide(rows);
        step_rest = rows - step_planes * a.plane_units;
    }
    const int plane_stride = a.channels * a.plane_units;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int u = begin + row0 + k * rows;
        valid[k] = lane_used && u < end;
        if constexpr (kNhwc) {
            at[k] = valid[k] ? u * a.channels + channel : 0;
        } else {
            at[k] = valid[k] ? (plane_base + plane_s) * V : 0;
            plane_s += step_rest;
            plane_base += step_planes * plane_stride;
            if (plane_s >= a.plane_units) {
                plane_s -= a.plane_units;
                plane_base += plane_stride;
            }
        }
        if (valid[k]) {
            xv[k] = load_pack<V>(x + at[k]);
            if (kBackward) gv[kBackward ? k : 0] = load_pack<V>(dy + at[k]);
        }
    }
    // The finishing thread's channel inputs.
    ChannelInputs in{};
    if (finisher) in = read_channel<T, kBackward, kNhwc, V>(a, x, finisher_channel);
    // Every thread reads the centers of its own channels (the same few
    // addresses across the block: one request a wave) rather than wait at
    // a barrier for the finishing thread's.
    float center[NC];
#pragma unroll
    for (int j = 0; j < NC; ++j) center[j] = 0.0f;
    if (lane_used) {
        if (saved) {
#pragma unroll
            for (int j = 0; j < NC; ++j) center[j] = static_cast<float>(a.saved_mean.load(channel + j));
        } else if (kNhwc) {
            const Pack<T, V> first = load_pack<V>(x + channel);
#pragma unroll
            for (int j = 0; j < NC; ++j) center[j] = widen(first.lane[j]);
        } else {
            center[0] = widen(x[channel * a.plane_units * V]);
        }
    }
    auto slot = [](int v) { return kNhwc ? v : 0; };
    // The later passes' conversions (widen_in_pass); the streamed instances
    // keep one form: with two they ran slower (H200, bfloat16 32x256x28x28
    // training 18.0 -> 18.9 us) at fewer registers.
    constexpr int kSecondPass = kStream ? 0 : 1, kThirdPass = kStream ? 0 : 2;
    // Per slot: the mean offset and inverse std, then the output's coefficients.
    double stat[NC][2], coef[NC][3];
    // The streamed units' sums (s1, s2, g1, g2), taken while the register
    // loads are in flight.
    const int stream_first = begin + K * rows + row0;
    double streamed[4] = {0.0, 0.0, 0.0, 0.0};
    if (kStream && stream_first < end)
        stream_sums<T, kBackward, V>(x, dy, stream_first, end, rows, center[0], !saved,
                                     PlaneStepper(stream_first, rows, channel, a.channels, a.plane_units), streamed);

    if (!saved) {
        double s1 = 0.0, s2 = 0.0;
        // The slot whose sums the thread holds (wave_scatter_sum).
        const int slot0 = wave_moments<T, kStream, V, K, NC>(xv, valid, center, a.lanes, streamed, s1, s2);
        double total[2];
        tile_sum<NC>(s1, s2, slot0, a, lane, 0, cluster_pending, sh, total);
        // Set on every path: left unset in the other threads, the saved
        // statistics' branch (0, the saved inverse std) became their value
        // and stayed live through the round (4 registers).
        if (finisher)
            finish_statistics<kBackward>(a, finisher_channel, in, total[0], total[1], writer, stat[0]);
        else
            stat[0][0] = stat[0][1] = 0.0;
    } else {
        stat[0][0] = 0.0;
        stat[0][1] = in.param[1];
    }

    if (!kBackward) {
        if (finisher) {
            double k[3];
            forward_coefficients(in, stat[0], k);
            sh.coef[t][0] = k[0];
            sh.coef[t][1] = k[1];
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const int i = kNhwc ? lane * V + j : 0;
            coef[j][0] = sh.coef[i][0];
            coef[j][1] = sh.coef[i][1];
        }
        float factor[NC], shift[NC];
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            factor[j] = static_cast<float>(coef[j][0]);
            shift[j] = static_cast<float>(coef[j][1]);
        }
        T* y = static_cast<T*>(a.out);
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (!valid[k]) continue;
            float r[V];
#pragma unroll
            for (int v = 0; v < V; ++v)
                r[v] = (widen_in_pass<kSecondPass>(xv[k].lane[v]) - center[slot(v)]) * factor[slot(v)] + shift[slot(v)];
            store_values<T, V>(y + at[k], r, a.alpha, a.beta);
        }
        if (kStream) {
            const float factor0 = factor[0], shift0 = shift[0];
            stream_outputs<T, false, V>(x, dy, y, stream_first, end, rows, channel, a.channels, a.plane_units,
                                        [&](const Pack<T, V>& xs, const Pack<T, V>&, float (&r)[V]) {
#pragma unroll
                                            for (int v = 0; v < V; ++v)
                                                r[v] = (widen(xs.lane[v]) - center[0]) * factor0 + shift0;
                                        },
                                        a.alpha, a.beta);
        }
        finish_cluster(cluster_pending);
        return;
    }

    // Backward.  A block-owned NCHW tile's finishing thread parks its
    // statistics and scale in its own slot of sh.coef over the gradient
    // round (it alone reads them back: no barrier).  In registers they
    // stood beside the tile's data through the gradient sums.  Not for
    // NHWC and streamed tiles, whose counts it raised.
    constexpr bool kPark = !kNhwc && !kStream;
    if (kPark && finisher) {
        sh.coef[t][0] = stat[0][0];
        sh.coef[t][1] = stat[0][1];
        sh.coef[t][2] = in.param[0];
    }
    // sum(dy) and sum(dy * (x - center)), in double per value.
    {
        double g1[NC] = {}, g2[NC] = {};
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (!valid[k]) continue;
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const double g = widen_in_pass<kSecondPass>(gv[kBackward ? k : 0].lane[v]);
                g1[slot(v)] += g;
                g2[slot(v)] += g * (static_cast<double>(widen_in_pass<kSecondPass>(xv[k].lane[v])) - center[slot(v)]);
            }
        }
        if (kStream) {
            g1[0] += streamed[2];
            g2[0] += streamed[3];
        }
        const int slot1 = wave_scatter_sum(a.lanes, g1, g2);
        double total[2];
        tile_sum<NC>(g1[0], g2[0], slot1, a, lane, 1, cluster_pending, sh, total);
        if (finisher) {
            const double scale = kPark ? sh.coef[t][2] : in.param[0],
                         parked[2] = {kPark ? sh.coef[t][0] : stat[0][0], kPark ? sh.coef[t][1] : stat[0][1]};
            double k[3], dy_xhat;
            backward_coefficients(a, scale, parked, total[0], total[1], k, dy_xhat);
            sh.coef[t][0] = k[0];
            sh.coef[t][1] = k[1];
            sh.coef[t][2] = k[2];
            if (writer) store_parameter_grads(a, finisher_channel, dy_xhat, total[0]);
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const int i = kNhwc ? lane * V + j : 0;
            coef[j][0] = sh.coef[i][0];
            coef[j][1] = sh.coef[i][1];
            coef[j][2] = sh.coef[i][2];
        }
    }
    T* dx = static_cast<T*>(a.out);
#pragma unroll
    for (int q = 0; q < K; ++q) {
        if (!valid[q]) continue;
        float r[V];
        if (a.back.double_math) {
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const int s = slot(v);
                const double d = static_cast<double>(widen_in_pass<kThirdPass>(xv[q].lane[v])) - center[s];
                const double g = widen_in_pass<kThirdPass>(gv[kBackward ? q : 0].lane[v]);
                r[v] = static_cast<float>(coef[s][0] * g + coef[s][1] * d + coef[s][2]);
            }
        } else {
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const int s = slot(v);
                const float d = widen_in_pass<kThirdPass>(xv[q].lane[v]) - center[s];
                r[v] = static_cast<float>(coef[s][0]) * widen_in_pass<kThirdPass>(gv[kBackward ? q : 0].lane[v]) +
                       static_cast<float>(coef[s][1]) * d + static_cast<float>(coef[s][2]);
            }
        }
        store_values<T, V>(dx + at[q], r, a.alpha, a.beta);
    }
    if (kStream) {
        const double k0 = coef[0][0], k1 = coef[0][1], k2 = coef[0][2];
        const bool double_math = a.back.double_math;
        stream_outputs<T, true, V>(x, dy, dx, stream_first, end, rows, channel, a.channels, a.plane_units,
                                   [&](const Pack<T, V>& xs, const Pack<T, V>& gs, float (&r)[V]) {
                                       if (double_math) {
#pragma unroll
                                           for (int v = 0; v < V; ++v) {
                                               const double d = static_cast<double>(widen(xs.lane[v])) - center[0];
                                               r[v] = static_cast<float>(k0 * widen(gs.lane[v]) + k1 * d + k2);
                                           }
                                       } else {
                                           const float f0 = static_cast<float>(k0), f1 = static_cast<float>(k1),
                                                       f2 = static_cast<float>(k2);
#pragma unroll
                                           for (int v = 0; v < V; ++v)
                                               r[v] = f0 * widen(gs.lane[v]) + f1 * (widen(xs.lane[v]) - center[0]) + f2;
                                       }
                                   },
                                   a.alpha, a.beta);
    }
    finish_cluster(cluster_pending);
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// NCHW channels whose values fit neither a block's registers nor a
// cluster's that the size rule takes: each channel's blocks hold
// kStreamPerThread vectors a thread and stream the rest, summed as it
// arrives and read again, newest first (from L2 while it is still there),
// for the output.  One block a channel, or for float data a cluster where
// the channels are fewer than the multiprocessors.  The size rule takes
// one block a channel, a channel for every multiprocessor, while the
// streamed bytes of the blocks resident at once (taken as two a
// multiprocessor) fill at most half the L2.  Float data whose channels no
// cluster holds in registers (`past_clusters`: the alternative is the
// multi-pass path) stream wherever the blocks cover the multiprocessors:
// there the second read, from L2 or not, beat the multi-pass path (H200,
// bench/RESULTS.md "streamed clusters": 1.03x-1.43x, 32x256x56x56
// training 108 -> 86 us).  16-bit data keep the rule: their instances
// work on 8 values a vector, with per-value gradient sums in double, at
// 2-3 blocks a multiprocessor, and measured 0.67x-1.24x in the backward
// (6 of 8 rows below 1.0x) and 0.73x-1.19x in bfloat16 training.  The
// clusters aim at a block a multiprocessor in training, two in the
// backward (x and dy streamed: one measured 0.91x on 256x64x56x56 float,
// two 1.04x).
ChannelTilePlan plan_streamed(ChannelTilePlan p, const TensorArg& x, bool backward, bool past_clusters,
                              int cluster_most, const DeviceShape& device, PlanRule rule) {
    const bool float_past = x.dtype == DType::f32 && past_clusters;
    const std::int64_t aim = static_cast<std::int64_t>(device.multiprocessors) * (backward ? 2 : 1);
    p.cluster = 1;
    if (float_past && p.tiles < device.multiprocessors)
        while (p.cluster < cluster_most && p.tiles * p.cluster < aim) p.cluster *= 2;
    p.block_units = ceil_div(p.units, p.cluster);
    p.blocks = p.tiles * p.cluster;
    p.threads = kStreamThreads;
    p.per_thread = kStreamPerThread;
    const std::int64_t in_registers = static_cast<std::int64_t>(kStreamThreads) * kStreamPerThread;
    p.stream = p.block_units > in_registers;
    p.nhwc = false;
    const std::int64_t streamed_bytes = std::max<std::int64_t>(0, p.block_units - in_registers) * p.vector *
                                        dtype_size(x.dtype) * (backward ? 2 : 1);
    const std::int64_t resident = std::min<std::int64_t>(p.blocks, 2 * static_cast<std::int64_t>(device.multiprocessors));
    const bool fits_l2 = device.l2_bytes > 0 && resident * streamed_bytes <= device.l2_bytes / 2;
    // Without float_past the cluster stays 1: one block a channel.
    p.usable = rule == PlanRule::wherever_it_fits || (p.blocks >= device.multiprocessors && (float_past || fits_l2));
    return p;
}

ChannelTilePlan plan(const BnGeometry& geom, const TensorArg& x, std::initializer_list<const TensorArg*> data,
                     bool identity, const DeviceShape& device, PlanRule rule) {
    ChannelTilePlan p{};
    if (!identity || geom.mode != BnMode::spatial) return p;
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
    const int wave = std::max(1, device.wave_size);
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
           (p.tiles * p.cluster * 2 <= device.multiprocessors || ceil_div(p.units, p.cluster) > per_block_most))
        p.cluster *= 2;
    p.block_units = ceil_div(p.units, p.cluster);
    const bool backward = data.size() == 3;
    if (p.block_units > per_block_most)
        return nhwc ? p : plan_streamed(p, x, backward, true, cluster_most, device, rule);
    // Blocks small enough that the whole grid is resident at once where the
    // tiles allow (each block's loads, sums and stores then overlap the
    // others'), then the fewest vectors per thread that fit.
    p.blocks = p.tiles * p.cluster;
    const std::int64_t blocks = p.blocks;
    std::int64_t threads = std::max<std::int64_t>(
        2 * wave, std::min<std::int64_t>(kMaxThreads, device.multiprocessors * kResidentThreadsAimed / blocks));
    p.per_thread = 1;
    while (p.per_thread < kMaxPerThread && p.block_units * p.lanes > threads * p.per_thread) p.per_thread *= 2;
    threads = std::min<std::int64_t>(kMaxThreads, ceil_div(ceil_div(p.block_units, p.per_thread) * p.lanes, wave) * wave);
    p.threads = static_cast<int>(threads);
    if (p.threads % p.lanes != 0 || p.lanes > wave) return p;
    // NCHW clusters whose blocks hold more than kMostClusteredUnits yield to
    // the streamed tiles where those serve; else they beat the other paths
    // (H200, bench/RESULTS.md "size rules": 8x64x56x56 half training 16.5 ->
    // 9.4 us, 32x256x56x56 68.7 -> 59.6; where the streamed tiles serve, as
    // 32x512x28x28's, they measured 0.75-0.95x of them in training).
    const bool cluster_ok = p.cluster == 1 || p.block_units * p.lanes <= kMostClusteredUnits;
    if (!nhwc && rule == PlanRule::size_rule && !cluster_ok) {
        const ChannelTilePlan streamed = plan_streamed(p, x, backward, false, cluster_most, device, rule);
        if (streamed.usable) return streamed;
    }
    p.nhwc = nhwc;

    // Left to the other paths: few tiles (a handful of busy multiprocessors
    // would read a large tensor slowly), and NHWC clusters that cluster_ok
    // refuses (8-block clusters of large shares measured 0.37-0.96x of the
    // other paths on the H100, bench/RESULTS.md "channel tiles"), unless the
    // grid is small: clusters of at most 4 blocks, at most 2/3 of the
    // multiprocessors.  Those beat the columns and the multi-pass path with
    // shares of up to 1024 rows, and go ahead of the columns (H200,
    // bench/RESULTS.md "NHWC tiles in small grids": 80 blocks 1.04x-2.48x;
    // 128 blocks 0.76x-1.25x, 160 and more 0.65x-0.83x).
    const std::int64_t bytes = x.element_count() * element;
    const bool busy = p.tiles * p.cluster * 2 >= device.multiprocessors || bytes <= (std::int64_t(1) << 20);
    p.small_grid = nhwc && p.cluster <= kMostSmallGridCluster && p.blocks * 3 <= device.multiprocessors * 2;
    p.usable = rule == PlanRule::wherever_it_fits || (busy && (cluster_ok || p.small_grid || !nhwc));
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
                if constexpr (!kNhwc && kK == kStreamPerThread) {
                    if (p.stream) {
                        launch_clustered(bn_channel_tile<T, kBackward, false, true, kV, kK>,
                                         dim3(static_cast<unsigned>(p.blocks)), dim3(static_cast<unsigned>(p.threads)),
                                         0, p.cluster, target.stream, "bn_channel_tile", a);
                        return;
                    }
                }
                launch_clustered(bn_channel_tile<T, kBackward, kNhwc, false, kV, kK>,
                                 dim3(static_cast<unsigned>(p.blocks)), dim3(static_cast<unsigned>(p.threads)), 0,
                                 p.cluster, target.stream, "bn_channel_tile", a);
            };
            // Vectors per thread: 1, 2 or 4.
            auto with_k = [&](auto nhwc, auto vector) {
                if (p.per_thread <= 1)
                    go(nhwc, vector, std::integral_constant<int, 1>{});
                else if (p.per_thread <= 2)
                    go(nhwc, vector, std::integral_constant<int, 2>{});
                else
                    go(nhwc, vector, std::integral_constant<int, 4>{});
            };
            auto with_vector = [&](auto nhwc) {
                if constexpr (decltype(nhwc)::value) {
                    with_k(nhwc, std::integral_constant<int, kFull>{});
                } else if (p.vector == kFull) {
                    with_k(nhwc, std::integral_constant<int, kFull>{});
                } else if (p.vector == 4) {  // half and bfloat16 only: float's 4 is kFull
                    with_k(nhwc, std::integral_constant<int, 4>{});
                } else if (p.vector == 2) {
                    with_k(nhwc, std::integral_constant<int, 2>{});
                } else {
                    with_k(nhwc, std::integral_constant<int, 1>{});
                }
            };
            if (p.nhwc)
                with_vector(std::true_type{});
            else
                with_vector(std::false_type{});
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
    a.tiles = static_cast<int>(p.tiles);
    a.lanes_shift = log2_of(p.lanes);
    a.cluster_shift = log2_of(p.cluster);
    a.by_plane = make_divisor(a.plane_units);
    const double count = static_cast<double>(geom.reduction_size());
    a.inv_count = 1.0 / count;
    a.unbiased_ratio = unbiased_ratio(count);
    return a;
}

TileParam tile_param(const TensorArg& t) {
    const ChannelParam c = channel_param(t);
    return TileParam{c.ref.data, static_cast<int>(c.stride), c.ref.dtype};
}

}  // namespace

ChannelTilePlan plan_channel_tiles(const BnForwardTraining& p, const DeviceShape& device, PlanRule rule) {
    if (!strides_fit({&p.scale, &p.bias, &p.prev_running_mean, &p.prev_running_var, &p.running_mean,
                      &p.running_var, &p.saved_mean, &p.saved_inv_std},
                     p.geom.len[kC]))
        return ChannelTilePlan{};
    return plan(p.geom, p.x, {&p.x, &p.y}, p.activation.identity(), device, rule);
}

ChannelTilePlan plan_channel_tiles(const BnBackward& p, const DeviceShape& device, PlanRule rule) {
    if (!strides_fit({&p.scale, &p.saved_mean, &p.saved_inv_std, &p.dscale, &p.dbias}, p.geom.len[kC]))
        return ChannelTilePlan{};
    return plan(p.geom, p.x, {&p.x, &p.dy, &p.dx}, p.activation.identity(), device, rule);
}

void run_channel_tiles(const BnForwardTraining& p, const ChannelTilePlan& plan, const LaunchTarget& target) {
    TileArgs a = shape_args(p.geom, plan);
    a.x = p.x.data;
    a.out = p.y.data;
    a.scale = tile_param(p.scale);
    a.saved_mean = tile_param(p.saved_mean);
    a.saved_inv_std = tile_param(p.saved_inv_std);
    a.train.bias = tile_param(p.bias);
    a.train.prev_mean = tile_param(p.prev_running_mean);
    a.train.prev_var = tile_param(p.prev_running_var);
    a.train.running_mean = tile_param(p.running_mean);
    a.train.running_var = tile_param(p.running_var);
    a.train.exp_avg_factor = p.exp_avg_factor;
    a.epsilon = p.epsilon;
    a.alpha = p.out.alpha;
    a.beta = p.out.beta;
    launch<false>(a, p.x.dtype, plan, target);
}

void run_channel_tiles(const BnBackward& p, const ChannelTilePlan& plan, const LaunchTarget& target) {
    TileArgs a = shape_args(p.geom, plan);
    a.x = p.x.data;
    a.dy = p.dy.data;
    a.out = p.dx.data;
    a.scale = tile_param(p.scale);
    a.saved_mean = tile_param(p.saved_mean);
    a.saved_inv_std = tile_param(p.saved_inv_std);
    a.back = TileArgs::Backward{};
    a.back.dscale = tile_param(p.dscale);
    a.back.dbias = tile_param(p.dbias);
    a.back.param_alpha = p.param.alpha;
    a.back.param_beta = p.param.beta;
    a.back.saved = p.saved_mean.present();
    a.back.double_math = !float_backprop_enough(p.geom.reduction_size());
    a.epsilon = p.epsilon;
    a.alpha = p.data.alpha;
    a.beta = p.data.beta;
    launch<true>(a, p.x.dtype, plan, target);
}

}  // namespace gpu
}  // namespace mbn
