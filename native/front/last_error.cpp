// The per-thread record of why the last call failed, and the status names.
#include "api_guard.hpp"
#include "logging.hpp"

namespace mbn {
namespace {
thread_local std::string last_error_message;
}

void set_last_error(const char* function, miopenStatus_t status, const std::string& message) {
    try {
        const std::string reason = concat(miopenGetErrorString(status), ": ", message);
        last_error_message = concat(function, ": ", reason);
        log_error(function, reason);
    } catch (...) {
        // Out of memory while describing a failure: the status still gets out.
    }
}

void clear_last_error() { last_error_message.clear(); }

}  // namespace mbn

extern "C" {

const char* miopenGetErrorString(miopenStatus_t error) {
    switch (error) {
        case miopenStatusSuccess: return "miopenStatusSuccess";
        case miopenStatusNotInitialized: return "miopenStatusNotInitialized";
        case miopenStatusInvalidValue: return "miopenStatusInvalidValue";
        case miopenStatusBadParm: return "miopenStatusBadParm";
        case miopenStatusAllocFailed: return "miopenStatusAllocFailed";
        case miopenStatusInternalError: return "miopenStatusInternalError";
        case miopenStatusNotImplemented: return "miopenStatusNotImplemented";
        case miopenStatusUnknownError: return "miopenStatusUnknownError";
        case miopenStatusUnsupportedOp: return "miopenStatusUnsupportedOp";
        case miopenStatusGpuOperationsSkipped: return "miopenStatusGpuOperationsSkipped";
        case miopenStatusVersionMismatch: return "miopenStatusVersionMismatch";
    }
    return "Unknown error status";
}

const char* miopenBNGetLastErrorMessage(void) { return mbn::last_error_message.c_str(); }

}  // extern "C"
