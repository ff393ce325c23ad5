// One-launch batch-norm training and backward on tensors held on chip
// (bn_resident.hpp says which calls qualify).
//
// Each block owns one contiguous share of the tensor: a run of whole units
// (NHWC rows of C channels, or segments of NCHW planes).  The phases of one
// launch, separated by grid barriers:
//   copy      x (and dy) from DRAM into shared memory, 16 bytes per access;
//   partials  per-channel sums of the block's copy (NHWC: one pair per
//             (block, channel); NCHW: one pair per unit) into the scratch;
//   finish    each wave of the grid folds the partials of some channels in a
//             fixed order (deterministic: no atomics on values) and writes
//             the statistics, running averages, gradients and the channel's
//             elementwise coefficients;
//   write     y (or dx) from the shared copy and the coefficients.
// Backward without saved statistics runs partials/finish twice: first the
// statistics of x, then the gradient sums.
//
// Numerics: values are taken relative to a per-channel center that is
// exactly representable in the data type (a sample of the channel, or the
// saved mean), so float sums only ever see deviations; a thread sums a few
// dozen values in float and everything wider is summed in double.
#include "gpu/bn_resident.hpp"

#include "common/numerics.hpp"
#include "gpu/block_reduce.h"
#include "gpu/grid_barrier.h"
#include "gpu/norm_math.h"
#include "gpu/param_io.h"
#include "gpu/type_dispatch.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>

namespace mbn {
namespace gpu {
namespace {

constexpr int kThreads = 1024;
constexpr int kMaxChannels = 2048;
// NHWC's block reduction buffer, in doubles (32 KB).
constexpr int kReduceDoubles = 4096;
// A block gets at least this many input bytes (fewer blocks for small
// tensors: fewer partials to fold and a cheaper barrier).
constexpr std::int64_t kMinShareBytes = 16 << 10;

struct ResidentArgs {
    const void* x;
    const void* dy;  // backward
    void* out;       // y, or dx
    ResidentGeometry g;
    ChannelParam scale, bias;
    ChannelParam prev_mean, prev_var, running_mean, running_var;  // training
    ChannelParam saved_mean, saved_inv_std;                        // written (training) or read (backward)
    ChannelParam dscale, dbias;                                    // backward
    double epsilon;
    double exp_avg_factor;
    float alpha, beta;              // y or dx
    float param_alpha, param_beta;  // dscale, dbias
    bool saved;                     // backward: saved statistics given
    bool double_math;               // backward: dx in double (few values per channel)
    bool stats_ready;               // backward: the statistics phase has run (set in the kernel)
    double* partials;               // 2 per (block, channel) or per unit
    double* coefs;                  // 4 per channel
    double* stats;                  // 2 per channel: mean offset, inverse std
    BarrierCounter* counter;
};

// ---- geometry -------------------------------------------------------------------

template <bool kNhwc>
__device__ __forceinline__ int unit_start(const ResidentGeometry& g, int u) {
    if (kNhwc) return u * g.channels;
    const int plane = u / g.segments;
    return plane * g.spatial + (u - plane * g.segments) * g.segment;
}

// The channel of unit u (NCHW).
__device__ __forceinline__ int unit_channel(const ResidentGeometry& g, int u) {
    return (u / g.segments) % g.channels;
}

// The first element of channel c: its center when no saved mean is given.
template <typename T, bool kNhwc>
__device__ __forceinline__ float channel_sample(const ResidentGeometry& g, const T* x, int c) {
    return widen(x[kNhwc ? c : c * g.spatial]);
}

// Shared memory: the per-channel table, NHWC's reduction buffer, then one
// array per input tensor.  Element e of the block's share [first, end) lies
// at array index e - base, base = first rounded down to a vector, so global
// and shared vectors line up.
template <typename T>
struct SharedLayout {
    float* table;    // 4 floats per channel
    double* dtable;  // the same bytes as 4 doubles per channel (dx in double)
    double* reduce;  // kReduceDoubles
    T* data[2];
};

__host__ __device__ constexpr std::size_t round16(std::size_t bytes) { return (bytes + 15) / 16 * 16; }

__host__ __device__ inline std::size_t table_bytes(int channels) {
    return round16(static_cast<std::size_t>(channels) * 4 * sizeof(double));
}
__host__ __device__ inline std::size_t reduce_bytes(bool nhwc) {
    return nhwc ? static_cast<std::size_t>(kReduceDoubles) * sizeof(double) : 0;
}
template <typename T>
__host__ __device__ inline std::size_t data_bytes(int capacity) {
    return round16((static_cast<std::size_t>(capacity) + 16 / sizeof(T)) * sizeof(T));
}

extern __shared__ float4 resident_shared[];

template <typename T, bool kNhwc>
__device__ SharedLayout<T> shared_layout(const ResidentGeometry& g) {
    unsigned char* base = reinterpret_cast<unsigned char*>(resident_shared);
    SharedLayout<T> s;
    s.table = reinterpret_cast<float*>(base);
    s.dtable = reinterpret_cast<double*>(base);
    base += table_bytes(g.channels);
    s.reduce = reinterpret_cast<double*>(base);
    base += reduce_bytes(kNhwc);
    s.data[0] = reinterpret_cast<T*>(base);
    s.data[1] = reinterpret_cast<T*>(base + data_bytes<T>(g.capacity));
    return s;
}

// ---- copy in ----------------------------------------------------------------------

// Copies elements [first, end) of src into dst (index e - base).
template <typename T>
__device__ void copy_share(const T* __restrict__ src, T* __restrict__ dst, int first, int end, int base) {
    constexpr int V = 16 / sizeof(T);
    const int t = threadIdx.x;
    int lo = (first + V - 1) / V * V;
    int hi = end / V * V;
    if (lo > hi) lo = hi = end;
    for (int e = first + t; e < lo; e += kThreads) dst[e - base] = src[e];
    for (int e = hi + t; e < end; e += kThreads) dst[e - base] = src[e];
    using Vec = Pack<T, V>;
    const Vec* s = reinterpret_cast<const Vec*>(src + lo);
    Vec* d = reinterpret_cast<Vec*>(dst + (lo - base));
    const int count = (hi - lo) / V;
    int i = t;
    constexpr int kInFlight = 8;  // 16-byte loads per thread in flight
    for (; i + (kInFlight - 1) * kThreads < count; i += kInFlight * kThreads) {
        Vec v[kInFlight];
#pragma unroll
        for (int k = 0; k < kInFlight; ++k) v[k] = s[i + k * kThreads];
#pragma unroll
        for (int k = 0; k < kInFlight; ++k) d[i + k * kThreads] = v[k];
    }
    for (; i < count; i += kThreads) d[i] = s[i];
}

// ---- partial sums -------------------------------------------------------------------

// What the partials sum per value, around a per-channel center cx that is
// exact in float:
//   statistics: d = x - cx and d*d, in float batches added into doubles;
//   gradients:  dy and dy*(x - cx), in double per value: sum(dy * d) often
//               cancels to a small value from large terms (dy with a mean
//               far from 0), where float rounding of each term would show
//               in dscale past its tolerance.
enum class Sums { statistics, gradients };
constexpr int kEntry = 2;  // doubles per partial entry

template <Sums kSums, typename A>
__device__ __forceinline__ void accumulate(A x, A dy, A cx, A (&sum)[2]) {
    const A d = x - cx;
    if (kSums == Sums::statistics) {
        sum[0] += d;
        sum[1] = d * d + sum[1];
    } else {
        sum[0] += dy;
        sum[1] = dy * d + sum[1];
    }
}

constexpr int kFloatBatch = 8;  // values summed in float before a double add

// NHWC: a thread owns kLaneChannels consecutive channels (j) and walks the
// rows rl, rl + row_lanes, ... of the block's share; the same mapping serves
// the partials and the write, so a thread's channel constants stay in
// registers and its shared-memory reads never conflict.
constexpr int kLaneChannels = 4;

struct LaneMap {
    int lanes, row_lanes, j, rl;
    __device__ explicit LaneMap(int channels) {
        lanes = channels / kLaneChannels;  // <= kThreads: channels <= kMaxChannels
        row_lanes = kThreads / lanes;
        j = static_cast<int>(threadIdx.x) % lanes;
        rl = static_cast<int>(threadIdx.x) / lanes;
    }
    __device__ bool active() const { return rl < row_lanes; }
};

// The thread's sums of its channels over its rows.  Statistics: floats for
// a batch of rows, then added into doubles (a float running sum over
// hundreds of values drifts; see numerics.hpp), redone in double if a float
// overflowed (values near 1e30) or met Inf/NaN.  Gradients: double.
template <typename T, Sums kSums>
__device__ void lane_sums(const SharedLayout<T>& s, const LaneMap& m, int C, int first, int rows, int base,
                          double (&wide)[kLaneChannels][2]) {
    constexpr int K = kLaneChannels;
    float cx[K];
#pragma unroll
    for (int v = 0; v < K; ++v) {
        cx[v] = s.table[(m.j * K + v) * 4];
        wide[v][0] = wide[v][1] = 0.0;
    }
    if (kSums == Sums::statistics) {
        bool finite = true;
        for (int r0 = m.rl; r0 < rows; r0 += kFloatBatch * m.row_lanes) {
            float sum[K][2] = {};
            const int r_end = min(rows, r0 + kFloatBatch * m.row_lanes);
            for (int r = r0; r < r_end; r += m.row_lanes) {
                float xv[K];
                load_values<float, K>(s.data[0] + (first + r * C + m.j * K - base), xv);
#pragma unroll
                for (int v = 0; v < K; ++v) accumulate<kSums>(xv[v], 0.0f, cx[v], sum[v]);
            }
#pragma unroll
            for (int v = 0; v < K; ++v)
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    finite = finite && isfinite(sum[v][q]);
                    wide[v][q] += sum[v][q];
                }
        }
        if (finite) return;
#pragma unroll
        for (int v = 0; v < K; ++v) wide[v][0] = wide[v][1] = 0.0;
    }
    for (int r = m.rl; r < rows; r += m.row_lanes) {
        const int at = first + r * C + m.j * K - base;
        double xv[K], dv[K];
        load_values<double, K>(s.data[0] + at, xv);
        if (kSums == Sums::gradients) load_values<double, K>(s.data[1] + at, dv);
#pragma unroll
        for (int v = 0; v < K; ++v)
            accumulate<kSums>(xv[v], kSums == Sums::gradients ? dv[v] : 0.0, static_cast<double>(cx[v]), wide[v]);
    }
}

// NHWC partials: the block folds its row lanes per channel and writes one
// entry per channel to the partials (channel-major, see fold_channels).
template <typename T, Sums kSums>
__device__ void nhwc_partials(const ResidentArgs& a, const SharedLayout<T>& s, int first, int end, int base) {
    constexpr int K = kLaneChannels;
    constexpr int N = kEntry;
    const int C = a.g.channels;
    const LaneMap m(C);
    const int t = threadIdx.x;
    double wide[K][2];
    if (m.active()) lane_sums<T, kSums>(s, m, C, first, (end - first) / C, base, wide);
    // Fold the row lanes of each channel, a slice of row lanes at a time
    // through the buffer.  Reader threads: `part` of `parts` lanes per channel.
    int parts = 1;
    while (parts * 2 <= MBN_WAVE_SIZE && parts * 2 * C <= kThreads) parts *= 2;
    const int readers = kThreads / parts;  // channels read per sweep
    const int slice = kReduceDoubles / (N * C) < 1 ? 1 : kReduceDoubles / (N * C);  // row lanes per round
    double acc[2][2] = {};  // C <= 2 * readers
    const int part = t % parts;
    for (int r0 = 0; r0 < m.row_lanes; r0 += slice) {
        if (m.active() && m.rl >= r0 && m.rl < r0 + slice) {
#pragma unroll
            for (int v = 0; v < K; ++v)
#pragma unroll
                for (int q = 0; q < N; ++q) s.reduce[((m.rl - r0) * C + m.j * K + v) * N + q] = wide[v][q];
        }
        __syncthreads();
        const int upto = min(slice, m.row_lanes - r0);
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const int c = t / parts + k * readers;
            if (c < C)
                for (int q = part; q < upto; q += parts)
#pragma unroll
                    for (int n = 0; n < N; ++n) acc[k][n] += s.reduce[(q * C + c) * N + n];
        }
        __syncthreads();
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
#pragma unroll
        for (int n = 0; n < N; ++n)
            for (int mask = 1; mask < parts; mask *= 2) acc[k][n] += shuffle_xor(acc[k][n], mask);
        const int c = t / parts + k * readers;
        if (part == 0 && c < C) {
            double* out = a.partials + (static_cast<std::size_t>(c) * gridDim.x + blockIdx.x) * kEntry;
#pragma unroll
            for (int n = 0; n < N; ++n) out[n] = acc[k][n];
        }
    }
}

// NCHW: a team of `lanes` threads sums each unit of the block's share and
// writes its entry to the partials (in float batches or in double, as
// lane_sums).
template <typename T, Sums kSums>
__device__ void nchw_partials(const ResidentArgs& a, const SharedLayout<T>& s, int u0, int u1, int base) {
    // Lanes per unit: enough to busy the block, each lane with >= 8 values.
    int lanes = 1;
    while (lanes < MBN_WAVE_SIZE && lanes * 8 < a.g.segment && lanes * 2 * (u1 - u0) <= kThreads) lanes *= 2;
    const int t = threadIdx.x;
    const int lane = t % lanes;
    const int teams = kThreads / lanes;
    // Every thread of a team loops alike, so the shuffles below see the whole team.
    for (int u = u0 + t / lanes; u - (t / lanes) < u1; u += teams) {
        double wide[2] = {0.0, 0.0};
        if (u < u1) {
            const int c = unit_channel(a.g, u);
            const float cx = s.table[c * 4];
            const int first = unit_start<false>(a.g, u) - base;
            const int end = unit_start<false>(a.g, u + 1) - base;
            bool exact = kSums == Sums::gradients;
            if (!exact) {
                for (int e0 = first + lane; e0 < end; e0 += kFloatBatch * lanes) {
                    float sum[2] = {0.0f, 0.0f};
                    const int e_end = min(end, e0 + kFloatBatch * lanes);
                    for (int e = e0; e < e_end; e += lanes) accumulate<kSums>(widen(s.data[0][e]), 0.0f, cx, sum);
                    exact = exact || !isfinite(sum[0]) || !isfinite(sum[1]);
                    wide[0] += sum[0];
                    wide[1] += sum[1];
                }
            }
            if (exact) {
                wide[0] = wide[1] = 0.0;
                for (int e = first + lane; e < end; e += lanes) {
                    const double xv = widen(s.data[0][e]);
                    const double dv = kSums == Sums::gradients ? static_cast<double>(widen(s.data[1][e])) : 0.0;
                    accumulate<kSums>(xv, dv, static_cast<double>(cx), wide);
                }
            }
        }
        wave_sum(1, lanes, wide);
        if (lane == 0 && u < u1) {
            // Channel-major: (c, n, segment).
            const int plane = u / a.g.segments;
            const int n = plane / a.g.channels;
            const int c = plane - n * a.g.channels;
            double* out = a.partials + ((static_cast<std::size_t>(c) * a.g.samples + n) * a.g.segments +
                                        (u - plane * a.g.segments)) * kEntry;
            out[0] = wide[0];
            out[1] = wide[1];
        }
    }
}

// ---- finish -------------------------------------------------------------------------

// What a channel's finish reads besides its sums, loaded by one lane each
// so the loads overlap (one after another they cost a round trip each).
enum ChannelInput {
    kScale, kBias, kPrevMean, kPrevVar, kSample, kSavedMean, kSavedInvStd, kStatMeanOffset, kStatInvStd,
    kInputs
};

template <typename T, bool kNhwc>
__device__ double load_channel_input(const ResidentArgs& a, int c, int which) {
    switch (which) {
        case kScale: return a.scale.present() ? a.scale.load(c) : 0.0;
        case kBias: return a.bias.present() ? a.bias.load(c) : 0.0;
        case kPrevMean: return a.prev_mean.present() ? a.prev_mean.load(c) : 0.0;
        case kPrevVar: return a.prev_var.present() ? a.prev_var.load(c) : 0.0;
        case kSample: return channel_sample<T, kNhwc>(a.g, static_cast<const T*>(a.x), c);
        case kSavedMean: return a.saved && a.saved_mean.present() ? a.saved_mean.load(c) : 0.0;
        case kSavedInvStd: return a.saved && a.saved_inv_std.present() ? a.saved_inv_std.load(c) : 0.0;
        case kStatMeanOffset: return a.stats_ready ? load_after_barrier(a.stats + c * 2) : 0.0;
        case kStatInvStd: return a.stats_ready ? load_after_barrier(a.stats + c * 2 + 1) : 0.0;
        default: return 0.0;
    }
}

__device__ __forceinline__ double shuffle_from(double value, int lane) {
#if MBN_GPU_CUDA
    return __shfl_sync(wave_members(), value, lane);
#else
    return __shfl(value, lane);
#endif
}

// Partial entry i of channel c: channel-major, so a wave reads a channel's
// entries contiguously.  NHWC: one entry per block; NCHW: per (n, segment).
__device__ __forceinline__ int entries_per_channel(const ResidentGeometry& g, bool nhwc) {
    return nhwc ? static_cast<int>(gridDim.x) : g.samples * g.segments;
}

// The grid's waves share the channels (consecutive channels on different
// blocks); each folds one channel's partials in a fixed order and calls
// finish(c, sums, inputs) on its first lane.
template <typename T, bool kNhwc, typename Finish>
__device__ void fold_channels(const ResidentArgs& a, Finish&& finish) {
    const int waves_per_block = kThreads / MBN_WAVE_SIZE;
    const int lane = threadIdx.x % MBN_WAVE_SIZE;
    const int waves = gridDim.x * waves_per_block;
    const int entries = entries_per_channel(a.g, kNhwc);
    const int first_wave = static_cast<int>(threadIdx.x / MBN_WAVE_SIZE * gridDim.x + blockIdx.x);
    for (int c = first_wave; c < a.g.channels; c += waves) {
        const double mine = lane < kInputs ? load_channel_input<T, kNhwc>(a, c, lane) : 0.0;
        const double* entry = a.partials + static_cast<std::size_t>(c) * entries * kEntry;
        double sum[2] = {0.0, 0.0};
#pragma unroll 4
        for (int i = lane; i < entries; i += MBN_WAVE_SIZE) {
            sum[0] += load_after_barrier(entry + i * kEntry);
            sum[1] += load_after_barrier(entry + i * kEntry + 1);
        }
#pragma unroll
        for (int q = 0; q < kEntry; ++q)
            for (int mask = 1; mask < MBN_WAVE_SIZE; mask *= 2) sum[q] += shuffle_xor(sum[q], mask);
        double in[kInputs];
#pragma unroll
        for (int i = 0; i < kInputs; ++i) in[i] = shuffle_from(mine, i);
        if (lane == 0) finish(c, sum, in);
    }
}

__device__ __forceinline__ double reduction_count(const ResidentGeometry& g) {
    return static_cast<double>(g.samples) * static_cast<double>(g.spatial);
}

// Mean offset (from the center) and biased variance from the sums of d and d*d.
struct ChannelStatistics {
    double mean_offset;
    double variance;
    double inv_std;
};
__device__ __forceinline__ ChannelStatistics channel_statistics(double s1, double s2, double m, double epsilon) {
    ChannelStatistics st;
    st.mean_offset = s1 / m;
    st.variance = fmax((s2 - s1 * st.mean_offset) / m, 0.0);
    st.inv_std = inverse_std(st.variance, epsilon);
    return st;
}

// Training: statistics, running averages, and y = (x - center) * a + b.
template <typename T, bool kNhwc>
__device__ void finish_training(const ResidentArgs& a, int c, const double (&sum)[2], const double (&in)[kInputs]) {
    const double m = reduction_count(a.g);
    const ChannelStatistics st = channel_statistics(sum[0], sum[1], m, a.epsilon);
    const double center = in[kSample];
    const double mean = center + st.mean_offset;
    if (a.running_mean.present()) {
        const double unbiased = unbiased_variance(st.variance, m);
        const double f = a.exp_avg_factor;
        const double rm = in[kPrevMean], rv = in[kPrevVar];
        a.running_mean.store(c, running_update(rm, mean, f));
        a.running_var.store(c, running_update(rv, unbiased, f));
    }
    if (a.saved_mean.present()) {
        a.saved_mean.store(c, mean);
        a.saved_inv_std.store(c, st.inv_std);
    }
    const double factor = in[kScale] * st.inv_std;
    double* k = a.coefs + static_cast<std::size_t>(c) * 4;
    k[0] = center;
    k[1] = factor;
    k[2] = in[kBias] - st.mean_offset * factor;
    k[3] = 0.0;
}

// Backward without saved statistics: the statistics alone.
template <typename T, bool kNhwc>
__device__ void finish_backward_statistics(const ResidentArgs& a, int c, const double (&sum)[2],
                                           const double (&)[kInputs]) {
    const ChannelStatistics st = channel_statistics(sum[0], sum[1], reduction_count(a.g), a.epsilon);
    a.stats[c * 2] = st.mean_offset;
    a.stats[c * 2 + 1] = st.inv_std;
}

// Backward: dscale, dbias, and dx = c0 * dy + c1 * (x - cx) + c2 from the
// gradient sums around cx.
template <typename T, bool kNhwc>
__device__ void finish_backward(const ResidentArgs& a, int c, const double (&sum)[2], const double (&in)[kInputs]) {
    const double m = reduction_count(a.g);
    double center, mean_offset, inv_std;
    if (a.saved) {
        center = static_cast<float>(in[kSavedMean]);
        mean_offset = 0.0;
        inv_std = in[kSavedInvStd];
    } else {
        center = in[kSample];
        mean_offset = in[kStatMeanOffset];
        inv_std = in[kStatInvStd];
    }
    const double g1 = sum[0];  // sum(dy)
    const double g2 = sum[1];  // sum(dy * (x - cx))
    const double centered = g2 - mean_offset * g1;  // sum(dy * (x - mean))
    const double dy_xhat = centered * inv_std;
    a.dscale.store_blended(c, dy_xhat, a.param_alpha, a.param_beta);
    a.dbias.store_blended(c, g1, a.param_alpha, a.param_beta);
    const double factor = in[kScale] * inv_std;
    const double c1 = -factor * inv_std * dy_xhat / m;
    double* k = a.coefs + static_cast<std::size_t>(c) * 4;
    k[0] = center;
    k[1] = factor;
    k[2] = c1;
    k[3] = -factor * g1 / m - c1 * mean_offset;
}

// ---- per-channel table --------------------------------------------------------------

// The centers for the partials phase: x's first sample of the channel, or
// the saved mean (backward).
template <typename T, bool kNhwc>
__device__ void load_centers(const ResidentArgs& a, const SharedLayout<T>& s, bool saved_mean) {
    for (int c = threadIdx.x; c < a.g.channels; c += kThreads)
        s.table[c * 4] = saved_mean ? static_cast<float>(a.saved_mean.load(c))
                                    : channel_sample<T, kNhwc>(a.g, static_cast<const T*>(a.x), c);
    __syncthreads();
}

// The coefficients the finish phase wrote, as floats or as doubles.
template <typename T>
__device__ void load_coefficients(const ResidentArgs& a, const SharedLayout<T>& s, bool as_double) {
    for (int i = threadIdx.x; i < a.g.channels * 4; i += kThreads) {
        const double v = load_after_barrier(a.coefs + i);
        if (as_double)
            s.dtable[i] = v;
        else
            s.table[i] = static_cast<float>(v);
    }
    __syncthreads();
}

// ---- write --------------------------------------------------------------------------

// The channel of consecutive NCHW elements (vectors may cross planes).
struct PlaneCursor {
    int c, r;
    __device__ PlaneCursor(const ResidentGeometry& g, int e) {
        const int plane = e / g.spatial;
        r = e - plane * g.spatial;
        c = plane % g.channels;
    }
    __device__ __forceinline__ void next(const ResidentGeometry& g) {
        if (++r == g.spatial) {
            r = 0;
            if (++c == g.channels) c = 0;
        }
    }
};

// NHWC's write on the partials' lane map: the thread's channel constants
// sit in registers.
template <typename T, bool kBackward, typename A, typename Table>
__device__ void write_rows(const ResidentArgs& a, const SharedLayout<T>& s, const Table* table, int first, int end,
                           int base) {
    constexpr int K = kLaneChannels;
    const int C = a.g.channels;
    const LaneMap m(C);
    if (!m.active()) return;
    A k[4][K];
#pragma unroll
    for (int v = 0; v < K; ++v)
#pragma unroll
        for (int q = 0; q < 4; ++q) k[q][v] = static_cast<A>(table[(m.j * K + v) * 4 + q]);
    T* out = static_cast<T*>(a.out);
    const int rows = (end - first) / C;
    for (int r = m.rl; r < rows; r += m.row_lanes) {
        const int e = first + r * C + m.j * K;
        A xv[K], dv[K], result[K];
        load_values<A, K>(s.data[0] + (e - base), xv);
        if (kBackward) load_values<A, K>(s.data[1] + (e - base), dv);
#pragma unroll
        for (int v = 0; v < K; ++v) {
            const A d = xv[v] - k[0][v];
            result[v] = kBackward ? k[1][v] * dv[v] + k[2][v] * d + k[3][v] : d * k[1][v] + k[2][v];
        }
        store_values<T, K>(out + e, result, a.alpha, a.beta);
    }
}

// NCHW's write: y (or dx) over the block's share, V elements per access;
// out-of-vector head and tail elements go one at a time.
template <typename T, bool kBackward, typename A, typename Table>
__device__ void write_planes(const ResidentArgs& a, const SharedLayout<T>& s, const Table* table, int first, int end,
                            int base) {
    constexpr int V = 16 / sizeof(T);
    T* out = static_cast<T*>(a.out);
    auto value = [&](int c, A xv, A dv) -> A {
        const Table* k = table + c * 4;
        const A d = xv - static_cast<A>(k[0]);
        if (kBackward) return static_cast<A>(k[1]) * dv + static_cast<A>(k[2]) * d + static_cast<A>(k[3]);
        return d * static_cast<A>(k[1]) + static_cast<A>(k[2]);
    };
    int lo = (first + V - 1) / V * V;
    int hi = end / V * V;
    if (lo > hi) lo = hi = end;
    const int t = threadIdx.x;
    auto one = [&](int e) {
        const PlaneCursor cur(a.g, e);
        const A xv = widen(s.data[0][e - base]);
        const A dv = kBackward ? static_cast<A>(widen(s.data[1][e - base])) : A(0);
        store_blended(out, e, value(cur.c, xv, dv), a.alpha, a.beta);
    };
    for (int e = first + t; e < lo; e += kThreads) one(e);
    for (int e = hi + t; e < end; e += kThreads) one(e);
    for (int e = lo + t * V; e < hi; e += kThreads * V) {
        A xv[V], dv[V], result[V];
        load_values<A, V>(s.data[0] + (e - base), xv);
        if (kBackward) load_values<A, V>(s.data[1] + (e - base), dv);
        PlaneCursor cur(a.g, e);
#pragma unroll
        for (int v = 0; v < V; ++v) {
            result[v] = value(cur.c, xv[v], kBackward ? dv[v] : A(0));
            cur.next(a.g);
        }
        store_values<T, V>(out + e, result, a.alpha, a.beta);
    }
}

// ---- the kernel ---------------------------------------------------------------------

template <typename T, bool kNhwc, Sums kSums>
__device__ void partials_phase(const ResidentArgs& a, const SharedLayout<T>& s, int u0, int u1, int first, int end,
                               int base) {
    if (kNhwc)
        nhwc_partials<T, kSums>(a, s, first, end, base);
    else
        nchw_partials<T, kSums>(a, s, u0, u1, base);
}

template <typename T, bool kNhwc, bool kBackward>
__global__ void __launch_bounds__(kThreads, 1) bn_resident(ResidentArgs a) {
    constexpr int V = 16 / sizeof(T);
    const SharedLayout<T> s = shared_layout<T, kNhwc>(a.g);
    const int u0 = min(a.g.units, static_cast<int>(blockIdx.x) * a.g.units_per_block);
    const int u1 = min(a.g.units, u0 + a.g.units_per_block);
    const int first = unit_start<kNhwc>(a.g, u0);
    const int end = unit_start<kNhwc>(a.g, u1);
    const int base = first / V * V;

    copy_share(static_cast<const T*>(a.x), s.data[0], first, end, base);
    if (kBackward) copy_share(static_cast<const T*>(a.dy), s.data[1], first, end, base);
    unsigned barriers = 0;

    if (!kBackward || !a.saved) {
        load_centers<T, kNhwc>(a, s, false);  // also orders the copies before the partials
        partials_phase<T, kNhwc, Sums::statistics>(a, s, u0, u1, first, end, base);
        grid_barrier(a.counter, ++barriers);
        if (kBackward)
            fold_channels<T, kNhwc>(a, [&](int c, const double(&sum)[2], const double(&in)[kInputs]) { finish_backward_statistics<T, kNhwc>(a, c, sum, in); });
        else
            fold_channels<T, kNhwc>(a, [&](int c, const double(&sum)[2], const double(&in)[kInputs]) { finish_training<T, kNhwc>(a, c, sum, in); });
        grid_barrier(a.counter, ++barriers);
    }
    if (kBackward) {
        // The gradient sums, around the saved mean or the channel's sample.
        load_centers<T, kNhwc>(a, s, a.saved);
        partials_phase<T, kNhwc, Sums::gradients>(a, s, u0, u1, first, end, base);
        grid_barrier(a.counter, ++barriers);
        fold_channels<T, kNhwc>(a, [&](int c, const double(&sum)[2], const double(&in)[kInputs]) { finish_backward<T, kNhwc>(a, c, sum, in); });
        grid_barrier(a.counter, ++barriers);
    }
    grid_barrier_exit(a.counter, barriers);

    if (kBackward && a.double_math) {
        load_coefficients(a, s, true);
        if (kNhwc)
            write_rows<T, kBackward, double>(a, s, s.dtable, first, end, base);
        else
            write_planes<T, kBackward, double>(a, s, s.dtable, first, end, base);
    } else {
        load_coefficients(a, s, false);
        if (kNhwc)
            write_rows<T, kBackward, float>(a, s, s.table, first, end, base);
        else
            write_planes<T, kBackward, float>(a, s, s.table, first, end, base);
    }
}

// ---- host -----------------------------------------------------------------------

// Where the one-launch kernel beats the multi-pass ones (H100, bench/RESULTS.md
// "one-launch batch norm"): it pays ~10 us of fixed cost (a launch with
// 230 KB of shared memory per block, two grid barriers, the fold) that small
// tensors do not amortize, and NCHW planes of 256 values and more are
// already streamed well by the multi-pass kernels below ~12 MB.
bool worth_one_launch(std::int64_t input_bytes, bool nhwc, std::int64_t spatial) {
    constexpr std::int64_t kLeast = std::int64_t(2) << 20;
    constexpr std::int64_t kLongPlanesLeast = std::int64_t(12) << 20;
    if (input_bytes < kLeast) return false;
    return nhwc || spatial < 256 || input_bytes >= kLongPlanesLeast;
}

template <typename T, bool kNhwc, bool kBackward>
void* kernel_of() {
    return reinterpret_cast<void*>(&bn_resident<T, kNhwc, kBackward>);
}

// Blocks of one kernel instance that fit a multiprocessor with `shared`
// bytes each; the instance is allowed that much shared memory first.
template <typename T, bool kNhwc, bool kBackward>
int resident_blocks_per_multiprocessor(std::size_t shared) {
    // One answer per (instance, device, shared bytes): the query costs
    // microseconds of host time per call otherwise.
    constexpr int kDevices = 64;
    static std::atomic<std::size_t> known_shared[kDevices];
    static std::atomic<int> known_blocks[kDevices];
    int device = 0;
    check_runtime(hipGetDevice(&device), "hipGetDevice");
    const bool cached = device >= 0 && device < kDevices;
    if (cached && known_shared[device].load() == shared) return known_blocks[device].load();
#if MBN_GPU_CUDA
    check_runtime(cudaFuncSetAttribute(bn_resident<T, kNhwc, kBackward>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(shared)),
                  "cudaFuncSetAttribute");
#endif
    int blocks = 0;
    check_runtime(hipOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, bn_resident<T, kNhwc, kBackward>, kThreads,
                                                               shared),
                  "hipOccupancyMaxActiveBlocksPerMultiprocessor");
    if (cached) {
        known_blocks[device].store(blocks);
        known_shared[device].store(shared);
    }
    return blocks;
}

template <typename Body>
void with_resident_type(DType dtype, Body&& body) {
    switch (dtype) {
        case DType::f16: body(TypeTag<__half>{}); return;
        case DType::bf16: body(TypeTag<mbn_bfloat16>{}); return;
        default: body(TypeTag<float>{}); return;
    }
}

// The geometry and grid of one call with `tensors` inputs held on chip, or
// an unusable plan.
template <bool kBackward>
ResidentPlan plan_geometry(const BnGeometry& geom, const TensorArg& x, std::initializer_list<const TensorArg*> data,
                           const DeviceShape& device, PlanRule rule) {
    ResidentPlan plan;
    if (geom.mode != BnMode::spatial || device.shared_bytes_per_block <= 0)
        return plan;
    if (x.dtype != DType::f16 && x.dtype != DType::bf16 && x.dtype != DType::f32) return plan;
    if (!packed_alike(data)) return plan;  // data: x first
    const std::int64_t elements = x.element_count();
    const std::int64_t channels = geom.len[kC];
    const std::int64_t spatial = geom.spatial_size();
    if (elements >= (std::int64_t(1) << 31) || channels > kMaxChannels) return plan;
    const bool nhwc = x.order == MemoryOrder::packed_nhwc && channels > 1 && spatial > 1;
    const int element = static_cast<int>(dtype_size(x.dtype));
    const int V = 16 / element;
    if (nhwc && channels % kLaneChannels != 0) return plan;

    const int tensors = kBackward ? 2 : 1;
    if (rule == PlanRule::size_rule &&
        !worth_one_launch(elements * element * tensors, nhwc, spatial))
        return plan;
    const std::size_t fixed = table_bytes(static_cast<int>(channels)) + reduce_bytes(nhwc);
    const std::size_t shared = static_cast<std::size_t>(device.shared_bytes_per_block);
    if (shared <= fixed + 64 * 16 * tensors) return plan;
    const std::int64_t capacity =
        ((static_cast<std::int64_t>((shared - fixed) / tensors) - 16) / element - V) / V * V;
    if (capacity < V) return plan;

    int per_multiprocessor = 0;
    with_resident_type(x.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        per_multiprocessor = nhwc ? resident_blocks_per_multiprocessor<T, true, kBackward>(shared)
                                  : resident_blocks_per_multiprocessor<T, false, kBackward>(shared);
    });
    const std::int64_t max_blocks = static_cast<std::int64_t>(per_multiprocessor) * device.multiprocessors;
    if (max_blocks < 1) return plan;
    const std::int64_t input_bytes = elements * element * tensors;
    const std::int64_t wanted = std::min<std::int64_t>(max_blocks, std::max<std::int64_t>(1, input_bytes / kMinShareBytes));

    ResidentGeometry g;
    g.channels = static_cast<int>(channels);
    g.spatial = static_cast<int>(spatial);
    g.samples = static_cast<int>(geom.len[kN]);
    std::int64_t unit_length = channels;
    std::int64_t units = geom.len[kN] * spatial;
    if (!nhwc) {
        const std::int64_t planes = geom.len[kN] * channels;
        // Enough segments that every block has a plane piece per wave to sum
        // (kUnitsPerBlock), each of at least kMinSegment values, and none
        // longer than a block holds.
        constexpr std::int64_t kUnitsPerBlock = kThreads / 32;
        constexpr std::int64_t kMinSegment = 64;
        const std::int64_t busy = (wanted * kUnitsPerBlock + planes - 1) / planes;
        std::int64_t segments = std::max<std::int64_t>(1, std::min(busy, spatial / kMinSegment));
        segments = std::max(segments, (spatial + capacity - 1) / capacity);
        segments = std::min(segments, spatial);
        const std::int64_t segment = (spatial + segments - 1) / segments;
        g.segments = static_cast<int>((spatial + segment - 1) / segment);
        g.segment = static_cast<int>(segment);
        unit_length = segment;
        units = planes * g.segments;
    }
    const std::int64_t units_fit = capacity / unit_length;
    if (units_fit < 1) return plan;
    const std::int64_t needed = (units + units_fit - 1) / units_fit;
    if (needed > max_blocks) return plan;
    std::int64_t blocks = std::max(needed, std::min(wanted, units));
    const std::int64_t per_block = (units + blocks - 1) / blocks;
    blocks = (units + per_block - 1) / per_block;
    g.units = static_cast<int>(units);
    g.units_per_block = static_cast<int>(per_block);
    g.capacity = static_cast<int>(capacity);

    plan.usable = true;
    plan.channels_last = nhwc;
    plan.blocks = static_cast<int>(blocks);
    plan.threads = kThreads;
    plan.shared_bytes = shared;
    plan.geom = g;
    const std::int64_t partial_entries = nhwc ? blocks * channels : units;
    plan.scratch_bytes = static_cast<std::size_t>(partial_entries * kEntry + channels * 4 + channels * 2) * sizeof(double);
    plan.counters = 1;
    return plan;
}

ResidentArgs common_args(const ResidentPlan& plan, const LaunchTarget& target) {
    ResidentArgs a{};
    a.g = plan.geom;
    const std::int64_t channels = plan.geom.channels;
    const std::int64_t partial_entries = plan.channels_last ? plan.blocks * channels : plan.geom.units;
    a.partials = static_cast<double*>(target.scratch);
    a.coefs = a.partials + partial_entries * kEntry;
    a.stats = a.coefs + channels * 4;
    a.counter = target.counters;
    return a;
}

template <bool kBackward>
void launch(const ResidentArgs& a, const ResidentPlan& plan, DType dtype, const LaunchTarget& target) {
    with_resident_type(dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (plan.channels_last)
            bn_resident<T, true, kBackward><<<plan.blocks, plan.threads, plan.shared_bytes, target.stream>>>(a);
        else
            bn_resident<T, false, kBackward><<<plan.blocks, plan.threads, plan.shared_bytes, target.stream>>>(a);
        check_launch("bn_resident");
    });
}

}  // namespace

ResidentPlan plan_resident(const BnForwardTraining& p, const DeviceShape& device, PlanRule rule) {
    if (!p.activation.identity()) return ResidentPlan{};
    return plan_geometry<false>(p.geom, p.x, {&p.x, &p.y}, device, rule);
}

ResidentPlan plan_resident(const BnBackward& p, const DeviceShape& device, PlanRule rule) {
    if (!p.activation.identity()) return ResidentPlan{};
    return plan_geometry<true>(p.geom, p.x, {&p.x, &p.dy, &p.dx}, device, rule);
}

void run_resident(const BnForwardTraining& p, const ResidentPlan& plan, const LaunchTarget& target) {
    ResidentArgs a = common_args(plan, target);
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
    launch<false>(a, plan, p.x.dtype, target);
}

void run_resident(const BnBackward& p, const ResidentPlan& plan, const LaunchTarget& target) {
    ResidentArgs a = common_args(plan, target);
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
    a.stats_ready = !a.saved;
    a.double_math = !float_backprop_enough(p.geom.reduction_size());
    launch<true>(a, plan, p.x.dtype, target);
}

}  // namespace gpu
}  // namespace mbn
