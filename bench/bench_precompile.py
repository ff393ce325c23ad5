"""Compiles the torch.compile anchor's rows ahead of the bench, in parallel
worker processes, to fill Inductor's on-disk caches (its FX graph cache and
AOTAutograd's, with the Triton kernels bundled).

A cold compile of one row costs seconds (Dynamo, AOTAutograd, Inductor,
then Triton or the C++ compiler), one after another in the bench's process;
a full GPU run has over a thousand rows.  When the bench then compiles a
row itself, a cache hit skips everything but Dynamo's trace and the cache
look-up (measured on this 2-core CPU with Inductor's C++ backend: 1.7-2.0 s
cold, 0.12-0.14 s from the cache).  Each row's JSON says which it was
(`compile_cache`).

The workers compile without running anything: their backend hands the
graph to Inductor, then stops the call before the compiled code runs.  So
they take no GPU time for kernels and leave no autotuning results behind:
Triton's runtime choice among a reduction's configurations is made later by
the bench's own first call, on an idle GPU, and not by workers competing
for it.  They run before any timing starts.
"""
import multiprocessing
import os
import time


class _Compiled(Exception):
    """Raised instead of running a compiled graph: the compile was all we wanted."""


def _compile_only(graph, example_inputs):
    import torch
    torch._dynamo.lookup_backend("inductor")(graph, example_inputs)

    def stop(*_):
        raise _Compiled()

    return stop


def _start_worker(threads):
    import torch
    import torch._inductor.config
    from bench_compiled import configure_dynamo
    torch.set_num_threads(threads)  # Inductor's C++ kernels are generated for the thread count
    # Parallelism comes from the workers; compile_threads is not part of the
    # cache key, so the bench (with Inductor's default) still hits.
    torch._inductor.config.compile_threads = 1
    configure_dynamo()


def _compile_row(job):
    """Worker: compiles one row; returns (job, seconds, error text or None)."""
    import torch
    from bench_compiled import FUNCTIONS, blank_arguments, error_text
    op, shape, dtype_name, layout, device = job
    start = time.perf_counter()
    error = "the compiled function ran instead of stopping"
    torch._dynamo.reset()
    try:
        args = blank_arguments(op, shape, dtype_name, layout, device)
        torch.compile(FUNCTIONS[op], backend=_compile_only, dynamic=False, fullgraph=True)(*args)
    except _Compiled:
        error = None
    except Exception as failure:
        error = error_text(failure)
    finally:
        args = None
        if device == "cuda":
            torch.cuda.empty_cache()  # give big inputs back before the next row
    return job, time.perf_counter() - start, error


def default_workers(backend):
    """GPU runs: most of the host's cores (the bench waits meanwhile); the
    CPU bench: none (its machine has 2 cores and times what runs on them)."""
    if backend != "gpu":
        return 0
    return max(0, min(12, (os.cpu_count() or 1) - 2))


# The longest a row may take a worker (a worker that died leaves its row
# unanswered: multiprocessing's pool does not notice).
ROW_TIMEOUT_S = 300


def precompile(jobs, workers, device, deadline_s=None, threads=1, log=print):
    """Compiles `jobs` ((op, shape, dtype, layout) in the bench's order) in
    `workers` processes, stopping when `deadline_s` seconds have passed.
    `threads`: torch's thread count in the bench (which CPU code depends
    on).  Returns a summary for the JSON header."""
    start = time.monotonic()
    summary = {"workers": workers, "jobs": len(jobs), "compiled": 0, "failed": 0, "left_out": 0,
               "seconds": 0.0, "first_error": None}
    if not jobs or workers <= 0:
        return summary
    log(f"bench: pre-compiling {len(jobs)} rows in {workers} worker processes"
        + ("" if deadline_s is None else f", for at most {deadline_s:.0f} s"))
    context = multiprocessing.get_context("spawn")  # the parent holds a CUDA context
    pool = context.Pool(workers, initializer=_start_worker, initargs=(threads if device == "cpu" else 1,))
    done = 0
    try:
        results = pool.imap_unordered(_compile_row, [tuple(j) + (device,) for j in jobs])
        while done < len(jobs):
            wait = ROW_TIMEOUT_S
            if deadline_s is not None:
                wait = min(wait, deadline_s - (time.monotonic() - start))
                if wait <= 0:
                    break
            try:
                _, _, error = results.next(timeout=wait)
            except multiprocessing.TimeoutError:
                break
            done += 1
            if error is None:
                summary["compiled"] += 1
            else:
                summary["failed"] += 1
                summary["first_error"] = summary["first_error"] or error
            if done % 100 == 0:
                log(f"bench: pre-compiled {done} of {len(jobs)} rows ({time.monotonic() - start:.0f} s)")
    finally:
        pool.terminate()
        pool.join()
    summary["seconds"] = round(time.monotonic() - start, 1)
    summary["left_out"] = len(jobs) - done
    log(f"bench: pre-compiled {summary['compiled']} rows, {summary['failed']} failed, in "
        f"{summary['seconds']:.0f} s" + (f"; stopped there, {summary['left_out']} rows left to compile "
                                         "in the bench" if summary["left_out"] else ""))
    return summary
