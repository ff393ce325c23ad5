// The GPU sources are written in HIP.  On AMD this header includes the real
// HIP headers; compiled by nvcc it maps the few HIP names the backend uses
// onto CUDA's, because Debian's HIP-on-NVIDIA headers do not build with
// CUDA 13.  Host-only files (the C test program) may include it too: they then
// get the runtime API alone.
//
// Also defined here, for both vendors:
//   MBN_GPU_CUDA           1 when compiled for NVIDIA, else 0
//   MBN_WAVE_SIZE          the wavefront/warp width, a compile-time constant
//   mbn_bfloat16           the 2-byte bfloat16 storage type
//   MBN_UNROLLED_EXIT      the way out of a fully unrolled loop
#pragma once

#if defined(__CUDACC__) || (defined(MBN_HOST_USES_CUDA) && !defined(__HIP_PLATFORM_AMD__))

#define MBN_GPU_CUDA 1

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
using mbn_bfloat16 = __nv_bfloat16;
#else
#include <cuda_runtime_api.h>
#endif

// Runtime types and constants.
#define hipStream_t cudaStream_t
#define hipEvent_t cudaEvent_t
#define hipError_t cudaError_t
#define hipSuccess cudaSuccess
#define hipPointerAttribute_t cudaPointerAttributes
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipDeviceAttributeWarpSize cudaDevAttrWarpSize
#define hipDeviceAttributeL2CacheSize cudaDevAttrL2CacheSize

// Runtime functions.
#define hipGetLastError cudaGetLastError
#define hipGetErrorString cudaGetErrorString
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDevice cudaGetDevice
#define hipSetDevice cudaSetDevice
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
#define hipEventCreate cudaEventCreate
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipStreamCreate cudaStreamCreate
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipPointerGetAttributes cudaPointerGetAttributes
#define hipOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxActiveBlocksPerMultiprocessor
// Graph capture (the check program captures calls to prove they are capturable).
#define hipGraph_t cudaGraph_t
#define hipGraphExec_t cudaGraphExec_t
#define hipStreamCaptureModeGlobal cudaStreamCaptureModeGlobal
#define hipStreamBeginCapture cudaStreamBeginCapture
#define hipStreamEndCapture cudaStreamEndCapture
#define hipGraphInstantiateWithFlags cudaGraphInstantiateWithFlags
#define hipGraphLaunch cudaGraphLaunch
#define hipGraphExecDestroy cudaGraphExecDestroy
#define hipGraphDestroy cudaGraphDestroy

#else  // AMD (or a host compiler given the HIP headers)

#define MBN_GPU_CUDA 0
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>
using mbn_bfloat16 = hip_bfloat16;
#else
#include <hip/hip_runtime_api.h>
#endif

#endif

// The wavefront width: 32 on NVIDIA and RDNA (gfx10+), 64 on CDNA (gfx9).
// clang defines __AMDGCN_WAVEFRONT_SIZE in AMD device passes; host passes
// never use the value (the host reads the device's warpSize instead).
#if MBN_GPU_CUDA
#define MBN_WAVE_SIZE 32
#elif defined(__AMDGCN_WAVEFRONT_SIZE)
#define MBN_WAVE_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define MBN_WAVE_SIZE 64
#endif

// Leaves a loop marked `#pragma unroll` at the first index past a runtime
// bound (`if (a >= slots) MBN_UNROLLED_EXIT;`: the test holds for every
// later index too).  nvcc makes `break` one branch out of the unrolled
// loop; hipcc unrolls no loop with an exit (its "loop not unrolled"
// warnings, the loop's arrays then in scratch memory), so there each later
// index is skipped instead.
#if MBN_GPU_CUDA
#define MBN_UNROLLED_EXIT break
#else
#define MBN_UNROLLED_EXIT continue
#endif
