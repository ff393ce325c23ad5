// The NHWC columns' kernel (bn_nhwc_columns.hpp describes the design;
// bn_nhwc_columns.hip plans and launches it).  A header of its own so that
// the emulated check (tests/gpu/emulation/bn_columns_check.cpp) runs the
// same kernel on the host; include it in one translation unit only.
//
// Numerics as the other one-launch kernels: values are taken around a
// per-channel center exact in float (the channel's first value, or the
// saved mean); statistics are summed in float over a few rows, then in
// double; gradient sums in double per value; the totals folded in a fixed
// order.
#pragma once

#include "common/numerics.hpp"
#include "gpu/block_reduce.h"
#include "gpu/grid_barrier.h"
#include "gpu/norm_math.h"
#include "gpu/param_io.h"

#include <cstddef>
#include <cstdint>

namespace mbn {
namespace gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxWaves = kThreads / 32;  // the most waves a block has (32-lane waves)
constexpr int kMaxLanes = 8;              // 16-byte vectors in a column's row: 128 bytes
constexpr int kMaxColumnChannels = kMaxLanes * 8;
// Rows past the registers: loads in flight per thread and tensor (more
// cost registers the held rows need).
constexpr int kStreamBatch = 4;

struct ColumnArgs {
    const void* x;
    const void* dy;  // backward
    void* out;       // y, or dx
    int rows;        // N * spatial
    int channels;
    int lanes;
    int blocks_per_column;
    int rows_per_block;
    int team_size;  // columns of many blocks fold in teams of this many (column_totals)
    int teams;      // per column; 1: every block folds all partials
    double count;  // values per channel (rows)
    double inv_count;       // 1 / count: the finishing threads multiply, not divide
    double unbiased_ratio;  // count / (count - 1), 1 for a single value
    ChannelParam scale, bias, prev_mean, prev_var, running_mean, running_var, saved_mean, saved_inv_std;
    ChannelParam dscale, dbias;
    double epsilon, exp_avg_factor;
    float alpha, beta;              // y or dx
    float param_alpha, param_beta;  // dscale, dbias
    bool saved;                     // backward: saved statistics given
    double* partials;               // per round (1, 2): (column, block, column channel, 2)
    double* team_partials;          // teams > 1: (column, team, column channel, 2)
    double* totals;                 // teams > 1: (column, column channel, 2)
    BarrierCounter* counters;       // per column 1 + teams: the column's, then one per team (teams > 1)
};

// Where a thread's data lies: its 16-byte vector of the column's row
// (lane), its first row and the stride between its rows.
struct ThreadMap {
    int lane, cw, column_first, c0, first_row, stride, r_end;
    __device__ ThreadMap(const ColumnArgs& a, int vector) {
        const int t = threadIdx.x;
        lane = t % a.lanes;
        stride = kThreads / a.lanes;
        cw = a.lanes * vector;
        column_first = static_cast<int>(blockIdx.y) * cw;
        c0 = column_first + lane * vector;
        const int r_begin = static_cast<int>(blockIdx.x) * a.rows_per_block;
        first_row = r_begin + t / a.lanes;
        r_end = min(a.rows, r_begin + a.rows_per_block);
    }
};

// A round's partials: a second round (backward's gradient sums after its
// statistics) writes its own, since a block may store them while another
// still folds the first round's.
__device__ __forceinline__ double* round_partials(const ColumnArgs& a, const ThreadMap& m, unsigned round) {
    return a.partials + (round - 1) * static_cast<std::size_t>(gridDim.y) * a.blocks_per_column * m.cw * 2;
}

using ColumnReduce = BlockReduce<double, kMaxWaves, kMaxColumnChannels * 2>;
struct ColumnShared {
    ColumnReduce::Storage wave_part;
    double fold_part[2 * kThreads];
    double totals[kMaxColumnChannels * 2];
    float center[kMaxColumnChannels];
    double in[kMaxColumnChannels][4];   // what finishing a channel reads besides its sums
    double stat[kMaxColumnChannels][2]; // backward without saved statistics: mean offset, inverse std
    float coef[kMaxColumnChannels][4];  // center, then y or dx coefficients
};

// ---- sums -------------------------------------------------------------------------

template <int V>
__device__ __forceinline__ void add_float_batch(const float (&f)[V][2], double (&s)[V][2], bool& finite) {
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            finite = finite && isfinite(f[v][q]);
            s[v][q] += f[v][q];
        }
}

template <int V, typename A>
__device__ __forceinline__ void add_deviation(const A (&xv)[V], const float (&cx)[V], A (&f)[V][2]) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
        const A d = xv[v] - static_cast<A>(cx[v]);
        f[v][0] += d;
        f[v][1] = d * d + f[v][1];
    }
}

// Sums of x - cx and its square over the thread's rows: the register rows,
// then the streamed ones, each batch in float added into double.  In double
// per value where kExact (backward without saved statistics: there the
// mean's rounding is multiplied by sum(dy), which a dy with a large mean
// makes large), or where a float sum overflowed or met Inf/NaN (bfloat16 and
// float data near 1e19 and beyond).
template <typename T, int V, int K, bool kExact, bool kStream>
__device__ void statistics_sums(const ColumnArgs& a, const ThreadMap& m, const Bits (&xr)[K],
                                const float (&cx)[V], double (&s)[V][2]) {
    const T* x = static_cast<const T*>(a.x);
    const int C = a.channels;
#pragma unroll
    for (int v = 0; v < V; ++v) s[v][0] = s[v][1] = 0.0;
    bool finite = !kExact;
    if (!kExact) {
        float f[V][2] = {};
#pragma unroll
        for (int i = 0; i < K; ++i) {
            if (m.first_row + i * m.stride < m.r_end) {
                float xv[V];
#pragma unroll
                for (int v = 0; v < V; ++v) xv[v] = value_at<T>(xr[i], v);
                add_deviation<V>(xv, cx, f);
            }
        }
        add_float_batch<V>(f, s, finite);
    }
    for (int r0 = m.first_row + K * m.stride; kStream && r0 < m.r_end; r0 += kStreamBatch * m.stride) {
        Bits b[kStreamBatch];
#pragma unroll
        for (int j = 0; j < kStreamBatch; ++j) {
            const int r = r0 + j * m.stride;
            if (r < m.r_end) b[j] = load_bits(x + r * C + m.c0);
        }
        float f[V][2] = {};
#pragma unroll
        for (int j = 0; j < kStreamBatch; ++j) {
            if (r0 + j * m.stride < m.r_end) {
                float xv[V];
#pragma unroll
                for (int v = 0; v < V; ++v) xv[v] = value_at<T>(b[j], v);
                add_deviation<V>(xv, cx, f);
            }
        }
        add_float_batch<V>(f, s, finite);
    }
    if (finite) return;
#pragma unroll
    for (int v = 0; v < V; ++v) s[v][0] = s[v][1] = 0.0;
    auto add = [&](const Bits& p) {
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const double d = static_cast<double>(value_at<T>(p, v)) - static_cast<double>(cx[v]);
            s[v][0] += d;
            s[v][1] = d * d + s[v][1];
        }
    };
#pragma unroll
    for (int i = 0; i < K; ++i)
        if (m.first_row + i * m.stride < m.r_end) add(xr[i]);
    for (int r = m.first_row + K * m.stride; kStream && r < m.r_end; r += m.stride) add(load_bits(x + r * C + m.c0));
}

template <typename T, int V>
__device__ __forceinline__ void add_gradients(const Bits& xp, const Bits& dp, const float (&cx)[V],
                                              double (&g)[V][2]) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
        const double dv = static_cast<double>(value_at<T>(dp, v));
        g[v][0] += dv;
        g[v][1] = dv * (static_cast<double>(value_at<T>(xp, v)) - static_cast<double>(cx[v])) + g[v][1];
    }
}

// Sums of dy and dy * (x - cx) over the thread's rows, in double per value:
// the second often cancels to a small value from large terms.
template <typename T, int V, int K, bool kStream>
__device__ void gradient_sums(const ColumnArgs& a, const ThreadMap& m, const Bits (&xr)[K],
                              const Bits (&dr)[K], const float (&cx)[V], double (&g)[V][2]) {
    const T* x = static_cast<const T*>(a.x);
    const T* dy = static_cast<const T*>(a.dy);
    const int C = a.channels;
#pragma unroll
    for (int v = 0; v < V; ++v) g[v][0] = g[v][1] = 0.0;
#pragma unroll
    for (int i = 0; i < K; ++i) {
        if (m.first_row + i * m.stride < m.r_end) {
            add_gradients<T, V>(xr[i], dr[i], cx, g);
        }
    }
    constexpr int B = kStreamBatch;
    for (int r0 = m.first_row + K * m.stride; kStream && r0 < m.r_end; r0 += B * m.stride) {
        Bits bx[B], bd[B];
#pragma unroll
        for (int j = 0; j < B; ++j) {
            const int r = r0 + j * m.stride;
            if (r < m.r_end) {
                bx[j] = load_bits(x + r * C + m.c0);
                bd[j] = load_bits(dy + r * C + m.c0);
            }
        }
#pragma unroll
        for (int j = 0; j < B; ++j) {
            if (r0 + j * m.stride < m.r_end) {
                add_gradients<T, V>(bx[j], bd[j], cx, g);
            }
        }
    }
}

// ---- the team's totals ------------------------------------------------------------

// Sums the thread's V channels' pairs over the rows of its wave (lanes
// `lanes` apart hold other channel vectors), halving the slots it keeps at
// each level while there are rows to spread them over: the partner gets the
// half this thread gives up and adds the half it keeps, so a level moves
// half as many values as the level before (the plain butterfly over every
// slot moved all V pairs at each level; with V = 8 its shuffles, bound by
// the shuffle unit's rate, took ~1 us of the hand-over, H200).  Levels past
// the slots add the kept ones as a butterfly.  Returns the first slot the
// thread then holds in s[0 .. kept) (kept = V >> scattered levels; rows
// whose low bits agree hold the same slots, with the same bits).  Fixed
// order: deterministic.
template <int V>
__device__ __forceinline__ int scatter_rows(int lanes, double (&s)[V][2], int& kept) {
    const int l = static_cast<int>(threadIdx.x % MBN_WAVE_SIZE);
    int slot = 0, mask = lanes;
    kept = V;
#pragma unroll
    for (int n = V; n > 1; n /= 2) {
        if (mask >= MBN_WAVE_SIZE) MBN_UNROLLED_EXIT;
        const bool upper = (l & mask) != 0;
#pragma unroll
        for (int i = 0; i < n / 2; ++i)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const double send = upper ? s[i][q] : s[i + n / 2][q];
                const double keep = upper ? s[i + n / 2][q] : s[i][q];
                s[i][q] = keep + shuffle_xor_wave(send, mask);
            }
        if (upper) slot += n / 2;
        kept = n / 2;
        mask *= 2;
    }
    for (; mask < MBN_WAVE_SIZE; mask *= 2)
#pragma unroll
        for (int i = 0; i < V; ++i)
            if (i < kept)
#pragma unroll
                for (int q = 0; q < 2; ++q) s[i][q] += shuffle_xor_wave(s[i][q], mask);
    return slot;
}

// The block's sums per column channel into its entry of the partials: the
// rows of each wave by scatter_rows, then the waves in order.
template <int V>
__device__ void store_block_sums(const ColumnArgs& a, const ThreadMap& m, double (&s)[V][2], ColumnShared& sh,
                                 unsigned round) {
    int kept = V;
    const int slot = scatter_rows<V>(a.lanes, s, kept);
    const int row = static_cast<int>(threadIdx.x % MBN_WAVE_SIZE) / a.lanes;
    const int wave = static_cast<int>(threadIdx.x) / MBN_WAVE_SIZE;
    if (row * kept < V) {  // the rows holding distinct slots
#pragma unroll
        for (int i = 0; i < V; ++i)
            if (i < kept) {
                const int e = (m.lane * V + slot + i) * 2;
                sh.wave_part.part[wave][e] = s[i][0];
                sh.wave_part.part[wave][e + 1] = s[i][1];
            }
    }
    __syncthreads();
    const int t = threadIdx.x;
    const int n = m.cw * 2;
    if (t < n) {
        double sum[1];
        ColumnReduce::totals(sh.wave_part, t, kThreads / MBN_WAVE_SIZE, sum);
        const std::size_t entry = static_cast<std::size_t>(blockIdx.y) * a.blocks_per_column + blockIdx.x;
        round_partials(a, m, round)[entry * n + t] = sum[0];
    }
}

// Partial entries folded a batch at a time: all of a batch's loads are in
// flight before the first addition.
constexpr int kFoldBatch = 8;

// Two neighbouring values other blocks stored before a hand-over, as one
// 16-byte read on NVIDIA.
__device__ __forceinline__ double2 load_pair_after_barrier(const double* p) {
#if MBN_GPU_CUDA
    return load_after_barrier(reinterpret_cast<const double2*>(p));
#else
    return make_double2(load_after_barrier(p), load_after_barrier(p + 1));
#endif
}

// `count` partial entries at src folded per column channel into
// sh.totals, in a fixed order whichever block folds.  Each thread reads
// pairs of values (16 bytes) of every `parts`-th entry, kFoldBatch loads in
// flight: one round trip to L2 for up to kFoldBatch * parts entries, where a
// chain of dependent additions had made two or three (H200: 1.6-2.8 us of
// the hand-over for 26-49 entries).
__device__ void fold_entries(const double* src, int count, const ThreadMap& m, ColumnShared& sh) {
    const int n = m.cw * 2;  // values per entry, a power of two
    const int pairs_shift = __ffs(m.cw) - 1;
    const int parts = kThreads >> pairs_shift;
    const int t = threadIdx.x;
    const int pair = t & (m.cw - 1);
    double acc[2] = {0.0, 0.0};
    for (int b0 = t >> pairs_shift; b0 < count; b0 += kFoldBatch * parts) {
        double2 v[kFoldBatch];
#pragma unroll
        for (int k = 0; k < kFoldBatch; ++k) {
            const int b = b0 + k * parts;
            v[k] = b < count ? load_pair_after_barrier(src + static_cast<std::size_t>(b) * n + 2 * pair)
                             : make_double2(0.0, 0.0);
        }
#pragma unroll
        for (int k = 0; k < kFoldBatch; ++k) {
            acc[0] += v[k].x;
            acc[1] += v[k].y;
        }
    }
    sh.fold_part[(t >> pairs_shift) * n + 2 * pair] = acc[0];
    sh.fold_part[(t >> pairs_shift) * n + 2 * pair + 1] = acc[1];
    __syncthreads();
    if (t < n) {
        double sum = 0.0;
        for (int p = 0; p < parts; ++p) sum += sh.fold_part[p * n + t];
        sh.totals[t] = sum;
    }
    __syncthreads();
}

// Round `round` (1, 2) of the column's hand-over, after the block stored
// its partial; afterwards every block of the column holds the same totals
// in sh.totals.
//
// A column of few blocks (teams == 1) meets at its counter and every block
// folds all partials itself, in the same order: one wait, one fold.  In a
// column of many blocks that would be many times the partials' bytes through
// L2, so it folds as a tree: the last block of each team to arrive folds the
// team's partials, the last of those folders the teams' sums, and it
// publishes the totals and releases the column (counter at round * (teams
// + 1)).
__device__ void column_totals(const ColumnArgs& a, const ThreadMap& m, ColumnShared& sh, unsigned round) {
    const int n = m.cw * 2;
    const int B = a.blocks_per_column;
    const std::size_t column = blockIdx.y;
    BarrierCounter* counter = a.counters + column * (1 + a.teams);
    const double* partials = round_partials(a, m, round) + column * B * n;
    if (a.teams == 1) {
        const BarrierCounter arrived = static_cast<BarrierCounter>(round) * B;
        arrive_last(counter, arrived);
        wait_for(counter, arrived);
        fold_entries(partials, B, m, sh);
        return;
    }
    const int team = static_cast<int>(blockIdx.x) / a.team_size;
    const int first = team * a.team_size;
    const int members = min(a.team_size, B - first);
    const BarrierCounter released = static_cast<BarrierCounter>(round) * (a.teams + 1);
    double* totals = a.totals + column * n;
    const int t = threadIdx.x;
    if (arrive_last(counter + 1 + team, static_cast<BarrierCounter>(round) * members)) {
        fold_entries(partials + static_cast<std::size_t>(first) * n, members, m, sh);
        double* team_sums = a.team_partials + (column * a.teams + team) * n;
        if (t < n) team_sums[t] = sh.totals[t];
        if (arrive_last(counter, released - 1)) {
            fold_entries(a.team_partials + column * a.teams * n, a.teams, m, sh);
            if (t < n) totals[t] = sh.totals[t];
            release(counter);
            return;
        }
    }
    wait_for(counter, released);
    if (t < n) sh.totals[t] = load_after_barrier(totals + t);
    __syncthreads();
}

// The counters' way out, after `rounds` rounds.
__device__ void leave_columns(const ColumnArgs& a, unsigned rounds) {
    const int B = a.blocks_per_column;
    BarrierCounter* counter = a.counters + static_cast<std::size_t>(blockIdx.y) * (1 + a.teams);
    if (a.teams == 1) {
        leave(counter, static_cast<BarrierCounter>(rounds + 1) * B);
        return;
    }
    const int team = static_cast<int>(blockIdx.x) / a.team_size;
    const int members = min(a.team_size, B - team * a.team_size);
    leave(counter + 1 + team, static_cast<BarrierCounter>(rounds + 1) * members);
    leave(counter, static_cast<BarrierCounter>(rounds) * (a.teams + 1) + B);
}

__device__ __forceinline__ void set_coefficients(ColumnShared& sh, int ch, float center, double k0, double k1,
                                                 double k2) {
    sh.coef[ch][0] = center;
    sh.coef[ch][1] = static_cast<float>(k0);
    sh.coef[ch][2] = static_cast<float>(k1);
    sh.coef[ch][3] = static_cast<float>(k2);
}

// Training: statistics, running averages, y = (x - center) * k0 + k1.
__device__ void finish_training(const ColumnArgs& a, int c, int ch, ColumnShared& sh) {
    const double(&in)[4] = sh.in[ch];
    const double s1 = sh.totals[ch * 2], s2 = sh.totals[ch * 2 + 1];
    const float center = sh.center[ch];
    const ShiftedStatistics st = finish_shifted(s1, s2, a.inv_count, a.epsilon);
    const double mean = center + st.offset;
    if (blockIdx.x == 0 && a.running_mean.present()) {
        a.running_mean.store(c, running_update(in[2], mean, a.exp_avg_factor));
        a.running_var.store(c, running_update(in[3], st.variance * a.unbiased_ratio, a.exp_avg_factor));
    }
    if (blockIdx.x == 0 && a.saved_mean.present()) {
        a.saved_mean.store(c, mean);
        a.saved_inv_std.store(c, st.inv_std);
    }
    const double k0 = in[0] * st.inv_std;
    set_coefficients(sh, ch, center, k0, in[1] - st.offset * k0, 0.0);
}

// Backward without saved statistics, first round: the statistics alone.
__device__ void finish_backward_statistics(const ColumnArgs& a, int ch, ColumnShared& sh) {
    const double s1 = sh.totals[ch * 2], s2 = sh.totals[ch * 2 + 1];
    const ShiftedStatistics st = finish_shifted(s1, s2, a.inv_count, a.epsilon);
    sh.stat[ch][0] = st.offset;  // the mean's offset from the center
    sh.stat[ch][1] = st.inv_std;
}

// Backward: dscale, dbias, and dx = k0 * dy + k1 * (x - center) + k2 from the
// gradient sums around the center.
__device__ void finish_backward(const ColumnArgs& a, int c, int ch, ColumnShared& sh) {
    const double(&in)[4] = sh.in[ch];
    const double g1 = sh.totals[ch * 2];      // sum(dy)
    const double g2 = sh.totals[ch * 2 + 1];  // sum(dy * (x - center))
    double mean_offset = 0.0, inv_std = in[2];
    if (!a.saved) {
        mean_offset = sh.stat[ch][0];
        inv_std = sh.stat[ch][1];
    }
    const double dy_xhat = (g2 - mean_offset * g1) * inv_std;
    if (blockIdx.x == 0) {
        a.dscale.store_blended(c, dy_xhat, a.param_alpha, a.param_beta);
        a.dbias.store_blended(c, g1, a.param_alpha, a.param_beta);
    }
    const double k0 = in[0] * inv_std;
    const double k1 = -k0 * inv_std * dy_xhat * a.inv_count;
    set_coefficients(sh, ch, sh.center[ch], k0, k1, -k0 * g1 * a.inv_count - k1 * mean_offset);
}

// ---- write --------------------------------------------------------------------------

template <typename T, bool kBackward, int V>
__device__ __forceinline__ void write_row(const ColumnArgs& a, int e, const Bits& xp, const Bits& dp,
                                          const float (&k)[4][V]) {
    float result[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
        const float d = value_at<T>(xp, v) - k[0][v];
        result[v] = kBackward ? k[1][v] * value_at<T>(dp, v) + k[2][v] * d + k[3][v] : d * k[1][v] + k[2][v];
    }
    store_values<T, V>(static_cast<T*>(a.out) + e, result, a.alpha, a.beta);
}

// ---- the launch's scratch and teams (the planner's and the emulated check's) -------

// Columns of more blocks than this fold as a tree of teams.
constexpr int kMostFlatBlocks = 96;

// How a column of `blocks` blocks folds: flat (one team of them all), or
// as a tree of teams of about sqrt(blocks).
struct ColumnTeams {
    int size, count;
};
inline ColumnTeams column_teams(int blocks) {
    if (blocks <= kMostFlatBlocks) return ColumnTeams{blocks, 1};
    int team = 1;
    while (team * team < blocks) ++team;
    return ColumnTeams{team, (blocks + team - 1) / team};
}

// Where the scratch's arrays start, in doubles: the partials of two rounds
// (the most any op takes), then, for a tree fold, the teams' sums and the
// column's totals.
struct ScratchLayout {
    std::int64_t team_partials, totals, doubles;
};
inline ScratchLayout scratch_layout(std::int64_t columns, std::int64_t blocks, std::int64_t teams,
                                    std::int64_t entry) {
    ScratchLayout s;
    s.team_partials = 2 * columns * blocks * entry;
    s.totals = s.team_partials + columns * teams * entry;
    s.doubles = teams > 1 ? s.totals + columns * entry : s.team_partials;
    return s;
}

// ---- the kernel ---------------------------------------------------------------------

// Two blocks a multiprocessor, except backward with 8 register rows (x's
// and dy's 16 vectors alone take 64 registers): one, and no spills; the
// planner gives it only columns of few blocks.
template <bool kBackward, int K>
constexpr int column_min_blocks() {
    return kBackward && K > 6 ? 1 : 2;
}

// The register rows past which a block's rows stream.
template <bool kBackward>
constexpr int column_streamed_rows() {
    return kBackward ? 4 : 8;
}

// The most register rows an instance at two blocks a multiprocessor holds
// without streaming: backward's 6 (48 registers of x and dy) fit in 128
// registers unspilled, but with the streamed loops the 16-bit instances
// spill 96 bytes, so backward streams past 4.
template <bool kBackward>
constexpr int column_held_rows() {
    return kBackward ? 6 : 8;
}

// kStream: rows past the K register rows streamed (K the most there are);
// without it the instance has no streamed loops, whose registers made the
// 16-bit instances spill (training with 8 register rows 32 bytes, stalling
// its loads behind the spill's store; backward with 4 and 2, 16 and 8).
template <typename T, bool kBackward, int K, bool kStream>
__global__ void __launch_bounds__(kThreads, (column_min_blocks<kBackward, K>())) bn_nhwc_columns(ColumnArgs a) {
    constexpr int V = 16 / sizeof(T);
    __shared__ ColumnShared sh;
    const ThreadMap m(a, V);
    const T* x = static_cast<const T*>(a.x);
    const T* dy = static_cast<const T*>(a.dy);
    const int C = a.channels;
    const int t = threadIdx.x;

    // Every register row's loads first, then what finishing a channel needs
    // (one channel per thread t < cw) while they are in flight.
    Bits xr[K], dr[K];
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int r = m.first_row + i * m.stride;
        if (r < m.r_end) {
            xr[i] = load_bits(x + r * C + m.c0);
            if (kBackward) dr[i] = load_bits(dy + r * C + m.c0);
        }
    }
    const bool saved = kBackward && a.saved;
    if (t < m.cw) {
        const int c = m.column_first + t;
        double in[4] = {0.0, 0.0, 0.0, 0.0};
        in[0] = a.scale.load(c);
        // Absent tensors load as 0: no branch stands between the loads.
        if (!kBackward) {
            in[1] = a.bias.load(c);
            in[2] = a.prev_mean.load(c);
            in[3] = a.prev_var.load(c);
        } else {
            in[2] = a.saved_inv_std.load(c);
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) sh.in[t][q] = in[q];
        sh.center[t] = saved ? static_cast<float>(a.saved_mean.load(c)) : widen(x[c]);
    }
    __syncthreads();
    float cx[V];
#pragma unroll
    for (int v = 0; v < V; ++v) cx[v] = sh.center[m.lane * V + v];

    unsigned round = 0;
    const int ch = t;
    const int c = m.column_first + t;
    if (!saved) {
        double s[V][2];
        statistics_sums<T, V, K, kBackward, kStream>(a, m, xr, cx, s);
        store_block_sums<V>(a, m, s, sh, ++round);
        column_totals(a, m, sh, round);
        if (t < m.cw) {
            if (kBackward)
                finish_backward_statistics(a, ch, sh);
            else
                finish_training(a, c, ch, sh);
        }
    }
    if (kBackward) {
        double g[V][2];
        gradient_sums<T, V, K, kStream>(a, m, xr, dr, cx, g);
        store_block_sums<V>(a, m, g, sh, ++round);
        column_totals(a, m, sh, round);
        if (t < m.cw) finish_backward(a, c, ch, sh);
    }
    leave_columns(a, round);
    __syncthreads();

    float k[4][V];
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
        for (int q = 0; q < 4; ++q) k[q][v] = sh.coef[m.lane * V + v][q];
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int r = m.first_row + i * m.stride;
        if (r < m.r_end) write_row<T, kBackward, V>(a, r * C + m.c0, xr[i], dr[i], k);
    }
    // The streamed rows again, latest first: those are the likeliest still in L2.
    const int streamed = m.first_row + K * m.stride;
    if (!kStream || streamed >= m.r_end) return;
    const int last = streamed + (m.r_end - 1 - streamed) / m.stride * m.stride;
    constexpr int B = kStreamBatch;
    for (int r0 = last; r0 >= streamed; r0 -= B * m.stride) {
        Bits bx[B], bd[B];
#pragma unroll
        for (int j = 0; j < B; ++j) {
            const int r = r0 - j * m.stride;
            if (r >= streamed) {
                bx[j] = load_bits(x + r * C + m.c0);
                if (kBackward) bd[j] = load_bits(dy + r * C + m.c0);
            }
        }
#pragma unroll
        for (int j = 0; j < B; ++j) {
            const int r = r0 - j * m.stride;
            if (r >= streamed) write_row<T, kBackward, V>(a, r * C + m.c0, bx[j], bd[j], k);
        }
    }
}

}  // namespace
}  // namespace gpu
}  // namespace mbn
