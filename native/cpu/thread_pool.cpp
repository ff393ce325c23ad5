#include "cpu/thread_pool.hpp"

#include <cstdlib>
#include <exception>

namespace mbn::cpu {
namespace {

int configured_thread_count() {
    if (const char* text = std::getenv("MIOPEN_BN_NUM_THREADS")) {
        char* end = nullptr;
        const long value = std::strtol(text, &end, 10);
        if (end != text && value >= 1) return value > 1024 ? 1024 : static_cast<int>(value);
    }
    const unsigned hardware = std::thread::hardware_concurrency();
    return hardware == 0 ? 1 : static_cast<int>(hardware);
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
        pending_ = threads - 1;
        ++generation_;
    }
    wake_.notify_all();
    work_share(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
}

void ThreadPool::worker_loop(int thread) {
    std::uint64_t seen = 0;
    for (;;) {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        if (thread >= active_threads_) continue;
        lock.unlock();
        // Task bodies never throw (scratch is allocated before the call);
        // terminate rather than deadlock the caller if one ever does.
        try {
            work_share(thread);
        } catch (...) {
            std::terminate();
        }
        lock.lock();
        if (--pending_ == 0) done_.notify_one();
    }
}

}  // namespace mbn::cpu
