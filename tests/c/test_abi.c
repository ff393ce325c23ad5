/* The C ABI as a C program sees it: every entry point, the status each bad
 * input gets, that a failing call writes nothing, and small numerical checks
 * against a double-precision reference.  Compiled against <miopen/miopen.h>
 * only and linked with -lmiopen_bn; runs on a CPU handle. */
#include "check.h"

#include <math.h>
#include <stdlib.h>

enum { N = 3, C = 4, H = 5, W = 7, HW = H * W, TOTAL = N * C * HW };

static float random_float(unsigned* state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) & 0xFFFF) / 65536.0f * 4.0f - 1.0f;
}

static void fill_random(float* data, size_t count, unsigned seed, float shift) {
    unsigned state = seed;
    for (size_t i = 0; i < count; ++i) data[i] = random_float(&state) + shift;
}

static void fill_nan(float* data, size_t count) {
    for (size_t i = 0; i < count; ++i) data[i] = NAN;
}

static int all_nan(const float* data, size_t count) {
    for (size_t i = 0; i < count; ++i)
        if (!isnan(data[i])) return 0;
    return 1;
}

static int close_to(double got, double want, double tol) {
    return fabs(got - want) <= tol + tol * fabs(want);
}

/* Spatial statistics of channel c of a packed NCHW tensor (two-pass). */
static void channel_stats(const float* x, int c, double* mean, double* var) {
    double sum = 0.0, sq = 0.0;
    for (int n = 0; n < N; ++n)
        for (int i = 0; i < HW; ++i) sum += x[(n * C + c) * HW + i];
    *mean = sum / (N * HW);
    for (int n = 0; n < N; ++n)
        for (int i = 0; i < HW; ++i) {
            const double d = x[(n * C + c) * HW + i] - *mean;
            sq += d * d;
        }
    *var = sq / (N * HW);
}

static void test_error_strings(void) {
    CHECK(strcmp(miopenGetErrorString(miopenStatusSuccess), "miopenStatusSuccess") == 0);
    CHECK(strcmp(miopenGetErrorString(miopenStatusBadParm), "miopenStatusBadParm") == 0);
    CHECK(strcmp(miopenGetErrorString(miopenStatusVersionMismatch), "miopenStatusVersionMismatch") == 0);
    CHECK(strcmp(miopenGetErrorString((miopenStatus_t)42), "Unknown error status") == 0);
    size_t major = 0, minor = 0, patch = 0;
    CHECK_STATUS(miopenStatusSuccess, miopenGetVersion(&major, &minor, NULL));
    CHECK(major == 3);
    CHECK_STATUS(miopenStatusSuccess, miopenBNGetLibraryVersion(&major, &minor, &patch));
    CHECK(major == MIOPEN_BN_VERSION_MAJOR && minor == MIOPEN_BN_VERSION_MINOR &&
          patch == MIOPEN_BN_VERSION_PATCH);
}

static void test_handles(void) {
    miopenHandle_t handle = NULL;
    CHECK_STATUS(miopenStatusBadParm, miopenCreate(NULL));
    CHECK_STATUS(miopenStatusBadParm, miopenBNCreateWithBackend(&handle, (miopenBNBackend_t)9));
    CHECK_STATUS(miopenStatusSuccess, miopenBNCreateWithBackend(&handle, miopenBNBackendCPU));
    miopenBNBackend_t backend = miopenBNBackendAuto;
    CHECK_STATUS(miopenStatusSuccess, miopenBNGetBackend(handle, &backend));
    CHECK(backend == miopenBNBackendCPU);
    CHECK_STATUS(miopenStatusBadParm, miopenBNGetBackend(NULL, &backend));

    miopenAcceleratorQueue_t stream = (miopenAcceleratorQueue_t)0x1234;
    CHECK_STATUS(miopenStatusSuccess, miopenSetStream(handle, stream));
    miopenAcceleratorQueue_t got = NULL;
    CHECK_STATUS(miopenStatusSuccess, miopenGetStream(handle, &got));
    CHECK(got == stream);
    CHECK_STATUS(miopenStatusBadParm, miopenGetStream(handle, NULL));
    CHECK_STATUS(miopenStatusBadParm, miopenSetStream(NULL, stream));
    CHECK_STATUS(miopenStatusSuccess, miopenSetStream(handle, NULL));

    CHECK_STATUS(miopenStatusSuccess, miopenEnableProfiling(handle, true));
    float ms = -1.0f;
    CHECK_STATUS(miopenStatusSuccess, miopenGetKernelTime(handle, &ms));
    CHECK(ms >= 0.0f);
    CHECK_STATUS(miopenStatusBadParm, miopenGetKernelTime(handle, NULL));
    CHECK_STATUS(miopenStatusBadParm, miopenEnableProfiling(NULL, true));

    CHECK_STATUS(miopenStatusSuccess, miopenDestroy(handle));
    CHECK_STATUS(miopenStatusSuccess, miopenDestroy(NULL));
    /* A destroyed handle is refused, not read (ASan would see a use after free). */
    CHECK_STATUS(miopenStatusBadParm, miopenDestroy(handle));
    CHECK_STATUS(miopenStatusBadParm, miopenGetStream(handle, &got));

    miopenHandle_t with_stream = NULL;
    if (miopenBNHasGpuSupport() == 0) {
        CHECK_STATUS(miopenStatusSuccess, miopenCreateWithStream(&with_stream, NULL));
        CHECK_STATUS(miopenStatusSuccess, miopenDestroy(with_stream));
        CHECK_STATUS(miopenStatusBadParm, miopenBNCreateWithBackend(&with_stream, miopenBNBackendGPU));
    }
}

static void test_descriptors(void) {
    miopenTensorDescriptor_t desc = NULL;
    CHECK_STATUS(miopenStatusBadParm, miopenCreateTensorDescriptor(NULL));
    CHECK_STATUS(miopenStatusSuccess, miopenCreateTensorDescriptor(&desc));
    CHECK_STATUS(miopenStatusSuccess, miopenSet4dTensorDescriptor(desc, miopenFloat, 2, 3, 4, 5));

    miopenDataType_t dtype = miopenHalf;
    int n, c, h, w, ns, cs, hs, ws;
    CHECK_STATUS(miopenStatusSuccess, miopenGet4dTensorDescriptor(desc, &dtype, &n, &c, &h, &w, &ns, &cs, &hs, &ws));
    CHECK(dtype == miopenFloat && n == 2 && c == 3 && h == 4 && w == 5);
    CHECK(ns == 60 && cs == 20 && hs == 5 && ws == 1);
    int rank = 0;
    CHECK_STATUS(miopenStatusSuccess, miopenGetTensorDescriptorSize(desc, &rank));
    CHECK(rank == 4);
    size_t bytes = 0;
    CHECK_STATUS(miopenStatusSuccess, miopenGetTensorNumBytes(desc, &bytes));
    CHECK(bytes == 2 * 3 * 4 * 5 * 4);

    /* Bad lengths and strides are rejected and leave the descriptor as it was. */
    CHECK_STATUS(miopenStatusBadParm, miopenSet4dTensorDescriptor(desc, miopenFloat, 0, 3, 4, 5));
    CHECK_STATUS(miopenStatusBadParm, miopenSet4dTensorDescriptor(desc, miopenFloat, 2, -3, 4, 5));
    CHECK_STATUS(miopenStatusBadParm, miopenSet4dTensorDescriptorEx(desc, miopenFloat, 2, 3, 4, 5, 60, 20, 0, 1));
    CHECK_STATUS(miopenStatusBadParm, miopenSet4dTensorDescriptor(desc, (miopenDataType_t)4, 2, 3, 4, 5));
    CHECK_STATUS(miopenStatusBadParm, miopenSet4dTensorDescriptor(desc, (miopenDataType_t)77, 2, 3, 4, 5));
    /* An element space beyond 64 bits. */
    const int big = 2147483647;
    CHECK_STATUS(miopenStatusBadParm,
                 miopenSet4dTensorDescriptorEx(desc, miopenDouble, big, big, big, big, big, big, big, big));
    CHECK_STATUS(miopenStatusSuccess, miopenGet4dTensorDescriptor(desc, &dtype, &n, &c, &h, &w, &ns, &cs, &hs, &ws));
    CHECK(dtype == miopenFloat && n == 2 && c == 3 && ns == 60);

    const int dims[] = {2, 3, 4, 5, 6, 7};
    CHECK_STATUS(miopenStatusInvalidValue, miopenSetTensorDescriptor(desc, miopenFloat, 3, NULL, NULL));
    CHECK_STATUS(miopenStatusInvalidValue, miopenSetTensorDescriptor(desc, miopenFloat, 0, dims, NULL));
    CHECK_STATUS(miopenStatusBadParm, miopenSetTensorDescriptor(desc, miopenFloat, 6, dims, NULL));
    CHECK_STATUS(miopenStatusSuccess, miopenSetTensorDescriptor(desc, miopenHalf, 5, dims, NULL));
    int got_dims[5] = {0}, got_strides[5] = {0};
    CHECK_STATUS(miopenStatusSuccess, miopenGetTensorDescriptor(desc, &dtype, got_dims, got_strides));
    CHECK(dtype == miopenHalf && got_dims[4] == 6 && got_strides[0] == 3 * 4 * 5 * 6 && got_strides[4] == 1);
    CHECK_STATUS(miopenStatusSuccess, miopenGetTensorDescriptor(desc, NULL, NULL, got_strides));
    CHECK_STATUS(miopenStatusSuccess, miopenGetTensorDescriptorSize(desc, &rank));
    CHECK(rank == 5);
    CHECK_STATUS(miopenStatusBadParm, miopenGet4dTensorDescriptor(desc, &dtype, &n, &c, &h, &w, &ns, &cs, &hs, &ws));

    /* Layouts: NHWC strides are {HWC, 1, WC, C}; lens stay logical. */
    const int lens4[] = {2, 3, 4, 5};
    CHECK_STATUS(miopenStatusSuccess, miopenSetNdTensorDescriptorWithLayout(desc, miopenFloat, miopenTensorNHWC, lens4, 4));
    CHECK_STATUS(miopenStatusSuccess, miopenGetTensorDescriptor(desc, NULL, got_dims, got_strides));
    CHECK(got_dims[1] == 3 && got_strides[0] == 60 && got_strides[1] == 1 && got_strides[2] == 15 && got_strides[3] == 3);
    const int lens5[] = {2, 3, 4, 5, 6};
    CHECK_STATUS(miopenStatusSuccess, miopenSetNdTensorDescriptorWithLayout(desc, miopenFloat, miopenTensorNDHWC, lens5, 5));
    CHECK_STATUS(miopenStatusSuccess, miopenGetTensorDescriptor(desc, NULL, got_dims, got_strides));
    CHECK(got_strides[1] == 1 && got_strides[4] == 3 && got_strides[3] == 18 && got_strides[2] == 90 && got_strides[0] == 360);
    CHECK_STATUS(miopenStatusBadParm, miopenSetNdTensorDescriptorWithLayout(desc, miopenFloat, miopenTensorNCHW, lens5, 5));
    CHECK_STATUS(miopenStatusBadParm, miopenSetNdTensorDescriptorWithLayout(desc, miopenFloat, miopenTensorNCDHW, lens4, 4));
    CHECK_STATUS(miopenStatusNotImplemented, miopenSetNdTensorDescriptorWithLayout(desc, miopenFloat, miopenTensorCHWN, lens4, 4));
    CHECK_STATUS(miopenStatusInvalidValue, miopenSetNdTensorDescriptorWithLayout(desc, miopenFloat, miopenTensorNCHW, NULL, 4));
    CHECK_STATUS(miopenStatusInvalidValue, miopenSetNdTensorDescriptorWithLayout(desc, miopenFloat, miopenTensorNCHW, lens4, 0));

    /* A descriptor that was never set cannot be read. */
    miopenTensorDescriptor_t unset = NULL;
    CHECK_STATUS(miopenStatusSuccess, miopenCreateTensorDescriptor(&unset));
    CHECK_STATUS(miopenStatusBadParm, miopenGetTensorNumBytes(unset, &bytes));
    CHECK_STATUS(miopenStatusBadParm, miopenGetTensorNumBytes(NULL, &bytes));
    CHECK_STATUS(miopenStatusSuccess, miopenDestroyTensorDescriptor(unset));
    CHECK_STATUS(miopenStatusSuccess, miopenDestroyTensorDescriptor(desc));
    CHECK_STATUS(miopenStatusSuccess, miopenDestroyTensorDescriptor(NULL));
    /* Destroyed descriptors are refused, not read or freed again. */
    CHECK_STATUS(miopenStatusBadParm, miopenDestroyTensorDescriptor(desc));
    CHECK_STATUS(miopenStatusBadParm, miopenGetTensorNumBytes(unset, &bytes));
    CHECK_STATUS(miopenStatusBadParm, miopenSet4dTensorDescriptor(desc, miopenFloat, 1, 2, 3, 4));
}

static void test_derive(void) {
    miopenTensorDescriptor_t x, derived;
    miopenCreateTensorDescriptor(&x);
    miopenCreateTensorDescriptor(&derived);
    miopenSet4dTensorDescriptor(x, miopenHalf, N, C, H, W);
    int dims[5], strides[5], rank = 0;
    miopenDataType_t dtype = miopenHalf;
    CHECK_STATUS(miopenStatusSuccess, miopenDeriveBNTensorDescriptor(derived, x, miopenBNSpatial));
    CHECK_STATUS(miopenStatusSuccess, miopenGetTensorDescriptor(derived, &dtype, dims, strides));
    CHECK(dtype == miopenFloat && dims[0] == 1 && dims[1] == C && dims[2] == 1 && dims[3] == 1);
    CHECK_STATUS(miopenStatusSuccess, miopenDeriveBNTensorDescriptor(derived, x, miopenBNPerActivation));
    CHECK_STATUS(miopenStatusSuccess, miopenGetTensorDescriptor(derived, NULL, dims, strides));
    CHECK(dims[0] == 1 && dims[1] == C && dims[2] == H && dims[3] == W);
    CHECK_STATUS(miopenStatusBadParm, miopenDeriveBNTensorDescriptor(NULL, x, miopenBNSpatial));
    CHECK_STATUS(miopenStatusBadParm, miopenDeriveBNTensorDescriptor(derived, NULL, miopenBNSpatial));
    CHECK_STATUS(miopenStatusBadParm, miopenDeriveBNTensorDescriptor(derived, x, (miopenBatchNormMode_t)2));
    const int lens3[] = {2, 3, 4};
    miopenSetTensorDescriptor(x, miopenFloat, 3, lens3, NULL);
    CHECK_STATUS(miopenStatusBadParm, miopenDeriveBNTensorDescriptor(derived, x, miopenBNSpatial));
    CHECK_STATUS(miopenStatusSuccess, miopenGetTensorDescriptorSize(derived, &rank));
    CHECK(rank == 4);
    miopenDestroyTensorDescriptor(x);
    miopenDestroyTensorDescriptor(derived);
}

/* Buffers and descriptors for one spatial NCHW float problem. */
struct Problem {
    miopenHandle_t handle;
    miopenTensorDescriptor_t x_desc, param_desc;
    float x[TOTAL], y[TOTAL], dy[TOTAL], dx[TOTAL];
    float scale[C], bias[C], run_mean[C], run_var[C], save_mean[C], save_inv[C], dscale[C], dbias[C];
};

static void setup(struct Problem* p) {
    miopenBNCreateWithBackend(&p->handle, miopenBNBackendCPU);
    miopenCreateTensorDescriptor(&p->x_desc);
    miopenCreateTensorDescriptor(&p->param_desc);
    miopenSet4dTensorDescriptor(p->x_desc, miopenFloat, N, C, H, W);
    miopenDeriveBNTensorDescriptor(p->param_desc, p->x_desc, miopenBNSpatial);
    fill_random(p->x, TOTAL, 1u, 2.0f);
    fill_random(p->dy, TOTAL, 2u, 0.0f);
    fill_random(p->scale, C, 3u, 1.0f);
    fill_random(p->bias, C, 4u, 0.0f);
    fill_random(p->run_mean, C, 5u, 0.0f);
    fill_random(p->run_var, C, 6u, 2.0f);
}

static void teardown(struct Problem* p) {
    miopenDestroyTensorDescriptor(p->x_desc);
    miopenDestroyTensorDescriptor(p->param_desc);
    miopenDestroy(p->handle);
}

static void test_training_numerics(void) {
    struct Problem p;
    setup(&p);
    const float alpha = 1.0f, beta = 0.0f;
    const double eps = 1e-5, factor = 0.25;
    float old_mean[C], old_var[C];
    memcpy(old_mean, p.run_mean, sizeof old_mean);
    memcpy(old_var, p.run_var, sizeof old_var);
    fill_nan(p.y, TOTAL);
    fill_nan(p.save_mean, C);
    fill_nan(p.save_inv, C);
    CHECK_STATUS(miopenStatusSuccess,
                 miopenBatchNormalizationForwardTraining(p.handle, miopenBNSpatial, (void*)&alpha, (void*)&beta,
                                                         p.x_desc, p.x, p.x_desc, p.y, p.param_desc, p.scale,
                                                         p.bias, factor, p.run_mean, p.run_var, eps,
                                                         p.save_mean, p.save_inv));
    int ok = 1;
    for (int c = 0; c < C; ++c) {
        double mean, var;
        channel_stats(p.x, c, &mean, &var);
        const double inv = 1.0 / sqrt(var + eps);
        const double m = N * HW;
        ok &= close_to(p.save_mean[c], mean, 1e-5);
        ok &= close_to(p.save_inv[c], inv, 1e-5);
        ok &= close_to(p.run_mean[c], (1 - factor) * old_mean[c] + factor * mean, 1e-5);
        ok &= close_to(p.run_var[c], (1 - factor) * old_var[c] + factor * var * m / (m - 1), 1e-5);
        for (int n = 0; n < N; ++n)
            for (int i = 0; i < HW; ++i) {
                const int at = (n * C + c) * HW + i;
                ok &= close_to(p.y[at], p.scale[c] * (p.x[at] - mean) * inv + p.bias[c], 1e-5);
            }
    }
    CHECK(ok);

    /* V2 with four descriptors gives the same saved statistics. */
    float y2[TOTAL], mean2[C], inv2[C];
    fill_nan(y2, TOTAL);
    CHECK_STATUS(miopenStatusSuccess,
                 miopenBatchNormalizationForwardTraining_V2(p.handle, miopenBNSpatial, (void*)&alpha, (void*)&beta,
                                                            p.x_desc, p.x, p.x_desc, y2, p.param_desc, p.param_desc,
                                                            p.param_desc, p.param_desc, p.scale, p.bias, factor,
                                                            NULL, NULL, eps, mean2, inv2));
    CHECK(memcmp(y2, p.y, sizeof y2) == 0);
    CHECK(memcmp(mean2, p.save_mean, sizeof mean2) == 0 && memcmp(inv2, p.save_inv, sizeof inv2) == 0);

    /* Inference with the estimates, then the batch-statistics fallback. */
    float yi[TOTAL];
    fill_nan(yi, TOTAL);
    CHECK_STATUS(miopenStatusSuccess,
                 miopenBatchNormalizationForwardInference(p.handle, miopenBNSpatial, (void*)&alpha, (void*)&beta,
                                                          p.x_desc, p.x, p.x_desc, yi, p.param_desc, p.scale,
                                                          p.bias, p.run_mean, p.run_var, eps));
    ok = 1;
    for (int at = 0; at < TOTAL; ++at) {
        const int c = (at / HW) % C;
        const double want = p.scale[c] * (p.x[at] - p.run_mean[c]) / sqrt((double)p.run_var[c] + eps) + p.bias[c];
        ok &= close_to(yi[at], want, 1e-5);
    }
    CHECK(ok);
    fill_nan(yi, TOTAL);
    CHECK_STATUS(miopenStatusSuccess,
                 miopenBatchNormalizationForwardInference_V2(p.handle, miopenBNSpatial, (void*)&alpha, (void*)&beta,
                                                             p.x_desc, p.x, p.x_desc, yi, p.param_desc, p.param_desc,
                                                             NULL, NULL, p.scale, p.bias, NULL, NULL, eps));
    ok = 1;
    for (int at = 0; at < TOTAL; ++at) ok &= close_to(yi[at], p.y[at], 1e-5);
    CHECK(ok);

    /* Backward from saved statistics equals backward recomputing them. */
    const float one = 1.0f, zero = 0.0f;
    fill_nan(p.dx, TOTAL);
    fill_nan(p.dscale, C);
    fill_nan(p.dbias, C);
    CHECK_STATUS(miopenStatusSuccess,
                 miopenBatchNormalizationBackward(p.handle, miopenBNSpatial, &one, &zero, &one, &zero, p.x_desc,
                                                  p.x, p.x_desc, p.dy, p.x_desc, p.dx, p.param_desc, p.scale,
                                                  p.dscale, p.dbias, eps, p.save_mean, p.save_inv));
    ok = 1;
    for (int c = 0; c < C; ++c) {
        double mean, var, db = 0.0, ds = 0.0;
        channel_stats(p.x, c, &mean, &var);
        const double inv = 1.0 / sqrt(var + eps), m = N * HW;
        for (int n = 0; n < N; ++n)
            for (int i = 0; i < HW; ++i) {
                const int at = (n * C + c) * HW + i;
                db += p.dy[at];
                ds += p.dy[at] * (p.x[at] - mean) * inv;
            }
        ok &= close_to(p.dbias[c], db, 1e-4) && close_to(p.dscale[c], ds, 1e-4);
        for (int n = 0; n < N; ++n)
            for (int i = 0; i < HW; ++i) {
                const int at = (n * C + c) * HW + i;
                const double xhat = (p.x[at] - mean) * inv;
                ok &= close_to(p.dx[at], p.scale[c] * inv / m * (m * p.dy[at] - db - xhat * ds), 1e-4);
            }
    }
    CHECK(ok);
    float dx2[TOTAL], ds2[C], db2[C];
    fill_nan(dx2, TOTAL);
    CHECK_STATUS(miopenStatusSuccess,
                 miopenBatchNormalizationBackward_V2(p.handle, miopenBNSpatial, &one, &zero, &one, &zero, p.x_desc,
                                                     p.x, p.x_desc, p.dy, p.x_desc, dx2, p.param_desc, p.param_desc,
                                                     NULL, NULL, p.scale, ds2, db2, eps, NULL, NULL));
    ok = 1;
    for (int at = 0; at < TOTAL; ++at) ok &= close_to(dx2[at], p.dx[at], 1e-4);
    for (int c = 0; c < C; ++c) ok &= close_to(ds2[c], p.dscale[c], 1e-4) && close_to(db2[c], p.dbias[c], 1e-4);
    CHECK(ok);
    teardown(&p);
}

/* Each bad call returns its status and leaves y and the statistics as they were. */
#define CHECK_REJECTED(expected, call)                                       \
    do {                                                                     \
        fill_nan(p.y, TOTAL);                                                \
        fill_nan(p.save_mean, C);                                            \
        memcpy(run_mean_before, p.run_mean, sizeof run_mean_before);         \
        CHECK_STATUS(expected, call);                                        \
        CHECK(all_nan(p.y, TOTAL) && all_nan(p.save_mean, C));               \
        CHECK(memcmp(run_mean_before, p.run_mean, sizeof run_mean_before) == 0); \
    } while (0)

static void test_bad_training_calls(void) {
    struct Problem p;
    setup(&p);
    float run_mean_before[C];
    float a = 1.0f, b = 0.0f;
    void* alpha = &a;
    void* beta = &b;
    const miopenBatchNormMode_t S = miopenBNSpatial;
    miopenTensorDescriptor_t xd = p.x_desc, pd = p.param_desc;

#define TRAIN(handle, mode, alpha_, beta_, xdesc, x, ydesc, y, pdesc, scale, bias, rm, rv, eps, sm, si) \
    miopenBatchNormalizationForwardTraining(handle, mode, alpha_, beta_, xdesc, x, ydesc, y, pdesc, scale, bias, \
                                            0.1, rm, rv, eps, sm, si)

    CHECK_REJECTED(miopenStatusBadParm, TRAIN(NULL, S, alpha, beta, xd, p.x, xd, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, (miopenBatchNormMode_t)5, alpha, beta, xd, p.x, xd, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, NULL, beta, xd, p.x, xd, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, NULL, xd, p.x, xd, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, NULL, p.x, xd, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.x, NULL, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.x, xd, p.y, NULL, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, NULL, xd, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.x, xd, NULL, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.x, xd, p.y, pd, NULL, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.x, xd, p.y, pd, p.scale, NULL, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.x, xd, p.y, pd, p.scale, p.bias, p.run_mean, NULL, 1e-5, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.x, xd, p.y, pd, p.scale, p.bias, NULL, p.run_var, 1e-5, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.x, xd, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, NULL));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.x, xd, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, NULL, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.x, xd, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, -1.0, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.x, xd, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, NAN, p.save_mean, p.save_inv));
    CHECK_REJECTED(miopenStatusBadParm,
                   miopenBatchNormalizationForwardTraining(p.handle, S, alpha, beta, xd, p.x, xd, p.y, pd, p.scale, p.bias,
                                                           INFINITY, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));

    /* Parameters that do not fit x: per-activation mode with spatial parameters. */
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, miopenBNPerActivation, alpha, beta, xd, p.x, xd, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));

    miopenTensorDescriptor_t other;
    miopenCreateTensorDescriptor(&other);
    /* C mismatch between x and the parameters. */
    miopenSet4dTensorDescriptor(other, miopenFloat, 1, C - 1, 1, 1);
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.x, xd, p.y, other, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    /* y of other lengths, or of another type. */
    miopenSet4dTensorDescriptor(other, miopenFloat, N, C, H, W - 1);
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.x, other, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    miopenSet4dTensorDescriptor(other, miopenHalf, N, C, H, W);
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.x, other, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    /* Types batch norm does not compute on. */
    miopenSet4dTensorDescriptor(other, miopenInt8, N, C, H, W);
    CHECK_REJECTED(miopenStatusNotImplemented, TRAIN(p.handle, S, alpha, beta, other, p.x, other, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    miopenSet4dTensorDescriptor(other, miopenHalf, N, C, H, W);
    miopenTensorDescriptor_t double_params;
    miopenCreateTensorDescriptor(&double_params);
    miopenSet4dTensorDescriptor(double_params, miopenDouble, 1, C, 1, 1);
    CHECK_REJECTED(miopenStatusNotImplemented, TRAIN(p.handle, S, alpha, beta, other, p.x, other, p.y, double_params, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    /* Rank 1 and a descriptor never set. */
    const int one_dim[] = {TOTAL};
    miopenSetTensorDescriptor(other, miopenFloat, 1, one_dim, NULL);
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, other, p.x, other, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    miopenTensorDescriptor_t unset;
    miopenCreateTensorDescriptor(&unset);
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, unset, p.x, xd, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    /* One value per channel (M = 1) cannot be trained on. */
    miopenTensorDescriptor_t single, single_params;
    miopenCreateTensorDescriptor(&single);
    miopenCreateTensorDescriptor(&single_params);
    miopenSet4dTensorDescriptor(single, miopenFloat, 1, C, 1, 1);
    miopenDeriveBNTensorDescriptor(single_params, single, miopenBNSpatial);
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, single, p.x, single, p.y, single_params, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));
    /* In place with different strides. */
    miopenSetNdTensorDescriptorWithLayout(other, miopenFloat, miopenTensorNHWC, (const int[]){N, C, H, W}, 4);
    CHECK_REJECTED(miopenStatusBadParm, TRAIN(p.handle, S, alpha, beta, xd, p.y, other, p.y, pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5, p.save_mean, p.save_inv));

    /* Inference: exactly one estimate NULL. */
    CHECK_REJECTED(miopenStatusBadParm,
                   miopenBatchNormalizationForwardInference(p.handle, S, alpha, beta, xd, p.x, xd, p.y, pd, p.scale,
                                                            p.bias, p.run_mean, NULL, 1e-5));
    CHECK_REJECTED(miopenStatusBadParm,
                   miopenBatchNormalizationForwardInference_V2(p.handle, S, alpha, beta, xd, p.x, xd, p.y, pd, pd, NULL,
                                                               pd, p.scale, p.bias, p.run_mean, p.run_var, 1e-5));

    miopenDestroyTensorDescriptor(other);
    miopenDestroyTensorDescriptor(double_params);
    miopenDestroyTensorDescriptor(unset);
    miopenDestroyTensorDescriptor(single);
    miopenDestroyTensorDescriptor(single_params);
    teardown(&p);
#undef TRAIN
}

static void test_bad_backward_calls(void) {
    struct Problem p;
    setup(&p);
    const float one = 1.0f, zero = 0.0f;
    miopenTensorDescriptor_t xd = p.x_desc, pd = p.param_desc;
    const miopenBatchNormMode_t S = miopenBNSpatial;
    fill_random(p.save_mean, C, 9u, 0.0f);
    fill_random(p.save_inv, C, 10u, 2.0f);

#define BACKWARD_REJECTED(expected, call)                                 \
    do {                                                                  \
        fill_nan(p.dx, TOTAL);                                            \
        fill_nan(p.dscale, C);                                            \
        fill_nan(p.dbias, C);                                             \
        CHECK_STATUS(expected, call);                                     \
        CHECK(all_nan(p.dx, TOTAL) && all_nan(p.dscale, C) && all_nan(p.dbias, C)); \
    } while (0)
#define BWD(handle, ad, x, dy, dx, scale, ds, db, sm, si) \
    miopenBatchNormalizationBackward(handle, S, ad, &zero, &one, &zero, xd, x, xd, dy, xd, dx, pd, scale, ds, db, 1e-5, sm, si)

    BACKWARD_REJECTED(miopenStatusBadParm, BWD(NULL, &one, p.x, p.dy, p.dx, p.scale, p.dscale, p.dbias, p.save_mean, p.save_inv));
    BACKWARD_REJECTED(miopenStatusBadParm, BWD(p.handle, NULL, p.x, p.dy, p.dx, p.scale, p.dscale, p.dbias, p.save_mean, p.save_inv));
    BACKWARD_REJECTED(miopenStatusBadParm, BWD(p.handle, &one, NULL, p.dy, p.dx, p.scale, p.dscale, p.dbias, p.save_mean, p.save_inv));
    BACKWARD_REJECTED(miopenStatusBadParm, BWD(p.handle, &one, p.x, NULL, p.dx, p.scale, p.dscale, p.dbias, p.save_mean, p.save_inv));
    BACKWARD_REJECTED(miopenStatusBadParm, BWD(p.handle, &one, p.x, p.dy, NULL, p.scale, p.dscale, p.dbias, p.save_mean, p.save_inv));
    BACKWARD_REJECTED(miopenStatusBadParm, BWD(p.handle, &one, p.x, p.dy, p.dx, NULL, p.dscale, p.dbias, p.save_mean, p.save_inv));
    BACKWARD_REJECTED(miopenStatusBadParm, BWD(p.handle, &one, p.x, p.dy, p.dx, p.scale, NULL, p.dbias, p.save_mean, p.save_inv));
    BACKWARD_REJECTED(miopenStatusBadParm, BWD(p.handle, &one, p.x, p.dy, p.dx, p.scale, p.dscale, NULL, p.save_mean, p.save_inv));
    BACKWARD_REJECTED(miopenStatusBadParm, BWD(p.handle, &one, p.x, p.dy, p.dx, p.scale, p.dscale, p.dbias, NULL, p.save_inv));
    BACKWARD_REJECTED(miopenStatusBadParm, BWD(p.handle, &one, p.x, p.dy, p.dx, p.scale, p.dscale, p.dbias, p.save_mean, NULL));
    BACKWARD_REJECTED(miopenStatusBadParm,
                      miopenBatchNormalizationBackward(p.handle, S, &one, &zero, &one, &zero, xd, p.x, xd, p.dy, xd, p.dx,
                                                       pd, p.scale, p.dscale, p.dbias, -1e-5, NULL, NULL));
    /* dy and dx of different types. */
    miopenTensorDescriptor_t half_desc;
    miopenCreateTensorDescriptor(&half_desc);
    miopenSet4dTensorDescriptor(half_desc, miopenHalf, N, C, H, W);
    BACKWARD_REJECTED(miopenStatusBadParm,
                      miopenBatchNormalizationBackward(p.handle, S, &one, &zero, &one, &zero, xd, p.x, half_desc, p.dy, xd,
                                                       p.dx, pd, p.scale, p.dscale, p.dbias, 1e-5, NULL, NULL));
    /* float x with half gradients is not a supported combination. */
    BACKWARD_REJECTED(miopenStatusNotImplemented,
                      miopenBatchNormalizationBackward(p.handle, S, &one, &zero, &one, &zero, xd, p.x, half_desc, p.dy,
                                                       half_desc, p.dx, pd, p.scale, p.dscale, p.dbias, 1e-5, NULL, NULL));
    miopenDestroyTensorDescriptor(half_desc);
    teardown(&p);
#undef BWD
#undef BACKWARD_REJECTED
}

/* Group norm: G = 2 groups of C/G = 2 channels on the same packed NCHW x. */
enum { G = 2, CG = C / G, GROUP = CG * HW };

/* Mean and rstd of group g of sample n (two-pass, in double). */
static void group_stats(const float* x, int n, int g, double eps, double* mean, double* rstd) {
    const float* first = x + (n * C + g * CG) * HW;
    double sum = 0.0, sq = 0.0;
    for (int i = 0; i < GROUP; ++i) sum += first[i];
    *mean = sum / GROUP;
    for (int i = 0; i < GROUP; ++i) sq += (first[i] - *mean) * (first[i] - *mean);
    *rstd = 1.0 / sqrt(sq / GROUP + eps);
}

struct GnProblem {
    miopenHandle_t handle;
    miopenTensorDescriptor_t x_desc, param_desc, stats_desc;
    float x[TOTAL], y[TOTAL], dy[TOTAL], dx[TOTAL];
    float weight[C], bias[C], dweight[C], dbias[C], mean[N * G], rstd[N * G];
};

static void gn_setup(struct GnProblem* p) {
    const int stats_lens[] = {N, G};
    miopenBNCreateWithBackend(&p->handle, miopenBNBackendCPU);
    miopenCreateTensorDescriptor(&p->x_desc);
    miopenCreateTensorDescriptor(&p->param_desc);
    miopenCreateTensorDescriptor(&p->stats_desc);
    miopenSet4dTensorDescriptor(p->x_desc, miopenFloat, N, C, H, W);
    miopenSet4dTensorDescriptor(p->param_desc, miopenFloat, 1, C, 1, 1);
    miopenSetTensorDescriptor(p->stats_desc, miopenFloat, 2, stats_lens, NULL);
    fill_random(p->x, TOTAL, 11u, 1.0f);
    fill_random(p->dy, TOTAL, 12u, 0.0f);
    fill_random(p->weight, C, 13u, 1.5f);
    fill_random(p->bias, C, 14u, 0.0f);
}

static void gn_teardown(struct GnProblem* p) {
    miopenDestroyTensorDescriptor(p->x_desc);
    miopenDestroyTensorDescriptor(p->param_desc);
    miopenDestroyTensorDescriptor(p->stats_desc);
    miopenDestroy(p->handle);
}

static void test_group_norm_numerics(void) {
    struct GnProblem p;
    gn_setup(&p);
    const float eps = 1e-5f;
    fill_nan(p.y, TOTAL);
    fill_nan(p.mean, N * G);
    fill_nan(p.rstd, N * G);
    CHECK_STATUS(miopenStatusSuccess,
                 miopenGroupNormForward(p.handle, MIOPEN_WEIGHT_BIAS, p.x_desc, p.x, p.param_desc, p.weight,
                                        p.param_desc, p.bias, G, eps, p.x_desc, p.y, p.stats_desc, p.mean,
                                        p.stats_desc, p.rstd));
    float y_swish[TOTAL], y_plain[TOTAL];
    fill_nan(y_swish, TOTAL);
    fill_nan(y_plain, TOTAL);
    /* The extension with swish (beta 1.5), statistics not asked for. */
    CHECK_STATUS(miopenStatusSuccess,
                 miopenBNGroupNormForwardActivation(p.handle, MIOPEN_WEIGHT_BIAS, p.x_desc, p.x, p.param_desc,
                                                    p.weight, p.param_desc, p.bias, G, eps,
                                                    miopenBNActivationSwish, 1.5f, p.x_desc, y_swish, NULL, NULL,
                                                    NULL, NULL));
    /* Mode 0 ignores weight and bias, which may then be NULL. */
    CHECK_STATUS(miopenStatusSuccess,
                 miopenGroupNormForward(p.handle, MIOPEN_ELEMENTWISE_AFFINE, p.x_desc, p.x, NULL, NULL, NULL, NULL, G,
                                        eps, p.x_desc, y_plain, NULL, NULL, NULL, NULL));
    int ok = 1;
    for (int n = 0; n < N; ++n)
        for (int g = 0; g < G; ++g) {
            double mean, rstd;
            group_stats(p.x, n, g, eps, &mean, &rstd);
            ok &= close_to(p.mean[n * G + g], mean, 1e-5) && close_to(p.rstd[n * G + g], rstd, 1e-4);
            for (int c = g * CG; c < (g + 1) * CG; ++c)
                for (int i = 0; i < HW; ++i) {
                    const int at = (n * C + c) * HW + i;
                    const double xhat = (p.x[at] - mean) * rstd, z = xhat * p.weight[c] + p.bias[c];
                    ok &= close_to(p.y[at], z, 1e-5);
                    ok &= close_to(y_swish[at], z / (1.0 + exp(-1.5 * z)), 1e-5);
                    ok &= close_to(y_plain[at], xhat, 1e-5);
                }
        }
    CHECK(ok);

    /* Backward from the saved statistics, no activation. */
    fill_nan(p.dx, TOTAL);
    fill_nan(p.dweight, C);
    fill_nan(p.dbias, C);
    CHECK_STATUS(miopenStatusSuccess,
                 miopenBNGroupNormBackward(p.handle, MIOPEN_WEIGHT_BIAS, p.x_desc, p.x, p.x_desc, p.dy, p.param_desc,
                                           p.weight, NULL, NULL, p.stats_desc, p.mean, p.stats_desc, p.rstd, G,
                                           miopenBNActivationNone, 1.0f, p.x_desc, p.dx, p.param_desc, p.dweight,
                                           p.param_desc, p.dbias));
    double dweight[C] = {0}, dbias[C] = {0};
    ok = 1;
    for (int n = 0; n < N; ++n)
        for (int g = 0; g < G; ++g) {
            const double mean = p.mean[n * G + g], rstd = p.rstd[n * G + g];
            double sum_wg = 0.0, sum_wg_xhat = 0.0;
            for (int c = g * CG; c < (g + 1) * CG; ++c)
                for (int i = 0; i < HW; ++i) {
                    const int at = (n * C + c) * HW + i;
                    const double xhat = (p.x[at] - mean) * rstd;
                    sum_wg += p.weight[c] * p.dy[at];
                    sum_wg_xhat += p.weight[c] * p.dy[at] * xhat;
                    dbias[c] += p.dy[at];
                    dweight[c] += p.dy[at] * xhat;
                }
            for (int c = g * CG; c < (g + 1) * CG; ++c)
                for (int i = 0; i < HW; ++i) {
                    const int at = (n * C + c) * HW + i;
                    const double xhat = (p.x[at] - mean) * rstd;
                    const double want = rstd * (p.weight[c] * p.dy[at] - sum_wg / GROUP - xhat * sum_wg_xhat / GROUP);
                    ok &= close_to(p.dx[at], want, 1e-4);
                }
        }
    for (int c = 0; c < C; ++c) ok &= close_to(p.dweight[c], dweight[c], 1e-4) && close_to(p.dbias[c], dbias[c], 1e-4);
    CHECK(ok);
    gn_teardown(&p);
}

/* Each bad group-norm call returns its status and writes nothing. */
#define GN_REJECTED(expected, call)                                                   \
    do {                                                                              \
        fill_nan(p.y, TOTAL);                                                         \
        fill_nan(p.dx, TOTAL);                                                        \
        fill_nan(p.mean, N * G);                                                      \
        fill_nan(p.dweight, C);                                                       \
        CHECK_STATUS(expected, call);                                                 \
        CHECK(all_nan(p.y, TOTAL) && all_nan(p.dx, TOTAL) && all_nan(p.mean, N * G) && all_nan(p.dweight, C)); \
    } while (0)

static void test_bad_group_norm_calls(void) {
    struct GnProblem p;
    gn_setup(&p);
    fill_random(p.rstd, N * G, 15u, 2.0f);
    const miopenNormMode_t WB = MIOPEN_WEIGHT_BIAS;
    miopenTensorDescriptor_t xd = p.x_desc, pd = p.param_desc, sd = p.stats_desc;

#define FWD(handle, mode, xdesc, x, w, groups, eps, act, beta, ydesc, y, mdesc) \
    miopenBNGroupNormForwardActivation(handle, mode, xdesc, x, pd, w, pd, p.bias, groups, eps, act, beta, ydesc, y, \
                                       mdesc, p.mean, sd, p.rstd)
#define BWD(mode, dy, w, b, mean, rstd, act, dx, dw) \
    miopenBNGroupNormBackward(p.handle, mode, xd, p.x, xd, dy, pd, w, pd, b, sd, mean, sd, rstd, G, act, 1.0f, xd, \
                              dx, pd, dw, pd, p.dbias)

    const miopenBNActivation_t none = miopenBNActivationNone, swish = miopenBNActivationSwish;
    GN_REJECTED(miopenStatusBadParm, FWD(NULL, WB, xd, p.x, p.weight, G, 1e-5f, none, 1.0f, xd, p.y, sd));
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, (miopenNormMode_t)9, xd, p.x, p.weight, G, 1e-5f, none, 1.0f, xd, p.y, sd));
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, WB, NULL, p.x, p.weight, G, 1e-5f, none, 1.0f, xd, p.y, sd));
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, WB, xd, NULL, p.weight, G, 1e-5f, none, 1.0f, xd, p.y, sd));
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, WB, xd, p.x, p.weight, G, 1e-5f, none, 1.0f, xd, NULL, sd));
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, WB, xd, p.x, NULL, G, 1e-5f, none, 1.0f, xd, p.y, sd));
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, WB, xd, p.x, p.weight, 0, 1e-5f, none, 1.0f, xd, p.y, sd));
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, WB, xd, p.x, p.weight, 3, 1e-5f, none, 1.0f, xd, p.y, sd));
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, WB, xd, p.x, p.weight, C + 4, 1e-5f, none, 1.0f, xd, p.y, sd));
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, WB, xd, p.x, p.weight, G, -1.0f, none, 1.0f, xd, p.y, sd));
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, WB, xd, p.x, p.weight, G, NAN, none, 1.0f, xd, p.y, sd));
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, WB, xd, p.x, p.weight, G, 1e-5f, (miopenBNActivation_t)7, 1.0f, xd, p.y, sd));
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, WB, xd, p.x, p.weight, G, 1e-5f, swish, INFINITY, xd, p.y, sd));

    miopenTensorDescriptor_t other;
    miopenCreateTensorDescriptor(&other);
    /* y of other lengths or type; statistics of other lengths or type. */
    miopenSet4dTensorDescriptor(other, miopenFloat, N, C, H, W - 1);
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, WB, xd, p.x, p.weight, G, 1e-5f, none, 1.0f, other, p.y, sd));
    miopenSet4dTensorDescriptor(other, miopenHalf, N, C, H, W);
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, WB, xd, p.x, p.weight, G, 1e-5f, none, 1.0f, other, p.y, sd));
    const int wrong_stats[] = {N, G + 1};
    miopenSetTensorDescriptor(other, miopenFloat, 2, wrong_stats, NULL);
    GN_REJECTED(miopenStatusBadParm, FWD(p.handle, WB, xd, p.x, p.weight, G, 1e-5f, none, 1.0f, xd, p.y, other));
    const int stats_lens[] = {N, G};
    miopenSetTensorDescriptor(other, miopenHalf, 2, stats_lens, NULL);
    GN_REJECTED(miopenStatusNotImplemented, FWD(p.handle, WB, xd, p.x, p.weight, G, 1e-5f, none, 1.0f, xd, p.y, other));
    /* Groups of one value: C = G channels at a single position. */
    miopenSet4dTensorDescriptor(other, miopenFloat, N, C, 1, 1);
    const int one_value_stats[] = {N, C};
    miopenTensorDescriptor_t per_channel_stats;
    miopenCreateTensorDescriptor(&per_channel_stats);
    miopenSetTensorDescriptor(per_channel_stats, miopenFloat, 2, one_value_stats, NULL);
    GN_REJECTED(miopenStatusBadParm,
                miopenGroupNormForward(p.handle, WB, other, p.x, pd, p.weight, pd, p.bias, C, 1e-5f, other, p.y,
                                       per_channel_stats, p.mean, per_channel_stats, p.rstd));

    /* Backward: NULL statistics, gradients, or the bias a fused swish needs. */
    GN_REJECTED(miopenStatusBadParm, BWD(WB, p.dy, p.weight, NULL, NULL, p.rstd, none, p.dx, p.dweight));
    GN_REJECTED(miopenStatusBadParm, BWD(WB, p.dy, p.weight, NULL, p.mean, NULL, none, p.dx, p.dweight));
    GN_REJECTED(miopenStatusBadParm, BWD(WB, NULL, p.weight, NULL, p.mean, p.rstd, none, p.dx, p.dweight));
    GN_REJECTED(miopenStatusBadParm, BWD(WB, p.dy, p.weight, NULL, p.mean, p.rstd, none, NULL, p.dweight));
    GN_REJECTED(miopenStatusBadParm, BWD(WB, p.dy, p.weight, NULL, p.mean, p.rstd, none, p.dx, NULL));
    GN_REJECTED(miopenStatusBadParm, BWD(WB, p.dy, NULL, NULL, p.mean, p.rstd, none, p.dx, p.dweight));
    GN_REJECTED(miopenStatusBadParm, BWD(WB, p.dy, p.weight, NULL, p.mean, p.rstd, swish, p.dx, p.dweight));
    /* In mode 0 the weight and its gradients may be NULL. */
    fill_random(p.mean, N * G, 16u, 0.0f);
    fill_nan(p.dx, TOTAL);
    CHECK_STATUS(miopenStatusSuccess, BWD(MIOPEN_ELEMENTWISE_AFFINE, p.dy, NULL, NULL, p.mean, p.rstd, swish, p.dx, NULL));
    int finite = 1;
    for (int i = 0; i < TOTAL; ++i) finite &= isfinite(p.dx[i]) != 0;
    CHECK(finite);

    miopenDestroyTensorDescriptor(other);
    miopenDestroyTensorDescriptor(per_channel_stats);
    gn_teardown(&p);
#undef FWD
#undef BWD
}
#undef GN_REJECTED

/* Issue 25's entry points: size_t descriptors, the tuning policy,
 * activation descriptors, V3 training, inverse-std inference, a fused
 * activation (relu) and a fusion plan, against the plain calls. */
static void test_issue25_entry_points(void) {
    struct Problem p;
    setup(&p);
    const float alpha = 1.0f, beta = 0.0f, half = 0.5f;
    const double eps = 1e-5;

    miopenTensorDescriptor_t v2;
    miopenCreateTensorDescriptor(&v2);
    const size_t dims[4] = {N, C, H, W};
    CHECK_STATUS(miopenStatusSuccess, miopenSetTensorDescriptorV2(v2, miopenFloat, 4, dims, NULL));
    const size_t too_big[2] = {2, (size_t)1 << 63};
    CHECK_STATUS(miopenStatusBadParm, miopenSetTensorDescriptorV2(v2, miopenFloat, 2, too_big, NULL));

    miopenTuningPolicy_t policy;
    CHECK_STATUS(miopenStatusSuccess, miopenGetTuningPolicy(p.handle, &policy));
    CHECK(policy == miopenTuningPolicyNone);
    CHECK_STATUS(miopenStatusSuccess, miopenSetTuningPolicy(p.handle, miopenTuningPolicySearch));
    CHECK_STATUS(miopenStatusBadParm, miopenSetTuningPolicy(p.handle, (miopenTuningPolicy_t)0));
    CHECK_STATUS(miopenStatusSuccess, miopenGetTuningPolicy(p.handle, &policy));
    CHECK(policy == miopenTuningPolicySearch);

    miopenActivationDescriptor_t relu;
    CHECK_STATUS(miopenStatusSuccess, miopenCreateActivationDescriptor(&relu));
    CHECK_STATUS(miopenStatusSuccess, miopenSetActivationDescriptor(relu, miopenActivationRELU, 0.0, 0.0, 0.0));
    CHECK_STATUS(miopenStatusBadParm, miopenSetActivationDescriptor(relu, (miopenActivationMode_t)11, 0, 0, 0));
    miopenActivationMode_t mode;
    CHECK_STATUS(miopenStatusSuccess, miopenGetActivationDescriptor(relu, &mode, NULL, NULL, NULL));
    CHECK(mode == miopenActivationRELU);

    /* V3 from separate buffers: the previous ones stay, the next ones match V2 in place. */
    float prev_mean[C], prev_var[C], next_mean[C], next_var[C], y3[TOTAL];
    memcpy(prev_mean, p.run_mean, sizeof prev_mean);
    memcpy(prev_var, p.run_var, sizeof prev_var);
    fill_nan(next_mean, C);
    fill_nan(next_var, C);
    CHECK_STATUS(miopenStatusSuccess,
                 miopenBatchNormalizationForwardTraining_V3(
                     p.handle, miopenBNSpatial, (void*)&alpha, (void*)&beta, v2, p.x, v2, y3, p.param_desc,
                     p.param_desc, p.param_desc, p.param_desc, p.scale, p.bias, 0.25, prev_mean, prev_var,
                     next_mean, next_var, eps, p.save_mean, p.save_inv));
    CHECK_STATUS(miopenStatusSuccess,
                 miopenBatchNormalizationForwardTraining_V2(
                     p.handle, miopenBNSpatial, (void*)&alpha, (void*)&beta, p.x_desc, p.x, p.x_desc, p.y,
                     p.param_desc, p.param_desc, p.param_desc, p.param_desc, p.scale, p.bias, 0.25, p.run_mean,
                     p.run_var, eps, NULL, NULL));
    CHECK(memcmp(prev_mean, p.run_mean, sizeof prev_mean) != 0);
    CHECK(memcmp(next_mean, p.run_mean, sizeof next_mean) == 0 && memcmp(next_var, p.run_var, sizeof next_var) == 0);
    CHECK(memcmp(y3, p.y, sizeof y3) == 0);

    /* Inference from the saved inverse std reproduces training's y; with relu fused, max(0, y). */
    float yi[TOTAL], ya[TOTAL];
    fill_nan(yi, TOTAL);
    CHECK_STATUS(miopenStatusSuccess,
                 miopenBatchNormalizationForwardInferenceInvVariance(
                     p.handle, miopenBNSpatial, (void*)&alpha, (void*)&beta, p.x_desc, p.x, p.x_desc, yi,
                     p.param_desc, p.param_desc, p.param_desc, p.param_desc, p.scale, p.bias, p.save_mean,
                     p.save_inv));
    fill_nan(ya, TOTAL);
    CHECK_STATUS(miopenStatusSuccess,
                 miopenBatchNormForwardInferenceActivationInvVariance(
                     p.handle, miopenBNSpatial, (void*)&half, (void*)&beta, p.x_desc, p.x, p.x_desc, ya,
                     p.param_desc, p.param_desc, p.param_desc, p.param_desc, p.scale, p.bias, p.save_mean,
                     p.save_inv, relu));
    int ok = 1;
    for (int at = 0; at < TOTAL; ++at) {
        ok &= close_to(yi[at], p.y[at], 1e-5);
        ok &= close_to(ya[at], 0.5 * (p.y[at] > 0 ? p.y[at] : 0.0), 1e-5);
    }
    CHECK(ok);
    CHECK_STATUS(miopenStatusNotImplemented,
                 miopenBatchNormForwardInferenceActivation(
                     p.handle, miopenBNSpatial, (void*)&alpha, (void*)&half, p.x_desc, p.x, p.x_desc, ya,
                     p.param_desc, p.param_desc, p.param_desc, p.param_desc, p.scale, p.bias, p.run_mean,
                     p.run_var, eps, relu));

    /* The same through a fusion plan; a bias op makes a plan unsupported. */
    miopenFusionPlanDescriptor_t plan;
    miopenFusionOpDescriptor_t bn_op, act_op, bias_op;
    miopenOperatorArgs_t args;
    CHECK_STATUS(miopenStatusSuccess, miopenCreateFusionPlan(&plan, miopenVerticalFusion, p.x_desc));
    CHECK_STATUS(miopenStatusSuccess, miopenCreateOpBatchNormInference(plan, &bn_op, miopenBNSpatial, p.param_desc));
    CHECK_STATUS(miopenStatusSuccess, miopenCreateOpActivationForward(plan, &act_op, miopenActivationRELU));
    CHECK_STATUS(miopenStatusSuccess, miopenCompileFusionPlan(p.handle, plan));
    CHECK_STATUS(miopenStatusSuccess, miopenCreateOperatorArgs(&args));
    CHECK_STATUS(miopenStatusSuccess, miopenSetOpArgsBatchNormInference(args, bn_op, &alpha, &beta, p.scale, p.bias,
                                                                        p.run_mean, p.run_var, eps));
    CHECK_STATUS(miopenStatusSuccess, miopenSetOpArgsActivForward(args, act_op, &alpha, &beta, 0.0, 0.0, 0.0));
    fill_nan(ya, TOTAL);
    CHECK_STATUS(miopenStatusSuccess, miopenExecuteFusionPlan(p.handle, plan, p.x_desc, p.x, p.x_desc, ya, args));
    ok = 1;
    for (int at = 0; at < TOTAL; ++at) {
        const int c = (at / HW) % C;
        const double z = p.scale[c] * (p.x[at] - p.run_mean[c]) / sqrt((double)p.run_var[c] + eps) + p.bias[c];
        ok &= close_to(ya[at], z > 0 ? z : 0.0, 1e-5);
    }
    CHECK(ok);
    CHECK_STATUS(miopenStatusSuccess, miopenCreateOpBiasForward(plan, &bias_op, p.param_desc));
    CHECK_STATUS(miopenStatusUnsupportedOp, miopenCompileFusionPlan(p.handle, plan));
    CHECK_STATUS(miopenStatusSuccess, miopenDestroyOperatorArgs(args));
    CHECK_STATUS(miopenStatusSuccess, miopenDestroyFusionPlan(plan));
    CHECK_STATUS(miopenStatusSuccess, miopenDestroyActivationDescriptor(relu));
    CHECK_STATUS(miopenStatusBadParm, miopenDestroyActivationDescriptor(relu));
    miopenDestroyTensorDescriptor(v2);
    teardown(&p);
}

int main(void) {
    test_error_strings();
    test_handles();
    test_descriptors();
    test_derive();
    test_training_numerics();
    test_bad_training_calls();
    test_bad_backward_calls();
    test_group_norm_numerics();
    test_bad_group_norm_calls();
    test_issue25_entry_points();
    return report();
}
