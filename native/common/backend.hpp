// The interface every backend implements.  One Backend object belongs to one
// handle, so it may keep per-handle state (stream, scratch memory, timing).
//
// Contract: the front calls a backend only with problems it has validated
// (see problem.hpp); a backend never re-validates.  A backend reports a
// runtime failure (launch error, out of memory) by throwing mbn::Error with
// InternalError / AllocFailed, and must not have written outputs partially
// for errors it can detect before launching.
//
// Adding an op (group norm, ...) means adding its problem struct in its own
// header and one virtual here whose default says NotImplemented.
#pragma once

#include "bn_split_problem.hpp"
#include "error.hpp"
#include "group_norm_problem.hpp"
#include "problem.hpp"

#include <memory>

namespace mbn {

enum class BackendKind { cpu, gpu };

class Backend {
public:
    virtual ~Backend() = default;

    virtual BackendKind kind() const = 0;
    virtual const char* name() const = 0;

    // The queue work goes to; the CPU backend keeps the value and ignores it.
    virtual void set_stream(void* stream) { stream_ = stream; }
    void* stream() const { return stream_; }

    // Profiling: when on, each op records how long its work took, in ms.
    virtual void set_profiling(bool on) { profiling_ = on; }
    bool profiling() const { return profiling_; }
    virtual float kernel_time_ms() const { return last_time_ms_; }

    // Throws Error(BadParm) when this backend cannot access `data` (a host
    // pointer given to a GPU handle).  `what` names the argument.
    virtual void check_accessible(const void* data, const char* what) const {
        (void)data;
        (void)what;
    }

    virtual void bn_forward_training(const BnForwardTraining& p) = 0;
    virtual void bn_forward_inference(const BnForwardInference& p) = 0;
    virtual void bn_backward(const BnBackward& p) = 0;

    // Group norm: a backend without it says so, and the call fails cleanly.
    virtual void gn_forward(const GnForward& p) { unsupported("group-norm forward"); }
    virtual void gn_backward(const GnBackward& p) { unsupported("group-norm backward"); }

    // The split-phase ops of data-parallel batch norm.
    virtual void bn_local_statistics(const BnLocalStatistics& p) { unsupported("batch-norm local statistics"); }
    virtual void bn_merge_statistics(const BnMergeStatistics& p) { unsupported("batch-norm statistics merge"); }
    virtual void bn_normalize(const BnNormalize& p) { unsupported("batch-norm normalize"); }
    virtual void bn_backward_reduce(const BnBackwardReduce& p) { unsupported("batch-norm backward reduce"); }
    virtual void bn_backward_elementwise(const BnBackwardElementwise& p) {
        unsupported("batch-norm backward elementwise");
    }

protected:
    [[noreturn]] void unsupported(const char* op) const {
        fail(miopenStatusNotImplemented, "the ", name(), " backend has no ", op, " yet");
    }

    void* stream_ = nullptr;
    bool profiling_ = false;
    float last_time_ms_ = 0.0f;
};

// Factories, one per backend.  make_gpu_backend returns nullptr when no GPU
// is usable; it exists only in builds with MIOPEN_BN_HAS_GPU defined.
std::unique_ptr<Backend> make_cpu_backend();
#ifdef MIOPEN_BN_HAS_GPU
std::unique_ptr<Backend> make_gpu_backend(void* stream);
#endif

}  // namespace mbn
