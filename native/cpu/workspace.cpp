#include "cpu/workspace.hpp"

#include <new>

namespace mbn::cpu {
namespace {

// Buffers larger than this are returned when the call ends rather than kept.
constexpr std::size_t kKeepBytes = std::size_t{16} << 20;

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
    auto& buffers = thread_buffers();
    for (int i = 0; i < used_; ++i)
        if (buffers[i].bytes > kKeepBytes) buffers[i] = Buffer{};
}

}  // namespace mbn::cpu
