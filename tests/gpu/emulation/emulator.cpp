#include "emulator.hpp"

#include <cuda_runtime_api.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace emu {

Index thread_index, block_index, block_dim, grid_dim;

namespace {

constexpr std::size_t kStackBytes = 64 * 1024;
constexpr std::size_t kCanaryBytes = 256;
constexpr unsigned char kCanary = 0xA5;
constexpr unsigned char kUninitialized = 0xFF;  // NaN as float or double
constexpr int kWave = EMU_WAVE_SIZE;

struct Barrier {
    unsigned expected = 0;
    unsigned arrived = 0;
    unsigned long long generation = 0;
};

struct Fiber {
    ucontext_t context;
    std::unique_ptr<char[]> stack;
    unsigned block;  // within the cluster
    unsigned thread;
    bool done = false;
    unsigned long long cluster_token = 0;
    bool cluster_arrived = false;
};

struct Block {
    std::vector<unsigned char> shared;  // saved while another block runs
    Barrier barrier;
    std::vector<Barrier> warps;
    std::vector<unsigned char> slots;  // per warp: kWave slots of 8 bytes
};

struct Cluster {
    unsigned first_block = 0;
    std::vector<Block> blocks;
    std::vector<Fiber> fibers;
    Barrier barrier;
    std::size_t shared_bytes = 0;
    const std::function<void()>* body = nullptr;
    Fiber* running = nullptr;
    int resident = -1;  // the block whose shared memory is in the array
    unsigned long long progress = 0;
};

ucontext_t scheduler;
Cluster* cluster = nullptr;
unsigned char* shared_array = nullptr;
std::size_t shared_capacity = 0;
bool shared_guarded = true;  // a canary follows the launch's shared bytes (dynamic shared memory)

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "gpu emulator: %s\n", what);
    std::abort();
}

void yield() { swapcontext(&cluster->running->context, &scheduler); }

unsigned long long arrive(Barrier& b) {
    const unsigned long long token = b.generation;
    ++cluster->progress;
    if (++b.arrived == b.expected) {
        b.arrived = 0;
        ++b.generation;
    }
    return token;
}

void wait(const Barrier& b, unsigned long long token) {
    while (b.generation == token) yield();
}

void check_canary() {
    if (!shared_guarded) return;
    for (std::size_t i = 0; i < kCanaryBytes; ++i)
        if (shared_array[cluster->shared_bytes + i] != kCanary) die("a kernel wrote past its shared memory");
}

// Puts block b's shared memory in the array.
void make_resident(unsigned b) {
    if (cluster->resident == static_cast<int>(b)) return;
    const std::size_t bytes = cluster->shared_bytes;
    if (cluster->resident >= 0) {
        check_canary();
        std::memcpy(cluster->blocks[cluster->resident].shared.data(), shared_array, bytes);
    }
    std::memcpy(shared_array, cluster->blocks[b].shared.data(), bytes);
    cluster->resident = static_cast<int>(b);
}

void trampoline() {
    (*cluster->body)();
    cluster->running->done = true;
    ++cluster->progress;
    swapcontext(&cluster->running->context, &scheduler);
}

Block& current_block() { return cluster->blocks[cluster->running->block]; }

}  // namespace

void register_shared(void* array, std::size_t capacity) {
    shared_array = static_cast<unsigned char*>(array);
    shared_capacity = capacity;
    shared_guarded = true;
}

void register_static_shared(void* begin, std::size_t bytes) {
    shared_array = static_cast<unsigned char*>(begin);
    shared_capacity = bytes;
    shared_guarded = false;
}

void sync_block() { wait(current_block().barrier, arrive(current_block().barrier)); }

void spin() { yield(); }

void sync_warp() {
    Barrier& b = current_block().warps[cluster->running->thread / kWave];
    wait(b, arrive(b));
}

namespace {

// Every lane puts `mine` in its slot, then reads lane source(lane)'s.
template <typename Source>
void exchange_with(const void* mine, void* theirs, std::size_t size, const Source& source) {
    Block& block = current_block();
    const unsigned lane = cluster->running->thread % kWave;
    unsigned char* slots = block.slots.data() + (cluster->running->thread / kWave) * kWave * 8;
    std::memcpy(slots + lane * 8, mine, size);
    sync_warp();
    std::memcpy(theirs, slots + source(lane) * 8, size);
    sync_warp();
}

}  // namespace

void exchange(const void* mine, void* theirs, std::size_t size, int mask) {
    if (size > 8 || mask <= 0 || mask >= kWave) die("bad shuffle");
    exchange_with(mine, theirs, size, [&](unsigned lane) { return lane ^ static_cast<unsigned>(mask); });
}

void exchange_from(const void* mine, void* theirs, std::size_t size, int source) {
    if (size > 8 || source < 0 || source >= kWave) die("bad shuffle");
    exchange_with(mine, theirs, size, [&](unsigned) { return static_cast<unsigned>(source); });
}

void exchange_down(const void* mine, void* theirs, std::size_t size, unsigned delta) {
    if (size > 8 || delta >= static_cast<unsigned>(kWave)) die("bad shuffle");
    exchange_with(mine, theirs, size, [&](unsigned lane) { return lane + delta < static_cast<unsigned>(kWave) ? lane + delta : lane; });
}

void cluster_arrive() {
    Fiber& f = *cluster->running;
    if (f.cluster_arrived) die("cluster barrier arrived twice without a wait");
    f.cluster_token = arrive(cluster->barrier);
    f.cluster_arrived = true;
}

void cluster_wait() {
    Fiber& f = *cluster->running;
    if (!f.cluster_arrived) die("cluster barrier waited on without an arrival");
    f.cluster_arrived = false;
    wait(cluster->barrier, f.cluster_token);
}

unsigned cluster_rank() { return cluster->running->block; }

void* peer_shared(void* mine, int rank) {
    auto* p = static_cast<unsigned char*>(mine);
    if (p < shared_array || p >= shared_array + cluster->shared_bytes) die("a peer address outside shared memory");
    if (rank < 0 || rank >= static_cast<int>(cluster->blocks.size())) die("a peer rank outside the cluster");
    if (rank == cluster->resident) return mine;
    return cluster->blocks[rank].shared.data() + (p - shared_array);
}

void run_grid(unsigned blocks, unsigned threads, unsigned cluster_blocks, std::size_t shared_bytes,
              const std::function<void()>& body) {
    if (threads % kWave != 0 || blocks % cluster_blocks != 0) die("bad launch shape");
    if (shared_guarded ? shared_bytes + kCanaryBytes > shared_capacity : shared_bytes != shared_capacity)
        die("more shared memory than the kernel's array holds");
    for (unsigned first = 0; first < blocks; first += cluster_blocks) {
        Cluster c;
        c.first_block = first;
        c.shared_bytes = shared_bytes;
        c.body = &body;
        c.barrier.expected = threads * cluster_blocks;
        c.blocks.resize(cluster_blocks);
        for (Block& b : c.blocks) {
            b.shared.assign(shared_bytes, kUninitialized);
            b.barrier.expected = threads;
            b.warps.resize(threads / kWave);
            for (Barrier& w : b.warps) w.expected = kWave;
            b.slots.assign(threads * 8, 0);
        }
        c.fibers.resize(static_cast<std::size_t>(threads) * cluster_blocks);
        cluster = &c;
        if (shared_guarded) std::memset(shared_array + shared_bytes, kCanary, kCanaryBytes);
        for (unsigned b = 0; b < cluster_blocks; ++b)
            for (unsigned t = 0; t < threads; ++t) {
                Fiber& f = c.fibers[b * threads + t];
                f.block = b;
                f.thread = t;
                f.stack.reset(new char[kStackBytes]);
                getcontext(&f.context);
                f.context.uc_stack.ss_sp = f.stack.get();
                f.context.uc_stack.ss_size = kStackBytes;
                f.context.uc_link = nullptr;
                makecontext(&f.context, trampoline, 0);
            }
        block_dim = Index{threads, 1, 1};
        grid_dim = Index{blocks, 1, 1};
        for (;;) {
            const unsigned long long before = c.progress;
            bool any = false;
            for (Fiber& f : c.fibers) {
                if (f.done) continue;
                any = true;
                make_resident(f.block);
                thread_index = Index{f.thread, 0, 0};
                block_index = Index{first + f.block, 0, 0};
                c.running = &f;
                swapcontext(&scheduler, &f.context);
            }
            if (!any) break;
            if (c.progress == before) die("deadlock: every thread waits at a barrier that cannot complete");
        }
        check_canary();
        for (const Fiber& f : c.fibers)
            if (f.cluster_arrived) die("a thread exited between cluster arrive and wait");
        cluster = nullptr;
    }
}

}  // namespace emu

// The runtime calls of the files under test: a device that launches clusters
// and code built for sm_90.
cudaError_t cudaGetLastError() { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t) { return "emulated runtime error"; }
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr, int) {
    *value = 1;
    return cudaSuccess;
}
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, const void*) {
    *attributes = cudaFuncAttributes{};
    attributes->ptxVersion = 90;
    attributes->binaryVersion = 90;
    return cudaSuccess;
}
