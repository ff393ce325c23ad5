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

// Runs `body` once per thread of a launch of gridDim `grid`, blockDim
// `block`, for kernels with no static shared memory of their own.
alignas(16) unsigned char g_unused_shared[16];
template <typename Body>
void run_launch(emu::Index grid, emu::Index block, Body&& body) {
    g_block = block;
    g_grid = grid;
    emu::register_static_shared(g_unused_shared, sizeof g_unused_shared);
    emu::run_grid(grid.x * grid.y, block.x * block.y, 1, sizeof g_unused_shared, body);
}
}  // namespace
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#define threadIdx (thread_2d())
#define blockIdx (block_2d())
#define blockDim (g_block)
#define gridDim (g_grid)
