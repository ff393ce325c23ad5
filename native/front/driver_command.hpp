// The driver command line that reproduces a batch-norm or group-norm call, for
// MIOPEN_ENABLE_LOGGING_CMD (our miopen-bn-driver accepts MIOpenDriver's flags
// plus the extensions this file writes: --rank, --grad-type, --alpha-param,
// --beta-param, --activ_gamma, --activation, --activation-beta and the fp64
// subcommands).
#pragma once

#include "common/group_norm_problem.hpp"
#include "common/problem.hpp"

#include <string>

namespace mbn {

enum class BnDirection { training, inference, backward };

// Issue 25's variants: -f/-x/-y/--activ_gamma, -I, -Q.
struct BnCommandExtras {
    ActivationSpec activation;     // fused activation (identity: none)
    bool inverse_variance = false;  // inference from the inverse std
    bool ping_pong = false;         // V3: running statistics read from other buffers than written
};

struct BnCommandInfo {
    BnDirection direction;
    const BnGeometry* geom;
    int rank;
    DType x_dtype;
    DType param_dtype;
    DType grad_dtype;  // dy/dx (backward only; x's type otherwise)
    MemoryOrder x_order;
    bool saved;    // -s: saved statistics written (forward) or read (backward)
    bool running;  // -r: running statistics updated (training) or estimates read (inference)
    Blend blend;        // y (forward) or dx (backward)
    Blend param_blend;  // dscale/dbias (backward only)
    BnCommandExtras extras;
};

std::string bn_driver_command(const BnCommandInfo& info);

struct GnCommandInfo {
    bool backward;
    const GnShape* shape;
    int rank;
    DType x_dtype;
    DType param_dtype;  // weight/bias; x's type when there are none
    int mode;           // miopenNormMode_t
    MemoryOrder x_order;
    Activation activation;
    float swish_beta;
};

std::string gn_driver_command(const GnCommandInfo& info);

}  // namespace mbn
