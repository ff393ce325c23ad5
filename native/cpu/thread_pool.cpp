#include "cpu/thread_pool.hpp"

#include <chrono>
#include <cstdlib>
#include <exception>

namespace mbn::cpu {
namespace {

// How long a thread spins waiting before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(50);

int configured_thread_count() {
    if (const char* text = std::getenv("MIOPEN_BN_NUM_THREADS")) {
        char* end = nullptr;
        const long value = std::strtol(text, &end, 10);
        if (end != text && value >= 1) return value > 1024 ? 1024 : static_cast<int>(value);
    }
    const unsigned hardware = std::thread::hardware_concurrency();
    return hardware == 0 ? 1 : static_cast<int>(hardware);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
}

// Spins until done() or kSpin has passed; returns done().
template <typename Done>
bool spin_until(Done&& done) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (unsigned i = 1;; ++i) {
        if (done()) return true;
        cpu_relax();
        if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) return done();
    }
}

}  // namespace

ThreadPool& ThreadPool::instance() {
    // Never destroyed: workers must not be joined during static destruction,
    // when a late call from another library's destructor could still come.
    static ThreadPool* pool = new ThreadPool(configured_thread_count());
    return *pool;
}

ThreadPool::ThreadPool(int threads) {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
}

void ThreadPool::work_share(int thread) {
    const std::int64_t per = tasks_ / active_threads_;
    const std::int64_t extra = tasks_ % active_threads_;
    const std::int64_t begin = thread * per + (thread < extra ? thread : extra);
    const std::int64_t end = begin + per + (thread < extra ? 1 : 0);
    if (begin < end) entry_(body_, begin, end, thread);
}

void ThreadPool::run(std::int64_t tasks, Entry entry, void* body) {
    if (tasks <= 0) return;
    std::lock_guard<std::mutex> call(call_mutex_);
    const int threads = tasks < size() ? static_cast<int>(tasks) : size();
    if (threads == 1) {
        entry(body, 0, tasks, 0);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        entry_ = entry;
        body_ = body;
        tasks_ = tasks;
        active_threads_ = threads;
        pending_.store(threads - 1, std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    work_share(0);
    const auto finished = [this] { return pending_.load(std::memory_order_acquire) == 0; };
    if (spin_until(finished)) return;
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, finished);
}

void ThreadPool::worker_loop(int thread) {
    std::uint64_t seen = 0;
    for (;;) {
        const auto published = [&] { return generation_.load(std::memory_order_acquire) != seen; };
        if (!spin_until(published)) {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, published);
        }
        seen = generation_.load(std::memory_order_acquire);
        {
            std::lock_guard<std::mutex> lock(mutex_);  // orders the read of the job with its publication
            if (stopping_) return;
        }
        if (thread >= active_threads_) continue;
        // Task bodies never throw (scratch is allocated before the call);
        // terminate rather than deadlock the caller if one ever does.
        try {
            work_share(thread);
        } catch (...) {
            std::terminate();
        }
        if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard<std::mutex> lock(mutex_);
            done_.notify_one();
        }
    }
}

}  // namespace mbn::cpu
