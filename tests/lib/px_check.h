/* The one CHECK of the C table tests: on a false condition it prints
 * "FAIL: " and the printf-style message to stderr and counts it in the
 * variable named `failed` in scope (a file static or a local), and goes on,
 * so that every failing case of a table is reported, not only the first. */
#ifndef PX_CHECK_H
#define PX_CHECK_H

#include <stdio.h>

#define CHECK(cond, ...)                  \
    do {                                  \
        if (!(cond)) {                    \
            fprintf(stderr, "FAIL: ");    \
            fprintf(stderr, __VA_ARGS__); \
            fprintf(stderr, "\n");        \
            failed++;                     \
        }                                 \
    } while (0)

#endif
