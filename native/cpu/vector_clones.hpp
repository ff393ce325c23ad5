// MBN_VECTOR_CLONES marks a hot loop to be compiled twice, for x86-64-v3
// (AVX2, FMA, F16C) and for baseline x86-64, the better one picked when the
// library loads, so one build runs on any x86-64 and fast on recent ones.
// Results are deterministic on a given machine; the two builds may differ in
// the last bits where the v3 one fuses a multiply and an add.
// ThreadSanitizer cannot run the ifunc resolvers that pick the clone (they
// run before it starts), so a TSan build gets the baseline loops only.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define MBN_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MBN_VECTOR_CLONES
#endif
