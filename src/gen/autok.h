/*
 * autok.h — the adaptive draft length (issue 16): each round picks the verify width K (1 = a plain
 * step, K - 1 drafts) that maximises the expected tokens per second from what this run measured.
 *
 * Model. With a_j the chance that draft j+1 is accepted given drafts 1..j were, a round of width K
 * emits E(K) = 1 + a_0 + a_0 a_1 + ... + a_0 .. a_{K-2} tokens on average, and costs c(K) seconds (its
 * draft, verify, acceptance, rollback and drafter update, measured per K). The controller picks
 * argmax E(K) / c(K). a_j and c(K) are exponentially smoothed, so the choice follows the text (a
 * repetitive passage raises a_j, free text lowers it) and the machine (a busy core raises c).
 *
 * Acceptance that depends on the width. On text that repeats (a loop of one verse), where a round
 * starts depends on K, and with it which drafts fail: on a 160 MiB twin, rounds of width 5 locked
 * into a phase where every other round rejected draft 2 (0.53) while rounds of width 4 accepted it
 * (1.0), and the pooled a_j, filled mostly by the width in use, made 4 look as bad as 5. So each
 * width also keeps its yield Y(K): its rounds' emitted tokens over the E(K) predicted for them
 * (smoothed over ~33 rounds behind 6 pseudo-rounds of 1, within [0.5, 1.5]; a deviation of up to
 * 0.1 counts as none, so that near-equal widths do not flip on noise); the width in use has Y ~ 1
 * by construction, and a neighbour that does better or worse than the pooled model says shows it.
 * On a synthetic machine with such a lock the controller reached 90 % of the best fixed width
 * without yields and 98-99 % with them (tests/test_gen.c).
 *
 * Staleness. An estimate observed rarely (a deep position or a width seen only when explored) keeps
 * an effective sample count that decays by (1 - LAMBDA_T) per round since its last observation, so
 * a new observation after a long gap weighs more than one in a steady stream (never less than
 * the usual smoothing weight): after the first, low-acceptance rounds of a text, a position seen
 * only on explorations no longer needs dozens of them to recover. Costs decay the same way
 * (faster: 3 % per round), so a width first timed in a run's slow start (a 160 MiB twin's first
 * rounds of width 4 took 10.9 ms, later ones 8.3) is not held to it between explorations; yields
 * slower (0.5 %).
 *
 * Robustness. A width's first three rounds give its estimate as their median (one slow round, a cold
 * cache or a preemption, cannot condemn a width that is then never tried again), a position's first
 * acceptance observations are averaged with two pseudo-observations of its prior (1/2 for the first
 * position, the shallower position's estimate for the others), so one rejected draft cannot make
 * every width look like a plain step, and the first two rounds of a fresh controller are plain
 * steps (c(1) is the yardstick).
 *
 * Stalls. A timed round slower than 1.5x what its width was expected to take (its estimate, or
 * before its first sample the estimate from the measured neighbours once a draft's cost is known)
 * counts as 1.5x. On a 2-vCPU AMD EPYC VM the process stalls ~70 ms every ~0.5 s (when the kernel's
 * memory monitor, kdamond, runs), so one round in ~12 of the 1 GiB twin took 2.5-4x its usual
 * time, whatever its width. Counted in full (the clip was 8x), a stall on a width's first samples
 * made it look twice as dear, and runs stayed at widths 2-4 or in plain steps: seven runs of 512
 * tokens reached 0.46-1.01 of width 5's speed, median 0.81 (one went plain for 443 rounds). A stall
 * lands on the width in use's rounds as often as on any other; clipped, it moves the speed factor
 * by at most 7.5 %, and a real slowdown is still followed within a few rounds (each moves it 7.5 %).
 *
 * Drift. A round's time is modelled as speed x c(K): `speed` follows the machine (a core that got
 * busier or quieter, a clock that ramped), c(K) the width. Every timed round of an established
 * width moves `speed` quickly (LAMBDA_S) towards seconds / c(K), and c(K) slowly towards seconds /
 * speed, so a drift common to all widths lands in `speed` and the widths measured rarely (the
 * explored neighbours) keep their place relative to the one in use. Without it, a neighbour measured
 * during a slow phase (the first rounds of a run: 10.5 ms per round of width 3 there, 7.5 ms later)
 * kept that cost until its next exploration and lost every comparison in between. Only rounds of
 * the width in use move `speed`: an exploration or a plain probe measures its own width, whose
 * estimate may be the stale one (c(1) from a run's slow start: 0.64 ms against 0.26 measured, on
 * the bundled model), so it moves that width's cost, at least half-way (as `speed` it had made
 * every width look cheaper and left c(1) where it was).
 *
 * Exploration. A width never measured is estimated optimistically: the cost of the nearest measured
 * width below plus the measured cost of a draft per extra row (the verify's extra rows are assumed
 * free), so a width that might win gets tried once and is then known; only one width past the
 * widest measured is a candidate, so a fresh controller climbs one width at a time instead of
 * jumping to the widest (whose first round restarts every depth). Now and then a round tries a
 * neighbour of the best width, one up or one down: that keeps the neighbours' costs and the deeper
 * positions' acceptance current. Each direction waits EXPLORE rounds at first; an exploration that
 * loses doubles its direction's wait (up to 32 rounds while drafting, 1,024 while plain steps are best:
 * exploring from plain steps restarts dormant depths, dear where plain wins), one that wins resets it, so a settled
 * choice costs a fraction of a % while a change in the text is noticed within a few hundred rounds.
 * While drafting with 3 or more (where plain steps are no neighbour), a plain step is probed every
 * 16 rounds at first, the wait doubling up to 64 while it loses: c(1), the yardstick, is otherwise
 * measured only in a run's first rounds, its slow start (the bundled model: ~1 ms a plain step
 * there, 0.2-0.26 ms later), and width 3 at 0.75 ms a round stayed ahead of plain steps it lost to
 * for a whole run. A probe restarts nothing (the depths are followed) and costs ~1 % of a run.
 *
 * Overhead of drafting. Depths a round does not draft with, and depths that fell behind during
 * narrower rounds, catch up in batches whose time the round's cost leaves out (it belongs to keeping
 * depths current, not to the width: charged to the round that crossed the lag, it made that round's
 * width look up to a step dearer, at random). It is still a cost that plain steps do not have (with
 * plain steps the depths go dormant and nothing is caught up), so the controller keeps it too: the
 * catch-up seconds since the last timed drafting round, smoothed per round of the width in use
 * (`over[K]`), are added to c(K); a width never in use takes the nearest narrower one's, else none.
 * Per width, because the catch-ups depend on the width: on a 160 MiB twin, rounds of width 5 in use
 * spent 1.17 ms a round in them, of width 4 0.1 ms (rounds of 11-12 ms; most of width 5's came from
 * a catch-up threshold below the lag a round of width 5 leaves, since fixed in gen.c: 0.06-0.10 ms
 * now). One overhead shared by all widths was raised by the width in use as much for its rivals as
 * for itself, which made 5 look 5 % dearer than 4 where it was 15 % dearer. Explored rounds leave
 * theirs out (a wider exploration catches up, once, what narrower rounds let lag). On the bundled
 * model at T 0.8 the catch-ups were ~15 % of the decode time, enough to make widths 2-3 look faster
 * than plain steps when they were 10-20 % slower. Restarts of depths that went dormant during plain
 * steps count (they recur each time the choice flips), a depth's first start in a run does not (the
 * caller leaves it out: it is paid once however the run goes on; charged, a 160 MiB twin's three
 * first starts, ~3 ms each, made `over` most of a plain step and sent runs to plain steps for 500
 * tokens at 0.6x of drafting).
 *
 * Text that repeats exactly (a greedy loop). There a round's outcome is set by where in the loop it
 * starts: on a 160 MiB twin's 7-token loop, rounds from one phase accepted all 4 drafts, from two
 * others the first only, from two more none, every time; width 5 then runs the cycle 5 + 2 tokens
 * (3.5 a round), widths 3 and 4 cycles of 2.33, width 2 one of 1.75. No per-position rate describes
 * that (the widths between are a valley the neighbour explorations cannot see across: runs settled on
 * width 3 or 4 at 0.8x of width 5), and single rounds of a neighbour start at the phases of the width
 * in use, not its own. So the caller tells the controller the text's period L (the smallest L <= 64
 * with which the last max(2 L, 32) tokens repeat; 0: none) and the phase (position mod L) of each
 * round, and the controller keeps per phase how many drafts are accepted from it (exactly, once a
 * round rejected one; at least, while all were accepted). A width whose cycle from the current
 * phase the table covers is valued by that cycle's tokens per round (simulated) instead of Y(K) E(K);
 * a width the table does not cover at the current phase, and that could win if all its drafts were
 * accepted, is tried for one round there (the widest such, so one round fills the phase for every
 * width). An observation that contradicts the table (a loop still forming, whose first repeats the
 * drafter predicts worse; sampled text) replaces the phase's entry, and the table is used only after
 * 8 rounds in a row that agreed with it. There, the value of K is jagged (1.75, 2.33, 2.33, 3.5 tokens
 * a round for widths 2..5), so an exploration does not try the neighbour but, of the widths on its
 * side that the table values and that would win at 0.7 of their estimated cost, the one timed
 * longest ago: on an AVX2 Zen 2 width 3 beat 5 by 14 %, was timed high once in the run's slow start,
 * and runs stayed at 5 because 4, the only lower neighbour, lost every exploration.
 *
 * Confirmation. An exploration that times its width below 0.9 x the estimate (which moves only
 * half-way, or not at all while the first three samples' median rules) is repeated after EXPLORE
 * rounds instead of waiting out a doubled gap: always while the width has fewer than three timed
 * rounds, after that only if the width would be best at the cost just measured (in a greedy loop on
 * the 1 GiB twin, width 4, whose cycle beats width 5's only below 2/3 of its cost, was re-explored
 * every 8 rounds while a stall's estimate came down half-way at a time). An exploration moves an
 * established width's estimate at least half-way down, a quarter up.
 *
 * Choosing K from the past keeps speculative decoding lossless: greedy output equals plain decoding
 * whatever K is, and sampled tokens keep the target distribution. (A fixed seed reproduces a sampled
 * run only with a fixed K, since K decides which uniforms are drawn.)
 *
 * Pure state over caller-owned memory: no allocation, no clock (the caller passes the times).
 */
#ifndef INK_GEN_AUTOK_H
#define INK_GEN_AUTOK_H

#include "inkling.h"

#define INK_AUTOK_LOOP 64 /* the longest text period the controller follows */

typedef struct ink_autok {
    int kmax;                              /* widths 1 .. kmax */
    int round;
    int explore_k, explore_dir;            /* the width being explored (0: none), 0 up / 1 down / 2 plain */
    int gap[3], next[3];                   /* rounds between explorations up / down / plain, and when next */
    int confirm[2];                        /* a width to explore again up / down (0: none; see CHEAPER) */
    double alpha[INK_MAX_DEPTH];           /* smoothed conditional acceptance of draft j + 1 */
    int alpha_n[INK_MAX_DEPTH];
    double alpha_w[INK_MAX_DEPTH];         /* its effective sample count, decayed by rounds since ... */
    int alpha_at[INK_MAX_DEPTH];           /* ... its last observation (round number) */
    double yield[INK_MAX_BLOCK + 1];       /* per width: smoothed emitted tokens / E(K) predicted */
    double yield_w[INK_MAX_BLOCK + 1];
    int yield_n[INK_MAX_BLOCK + 1], yield_at[INK_MAX_BLOCK + 1];
    double cost[INK_MAX_BLOCK + 1];        /* smoothed seconds per round of width K */
    int cost_n[INK_MAX_BLOCK + 1];
    double cost_w[INK_MAX_BLOCK + 1];      /* its effective sample count (decays while unmeasured) */
    int cost_at[INK_MAX_BLOCK + 1];
    double first[INK_MAX_BLOCK + 1][3];    /* a width's first samples: its estimate is their median */
    double draft_cost;                     /* smoothed seconds per draft (draft phase / drafts) */
    int draft_n;
    double speed;                          /* the machine's current speed factor (see below) */
    double over[INK_MAX_BLOCK + 1];        /* per drafting width: catch-up seconds per round of it in
                                            * use (smoothed, in units of the speed factor) */
    int over_n[INK_MAX_BLOCK + 1];
    double over_pending;                   /* catch-up seconds since the last timed drafting round */
    /* text that repeats (see above): its period (0: none), the phase of the round being chosen, and
     * per phase the drafts accepted from it: exactly (>= 0; -1 unknown), or at least lo */
    int loop_L, loop_phase, loop_quiet;     /* ... and the rounds since one contradicted the table */
    int8_t loop_exact[INK_AUTOK_LOOP], loop_lo[INK_AUTOK_LOOP];
} ink_autok;

/* Forgets everything; widths 1 .. kmax (clamped to 1 .. INK_MAX_BLOCK). */
void ink_autok_init(ink_autok *c, int kmax);

/* E(K): expected tokens a round of width K emits under the current acceptance estimates. */
double ink_autok_expected(const ink_autok *c, int K);
/* Y(K): the width's measured tokens per round over what E(K) predicted for its rounds (1 until it is
 * measured); the controller ranks widths by Y(K) E(K) / c(K). */
double ink_autok_yield(const ink_autok *c, int K);
/* Tokens a round of width K is expected to emit, as the controller ranks it: on text that repeats,
 * the tokens per round of K's cycle when the table covers it, else Y(K) E(K). */
double ink_autok_tokens(const ink_autok *c, int K);
/* The text before the next round repeats with period L (0: it does not; L > INK_AUTOK_LOOP counts
 * as 0) and that round starts at phase `phase` (its newest token's position mod L). Call before
 * ink_autok_choose; the round's ink_autok_observe records its outcome under that phase. */
void ink_autok_text(ink_autok *c, int L, int phase);
/* The text period whose table the controller uses now (0: none, or not trusted yet). */
int ink_autok_loop(const ink_autok *c);
/* c(K) as the controller sees it, in seconds at the current speed: measured, or the optimistic
 * estimate for an unmeasured width; 0 when nothing at all is measured yet. */
double ink_autok_cost(const ink_autok *c, int K);
/* The catch-up overhead charged to drafting width K, in seconds at the current speed (0 for K < 2). */
double ink_autok_overhead_of(const ink_autok *c, int K);
/* The width with the best E(K) / c(K) (no exploration). */
int ink_autok_best(const ink_autok *c);
/* The width for the next round: the best one, or on an exploration round a neighbour of it. */
int ink_autok_choose(ink_autok *c);

/* One finished round of width K: M drafts of which a were accepted; `seconds` the round's whole
 * time, `draft_seconds` its draft phase. seconds < 0: the round's time says nothing about its width
 * (dormant depths restarted in it): only the acceptance counts, and an exploration of it is retried
 * next round. */
void ink_autok_observe(ink_autok *c, int K, int M, int a, double seconds, double draft_seconds);
/* Seconds of drafter catch-up left out of the rounds' times (call before ink_autok_observe of the
 * round they happened in or before): charged to drafting widths as `over` (see above). */
void ink_autok_overhead(ink_autok *c, double seconds);

#endif
