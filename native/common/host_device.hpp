// MBN_HOST_DEVICE marks functions that host code and GPU kernels both call:
// headers holding them are compiled by hipcc / nvcc and by g++ alone.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MBN_HOST_DEVICE __host__ __device__
#else
#define MBN_HOST_DEVICE
#endif
