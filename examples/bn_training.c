/* Batch-norm training forward: normalizes x with its batch statistics,
 * saves the mean and inverse standard deviation for backward, and updates
 * the running statistics (running = (1 - f) * running + f * batch, with the
 * unbiased variance), for fp32/fp16/bf16 x and y, fp32 parameters, NCHW and
 * NHWC, validated against a double-precision CPU reference.
 *
 * HIPDNN_LOG_LEVEL=info prints each step; the exit status is 1 when any case
 * fails validation. */
#include "common.h"

#define EXP_AVG_FACTOR 0.1

static int training_case(miopenHandle_t handle, miopenDataType_t type, int nhwc) {
    Random random = {(uint64_t)type * 2 + (uint64_t)nhwc + 101};
    Tensor x, y;
    tensor_create(&x, "x", type, nhwc);
    tensor_create(&y, "y", type, nhwc);
    miopenTensorDescriptor_t param = param_descriptor(&x);
    float scale[EXAMPLE_C], bias[EXAMPLE_C], running_mean[EXAMPLE_C], running_var[EXAMPLE_C];
    float saved_mean[EXAMPLE_C], saved_inv_std[EXAMPLE_C];
    fill_activations(&x, &random);
    tensor_poison(&y);
    fill_params(scale, &random, 0.5, 1.5);
    fill_params(bias, &random, -0.5, 0.5);
    fill_params(running_mean, &random, -0.2, 0.2);
    fill_params(running_var, &random, 0.5, 1.5);
    poison_params(saved_mean);
    poison_params(saved_inv_std);
    double old_mean[EXAMPLE_C], old_var[EXAMPLE_C];
    for (int c = 0; c < EXAMPLE_C; ++c) {
        old_mean[c] = running_mean[c];
        old_var[c] = running_var[c];
    }

    const float alpha = 1.0f, beta = 0.0f;
    info("run    miopenBatchNormalizationForwardTraining, epsilon %g, exponential average factor %g",
         EXAMPLE_EPSILON, EXP_AVG_FACTOR);
    CHECK_CALL(miopenBatchNormalizationForwardTraining(
        handle, miopenBNSpatial, (void*)&alpha, (void*)&beta, x.desc, x.data, y.desc, y.data, param, scale, bias,
        EXP_AVG_FACTOR, running_mean, running_var, EXAMPLE_EPSILON, saved_mean, saved_inv_std));

    const double count = (double)EXAMPLE_N * EXAMPLE_H * EXAMPLE_W;
    double* expected_y = malloc(tensor_count() * sizeof *expected_y);
    double mean[EXAMPLE_C], var[EXAMPLE_C], inv_std[EXAMPLE_C], new_mean[EXAMPLE_C], new_var[EXAMPLE_C];
    for (int c = 0; c < EXAMPLE_C; ++c) {
        channel_statistics(&x, c, &mean[c], &var[c]);
        inv_std[c] = 1.0 / sqrt(var[c] + EXAMPLE_EPSILON);
        new_mean[c] = (1.0 - EXP_AVG_FACTOR) * old_mean[c] + EXP_AVG_FACTOR * mean[c];
        new_var[c] = (1.0 - EXP_AVG_FACTOR) * old_var[c] + EXP_AVG_FACTOR * var[c] * count / (count - 1.0);
    }
    size_t i = 0;
    for (int n = 0; n < EXAMPLE_N; ++n)
        for (int c = 0; c < EXAMPLE_C; ++c)
            for (int h = 0; h < EXAMPLE_H; ++h)
                for (int w = 0; w < EXAMPLE_W; ++w)
                    expected_y[i++] = scale[c] * (tensor_get(&x, n, c, h, w) - mean[c]) * inv_std[c] + bias[c];

    int passed = 1;
    Comparison cmp = comparison_start("y", type, 0);
    compare_tensor(&cmp, &y, expected_y);
    passed &= comparison_passed(&cmp);
    struct {
        const char* name;
        const float* got;
        const double* expected;
    } params[4] = {{"saved mean", saved_mean, mean},
                   {"saved inv std", saved_inv_std, inv_std},
                   {"running mean", running_mean, new_mean},
                   {"running var", running_var, new_var}};
    for (int p = 0; p < 4; ++p) {
        cmp = comparison_start(params[p].name, miopenFloat, 1);
        compare_params(&cmp, params[p].got, params[p].expected);
        passed &= comparison_passed(&cmp);
    }

    free(expected_y);
    miopenDestroyTensorDescriptor(param);
    tensor_destroy(&y);
    tensor_destroy(&x);
    return passed;
}

int main(void) { return run_example("bn_training", training_case); }
