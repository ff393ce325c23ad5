// Spatial batch-norm training and backward on small packed NHWC tensors,
// each tile of channels owned by one block of waves (bn_wave_tile.hpp).
//
// A tile is the channels of `lanes` 16-byte vectors of a row (8 or 16 half
// channels, 4 or 8 float).  Thread t holds vector t % lanes of rows
// t / lanes + s * (threads / lanes), s below kSlots, every load issued
// before any value is used, kept as loaded and widened where used.  The
// sums of a vector's channels are scattered over its lanes of a wave (each
// butterfly level halves what a lane keeps), then, in a block of several
// waves, added over the waves through shared memory (one barrier a sum);
// each lane finishes the one channel it was left (one inverse square root
// a thread where a whole butterfly gave each all of its vector's) and
// hands that channel's coefficients to the lanes of its vector by
// shuffles.  One launch, each value read once, no grid-wide wait.
// Numerics as the NCHW form's (bn_wave_tile.hip; docs/numerics.md "Wave
// tiles"), channel by channel.  Where a float sum of any of the tile's
// channels comes out non-finite, all of the tile's are taken again in
// double: every sum is the whole block's, so the block decides as one.
#include "gpu/bn_wave_tile_args.h"

#include "common/numerics.hpp"
#include "gpu/block_reduce.h"
#include "gpu/cluster_launch.h"
#include "gpu/norm_math.h"
#include "gpu/type_dispatch.hpp"

#include <type_traits>

namespace mbn {
namespace gpu {
namespace {

// The most values a thread sums at once: two per channel of a half vector.
constexpr int kMostSums = 16;
// Slots of one wave's sums: waves (32-lane ones the most) x lanes x sums.
constexpr int kSumSlots = kMostNhwcThreads / 32 * 2 * kMostSums;

struct NhwcShared {
    // The waves' sums, two buffers taken in turn: each is written again two
    // sums later, past a barrier that every thread reaches after reading it.
    double part[2][kSumSlots];
};

// Where a thread sits in its tile.  Its row in the wave, `wave_row` (lane /
// lanes), also names the channel of its vector it finishes, `unit`: the
// one the scattered sums leave with it.
template <int V>
struct TileMap {
    int lanes;  // vectors across the tile's row
    int col;    // this thread's vector
    int lane, wave, waves, wave_row, unit;
    __device__ explicit TileMap(int lanes_)
        : lanes(lanes_),
          col(static_cast<int>(threadIdx.x) % lanes_),
          lane(static_cast<int>(threadIdx.x) % MBN_WAVE_SIZE),
          wave(static_cast<int>(threadIdx.x) / MBN_WAVE_SIZE),
          waves(static_cast<int>(blockDim.x) / MBN_WAVE_SIZE),
          wave_row(lane / lanes_),
          unit(unit_of(wave_row)) {}
    // Level b of the scatter keeps the upper half where bit b of the row
    // lane is set: the unit is those bits reversed.
    __device__ static int unit_of(int row) {
        int u = 0;
#pragma unroll
        for (int half = V / 2, b = 0; half >= 1; half /= 2, ++b) u += (row >> b & 1) * half;
        return u;
    }
    // The lane of this thread's vector, in its wave, that finishes channel v.
    __device__ int owner(int v) const {
        int r = 0;
#pragma unroll
        for (int half = V / 2, b = 0; half >= 1; half /= 2, ++b) r += (v / half % 2) << b;
        return r * lanes + col;
    }
};

// A block of several waves: each thread's K sums of entry `entry` (of
// `entries` per vector) added over the waves in wave order, through shared
// memory; the lanes `writes` give their wave's.  Every thread of an entry
// gets the same bits.
template <typename A, int K, int V>
__device__ __forceinline__ void add_over_waves(A (&v)[K], int entries, int entry, bool writes, const TileMap<V>& m,
                                               NhwcShared& sh, int& turn) {
    A* part = reinterpret_cast<A*>(sh.part[turn]);
    turn ^= 1;
    auto at = [&](int wave, int k) { return ((wave * m.lanes + m.col) * entries + entry) * K + k; };
    if (writes) {
#pragma unroll
        for (int k = 0; k < K; ++k) part[at(m.wave, k)] = v[k];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = part[at(0, k)];
    for (int w = 1; w < m.waves; ++w)
#pragma unroll
        for (int k = 0; k < K; ++k) v[k] += part[at(w, k)];
}

// Sums of V units (a channel's U sums each) over the threads of a vector,
// scattered: each level of the wave's butterfly leaves a thread half of
// the units it had (the partner adds the other half), so that after
// log2(V) levels it holds unit m.unit alone, whose sums the remaining
// levels complete (V/2 + V/4 + ... + 1 exchanges a sum where a whole
// butterfly takes V a level).  A block of several waves then adds the
// waves' in wave order through shared memory.  Every thread holding a unit
// gets the same bits.  The result is in v[0].
template <int V, int U>
__device__ __forceinline__ void scatter_sum(float (&v)[V][U], const TileMap<V>& m, NhwcShared& sh, int& turn) {
    static_assert(V * U <= kMostSums, "more sums than the shared slots hold");
    int mask = m.lanes;
#pragma unroll
    for (int n = V; n > 1; n /= 2) {
        const bool upper = (m.lane & mask) != 0;
#pragma unroll
        for (int i = 0; i < n / 2; ++i)
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const float lo = v[i][u], hi = v[i + n / 2][u];
                v[i][u] = (upper ? hi : lo) + shuffle_xor_wave(upper ? lo : hi, mask);
            }
        mask *= 2;
    }
    for (; mask < MBN_WAVE_SIZE; mask *= 2)
#pragma unroll
        for (int u = 0; u < U; ++u) v[0][u] += shuffle_xor_wave(v[0][u], mask);
    if (m.waves > 1) add_over_waves(v[0], V, m.unit, m.wave_row < V, m, sh, turn);
}

// The rarely taken double sums: K values per thread summed whole over the
// threads of a vector (a butterfly, then the waves in wave order).
template <int K, int V>
__device__ __forceinline__ void total_sum(double (&v)[K], const TileMap<V>& m, NhwcShared& sh, int& turn) {
    static_assert(K <= kMostSums, "more sums than the shared slots hold");
    wave_sum(m.lanes, MBN_WAVE_SIZE, v);
    if (m.waves > 1) add_over_waves(v, 1, 0, m.wave_row == 0, m, sh, turn);
}

// Whether `ok` holds on every lane of the wave.  A wave holds every unit of
// every vector of the tile, and the other waves the same totals: the
// answer is the block's.
__device__ __forceinline__ bool wave_all(bool ok) {
    int all = ok ? 1 : 0;
    for (int mask = 1; mask < MBN_WAVE_SIZE; mask *= 2) all &= shuffle_xor_wave(all, mask);
    return all != 0;
}

// a[u] for a runtime u, without indexing the array at run time.
template <typename A, int V>
__device__ __forceinline__ A pick(const A (&a)[V], int u) {
    A r = a[0];
#pragma unroll
    for (int v = 1; v < V; ++v) r = u == v ? a[v] : r;
    return r;
}

// The statistics of the thread's unit: `center` (m1, the float mean of
// pass one), the mean's offset from it and the biased variance; and the
// centers of all V channels of its vector (every value is taken around
// its channel's).
template <int V>
struct TileMoments {
    float center, offset;
    double variance;
    float centers[V];
};

template <typename T, int V, int kSlots>
__device__ TileMoments<V> tile_moments(const Bits (&xr)[kSlots], const bool (&held)[kSlots], const WaveTileArgs& a,
                                       const TileMap<V>& m, NhwcShared& sh, int& turn) {
    const float inv_count = static_cast<float>(a.inv_count);
    TileMoments<V> r;
    float s[V][1] = {};
#pragma unroll
    for (int j = 0; j < kSlots; ++j)
#pragma unroll
        for (int v = 0; v < V; ++v) s[v][0] += value_at<T>(xr[j], v);  // absent rows hold 0
    scatter_sum(s, m, sh, turn);
    const float m1 = s[0][0] * inv_count;
#pragma unroll
    for (int v = 0; v < V; ++v) r.centers[v] = shuffle_from_wave(m1, m.owner(v));
    float d2[V][2] = {};
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
        if (!held[j]) continue;
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const float d = value_at<T>(xr[j], v) - r.centers[v];
            d2[v][0] += d;
            d2[v][1] = fmaf(d, d, d2[v][1]);
        }
    }
    scatter_sum(d2, m, sh, turn);
    if (wave_all(isfinite(m1) && isfinite(d2[0][0]) && isfinite(d2[0][1]))) {
        r.center = m1;
        r.offset = d2[0][0] * inv_count;
        r.variance =
            fmax(static_cast<double>(d2[0][1]) * a.inv_count - static_cast<double>(r.offset) * r.offset, 0.0);
        return r;
    }
    // Float overflowed (or x holds Inf/NaN): both passes again in double,
    // around the double mean rounded to float (y is taken from x - center
    // in float).
    double ds[V] = {};
#pragma unroll
    for (int j = 0; j < kSlots; ++j)
#pragma unroll
        for (int v = 0; v < V; ++v) ds[v] += value_at<T>(xr[j], v);
    total_sum(ds, m, sh, turn);
#pragma unroll
    for (int v = 0; v < V; ++v) r.centers[v] = static_cast<float>(ds[v] * a.inv_count);
    double dd[2 * V] = {};
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
        if (!held[j]) continue;
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const double d = static_cast<double>(value_at<T>(xr[j], v)) - r.centers[v];
            dd[v] += d;
            dd[V + v] += d * d;
        }
    }
    total_sum(dd, m, sh, turn);
    double d1[V], q[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
        d1[v] = dd[v];
        q[v] = dd[V + v];
    }
    const ShiftedStatistics st = finish_shifted(pick(d1, m.unit), pick(q, m.unit), a.inv_count, 0.0);  // its inverse std unused
    r.center = pick(r.centers, m.unit);
    r.offset = static_cast<float>(st.offset);
    r.variance = st.variance;
    return r;
}

template <typename T, bool kBackward, int kSlots>
__global__ void __launch_bounds__(kMostNhwcThreads) bn_wave_tile_nhwc(WaveTileArgs a) {
    constexpr int V = 16 / static_cast<int>(sizeof(T));
    __shared__ NhwcShared sh;
    const TileMap<V> m(a.lanes);
    const int c0 = (static_cast<int>(blockIdx.x) * m.lanes + m.col) * V;
    const int c = c0 + m.unit;  // the channel this thread finishes
    // Parameters first (absent ones are 0): those of the channel the thread
    // finishes (training's scale, bias, prior running statistics; the
    // backward's scale and saved inverse std), and in the backward the
    // saved means of its whole vector, which its values are taken around.
    const float scale = a.scale.load(c);
    const float p1 = (kBackward ? a.saved_inv_std : a.train.bias).load(c);
    const float p2 = kBackward ? 0.0f : a.train.prev_mean.load(c);
    const float p3 = kBackward ? 0.0f : a.train.prev_var.load(c);
    float saved_means[kBackward ? V : 1];
    if (kBackward) a.saved_mean.load_run(c0, saved_means);

    const int rows = a.samples * a.plane;
    const int step = static_cast<int>(blockDim.x) / m.lanes;  // rows from one slot to the next
    const int row = static_cast<int>(threadIdx.x) / m.lanes;
    const int first = row * a.channels + c0;
    const int slot_stride = step * a.channels;
    bool held[kSlots];
#pragma unroll
    for (int j = 0; j < kSlots; ++j) held[j] = row + step * j < rows;
    const T* x = static_cast<const T*>(a.x) + first;
    const T* dy = static_cast<const T*>(a.dy) + first;
    const Bits zero = make_uint4(0u, 0u, 0u, 0u);
    Bits xr[kSlots], gr[kBackward ? kSlots : 1];
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
        xr[j] = held[j] ? load_bits(x + j * slot_stride) : zero;
        if (kBackward) gr[kBackward ? j : 0] = held[j] ? load_bits(dy + j * slot_stride) : zero;
    }
    T* out = static_cast<T*>(a.out) + first;
    // Writes value(j, v) to every held row, alpha and beta applied.
    auto write = [&](auto value) {
#pragma unroll
        for (int j = 0; j < kSlots; ++j) {
            if (!held[j]) continue;
            float r[V];
#pragma unroll
            for (int v = 0; v < V; ++v) r[v] = value(j, v);
            store_values<T, V>(out + j * slot_stride, r, a.alpha, a.beta);
        }
    };
    // Each channel's finisher of the first wave stores its statistics and gradients.
    const bool stores = m.wave == 0 && m.wave_row < V;
    int turn = 0;

    if constexpr (!kBackward) {
        const TileMoments<V> mo = tile_moments<T, V, kSlots>(xr, held, a, m, sh, turn);
        const float inv_std = static_cast<float>(rsqrt(mo.variance + a.epsilon));
        if (stores) {
            const float mean = mo.center + mo.offset;
            if (a.train.running_mean.present()) {
                const float f = static_cast<float>(a.train.exp_avg_factor);
                const float unbiased = static_cast<float>(mo.variance * a.unbiased_ratio);
                a.train.running_mean.store(c, (1.0f - f) * p2 + f * mean);
                a.train.running_var.store(c, (1.0f - f) * p3 + f * unbiased);
            }
            if (a.saved_mean.present()) {
                a.saved_mean.store(c, mean);
                a.saved_inv_std.store(c, inv_std);
            }
        }
        // y = (x - center) factor + bias - offset factor.
        const float factor = scale * inv_std, shift = p1 - mo.offset * factor;
        float k0[V], k1[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
            k0[v] = shuffle_from_wave(factor, m.owner(v));
            k1[v] = shuffle_from_wave(shift, m.owner(v));
        }
        write([&](int j, int v) { return fmaf(value_at<T>(xr[j], v) - mo.centers[v], k0[v], k1[v]); });
    } else {
        // With saved statistics the values are taken around the saved mean.
        float centers[V], offset = 0.0f, inv_std = p1;
        if (a.saved_mean.present()) {
#pragma unroll
            for (int v = 0; v < V; ++v) centers[v] = saved_means[v];
        } else {
            const TileMoments<V> mo = tile_moments<T, V, kSlots>(xr, held, a, m, sh, turn);
#pragma unroll
            for (int v = 0; v < V; ++v) centers[v] = mo.centers[v];
            offset = mo.offset;
            inv_std = static_cast<float>(rsqrt(mo.variance + a.epsilon));
        }
        // The gradient sums g1 = sum(dy), g2 = sum(dy (x - center)); in
        // double where float's came out non-finite.
        float g[V][2] = {};
#pragma unroll
        for (int j = 0; j < kSlots; ++j) {
            if (!held[j]) continue;
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const float d = value_at<T>(gr[j], v);
                g[v][0] += d;
                g[v][1] = fmaf(d, value_at<T>(xr[j], v) - centers[v], g[v][1]);
            }
        }
        scatter_sum(g, m, sh, turn);
        double g1 = g[0][0], g2 = g[0][1];
        if (!wave_all(isfinite(g[0][0]) && isfinite(g[0][1]))) {
            double gd[2 * V] = {};
#pragma unroll
            for (int j = 0; j < kSlots; ++j) {
                if (!held[j]) continue;
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    const double d = value_at<T>(gr[j], v);
                    gd[v] += d;
                    gd[V + v] += d * (static_cast<double>(value_at<T>(xr[j], v)) - centers[v]);
                }
            }
            total_sum(gd, m, sh, turn);
            double s1[V], s2[V];
#pragma unroll
            for (int v = 0; v < V; ++v) {
                s1[v] = gd[v];
                s2[v] = gd[V + v];
            }
            g1 = pick(s1, m.unit);
            g2 = pick(s2, m.unit);
        }
        const float f1 = static_cast<float>(g1), f2 = static_cast<float>(g2);
        const float dy_xhat = (f2 - offset * f1) * inv_std;
        if (stores) {
            a.back.dscale.store_blended(c, dy_xhat, a.back.param_alpha, a.back.param_beta);
            a.back.dbias.store_blended(c, f1, a.back.param_alpha, a.back.param_beta);
        }
        // dx = dy k0 + (x - center) k1 + k2, per channel, each channel's
        // coefficients from its finisher.
        if (a.back.double_math) {
            // Few values: dx's terms nearly cancel (M = 2 gives 0), so the
            // coefficients and dx are taken in double.
            const double s = scale, i = inv_std, o = offset, n = a.inv_count;
            const double e0 = s * i, e1 = -e0 * i * ((g2 - o * g1) * i) * n, e2 = -e0 * g1 * n - e1 * o;
            double d0[V], d1[V], d2[V];
#pragma unroll
            for (int v = 0; v < V; ++v) {
                d0[v] = shuffle_from_wave(e0, m.owner(v));
                d1[v] = shuffle_from_wave(e1, m.owner(v));
                d2[v] = shuffle_from_wave(e2, m.owner(v));
            }
            write([&](int j, int v) {
                return static_cast<float>(d0[v] * value_at<T>(gr[j], v) +
                                          d1[v] * (static_cast<double>(value_at<T>(xr[j], v)) - centers[v]) + d2[v]);
            });
        } else {
            const float inv_count = static_cast<float>(a.inv_count);
            const float e0 = scale * inv_std, e1 = -e0 * inv_std * dy_xhat * inv_count;
            const float e2 = -e0 * f1 * inv_count - e1 * offset;
            float k0[V], k1[V], k2[V];
#pragma unroll
            for (int v = 0; v < V; ++v) {
                k0[v] = shuffle_from_wave(e0, m.owner(v));
                k1[v] = shuffle_from_wave(e1, m.owner(v));
                k2[v] = shuffle_from_wave(e2, m.owner(v));
            }
            write([&](int j, int v) {
                return fmaf(k0[v], value_at<T>(gr[j], v), fmaf(k1[v], value_at<T>(xr[j], v) - centers[v], k2[v]));
            });
        }
    }
}

}  // namespace

void launch_wave_tiles_nhwc(const WaveTileArgs& a, DType dtype, bool backward, const WaveTilePlan& p,
                            const LaunchTarget& target) {
    with_element_type(dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (!std::is_same<T, double>::value) {
            auto go = [&](auto back, auto slots) {
                launch_clustered(bn_wave_tile_nhwc<T, decltype(back)::value, decltype(slots)::value>,
                                 dim3(static_cast<unsigned>(p.blocks)), dim3(static_cast<unsigned>(p.threads)), 0, 1,
                                 target.stream, "bn_wave_tile_nhwc", a);
            };
            auto with_slots = [&](auto back) {
                if (p.row_slots == 1)
                    go(back, std::integral_constant<int, 1>{});
                else if (p.row_slots == 2)
                    go(back, std::integral_constant<int, 2>{});
                else
                    go(back, std::integral_constant<int, 4>{});
            };
            if (backward)
                with_slots(std::true_type{});
            else
                with_slots(std::false_type{});
        }
    });
}

}  // namespace gpu
}  // namespace mbn
