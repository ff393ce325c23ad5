// Division by a number fixed for a launch, as a multiply and a shift: a
// kernel's setup that divides by a shape (a plane's vectors, a cluster's
// blocks, ...) would otherwise spend ~25 instructions on each hardware
// integer division before its first load goes out.  Plain data, shared by
// the host planners (g++) and the kernels (hipcc / nvcc).
#pragma once

#include "common/host_device.hpp"

#include <cstdint>

namespace mbn {
namespace gpu {

// For 0 <= n < 2^31 and d >= 1, with l = ceil(log2 d) and
// m = ceil(2^(31 + l) / d) (below 2^32), n / d = (m n) >> (31 + l)
// (Granlund and Montgomery, 1994, theorem 4.2 with N = 31).
struct Divisor {
    std::uint32_t multiplier;
    int shift;  // 31 + l

    MBN_HOST_DEVICE int divide(int n) const {
        return static_cast<int>((static_cast<std::uint64_t>(multiplier) * static_cast<std::uint32_t>(n)) >> shift);
    }
};

inline Divisor make_divisor(int d) {
    int l = 0;
    while ((std::int64_t(1) << l) < d) ++l;
    const std::uint64_t power = std::uint64_t(1) << (31 + l);
    const std::uint64_t m = (power + static_cast<std::uint64_t>(d) - 1) / static_cast<std::uint64_t>(d);
    return Divisor{static_cast<std::uint32_t>(m), 31 + l};
}

// The shift that multiplies or divides by a power of two.
inline int log2_of(int power_of_two) {
    int l = 0;
    while ((1 << l) < power_of_two) ++l;
    return l;
}

}  // namespace gpu
}  // namespace mbn
