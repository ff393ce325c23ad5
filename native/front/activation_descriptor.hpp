// The object behind miopenActivationDescriptor_t: an activation mode and its
// parameters, checked when set.
#pragma once

#include "common/activation.hpp"

#include <miopen_bn.h>

#include <mutex>

struct miopenActivationDescriptor {
    // Read and written only under `mutex` (and while live), as a tensor
    // descriptor is: calls work on a snapshot.
    mutable std::mutex mutex;
    mbn::ActivationSpec spec;  // pass-through, alpha = beta = gamma = 0 until set
};

namespace mbn {

// A copy of the activation behind an argument, taken under its lock, or
// BadParm when it is NULL or not a live activation descriptor.
ActivationSpec snapshot_activation(const miopenActivationDescriptor* desc, const char* what);
// Stores `spec`; the same BadParm.
void set_activation(miopenActivationDescriptor* desc, const char* what, const ActivationSpec& spec);

// A mode of miopenActivationMode_t, else BadParm.
ActivationMode checked_activation_mode(miopenActivationMode_t mode);

// BadParm unless alpha, beta and gamma are finite.
ActivationSpec checked_activation(ActivationMode mode, double alpha, double beta, double gamma);

}  // namespace mbn
