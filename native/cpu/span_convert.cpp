#include "cpu/span_convert.hpp"
#include "cpu/vector_clones.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MBN_HAVE_F16C_PATH 1
#endif

namespace mbn::cpu {
namespace {

#ifdef MBN_HAVE_F16C_PATH
bool has_f16c() {
    static const bool yes = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
    return yes;
}

__attribute__((target("avx,f16c"))) std::int64_t half_to_float_f16c(const Half* in, float* out, std::int64_t n) {
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
    return i;
}

__attribute__((target("avx,f16c"))) std::int64_t float_to_half_f16c(const float* in, Half* out, std::int64_t n) {
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    }
    return i;
}
#endif

}  // namespace

void convert_span(const Half* in, float* out, std::int64_t n) {
    std::int64_t i = 0;
#ifdef MBN_HAVE_F16C_PATH
    if (has_f16c()) i = half_to_float_f16c(in, out, n);
#endif
    for (; i < n; ++i) out[i] = to_float(in[i]);
}

void convert_span(const float* in, Half* out, std::int64_t n) {
    std::int64_t i = 0;
#ifdef MBN_HAVE_F16C_PATH
    if (has_f16c()) i = float_to_half_f16c(in, out, n);
#endif
    for (; i < n; ++i) out[i] = to_half(in[i]);
}

MBN_VECTOR_CLONES void convert_span(const BFloat16* in, float* out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

MBN_VECTOR_CLONES void convert_span(const float* in, BFloat16* out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = to_bfloat16(in[i]);
}

MBN_VECTOR_CLONES void convert_span(const float* in, double* out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(in[i]);
}

MBN_VECTOR_CLONES void convert_span(const double* in, float* out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

}  // namespace mbn::cpu
