#include "driver_command.hpp"

#include <sstream>

namespace mbn {
namespace {

const char* subcommand(DType x, DType param) {
    switch (x) {
        case DType::f32: return "bnorm";
        case DType::f64: return "bnormfp64";
        case DType::f16: return param == DType::f16 ? "bnormfp16" : "bnormfp16fp32";
        case DType::bf16: return param == DType::bf16 ? "bnormbfp16" : "bnormbfp16fp32";
    }
    return "bnorm";
}

const char* gn_subcommand(DType x) {
    switch (x) {
        case DType::f16: return "groupnormfp16";
        case DType::bf16: return "groupnormbfp16";
        case DType::f64: return "groupnormfp64";
        case DType::f32: break;
    }
    return "groupnorm";
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
    cmd << "miopen-bn-driver " << subcommand(info.x_dtype, info.param_dtype);
    write_lengths(cmd, g.len, info.rank);
    cmd << " -m " << static_cast<int>(g.mode);
    switch (info.direction) {
        case BnDirection::training: cmd << " --forw 1 -b 0"; break;
        case BnDirection::inference: cmd << " --forw 2 -b 0"; break;
        case BnDirection::backward: cmd << " --forw 0 -b 1"; break;
    }
    cmd << " -s " << (info.saved ? 1 : 0) << " -r " << (info.running ? 1 : 0);
    if (info.blend.alpha != 1.0f) cmd << " -A " << info.blend.alpha;
    if (info.blend.beta != 0.0f) cmd << " -B " << info.blend.beta;
    write_layout(cmd, info.x_order, info.rank);
    return cmd.str();
}

std::string gn_driver_command(const GnCommandInfo& info) {
    std::ostringstream cmd;
    cmd << "miopen-bn-driver " << gn_subcommand(info.x_dtype);
    write_lengths(cmd, info.shape->len, info.rank);
    cmd << " -g " << info.shape->groups << " -m " << info.mode << (info.backward ? " -F 0 -b 1" : " -F 1 -b 0");
    if (info.activation == Activation::swish) cmd << " --activation swish --activation-beta " << info.swish_beta;
    write_layout(cmd, info.x_order, info.rank);
    return cmd.str();
}

}  // namespace mbn
