// native/gpu/gn_tile_backward.hip built for the emulator (emulator.hpp): its
// kernel's dynamic shared array defined here, in the kernel's namespace.
#include "gpu/hip_compat.h"
#include "gpu/gn_tile.hpp"

namespace mbn {
namespace gpu {
namespace {
alignas(16) double gn_tile_backward_shared[(kGnTileMaxSharedBytes + 1024) / sizeof(double)];
}  // namespace
}  // namespace gpu
}  // namespace mbn

#define EMU_SHARED_ARRAY gn_tile_backward_shared
#include "gpu/gn_tile_backward.hip"
