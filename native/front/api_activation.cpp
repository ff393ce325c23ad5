// Activation descriptor entry points.
#include "activation_descriptor.hpp"
#include "api_guard.hpp"
#include "live_objects.hpp"
#include "logging.hpp"

#include <cmath>
#include <memory>

namespace mbn {

miopenActivationDescriptor& require_activation_descriptor(miopenActivationDescriptor* desc, const char* what) {
    require(desc != nullptr, miopenStatusBadParm, what, " is NULL");
    require(is_live(ObjectKind::activation, desc), miopenStatusBadParm, what, " (", static_cast<const void*>(desc),
            ") is not a live activation descriptor (destroyed, or not made by miopenCreateActivationDescriptor)");
    return *desc;
}

ActivationMode checked_activation_mode(miopenActivationMode_t mode) {
    const int value = static_cast<int>(mode);
    require(value >= 0 && value < kActivationModeCount, miopenStatusBadParm, "activation mode ", value,
            " is not a miopenActivationMode_t (0 to ", kActivationModeCount - 1, ")");
    return static_cast<ActivationMode>(value);
}

ActivationSpec checked_activation(ActivationMode mode, double alpha, double beta, double gamma) {
    require(std::isfinite(alpha) && std::isfinite(beta) && std::isfinite(gamma), miopenStatusBadParm,
            "activation parameters must be finite (alpha ", alpha, ", beta ", beta, ", gamma ", gamma, ")");
    return ActivationSpec{mode, alpha, beta, gamma};
}

}  // namespace mbn

extern "C" {

miopenStatus_t miopenCreateActivationDescriptor(miopenActivationDescriptor_t* activDesc) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, activDesc);
        mbn::require(activDesc != nullptr, miopenStatusBadParm, "activDesc is NULL");
        auto created = std::make_unique<miopenActivationDescriptor>();
        mbn::add_live(mbn::ObjectKind::activation, created.get());
        *activDesc = created.release();
    });
}

miopenStatus_t miopenSetActivationDescriptor(const miopenActivationDescriptor_t activDesc,
                                             miopenActivationMode_t mode, double activAlpha, double activBeta,
                                             double activGamma) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, activDesc, mode, activAlpha, activBeta, activGamma);
        auto& desc = mbn::require_activation_descriptor(activDesc, "activDesc");
        desc.spec = mbn::checked_activation(mbn::checked_activation_mode(mode), activAlpha, activBeta, activGamma);
    });
}

miopenStatus_t miopenGetActivationDescriptor(const miopenActivationDescriptor_t activDesc,
                                             miopenActivationMode_t* mode, double* activAlpha, double* activBeta,
                                             double* activGamma) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, activDesc, mode, activAlpha, activBeta, activGamma);
        const auto& spec = mbn::require_activation_descriptor(activDesc, "activDesc").spec;
        if (mode != nullptr) *mode = static_cast<miopenActivationMode_t>(spec.mode);
        if (activAlpha != nullptr) *activAlpha = spec.alpha;
        if (activBeta != nullptr) *activBeta = spec.beta;
        if (activGamma != nullptr) *activGamma = spec.gamma;
    });
}

miopenStatus_t miopenDestroyActivationDescriptor(miopenActivationDescriptor_t activDesc) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, activDesc);
        if (activDesc == nullptr) return;
        mbn::require(mbn::remove_live(mbn::ObjectKind::activation, activDesc), miopenStatusBadParm, "activDesc (",
                     static_cast<const void*>(activDesc), ") is not a live activation descriptor (destroyed already?)");
        delete activDesc;
    });
}

}  // extern "C"
