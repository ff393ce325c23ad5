// Activation descriptor entry points.
#include "activation_descriptor.hpp"
#include "api_guard.hpp"
#include "live_objects.hpp"
#include "logging.hpp"

#include <cmath>
#include <memory>

namespace mbn {

namespace {

std::shared_lock<std::shared_mutex> lock_live_activation(const miopenActivationDescriptor* desc, const char* what) {
    require(desc != nullptr, miopenStatusBadParm, what, " is NULL");
    auto live = lock_if_live(ObjectKind::activation, desc);
    require(live.owns_lock(), miopenStatusBadParm, what, " (", static_cast<const void*>(desc),
            ") is not a live activation descriptor (destroyed, or not made by miopenCreateActivationDescriptor)");
    return live;
}

}  // namespace

ActivationSpec snapshot_activation(const miopenActivationDescriptor* desc, const char* what) {
    const auto live = lock_live_activation(desc, what);
    std::lock_guard<std::mutex> lock(desc->mutex);
    return desc->spec;
}

void set_activation(miopenActivationDescriptor* desc, const char* what, const ActivationSpec& spec) {
    const auto live = lock_live_activation(desc, what);
    std::lock_guard<std::mutex> lock(desc->mutex);
    desc->spec = spec;
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
        mbn::set_activation(activDesc, "activDesc",
                            mbn::checked_activation(mbn::checked_activation_mode(mode), activAlpha, activBeta,
                                                    activGamma));
    });
}

miopenStatus_t miopenGetActivationDescriptor(const miopenActivationDescriptor_t activDesc,
                                             miopenActivationMode_t* mode, double* activAlpha, double* activBeta,
                                             double* activGamma) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, activDesc, mode, activAlpha, activBeta, activGamma);
        const mbn::ActivationSpec spec = mbn::snapshot_activation(activDesc, "activDesc");
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
