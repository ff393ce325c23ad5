#include "driver_command.hpp"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace mbn {
namespace {

// The subcommand: the operation, then x's type, then "fp32" when the
// parameters are float32 under a narrower or wider x (bnormfp16fp32,
// groupnormfp64fp32), so every accepted type pair has its own name.
std::string subcommand(const char* op, DType x, DType param) {
    std::string name = op;
    switch (x) {
        case DType::f16: name += "fp16"; break;
        case DType::bf16: name += "bfp16"; break;
        case DType::f64: name += "fp64"; break;
        case DType::f32: break;
    }
    if (param != x && param == DType::f32) name += "fp32";
    return name;
}

const char* dtype_flag_value(DType t) {
    switch (t) {
        case DType::f16: return "fp16";
        case DType::bf16: return "bfp16";
        case DType::f32: return "fp32";
        case DType::f64: return "fp64";
    }
    return "fp32";
}

// The shortest decimal text that reads back as the same float, so the
// command reproduces alpha, beta and the swish beta exactly.
std::string exact(float value) {
    char text[32];
    for (int digits = 6; digits <= 9; ++digits) {
        std::snprintf(text, sizeof text, "%.*g", digits, static_cast<double>(value));
        if (std::strtof(text, nullptr) == value) break;
    }
    return text;
}

// The same for a double (activation parameters).
std::string exact(double value) {
    char text[40];
    for (int digits = 15; digits <= 17; ++digits) {
        std::snprintf(text, sizeof text, "%.*g", digits, value);
        if (std::strtod(text, nullptr) == value) break;
    }
    return text;
}

// -n -c [-D] -H -W, in the driver's flags.
void write_lengths(std::ostream& cmd, const Lengths& len, int rank) {
    cmd << " -n " << len[kN] << " -c " << len[kC];
    if (rank == 5) cmd << " -D " << len[kD];
    cmd << " -H " << len[kH] << " -W " << len[kW];
}

void write_layout(std::ostream& cmd, MemoryOrder order, int rank) {
    const bool channels_last = order == MemoryOrder::packed_nhwc;
    const char* layout = rank == 5 ? (channels_last ? "NDHWC" : "NCDHW") : (channels_last ? "NHWC" : "NCHW");
    cmd << " --layout " << layout;
    if (rank < 4) cmd << " --rank " << rank;
}

}  // namespace

std::string bn_driver_command(const BnCommandInfo& info) {
    const BnGeometry& g = *info.geom;
    std::ostringstream cmd;
    cmd << "miopen-bn-driver " << subcommand("bnorm", info.x_dtype, info.param_dtype);
    write_lengths(cmd, g.len, info.rank);
    cmd << " -m " << static_cast<int>(g.mode);
    switch (info.direction) {
        case BnDirection::training: cmd << " --forw 1 -b 0"; break;
        case BnDirection::inference: cmd << " --forw 2 -b 0"; break;
        case BnDirection::backward: cmd << " --forw 0 -b 1"; break;
    }
    cmd << " -s " << (info.saved ? 1 : 0) << " -r " << (info.running ? 1 : 0);
    if (info.blend.alpha != 1.0f) cmd << " -A " << exact(info.blend.alpha);
    if (info.blend.beta != 0.0f) cmd << " -B " << exact(info.blend.beta);
    if (info.direction == BnDirection::backward) {
        if (info.param_blend.alpha != 1.0f) cmd << " --alpha-param " << exact(info.param_blend.alpha);
        if (info.param_blend.beta != 0.0f) cmd << " --beta-param " << exact(info.param_blend.beta);
        if (info.grad_dtype != info.x_dtype) cmd << " --grad-type " << dtype_flag_value(info.grad_dtype);
    }
    const BnCommandExtras& extras = info.extras;
    if (!extras.activation.identity())
        cmd << " -f " << static_cast<int>(extras.activation.mode) << " -x " << exact(extras.activation.alpha)
            << " -y " << exact(extras.activation.beta) << " --activ_gamma " << exact(extras.activation.gamma);
    if (extras.inverse_variance) cmd << " -I 1";
    if (extras.ping_pong) cmd << " -Q 1";
    write_layout(cmd, info.x_order, info.rank);
    return cmd.str();
}

std::string gn_driver_command(const GnCommandInfo& info) {
    std::ostringstream cmd;
    cmd << "miopen-bn-driver " << subcommand("groupnorm", info.x_dtype, info.param_dtype);
    write_lengths(cmd, info.shape->len, info.rank);
    cmd << " -g " << info.shape->groups << " -m " << info.mode << (info.backward ? " -F 0 -b 1" : " -F 1 -b 0");
    if (info.activation == Activation::swish)
        cmd << " --activation swish --activation-beta " << exact(info.swish_beta);
    write_layout(cmd, info.x_order, info.rank);
    return cmd.str();
}

}  // namespace mbn
