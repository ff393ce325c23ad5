// Vector loops written with GCC/Clang vector extensions: the lane-wise
// arithmetic and the order of every reduction are fixed by the source, so the
// AVX2 and baseline clones give bitwise-identical results.
#include "cpu/span_kernels.hpp"

#include <cstring>

// The helpers below pass vector types by value but are always inlined, so the
// ABI note about passing wide vectors never applies.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(MIOPEN_BN_SANITIZE)
#define MBN_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MBN_VECTOR_CLONES
#endif
#define MBN_INLINE inline __attribute__((always_inline))

namespace mbn::cpu {
namespace {

// One 32-byte register of C, and the double vector its lanes widen to.
template <typename C>
struct Lanes;
template <>
struct Lanes<float> {
    typedef float Vec __attribute__((vector_size(32)));
    typedef double Wide __attribute__((vector_size(64)));
    static constexpr int count = 8;
};
template <>
struct Lanes<double> {
    typedef double Vec __attribute__((vector_size(32)));
    typedef double Wide __attribute__((vector_size(32)));
    static constexpr int count = 4;
};

template <typename C>
using Vec = typename Lanes<C>::Vec;
template <typename C>
using Wide = typename Lanes<C>::Wide;
template <typename C>
constexpr std::int64_t kLanes = Lanes<C>::count;

template <typename V>
MBN_INLINE V load(const void* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <typename V>
MBN_INLINE void store(void* p, V v) {
    std::memcpy(p, &v, sizeof v);
}
template <typename V, typename S>
MBN_INLINE V splat(S s) {
    V v = {};
    return v + static_cast<decltype(v[0] + 0)>(s);
}
template <typename C>
MBN_INLINE Wide<C> widen(Vec<C> v) {
    return __builtin_convertvector(v, Wide<C>);
}
template <typename W>
MBN_INLINE double lane_sum(W v) {
    double s = 0.0;
    for (unsigned i = 0; i < sizeof v / sizeof v[0]; ++i) s += v[i];
    return s;
}

template <typename C>
MBN_INLINE double sum_body(const C* x, std::int64_t n) {
    constexpr std::int64_t L = kLanes<C>;
    Wide<C> a0 = {}, a1 = {};
    std::int64_t i = 0;
    for (; i + 2 * L <= n; i += 2 * L) {
        a0 += widen<C>(load<Vec<C>>(x + i));
        a1 += widen<C>(load<Vec<C>>(x + i + L));
    }
    double s = lane_sum(a0 + a1);
    for (; i < n; ++i) s += static_cast<double>(x[i]);
    return s;
}

template <typename C>
MBN_INLINE double squared_deviation_body(const C* x, std::int64_t n, double center) {
    constexpr std::int64_t L = kLanes<C>;
    const Wide<C> c = splat<Wide<C>>(center);
    Wide<C> a0 = {}, a1 = {};
    std::int64_t i = 0;
    for (; i + 2 * L <= n; i += 2 * L) {
        const Wide<C> d0 = widen<C>(load<Vec<C>>(x + i)) - c;
        const Wide<C> d1 = widen<C>(load<Vec<C>>(x + i + L)) - c;
        a0 += d0 * d0;
        a1 += d1 * d1;
    }
    double s = lane_sum(a0 + a1);
    for (; i < n; ++i) {
        const double d = static_cast<double>(x[i]) - center;
        s += d * d;
    }
    return s;
}

template <typename C>
MBN_INLINE void squared_and_dot_body(const C* x, const C* dy, std::int64_t n, double center, double* sq,
                                     double* dot) {
    constexpr std::int64_t L = kLanes<C>;
    const Wide<C> c = splat<Wide<C>>(center);
    Wide<C> q = {}, p = {};
    std::int64_t i = 0;
    for (; i + L <= n; i += L) {
        const Wide<C> d = widen<C>(load<Vec<C>>(x + i)) - c;
        q += d * d;
        p += d * widen<C>(load<Vec<C>>(dy + i));
    }
    double s = lane_sum(q), t = lane_sum(p);
    for (; i < n; ++i) {
        const double d = static_cast<double>(x[i]) - center;
        s += d * d;
        t += d * static_cast<double>(dy[i]);
    }
    *sq += s;
    *dot += t;
}

template <typename C>
MBN_INLINE void normalize_body(const C* x, C* out, std::int64_t n, NormalizeCoefficients<C> k,
                               const C* prior, C beta) {
    constexpr std::int64_t L = kLanes<C>;
    const Vec<C> mh = splat<Vec<C>>(k.mean_hi), ml = splat<Vec<C>>(k.mean_lo);
    const Vec<C> kk = splat<Vec<C>>(k.k), kb = splat<Vec<C>>(k.b), vb = splat<Vec<C>>(beta);
    std::int64_t i = 0;
    if (prior) {
        for (; i + L <= n; i += L) {
            const Vec<C> r = ((load<Vec<C>>(x + i) - mh) - ml) * kk + kb;
            store(out + i, r + vb * load<Vec<C>>(prior + i));
        }
        for (; i < n; ++i) out[i] = ((x[i] - k.mean_hi) - k.mean_lo) * k.k + k.b + beta * prior[i];
    } else {
        for (; i + L <= n; i += L) store(out + i, ((load<Vec<C>>(x + i) - mh) - ml) * kk + kb);
        for (; i < n; ++i) out[i] = ((x[i] - k.mean_hi) - k.mean_lo) * k.k + k.b;
    }
}

template <typename C>
MBN_INLINE void backprop_body(const C* x, const C* dy, C* dx, std::int64_t n, BackpropCoefficients<C> k,
                              const C* prior, C beta) {
    constexpr std::int64_t L = kLanes<C>;
    const Vec<C> mh = splat<Vec<C>>(k.mean_hi), ml = splat<Vec<C>>(k.mean_lo);
    const Vec<C> kdy = splat<Vec<C>>(k.k_dy), kx = splat<Vec<C>>(k.k_x), k0 = splat<Vec<C>>(k.k_0);
    const Vec<C> vb = splat<Vec<C>>(beta);
    std::int64_t i = 0;
    for (; i + L <= n; i += L) {
        const Vec<C> d = (load<Vec<C>>(x + i) - mh) - ml;
        Vec<C> r = (load<Vec<C>>(dy + i) * kdy + k0) + d * kx;
        if (prior) r += vb * load<Vec<C>>(prior + i);
        store(dx + i, r);
    }
    for (; i < n; ++i) {
        const C d = (x[i] - k.mean_hi) - k.mean_lo;
        C r = (dy[i] * k.k_dy + k.k_0) + d * k.k_x;
        if (prior) r += beta * prior[i];
        dx[i] = r;
    }
}

template <typename C>
MBN_INLINE void row_accumulate_body(const C* x, double* acc, std::int64_t n) {
    constexpr std::int64_t L = kLanes<C>;
    std::int64_t j = 0;
    for (; j + L <= n; j += L) store(acc + j, load<Wide<C>>(acc + j) + widen<C>(load<Vec<C>>(x + j)));
    for (; j < n; ++j) acc[j] += static_cast<double>(x[j]);
}

template <typename C>
MBN_INLINE void row_squared_deviation_body(const C* x, const double* center, double* sq, std::int64_t n) {
    constexpr std::int64_t L = kLanes<C>;
    std::int64_t j = 0;
    for (; j + L <= n; j += L) {
        const Wide<C> d = widen<C>(load<Vec<C>>(x + j)) - load<Wide<C>>(center + j);
        store(sq + j, load<Wide<C>>(sq + j) + d * d);
    }
    for (; j < n; ++j) {
        const double d = static_cast<double>(x[j]) - center[j];
        sq[j] += d * d;
    }
}

template <typename C>
MBN_INLINE void row_squared_and_dot_body(const C* x, const C* dy, const double* center, double* sq,
                                         double* dot, std::int64_t n) {
    constexpr std::int64_t L = kLanes<C>;
    std::int64_t j = 0;
    for (; j + L <= n; j += L) {
        const Wide<C> d = widen<C>(load<Vec<C>>(x + j)) - load<Wide<C>>(center + j);
        store(sq + j, load<Wide<C>>(sq + j) + d * d);
        store(dot + j, load<Wide<C>>(dot + j) + d * widen<C>(load<Vec<C>>(dy + j)));
    }
    for (; j < n; ++j) {
        const double d = static_cast<double>(x[j]) - center[j];
        sq[j] += d * d;
        dot[j] += d * static_cast<double>(dy[j]);
    }
}

template <typename C>
MBN_INLINE void row_normalize_body(const C* x, C* out, std::int64_t n, NormalizeRowCoefficients<C> k,
                                   const C* prior, C beta) {
    constexpr std::int64_t L = kLanes<C>;
    const Vec<C> vb = splat<Vec<C>>(beta);
    std::int64_t j = 0;
    for (; j + L <= n; j += L) {
        const Vec<C> d = (load<Vec<C>>(x + j) - load<Vec<C>>(k.mean_hi + j)) - load<Vec<C>>(k.mean_lo + j);
        Vec<C> r = d * load<Vec<C>>(k.k + j) + load<Vec<C>>(k.b + j);
        if (prior) r += vb * load<Vec<C>>(prior + j);
        store(out + j, r);
    }
    for (; j < n; ++j) {
        C r = ((x[j] - k.mean_hi[j]) - k.mean_lo[j]) * k.k[j] + k.b[j];
        if (prior) r += beta * prior[j];
        out[j] = r;
    }
}

template <typename C>
MBN_INLINE void row_backprop_body(const C* x, const C* dy, C* dx, std::int64_t n,
                                  BackpropRowCoefficients<C> k, const C* prior, C beta) {
    constexpr std::int64_t L = kLanes<C>;
    const Vec<C> vb = splat<Vec<C>>(beta);
    std::int64_t j = 0;
    for (; j + L <= n; j += L) {
        const Vec<C> d = (load<Vec<C>>(x + j) - load<Vec<C>>(k.mean_hi + j)) - load<Vec<C>>(k.mean_lo + j);
        Vec<C> r = (load<Vec<C>>(dy + j) * load<Vec<C>>(k.k_dy + j) + load<Vec<C>>(k.k_0 + j)) +
                   d * load<Vec<C>>(k.k_x + j);
        if (prior) r += vb * load<Vec<C>>(prior + j);
        store(dx + j, r);
    }
    for (; j < n; ++j) {
        const C d = (x[j] - k.mean_hi[j]) - k.mean_lo[j];
        C r = (dy[j] * k.k_dy[j] + k.k_0[j]) + d * k.k_x[j];
        if (prior) r += beta * prior[j];
        dx[j] = r;
    }
}

}  // namespace

// Each public kernel: one line forwarding to its body, cloned per ISA.

MBN_VECTOR_CLONES double span_sum(const float* x, std::int64_t n) { return sum_body(x, n); }
MBN_VECTOR_CLONES double span_sum(const double* x, std::int64_t n) { return sum_body(x, n); }

MBN_VECTOR_CLONES double span_squared_deviation(const float* x, std::int64_t n, double center) {
    return squared_deviation_body(x, n, center);
}
MBN_VECTOR_CLONES double span_squared_deviation(const double* x, std::int64_t n, double center) {
    return squared_deviation_body(x, n, center);
}

MBN_VECTOR_CLONES void span_squared_and_dot(const float* x, const float* dy, std::int64_t n, double center,
                                            double* sq, double* dot) {
    squared_and_dot_body(x, dy, n, center, sq, dot);
}
MBN_VECTOR_CLONES void span_squared_and_dot(const double* x, const double* dy, std::int64_t n,
                                            double center, double* sq, double* dot) {
    squared_and_dot_body(x, dy, n, center, sq, dot);
}

MBN_VECTOR_CLONES void span_normalize(const float* x, float* out, std::int64_t n,
                                      NormalizeCoefficients<float> c, const float* prior, float beta) {
    normalize_body(x, out, n, c, prior, beta);
}
MBN_VECTOR_CLONES void span_normalize(const double* x, double* out, std::int64_t n,
                                      NormalizeCoefficients<double> c, const double* prior, double beta) {
    normalize_body(x, out, n, c, prior, beta);
}

MBN_VECTOR_CLONES void span_backprop(const float* x, const float* dy, float* dx, std::int64_t n,
                                     BackpropCoefficients<float> c, const float* prior, float beta) {
    backprop_body(x, dy, dx, n, c, prior, beta);
}
MBN_VECTOR_CLONES void span_backprop(const double* x, const double* dy, double* dx, std::int64_t n,
                                     BackpropCoefficients<double> c, const double* prior, double beta) {
    backprop_body(x, dy, dx, n, c, prior, beta);
}

MBN_VECTOR_CLONES void row_accumulate(const float* x, double* acc, std::int64_t n) {
    row_accumulate_body(x, acc, n);
}
MBN_VECTOR_CLONES void row_accumulate(const double* x, double* acc, std::int64_t n) {
    row_accumulate_body(x, acc, n);
}

MBN_VECTOR_CLONES void row_squared_deviation(const float* x, const double* center, double* sq,
                                             std::int64_t n) {
    row_squared_deviation_body(x, center, sq, n);
}
MBN_VECTOR_CLONES void row_squared_deviation(const double* x, const double* center, double* sq,
                                             std::int64_t n) {
    row_squared_deviation_body(x, center, sq, n);
}

MBN_VECTOR_CLONES void row_squared_and_dot(const float* x, const float* dy, const double* center, double* sq,
                                           double* dot, std::int64_t n) {
    row_squared_and_dot_body(x, dy, center, sq, dot, n);
}
MBN_VECTOR_CLONES void row_squared_and_dot(const double* x, const double* dy, const double* center,
                                           double* sq, double* dot, std::int64_t n) {
    row_squared_and_dot_body(x, dy, center, sq, dot, n);
}

MBN_VECTOR_CLONES void row_normalize(const float* x, float* out, std::int64_t n,
                                     NormalizeRowCoefficients<float> c, const float* prior, float beta) {
    row_normalize_body(x, out, n, c, prior, beta);
}
MBN_VECTOR_CLONES void row_normalize(const double* x, double* out, std::int64_t n,
                                     NormalizeRowCoefficients<double> c, const double* prior, double beta) {
    row_normalize_body(x, out, n, c, prior, beta);
}

MBN_VECTOR_CLONES void row_backprop(const float* x, const float* dy, float* dx, std::int64_t n,
                                    BackpropRowCoefficients<float> c, const float* prior, float beta) {
    row_backprop_body(x, dy, dx, n, c, prior, beta);
}
MBN_VECTOR_CLONES void row_backprop(const double* x, const double* dy, double* dx, std::int64_t n,
                                    BackpropRowCoefficients<double> c, const double* prior, double beta) {
    row_backprop_body(x, dy, dx, n, c, prior, beta);
}

}  // namespace mbn::cpu
