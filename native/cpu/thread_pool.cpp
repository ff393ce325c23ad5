#include "cpu/thread_pool.hpp"

#include "common/environment.hpp"

#include <algorithm>
#include <chrono>
#include <exception>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace mbn::cpu {
namespace {

// How long a worker spins for the next job before it sleeps: longer than
// what a caller (Python bindings included) typically spends between two
// calls, so that back-to-back calls find the workers awake.
constexpr auto kWorkerSpin = std::chrono::microseconds(1000);
// How long the caller spins for the workers before it sleeps.
constexpr auto kCallerSpin = std::chrono::microseconds(100);
// Chunks per thread's range: enough to rebalance a late start, few enough
// that claiming them costs nothing next to the work.
constexpr std::int64_t kChunksPerRange = 8;

int configured_thread_count() {
    const std::int64_t asked = positive_from_environment("MIOPEN_BN_NUM_THREADS", 0);
    if (asked > 0) return static_cast<int>(std::min<std::int64_t>(asked, 1024));
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

// Spins until done() or `spin` has passed; returns done().  Every 64 turns
// (a microsecond or two) it also yields the CPU: the thread it waits for may
// be queued behind it on the same CPU, where the scheduler often puts a
// woken worker beside its waker.  Without the yield such a call ran 5-7x
// slower (2-vCPU VM, NCHW inference of 6.4 MB: 1.5 ms instead of 0.2 ms).
template <typename Done>
bool spin_until(Done&& done, std::chrono::microseconds spin) {
    const auto deadline = std::chrono::steady_clock::now() + spin;
    for (unsigned i = 1;; ++i) {
        if (done()) return true;
        cpu_relax();
        if (i % 64 == 0) {
            std::this_thread::yield();
            if (std::chrono::steady_clock::now() > deadline) return done();
        }
    }
}

// The CPU the calling thread runs on, or -1 where that cannot be known.
int current_cpu() {
#if defined(__linux__)
    return sched_getcpu();
#else
    return -1;
#endif
}

// Moves the calling thread off `cpu` if its affinity allows `threads` CPUs
// or more, so that there is room for every thread of the pool.  The
// scheduler often queues a woken worker on its waker's CPU while another CPU
// idles, and then leaves the two taking turns there: each call ran at one
// thread's speed (2-vCPU VM, with both threads on one CPU for rounds on
// end).  The affinity is restored at once; the migration it forced stays.
void move_off_cpu(int cpu, int threads) {
#if defined(__linux__)
    cpu_set_t allowed;
    if (cpu < 0 || cpu >= CPU_SETSIZE || pthread_getaffinity_np(pthread_self(), sizeof allowed, &allowed) != 0) return;
    if (CPU_COUNT(&allowed) < threads || !CPU_ISSET(cpu, &allowed)) return;
    cpu_set_t others = allowed;
    CPU_CLR(cpu, &others);
    if (pthread_setaffinity_np(pthread_self(), sizeof others, &others) == 0)
        pthread_setaffinity_np(pthread_self(), sizeof allowed, &allowed);
#else
    (void)cpu, (void)threads;
#endif
}

}  // namespace

ThreadPool& ThreadPool::instance() {
    // Never destroyed: workers must not be joined during static destruction,
    // when a late call from another library's destructor could still come.
    static ThreadPool* pool = new ThreadPool(configured_thread_count());
    return *pool;
}

ThreadPool::ThreadPool(int threads) : ranges_(new Range[threads]) {
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

// Runs chunks of the thread's own range, then of the others' (in order after
// its own), until none is left.
void ThreadPool::work(int thread) {
    for (int i = 0; i < active_threads_; ++i) {
        Range& range = ranges_[(thread + i) % active_threads_];
        for (;;) {
            const std::int64_t begin = range.next.fetch_add(range.chunk, std::memory_order_relaxed);
            if (begin >= range.end) break;
            const std::int64_t end = std::min(begin + range.chunk, range.end);
            entry_(body_, begin, end, thread);
            if (finished_.fetch_add(end - begin, std::memory_order_acq_rel) + (end - begin) == tasks_ && thread != 0) {
                std::lock_guard<std::mutex> lock(mutex_);
                done_.notify_all();
            }
        }
    }
}

// The caller's wait, spinning first: done() must become true through a
// worker that takes mutex_ and notifies done_ after making it so.
template <typename Done>
void ThreadPool::wait_caller(Done&& done) {
    if (spin_until(done, kCallerSpin)) return;
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, done);
}

void ThreadPool::run(std::int64_t tasks, Entry entry, void* body) {
    if (tasks <= 0) return;
    std::lock_guard<std::mutex> call(call_mutex_);
    const int threads = tasks < size() ? static_cast<int>(tasks) : size();
    if (threads == 1) {
        entry(body, 0, tasks, 0);
        return;
    }
    // A worker that woke late may still be looking at the previous job.
    wait_caller([this] { return busy_.load(std::memory_order_acquire) == 0; });
    {
        std::lock_guard<std::mutex> lock(mutex_);
        entry_ = entry;
        body_ = body;
        tasks_ = tasks;
        active_threads_ = threads;
        const std::int64_t per = tasks / threads, extra = tasks % threads;
        for (int t = 0; t < threads; ++t) {
            const std::int64_t begin = t * per + std::min<std::int64_t>(t, extra);
            const std::int64_t length = per + (t < extra ? 1 : 0);
            ranges_[t].next.store(begin, std::memory_order_relaxed);
            ranges_[t].end = begin + length;
            ranges_[t].chunk = std::max<std::int64_t>(1, (length + kChunksPerRange - 1) / kChunksPerRange);
        }
        finished_.store(0, std::memory_order_relaxed);
        caller_cpu_ = current_cpu();
        busy_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    work(0);
    wait_caller([this, tasks] { return finished_.load(std::memory_order_acquire) == tasks; });
}

void ThreadPool::worker_loop(int thread) {
    std::uint64_t seen = 0;
    for (;;) {
        const auto published = [&] { return generation_.load(std::memory_order_acquire) != seen; };
        if (!spin_until(published, kWorkerSpin)) {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, published);
        }
        seen = generation_.load(std::memory_order_acquire);
        {
            std::lock_guard<std::mutex> lock(mutex_);  // orders the read of the job with its publication
            if (stopping_) return;
        }
        // Task bodies never throw (scratch is allocated before the call);
        // terminate rather than deadlock the caller if one ever does.
        if (thread < active_threads_) {
            if (caller_cpu_ >= 0 && current_cpu() == caller_cpu_) move_off_cpu(caller_cpu_, size());
            try {
                work(thread);
            } catch (...) {
                std::terminate();
            }
        }
        if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard<std::mutex> lock(mutex_);
            done_.notify_all();
        }
    }
}

}  // namespace mbn::cpu
