// MIOpen's try_ pattern: every extern "C" entry point runs its body (log,
// validate, dispatch) inside api_call, which turns any C++ exception into a
// status, records the thread's last-error message and logs the failure.
// The body receives the entry point's name (for its logs: inside a lambda,
// __func__ would name the lambda).
#pragma once

#include "common/error.hpp"

#include <miopen_bn.h>

#include <exception>
#include <new>
#include <string>

namespace mbn {

void set_last_error(const char* function, miopenStatus_t status, const std::string& message);
void clear_last_error();

// Within one entry point's call, every read of the same descriptor gives the
// same snapshot (tensor_descriptor.cpp): a descriptor passed twice (xDesc as
// yDesc, one descriptor for every parameter) is one setting, even while
// another thread re-sets it.
void begin_call_snapshots();
void end_call_snapshots();
struct CallSnapshotScope {
    CallSnapshotScope() { begin_call_snapshots(); }
    ~CallSnapshotScope() { end_call_snapshots(); }
    CallSnapshotScope(const CallSnapshotScope&) = delete;
    CallSnapshotScope& operator=(const CallSnapshotScope&) = delete;
};

template <typename Body>
miopenStatus_t api_call(const char* function, Body&& body) noexcept {
    const CallSnapshotScope snapshots;
    try {
        body(function);
        clear_last_error();
        return miopenStatusSuccess;
    } catch (const Error& e) {
        set_last_error(function, e.status(), e.what());
        return e.status();
    } catch (const std::bad_alloc&) {
        set_last_error(function, miopenStatusAllocFailed, "out of host memory");
        return miopenStatusAllocFailed;
    } catch (const std::exception& e) {
        set_last_error(function, miopenStatusUnknownError, e.what());
        return miopenStatusUnknownError;
    } catch (...) {
        set_last_error(function, miopenStatusUnknownError, "unknown C++ exception");
        return miopenStatusUnknownError;
    }
}

}  // namespace mbn
