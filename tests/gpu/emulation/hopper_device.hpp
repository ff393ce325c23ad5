// The H100 and H200 as the on-chip planners see them (DeviceShape): 132
// multiprocessors, 32-lane waves, clusters of up to 8 blocks, and the
// clusters of each size that run at once as the H100 reported them (the
// backward's two-block form fits twice as many).  No L2 size: a check that
// plans the streamed forward sets its own.
#pragma once

#include "gpu/feature_plan.hpp"

inline mbn::gpu::DeviceShape hopper_device() {
    mbn::gpu::DeviceShape d;
    d.multiprocessors = 132;
    d.wave_size = 32;
    d.cluster_blocks = 8;
    const int resident[] = {0, 0, 66, 39, 30, 22, 17, 15, 15};
    for (int k = 0; k <= mbn::gpu::kPortableClusterBlocks; ++k) {
        d.cluster_slots[k] = resident[k];
        d.backward_cluster_slots[0][k] = resident[k];
        d.backward_cluster_slots[1][k] = 2 * resident[k];
    }
    return d;
}
