// A small persistent pool of worker threads shared by every CPU handle.
//
// parallel_for splits [0, tasks) into one contiguous range per thread, and
// the calling thread works too.  Each thread takes its own range a chunk at a
// time and then helps with the others' remaining chunks, so a worker that
// wakes late (or is preempted) delays the call by at most the chunk it holds,
// while normally each thread keeps the same part of the data from one pass
// (and one call) to the next, in its own caches.  Kernels make their results
// independent of the thread count and of who ran what by giving every task
// its own output slot and merging slots in task order afterwards.
//
// Waking a sleeping thread costs tens of microseconds, as much as a whole
// small batch norm, so workers spin after each job for longer than the gap
// between two calls of a typical caller before sleeping, and the caller
// spins briefly before sleeping on the job's completion.  Spinning yields
// now and then, and a worker that finds itself on its caller's CPU moves
// off it: the scheduler tends to queue a woken worker there, and two
// threads sharing one CPU must not spin it away from each other.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace mbn::cpu {

class ThreadPool {
public:
    // Runs body(begin, end, thread_index) for ranges covering [0, tasks);
    // a thread may get several ranges.
    template <typename Body>
    void parallel_for(std::int64_t tasks, Body&& body) {
        using Callable = std::remove_reference_t<Body>;
        run(tasks, &invoke<Callable>, const_cast<void*>(static_cast<const void*>(&body)));
    }

    // How many threads (callers included) share a call's work.
    int size() const { return static_cast<int>(workers_.size()) + 1; }

    // The process-wide pool (a forked child gets its own on first use), sized
    // by MIOPEN_BN_NUM_THREADS (at most 4 per usable CPU) or the CPUs this
    // process may use; smaller when threads cannot be started (logged).
    static ThreadPool& instance();

    explicit ThreadPool(int threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

private:
    using Entry = void (*)(void* body, std::int64_t begin, std::int64_t end, int thread);

    template <typename Body>
    static void invoke(void* body, std::int64_t begin, std::int64_t end, int thread) {
        (*static_cast<Body*>(body))(begin, end, thread);
    }

    // One thread's share of the current job: chunks are claimed from the
    // front, by its owner first and then by any thread that ran out of work.
    struct alignas(64) Range {
        std::atomic<std::int64_t> next{0};
        std::int64_t end = 0;
        std::int64_t chunk = 1;
    };

    void run(std::int64_t tasks, Entry entry, void* body);
    void work(int thread);
    void worker_loop(int thread);
    template <typename Done>
    void wait_caller(Done&& done);

    std::vector<std::thread> workers_;
    std::unique_ptr<Range[]> ranges_;
    std::mutex call_mutex_;  // one parallel_for at a time (calls from several handles)
    std::mutex mutex_;       // guards sleeping and waking
    std::condition_variable wake_;
    std::condition_variable done_;
    std::atomic<std::uint64_t> generation_{0};  // bumped (release) once a job is published
    std::atomic<std::int64_t> finished_{0};     // tasks of the current job done
    std::atomic<int> busy_{0};                  // workers not yet through with the last job
    bool stopping_ = false;
    // The current job: written only while no worker is busy, before generation_ is bumped.
    Entry entry_ = nullptr;
    void* body_ = nullptr;
    std::int64_t tasks_ = 0;
    int active_threads_ = 1;
    int caller_cpu_ = -1;  // where the caller published the job, -1 if unknown
};

}  // namespace mbn::cpu
