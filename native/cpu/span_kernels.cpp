// Vector loops written with GCC/Clang vector extensions: the lane-wise
// arithmetic and the order of every reduction are fixed by the source, so a
// result never depends on how the work was split between threads.
#include "cpu/span_kernels.hpp"

#include "common/numerics.hpp"
#include "cpu/vector_clones.hpp"
#include "cpu/vector_types.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace mbn::cpu {
namespace {

// Four consecutive values as doubles, and back.
// Element by element: GCC 12 turns this into one vcvtps2pd, but splits
// __builtin_convertvector(F4 -> D4) into halves.
MBN_INLINE D4 load4(const float* p) {
    return D4{static_cast<double>(p[0]), static_cast<double>(p[1]), static_cast<double>(p[2]),
              static_cast<double>(p[3])};
}
MBN_INLINE D4 load4(const double* p) { return load<D4>(p); }
MBN_INLINE void store4(float* p, const D4& v) { store(p, __builtin_convertvector(v, F4)); }
MBN_INLINE void store4(double* p, const D4& v) { store(p, v); }
// Four doubles in the type of *like.
MBN_INLINE F4 narrow4(const float*, const D4& v) { return __builtin_convertvector(v, F4); }
MBN_INLINE D4 narrow4(const double*, const D4& v) { return v; }

MBN_INLINE double lane_sum(const D4& v) { return (v[0] + v[1]) + (v[2] + v[3]); }

// Short runs (7x7 = 49 values a feature) end in a few values that scalar
// code would take one by one at the cost of several vectors.  Sums take
// instead the run's last whole vector with the lanes already summed cleared
// (bitwise: an infinity or NaN among them must not turn into 0 * inf = NaN);
// element-wise outputs compute that last vector from inputs loaded before any
// store (in place, a store could change them), and write the overlapped
// values again, unchanged.
typedef std::int64_t L4 __attribute__((vector_size(32)));
MBN_INLINE D4 lanes_from(const D4& v, std::int64_t first) {
    const L4 lane = {0, 1, 2, 3};
    return (D4)((L4)v & (lane >= splat<L4>(first)));
}

// Stores that bypass the cache; p must be 16-byte aligned.  SSE forms, so
// the baseline clone has them too; plain stores elsewhere than x86.
typedef double D2 __attribute__((vector_size(16)));
#if defined(__x86_64__)
MBN_INLINE void stream_store(float* p, const F4& v) { __builtin_ia32_movntps(p, v); }
MBN_INLINE void stream_store(float* p, const F8& v) {
    __builtin_ia32_movntps(p, __builtin_shufflevector(v, v, 0, 1, 2, 3));
    __builtin_ia32_movntps(p + 4, __builtin_shufflevector(v, v, 4, 5, 6, 7));
}
MBN_INLINE void stream_store(double* p, const D4& v) {
    __builtin_ia32_movntpd(p, __builtin_shufflevector(v, v, 0, 1));
    __builtin_ia32_movntpd(p + 2, __builtin_shufflevector(v, v, 2, 3));
}
#else
template <typename C, typename V>
MBN_INLINE void stream_store(C* p, const V& v) {
    store(p, v);
}
#endif

template <typename V, typename C>
MBN_INLINE void put(C* p, const V& v, bool stream) {
    if (stream) stream_store(p, v);
    else store(p, v);
}

// Streamed stores leave the core a cache line at a time.  A line written
// partly by them and partly by ordinary stores (a neighbouring run's end, a
// head or tail value) goes out as partial writes: NCHW 14x14 inference,
// streamed from 16-byte boundaries, ran 2.2x slower than with ordinary stores
// (stand-alone loop, 2 threads, AMD EPYC).  So a span streams only the whole
// lines it covers, values [begin, end); the rest takes ordinary stores.
constexpr std::uintptr_t kCacheLine = 64;
struct StreamWindow {
    std::int64_t begin = 0, end = 0;  // empty when nothing streams
};
template <typename C>
MBN_INLINE StreamWindow stream_window(const C* p, std::int64_t n, bool stream) {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    if (!stream || at % sizeof(C) != 0) return {};
    constexpr std::int64_t per_line = kCacheLine / sizeof(C);
    const auto begin = static_cast<std::int64_t>((kCacheLine - at % kCacheLine) % kCacheLine / sizeof(C));
    const std::int64_t lines = n > begin ? (n - begin) / per_line : 0;
    if (lines == 0) return {};
    return {begin, begin + lines * per_line};
}

// Writes a span's values from i on: one(i) each up to the window, then
// vectors(end, stream) through the window with streamed stores (stream is
// std::true_type) and on to n with ordinary ones (std::false_type).  Both
// advance i; what vectors leave short of n is the caller's.
template <typename One, typename Vectors>
MBN_INLINE void write_through_window(StreamWindow w, std::int64_t n, std::int64_t& i, One&& one, Vectors&& vectors) {
    for (; i < w.begin; ++i) one(i);
    vectors(w.end, std::true_type{});
    vectors(n, std::false_type{});
}

// Makes streamed stores visible before the caller signals completion.
MBN_INLINE void stream_fence(bool stream) {
#if defined(__x86_64__)
    if (stream) __builtin_ia32_sfence();
#else
    (void)stream;
#endif
}

// ---- one feature -----------------------------------------------------------

template <typename C>
MBN_INLINE void moments_body(const C* x, std::int64_t n, double center, MomentSums out) {
    const D4 c = splat<D4>(center);
    D4 a0 = {}, a1 = {}, q0 = {}, q1 = {};
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const D4 d0 = load4(x + i) - c, d1 = load4(x + i + 4) - c;
        a0 += d0;
        a1 += d1;
        q0 += d0 * d0;
        q1 += d1 * d1;
    }
    for (; i + 4 <= n; i += 4) {
        const D4 d = load4(x + i) - c;
        a0 += d;
        q0 += d * d;
    }
    if (i < n && n >= 4) {
        const D4 d = lanes_from(load4(x + n - 4) - c, i - (n - 4));
        a0 += d;
        q0 += d * d;
        i = n;
    }
    double s = lane_sum(a0 + a1), q = lane_sum(q0 + q1);
    for (; i < n; ++i) {
        const double d = static_cast<double>(x[i]) - center;
        s += d;
        q += d * d;
    }
    *out.s1 += s;
    *out.s2 += q;
}

template <typename C>
MBN_INLINE void gradient_body(const C* x, const C* dy, std::int64_t n, double center, GradientSums out) {
    const D4 c = splat<D4>(center);
    D4 g0 = {}, g1 = {}, p0 = {}, p1 = {}, a = {}, q = {};
    std::int64_t i = 0;
    if (!out.s1 && n >= 16) {  // four chains a sum: the additions' latency, not their number, bounds two
        D4 g2 = {}, g3 = {}, p2 = {}, p3 = {};
        for (; i + 16 <= n; i += 16) {
            const D4 h0 = load4(dy + i), h1 = load4(dy + i + 4), h2 = load4(dy + i + 8), h3 = load4(dy + i + 12);
            g0 += h0;
            g1 += h1;
            g2 += h2;
            g3 += h3;
            p0 += (load4(x + i) - c) * h0;
            p1 += (load4(x + i + 4) - c) * h1;
            p2 += (load4(x + i + 8) - c) * h2;
            p3 += (load4(x + i + 12) - c) * h3;
        }
        g0 += g2;
        g1 += g3;
        p0 += p2;
        p1 += p3;
    }
    if (out.s1) {
        for (; i + 4 <= n; i += 4) {
            const D4 d = load4(x + i) - c, g = load4(dy + i);
            a += d;
            q += d * d;
            g0 += g;
            p0 += d * g;
        }
    } else {
        for (; i + 8 <= n; i += 8) {
            const D4 h0 = load4(dy + i), h1 = load4(dy + i + 4);
            g0 += h0;
            g1 += h1;
            p0 += (load4(x + i) - c) * h0;
            p1 += (load4(x + i + 4) - c) * h1;
        }
        for (; i + 4 <= n; i += 4) {
            const D4 g = load4(dy + i);
            g0 += g;
            p0 += (load4(x + i) - c) * g;
        }
    }
    if (i < n && n >= 4) {
        const std::int64_t first = i - (n - 4);
        const D4 d = lanes_from(load4(x + n - 4) - c, first), g = lanes_from(load4(dy + n - 4), first);
        g0 += g;
        p0 += d * g;
        a += d;
        q += d * d;
        i = n;
    }
    if (out.s1) {
        *out.s1 += lane_sum(a);
        *out.s2 += lane_sum(q);
    }
    double s = lane_sum(g0 + g1), t = lane_sum(p0 + p1);
    for (; i < n; ++i) {
        const double d = static_cast<double>(x[i]) - center, g = static_cast<double>(dy[i]);
        s += g;
        t += d * g;
        if (out.s1) {
            *out.s1 += d;
            *out.s2 += d * d;
        }
    }
    *out.sdy += s;
    *out.dot += t;
}

template <typename C>
MBN_INLINE void normalize_body(const C* x, C* out, std::int64_t n, NormalizeCoefficients<C> k,
                               OutputMode<C> mode) {
    constexpr std::int64_t L = kLanes<C>;
    const Vec<C> km = splat<Vec<C>>(k.mean), kk = splat<Vec<C>>(k.k), kb = splat<Vec<C>>(k.b);
    const Vec<C> vb = splat<Vec<C>>(mode.beta);
    const auto one = [&](std::int64_t i) {
        C r = (x[i] - k.mean) * k.k + k.b;
        if (mode.blend) r += mode.beta * out[i];
        out[i] = r;
    };
    const StreamWindow w = stream_window(out, n, mode.stream);
    const bool tail = n - w.end > L && (n - w.end) % L != 0;
    Vec<C> last = {};
    if (tail) {
        last = (load<Vec<C>>(x + n - L) - km) * kk + kb;
        if (mode.blend) last += vb * load<Vec<C>>(out + n - L);
    }
    std::int64_t i = 0;
    const auto vectors = [&](std::int64_t end, auto stream) {
        if (mode.blend) {
            for (; i + L <= end; i += L) {
                const Vec<C> r = (load<Vec<C>>(x + i) - km) * kk + kb;
                put(out + i, r + vb * load<Vec<C>>(out + i), stream());
            }
        } else {
            for (; i + L <= end; i += L) put(out + i, (load<Vec<C>>(x + i) - km) * kk + kb, stream());
        }
    };
    write_through_window(w, n, i, one, vectors);
    if (tail) {
        store(out + n - L, last);
        i = n;
    }
    for (; i < n; ++i) one(i);
}

// dx for the four values at j, with optional blending into dx's prior.
struct BackpropVectors {
    D4 mean, k_dy, k_x, k_0, beta;
    BackpropVectors(const BackpropCoefficients& k, double b)
        : mean(splat<D4>(k.mean)), k_dy(splat<D4>(k.k_dy)), k_x(splat<D4>(k.k_x)), k_0(splat<D4>(k.k_0)),
          beta(splat<D4>(b)) {}
    template <bool Blend, typename C>
    MBN_INLINE D4 at(const C* x, const C* dy, const C* dx, std::int64_t j) const {
        D4 r = (load4(dy + j) * k_dy + k_0) + (load4(x + j) - mean) * k_x;
        if constexpr (Blend) r += beta * load4(dx + j);
        return r;
    }
};

// backprop_body's whole vectors from i on, with the output options fixed at
// compile time (tested in the loop, they kept it from running at full rate),
// two vectors a step.  Both are computed before either is stored: in place,
// each value is still read before it is written.
template <bool Blend, bool Stream, typename C>
MBN_INLINE std::int64_t backprop_vectors(const C* x, const C* dy, C* dx, std::int64_t i, std::int64_t n,
                                         const BackpropVectors& v) {
    const auto put4 = [&](std::int64_t j, const D4& r) {
        if constexpr (Stream) stream_store(dx + j, narrow4(dx, r));
        else store4(dx + j, r);
    };
    for (; i + 8 <= n; i += 8) {
        const D4 r0 = v.at<Blend>(x, dy, dx, i), r1 = v.at<Blend>(x, dy, dx, i + 4);
        put4(i, r0);
        put4(i + 4, r1);
    }
    for (; i + 4 <= n; i += 4) put4(i, v.at<Blend>(x, dy, dx, i));
    return i;
}

template <typename C>
MBN_INLINE void backprop_body(const C* x, const C* dy, C* dx, std::int64_t n, BackpropCoefficients k,
                              OutputMode<C> mode) {
    const double beta = static_cast<double>(mode.beta);
    const BackpropVectors v(k, beta);
    const auto one = [&](std::int64_t i) {
        double r = (static_cast<double>(dy[i]) * k.k_dy + k.k_0) + (static_cast<double>(x[i]) - k.mean) * k.k_x;
        if (mode.blend) r += beta * static_cast<double>(dx[i]);
        dx[i] = static_cast<C>(r);
    };
    const StreamWindow w = stream_window(dx, n, mode.stream);
    const bool tail = n - w.end > 4 && (n - w.end) % 4 != 0;
    D4 last = {};  // the overlapping last vector, computed before any store
    if (tail) last = mode.blend ? v.at<true>(x, dy, dx, n - 4) : v.at<false>(x, dy, dx, n - 4);
    std::int64_t i = 0;
    // As write_through_window, spelled out: its nested lambdas stayed out of
    // line in the double clones here.
    for (; i < w.begin; ++i) one(i);
    if (mode.blend) {
        i = backprop_vectors<true, true>(x, dy, dx, i, w.end, v);
        i = backprop_vectors<true, false>(x, dy, dx, i, n, v);
    } else {
        i = backprop_vectors<false, true>(x, dy, dx, i, w.end, v);
        i = backprop_vectors<false, false>(x, dy, dx, i, n, v);
    }
    if (tail) {
        store4(dx + n - 4, last);
        i = n;
    }
    for (; i < n; ++i) one(i);
}

// ---- rows of features --------------------------------------------------------
// The sums take the rows of a call in groups: group i holds rows i, i + q,
// i + 2q, ... for q = rows / G (the rows left over after G*q go one at a
// time), and each feature vector visits every row of the group before the
// next vector, so that its accumulators are loaded and stored once per
// group.  The rows of a group lie a quarter of the call's rows apart (tens of
// KiB), each its own stream in its own pages: a core reading one row after
// another keeps too few misses in flight to reach memory bandwidth (about
// 6 GB/s per core on AMD EPYC), while neighbouring rows taken together,
// interleaved within one page, defeat the prefetchers.  Four streams of x
// for the moments and four each of x and dy for the gradient sums read NHWC
// data 1.1-2.1x faster than either, from memory or from cache (stand-alone
// loops, 2 threads, 64 to 2048 channels).  The order of the additions is
// fixed by the call's rows, so results still do not depend on the threads.
// Normalization and backprop write an output too and take one row at a
// time: for them the groups gained nothing from memory.  (Neighbouring rows
// in groups of 4 made NHWC inference of 32x256x14x14 1.6x slower on Intel.)
constexpr std::int64_t kMomentsRowGroup = 4;
constexpr std::int64_t kGradientRowGroup = 4;

// Calls body(count, first, spacing) for the groups of `rows` rows described
// above: rows first + k * spacing for k < count, count a
// std::integral_constant (G, or 1 for the rows left over).
template <std::int64_t G, typename Body>
MBN_INLINE void for_row_groups(std::int64_t rows, Body&& body) {
    const std::int64_t q = rows / G;
    for (std::int64_t i = 0; i < q; ++i) body(std::integral_constant<std::int64_t, G>{}, i, q);
    for (std::int64_t r = q * G; r < rows; ++r) body(std::integral_constant<std::int64_t, 1>{}, r, 0);
}

template <typename C>
MBN_INLINE void row_moments_body(RowSpan<const C> x, std::int64_t rows, const double* center, std::int64_t n,
                                 MomentSums out) {
    for_row_groups<kMomentsRowGroup>(rows, [&](auto count, std::int64_t first, std::int64_t spacing) {
        constexpr std::int64_t g = decltype(count)::value;
        const C* base = x.data + first * x.stride;
        const std::int64_t step = spacing * x.stride;
        std::int64_t j = 0;
        for (; j + 4 <= n; j += 4) {
            const D4 c = load<D4>(center + j);
            D4 a = load<D4>(out.s1 + j), q = load<D4>(out.s2 + j);
            for (std::int64_t r = 0; r < g; ++r) {
                const D4 d = load4(base + r * step + j) - c;
                a += d;
                q += d * d;
            }
            store(out.s1 + j, a);
            store(out.s2 + j, q);
        }
        for (; j < n; ++j) {
            for (std::int64_t r = 0; r < g; ++r) {
                const double d = static_cast<double>(base[r * step + j]) - center[j];
                out.s1[j] += d;
                out.s2[j] += d * d;
            }
        }
    });
}

template <typename C>
MBN_INLINE void row_gradient_body(RowSpan<const C> x, RowSpan<const C> dy, std::int64_t rows, const double* center,
                                  std::int64_t n, GradientSums out) {
    for_row_groups<kGradientRowGroup>(rows, [&](auto count, std::int64_t first, std::int64_t spacing) {
        constexpr std::int64_t g = decltype(count)::value;
        const C* xb = x.data + first * x.stride;
        const C* gb = dy.data + first * dy.stride;
        const std::int64_t x_step = spacing * x.stride, dy_step = spacing * dy.stride;
        std::int64_t j = 0;
        for (; j + 4 <= n; j += 4) {
            const D4 c = load<D4>(center + j);
            D4 sg = load<D4>(out.sdy + j), sp = load<D4>(out.dot + j);
            if (out.s1) {
                D4 a = load<D4>(out.s1 + j), q = load<D4>(out.s2 + j);
                for (std::int64_t r = 0; r < g; ++r) {
                    const D4 d = load4(xb + r * x_step + j) - c, h = load4(gb + r * dy_step + j);
                    sg += h;
                    sp += d * h;
                    a += d;
                    q += d * d;
                }
                store(out.s1 + j, a);
                store(out.s2 + j, q);
            } else {
                for (std::int64_t r = 0; r < g; ++r) {
                    const D4 d = load4(xb + r * x_step + j) - c, h = load4(gb + r * dy_step + j);
                    sg += h;
                    sp += d * h;
                }
            }
            store(out.sdy + j, sg);
            store(out.dot + j, sp);
        }
        for (; j < n; ++j) {
            for (std::int64_t r = 0; r < g; ++r) {
                const double d = static_cast<double>(xb[r * x_step + j]) - center[j];
                const double h = static_cast<double>(gb[r * dy_step + j]);
                out.sdy[j] += h;
                out.dot[j] += d * h;
                if (out.s1) {
                    out.s1[j] += d;
                    out.s2[j] += d * d;
                }
            }
        }
    });
}

// One row at a time; each row streams its own whole lines (stream_window).
template <typename C>
MBN_INLINE void row_normalize_body(RowSpan<const C> x, RowSpan<C> out, std::int64_t rows, std::int64_t n,
                                   NormalizeRowCoefficients<C> k, OutputMode<C> mode) {
    constexpr std::int64_t L = kLanes<C>;
    const Vec<C> vb = splat<Vec<C>>(mode.beta);
    for (std::int64_t r = 0; r < rows; ++r) {
        const C* xr = x.data + r * x.stride;
        C* o = out.data + r * out.stride;
        const auto one = [&](std::int64_t j) {
            C v = (xr[j] - k.mean[j]) * k.k[j] + k.b[j];
            if (mode.blend) v += mode.beta * o[j];
            o[j] = v;
        };
        std::int64_t j = 0;
        const auto vectors = [&](std::int64_t end, auto stream) {
            for (; j + L <= end; j += L) {
                Vec<C> v = (load<Vec<C>>(xr + j) - load<Vec<C>>(k.mean + j)) * load<Vec<C>>(k.k + j) +
                           load<Vec<C>>(k.b + j);
                if (mode.blend) v += vb * load<Vec<C>>(o + j);
                put(o + j, v, stream());
            }
        };
        write_through_window(stream_window(o, n, mode.stream), n, j, one, vectors);
        for (; j < n; ++j) one(j);
    }
    stream_fence(mode.stream);
}

// Vectors of an arithmetic type (Vec<A>: four doubles, or eight floats for
// float arithmetic on float data) loaded from and stored to values of C.
template <typename V, typename C>
MBN_INLINE V load_arith(const C* p) {
    if constexpr (std::is_same_v<V, D4> && std::is_same_v<C, float>) return load4(p);
    else return load<V>(p);
}
template <typename C, typename V>
MBN_INLINE void put_arith(C* p, const V& v, bool stream) {
    if constexpr (std::is_same_v<V, D4> && std::is_same_v<C, float>) put(p, narrow4(p, v), stream);
    else put(p, v, stream);
}

template <typename A, typename C>
MBN_INLINE void row_backprop_body(RowSpan<const C> x, RowSpan<const C> dy, RowSpan<C> dx, std::int64_t rows,
                                  std::int64_t n, BackpropRowCoefficients<A> k, OutputMode<C> mode) {
    using V = Vec<A>;
    constexpr std::int64_t L = sizeof(V) / sizeof(A);
    const V vb = splat<V>(static_cast<A>(mode.beta));
    for (std::int64_t r = 0; r < rows; ++r) {
        const C* xr = x.data + r * x.stride;
        const C* gr = dy.data + r * dy.stride;
        C* o = dx.data + r * dx.stride;
        const auto one = [&](std::int64_t j) {
            A v = (static_cast<A>(gr[j]) * k.k_dy[j] + k.k_0[j]) + (static_cast<A>(xr[j]) - k.mean[j]) * k.k_x[j];
            if (mode.blend) v += static_cast<A>(mode.beta) * static_cast<A>(o[j]);
            o[j] = static_cast<C>(v);
        };
        std::int64_t j = 0;
        const auto vectors = [&](std::int64_t end, auto stream) {
            for (; j + L <= end; j += L) {
                V v = (load_arith<V>(gr + j) * load<V>(k.k_dy + j) + load<V>(k.k_0 + j)) +
                      (load_arith<V>(xr + j) - load<V>(k.mean + j)) * load<V>(k.k_x + j);
                if (mode.blend) v += vb * load_arith<V>(o + j);
                put_arith(o + j, v, stream());
            }
        };
        write_through_window(stream_window(o, n, mode.stream), n, j, one, vectors);
        for (; j < n; ++j) one(j);
    }
    stream_fence(mode.stream);
}

// ---- back-to-back runs of consecutive features -----------------------------

template <typename C>
MBN_INLINE void segments_moments_body(const C* x, std::int64_t len, std::int64_t count, const double* center,
                                      MomentSums out, std::int64_t stride) {
    for (std::int64_t i = 0; i < count; ++i, x += len) {
        double s1 = 0.0, s2 = 0.0;
        moments_body(x, len, center[i], {&s1, &s2});
        out.s1[i * stride] = s1;
        out.s2[i * stride] = s2;
    }
}

template <typename C>
MBN_INLINE void segments_gradient_body(const C* x, const C* dy, std::int64_t len, std::int64_t count,
                                       const double* center, GradientSums out, std::int64_t stride) {
    for (std::int64_t i = 0; i < count; ++i, x += len, dy += len) {
        double sdy = 0.0, dot = 0.0, s1 = 0.0, s2 = 0.0;
        gradient_body(x, dy, len, center[i], {&sdy, &dot, out.s1 ? &s1 : nullptr, &s2});
        out.sdy[i * stride] = sdy;
        out.dot[i * stride] = dot;
        if (out.s1) {
            out.s1[i * stride] = s1;
            out.s2[i * stride] = s2;
        }
    }
}

// Runs of at least a vector, back to back, taken as one span: vectors cross
// from one run into the next, the vector that straddles two takes each
// lane's coefficients from its own run, and only the span's ends are
// scalar.  Run by run, every run paid for its own ends, and when streaming
// also for scalar values up to its first whole cache line (up to 15 of a
// 14x14 run's 196): NCHW 32x1024x14x14 inference, whose output streams,
// ran no faster than with ordinary stores that way.  Every value is the
// same expression as run by run, so results do not change.
template <bool Blend, typename C>
MBN_INLINE void joined_runs_normalize(const C* x, C* out, std::int64_t len, std::int64_t count,
                                      NormalizeRowCoefficients<C> k, OutputMode<C> mode) {
    using V = Vec<C>;
    using Mask = decltype(V{} < V{});
    constexpr std::int64_t L = kLanes<C>;
    Mask lane = {};
    for (std::int64_t j = 0; j < L; ++j) lane[j] = j;
    const V vb = splat<V>(mode.beta);
    const std::int64_t n = len * count;
    std::int64_t run = 0, run_end = len;  // the run of value i, and where it ends
    std::int64_t i = 0;
    const auto one = [&](std::int64_t j) MBN_INLINE_LAMBDA {
        while (j >= run_end) ++run, run_end += len;
        C r = (x[j] - k.mean[run]) * k.k[run] + k.b[run];
        if constexpr (Blend) r += mode.beta * out[j];
        out[j] = r;
    };
    const auto vectors = [&](std::int64_t end, auto stream) MBN_INLINE_LAMBDA {
        const auto put_next = [&](const V& mean, const V& scale, const V& shift) MBN_INLINE_LAMBDA {
            V r = (load<V>(x + i) - mean) * scale + shift;
            if constexpr (Blend) r += vb * load<V>(out + i);
            put(out + i, r, stream());
            i += L;
        };
        while (i + L <= end) {
            while (i >= run_end) ++run, run_end += len;
            const V km = splat<V>(k.mean[run]), kk = splat<V>(k.k[run]), kb = splat<V>(k.b[run]);
            for (const std::int64_t last = std::min(run_end, end) - L; i <= last;) put_next(km, kk, kb);
            if (i + L > end) break;
            // run_end lies in [i, i + L): lanes from there on are the next run's,
            // which exists since the vector ends inside the span.
            const Mask here = lane < splat<Mask>(run_end - i);
            put_next(here ? km : splat<V>(k.mean[run + 1]), here ? kk : splat<V>(k.k[run + 1]),
                     here ? kb : splat<V>(k.b[run + 1]));
        }
    };
    write_through_window(stream_window(out, n, mode.stream), n, i, one, vectors);
    for (; i < n; ++i) one(i);
}

template <typename C>
MBN_INLINE void segments_normalize_body(const C* x, C* out, std::int64_t len, std::int64_t count,
                                        NormalizeRowCoefficients<C> k, OutputMode<C> mode) {
    if (len >= kLanes<C>) {  // a vector then spans at most two runs
        if (mode.blend) joined_runs_normalize<true>(x, out, len, count, k, mode);
        else joined_runs_normalize<false>(x, out, len, count, k, mode);
        return;
    }
    for (std::int64_t i = 0; i < count; ++i, x += len, out += len)
        normalize_body(x, out, len, NormalizeCoefficients<C>{k.mean[i], k.k[i], k.b[i]}, mode);
}

template <typename C>
MBN_INLINE void segments_backprop_body(const C* x, const C* dy, C* dx, std::int64_t len, std::int64_t count,
                                       BackpropRowCoefficients<double> k, OutputMode<C> mode) {
    for (std::int64_t i = 0; i < count; ++i, x += len, dy += len, dx += len)
        backprop_body(x, dy, dx, len, BackpropCoefficients{k.mean[i], k.k_dy[i], k.k_x[i], k.k_0[i]}, mode);
}

}  // namespace

// The exported kernels: for each compute type, one line per kernel forwarding
// to its body, cloned per instruction set.
#define MBN_DEFINE_SPAN_KERNELS(C)                                                                        \
    MBN_VECTOR_CLONES void span_moments(const C* x, std::int64_t n, double center, MomentSums out) {       \
        moments_body(x, n, center, out);                                                                  \
    }                                                                                                     \
    MBN_VECTOR_CLONES void span_gradient(const C* x, const C* dy, std::int64_t n, double center,          \
                                         GradientSums out) {                                              \
        gradient_body(x, dy, n, center, out);                                                             \
    }                                                                                                     \
    MBN_VECTOR_CLONES void span_normalize(const C* x, C* out, std::int64_t n, NormalizeCoefficients<C> k, \
                                          OutputMode<C> mode) {                                           \
        normalize_body(x, out, n, k, mode);                                                               \
        stream_fence(mode.stream);                                                                        \
    }                                                                                                     \
    MBN_VECTOR_CLONES void span_backprop(const C* x, const C* dy, C* dx, std::int64_t n,                  \
                                         BackpropCoefficients k, OutputMode<C> mode) {                    \
        backprop_body(x, dy, dx, n, k, mode);                                                             \
        stream_fence(mode.stream);                                                                        \
    }                                                                                                     \
    MBN_VECTOR_CLONES void row_moments(RowSpan<const C> x, std::int64_t rows, const double* center,       \
                                       std::int64_t n, MomentSums out) {                                  \
        row_moments_body(x, rows, center, n, out);                                                        \
    }                                                                                                     \
    MBN_VECTOR_CLONES void row_gradient(RowSpan<const C> x, RowSpan<const C> dy, std::int64_t rows,       \
                                        const double* center, std::int64_t n, GradientSums out) {         \
        row_gradient_body(x, dy, rows, center, n, out);                                                   \
    }                                                                                                     \
    MBN_VECTOR_CLONES void row_normalize(RowSpan<const C> x, RowSpan<C> out, std::int64_t rows,           \
                                         std::int64_t n, NormalizeRowCoefficients<C> k,                   \
                                         OutputMode<C> mode) {                                            \
        row_normalize_body(x, out, rows, n, k, mode);                                                     \
    }                                                                                                     \
    MBN_VECTOR_CLONES void row_backprop(RowSpan<const C> x, RowSpan<const C> dy, RowSpan<C> dx,           \
                                        std::int64_t rows, std::int64_t n, BackpropRowCoefficients<double> k, \
                                        OutputMode<C> mode) {                                             \
        row_backprop_body<double>(x, dy, dx, rows, n, k, mode);                                           \
    }                                                                                                     \
    MBN_VECTOR_CLONES void segments_moments(const C* x, std::int64_t len, std::int64_t count,             \
                                            const double* center, MomentSums out, std::int64_t stride) {  \
        segments_moments_body(x, len, count, center, out, stride);                                        \
    }                                                                                                     \
    MBN_VECTOR_CLONES void segments_gradient(const C* x, const C* dy, std::int64_t len,                   \
                                             std::int64_t count, const double* center, GradientSums out,  \
                                             std::int64_t stride) {                                       \
        segments_gradient_body(x, dy, len, count, center, out, stride);                                   \
    }                                                                                                     \
    MBN_VECTOR_CLONES void segments_normalize(const C* x, C* out, std::int64_t len, std::int64_t count,   \
                                              NormalizeRowCoefficients<C> k, OutputMode<C> mode) {        \
        segments_normalize_body(x, out, len, count, k, mode);                                             \
        stream_fence(mode.stream);                                                                        \
    }                                                                                                     \
    MBN_VECTOR_CLONES void segments_backprop(const C* x, const C* dy, C* dx, std::int64_t len,            \
                                             std::int64_t count, BackpropRowCoefficients<double> k,       \
                                             OutputMode<C> mode) {                                        \
        segments_backprop_body(x, dy, dx, len, count, k, mode);                                           \
        stream_fence(mode.stream);                                                                        \
    }

// inverse_std (common/numerics.hpp) over an array: SSE2's sqrtpd is in every
// clone and, unlike std::sqrt, has no errno path that would keep the loop
// scalar.
MBN_VECTOR_CLONES void inverse_std_span(const double* variance, double epsilon, double* out, std::int64_t n) {
    std::int64_t i = 0;
#if defined(__x86_64__)
    const D2 eps = {epsilon, epsilon};
    const D2 one = {1.0, 1.0};
    for (; i + 2 <= n; i += 2) store(out + i, one / __builtin_ia32_sqrtpd(load<D2>(variance + i) + eps));
#endif
    for (; i < n; ++i) out[i] = inverse_std(variance[i], epsilon);
}

MBN_DEFINE_SPAN_KERNELS(float)
MBN_DEFINE_SPAN_KERNELS(double)

MBN_VECTOR_CLONES void row_backprop(RowSpan<const float> x, RowSpan<const float> dy, RowSpan<float> dx,
                                    std::int64_t rows, std::int64_t n, BackpropRowCoefficients<float> k,
                                    OutputMode<float> mode) {
    row_backprop_body<float>(x, dy, dx, rows, n, k, mode);
}

}  // namespace mbn::cpu
