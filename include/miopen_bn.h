/*
 * miopen_bn.h -- MIOpen's batch-normalization C API, reimplemented.
 *
 * Same function names, prototypes, enum values and semantics as MIOpen's
 * <miopen/miopen.h> for handles, streams, tensor descriptors and every
 * miopenBatchNormalization* entry point, so code written for MIOpen compiles
 * against this header and links with -lmiopen_bn unchanged.  Functions whose
 * names start with miopenBN are extensions of ours.
 *
 * Conventions that hold for every entry point:
 *   - Every function returns a miopenStatus_t (except miopenGetErrorString and
 *     miopenBNGetLastErrorMessage).  No C++ exception crosses this boundary and
 *     no call aborts or exits on bad input.
 *   - A failing call writes none of its outputs.  Its reason is kept, per
 *     thread, in miopenBNGetLastErrorMessage() and logged at Error level.
 *   - A handle or descriptor argument that is not live (destroyed already,
 *     or never made by this library) gives BadParm, as does destroying one
 *     twice: the library looks it up before touching it.  Only a destroyed
 *     address that a later create happened to reuse cannot be told apart.
 *   - Tensor data pointers belong to the handle's backend: host memory for a
 *     CPU handle, device memory for a GPU handle.
 *   - Lengths are given in logical order N, C, (D), H, W whatever the memory
 *     layout; strides (in elements) say where each element lives.
 *
 * The cffi bindings derive their declarations from this file.  Preprocessor
 * rule they rely on: in every #if / #elif / #else chain below, the #else
 * branch is the plain-C one (no HIP, no CUDA, no C++).
 */
#ifndef MIOPEN_BN_H_
#define MIOPEN_BN_H_

#include <stddef.h>
#include <stdint.h>

#ifndef __cplusplus
#include <stdbool.h>
#endif

#if defined(_WIN32)
#define MIOPEN_BN_EXPORT __declspec(dllexport)
#elif defined(__GNUC__)
#define MIOPEN_BN_EXPORT __attribute__((visibility("default")))
#else
#define MIOPEN_BN_EXPORT
#endif

/* The version of this library (miopenBNGetLibraryVersion).  The cffi loader
 * refuses a library whose version differs from the Python package's. */
#define MIOPEN_BN_VERSION_MAJOR 0
#define MIOPEN_BN_VERSION_MINOR 1
#define MIOPEN_BN_VERSION_PATCH 0

/* The MIOpen API version this library implements (miopenGetVersion, and the
 * version the optional MIOpen-compatible CMake package reports). */
#define MIOPEN_BN_MIOPEN_API_VERSION_MAJOR 3
#define MIOPEN_BN_MIOPEN_API_VERSION_MINOR 4
#define MIOPEN_BN_MIOPEN_API_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Opaque objects                                                            */
/* ------------------------------------------------------------------------ */

/* A library context: the backend it runs on (CPU or GPU) and, on the GPU,
 * the stream its work is queued on and its scratch memory. */
typedef struct miopenHandle* miopenHandle_t;

/* Data type, lengths and strides of one tensor. */
typedef struct miopenTensorDescriptor* miopenTensorDescriptor_t;

/* An activation mode with its alpha, beta and gamma. */
typedef struct miopenActivationDescriptor* miopenActivationDescriptor_t;

/* Fusion plans (batch norm and activation ops only): the plan, one of its
 * ops, and the arguments an execution takes. */
typedef struct miopenFusionPlanDescriptor* miopenFusionPlanDescriptor_t;
typedef struct miopenFusionOpDescriptor* miopenFusionOpDescriptor_t;
typedef struct miopenOperatorArgs* miopenOperatorArgs_t;

/* The stream work is queued on: hipStream_t when HIP's runtime header is
 * included first, cudaStream_t when CUDA's is, otherwise an opaque pointer of
 * the same size (ABI-identical to both). */
#if defined(HIP_INCLUDE_HIP_HIP_RUNTIME_API_H)
typedef hipStream_t miopenAcceleratorQueue_t;
#elif defined(CUDART_VERSION)
typedef cudaStream_t miopenAcceleratorQueue_t;
#else
typedef struct ihipStream_t* miopenAcceleratorQueue_t;
#endif

/* ------------------------------------------------------------------------ */
/* Enumerations (values identical to MIOpen's)                               */
/* ------------------------------------------------------------------------ */

/* C lets an enum argument hold any int; C++ gives an unscoped enum without a
 * fixed base only the values its enumerators span, and anything else is
 * undefined.  A fixed int base in C++ makes every value a caller can pass a
 * valid one, so the library can check it; size and calling convention stay
 * those of C's int-sized enums. */
#ifdef __cplusplus
#define MIOPEN_BN_ENUM_BASE : int
#else
#define MIOPEN_BN_ENUM_BASE
#endif

typedef enum MIOPEN_BN_ENUM_BASE {
    miopenStatusSuccess              = 0,
    miopenStatusNotInitialized       = 1,
    miopenStatusInvalidValue         = 2,
    miopenStatusBadParm              = 3,
    miopenStatusAllocFailed          = 4,
    miopenStatusInternalError        = 5,
    miopenStatusNotImplemented       = 6,
    miopenStatusUnknownError         = 7,
    miopenStatusUnsupportedOp        = 8,
    miopenStatusGpuOperationsSkipped = 9,
    miopenStatusVersionMismatch      = 10
} miopenStatus_t;

typedef enum MIOPEN_BN_ENUM_BASE {
    miopenHalf     = 0,
    miopenFloat    = 1,
    miopenInt32    = 2,
    miopenInt8     = 3,
    /* 4 is unused, as in MIOpen */
    miopenBFloat16 = 5,
    miopenDouble   = 6,
    miopenFloat8   = 7,
    miopenBFloat8  = 8,
    miopenInt64    = 9
} miopenDataType_t;

typedef enum MIOPEN_BN_ENUM_BASE {
    miopenTensorNCHW   = 0,
    miopenTensorNHWC   = 1,
    miopenTensorCHWN   = 2,
    miopenTensorNCHWc4 = 3,
    miopenTensorNCHWc8 = 4,
    miopenTensorCHWNc4 = 5,
    miopenTensorCHWNc8 = 6,
    miopenTensorNCDHW  = 7,
    miopenTensorNDHWC  = 8
} miopenTensorLayout_t;

typedef enum MIOPEN_BN_ENUM_BASE {
    miopenBNPerActivation = 0, /* statistics per (c, d, h, w), reduced over N */
    miopenBNSpatial       = 1  /* statistics per channel, reduced over N, D, H, W */
} miopenBatchNormMode_t;

typedef enum MIOPEN_BN_ENUM_BASE {
    MIOPEN_ELEMENTWISE_AFFINE           = 0,
    MIOPEN_WEIGHT_BIAS                  = 1,
    MIOPEN_ELEMENTWISE_AFFINE_FUSED_ADD = 2,
    MIOPEN_WEIGHT_BIAS_FUSED_ADD        = 3,
    MIOPEN_ELEMENTWISE_AFFINE_T5        = 4,
    MIOPEN_WEIGHT_BIAS_T5               = 5
} miopenNormMode_t;

/* Activations fused into batch norm (y = f(z), z the normalized value). */
typedef enum MIOPEN_BN_ENUM_BASE {
    miopenActivationPASTHRU     = 0,  /* z */
    miopenActivationLOGISTIC    = 1,  /* 1 / (1 + exp(-z)) */
    miopenActivationTANH        = 2,  /* beta * tanh(alpha * z) */
    miopenActivationRELU        = 3,  /* max(0, z) */
    miopenActivationSOFTRELU    = 4,  /* log(1 + exp(z)) */
    miopenActivationABS         = 5,  /* |z| */
    miopenActivationPOWER       = 6,  /* (alpha + beta * z)^gamma, 0 where alpha + beta * z <= 0 */
    miopenActivationCLIPPEDRELU = 7,  /* min(alpha, max(0, z)) */
    miopenActivationLEAKYRELU   = 8,  /* z > 0 ? z : alpha * z */
    miopenActivationELU         = 9,  /* z > 0 ? z : alpha * (exp(z) - 1) */
    miopenActivationCLAMP       = 10  /* max(alpha, min(beta, z)) */
} miopenActivationMode_t;

/* MIOpen's tuning policies (MIOPEN_FIND_ENFORCE's values). */
typedef enum MIOPEN_BN_ENUM_BASE {
    miopenTuningPolicyNone           = 1,
    miopenTuningPolicyDbUpdate       = 2,
    miopenTuningPolicySearch         = 3,
    miopenTuningPolicySearchDbUpdate = 4,
    miopenTuningPolicyDbClean        = 5
} miopenTuningPolicy_t;

typedef enum MIOPEN_BN_ENUM_BASE {
    miopenVerticalFusion   = 0,
    miopenHorizontalFusion = 1
} miopenFusionDirection_t;

/* Extension: an activation fused into group norm's output. */
typedef enum MIOPEN_BN_ENUM_BASE {
    miopenBNActivationNone  = 0,
    miopenBNActivationSwish = 1  /* y / (1 + exp(-beta * y)); beta = 1 is SiLU */
} miopenBNActivation_t;

/* Extension: which backend a handle runs on. */
typedef enum MIOPEN_BN_ENUM_BASE {
    miopenBNBackendAuto = 0, /* GPU when built with one and a device is present, else CPU */
    miopenBNBackendCPU  = 1,
    miopenBNBackendGPU  = 2
} miopenBNBackend_t;

/* ------------------------------------------------------------------------ */
/* Errors and version                                                        */
/* ------------------------------------------------------------------------ */

/* The enumerator's name, e.g. "miopenStatusBadParm"; "Unknown error status"
 * for a value outside the enumeration.  The string is static. */
MIOPEN_BN_EXPORT const char* miopenGetErrorString(miopenStatus_t error);

/* Extension: why the last failing call on this thread failed ("" when the
 * last call succeeded).  Valid until the next call on the same thread. */
MIOPEN_BN_EXPORT const char* miopenBNGetLastErrorMessage(void);

/* The MIOpen API version this library implements
 * (MIOPEN_BN_MIOPEN_API_VERSION_*).  NULL outputs are skipped.  Returns Success. */
MIOPEN_BN_EXPORT miopenStatus_t miopenGetVersion(size_t* major, size_t* minor, size_t* patch);

/* Extension: this library's own version (MIOPEN_BN_VERSION_*).  NULL
 * outputs are skipped.  Returns Success. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBNGetLibraryVersion(size_t* major, size_t* minor,
                                                          size_t* patch);

/* Extension: 1 when the library was built with a GPU backend (HIP or CUDA),
 * else 0. */
MIOPEN_BN_EXPORT int miopenBNHasGpuSupport(void);

/* ------------------------------------------------------------------------ */
/* Handles and streams                                                       */
/* ------------------------------------------------------------------------ */

/* Handles may be shared by threads (calls through one handle are serialized)
 * and destroyed while another thread's call on them is in flight:
 * miopenDestroy waits for it; a call made after the destroy is BadParm.  A
 * CPU handle works in a process forked after its creation; a GPU handle there
 * is BadParm (a GPU runtime does not survive fork), and so is a new GPU handle
 * in a child of a process that had started the GPU runtime.
 *
 * Creates a handle on the default backend: the GPU when the library was built
 * with one and a device is present, else the CPU.  The environment variable
 * MIOPEN_BN_BACKEND=cpu|gpu overrides the choice.
 * Returns: Success; BadParm (handle NULL, or MIOPEN_BN_BACKEND=gpu with no
 * usable GPU); AllocFailed. */
MIOPEN_BN_EXPORT miopenStatus_t miopenCreate(miopenHandle_t* handle);

/* As miopenCreate, with work queued on `stream` (a hipStream_t /
 * cudaStream_t; NULL is the default stream).  A CPU handle keeps the value
 * and ignores it.  Returns as miopenCreate. */
MIOPEN_BN_EXPORT miopenStatus_t miopenCreateWithStream(miopenHandle_t* handle,
                                                       miopenAcceleratorQueue_t stream);

/* Extension: creates a handle on the given backend; miopenBNBackendAuto
 * behaves as miopenCreate.  Returns: Success; BadParm (handle NULL, unknown
 * backend value, or GPU asked for and none usable); AllocFailed. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBNCreateWithBackend(miopenHandle_t* handle,
                                                          miopenBNBackend_t backend);

/* Extension: the backend a handle runs on (CPU or GPU, never Auto).
 * Returns: Success; BadParm (handle or backend NULL). */
MIOPEN_BN_EXPORT miopenStatus_t miopenBNGetBackend(miopenHandle_t handle,
                                                   miopenBNBackend_t* backend);

/* Destroys a handle; NULL is accepted.  Returns: Success; BadParm (not a
 * live handle: destroyed already, or not made by miopenCreate*). */
MIOPEN_BN_EXPORT miopenStatus_t miopenDestroy(miopenHandle_t handle);

/* Sets / reads the stream of a handle.  Returns: Success; BadParm (handle or
 * streamID output NULL). */
MIOPEN_BN_EXPORT miopenStatus_t miopenSetStream(miopenHandle_t handle,
                                                miopenAcceleratorQueue_t streamID);
MIOPEN_BN_EXPORT miopenStatus_t miopenGetStream(miopenHandle_t handle,
                                                miopenAcceleratorQueue_t* streamID);

/* Tuning policy of a handle.  Kernels here have no tuning database or
 * search: the policy is accepted, kept per handle (default
 * miopenTuningPolicyNone) and read back, and changes nothing else.
 * Returns: Success; BadParm (NULL handle or value, a policy outside
 * miopenTuningPolicyNone .. miopenTuningPolicyDbClean). */
MIOPEN_BN_EXPORT miopenStatus_t miopenSetTuningPolicy(miopenHandle_t handle, miopenTuningPolicy_t newValue);
MIOPEN_BN_EXPORT miopenStatus_t miopenGetTuningPolicy(miopenHandle_t handle, miopenTuningPolicy_t* value);

/* With profiling on, each call records its execution time, read back by
 * miopenGetKernelTime in milliseconds (device time on the GPU, wall time of
 * the computation on the CPU).  Returns: Success; BadParm (NULL argument). */
MIOPEN_BN_EXPORT miopenStatus_t miopenEnableProfiling(miopenHandle_t handle, bool enable);
MIOPEN_BN_EXPORT miopenStatus_t miopenGetKernelTime(miopenHandle_t handle, float* time);

/* ------------------------------------------------------------------------ */
/* Tensor descriptors                                                        */
/* ------------------------------------------------------------------------ */
/* Rules shared by every setter: lengths and strides must be > 0 (BadParm);
 * a NULL lengths array or a count <= 0 gives InvalidValue; an unknown data
 * type, a rank above 5, an element count or an element space whose byte
 * size overflows 64 bits gives BadParm; a count above 5 is refused without
 * reading the arrays past their 5th entry.  A failing setter leaves the
 * descriptor as it was. */

/* Returns: Success; BadParm (tensorDesc NULL); AllocFailed. */
MIOPEN_BN_EXPORT miopenStatus_t miopenCreateTensorDescriptor(miopenTensorDescriptor_t* tensorDesc);

/* Packed NCHW tensor of lengths (n, c, h, w). */
MIOPEN_BN_EXPORT miopenStatus_t miopenSet4dTensorDescriptor(miopenTensorDescriptor_t tensorDesc,
                                                            miopenDataType_t dataType,
                                                            int n, int c, int h, int w);

/* NCHW lengths with explicit strides (elements). */
MIOPEN_BN_EXPORT miopenStatus_t miopenSet4dTensorDescriptorEx(miopenTensorDescriptor_t tensorDesc,
                                                              miopenDataType_t dataType,
                                                              int n, int c, int h, int w,
                                                              int nStride, int cStride,
                                                              int hStride, int wStride);

/* Reads a rank-4 descriptor; NULL outputs are not allowed here, as in
 * MIOpen.  Returns: Success; BadParm (NULL argument, rank != 4, or a length
 * or stride beyond INT_MAX, which an int cannot return). */
MIOPEN_BN_EXPORT miopenStatus_t miopenGet4dTensorDescriptor(miopenTensorDescriptor_t tensorDesc,
                                                            miopenDataType_t* dataType,
                                                            int* n, int* c, int* h, int* w,
                                                            int* nStride, int* cStride,
                                                            int* hStride, int* wStride);

/* nbDims lengths and strides in logical order; stridesA NULL means packed
 * (row-major in the order given). */
MIOPEN_BN_EXPORT miopenStatus_t miopenSetTensorDescriptor(miopenTensorDescriptor_t tensorDesc,
                                                          miopenDataType_t dataType, int nbDims,
                                                          const int* dimsA, const int* stridesA);

/* As miopenSetTensorDescriptor with size_t lengths and strides; a value
 * above INT64_MAX gives BadParm. */
MIOPEN_BN_EXPORT miopenStatus_t miopenSetTensorDescriptorV2(miopenTensorDescriptor_t tensorDesc,
                                                            miopenDataType_t dataType, int nbDims,
                                                            const size_t* dimsA, const size_t* stridesA);

/* lens in logical N, C, (D), H, W order; the layout picks packed strides:
 * NCHW/NCDHW row-major, NHWC {H*W*C, 1, W*C, C}, NDHWC likewise.  A 4-D layout
 * with 5 lengths (or the reverse) gives BadParm; layouts other than NCHW,
 * NHWC, NCDHW, NDHWC give NotImplemented. */
MIOPEN_BN_EXPORT miopenStatus_t miopenSetNdTensorDescriptorWithLayout(
    miopenTensorDescriptor_t tensorDesc, miopenDataType_t dataType,
    miopenTensorLayout_t tensorLayout, const int* lens, int num_lens);

/* Reads type, lengths and strides; NULL outputs are skipped; dimsA and
 * stridesA must hold the descriptor's rank.  Returns: Success; BadParm (NULL
 * or unset descriptor; stridesA given and a stride beyond INT_MAX; dimsA
 * given and a length beyond INT_MAX, possible with
 * miopenSetTensorDescriptorV2). */
MIOPEN_BN_EXPORT miopenStatus_t miopenGetTensorDescriptor(miopenTensorDescriptor_t tensorDesc,
                                                          miopenDataType_t* dataType,
                                                          int* dimsA, int* stridesA);

/* The descriptor's rank (MIOpen's meaning of "size").  Returns: Success;
 * BadParm (NULL argument). */
MIOPEN_BN_EXPORT miopenStatus_t miopenGetTensorDescriptorSize(miopenTensorDescriptor_t tensorDesc,
                                                              int* size);

/* Bytes spanned by the tensor: (1 + sum((len_i - 1) * stride_i)) * element
 * size.  Returns: Success; BadParm (NULL argument). */
MIOPEN_BN_EXPORT miopenStatus_t miopenGetTensorNumBytes(miopenTensorDescriptor_t tensorDesc,
                                                        size_t* numBytes);

/* NULL is accepted.  Returns: Success; BadParm (not a live descriptor:
 * destroyed already, or not made by miopenCreateTensorDescriptor). */
MIOPEN_BN_EXPORT miopenStatus_t miopenDestroyTensorDescriptor(miopenTensorDescriptor_t tensorDesc);

/* ------------------------------------------------------------------------ */
/* Batch normalization                                                       */
/* ------------------------------------------------------------------------ */
/* Shapes.  x, y, dx, dy: rank 2 to 5, lengths (N,C), (N,C,W), (N,C,H,W) or
 * (N,C,D,H,W), any positive strides (NCHW, NHWC, NCDHW, NDHWC or strided
 * views; each tensor may have its own layout), lengths equal across them.
 * Parameter tensors (scale, bias, means, variances and their gradients) have
 * x's rank and lengths (1,C,1,..) in spatial mode, (1,C,D,H,W) per
 * activation; any positive strides.  An output (y, dx, saved and running
 * statistics, gradients) whose strides let two of its elements share memory
 * is BadParm (checked conservatively: sorted by stride, each dimension must
 * step past the extent of those inside it, as every packed, padded or
 * permuted layout does).
 *
 * Types.  x and y share a type: miopenFloat, miopenHalf, miopenBFloat16 or
 * miopenDouble.  Each parameter tensor has its descriptor's type,
 * miopenFloat or x's own, independently (scale and bias in x's type with
 * float means and variances, as MIOpen's NHWC kernels take, or any other
 * mix); a gradient has its parameter's descriptor.  dx and dy share a type
 * that is x's or miopenFloat.  Statistics accumulate in float32 or wider with
 * a numerically stable method (float64 for miopenDouble).  Other combinations
 * give NotImplemented.
 *
 * alpha, beta: host pointers to float (for every data type, as MIOpen).
 * Results blend as y = alpha * result + beta * y_prior; with beta == 0 the
 * prior content of y is never read.
 *
 * M, the reduction count, is N*D*H*W in spatial mode and N per activation.
 * Training with M <= 1, negative or NaN epsilon, an unknown mode, a NULL
 * handle, descriptor, alpha or beta give BadParm.  In-place (y == x,
 * dx == dy or dx == x) is supported at the same address with the same strides
 * and type; any other overlap of an output's bytes (first to last) with
 * another tensor's is BadParm, naming both.
 */

/* Fills derivedBnDesc with the parameter tensor shape for x and bn_mode:
 * (1,C,1,1[,1]) spatial, (1,C,H,W) / (1,C,D,H,W) per activation, packed,
 * type miopenFloat (as MIOpen).
 * Returns: Success; BadParm (NULL descriptor, x rank < 4, unknown mode). */
MIOPEN_BN_EXPORT miopenStatus_t miopenDeriveBNTensorDescriptor(miopenTensorDescriptor_t derivedBnDesc,
                                                               const miopenTensorDescriptor_t xDesc,
                                                               miopenBatchNormMode_t bn_mode);

/* Training forward: computes the batch mean and biased variance over M
 * elements, writes y = scale * (x - mean) / sqrt(var + epsilon) + bias, and
 * optionally
 *   - running statistics (resultRunningMean / resultRunningVariance, both or
 *     neither): run = (1 - expAvgFactor) * run + expAvgFactor * stat, the
 *     variance unbiased by M / (M - 1);
 *   - saved statistics (resultSaveMean / resultSaveInvVariance, both or
 *     neither): the mean and 1 / sqrt(var + epsilon) (an inverse standard
 *     deviation), for miopenBatchNormalizationBackward.
 * x: input, xDesc's type and layout.  y: output, same lengths and type.
 * bnScaleBiasMeanVarDesc: describes every parameter and statistics tensor.
 * Returns: Success; BadParm (see above; exactly one of a statistics pair
 * NULL, a NULL x, y, bnScale or bnBias, mismatched lengths or rank, a
 * non-finite expAvgFactor); NotImplemented (type combination); InternalError
 * (a GPU launch failed). */
MIOPEN_BN_EXPORT miopenStatus_t miopenBatchNormalizationForwardTraining(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc,
    void* y, const miopenTensorDescriptor_t bnScaleBiasMeanVarDesc, void* bnScale, void* bnBias,
    double expAvgFactor, void* resultRunningMean, void* resultRunningVariance, double epsilon,
    void* resultSaveMean, void* resultSaveInvVariance);

/* As miopenBatchNormalizationForwardTraining with one descriptor per
 * parameter: scaleDesc (bnScale), biasVarDesc (bnBias), savedMeanDesc (the
 * running and saved means), savedVarDesc (the running variance and saved
 * inverse std).  savedMeanDesc / savedVarDesc may be NULL when the buffers
 * they describe are all NULL. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBatchNormalizationForwardTraining_V2(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc,
    void* y, const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasVarDesc,
    const miopenTensorDescriptor_t savedMeanDesc, const miopenTensorDescriptor_t savedVarDesc,
    void* bnScale, void* bnBias, double expAvgFactor, void* resultRunningMean,
    void* resultRunningVariance, double epsilon, void* resultSaveMean,
    void* resultSaveInvVariance);

/* Inference forward: y = scale * (x - estimatedMean) / sqrt(estimatedVariance
 * + epsilon) + bias.  A negative variance + epsilon gives NaN (MIOpen takes
 * its absolute value).  With estimatedMean and estimatedVariance both NULL, y
 * is normalized with the batch's own statistics and nothing else is written
 * (MIOpen's documented fallback).
 * Returns: Success; BadParm (see above; exactly one estimate NULL);
 * NotImplemented; InternalError. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBatchNormalizationForwardInference(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc,
    void* y, const miopenTensorDescriptor_t bnScaleBiasMeanVarDesc, void* bnScale, void* bnBias,
    void* estimatedMean, void* estimatedVariance, double epsilon);

/* As miopenBatchNormalizationForwardInference with one descriptor per
 * parameter; estMeanDesc / estVarianceDesc may be NULL when both estimates
 * are NULL. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBatchNormalizationForwardInference_V2(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc,
    void* y, const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasDesc,
    const miopenTensorDescriptor_t estMeanDesc, const miopenTensorDescriptor_t estVarianceDesc,
    void* bnScale, void* bnBias, void* estimatedMean, void* estimatedVariance, double epsilon);

/* Backward: with xhat = (x - mean) * invstd,
 *   dbias = sum(dy), dscale = sum(dy * xhat),
 *   dx = scale * invstd / M * (M * dy - dbias - xhat * dscale),
 * blended as dx = alphaDataDiff * dx + betaDataDiff * dx_prior and
 * dscale/dbias = alphaParamDiff * result + betaParamDiff * prior.
 * mean / invstd come from savedMean / savedInvVariance when both are given
 * (epsilon unused), else they are recomputed from x with epsilon.
 * dy, dx: same lengths as x, a shared type (x's or float).
 * Returns: Success; BadParm (see above; NULL x, dy, dx, bnScale,
 * resultBnScaleDiff or resultBnBiasDiff; exactly one saved statistic NULL);
 * NotImplemented; InternalError. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBatchNormalizationBackward(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, const void* alphaDataDiff,
    const void* betaDataDiff, const void* alphaParamDiff, const void* betaParamDiff,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t dyDesc,
    const void* dy, const miopenTensorDescriptor_t dxDesc, void* dx,
    const miopenTensorDescriptor_t bnScaleBiasDiffDesc, const void* bnScale,
    void* resultBnScaleDiff, void* resultBnBiasDiff, double epsilon, const void* savedMean,
    const void* savedInvVariance);

/* As miopenBatchNormalizationBackward with one descriptor per parameter:
 * scaleDesc (bnScale and resultBnScaleDiff), biasDesc (resultBnBiasDiff),
 * savedMeanDesc, savedVarDesc (may be NULL when both saved statistics are
 * NULL). */
MIOPEN_BN_EXPORT miopenStatus_t miopenBatchNormalizationBackward_V2(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, const void* alphaDataDiff,
    const void* betaDataDiff, const void* alphaParamDiff, const void* betaParamDiff,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t dyDesc,
    const void* dy, const miopenTensorDescriptor_t dxDesc, void* dx,
    const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasDesc,
    const miopenTensorDescriptor_t savedMeanDesc, const miopenTensorDescriptor_t savedVarDesc,
    const void* bnScale, void* resultBnScaleDiff, void* resultBnBiasDiff, double epsilon,
    const void* savedMean, const void* savedInvVariance);

/* As miopenBatchNormalizationForwardTraining_V2 with the running statistics
 * read from prevResultRunningMean / prevResultRunningVariance and written to
 * nextResultRunningMean / nextResultRunningVariance (the same buffers, or
 * others: the previous ones are then left as they were).  The four are all
 * given or all NULL; the previous ones are described by savedMeanDesc /
 * savedVarDesc like the next ones.
 * Returns: as miopenBatchNormalizationForwardTraining; BadParm when some but
 * not all four running buffers are NULL. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBatchNormalizationForwardTraining_V3(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc,
    void* y, const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasVarDesc,
    const miopenTensorDescriptor_t savedMeanDesc, const miopenTensorDescriptor_t savedVarDesc,
    void* bnScale, void* bnBias, double expAvgFactor, const void* prevResultRunningMean,
    const void* prevResultRunningVariance, void* nextResultRunningMean,
    void* nextResultRunningVariance, double epsilon, void* resultSaveMean,
    void* resultSaveInvVariance);

/* Inference with the inverse standard deviation: y = scale * (x -
 * estimatedMean) * estimatedInvVariance + bias, where estimatedInvVariance
 * holds 1 / sqrt(variance + epsilon) (what training saves as
 * resultSaveInvVariance).  With both estimates NULL, y is normalized with the
 * batch's own statistics and epsilon 1e-5 (MIOpen's fallback).
 * Returns: as miopenBatchNormalizationForwardInference_V2. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBatchNormalizationForwardInferenceInvVariance(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc,
    void* y, const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasDesc,
    const miopenTensorDescriptor_t estMeanDesc, const miopenTensorDescriptor_t estInvVarianceDesc,
    void* bnScale, void* bnBias, void* estimatedMean, void* estimatedInvVariance);

/* ------------------------------------------------------------------------ */
/* Activation descriptors and batch norm with a fused activation             */
/* ------------------------------------------------------------------------ */
/* An activation descriptor holds a miopenActivationMode_t and its alpha,
 * beta and gamma (see the enumeration for each formula); a new one is
 * miopenActivationPASTHRU with all three 0.  The fused entry points compute
 * z = scale * (x - mean) * invstd + bias as their plain counterparts do and
 * write y = alpha * f(z) in float32 (float64 for miopenDouble x), in the same
 * pass over memory.  Backward takes dy as the gradient of f(z) and
 * back-propagates dy * f'(z) (z recomputed from x, the statistics, bnScale
 * and bnBias) through batch norm; its derivatives are the exact ones of the
 * formulas (ABS: 1 for z > 0, else -1; RELU, CLIPPEDRELU, CLAMP: 0 at the
 * kinks).  NaN z gives NaN.  A NULL activation descriptor is BadParm; an
 * output blend with beta != 0 is NotImplemented beside a non-PASTHRU mode
 * (it is supported without one). */

/* Returns: Success; BadParm (activDesc NULL); AllocFailed. */
MIOPEN_BN_EXPORT miopenStatus_t miopenCreateActivationDescriptor(miopenActivationDescriptor_t* activDesc);

/* Returns: Success; BadParm (not a live activation descriptor, mode outside
 * the enumeration, a non-finite alpha, beta or gamma). */
MIOPEN_BN_EXPORT miopenStatus_t miopenSetActivationDescriptor(const miopenActivationDescriptor_t activDesc,
                                                              miopenActivationMode_t mode,
                                                              double activAlpha, double activBeta,
                                                              double activGamma);

/* NULL outputs are skipped.  Returns: Success; BadParm (not a live
 * activation descriptor). */
MIOPEN_BN_EXPORT miopenStatus_t miopenGetActivationDescriptor(const miopenActivationDescriptor_t activDesc,
                                                              miopenActivationMode_t* mode,
                                                              double* activAlpha, double* activBeta,
                                                              double* activGamma);

/* NULL is accepted.  Returns: Success; BadParm (not a live activation
 * descriptor). */
MIOPEN_BN_EXPORT miopenStatus_t miopenDestroyActivationDescriptor(miopenActivationDescriptor_t activDesc);

/* miopenBatchNormalizationForwardTraining_V2 with y = alpha * f(z).
 * Returns: as miopenBatchNormalizationForwardTraining_V2; BadParm (activDesc
 * NULL or not live); NotImplemented (see above). */
MIOPEN_BN_EXPORT miopenStatus_t miopenBatchNormForwardTrainingActivation(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc,
    void* y, const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasVarDesc,
    const miopenTensorDescriptor_t savedMeanDesc, const miopenTensorDescriptor_t savedVarDesc,
    void* bnScale, void* bnBias, double expAvgFactor, void* resultRunningMean,
    void* resultRunningVariance, double epsilon, void* resultSaveMean,
    void* resultSaveInvVariance, const miopenActivationDescriptor_t activDesc);

/* miopenBatchNormalizationForwardTraining_V3 with y = alpha * f(z).
 * Returns: as miopenBatchNormForwardTrainingActivation. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBatchNormForwardTrainingActivation_V2(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc,
    void* y, const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasVarDesc,
    const miopenTensorDescriptor_t savedMeanDesc, const miopenTensorDescriptor_t savedVarDesc,
    void* bnScale, void* bnBias, double expAvgFactor, const void* prevResultRunningMean,
    const void* prevResultRunningVariance, void* nextResultRunningMean,
    void* nextResultRunningVariance, double epsilon, void* resultSaveMean,
    void* resultSaveInvVariance, const miopenActivationDescriptor_t activDesc);

/* miopenBatchNormalizationForwardInference_V2 with y = alpha * f(z).
 * Returns: as miopenBatchNormForwardTrainingActivation. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBatchNormForwardInferenceActivation(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc,
    void* y, const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasDesc,
    const miopenTensorDescriptor_t estMeanDesc, const miopenTensorDescriptor_t estVarianceDesc,
    void* bnScale, void* bnBias, void* estimatedMean, void* estimatedVariance, double epsilon,
    const miopenActivationDescriptor_t activDesc);

/* miopenBatchNormalizationForwardInferenceInvVariance with y = alpha * f(z).
 * Returns: as miopenBatchNormForwardTrainingActivation. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBatchNormForwardInferenceActivationInvVariance(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc,
    void* y, const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasDesc,
    const miopenTensorDescriptor_t estMeanDesc, const miopenTensorDescriptor_t estInvVarianceDesc,
    void* bnScale, void* bnBias, void* estimatedMean, void* estimatedInvVariance,
    const miopenActivationDescriptor_t activDesc);

/* miopenBatchNormalizationBackward_V2 through the activation: dy is the
 * gradient of f(z), and g = dy * f'(z) replaces dy in the batch-norm
 * backward.  bnBias (biasDesc's type and shape) is needed for z; it is not
 * read with miopenActivationPASTHRU and may then be NULL.
 * Returns: as miopenBatchNormalizationBackward_V2; BadParm (activDesc NULL
 * or not live, bnBias NULL beside another mode). */
MIOPEN_BN_EXPORT miopenStatus_t miopenBatchNormBackwardActivation(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, const void* alphaDataDiff,
    const void* betaDataDiff, const void* alphaParamDiff, const void* betaParamDiff,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t dyDesc,
    const void* dy, const miopenTensorDescriptor_t dxDesc, void* dx,
    const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasDesc,
    const miopenTensorDescriptor_t savedMeanDesc, const miopenTensorDescriptor_t savedVarianceDesc,
    const void* bnScale, const void* bnBias, void* resultBnScaleDiff, void* resultBnBiasDiff,
    double epsilon, const void* savedMean, const void* savedInvVariance,
    const miopenActivationDescriptor_t activDesc);

/* ------------------------------------------------------------------------ */
/* Fusion plans of batch norm and activation ops                             */
/* ------------------------------------------------------------------------ */
/* A plan is made for an input descriptor, given ops in order, compiled once
 * and executed with operator arguments.  Plans that compile (Vertical
 * direction only):
 *   [BatchNormInference] or [BatchNormInference, ActivationForward]:
 *       input x, output y; the op's bnScaleBiasMeanVarDesc describes scale,
 *       bias, estimated mean and variance;
 *   [BatchNormForward] or [BatchNormForward, ActivationForward] (training):
 *       input x, output y; parameters and statistics are described by
 *       miopenDeriveBNTensorDescriptor's descriptor for the input (float32);
 *       saved mean / inverse std are written, and the running statistics
 *       when the op was created with runningMeanVariance true;
 *   [BatchNormBackward] or [BatchNormBackward, ActivationBackward]:
 *       input dy, output dx; x, scale, bias and the saved statistics come
 *       from the op's arguments, parameters as for training.
 * Each executes as the matching batch-norm entry point (the activation ones
 * with a fused activation), with that entry point's checks and statuses.
 * Any other plan (a bias or convolution op, an order or count other than
 * above, horizontal fusion) compiles to UnsupportedOp, MIOpen's signal to
 * fall back to separate calls.  An op's alpha/beta (host floats) blend
 * the batch-norm result as in the entry points; the activation op's alpha
 * and beta pointers are not read, its activAlpha/Beta/Gamma are the
 * activation's parameters; the activation backward's y and reserved
 * pointers are not read (z is recomputed from x).  Ops belong to their plan
 * and are freed with it. */

/* Returns: Success; BadParm (NULL output or inputDesc, not a live or unset
 * descriptor, unknown direction); AllocFailed. */
MIOPEN_BN_EXPORT miopenStatus_t miopenCreateFusionPlan(miopenFusionPlanDescriptor_t* fusePlanDesc,
                                                       const miopenFusionDirection_t fuseDirection,
                                                       const miopenTensorDescriptor_t inputDesc);

/* NULL is accepted.  Returns: Success; BadParm (not a live plan). */
MIOPEN_BN_EXPORT miopenStatus_t miopenDestroyFusionPlan(miopenFusionPlanDescriptor_t fusePlanDesc);

/* Returns: Success; BadParm (NULL or not live handle or plan);
 * UnsupportedOp (a plan other than those above; the message says why). */
MIOPEN_BN_EXPORT miopenStatus_t miopenCompileFusionPlan(miopenHandle_t handle,
                                                        miopenFusionPlanDescriptor_t fusePlanDesc);

/* Op constructors: each appends an op to the plan (which must then be
 * compiled again).  Returns: Success; BadParm (plan not live, NULL output,
 * unknown mode, bnScaleBiasMeanVarDesc NULL or not live); AllocFailed. */
MIOPEN_BN_EXPORT miopenStatus_t miopenCreateOpActivationForward(miopenFusionPlanDescriptor_t fusePlanDesc,
                                                                miopenFusionOpDescriptor_t* activFwdOp,
                                                                miopenActivationMode_t mode);
MIOPEN_BN_EXPORT miopenStatus_t miopenCreateOpActivationBackward(miopenFusionPlanDescriptor_t fusePlanDesc,
                                                                 miopenFusionOpDescriptor_t* activBwdOp,
                                                                 miopenActivationMode_t mode);
/* A bias op is accepted so that such plans can be built; they compile to
 * UnsupportedOp. */
MIOPEN_BN_EXPORT miopenStatus_t miopenCreateOpBiasForward(miopenFusionPlanDescriptor_t fusePlanDesc,
                                                          miopenFusionOpDescriptor_t* biasOp,
                                                          const miopenTensorDescriptor_t bDesc);
MIOPEN_BN_EXPORT miopenStatus_t miopenCreateOpBatchNormInference(
    miopenFusionPlanDescriptor_t fusePlanDesc, miopenFusionOpDescriptor_t* bnOp,
    const miopenBatchNormMode_t bn_mode, const miopenTensorDescriptor_t bnScaleBiasMeanVarDesc);
MIOPEN_BN_EXPORT miopenStatus_t miopenCreateOpBatchNormForward(miopenFusionPlanDescriptor_t fusePlanDesc,
                                                               miopenFusionOpDescriptor_t* bnFwdOp,
                                                               const miopenBatchNormMode_t bn_mode,
                                                               bool runningMeanVariance);
MIOPEN_BN_EXPORT miopenStatus_t miopenCreateOpBatchNormBackward(miopenFusionPlanDescriptor_t fusePlanDesc,
                                                                miopenFusionOpDescriptor_t* bnBwdOp,
                                                                const miopenBatchNormMode_t bn_mode);

/* Returns: Success; BadParm (NULL output); AllocFailed. */
MIOPEN_BN_EXPORT miopenStatus_t miopenCreateOperatorArgs(miopenOperatorArgs_t* args);
/* NULL is accepted.  Returns: Success; BadParm (not live). */
MIOPEN_BN_EXPORT miopenStatus_t miopenDestroyOperatorArgs(miopenOperatorArgs_t args);

/* Argument setters: record an op's arguments in `args` (replacing earlier
 * ones for the same op).  alpha and beta are read now; buffers are used at
 * execution.  Returns: Success; BadParm (args or op not live, an op of
 * another kind, NULL alpha or beta, non-finite activation parameters). */
MIOPEN_BN_EXPORT miopenStatus_t miopenSetOpArgsActivForward(miopenOperatorArgs_t args,
                                                            const miopenFusionOpDescriptor_t activFwdOp,
                                                            const void* alpha, const void* beta,
                                                            double activAlpha, double activBeta,
                                                            double activGamma);
MIOPEN_BN_EXPORT miopenStatus_t miopenSetOpArgsActivBackward(miopenOperatorArgs_t args,
                                                             const miopenFusionOpDescriptor_t activBwdOp,
                                                             const void* alpha, const void* beta,
                                                             const void* y, const void* reserved,
                                                             double activAlpha, double activBeta,
                                                             double activGamma);
MIOPEN_BN_EXPORT miopenStatus_t miopenSetOpArgsBatchNormInference(
    miopenOperatorArgs_t args, const miopenFusionOpDescriptor_t bnOp, const void* alpha, const void* beta,
    const void* bnScale, const void* bnBias, const void* estimatedMean, const void* estimatedVariance,
    double epsilon);
MIOPEN_BN_EXPORT miopenStatus_t miopenSetOpArgsBatchNormForward(
    miopenOperatorArgs_t args, const miopenFusionOpDescriptor_t bnOp, const void* alpha, const void* beta,
    const void* bnScale, const void* bnBias, void* savedMean, void* savedInvVariance, void* runningMean,
    void* runningVariance, double expAvgFactor, double epsilon);
MIOPEN_BN_EXPORT miopenStatus_t miopenSetOpArgsBatchNormBackward(
    miopenOperatorArgs_t args, const miopenFusionOpDescriptor_t bnOp, const void* alpha, const void* beta,
    const void* x, const void* bnScale, const void* bnBias, void* resultBnScaleDiff, void* resultBnBiasDiff,
    const void* savedMean, const void* savedInvVariance);

/* Runs a compiled plan: input/output are x/y for forward plans, dy/dx for
 * backward ones.  Returns: Success; BadParm (handle, plan or args not live,
 * plan not compiled, an op without arguments in args); whatever the
 * matching batch-norm entry point returns for these buffers. */
MIOPEN_BN_EXPORT miopenStatus_t miopenExecuteFusionPlan(const miopenHandle_t handle,
                                                        const miopenFusionPlanDescriptor_t fusePlanDesc,
                                                        const miopenTensorDescriptor_t inputDesc,
                                                        const void* input,
                                                        const miopenTensorDescriptor_t outputDesc,
                                                        void* output, miopenOperatorArgs_t args);

/* ------------------------------------------------------------------------ */
/* Data-parallel batch norm: the split-phase extensions                     */
/* ------------------------------------------------------------------------ */
/* A batch split over K ranks (processes, GPUs) is normalized with the whole
 * batch's statistics by five calls, with the caller's own collectives (all-
 * gather, all-reduce) in between; this library never communicates:
 *
 *   forward:  miopenBNBatchNormLocalStatistics   this rank's count, mean, M2
 *             (all-gather the K partials)
 *             miopenBNBatchNormMergeStatistics   mean and inverse std of the
 *                                                whole batch, running update
 *             miopenBNBatchNormForwardNormalize  y from them
 *   backward: miopenBNBatchNormBackwardReduce    this rank's sum(dy) and
 *                                                sum(dy * (x - mean))
 *             (all-reduce the two sums)
 *             miopenBNBatchNormBackwardElementwise  dx from the global sums
 *
 * On one rank (K = 1) the five give what miopenBatchNormalizationForward-
 * Training and miopenBatchNormalizationBackward give.  Shapes, layouts, x/y
 * and dy/dx types, the parameter type rule, alpha/beta blending, in-place
 * use, and the statuses for bad arguments are those of the batch-norm entry
 * points above.
 *
 * Statistics tensors (count, mean, M2, the gradient sums) are parameter-
 * shaped ((1,C,1,..) spatially, (1,C,D,H,W) per activation; any positive
 * strides) and of type miopenFloat or miopenDouble whatever x's type (other
 * types: NotImplemented); the tensors one descriptor describes share its
 * strides, so a caller can lay them out as rows of one buffer and exchange
 * them in one collective.  Counts are held as numbers of that type (exact up
 * to 2^24 values per feature in float, 2^53 in double).  Partial statistics
 * are Chan-mergeable: count n, mean m and M2 = sum((x - m)^2) per feature.
 * The library computes them, and every merge, in double. */

/* Partial statistics of this rank's x: per feature, count = M (the values it
 * reduces over, N*D*H*W spatially, N per activation; M = 1 is allowed), the
 * mean and M2 (M times the biased variance).
 * statsDesc: describes count, mean and m2.
 * Returns: Success; BadParm (NULL handle, descriptor, x, count, mean or m2,
 * unknown mode, shapes that do not fit x, outputs with overlapping strides);
 * NotImplemented (types); InternalError. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBNBatchNormLocalStatistics(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, const miopenTensorDescriptor_t xDesc, const void* x,
    const miopenTensorDescriptor_t statsDesc, void* count, void* mean, void* m2);

/* Merges K ranks' partial statistics (counts may differ between ranks; a
 * rank with count 0 adds nothing) into the whole batch's, per feature:
 *   n = sum n_k,  mean = sum(n_k * m_k) / n,
 *   M2 = sum M2_k + sum n_k * (m_k - mean)^2,  var = M2 / n,
 *   savedMean = mean,  savedInvStd = 1 / sqrt(var + epsilon),
 * and, when runningMean and runningVariance are given (both or neither),
 *   run = (1 - expAvgFactor) * run + expAvgFactor * stat
 * with the variance unbiased over the global count, M2 / (n - 1) (var when
 * n = 1).  A total count of 0 gives NaN; counts are data and not checked.
 * partialDesc: rank 2 to 5, lengths (K, C, ...): the partials of rank k are
 *   index k of the first dimension (K >= 1), the rest are one rank's
 *   statistics lengths; describes partialCount, partialMean and partialM2;
 *   miopenFloat or miopenDouble.
 * savedDesc: lengths (1, C, ...) (partialDesc's with K replaced by 1),
 *   describes savedMean and savedInvStd.  runningDesc: the same lengths,
 *   describes runningMean and runningVariance; NULL when they are.  Each of
 *   the two is miopenFloat, miopenHalf, miopenBFloat16 or miopenDouble.
 * Returns: Success; BadParm (NULL handle, partialDesc, savedDesc or buffer;
 * exactly one running statistic NULL; lengths that do not fit; negative or
 * NaN epsilon; non-finite expAvgFactor with running statistics; outputs with
 * overlapping strides); NotImplemented (types); InternalError. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBNBatchNormMergeStatistics(
    miopenHandle_t handle, const miopenTensorDescriptor_t partialDesc, const void* partialCount,
    const void* partialMean, const void* partialM2, double epsilon, const miopenTensorDescriptor_t savedDesc,
    void* savedMean, void* savedInvStd, double expAvgFactor, const miopenTensorDescriptor_t runningDesc,
    void* runningMean, void* runningVariance);

/* y = alpha * (scale * (x - mean) * invStd + bias) + beta * y_prior, with the
 * mean and inverse standard deviation given (miopenBNBatchNormMergeStatistics
 * makes them).  paramDesc describes bnScale, bnBias, mean and invStd: one
 * type, miopenFloat or x's.
 * Returns: Success; BadParm (as miopenBatchNormalizationForwardInference;
 * NULL mean or invStd); NotImplemented; InternalError. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBNBatchNormForwardNormalize(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, const void* alpha, const void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t paramDesc, const void* bnScale, const void* bnBias, const void* mean,
    const void* invStd);

/* This rank's share of the backward sums, per feature over its own values:
 *   sumDy = sum(dy),  sumDyXmu = sum(dy * (x - mean)),
 * and, when resultBnScaleDiff and resultBnBiasDiff are given (both or
 * neither), this rank's parameter gradients dbias = sumDy and
 * dscale = sumDyXmu * invStd, blended as alphaParamDiff * result +
 * betaParamDiff * prior.
 * paramDesc describes mean, invStd, resultBnScaleDiff and resultBnBiasDiff
 * (miopenFloat or x's type); sumsDesc describes sumDy and sumDyXmu
 * (miopenFloat or miopenDouble).  dy: x's lengths, x's type or miopenFloat.
 * Returns: Success; BadParm (NULL handle, descriptor, alpha/beta, x, dy,
 * mean, invStd, sumDy or sumDyXmu; exactly one gradient NULL; shapes that do
 * not fit; outputs with overlapping strides);
 * NotImplemented; InternalError. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBNBatchNormBackwardReduce(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, const void* alphaParamDiff, const void* betaParamDiff,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t dyDesc, const void* dy,
    const miopenTensorDescriptor_t paramDesc, const void* mean, const void* invStd, void* resultBnScaleDiff,
    void* resultBnBiasDiff, const miopenTensorDescriptor_t sumsDesc, void* sumDy, void* sumDyXmu);

/* dx from the sums of every rank (sumDy, sumDyXmu all-reduced) and the
 * global count n per feature:
 *   dx = scale * invStd * (dy - sumDy / n - (x - mean) * invStd^2 * sumDyXmu / n),
 * blended as alphaDataDiff * dx + betaDataDiff * dx_prior.
 * paramDesc describes bnScale, mean and invStd (miopenFloat or x's type);
 * sumsDesc describes sumDy, sumDyXmu and count (miopenFloat or miopenDouble).
 * dy, dx: x's lengths, one type (x's or miopenFloat); dx == dy in place.
 * Returns: Success; BadParm (as miopenBatchNormalizationBackward; NULL
 * mean, invStd, sumDy, sumDyXmu or count); NotImplemented; InternalError. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBNBatchNormBackwardElementwise(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, const void* alphaDataDiff, const void* betaDataDiff,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t dyDesc, const void* dy,
    const miopenTensorDescriptor_t dxDesc, void* dx, const miopenTensorDescriptor_t paramDesc,
    const void* bnScale, const void* mean, const void* invStd, const miopenTensorDescriptor_t sumsDesc,
    const void* sumDy, const void* sumDyXmu, const void* count);

/* ------------------------------------------------------------------------ */
/* Group normalization                                                       */
/* ------------------------------------------------------------------------ */
/* x, y, dx, dy: rank 2 to 5 ((N,C), (N,C,W), (N,C,H,W), (N,C,D,H,W)), any
 * positive strides (NCHW, NHWC, ...; outputs without elements sharing memory,
 * as for batch norm), equal lengths, one type: miopenFloat,
 * miopenHalf, miopenBFloat16 or miopenDouble.  G = num_groups divides C; each
 * (n, g) normalizes its C/G channels over all spatial positions with the
 * biased variance: y = (x - mean) * rstd * weight[c] + bias[c],
 * rstd = 1 / sqrt(var + epsilon), where epsilon (a float, as MIOpen's
 * prototype has it) is taken as the double its shortest decimal names: 1e-5f
 * as 1e-5, so float64 statistics keep float64 precision.  In place and
 * overlapping memory follow batch norm's rule (y over x, dx over dy or x).
 * weight, bias (and their gradients): lengths (C) or (1, C, 1, ...), type
 *   miopenFloat or x's type.
 * mean, rstd: lengths (N, G), type miopenFloat (miopenDouble for miopenDouble
 *   x, which also takes miopenFloat).
 * mode: MIOPEN_ELEMENTWISE_AFFINE (0) ignores weight and bias (weight 1, bias
 *   0); any other miopenNormMode_t applies them (MIOpen's rule).
 * Bad input (BadParm): C % G != 0, G < 1, groups of one element, mismatched
 * lengths, NULL handle/descriptor/x/y, NULL weight or bias in an affine mode,
 * negative or NaN epsilon.  Other type combinations: NotImplemented. */

/* MIOpen's group-norm forward.  mean and rstd are written only when
 * non-NULL (their descriptors may then be NULL).
 * Returns: Success; BadParm; NotImplemented; InternalError. */
MIOPEN_BN_EXPORT miopenStatus_t miopenGroupNormForward(
    miopenHandle_t handle, miopenNormMode_t mode, const miopenTensorDescriptor_t xDesc, const void* x,
    const miopenTensorDescriptor_t weightDesc, const void* weight,
    const miopenTensorDescriptor_t biasDesc, const void* bias, const uint64_t num_groups,
    const float epsilon, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t meanDesc, void* mean, const miopenTensorDescriptor_t rstdDesc,
    void* rstd);

/* Extension: miopenGroupNormForward with an activation applied to its result
 * in float32: with miopenBNActivationSwish, y = z / (1 + exp(-activationBeta
 * * z)) where z is the group-normalized value.  miopenBNActivationNone is
 * miopenGroupNormForward.
 * Returns: as miopenGroupNormForward; BadParm for an unknown activation or a
 * non-finite activationBeta. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBNGroupNormForwardActivation(
    miopenHandle_t handle, miopenNormMode_t mode, const miopenTensorDescriptor_t xDesc, const void* x,
    const miopenTensorDescriptor_t weightDesc, const void* weight,
    const miopenTensorDescriptor_t biasDesc, const void* bias, const uint64_t num_groups,
    const float epsilon, miopenBNActivation_t activation, const float activationBeta,
    const miopenTensorDescriptor_t yDesc, void* y, const miopenTensorDescriptor_t meanDesc, void* mean,
    const miopenTensorDescriptor_t rstdDesc, void* rstd);

/* Extension: group-norm backward from the forward's saved mean and rstd.
 * With xhat = (x - mean) * rstd and g = dy (times the activation's
 * derivative at z = xhat * weight + bias when the forward fused one; this
 * needs bias in affine modes):
 *   dbias[c] = sum g, dweight[c] = sum g * xhat (over n and positions),
 *   dx = rstd * (g*w - mean_group(g*w) - xhat * mean_group(g*w * xhat)).
 * dweight/dbias are written in affine modes (their pointers and descriptors
 * may be NULL in MIOPEN_ELEMENTWISE_AFFINE mode).  dx: x's lengths and type.
 * Returns: Success; BadParm (as forward; NULL dy, dx, mean or rstd; NULL
 * weight, dweight or dbias in an affine mode; NULL bias with an activation in
 * an affine mode); NotImplemented; InternalError. */
MIOPEN_BN_EXPORT miopenStatus_t miopenBNGroupNormBackward(
    miopenHandle_t handle, miopenNormMode_t mode, const miopenTensorDescriptor_t xDesc, const void* x,
    const miopenTensorDescriptor_t dyDesc, const void* dy, const miopenTensorDescriptor_t weightDesc,
    const void* weight, const miopenTensorDescriptor_t biasDesc, const void* bias,
    const miopenTensorDescriptor_t meanDesc, const void* mean, const miopenTensorDescriptor_t rstdDesc,
    const void* rstd, const uint64_t num_groups, miopenBNActivation_t activation,
    const float activationBeta, const miopenTensorDescriptor_t dxDesc, void* dx,
    const miopenTensorDescriptor_t dweightDesc, void* dweight, const miopenTensorDescriptor_t dbiasDesc,
    void* dbias);

#ifdef __cplusplus
}
#endif

#endif /* MIOPEN_BN_H_ */
