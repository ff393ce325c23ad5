// Batch norm's per-feature parameter slots in the layout's tensors
// (feature_layout.hpp).
#pragma once

#include "gpu/feature_layout.hpp"

namespace mbn {
namespace gpu {

// Forward parameter slots.
enum ForwardParam : int {
    kFwdScale = kSlotParam0,
    kFwdBias,
    kFwdMean,  // running mean written (training) or estimated mean (inference)
    kFwdVar,   // running variance written (training) or estimated variance (inference)
    kFwdSavedMean,
    kFwdSavedInvStd,
    kFwdPrevMean,  // training: the running mean read (V3: another buffer than the one written)
    kFwdPrevVar,
};
// Backward parameter slots.
enum BackwardParam : int {
    kBwdScale = kSlotParam0,
    kBwdDscale,
    kBwdDbias,
    kBwdSavedMean,
    kBwdSavedInvStd,
    kBwdBias,  // with a fused activation (its input z needs the bias)
};

}  // namespace gpu
}  // namespace mbn
