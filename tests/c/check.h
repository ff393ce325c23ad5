/* A minimal test harness for the C ABI tests: counts checks, prints every
 * failure with its location and the library's last-error message, and ends
 * with the "N passed, N failed" line test runners read. */
#ifndef MIOPEN_BN_TEST_CHECK_H
#define MIOPEN_BN_TEST_CHECK_H

#include <miopen/miopen.h>
#include <stdio.h>
#include <string.h>

static int checks_passed = 0;
static int checks_failed = 0;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (cond) {                                                              \
            ++checks_passed;                                                     \
        } else {                                                                 \
            ++checks_failed;                                                     \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                        \
    } while (0)

/* The call returns `expected`; a failing status must come with a message. */
#define CHECK_STATUS(expected, call)                                                    \
    do {                                                                                \
        miopenStatus_t got_ = (call);                                                   \
        if (got_ == (expected) &&                                                       \
            (got_ == miopenStatusSuccess || miopenBNGetLastErrorMessage()[0] != '\0')) { \
            ++checks_passed;                                                            \
        } else {                                                                        \
            ++checks_failed;                                                            \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (message: \"%s\")\n",   \
                    __FILE__, __LINE__, #call, miopenGetErrorString(got_),              \
                    miopenGetErrorString(expected), miopenBNGetLastErrorMessage());     \
        }                                                                               \
    } while (0)

static int report(void) {
    printf("%d passed, %d failed\n", checks_passed, checks_failed);
    return checks_failed == 0 ? 0 : 1;
}

#endif
