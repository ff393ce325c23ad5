// Swish and its derivative over spans, with exp computed in vector form:
// the library's exp would keep each loop scalar, at several times the cost
// of the normalization it follows.  Every value, the last few of a span
// included, goes through the same vector code, so a result depends only on
// its inputs.
#include "cpu/swish_kernels.hpp"
#include "cpu/vector_clones.hpp"
#include "cpu/vector_types.hpp"

#include <limits>

namespace mbn::cpu {
namespace {

typedef std::int32_t I4 __attribute__((vector_size(16)));
typedef std::int32_t I8 __attribute__((vector_size(32)));
typedef std::int64_t L4 __attribute__((vector_size(32)));

// exp(x) = 2^k * exp(r), k = round(x / ln 2), r = x - k ln 2 in
// [-ln2/2, ln2/2] (ln 2 split in two so that k * ln2_hi is exact), exp(r)
// by its Taylor series to the degree the type needs, and 2^k applied as two
// halves so that each is a normal number down to the smallest subnormal
// result.  The argument is first clamped to where the result turns 0 or inf;
// a NaN stays NaN.
template <typename C>
struct ExpTraits;

template <>
struct ExpTraits<float> {
    using Bits = I8;
    static constexpr float kLow = -104.0f, kHigh = 89.0f;
    static constexpr float kLn2Hi = 0.693115234375f, kLn2Lo = 3.1946184945309415e-05f;
    static constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    static constexpr int kDegree = 7;             // r^8 / 8! < 2^-24 at |r| = ln2/2
    static constexpr int kMantissa = 23, kBias = 127;
    static Bits to_int(const F8& k) { return __builtin_convertvector(k, I8); }
};

template <>
struct ExpTraits<double> {
    using Bits = L4;
    static constexpr double kLow = -746.0, kHigh = 710.0;
    static constexpr double kLn2Hi = 0.6931471803691238, kLn2Lo = 1.9082149292705877e-10;
    static constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52
    static constexpr int kDegree = 13;                    // r^14 / 14! < 2^-53 at |r| = ln2/2
    static constexpr int kMantissa = 52, kBias = 1023;
    // Through 32-bit integers: AVX2 converts doubles to those, not to 64-bit ones.
    static Bits to_int(const D4& k) { return __builtin_convertvector(__builtin_convertvector(k, I4), L4); }
};

// 1/0!, 1/1!, ... 1/Degree!: exp's Taylor coefficients, at compile time.
template <typename C, int Degree>
struct InverseFactorials {
    C value[Degree + 1] = {};
    constexpr InverseFactorials() {
        value[0] = 1;
        for (int i = 1; i <= Degree; ++i) value[i] = value[i - 1] / static_cast<C>(i);
    }
};

template <typename C>
MBN_INLINE Vec<C> vector_exp(Vec<C> x) {
    using T = ExpTraits<C>;
    using V = Vec<C>;
    using Bits = typename T::Bits;
    x = x < T::kLow ? splat<V>(T::kLow) : x;  // written so that NaN passes both
    x = x > T::kHigh ? splat<V>(T::kHigh) : x;
    const V k = (x * static_cast<C>(1.4426950408889634) + T::kRound) - T::kRound;
    const V r = (x - k * T::kLn2Hi) - k * T::kLn2Lo;
    constexpr InverseFactorials<C, T::kDegree> taylor{};
    V p = splat<V>(taylor.value[T::kDegree]);
    for (int i = T::kDegree - 1; i >= 0; --i) p = p * r + taylor.value[i];
    const Bits ki = T::to_int(k);
    const Bits half = ki >> 1;
    const auto scale = [](const Bits& e) {  // 2^e from its exponent bits
        const Bits bits = (e + T::kBias) << T::kMantissa;
        return load<V>(&bits);
    };
    return p * scale(half) * scale(ki - half);
}

// beta * v, with beta = 0 giving 0 even for infinite v (swish is then v / 2).
template <typename C>
MBN_INLINE Vec<C> swish_argument(const Vec<C>& v, C beta) {
    return beta == C(0) ? Vec<C>{} : v * beta;
}

template <typename C>
MBN_INLINE Vec<C> swish(const Vec<C>& v, C beta) {
    using V = Vec<C>;
    const V e = vector_exp<C>(-swish_argument(v, beta));
    const V inf = splat<V>(std::numeric_limits<C>::infinity());
    return e == inf ? V{} : v / (C(1) + e);
}

// swish'(v) = s * (1 + t * (1 - s)), t = beta * v, s = 1 / (1 + e), e =
// exp(-t); 1 - s is taken as e * s (at most 1, so t * (e * s) cannot
// overflow): subtracting s from 1 would lose the digits of a derivative
// close to 1.
template <typename C>
MBN_INLINE Vec<C> swish_derivative(const Vec<C>& v, C beta) {
    using V = Vec<C>;
    const V t = swish_argument(v, beta);
    const V e = vector_exp<C>(-t);
    const V inf = splat<V>(std::numeric_limits<C>::infinity());
    const V s = C(1) / (C(1) + e);
    V d = s * (C(1) + t * (e * s));
    d = t == inf ? splat<V>(C(1)) : d;
    return e == inf ? V{} : d;
}

// Calls fn(i, count) for each vector's worth of [0, n): count == lanes
// except for the last, partial one, which fn handles through a padded copy.
template <typename C, typename Fn>
MBN_INLINE void for_each_vector(std::int64_t n, Fn&& fn) {
    constexpr std::int64_t L = kLanes<C>;
    std::int64_t i = 0;
    for (; i + L <= n; i += L) fn(i, L);
    if (i < n) fn(i, n - i);
}

// The values [i, i + count) of p as a vector (zero-padded past count).
template <typename C>
MBN_INLINE Vec<C> load_part(const C* p, std::int64_t i, std::int64_t count) {
    if (count == kLanes<C>) return load<Vec<C>>(p + i);
    C padded[kLanes<C>] = {};
    for (std::int64_t j = 0; j < count; ++j) padded[j] = p[i + j];
    return load<Vec<C>>(padded);
}

template <typename C>
MBN_INLINE void store_part(C* p, std::int64_t i, std::int64_t count, const Vec<C>& v) {
    if (count == kLanes<C>) return store(p + i, v);
    C padded[kLanes<C>];
    store(padded, v);
    for (std::int64_t j = 0; j < count; ++j) p[i + j] = padded[j];
}

template <typename C>
MBN_INLINE void swish_body(C* values, std::int64_t n, C beta) {
    for_each_vector<C>(n, [&](std::int64_t i, std::int64_t count) {
        store_part(values, i, count, swish(load_part(values, i, count), beta));
    });
}

template <typename C>
MBN_INLINE void swish_gradient_body(const C* x, const C* dy, C* g, std::int64_t n, NormalizeCoefficients<C> z,
                                    C beta) {
    for_each_vector<C>(n, [&](std::int64_t i, std::int64_t count) {
        const Vec<C> zi = (load_part(x, i, count) - z.mean) * z.k + z.b;
        store_part(g, i, count, load_part(dy, i, count) * swish_derivative(zi, beta));
    });
}

template <typename C>
MBN_INLINE void row_swish_gradient_body(const C* x, const C* dy, C* g, std::int64_t n,
                                        NormalizeRowCoefficients<C> z, C beta) {
    for_each_vector<C>(n, [&](std::int64_t i, std::int64_t count) {
        const Vec<C> zi =
            (load_part(x, i, count) - load_part(z.mean, i, count)) * load_part(z.k, i, count) + load_part(z.b, i, count);
        store_part(g, i, count, load_part(dy, i, count) * swish_derivative(zi, beta));
    });
}

}  // namespace

#define MBN_DEFINE_SWISH_KERNELS(C)                                                                  \
    MBN_VECTOR_CLONES void span_swish(C* values, std::int64_t n, C beta) { swish_body(values, n, beta); } \
    MBN_VECTOR_CLONES void span_swish_gradient(const C* x, const C* dy, C* g, std::int64_t n,        \
                                               NormalizeCoefficients<C> z, C beta) {                 \
        swish_gradient_body(x, dy, g, n, z, beta);                                                   \
    }                                                                                                \
    MBN_VECTOR_CLONES void row_swish_gradient(const C* x, const C* dy, C* g, std::int64_t n,         \
                                              NormalizeRowCoefficients<C> z, C beta) {               \
        row_swish_gradient_body(x, dy, g, n, z, beta);                                               \
    }

MBN_DEFINE_SWISH_KERNELS(float)
MBN_DEFINE_SWISH_KERNELS(double)

}  // namespace mbn::cpu
