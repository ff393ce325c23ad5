"""The C entry points as the tests address them: by the parameter names of
the header (read through the cdef generator, so no prototype is restated),
grouped by op, with what each buffer parameter is and which descriptor
describes it."""

from __future__ import annotations

from miopen_bn import cdef

PARAMETERS = cdef.declared_parameters(cdef.generate_cdef(cdef.header_path().read_text()))

TRAINING = ("miopenBatchNormalizationForwardTraining", "miopenBatchNormalizationForwardTraining_V2")
INFERENCE = ("miopenBatchNormalizationForwardInference", "miopenBatchNormalizationForwardInference_V2")
BACKWARD = ("miopenBatchNormalizationBackward", "miopenBatchNormalizationBackward_V2")
BATCH_NORM = TRAINING + INFERENCE + BACKWARD
# Issue 25's batch-norm entry points: V3 running statistics, inverse-std
# inference, fused activations.  Fuzzed with the rest (FUZZED_*); the other
# tests address the classic ones above.
TRAINING_MORE = (
    "miopenBatchNormalizationForwardTraining_V3",
    "miopenBatchNormForwardTrainingActivation",
    "miopenBatchNormForwardTrainingActivation_V2",
)
INFERENCE_MORE = (
    "miopenBatchNormalizationForwardInferenceInvVariance",
    "miopenBatchNormForwardInferenceActivation",
    "miopenBatchNormForwardInferenceActivationInvVariance",
)
BACKWARD_MORE = ("miopenBatchNormBackwardActivation",)
FUZZED_TRAINING = TRAINING + TRAINING_MORE
FUZZED_INFERENCE = INFERENCE + INFERENCE_MORE
FUZZED_BACKWARD = BACKWARD + BACKWARD_MORE
FUZZED_BATCH_NORM = FUZZED_TRAINING + FUZZED_INFERENCE + FUZZED_BACKWARD
# The activation descriptor parameter: an object, not a tensor descriptor.
ACTIVATION_DESC = "activDesc"
GROUP_NORM = ("miopenGroupNormForward", "miopenBNGroupNormForwardActivation", "miopenBNGroupNormBackward")

# Buffer parameters that are written (running statistics are read too).
OUTPUTS = {
    "y", "dx", "resultSaveMean", "resultSaveInvVariance", "resultRunningMean", "resultRunningVariance",
    "resultBnScaleDiff", "resultBnBiasDiff", "dweight", "dbias", "nextResultRunningMean",
    "nextResultRunningVariance",
}
# Written only by group-norm forward; inputs of its backward.
GROUP_NORM_STATISTICS = {"mean", "rstd"}

# V2 batch norm: which parameter descriptor describes which buffers.
_V2_DESCRIPTOR = {
    "bnScale": "scaleDesc", "resultBnScaleDiff": "scaleDesc",
    "bnBias": ("biasVarDesc", "biasDesc"), "resultBnBiasDiff": "biasDesc",
    "resultRunningMean": "savedMeanDesc", "resultSaveMean": "savedMeanDesc",
    "resultRunningVariance": "savedVarDesc", "resultSaveInvVariance": "savedVarDesc",
    "savedMean": "savedMeanDesc", "savedInvVariance": ("savedVarDesc", "savedVarianceDesc"),
    "estimatedMean": "estMeanDesc", "estimatedVariance": "estVarianceDesc",
    "estimatedInvVariance": "estInvVarianceDesc",
    "prevResultRunningMean": "savedMeanDesc", "nextResultRunningMean": "savedMeanDesc",
    "prevResultRunningVariance": "savedVarDesc", "nextResultRunningVariance": "savedVarDesc",
}


def descriptor_parameters(function: str) -> list:
    return [name for name in PARAMETERS[function] if is_tensor_descriptor(name)]


def is_tensor_descriptor(name: str) -> bool:
    return name.endswith("Desc") and name != ACTIVATION_DESC


def buffer_parameters(function: str) -> list:
    """Parameters that point at tensor data (not alpha/beta, not the handle)."""
    names = PARAMETERS[function]
    return [name for name in names if descriptor_of(function, name) is not None]


def is_output(function: str, buffer: str) -> bool:
    if buffer in GROUP_NORM_STATISTICS:
        return function != "miopenBNGroupNormBackward"
    return buffer in OUTPUTS


def descriptor_of(function: str, buffer: str):
    """The descriptor parameter describing `buffer`, or None if it is no buffer."""
    names = PARAMETERS[function]
    if buffer not in names or buffer.endswith("Desc"):  # activDesc included
        return None
    if buffer + "Desc" in names:  # x -> xDesc, weight -> weightDesc, ...
        return buffer + "Desc"
    if buffer not in _V2_DESCRIPTOR:
        return None
    for shared in ("bnScaleBiasMeanVarDesc", "bnScaleBiasDiffDesc"):  # V1: one for all parameters
        if shared in names:
            return shared
    candidates = _V2_DESCRIPTOR[buffer]
    return next(name for name in ((candidates,) if isinstance(candidates, str) else candidates) if name in names)


def invoke(lib, function: str, values: dict) -> int:
    """Calls `function` with the arguments named in `values` (every parameter)."""
    return getattr(lib, function)(*[values[name] for name in PARAMETERS[function]])


def last_error(lib, ffi) -> str:
    return ffi.string(lib.miopenBNGetLastErrorMessage()).decode()
