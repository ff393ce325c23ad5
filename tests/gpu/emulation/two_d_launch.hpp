// Two-dimensional launches on the emulator, which numbers a launch's
// threads and blocks along x only: threadIdx, blockIdx, blockDim and gridDim
// as a kernel of blockDim (x, y) and gridDim (x, y) reads them, from the
// shapes a check sets in g_block and g_grid before each launch.  Include
// after emulator.hpp and before the kernels.
#pragma once

#include "emulator.hpp"

namespace {
emu::Index g_block{1, 1, 1}, g_grid{1, 1, 1};
inline emu::Index thread_2d() {
    return emu::Index{emu::thread_index.x % g_block.x, emu::thread_index.x / g_block.x, 0};
}
inline emu::Index block_2d() { return emu::Index{emu::block_index.x % g_grid.x, emu::block_index.x / g_grid.x, 0}; }
}  // namespace
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#define threadIdx (thread_2d())
#define blockIdx (block_2d())
#define blockDim (g_block)
#define gridDim (g_grid)
