/* The program every consumer project of tests/consumers builds: MIOpen code
 * (only <miopen/miopen.h> and MIOpen's entry points) that runs a batch-norm
 * training forward and a backward on a small NCHW float tensor and checks
 * every output against a double-precision reference computed here.  Exits 0
 * and prints one "ok" line when all match, 1 otherwise.  Run it with
 * MIOPEN_BN_BACKEND=cpu to pin the CPU backend on a GPU build. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <miopen/miopen.h>

enum { N = 3, C = 4, H = 5, W = 6, HW = H * W, COUNT = N * C * HW, M = N * HW };

static const double epsilon = 1e-5, momentum = 0.1;
static int failures = 0;

#define CALL(expr)                                                                     \
    do {                                                                               \
        miopenStatus_t status_ = (expr);                                               \
        if (status_ != miopenStatusSuccess) {                                          \
            fprintf(stderr, "%s failed: %s: %s\n", #expr, miopenGetErrorString(status_), \
                    miopenBNGetLastErrorMessage());                                    \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static void expect(const char* name, int index, double got, double want) {
    if (!(fabs(got - want) <= 1e-4 * (1.0 + fabs(want)))) {
        if (failures++ < 10) fprintf(stderr, "%s[%d] = %.9g, expected %.9g\n", name, index, got, want);
    }
}

/* Deterministic values in [low, high): the check needs no random seed. */
static float next_value(unsigned* state, float low, float high) {
    *state = *state * 1664525u + 1013904223u;
    return low + (high - low) * (float)(*state >> 8) / 16777216.0f;
}

int main(void) {
    static float x[COUNT], dy[COUNT], y[COUNT], dx[COUNT];
    float scale[C], bias[C], running_mean[C], running_var[C], saved_mean[C], saved_inv_std[C];
    float dscale[C], dbias[C];
    unsigned state = 12345u;
    for (int i = 0; i < COUNT; ++i) {
        x[i] = next_value(&state, -2.0f, 3.0f);
        dy[i] = next_value(&state, -1.0f, 1.0f);
        y[i] = dx[i] = NAN;
    }
    for (int c = 0; c < C; ++c) {
        scale[c] = next_value(&state, 0.5f, 1.5f);
        bias[c] = next_value(&state, -0.5f, 0.5f);
        running_mean[c] = 0.25f * (float)c;
        running_var[c] = 1.0f + 0.5f * (float)c;
        saved_mean[c] = saved_inv_std[c] = dscale[c] = dbias[c] = NAN;
    }
    const float old_mean[C] = {running_mean[0], running_mean[1], running_mean[2], running_mean[3]};
    const float old_var[C] = {running_var[0], running_var[1], running_var[2], running_var[3]};

    size_t major = 0, minor = 0, patch = 0;
    CALL(miopenBNGetLibraryVersion(&major, &minor, &patch));
    if (major != MIOPEN_BN_VERSION_MAJOR || minor != MIOPEN_BN_VERSION_MINOR || patch != MIOPEN_BN_VERSION_PATCH) {
        fprintf(stderr, "library %zu.%zu.%zu, header %d.%d.%d\n", major, minor, patch, MIOPEN_BN_VERSION_MAJOR,
                MIOPEN_BN_VERSION_MINOR, MIOPEN_BN_VERSION_PATCH);
        return 1;
    }

    miopenHandle_t handle;
    miopenTensorDescriptor_t x_desc, param_desc;
    const float one = 1.0f, zero = 0.0f;
    CALL(miopenCreate(&handle));
    CALL(miopenCreateTensorDescriptor(&x_desc));
    CALL(miopenCreateTensorDescriptor(&param_desc));
    CALL(miopenSet4dTensorDescriptor(x_desc, miopenFloat, N, C, H, W));
    CALL(miopenDeriveBNTensorDescriptor(param_desc, x_desc, miopenBNSpatial));
    CALL(miopenBatchNormalizationForwardTraining(handle, miopenBNSpatial, (void*)&one, (void*)&zero, x_desc, x,
                                                 x_desc, y, param_desc, scale, bias, momentum, running_mean,
                                                 running_var, epsilon, saved_mean, saved_inv_std));
    CALL(miopenBatchNormalizationBackward(handle, miopenBNSpatial, &one, &zero, &one, &zero, x_desc, x, x_desc, dy,
                                          x_desc, dx, param_desc, scale, dscale, dbias, epsilon, saved_mean,
                                          saved_inv_std));

    for (int c = 0; c < C; ++c) {
        double sum = 0.0, squares = 0.0;
        for (int n = 0; n < N; ++n)
            for (int i = 0; i < HW; ++i) sum += x[(n * C + c) * HW + i];
        const double mean = sum / M;
        for (int n = 0; n < N; ++n)
            for (int i = 0; i < HW; ++i) {
                const double d = x[(n * C + c) * HW + i] - mean;
                squares += d * d;
            }
        const double var = squares / M, inv_std = 1.0 / sqrt(var + epsilon);
        expect("saved_mean", c, saved_mean[c], mean);
        expect("saved_inv_std", c, saved_inv_std[c], inv_std);
        expect("running_mean", c, running_mean[c], (1.0 - momentum) * old_mean[c] + momentum * mean);
        expect("running_var", c, running_var[c], (1.0 - momentum) * old_var[c] + momentum * var * M / (M - 1));

        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (int n = 0; n < N; ++n)
            for (int i = 0; i < HW; ++i) {
                const int at = (n * C + c) * HW + i;
                const double xhat = (x[at] - mean) * inv_std;
                expect("y", at, y[at], scale[c] * xhat + bias[c]);
                sum_dy += dy[at];
                sum_dy_xhat += dy[at] * xhat;
            }
        expect("dbias", c, dbias[c], sum_dy);
        expect("dscale", c, dscale[c], sum_dy_xhat);
        for (int n = 0; n < N; ++n)
            for (int i = 0; i < HW; ++i) {
                const int at = (n * C + c) * HW + i;
                const double xhat = (x[at] - mean) * inv_std;
                expect("dx", at, dx[at], scale[c] * inv_std / M * (M * dy[at] - sum_dy - xhat * sum_dy_xhat));
            }
    }

    CALL(miopenDestroyTensorDescriptor(param_desc));
    CALL(miopenDestroyTensorDescriptor(x_desc));
    CALL(miopenDestroy(handle));
    if (failures) {
        fprintf(stderr, "%d mismatches\n", failures);
        return 1;
    }
    printf("ok: miopen-bn %zu.%zu.%zu, training forward and backward match the reference\n", major, minor, patch);
    return 0;
}
