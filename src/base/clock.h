/*
 * clock.h — the monotonic wall clock every timing in the tree reads (generation statistics, server
 * timings, download rates, bench measurements). Depends on libc only; no state, nothing to free.
 * (The pool keeps its own nanosecond counter for its stall detector; CLOCK_REALTIME deadlines for
 * pthread_cond_timedwait are a different clock on purpose.)
 */
#ifndef INK_CLOCK_H
#define INK_CLOCK_H

/* Seconds on CLOCK_MONOTONIC (arbitrary origin): only differences mean anything. */
double ink_now_s(void);

#endif
