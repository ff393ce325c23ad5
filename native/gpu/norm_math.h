// Device-side arithmetic shared by the batch- and group-norm kernels: element
// conversions, Welford/Chan moment merges, vector access and result
// blending (the reductions are in block_reduce.h).  No __global__ function
// lives here.
#pragma once

#include "gpu/hip_compat.h"

#include <cstdint>
#include <type_traits>

namespace mbn {
namespace gpu {

// Accumulation type: float for half, bfloat16 and float data, double for double.
template <typename T>
struct AccumulatorOf {
    using type = float;
};
template <>
struct AccumulatorOf<double> {
    using type = double;
};
template <typename T>
using acc_t = typename AccumulatorOf<T>::type;

__device__ __forceinline__ std::int64_t min64(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

// ---- element conversions -------------------------------------------------

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ double widen(double v) { return v; }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
// bfloat16 is the upper half of a float: converted through its bits, so both
// vendors' storage types behave the same.
__device__ __forceinline__ float widen(mbn_bfloat16 v) {
    const unsigned short bits = *reinterpret_cast<const unsigned short*>(&v);
    return __uint_as_float(static_cast<unsigned int>(bits) << 16);
}

// widen() for a later pass over values a kernel keeps packed in registers
// between passes (kPass 1, 2: each pass its own form; 0: widen() itself).
// To the compiler the passes' bfloat16 conversions are then different
// values: it keeps the packed data live between them, not the first pass's
// floats (two registers a pair; the 16-byte K=4 channel tiles took 84-116
// registers so, one block a multiprocessor).  Other types widen as widen()
// (double stays double).
template <int kPass, typename T>
__device__ __forceinline__ auto widen_in_pass(T v) {
    return widen(v);
}
template <int kPass>
__device__ __forceinline__ float widen_in_pass(mbn_bfloat16 v) {
#if defined(__CUDA_ARCH__) && !defined(MBN_EMULATION)
    if (kPass == 0) return widen(v);
    const unsigned short bits = *reinterpret_cast<const unsigned short*>(&v);
    unsigned int u;
    if (kPass == 1)
        asm("mov.b32 %0, {%1, %2};" : "=r"(u) : "h"(static_cast<unsigned short>(0)), "h"(bits));
    else
        asm("{ .reg .b32 t; cvt.u32.u16 t, %1; shl.b32 %0, t, 16; }" : "=r"(u) : "h"(bits));
    return __uint_as_float(u);
#else
    return widen(v);
#endif
}

template <typename T>
struct Narrow;
template <>
struct Narrow<float> {
    __device__ static float from(double v) { return static_cast<float>(v); }
};
template <>
struct Narrow<double> {
    __device__ static double from(double v) { return v; }
};
template <>
struct Narrow<__half> {
    __device__ static __half from(double v) { return __float2half_rn(static_cast<float>(v)); }
};
// float to bfloat16, rounded to nearest even; NaN stays a (quiet) NaN.
// nvcc has one instruction for it (F2FP on sm_80 and later): the integer
// rounding below took seven, and bfloat16 kernels ran 7-17% behind their
// half twins on the same bytes (H200).
__device__ __forceinline__ mbn_bfloat16 bfloat16_nearest(float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(MBN_EMULATION)
    return __float2bfloat16_rn(v);
#else
    const unsigned int u = __float_as_uint(v);
    unsigned short bits;
    if ((u & 0x7fffffffu) > 0x7f800000u)
        bits = static_cast<unsigned short>((u >> 16) | 0x40u);
    else
        bits = static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    mbn_bfloat16 out;
    *reinterpret_cast<unsigned short*>(&out) = bits;
    return out;
#endif
}
template <>
struct Narrow<mbn_bfloat16> {
    __device__ static mbn_bfloat16 from(double v) { return bfloat16_nearest(static_cast<float>(v)); }
};
// Conversion of a result to an element type.  The data path computes in
// float: its overloads convert directly, without a detour through double.
template <typename T>
__device__ __forceinline__ T narrow(float v) {
    return Narrow<T>::from(static_cast<double>(v));
}
template <>
__device__ __forceinline__ float narrow<float>(float v) {
    return v;
}
template <>
__device__ __forceinline__ __half narrow<__half>(float v) {
    return __float2half_rn(v);
}
template <>
__device__ __forceinline__ mbn_bfloat16 narrow<mbn_bfloat16>(float v) {
    return bfloat16_nearest(v);
}
template <typename T>
__device__ __forceinline__ T narrow(double v) {
    return Narrow<T>::from(v);
}

// ---- moments ----------------------------------------------------------------

// Count, mean and sum of squared deviations (M2) of a set of values.  The
// hot loops keep M2 in the accumulation type (M2 = A); what blocks merge
// keeps it in double (M2 = double), so a float channel of magnitude 1e30,
// whose squared deviations do not fit a float, still merges exactly
// (block_moments redoes a thread's share in double when its float M2
// overflowed).
template <typename A, typename M2 = double>
struct Moments {
    A count;
    A mean;
    M2 m2;
};

// Chan et al.'s pairwise merge of two non-empty sides, given share =
// b.count / (a.count + b.count): merge's core, for callers that merge
// several pairs of the same counts with one division.  The squared mean
// difference is taken in M2's type.
template <typename A, typename M2>
__device__ __forceinline__ Moments<A, M2> merge_by_share(const Moments<A, M2>& a, const Moments<A, M2>& b, A share) {
    const A delta = b.mean - a.mean;
    const M2 wide_delta = static_cast<M2>(delta);
    return Moments<A, M2>{a.count + b.count, a.mean + delta * share,
                          a.m2 + b.m2 + wide_delta * wide_delta * static_cast<M2>(a.count * share)};
}

// Chan et al.'s pairwise merge; an empty side leaves the other unchanged
// (so no 0/0 appears).
template <typename A, typename M2>
__device__ __forceinline__ Moments<A, M2> merge(const Moments<A, M2>& a, const Moments<A, M2>& b) {
    if (b.count == A(0)) return a;
    if (a.count == A(0)) return b;
    return merge_by_share(a, b, b.count / (a.count + b.count));
}

// A thread's statistics of the shifted values d = x - shift: Welford moments
// (for the variance), and the plain sum of d in double (for the mean: it
// feeds sums such as dscale = sum(dy (x - mean)), whose cancellation a float
// mean cannot carry).
template <typename A, typename M2 = double>
struct ShiftedMoments {
    Moments<A, M2> welford;
    double sum;
};

template <typename A, typename M2>
__device__ __forceinline__ ShiftedMoments<A, M2> merge(const ShiftedMoments<A, M2>& a,
                                                       const ShiftedMoments<A, M2>& b) {
    return ShiftedMoments<A, M2>{merge(a.welford, b.welford), a.sum + b.sum};
}

// Adds a batch of shifted values: their mean and M2 two-pass in registers,
// then one merge, so there is one division per batch rather than per element.
// The batch's sum joins the double total once per batch: a float sum of at
// most 16 deviations loses nothing the mean needs, and converting each
// element to double instead cost more than loading it (conversions to and
// from 64-bit types issue at an eighth of the float rate).
// With `count`, only v[0 .. count) are added (0 < count <= B; a batch cut
// short by the end of a walk).
template <typename A, int B>
__device__ __forceinline__ Moments<A, A> batch_moments(const A (&v)[B], int count, A& sum) {
    sum = 0;
#pragma unroll
    for (int i = 0; i < B; ++i)
        if (i < count) sum += v[i];
    const A mean = sum / A(count);
    A m2 = 0;
#pragma unroll
    for (int i = 0; i < B; ++i)
        if (i < count) m2 += (v[i] - mean) * (v[i] - mean);
    return Moments<A, A>{A(count), mean, m2};
}

template <typename A, int B>
__device__ __forceinline__ void add_batch(ShiftedMoments<A, A>& m, const A (&v)[B], int count = B) {
    A sum;
    m.welford = merge(m.welford, batch_moments(v, count, sum));
    m.sum += static_cast<double>(sum);
}

// add_batch for the VF features of one thread, whose batches hold the same
// positions (0 < count <= B): the counts agree, so one division serves
// every feature's merge (merged one by one, the compiler kept a division
// each), with the same results bit for bit.
template <typename A, int B, int VF>
__device__ __forceinline__ void add_batches(ShiftedMoments<A, A> (&m)[VF], const A (&v)[VF][B], int count) {
    const A before = m[0].welford.count;
    const A share = A(count) / (before + A(count));  // 1 where nothing came before (unused)
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        A sum;
        const Moments<A, A> batch = batch_moments(v[j], count, sum);
        m[j].welford = before == A(0) ? batch : merge_by_share(m[j].welford, batch, share);
        m[j].sum += static_cast<double>(sum);
    }
}

// ---- finishing on one thread ------------------------------------------------------

// A feature's statistics from its sums shifted by a center c, s1 = Σ(x - c),
// s2 = Σ(x - c)², with the host's 1 / count: the mean's offset from c, the
// biased variance and 1 / sqrt(variance + epsilon).  Products and an rsqrt,
// where divisions and a square root would be long dependent chains of
// double instructions that the rest of the block waits on.
struct ShiftedStatistics {
    double offset, variance, inv_std;
};
__device__ __forceinline__ ShiftedStatistics finish_shifted(double s1, double s2, double inv_count,
                                                               double epsilon) {
    const double offset = s1 * inv_count;
    double variance = s2 * inv_count - offset * offset;
    if (variance < 0.0) variance = 0.0;  // rounding below 0; NaN stays NaN
    return {offset, variance, rsqrt(variance + epsilon)};
}

// ---- vector access --------------------------------------------------------------

// V consecutive elements moved as one access (16 bytes for the widest type).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
    T lane[V];
};

// Reads V consecutive elements at p (aligned for V) as stored.
template <int V, typename T>
__device__ __forceinline__ Pack<T, V> load_pack(const T* p) {
    return *reinterpret_cast<const Pack<T, V>*>(p);
}

// A 16-byte vector held as loaded, four 32-bit registers, its elements
// converted where they are used: held as a Pack<T, V>, 16-bit elements took
// a register each (bn_nhwc_columns.hip), and nvcc put some in local memory
// (bn_wave_tile_nhwc.hip).
using Bits = uint4;

template <typename T>
__device__ __forceinline__ Bits load_bits(const T* p) {
    return *reinterpret_cast<const Bits*>(p);
}

__device__ __forceinline__ unsigned word_of(const Bits& b, int i) {
    return i == 0 ? b.x : i == 1 ? b.y : i == 2 ? b.z : b.w;
}

// Element v of the vector (v a constant after unrolling), as float.
template <typename T>
__device__ __forceinline__ float value_at(const Bits& b, int v) {
    if constexpr (std::is_same<T, float>::value) {
        return __uint_as_float(word_of(b, v));
    } else {
        const unsigned w = word_of(b, v / 2);
        if constexpr (std::is_same<T, __half>::value)
            return __half2float(__ushort_as_half(static_cast<unsigned short>(v % 2 ? w >> 16 : w & 0xffffu)));
        else
            return __uint_as_float(v % 2 ? w & 0xffff0000u : w << 16);
    }
}

// Reads a pack for the last time, in a second pass over data streamed
// through the L2: evict-first there (ld.global.cs), so that the lines still
// to be read again outlast the ones just used.  NVIDIA only; elsewhere a
// plain load.
template <int V, typename T>
__device__ __forceinline__ Pack<T, V> load_pack_last(const T* p) {
#if defined(__NVCC__) && defined(__CUDA_ARCH__)  // nvcc compiling device code (not the emulator)
    if constexpr (sizeof(Pack<T, V>) == 16) {
        const uint4 word = __ldcs(reinterpret_cast<const uint4*>(p));
        Pack<T, V> pack;
        memcpy(&pack, &word, sizeof pack);
        return pack;
    }
#endif
    return load_pack<V>(p);
}

// Reads a 16-byte pack from shared memory as one access.  A Pack copied
// whole from shared memory became a read a lane (bfloat16: 8 LDS.U16 a
// vector) or two 8-byte reads where one 16-byte read does (the persistent
// group-norm kernels' shared slots: 1.04x-1.09x on bfloat16 64-128 MB rows).
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load_shared_pack(const Pack<T, V>* p) {
    static_assert(sizeof(Pack<T, V>) == 16, "16-byte packs");
    const uint4 word = *reinterpret_cast<const uint4*>(p);
    Pack<T, V> pack;
    memcpy(&pack, &word, sizeof pack);
    return pack;
}

// Writes a pack at p (aligned for V) as one access, from 4-byte words.
// Assigning the Pack itself (or copying it whole into a uint4) lets the
// compiler store it lane by lane: half and bfloat16 packs became four
// 4-byte stores for each 16-byte vector, and the group-norm tile kernels had
// no 16-byte store at all.
template <typename T, int V>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, V>& pack) {
    constexpr int kBytes = static_cast<int>(sizeof(Pack<T, V>));
    if constexpr (kBytes < 4) {
        *reinterpret_cast<Pack<T, V>*>(p) = pack;
    } else {
        unsigned int word[kBytes / 4];
#pragma unroll
        for (int i = 0; i < kBytes / 4; ++i) memcpy(&word[i], reinterpret_cast<const char*>(&pack) + 4 * i, 4);
        // nvcc splits even a uint4 store back into lanes inside the larger
        // kernels; its __stwb keeps the vector but makes the store strong
        // (STG.E.128.STRONG.SM): the plain weak vector store, written out,
        // evict-first in the L2 (.cs).  No kernel reads its own output back,
        // and the lines of x and dy that a second pass reads again outlast
        // it (H200, bench/RESULTS.md, fiftieth session: with load_pack_last,
        // 1.01x-1.02x on the group-norm backward's large rows; batch norm at par).
#if defined(__NVCC__) && defined(__CUDA_ARCH__)  // nvcc compiling device code (not the emulator)
        if constexpr (kBytes == 16)
            asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(word[0]), "r"(word[1]), "r"(word[2]),
                         "r"(word[3])
                         : "memory");
        else if constexpr (kBytes == 8)
            asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(word[0]), "r"(word[1]) : "memory");
        else
            asm volatile("st.global.cs.u32 [%0], %1;" ::"l"(p), "r"(word[0]) : "memory");
#else
        if constexpr (kBytes == 16)
            *reinterpret_cast<uint4*>(p) = make_uint4(word[0], word[1], word[2], word[3]);
        else if constexpr (kBytes == 8)
            *reinterpret_cast<uint2*>(p) = make_uint2(word[0], word[1]);
        else
            *reinterpret_cast<unsigned int*>(p) = word[0];
#endif
    }
}

// The elements of a pack, converted to A; kPass > 0 in the form of that
// pass (widen_in_pass), for packs held in registers between passes.
template <typename A, int V, int kPass = 0, typename T>
__device__ __forceinline__ void widen_pack(const Pack<T, V>& pack, A (&out)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = static_cast<A>(widen_in_pass<kPass>(pack.lane[j]));
}

// Reads V consecutive elements at p (aligned for V), converted to A.
template <typename A, int V, typename T>
__device__ __forceinline__ void load_values(const T* p, A (&out)[V]) {
    widen_pack<A, V>(load_pack<V>(p), out);
}

// ---- blending -----------------------------------------------------------------

// out = alpha * result + beta * prior; the prior is read only when beta != 0
// (it may hold NaN otherwise).
template <typename T, typename A>
__device__ __forceinline__ void store_blended(T* out, std::int64_t offset, A result, float alpha, float beta) {
    A value = static_cast<A>(alpha) * result;
    if (beta != 0.0f) value += static_cast<A>(beta) * static_cast<A>(widen(out[offset]));
    out[offset] = narrow<T>(value);
}

// The same for V consecutive elements at p (aligned for V).
template <typename T, int V, typename A>
__device__ __forceinline__ void store_values(T* p, const A (&result)[V], float alpha, float beta) {
    if constexpr (V == 1) {
        store_blended(p, 0, result[0], alpha, beta);
    } else {
        Pack<T, V> pack;
        if (beta != 0.0f) pack = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            A value = static_cast<A>(alpha) * result[j];
            if (beta != 0.0f) value += static_cast<A>(beta) * static_cast<A>(widen(pack.lane[j]));
            pack.lane[j] = narrow<T>(value);
        }
        store_pack(p, pack);
    }
}

}  // namespace gpu
}  // namespace mbn
