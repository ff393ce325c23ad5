/* Batch-norm inference: y = scale * (x - mean) / sqrt(var + epsilon) + bias
 * with estimated statistics, for fp32/fp16/bf16 x and y, fp32 parameters,
 * NCHW and NHWC, validated against a double-precision CPU reference.
 *
 * HIPDNN_LOG_LEVEL=info prints each step; the exit status is 1 when any case
 * fails validation. */
#include "common.h"

static int inference_case(miopenHandle_t handle, miopenDataType_t type, int nhwc) {
    Random random = {(uint64_t)type * 2 + (uint64_t)nhwc + 1};
    Tensor x, y;
    tensor_create(&x, "x", type, nhwc);
    tensor_create(&y, "y", type, nhwc);
    miopenTensorDescriptor_t param = param_descriptor(&x);
    float scale[EXAMPLE_C], bias[EXAMPLE_C], mean[EXAMPLE_C], var[EXAMPLE_C];
    fill_activations(&x, &random);
    tensor_poison(&y);
    fill_params(scale, &random, 0.5, 1.5);
    fill_params(bias, &random, -0.5, 0.5);
    fill_params(mean, &random, -2.0, 2.0);
    fill_params(var, &random, 0.25, 4.0);

    const float alpha = 1.0f, beta = 0.0f;
    info("run    miopenBatchNormalizationForwardInference, epsilon %g", EXAMPLE_EPSILON);
    CHECK_CALL(miopenBatchNormalizationForwardInference(handle, miopenBNSpatial, (void*)&alpha, (void*)&beta, x.desc,
                                                        x.data, y.desc, y.data, param, scale, bias, mean, var,
                                                        EXAMPLE_EPSILON));

    /* The reference reads x as stored (already rounded to its type). */
    double* expected = malloc(tensor_count() * sizeof *expected);
    size_t i = 0;
    for (int n = 0; n < EXAMPLE_N; ++n)
        for (int c = 0; c < EXAMPLE_C; ++c) {
            const double inv_std = 1.0 / sqrt((double)var[c] + EXAMPLE_EPSILON);
            for (int h = 0; h < EXAMPLE_H; ++h)
                for (int w = 0; w < EXAMPLE_W; ++w)
                    expected[i++] = scale[c] * (tensor_get(&x, n, c, h, w) - mean[c]) * inv_std + bias[c];
        }
    Comparison cmp = comparison_start("y", type, 0);
    compare_tensor(&cmp, &y, expected);
    const int passed = comparison_passed(&cmp);

    free(expected);
    miopenDestroyTensorDescriptor(param);
    tensor_destroy(&y);
    tensor_destroy(&x);
    return passed;
}

int main(void) { return run_example("bn_inference", inference_case); }
