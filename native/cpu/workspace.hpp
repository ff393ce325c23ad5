// Per-call working memory (partial sums, coefficients, staging) without a
// fresh allocation per call: page-faulting new memory on every call would
// cost more than the work on small tensors.  Each thread that calls into the
// library keeps a few buffers, at most 8 MiB in all between calls; a
// Workspace hands them out in order, so a call reuses the buffers of the
// previous call of its kind.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace mbn::cpu {

class Workspace {
public:
    Workspace() = default;
    ~Workspace();
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

    // An uninitialized array of `count` T, valid until this Workspace ends.
    // Throws std::bad_alloc (the front reports AllocFailed).
    template <typename T>
    T* take(std::int64_t count) {
        return static_cast<T*>(take_bytes(static_cast<std::size_t>(count) * sizeof(T)));
    }

private:
    struct Buffer {
        std::unique_ptr<std::max_align_t[]> data;
        std::size_t bytes = 0;
    };
    // More than any op takes (25: backward through an activation that
    // recomputes the statistics, with dx in float).
    static constexpr int kBuffers = 32;
    static std::array<Buffer, kBuffers>& thread_buffers();
    void* take_bytes(std::size_t bytes);

    int used_ = 0;
};

}  // namespace mbn::cpu
