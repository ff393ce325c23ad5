// The CPU Backend: runs each op on the host thread pool and, when profiling
// is on, records its wall time as the "kernel time".
#include "common/backend.hpp"
#include "cpu/bn_ops.hpp"
#include "cpu/gn_ops.hpp"

#include <chrono>

namespace mbn {
namespace {

class CpuBackend final : public Backend {
public:
    BackendKind kind() const override { return BackendKind::cpu; }
    const char* name() const override { return "cpu"; }

    void bn_forward_training(const BnForwardTraining& p) override {
        timed([&] { cpu::forward_training(p); });
    }
    void bn_forward_inference(const BnForwardInference& p) override {
        timed([&] { cpu::forward_inference(p); });
    }
    void bn_backward(const BnBackward& p) override {
        timed([&] { cpu::backward(p); });
    }
    void bn_local_statistics(const BnLocalStatistics& p) override {
        timed([&] { cpu::local_statistics(p); });
    }
    void bn_merge_statistics(const BnMergeStatistics& p) override {
        timed([&] { cpu::merge_statistics(p); });
    }
    void bn_normalize(const BnNormalize& p) override {
        timed([&] { cpu::normalize(p); });
    }
    void bn_backward_reduce(const BnBackwardReduce& p) override {
        timed([&] { cpu::backward_reduce(p); });
    }
    void bn_backward_elementwise(const BnBackwardElementwise& p) override {
        timed([&] { cpu::backward_elementwise(p); });
    }
    void gn_forward(const GnForward& p) override {
        timed([&] { cpu::group_norm_forward(p); });
    }
    void gn_backward(const GnBackward& p) override {
        timed([&] { cpu::group_norm_backward(p); });
    }

private:
    template <typename Op>
    void timed(Op&& op) {
        if (!profiling()) {
            op();
            return;
        }
        const auto start = std::chrono::steady_clock::now();
        op();
        const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
        last_time_ms_ = static_cast<float>(elapsed.count());
    }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace mbn
