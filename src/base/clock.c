/* clock.c — ink_now_s (see clock.h). Depends on libc only. */
#include "base/clock.h"

#include <time.h>

double ink_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
