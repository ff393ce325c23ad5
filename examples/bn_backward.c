/* Batch-norm backward from the saved statistics of a training forward:
 * dx, dscale = sum(dy * xhat) and dbias = sum(dy), for fp32/fp16/bf16 x, dy
 * and dx, fp32 parameters, NCHW and NHWC, validated against a
 * double-precision CPU reference.
 *
 * HIPDNN_LOG_LEVEL=info prints each step; the exit status is 1 when any case
 * fails validation. */
#include "common.h"

static int backward_case(miopenHandle_t handle, miopenDataType_t type, int nhwc) {
    Random random = {(uint64_t)type * 2 + (uint64_t)nhwc + 201};
    Tensor x, dy, dx;
    tensor_create(&x, "x", type, nhwc);
    tensor_create(&dy, "dy", type, nhwc);
    tensor_create(&dx, "dx", type, nhwc);
    miopenTensorDescriptor_t param = param_descriptor(&x);
    float scale[EXAMPLE_C], dscale[EXAMPLE_C], dbias[EXAMPLE_C], saved_mean[EXAMPLE_C], saved_inv_std[EXAMPLE_C];
    fill_activations(&x, &random);
    fill_uniform(&dy, &random, -1.0, 1.0);
    tensor_poison(&dx);
    fill_params(scale, &random, 0.5, 1.5);
    poison_params(dscale);
    poison_params(dbias);
    /* What training forward would have saved, stored as fp32. */
    for (int c = 0; c < EXAMPLE_C; ++c) {
        double mean, var;
        channel_statistics(&x, c, &mean, &var);
        saved_mean[c] = (float)mean;
        saved_inv_std[c] = (float)(1.0 / sqrt(var + EXAMPLE_EPSILON));
    }

    const float one = 1.0f, zero = 0.0f;
    info("run    miopenBatchNormalizationBackward with saved mean and inverse std");
    CHECK_CALL(miopenBatchNormalizationBackward(handle, miopenBNSpatial, &one, &zero, &one, &zero, x.desc, x.data,
                                                dy.desc, dy.data, dx.desc, dx.data, param, scale, dscale, dbias,
                                                EXAMPLE_EPSILON, saved_mean, saved_inv_std));

    /* dx = scale * inv_std / M * (M * dy - dbias - xhat * dscale). */
    const double count = (double)EXAMPLE_N * EXAMPLE_H * EXAMPLE_W;
    double expected_dscale[EXAMPLE_C], expected_dbias[EXAMPLE_C];
    double* expected_dx = malloc(tensor_count() * sizeof *expected_dx);
    for (int c = 0; c < EXAMPLE_C; ++c) {
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (int n = 0; n < EXAMPLE_N; ++n)
            for (int h = 0; h < EXAMPLE_H; ++h)
                for (int w = 0; w < EXAMPLE_W; ++w) {
                    const double g = tensor_get(&dy, n, c, h, w);
                    sum_dy += g;
                    sum_dy_xhat += g * (tensor_get(&x, n, c, h, w) - saved_mean[c]) * saved_inv_std[c];
                }
        expected_dbias[c] = sum_dy;
        expected_dscale[c] = sum_dy_xhat;
    }
    size_t i = 0;
    for (int n = 0; n < EXAMPLE_N; ++n)
        for (int c = 0; c < EXAMPLE_C; ++c)
            for (int h = 0; h < EXAMPLE_H; ++h)
                for (int w = 0; w < EXAMPLE_W; ++w) {
                    const double xhat = (tensor_get(&x, n, c, h, w) - saved_mean[c]) * saved_inv_std[c];
                    expected_dx[i++] = scale[c] * saved_inv_std[c] / count *
                                       (count * tensor_get(&dy, n, c, h, w) - expected_dbias[c] -
                                        xhat * expected_dscale[c]);
                }

    int passed = 1;
    Comparison cmp = comparison_start("dx", type, 0);
    compare_tensor(&cmp, &dx, expected_dx);
    passed &= comparison_passed(&cmp);
    cmp = comparison_start("dscale", miopenFloat, 1);
    compare_params(&cmp, dscale, expected_dscale);
    passed &= comparison_passed(&cmp);
    cmp = comparison_start("dbias", miopenFloat, 1);
    compare_params(&cmp, dbias, expected_dbias);
    passed &= comparison_passed(&cmp);

    free(expected_dx);
    miopenDestroyTensorDescriptor(param);
    tensor_destroy(&dx);
    tensor_destroy(&dy);
    tensor_destroy(&x);
    return passed;
}

int main(void) { return run_example("bn_backward", backward_case); }
