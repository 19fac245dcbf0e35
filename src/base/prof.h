/*
 * prof.h — the per-op profile of `--profile` (issue 15): wall time, weight bytes streamed and
 * calls per part of the forward pass (and sampling), accumulated by the thread that runs the
 * forward pass. Off by default; when off each site costs one branch. The totals are process-wide
 * (one generating thread at a time: the CLI's); the public interface is ink_profile_* in inkling.h.
 * No allocation.
 */
#ifndef INK_PROF_H
#define INK_PROF_H

#include "base/clock.h"
#include "inkling.h"

extern int ink_prof_on;
void ink_prof_add(int cat, double seconds, size_t bytes);

/* Runs `stmt`, charging its wall time (and `bytes`) to category `cat` when profiling is on. */
#define INK_PROF(cat, bytes, stmt)                                                                                  \
    do {                                                                                                             \
        if (ink_prof_on) {                                                                                           \
            double t_prof_ = ink_now_s();                                                                            \
            stmt;                                                                                                    \
            ink_prof_add((cat), ink_now_s() - t_prof_, (bytes));                                                     \
        } else {                                                                                                     \
            stmt;                                                                                                    \
        }                                                                                                            \
    } while (0)

#endif
