// Host-side 16-bit float types and their conversions to and from float.
// Float -> 16-bit rounds to nearest, ties to even; infinities stay infinite
// and NaNs stay NaN (quieted, sign kept), so a poisoned value never turns
// into a number on the way through.
#pragma once

#include <cstdint>
#include <cstring>

namespace mbn::cpu {

// IEEE 754 binary16, stored as its bit pattern.
struct Half {
    std::uint16_t bits;
};

// bfloat16: the upper half of a binary32.
struct BFloat16 {
    std::uint16_t bits;
};

inline std::uint32_t float_bits(float value) {
    std::uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
}

inline float float_from_bits(std::uint32_t bits) {
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

inline float to_float(Half h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
    const std::uint32_t exponent = (h.bits >> 10) & 0x1Fu;
    const std::uint32_t mantissa = h.bits & 0x3FFu;
    if (exponent == 0x1Fu) return float_from_bits(sign | 0x7F800000u | (mantissa << 13));
    if (exponent == 0) {
        // Subnormal (or zero): mantissa units of 2^-24, exact in float.
        const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
        return float_from_bits(sign | float_bits(magnitude));
    }
    return float_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline Half to_half(float value) {
    const std::uint32_t bits = float_bits(value);
    const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
    const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude > 0x7F800000u)  // NaN: keep the top payload bits, force quiet
        return Half{static_cast<std::uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu))};
    if (magnitude >= 0x477FF000u)  // >= 65520 (half's max plus half an ulp) and inf
        return Half{static_cast<std::uint16_t>(sign | 0x7C00u)};
    if (magnitude < 0x38800000u) {
        // Below half's smallest normal: count units of 2^-24.  Scaling by a
        // power of two is exact; adding and removing 2^23 rounds to an
        // integer with the FPU's ties-to-even.  1024 encodes the smallest normal.
        const float units = float_from_bits(magnitude) * 16777216.0f;
        const float rounded = (units + 8388608.0f) - 8388608.0f;
        return Half{static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(rounded))};
    }
    // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits
    // to nearest even; a carry out of the mantissa bumps the exponent, as it should.
    const std::uint32_t odd = (magnitude >> 13) & 1u;
    const std::uint32_t rebased = magnitude - 0x38000000u + 0xFFFu + odd;
    return Half{static_cast<std::uint16_t>(sign | (rebased >> 13))};
}

inline float to_float(BFloat16 b) { return float_from_bits(static_cast<std::uint32_t>(b.bits) << 16); }

inline BFloat16 to_bfloat16(float value) {
    const std::uint32_t bits = float_bits(value);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u)  // NaN: truncate, force quiet
        return BFloat16{static_cast<std::uint16_t>((bits >> 16) | 0x0040u)};
    const std::uint32_t odd = (bits >> 16) & 1u;
    return BFloat16{static_cast<std::uint16_t>((bits + 0x7FFFu + odd) >> 16)};
}

}  // namespace mbn::cpu
