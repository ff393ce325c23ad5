// Fusion-plan entry points for plans of batch norm and activation ops: a
// plan records its ops, compiling checks they form one of the supported
// sequences (anything else is UnsupportedOp, MIOpen's fall-back signal), and
// executing runs the matching batch-norm call (bn_run.hpp) with the
// activation fused, through the same checks as the entry points.
#include "activation_descriptor.hpp"
#include "api_guard.hpp"
#include "bn_run.hpp"
#include "handle.hpp"
#include "live_objects.hpp"
#include "logging.hpp"
#include "validation.hpp"

#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace mbn {
namespace {

enum class FusionOpKind { bn_inference, bn_forward, bn_backward, activation_forward, activation_backward, bias };

const char* op_name(FusionOpKind kind) {
    switch (kind) {
        case FusionOpKind::bn_inference: return "BatchNormInference";
        case FusionOpKind::bn_forward: return "BatchNormForward";
        case FusionOpKind::bn_backward: return "BatchNormBackward";
        case FusionOpKind::activation_forward: return "ActivationForward";
        case FusionOpKind::activation_backward: return "ActivationBackward";
        case FusionOpKind::bias: return "BiasForward";
    }
    return "?";
}

// A tensor descriptor the library keeps for itself (a plan's copy of the
// caller's, or a derived one): live for as long as it exists, so the
// batch-norm checks accept it like any other.
class OwnedDescriptor {
public:
    explicit OwnedDescriptor(const TensorDesc& value) : desc_(std::make_unique<miopenTensorDescriptor>()) {
        desc_->value = value;
        add_live(ObjectKind::descriptor, desc_.get());
    }
    ~OwnedDescriptor() { remove_live(ObjectKind::descriptor, desc_.get()); }
    OwnedDescriptor(const OwnedDescriptor&) = delete;
    OwnedDescriptor& operator=(const OwnedDescriptor&) = delete;
    miopenTensorDescriptor* get() const { return desc_.get(); }

private:
    std::unique_ptr<miopenTensorDescriptor> desc_;
};

// MIOpen's fused backward takes no epsilon: recomputed statistics use this one.
constexpr double kFusedBackwardEpsilon = 1e-5;

}  // namespace
}  // namespace mbn

struct miopenFusionOpDescriptor {
    mbn::FusionOpKind kind;
    miopenBatchNormMode_t bn_mode = miopenBNSpatial;
    std::unique_ptr<mbn::OwnedDescriptor> param_desc;  // inference: bnScaleBiasMeanVarDesc (a copy)
    bool running = false;               // training: update running statistics
    mbn::ActivationMode activation = mbn::ActivationMode::pass_through;
};

struct miopenFusionPlanDescriptor {
    miopenFusionDirection_t direction = miopenVerticalFusion;
    std::unique_ptr<mbn::OwnedDescriptor> input_desc;  // a copy: x's descriptor for the ops that take x
    std::vector<std::unique_ptr<miopenFusionOpDescriptor>> ops;
    bool compiled = false;
};

namespace mbn {
namespace {

// What one SetOpArgs call recorded.
struct OpArgs {
    Blend blend;
    const void* scale = nullptr;
    const void* bias = nullptr;
    const void* mean = nullptr;            // estimated or saved mean
    const void* var_or_inv_std = nullptr;  // estimated variance (inference) or saved inverse std (backward)
    void* saved_mean = nullptr;
    void* saved_inv_std = nullptr;
    void* running_mean = nullptr;
    void* running_var = nullptr;
    const void* x = nullptr;
    void* dscale = nullptr;
    void* dbias = nullptr;
    double epsilon = 0.0;
    double exp_avg_factor = 0.0;
    double activation_params[3] = {0.0, 0.0, 0.0};
};

}  // namespace
}  // namespace mbn

struct miopenOperatorArgs {
    std::map<const miopenFusionOpDescriptor*, mbn::OpArgs> by_op;
};

namespace mbn {
namespace {

miopenFusionPlanDescriptor& require_plan(miopenFusionPlanDescriptor* plan) {
    require(plan != nullptr, miopenStatusBadParm, "fusePlanDesc is NULL");
    require(is_live_now(ObjectKind::fusion_plan, plan), miopenStatusBadParm, "fusePlanDesc (",
            static_cast<const void*>(plan), ") is not a live fusion plan");
    return *plan;
}

miopenOperatorArgs& require_args(miopenOperatorArgs* args) {
    require(args != nullptr, miopenStatusBadParm, "args is NULL");
    require(is_live_now(ObjectKind::operator_args, args), miopenStatusBadParm, "args (", static_cast<const void*>(args),
            ") is not a live operator-arguments object");
    return *args;
}

const miopenFusionOpDescriptor& require_op(const miopenFusionOpDescriptor* op, FusionOpKind kind) {
    require(op != nullptr, miopenStatusBadParm, "the op is NULL");
    require(is_live_now(ObjectKind::fusion_op, op), miopenStatusBadParm, "the op (", static_cast<const void*>(op),
            ") is not an op of a live fusion plan");
    require(op->kind == kind, miopenStatusBadParm, "the op is a ", op_name(op->kind), " op, not a ",
            op_name(kind), " op");
    return *op;
}

void require_bn_mode(miopenBatchNormMode_t mode) {
    require(mode == miopenBNSpatial || mode == miopenBNPerActivation, miopenStatusBadParm, "bn_mode ",
            static_cast<int>(mode), " is neither miopenBNPerActivation (0) nor miopenBNSpatial (1)");
}

// Appends an op; the plan must be compiled again.
void add_op(miopenFusionPlanDescriptor* plan_ptr, miopenFusionOpDescriptor** out,
            std::unique_ptr<miopenFusionOpDescriptor> op) {
    auto& plan = require_plan(plan_ptr);
    require(out != nullptr, miopenStatusBadParm, "the op output is NULL");
    plan.ops.reserve(plan.ops.size() + 1);  // nothing can fail after the op is live
    add_live(ObjectKind::fusion_op, op.get());
    *out = op.get();
    plan.ops.push_back(std::move(op));
    plan.compiled = false;
}

std::unique_ptr<miopenFusionOpDescriptor> new_op(FusionOpKind kind) {
    auto op = std::make_unique<miopenFusionOpDescriptor>();
    op->kind = kind;
    return op;
}

// Why a plan does not compile, or nullptr when it does.
const char* unsupported_reason(const miopenFusionPlanDescriptor& plan) {
    if (plan.direction != miopenVerticalFusion) return "only vertical fusion is supported";
    if (plan.ops.empty()) return "the plan has no ops";
    if (plan.ops.size() > 2) return "plans have at most a batch-norm op and an activation op";
    for (const auto& op : plan.ops)
        if (op->kind == FusionOpKind::bias) return "bias ops are not supported (only batch norm and activation)";
    const FusionOpKind first = plan.ops[0]->kind;
    if (first == FusionOpKind::activation_forward || first == FusionOpKind::activation_backward)
        return "the first op must be a batch-norm op";
    if (plan.ops.size() == 2) {
        const FusionOpKind second = plan.ops[1]->kind;
        const FusionOpKind wanted =
            first == FusionOpKind::bn_backward ? FusionOpKind::activation_backward : FusionOpKind::activation_forward;
        if (second != wanted) return "the second op must be the activation of the batch-norm op's direction";
    }
    return nullptr;
}

const OpArgs& args_of(const miopenOperatorArgs& args, const miopenFusionOpDescriptor* op, std::size_t index) {
    const auto found = args.by_op.find(op);
    require(found != args.by_op.end(), miopenStatusBadParm, "args holds no arguments for op ", index, " (",
            op_name(op->kind), ")");
    return found->second;
}

// An activation op's arguments: its (checked) parameters.
OpArgs activation_args(double alpha, double beta, double gamma) {
    checked_activation(ActivationMode::pass_through, alpha, beta, gamma);
    OpArgs values;
    values.activation_params[0] = alpha, values.activation_params[1] = beta, values.activation_params[2] = gamma;
    return values;
}

void set_args(miopenOperatorArgs* args_ptr, const miopenFusionOpDescriptor* op, FusionOpKind kind,
              const void* alpha, const void* beta, OpArgs values) {
    auto& args = require_args(args_ptr);
    require_op(op, kind);
    values.blend = read_blend(alpha, beta, "alpha", "beta");
    args.by_op[op] = values;
}

void execute(const char* fn, miopenHandle* handle, miopenFusionPlanDescriptor* plan_ptr,
             const miopenTensorDescriptor* input_desc, const void* input, const miopenTensorDescriptor* output_desc,
             void* output, miopenOperatorArgs* args_ptr) {
    use_handle(handle);
    auto& plan = require_plan(plan_ptr);
    const auto& args = require_args(args_ptr);
    require(plan.compiled, miopenStatusBadParm, "the fusion plan is not compiled (miopenCompileFusionPlan)");
    const miopenFusionOpDescriptor& bn = *plan.ops[0];
    const OpArgs& a = args_of(args, &bn, 0);
    ActivationSpec activation;
    if (plan.ops.size() == 2) {
        const OpArgs& act = args_of(args, plan.ops[1].get(), 1);
        activation = checked_activation(plan.ops[1]->activation, act.activation_params[0],
                                        act.activation_params[1], act.activation_params[2]);
    }
    const float alpha = a.blend.alpha, beta = a.blend.beta;
    // Parameters of training and backward ops: the derived descriptor for x.
    std::optional<OwnedDescriptor> derived;
    if (bn.kind != FusionOpKind::bn_inference) {
        derived.emplace(TensorDesc{});
        derive_bn_descriptor(derived->get(), require_descriptor(plan.input_desc->get(), "inputDesc"), bn.bn_mode);
    }
    const miopenTensorDescriptor* d = derived ? derived->get() : bn.param_desc->get();
    switch (bn.kind) {
        case FusionOpKind::bn_inference:
            forward_inference(fn, handle,
                              {bn.bn_mode, &alpha, &beta, input_desc, input, output_desc, output, {d, d, d, d}, a.scale,
                               a.bias, a.mean, a.var_or_inv_std, a.epsilon, false, activation});
            return;
        case FusionOpKind::bn_forward:
            forward_training(fn, handle,
                             {bn.bn_mode, &alpha, &beta, input_desc, input, output_desc, output, {d, d, d, d},
                              a.scale, a.bias, a.exp_avg_factor, bn.running ? a.running_mean : nullptr,
                              bn.running ? a.running_var : nullptr, a.epsilon, a.saved_mean, a.saved_inv_std, false,
                              nullptr, nullptr, activation});
            return;
        case FusionOpKind::bn_backward: {
            // MIOpen's fused backward blends nothing: the op's alpha/beta serve both gradients.
            backward(fn, handle,
                     {bn.bn_mode, &alpha, &beta, &alpha, &beta, plan.input_desc->get(), a.x, input_desc, input, output_desc,
                      output, {d, d, d, d}, a.scale, a.dscale, a.dbias, kFusedBackwardEpsilon, a.mean,
                      a.var_or_inv_std, a.bias, activation});
            return;
        }
        default: fail(miopenStatusInternalError, "a compiled plan starts with a ", op_name(bn.kind), " op");
    }
}

}  // namespace
}  // namespace mbn

extern "C" {

miopenStatus_t miopenCreateFusionPlan(miopenFusionPlanDescriptor_t* fusePlanDesc,
                                      const miopenFusionDirection_t fuseDirection,
                                      const miopenTensorDescriptor_t inputDesc) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, fusePlanDesc, fuseDirection, inputDesc);
        mbn::require(fusePlanDesc != nullptr, miopenStatusBadParm, "fusePlanDesc is NULL");
        mbn::require(fuseDirection == miopenVerticalFusion || fuseDirection == miopenHorizontalFusion,
                     miopenStatusBadParm, "fuseDirection ", static_cast<int>(fuseDirection), " is not a direction");
        auto plan = std::make_unique<miopenFusionPlanDescriptor>();
        plan->direction = fuseDirection;
        plan->input_desc = std::make_unique<mbn::OwnedDescriptor>(mbn::require_descriptor(inputDesc, "inputDesc"));
        mbn::add_live(mbn::ObjectKind::fusion_plan, plan.get());
        *fusePlanDesc = plan.release();
    });
}

miopenStatus_t miopenDestroyFusionPlan(miopenFusionPlanDescriptor_t fusePlanDesc) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, fusePlanDesc);
        if (fusePlanDesc == nullptr) return;
        mbn::require(mbn::remove_live(mbn::ObjectKind::fusion_plan, fusePlanDesc), miopenStatusBadParm,
                     "fusePlanDesc (", static_cast<const void*>(fusePlanDesc),
                     ") is not a live fusion plan (destroyed already?)");
        for (const auto& op : fusePlanDesc->ops) mbn::remove_live(mbn::ObjectKind::fusion_op, op.get());
        delete fusePlanDesc;
    });
}

miopenStatus_t miopenCompileFusionPlan(miopenHandle_t handle, miopenFusionPlanDescriptor_t fusePlanDesc) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, fusePlanDesc);
        const auto h = mbn::use_handle(handle);
        auto& plan = mbn::require_plan(fusePlanDesc);
        const char* reason = mbn::unsupported_reason(plan);
        mbn::require(reason == nullptr, miopenStatusUnsupportedOp, "the fusion plan is not supported: ", reason);
        plan.compiled = true;
    });
}

miopenStatus_t miopenCreateOpActivationForward(miopenFusionPlanDescriptor_t fusePlanDesc,
                                               miopenFusionOpDescriptor_t* activFwdOp, miopenActivationMode_t mode) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, fusePlanDesc, activFwdOp, mode);
        auto op = mbn::new_op(mbn::FusionOpKind::activation_forward);
        op->activation = mbn::checked_activation_mode(mode);
        mbn::add_op(fusePlanDesc, activFwdOp, std::move(op));
    });
}

miopenStatus_t miopenCreateOpActivationBackward(miopenFusionPlanDescriptor_t fusePlanDesc,
                                                miopenFusionOpDescriptor_t* activBwdOp, miopenActivationMode_t mode) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, fusePlanDesc, activBwdOp, mode);
        auto op = mbn::new_op(mbn::FusionOpKind::activation_backward);
        op->activation = mbn::checked_activation_mode(mode);
        mbn::add_op(fusePlanDesc, activBwdOp, std::move(op));
    });
}

miopenStatus_t miopenCreateOpBiasForward(miopenFusionPlanDescriptor_t fusePlanDesc,
                                         miopenFusionOpDescriptor_t* biasOp, const miopenTensorDescriptor_t bDesc) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, fusePlanDesc, biasOp, bDesc);
        mbn::require_descriptor(bDesc, "bDesc");
        mbn::add_op(fusePlanDesc, biasOp, mbn::new_op(mbn::FusionOpKind::bias));
    });
}

miopenStatus_t miopenCreateOpBatchNormInference(miopenFusionPlanDescriptor_t fusePlanDesc,
                                                miopenFusionOpDescriptor_t* bnOp, const miopenBatchNormMode_t bn_mode,
                                                const miopenTensorDescriptor_t bnScaleBiasMeanVarDesc) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, fusePlanDesc, bnOp, bn_mode, bnScaleBiasMeanVarDesc);
        mbn::require_bn_mode(bn_mode);
        auto op = mbn::new_op(mbn::FusionOpKind::bn_inference);
        op->bn_mode = bn_mode;
        op->param_desc = std::make_unique<mbn::OwnedDescriptor>(
            mbn::require_descriptor(bnScaleBiasMeanVarDesc, "bnScaleBiasMeanVarDesc"));
        mbn::add_op(fusePlanDesc, bnOp, std::move(op));
    });
}

miopenStatus_t miopenCreateOpBatchNormForward(miopenFusionPlanDescriptor_t fusePlanDesc,
                                              miopenFusionOpDescriptor_t* bnFwdOp, const miopenBatchNormMode_t bn_mode,
                                              bool runningMeanVariance) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, fusePlanDesc, bnFwdOp, bn_mode, runningMeanVariance);
        mbn::require_bn_mode(bn_mode);
        auto op = mbn::new_op(mbn::FusionOpKind::bn_forward);
        op->bn_mode = bn_mode;
        op->running = runningMeanVariance;
        mbn::add_op(fusePlanDesc, bnFwdOp, std::move(op));
    });
}

miopenStatus_t miopenCreateOpBatchNormBackward(miopenFusionPlanDescriptor_t fusePlanDesc,
                                               miopenFusionOpDescriptor_t* bnBwdOp, const miopenBatchNormMode_t bn_mode) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, fusePlanDesc, bnBwdOp, bn_mode);
        mbn::require_bn_mode(bn_mode);
        auto op = mbn::new_op(mbn::FusionOpKind::bn_backward);
        op->bn_mode = bn_mode;
        mbn::add_op(fusePlanDesc, bnBwdOp, std::move(op));
    });
}

miopenStatus_t miopenCreateOperatorArgs(miopenOperatorArgs_t* args) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, args);
        mbn::require(args != nullptr, miopenStatusBadParm, "args is NULL");
        auto created = std::make_unique<miopenOperatorArgs>();
        mbn::add_live(mbn::ObjectKind::operator_args, created.get());
        *args = created.release();
    });
}

miopenStatus_t miopenDestroyOperatorArgs(miopenOperatorArgs_t args) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, args);
        if (args == nullptr) return;
        mbn::require(mbn::remove_live(mbn::ObjectKind::operator_args, args), miopenStatusBadParm, "args (",
                     static_cast<const void*>(args), ") is not a live operator-arguments object (destroyed already?)");
        delete args;
    });
}

miopenStatus_t miopenSetOpArgsActivForward(miopenOperatorArgs_t args, const miopenFusionOpDescriptor_t activFwdOp,
                                           const void* alpha, const void* beta, double activAlpha, double activBeta,
                                           double activGamma) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, args, activFwdOp, alpha, beta, activAlpha, activBeta, activGamma);
        mbn::set_args(args, activFwdOp, mbn::FusionOpKind::activation_forward, alpha, beta,
                      mbn::activation_args(activAlpha, activBeta, activGamma));
    });
}

miopenStatus_t miopenSetOpArgsActivBackward(miopenOperatorArgs_t args, const miopenFusionOpDescriptor_t activBwdOp,
                                            const void* alpha, const void* beta, const void* y, const void* reserved,
                                            double activAlpha, double activBeta, double activGamma) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, args, activBwdOp, alpha, beta, y, reserved, activAlpha, activBeta, activGamma);
        mbn::set_args(args, activBwdOp, mbn::FusionOpKind::activation_backward, alpha, beta,
                      mbn::activation_args(activAlpha, activBeta, activGamma));
    });
}

miopenStatus_t miopenSetOpArgsBatchNormInference(miopenOperatorArgs_t args, const miopenFusionOpDescriptor_t bnOp,
                                                 const void* alpha, const void* beta, const void* bnScale,
                                                 const void* bnBias, const void* estimatedMean,
                                                 const void* estimatedVariance, double epsilon) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, args, bnOp, alpha, beta, bnScale, bnBias, estimatedMean, estimatedVariance, epsilon);
        mbn::OpArgs values;
        values.scale = bnScale, values.bias = bnBias, values.mean = estimatedMean;
        values.var_or_inv_std = estimatedVariance, values.epsilon = epsilon;
        mbn::set_args(args, bnOp, mbn::FusionOpKind::bn_inference, alpha, beta, values);
    });
}

miopenStatus_t miopenSetOpArgsBatchNormForward(miopenOperatorArgs_t args, const miopenFusionOpDescriptor_t bnOp,
                                               const void* alpha, const void* beta, const void* bnScale,
                                               const void* bnBias, void* savedMean, void* savedInvVariance,
                                               void* runningMean, void* runningVariance, double expAvgFactor,
                                               double epsilon) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, args, bnOp, alpha, beta, bnScale, bnBias, savedMean, savedInvVariance, runningMean,
                     runningVariance, expAvgFactor, epsilon);
        mbn::OpArgs values;
        values.scale = bnScale, values.bias = bnBias, values.saved_mean = savedMean;
        values.saved_inv_std = savedInvVariance, values.running_mean = runningMean;
        values.running_var = runningVariance, values.exp_avg_factor = expAvgFactor, values.epsilon = epsilon;
        mbn::set_args(args, bnOp, mbn::FusionOpKind::bn_forward, alpha, beta, values);
    });
}

miopenStatus_t miopenSetOpArgsBatchNormBackward(miopenOperatorArgs_t args, const miopenFusionOpDescriptor_t bnOp,
                                                const void* alpha, const void* beta, const void* x,
                                                const void* bnScale, const void* bnBias, void* resultBnScaleDiff,
                                                void* resultBnBiasDiff, const void* savedMean,
                                                const void* savedInvVariance) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, args, bnOp, alpha, beta, x, bnScale, bnBias, resultBnScaleDiff, resultBnBiasDiff, savedMean,
                     savedInvVariance);
        mbn::OpArgs values;
        values.x = x, values.scale = bnScale, values.bias = bnBias, values.dscale = resultBnScaleDiff;
        values.dbias = resultBnBiasDiff, values.mean = savedMean, values.var_or_inv_std = savedInvVariance;
        mbn::set_args(args, bnOp, mbn::FusionOpKind::bn_backward, alpha, beta, values);
    });
}

miopenStatus_t miopenExecuteFusionPlan(const miopenHandle_t handle, const miopenFusionPlanDescriptor_t fusePlanDesc,
                                       const miopenTensorDescriptor_t inputDesc, const void* input,
                                       const miopenTensorDescriptor_t outputDesc, void* output,
                                       miopenOperatorArgs_t args) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, fusePlanDesc, inputDesc, input, outputDesc, output, args);
        mbn::execute(fn, handle, fusePlanDesc, inputDesc, input, outputDesc, output, args);
    });
}

}  // extern "C"
