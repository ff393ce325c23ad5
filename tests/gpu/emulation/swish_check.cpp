// The forward swish's reciprocal on the FMA pipe (native/gpu/gn_activation.h)
// on the host: fma_reciprocal's relative error over every float32 mantissa
// (its seed's error repeats with each power of two) and at the clamp, and
// fast_swish_lane's two kinds of lane against float64's swish.  The host's
// exponential stands in for the device's ex2.approx; the reciprocal and its
// clamp are the device's own code.
#include "check_support.hpp"
#include "gpu/gn_activation.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace {

using emu_check::Tally;

// Two Newton steps serve 16-bit results, three float32 (two ulps).
constexpr double kReciprocalError[2] = {7e-6, 0x1p-22};

template <int kSteps>
double worst_reciprocal_error(Tally& tally) {
    double worst = 0.0;
    for (std::uint32_t m = 0; m < (1u << 23); ++m) {
        const float v = __uint_as_float(0x3F800000u | m);
        const double error = std::fabs(static_cast<double>(mbn::gpu::fma_reciprocal<kSteps>(v)) * v - 1.0);
        worst = error > worst ? error : worst;
    }
    ++tally.checks;
    if (!(worst <= kReciprocalError[kSteps - 2]))
        tally.fail(std::to_string(kSteps) + " steps: relative error " + std::to_string(worst));
    // Past the clamp (an overflowed exponential): finite, at most 2^-99.
    for (const float v : {0x1p100f, 0x1p120f, std::numeric_limits<float>::infinity()}) {
        const float r = mbn::gpu::fma_reciprocal<kSteps>(v);
        ++tally.checks;
        if (!(r >= 0.0f && r <= 0x1p-99f)) tally.fail("1/" + std::to_string(v) + " = " + std::to_string(r));
    }
    return worst;
}

// Swish's lanes against float64: within 2e-5 relative (float32's rounding
// of z times the exponential and reciprocal's errors), or |z| 2^-99 where
// the exponential overflows float32; the tanh form (16-bit results) within
// |z| 2^-12 besides (the device's tanh is within 2^-11 of |tanh|; here the
// host's stands in, so this checks the identity, not the device's unit:
// tests/gpu/test_gpu_groupnorm.py's test_swish_over_its_range does).
template <typename T>
void check_lanes(Tally& tally, const char* type) {
    for (const double beta : {1.0, 0.5, 1.702}) {
        const float constant = mbn::gpu::swish_lane_constant<T>(static_cast<float>(beta));
        const double slack = mbn::gpu::kTanhSwish<T> ? 0x1p-12 : 0x1p-99;
        for (int i = -4000; i <= 4000; ++i) {
            const float z = static_cast<float>(i) * 0.025f;
            const double exact = z / (1.0 + std::exp(-beta * z));
            for (int lane = 0; lane < 2; ++lane) {
                const double got = mbn::gpu::fast_swish_lane<T>(z, constant, lane);
                ++tally.checks;
                if (!(std::fabs(got - exact) <= 2e-5 * std::fabs(exact) + std::fabs(z) * slack))
                    tally.fail(std::string(type) + " lane " + std::to_string(lane) + " beta " + std::to_string(beta) +
                               " z " + std::to_string(z) + ": " + std::to_string(got) + " against " +
                               std::to_string(exact));
            }
        }
    }
}

}  // namespace

int main() {
    Tally tally;
    const double two = worst_reciprocal_error<2>(tally);
    const double three = worst_reciprocal_error<3>(tally);
    std::printf("fma_reciprocal: worst relative error %.3g (two steps), %.3g (three)\n", two, three);
    check_lanes<__half>(tally, "half");
    check_lanes<float>(tally, "float");
    return tally.finish();
}
