#include "cpu/thread_pool.hpp"

#include "common/environment.hpp"
#include "common/error.hpp"
#include "common/log_sink.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>
#include <new>
#include <system_error>

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

// The CPUs this process may run on (its affinity mask, which a container or
// taskset narrows), else the hardware threads.
int usable_cpus() {
#if defined(__linux__)
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 0) return CPU_COUNT(&allowed);
#endif
    const unsigned hardware = std::thread::hardware_concurrency();
    return hardware == 0 ? 1 : static_cast<int>(hardware);
}

// More threads than this many per usable CPU only take turns: each call
// then waits for every one of them to be scheduled (1024 threads on 2 CPUs
// made a 256 KiB call 500x slower).
constexpr int kMaxThreadsPerCpu = 4;

// MIOPEN_BN_NUM_THREADS, capped at kMaxThreadsPerCpu per usable CPU; by
// default one thread per usable CPU.
int configured_thread_count() {
    const int cpus = usable_cpus();
    const std::int64_t asked = positive_from_environment("MIOPEN_BN_NUM_THREADS", 0);
    if (asked <= 0) return cpus;
    const std::int64_t cap = static_cast<std::int64_t>(kMaxThreadsPerCpu) * cpus;
    if (asked <= cap) return static_cast<int>(asked);
    log_warning("thread pool", concat("MIOPEN_BN_NUM_THREADS=", asked, " is more than ", kMaxThreadsPerCpu,
                                      " threads per CPU this process may use (", cpus, "): using ", cap));
    return static_cast<int>(cap);
}

// The pool of this process.  A forked child has none of its parent's
// workers (fork copies only the calling thread), so it must not use the
// parent's pool: the fork handlers forget it in the child, whose first call
// then starts a pool of its own.  The parent's pool object is left behind
// there, unused (destroying it would join threads that do not exist).
std::atomic<ThreadPool*> current_pool{nullptr};
// Held across fork() so that a child never inherits it locked.
std::mutex pool_creation;

void before_fork() { pool_creation.lock(); }
void after_fork_in_parent() { pool_creation.unlock(); }
void after_fork_in_child() {
    current_pool.store(nullptr, std::memory_order_relaxed);
    pool_creation.unlock();
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
    if (ThreadPool* pool = current_pool.load(std::memory_order_acquire)) return *pool;
#if defined(__linux__)
    // Registered before pool_creation is taken: fork() runs the handlers
    // under the C library's own lock, which pthread_atfork also takes.
    static const bool fork_handled = pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child) == 0;
    if (!fork_handled) throw std::bad_alloc();  // pthread_atfork fails only for lack of memory
#endif
    std::lock_guard<std::mutex> lock(pool_creation);
    ThreadPool* pool = current_pool.load(std::memory_order_relaxed);
    if (pool == nullptr) {
        // Never destroyed: workers must not be joined during static
        // destruction, when a late call from another library's destructor
        // could still come.
        pool = new ThreadPool(configured_thread_count());
        current_pool.store(pool, std::memory_order_release);
    }
    return *pool;
}

// A thread that cannot be started (a pids limit, an address-space limit too
// small for its stack) leaves the pool with the workers started so far; the
// caller's thread alone still does the work.
ThreadPool::ThreadPool(int threads) : ranges_(new Range[threads]) {
    workers_.reserve(threads - 1);  // from here on, only starting a thread can fail
    for (int t = 1; t < threads; ++t) {
        try {
            workers_.emplace_back([this, t] { worker_loop(t); });
        } catch (const std::system_error& e) {
            log_warning("thread pool", concat("could not start worker thread ", t, " of ", threads - 1, " (", e.what(),
                                              "): running with ", t, " thread(s)"));
            break;
        }
    }
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
