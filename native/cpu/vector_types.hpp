// The vector types and helpers the CPU kernels are written with (GCC/Clang
// vector extensions), for kernel sources only: every vector is 32 bytes (one
// AVX register), so double math runs on four lanes and float math on eight;
// wider types would be split by the compiler through the stack.
#pragma once

#include <cstdint>
#include <cstring>

// Vector types pass by value only to functions inlined into one kernel, so
// the ABI note about passing wide vectors never applies (GCC and Clang).
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define MBN_INLINE inline __attribute__((always_inline))
// The same for a lambda, written after its parameter list.  A kernel's
// lambdas left out of line are compiled for the baseline instruction set,
// not their target_clones clone's: without fused multiply-adds there, so
// values computed in and out of them round apart (seen in the sanitizer
// build, where inlining gives up sooner).
#define MBN_INLINE_LAMBDA __attribute__((always_inline))

namespace mbn::cpu {

typedef double D4 __attribute__((vector_size(32)));
typedef float F4 __attribute__((vector_size(16)));
typedef float F8 __attribute__((vector_size(32)));

template <typename C>
struct Lanes;
template <>
struct Lanes<float> {
    using Vec = F8;
};
template <>
struct Lanes<double> {
    using Vec = D4;
};
template <typename C>
using Vec = typename Lanes<C>::Vec;
template <typename C>
constexpr std::int64_t kLanes = sizeof(Vec<C>) / sizeof(C);

template <typename V>
MBN_INLINE V load(const void* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <typename V>
MBN_INLINE void store(void* p, const V& v) {
    std::memcpy(p, &v, sizeof v);
}
template <typename V, typename S>
MBN_INLINE V splat(S s) {
    V v = {};
    return v + static_cast<decltype(v[0] + 0)>(s);
}

}  // namespace mbn::cpu
