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

}  // namespace

std::string bn_driver_command(const BnCommandInfo& info) {
    const BnGeometry& g = *info.geom;
    const bool channels_last = info.x_order == MemoryOrder::packed_nhwc;
    std::ostringstream cmd;
    cmd << "miopen-bn-driver " << subcommand(info.x_dtype, info.param_dtype) << " -n " << g.len[kN]
        << " -c " << g.len[kC];
    if (info.rank == 5) cmd << " -D " << g.len[kD];
    cmd << " -H " << g.len[kH] << " -W " << g.len[kW] << " -m " << static_cast<int>(g.mode);
    switch (info.direction) {
        case BnDirection::training: cmd << " --forw 1 -b 0"; break;
        case BnDirection::inference: cmd << " --forw 2 -b 0"; break;
        case BnDirection::backward: cmd << " --forw 0 -b 1"; break;
    }
    cmd << " -s " << (info.saved ? 1 : 0) << " -r " << (info.running ? 1 : 0);
    if (info.blend.alpha != 1.0f) cmd << " -A " << info.blend.alpha;
    if (info.blend.beta != 0.0f) cmd << " -B " << info.blend.beta;
    const char* layout = info.rank == 5 ? (channels_last ? "NDHWC" : "NCDHW") : (channels_last ? "NHWC" : "NCHW");
    cmd << " --layout " << layout;
    if (info.rank < 4) cmd << " --rank " << info.rank;
    return cmd.str();
}

}  // namespace mbn
