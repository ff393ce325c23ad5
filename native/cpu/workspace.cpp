#include "cpu/workspace.hpp"

#include <new>

namespace mbn::cpu {
namespace {

// What a calling thread keeps between calls: its buffers, in order, while
// they total at most this; the rest are returned when the call ends.  Small
// calls (those whose cost page faults would dominate) keep all of theirs; a
// thread that once made a large call does not hold its scratch (a 15 MB
// per-activation input took 167 MB) for as long as it lives.
constexpr std::size_t kKeepBytes = std::size_t{8} << 20;

}  // namespace

std::array<Workspace::Buffer, Workspace::kBuffers>& Workspace::thread_buffers() {
    thread_local std::array<Buffer, kBuffers> buffers;
    return buffers;
}

void* Workspace::take_bytes(std::size_t bytes) {
    if (used_ == kBuffers) throw std::bad_alloc();  // more arrays than any op takes
    Buffer& b = thread_buffers()[used_++];
    if (b.bytes < bytes || !b.data) {
        const std::size_t units = (bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
        b.data.reset();
        b.bytes = 0;
        b.data.reset(new std::max_align_t[units > 0 ? units : 1]);
        b.bytes = units * sizeof(std::max_align_t);
    }
    return b.data.get();
}

Workspace::~Workspace() {
    std::size_t kept = 0;
    for (Buffer& b : thread_buffers()) {
        if (kept + b.bytes <= kKeepBytes)
            kept += b.bytes;
        else
            b = Buffer{};
    }
}

}  // namespace mbn::cpu
