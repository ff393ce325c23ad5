/* What the three batch-norm examples share: 16-bit float conversion, tensors
 * in NCHW or NHWC with their descriptors, random data, the comparison with a
 * double-precision CPU reference, HIPDNN_LOG_LEVEL=info detail, and the loop
 * over I/O types (fp32, fp16, bf16; parameters always fp32) and layouts.
 *
 * Only the public header is used: <miopen/miopen.h>. */
#ifndef MIOPEN_BN_EXAMPLES_COMMON_H
#define MIOPEN_BN_EXAMPLES_COMMON_H

#include <miopen/miopen.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One small layer: odd sizes, so a swapped H and W or an off-by-one shows. */
enum { EXAMPLE_N = 3, EXAMPLE_C = 5, EXAMPLE_H = 6, EXAMPLE_W = 7 };
#define EXAMPLE_EPSILON 1e-5

/* ------------------------------------------------------------- logging -- */

/* hipDNN's samples print their steps when HIPDNN_LOG_LEVEL=info. */
static inline int info_enabled(void) {
    const char* level = getenv("HIPDNN_LOG_LEVEL");
    return level != NULL && strcmp(level, "info") == 0;
}

static inline void info(const char* format, ...) {
    if (!info_enabled()) return;
    va_list args;
    va_start(args, format);
    printf("[info] ");
    vprintf(format, args);
    printf("\n");
    va_end(args);
}

/* A failing library call ends the example: it is a bug, not a data mismatch. */
static inline void check_status(miopenStatus_t status, const char* call) {
    if (status == miopenStatusSuccess) return;
    fprintf(stderr, "%s failed: %s: %s\n", call, miopenGetErrorString(status), miopenBNGetLastErrorMessage());
    exit(2);
}
#define CHECK_CALL(call) check_status((call), #call)

/* ------------------------------------------------------- 16-bit floats -- */

/* float -> IEEE half, rounding to nearest even; NaN stays NaN, overflow is inf. */
static inline uint16_t float_to_half(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    const uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    const int exponent = (int)(magnitude >> 23) - 127 + 15;
    if (exponent >= 31) return (uint16_t)(sign | 0x7c00u);
    /* Subnormal halves count units of 2^-24: shift the full significand. */
    const int shift = exponent > 0 ? 13 : 14 - exponent;
    if (shift > 24) return sign;
    const uint32_t significand = exponent > 0 ? (magnitude & 0x7fffffu) : ((magnitude & 0x7fffffu) | 0x800000u);
    uint32_t half = ((exponent > 0 ? (uint32_t)exponent : 0u) << 10) | (significand >> shift);
    const uint32_t dropped = significand & ((1u << shift) - 1u);
    const uint32_t tie = 1u << (shift - 1);
    if (dropped > tie || (dropped == tie && (half & 1u))) ++half; /* a carry moves into the exponent */
    return (uint16_t)(sign | half);
}

static inline float half_to_float(uint16_t half) {
    const float sign = (half & 0x8000u) ? -1.0f : 1.0f;
    const int exponent = (half >> 10) & 0x1f;
    const int mantissa = half & 0x3ff;
    if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
    if (exponent == 0) return sign * ldexpf((float)mantissa, -24);
    return sign * ldexpf((float)(mantissa | 0x400), exponent - 25);
}

/* bfloat16 is the top half of a float, rounded to nearest even. */
static inline uint16_t float_to_bf16(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

static inline float bf16_to_float(uint16_t value) {
    const uint32_t bits = (uint32_t)value << 16;
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

/* ------------------------------------------------------------- tensors -- */

static inline const char* type_name(miopenDataType_t type) {
    return type == miopenHalf ? "fp16" : type == miopenBFloat16 ? "bf16" : "fp32";
}

static inline size_t type_size(miopenDataType_t type) { return type == miopenFloat ? 4 : 2; }

/* An N x C x H x W data tensor stored NCHW or NHWC, and its descriptor. */
typedef struct {
    miopenDataType_t type;
    int nhwc;
    void* data;
    miopenTensorDescriptor_t desc;
} Tensor;

static inline size_t tensor_count(void) { return (size_t)EXAMPLE_N * EXAMPLE_C * EXAMPLE_H * EXAMPLE_W; }

static inline size_t tensor_offset(const Tensor* t, int n, int c, int h, int w) {
    if (t->nhwc) return (((size_t)n * EXAMPLE_H + h) * EXAMPLE_W + w) * EXAMPLE_C + c;
    return (((size_t)n * EXAMPLE_C + c) * EXAMPLE_H + h) * EXAMPLE_W + w;
}

static inline double tensor_get(const Tensor* t, int n, int c, int h, int w) {
    const size_t i = tensor_offset(t, n, c, h, w);
    if (t->type == miopenFloat) return ((const float*)t->data)[i];
    const uint16_t bits = ((const uint16_t*)t->data)[i];
    return t->type == miopenHalf ? half_to_float(bits) : bf16_to_float(bits);
}

static inline void tensor_set(Tensor* t, int n, int c, int h, int w, double value) {
    const size_t i = tensor_offset(t, n, c, h, w);
    if (t->type == miopenFloat)
        ((float*)t->data)[i] = (float)value;
    else
        ((uint16_t*)t->data)[i] = t->type == miopenHalf ? float_to_half((float)value) : float_to_bf16((float)value);
}

static inline void describe(const char* name, miopenTensorDescriptor_t desc) {
    if (!info_enabled()) return;
    miopenDataType_t type;
    int rank = 0, lens[5], strides[5];
    CHECK_CALL(miopenGetTensorDescriptorSize(desc, &rank));
    CHECK_CALL(miopenGetTensorDescriptor(desc, &type, lens, strides));
    info("%-6s %s lengths [%d, %d, %d, %d] strides [%d, %d, %d, %d]", name, type_name(type), lens[0], lens[1],
         lens[2], lens[3], strides[0], strides[1], strides[2], strides[3]);
}

static inline void tensor_create(Tensor* t, const char* name, miopenDataType_t type, int nhwc) {
    const int lens[4] = {EXAMPLE_N, EXAMPLE_C, EXAMPLE_H, EXAMPLE_W}; /* always N, C, H, W */
    t->type = type;
    t->nhwc = nhwc;
    t->data = malloc(tensor_count() * type_size(type));
    if (t->data == NULL) check_status(miopenStatusAllocFailed, "malloc");
    CHECK_CALL(miopenCreateTensorDescriptor(&t->desc));
    CHECK_CALL(miopenSetNdTensorDescriptorWithLayout(t->desc, type, nhwc ? miopenTensorNHWC : miopenTensorNCHW,
                                                     lens, 4));
    describe(name, t->desc);
}

static inline void tensor_destroy(Tensor* t) {
    miopenDestroyTensorDescriptor(t->desc);
    free(t->data);
}

/* Outputs start as NaN, so an element the library never writes cannot pass. */
static inline void tensor_poison(Tensor* t) {
    for (int n = 0; n < EXAMPLE_N; ++n)
        for (int c = 0; c < EXAMPLE_C; ++c)
            for (int h = 0; h < EXAMPLE_H; ++h)
                for (int w = 0; w < EXAMPLE_W; ++w) tensor_set(t, n, c, h, w, NAN);
}

/* The fp32 (1, C, 1, 1) descriptor every parameter uses (spatial mode). */
static inline miopenTensorDescriptor_t param_descriptor(const Tensor* x) {
    miopenTensorDescriptor_t desc;
    CHECK_CALL(miopenCreateTensorDescriptor(&desc));
    CHECK_CALL(miopenDeriveBNTensorDescriptor(desc, x->desc, miopenBNSpatial));
    describe("param", desc);
    return desc;
}

/* --------------------------------------------------------- random data -- */

typedef struct {
    uint64_t state;
} Random;

static inline double random_uniform(Random* r, double low, double high) {
    r->state = r->state * 6364136223846793005ull + 1442695040888963407ull;
    return low + (high - low) * (double)(r->state >> 11) * (1.0 / 9007199254740992.0);
}

/* x: each channel with its own mean and spread, as a real layer's activations. */
static inline void fill_activations(Tensor* t, Random* r) {
    for (int c = 0; c < EXAMPLE_C; ++c) {
        const double mean = random_uniform(r, -2.0, 2.0), spread = random_uniform(r, 0.5, 2.0);
        for (int n = 0; n < EXAMPLE_N; ++n)
            for (int h = 0; h < EXAMPLE_H; ++h)
                for (int w = 0; w < EXAMPLE_W; ++w)
                    tensor_set(t, n, c, h, w, mean + spread * random_uniform(r, -1.7, 1.7));
    }
}

static inline void fill_uniform(Tensor* t, Random* r, double low, double high) {
    for (int n = 0; n < EXAMPLE_N; ++n)
        for (int c = 0; c < EXAMPLE_C; ++c)
            for (int h = 0; h < EXAMPLE_H; ++h)
                for (int w = 0; w < EXAMPLE_W; ++w) tensor_set(t, n, c, h, w, random_uniform(r, low, high));
}

static inline void fill_params(float* values, Random* r, double low, double high) {
    for (int c = 0; c < EXAMPLE_C; ++c) values[c] = (float)random_uniform(r, low, high);
}

static inline void poison_params(float* values) {
    for (int c = 0; c < EXAMPLE_C; ++c) values[c] = NAN;
}

/* Two-pass mean and biased variance of channel c, in double. */
static inline void channel_statistics(const Tensor* x, int c, double* mean, double* var) {
    const double count = (double)EXAMPLE_N * EXAMPLE_H * EXAMPLE_W;
    double sum = 0.0, squares = 0.0;
    for (int n = 0; n < EXAMPLE_N; ++n)
        for (int h = 0; h < EXAMPLE_H; ++h)
            for (int w = 0; w < EXAMPLE_W; ++w) sum += tensor_get(x, n, c, h, w);
    *mean = sum / count;
    for (int n = 0; n < EXAMPLE_N; ++n)
        for (int h = 0; h < EXAMPLE_H; ++h)
            for (int w = 0; w < EXAMPLE_W; ++w) {
                const double d = tensor_get(x, n, c, h, w) - *mean;
                squares += d * d;
            }
    *var = squares / count;
}

/* ---------------------------------------------------------- validation -- */

/* |got - expected| <= tol + tol * |expected|, tol by the output's type:
 * fp32 1e-5 per element and 1e-4 for reductions, fp16 2e-3, bf16 1.6e-2: the
 * package's table (python/miopen_bn/tolerances.csv), restated so that the
 * samples need the public header alone; tests/abi/test_examples.py checks that
 * the two agree. */
typedef struct {
    const char* name;
    double tolerance;
    double max_error;
    long bad;
    long count;
} Comparison;

static inline Comparison comparison_start(const char* name, miopenDataType_t type, int reduction) {
    Comparison cmp = {name, 0.0, 0.0, 0, 0};
    cmp.tolerance = type == miopenHalf ? 2e-3 : type == miopenBFloat16 ? 1.6e-2 : reduction ? 1e-4 : 1e-5;
    return cmp;
}

static inline void compare_value(Comparison* cmp, double got, double expected) {
    const double error = fabs(got - expected);
    ++cmp->count;
    if (!(error <= cmp->tolerance + cmp->tolerance * fabs(expected))) ++cmp->bad; /* NaN fails too */
    if (!(error <= cmp->max_error)) cmp->max_error = error;
}

static inline void compare_tensor(Comparison* cmp, const Tensor* got, const double* expected_nchw) {
    size_t i = 0;
    for (int n = 0; n < EXAMPLE_N; ++n)
        for (int c = 0; c < EXAMPLE_C; ++c)
            for (int h = 0; h < EXAMPLE_H; ++h)
                for (int w = 0; w < EXAMPLE_W; ++w) compare_value(cmp, tensor_get(got, n, c, h, w), expected_nchw[i++]);
}

static inline void compare_params(Comparison* cmp, const float* got, const double* expected) {
    for (int c = 0; c < EXAMPLE_C; ++c) compare_value(cmp, got[c], expected[c]);
}

/* Prints the detail at info level; returns 1 when every element passed. */
static inline int comparison_passed(const Comparison* cmp) {
    info("check  %-14s %ld of %ld elements within tolerance %g (max |error| %.3g)", cmp->name,
         cmp->count - cmp->bad, cmp->count, cmp->tolerance, cmp->max_error);
    if (cmp->bad) fprintf(stderr, "%s: %ld of %ld elements outside tolerance\n", cmp->name, cmp->bad, cmp->count);
    return cmp->bad == 0;
}

/* ---------------------------------------------------------- case loop -- */

typedef int (*ExampleCase)(miopenHandle_t handle, miopenDataType_t type, int nhwc);

/* Runs one example for every I/O type and layout; the exit status is 0 only
 * when every case validated. */
static inline int run_example(const char* example, ExampleCase run_case) {
    const miopenDataType_t types[3] = {miopenFloat, miopenHalf, miopenBFloat16};
    miopenHandle_t handle;
    int failures = 0;
    CHECK_CALL(miopenCreate(&handle));
    info("%s: handle created; N %d C %d H %d W %d, spatial mode, fp32 parameters, fp32 accumulation", example,
         EXAMPLE_N, EXAMPLE_C, EXAMPLE_H, EXAMPLE_W);
    for (int t = 0; t < 3; ++t)
        for (int nhwc = 0; nhwc <= 1; ++nhwc) {
            info("%s: %s I/O, %s", example, type_name(types[t]), nhwc ? "NHWC" : "NCHW");
            const int passed = run_case(handle, types[t], nhwc);
            printf("%s %s %s: %s\n", example, type_name(types[t]), nhwc ? "NHWC" : "NCHW",
                   passed ? "PASSED" : "FAILED");
            failures += !passed;
        }
    CHECK_CALL(miopenDestroy(handle));
    printf("%s: %d of 6 cases passed\n", example, 6 - failures);
    return failures ? 1 : 0;
}

#endif /* MIOPEN_BN_EXAMPLES_COMMON_H */
