#include "bn_split_problem_builder.hpp"

#include "bn_checker.hpp"
#include "validation.hpp"

#include <cmath>

namespace mbn {
namespace {

// A merge output: (1, rest of the partials' lengths), any compute type,
// accessible, each element in its own place.
class MergeOutputs {
public:
    MergeOutputs(const Backend& backend, const TensorDesc& partial_desc, const TensorArg& partials)
        : backend_(backend), partial_desc_(partial_desc), expected_(partials.len) {
        expected_[kN] = 1;
    }

    // The descriptor of a pair of outputs, fixing their type.
    TensorDesc pair_descriptor(const miopenTensorDescriptor* desc_ptr, const char* name) {
        const TensorDesc desc = require_descriptor(desc_ptr, name);
        require(desc.rank == partial_desc_.rank, miopenStatusBadParm, name, " has rank ", desc.rank,
                " but partialDesc has rank ", partial_desc_.rank);
        dtype_ = checked_io_dtype(desc, name);
        Lengths got = normalize(desc, nullptr, dtype_).len;
        require(got == expected_, miopenStatusBadParm, name, " (", desc, ") must have partialDesc's lengths (",
                partial_desc_, ") with the first replaced by 1");
        return desc;
    }

    TensorArg output(const TensorDesc& desc, void* data, const char* what) const {
        require_pointer(data, what);
        backend_.check_accessible(data, what);
        TensorArg t = normalize(desc, data, dtype_);
        require_distinct_elements(t, what);
        return t;
    }

private:
    const Backend& backend_;
    const TensorDesc partial_desc_;  // a snapshot: see tensor_descriptor.hpp
    Lengths expected_;
    DType dtype_ = DType::f32;
};

}  // namespace

BnLocalStatistics build_local_statistics(const Backend& backend, const BnLocalStatisticsCall& call) {
    BnChecker check(backend, call.mode, call.x_desc, call.x);
    BnLocalStatistics p;
    p.geom = check.geometry();
    p.x = check.x();
    check.set_stats_dtype(call.stats_desc);
    p.count = check.stats_output(call.stats_desc, call.count, "count");
    p.mean = check.stats_output(call.stats_desc, call.mean, "mean");
    p.m2 = check.stats_output(call.stats_desc, call.m2, "m2");
    require_no_aliasing({{p.x, "x", false}, {p.count, "count", true}, {p.mean, "mean", true}, {p.m2, "m2", true}},
                        {});
    return p;
}

BnMergeStatistics build_merge_statistics(const Backend& backend, const BnMergeStatisticsCall& call) {
    const TensorDesc partial_desc = require_descriptor(call.partial_desc, "partialDesc");
    require(partial_desc.rank >= 2 && partial_desc.rank <= 5, miopenStatusBadParm, "partialDesc has rank ",
            partial_desc.rank, " (batch norm takes ranks 2 to 5)");
    require(partial_desc.dtype == miopenFloat || partial_desc.dtype == miopenDouble, miopenStatusNotImplemented,
            "partial statistics of type ", miopen_dtype_name(partial_desc.dtype),
            " (they must be miopenFloat or miopenDouble)");
    const DType stats = partial_desc.dtype == miopenFloat ? DType::f32 : DType::f64;
    BnMergeStatistics p;
    const std::pair<const void*, const char*> partials[] = {
        {call.count, "partialCount"}, {call.mean, "partialMean"}, {call.m2, "partialM2"}};
    TensorArg* targets[] = {&p.count, &p.mean, &p.m2};
    for (int i = 0; i < 3; ++i) {
        require_pointer(partials[i].first, partials[i].second);
        backend.check_accessible(partials[i].first, partials[i].second);
        *targets[i] = normalize(partial_desc, partials[i].first, stats);
    }

    MergeOutputs outputs(backend, partial_desc, p.count);
    const TensorDesc saved_desc = outputs.pair_descriptor(call.saved_desc, "savedDesc");
    p.saved_mean = outputs.output(saved_desc, call.saved_mean, "savedMean");
    p.saved_inv_std = outputs.output(saved_desc, call.saved_inv_std, "savedInvStd");
    if (pair_present(call.running_mean, call.running_var, "runningMean", "runningVariance")) {
        const TensorDesc running_desc = outputs.pair_descriptor(call.running_desc, "runningDesc");
        p.running_mean = outputs.output(running_desc, call.running_mean, "runningMean");
        p.running_var = outputs.output(running_desc, call.running_var, "runningVariance");
        require(std::isfinite(call.exp_avg_factor), miopenStatusBadParm, "expAvgFactor is ", call.exp_avg_factor,
                " (must be finite)");
    }
    check_epsilon(call.epsilon);
    p.epsilon = call.epsilon;
    p.exp_avg_factor = call.exp_avg_factor;
    require_no_aliasing({{p.count, "partialCount", false},
                         {p.mean, "partialMean", false},
                         {p.m2, "partialM2", false},
                         {p.saved_mean, "savedMean", true},
                         {p.saved_inv_std, "savedInvStd", true},
                         {p.running_mean, "runningMean", true},
                         {p.running_var, "runningVariance", true}},
                        {});
    return p;
}

BnNormalize build_normalize(const Backend& backend, const BnNormalizeCall& call) {
    BnChecker check(backend, call.mode, call.x_desc, call.x);
    BnNormalize p;
    p.geom = check.geometry();
    p.out = read_blend(call.alpha, call.beta, "alpha", "beta");
    p.x = check.x();
    p.y = check.output_like_x(call.y_desc, call.y);
    p.scale = check.param_tensor(call.param_desc, call.scale, "bnScale");
    p.bias = check.param_tensor(call.param_desc, call.bias, "bnBias");
    p.mean = check.param_tensor(call.param_desc, call.mean, "mean");
    p.inv_std = check.param_tensor(call.param_desc, call.inv_std, "invStd");
    require_no_aliasing({{p.x, "x", false},
                         {p.y, "y", true},
                         {p.scale, "bnScale", false},
                         {p.bias, "bnBias", false},
                         {p.mean, "mean", false},
                         {p.inv_std, "invStd", false}},
                        {{"x", "y"}});
    return p;
}

BnBackwardReduce build_backward_reduce(const Backend& backend, const BnBackwardReduceCall& call) {
    BnChecker check(backend, call.mode, call.x_desc, call.x);
    BnBackwardReduce p;
    p.geom = check.geometry();
    p.param = read_blend(call.alpha_param, call.beta_param, "alphaParamDiff", "betaParamDiff");
    p.x = check.x();
    p.dy = check.gradient_input(call.dy_desc, call.dy);
    p.mean = check.param_tensor(call.param_desc, call.mean, "mean");
    p.inv_std = check.param_tensor(call.param_desc, call.inv_std, "invStd");
    pair_present(call.dscale, call.dbias, "resultBnScaleDiff", "resultBnBiasDiff");
    p.dscale = check.param_output(call.param_desc, call.dscale, "resultBnScaleDiff", true);
    p.dbias = check.param_output(call.param_desc, call.dbias, "resultBnBiasDiff", true);
    check.set_stats_dtype(call.sums_desc);
    p.sum_dy = check.stats_output(call.sums_desc, call.sum_dy, "sumDy");
    p.sum_dy_xmu = check.stats_output(call.sums_desc, call.sum_dy_xmu, "sumDyXmu");
    require_no_aliasing({{p.x, "x", false},
                         {p.dy, "dy", false},
                         {p.mean, "mean", false},
                         {p.inv_std, "invStd", false},
                         {p.dscale, "resultBnScaleDiff", true},
                         {p.dbias, "resultBnBiasDiff", true},
                         {p.sum_dy, "sumDy", true},
                         {p.sum_dy_xmu, "sumDyXmu", true}},
                        {});
    return p;
}

BnBackwardElementwise build_backward_elementwise(const Backend& backend, const BnBackwardElementwiseCall& call) {
    BnChecker check(backend, call.mode, call.x_desc, call.x);
    BnBackwardElementwise p;
    p.geom = check.geometry();
    p.data = read_blend(call.alpha_data, call.beta_data, "alphaDataDiff", "betaDataDiff");
    p.x = check.x();
    const BnChecker::Gradients g = check.gradients(call.dy_desc, call.dy, call.dx_desc, call.dx);
    p.dy = g.dy;
    p.dx = g.dx;
    p.scale = check.param_tensor(call.param_desc, call.scale, "bnScale");
    p.mean = check.param_tensor(call.param_desc, call.mean, "mean");
    p.inv_std = check.param_tensor(call.param_desc, call.inv_std, "invStd");
    check.set_stats_dtype(call.sums_desc);
    p.sum_dy = check.stats_tensor(call.sums_desc, call.sum_dy, "sumDy");
    p.sum_dy_xmu = check.stats_tensor(call.sums_desc, call.sum_dy_xmu, "sumDyXmu");
    p.count = check.stats_tensor(call.sums_desc, call.count, "count");
    require_no_aliasing({{p.x, "x", false},
                         {p.dy, "dy", false},
                         {p.dx, "dx", true},
                         {p.scale, "bnScale", false},
                         {p.mean, "mean", false},
                         {p.inv_std, "invStd", false},
                         {p.sum_dy, "sumDy", false},
                         {p.sum_dy_xmu, "sumDyXmu", false},
                         {p.count, "count", false}},
                        {{"dy", "dx"}, {"x", "dx"}});
    return p;
}

}  // namespace mbn
