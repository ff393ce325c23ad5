// The object behind miopenActivationDescriptor_t: an activation mode and its
// parameters, checked when set.
#pragma once

#include "common/activation.hpp"

#include <miopen_bn.h>

struct miopenActivationDescriptor {
    mbn::ActivationSpec spec;  // pass-through, alpha = beta = gamma = 0 until set
};

namespace mbn {

// The descriptor behind an argument, or BadParm when it is NULL or not a live
// activation descriptor.
miopenActivationDescriptor& require_activation_descriptor(miopenActivationDescriptor* desc, const char* what);

// A mode of miopenActivationMode_t, else BadParm.
ActivationMode checked_activation_mode(miopenActivationMode_t mode);

// BadParm unless alpha, beta and gamma are finite.
ActivationSpec checked_activation(ActivationMode mode, double alpha, double beta, double gamma);

}  // namespace mbn
