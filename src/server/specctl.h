/*
 * specctl.h — the server's batch-wide drafting choice (issue 18).
 *
 * With several slots decoding, each slot's draft-length controller (gen/autok.h) sees round times
 * that include the other slots' rows, so it cannot tell what its own drafting costs the batch; on a
 * cache-resident model batched plain steps emit far more tokens per second than batched
 * speculative rounds (bundled model, 4 clients: 4,266 vs 2,276 tok/s), while on a memory-bound one
 * drafting still pays with 2 slots. So for each number of decoding slots the worker keeps one of
 * these: two arms, 0 "own" (every slot's controller decides) and 1 "plain" (slots with an automatic
 * width are capped at 1 through ink_gen_opts.block_cap; a request's fixed width is never touched),
 * each with the tokens emitted per second of engine step. It runs the better arm and now and then
 * tries the other for SRV_SPEC_EXPLORE steps; the wait doubles from SRV_SPEC_GAP0 up to
 * SRV_SPEC_GAP_MAX while the other arm loses and returns to SRV_SPEC_GAP0 when it wins (by more than
 * SRV_SPEC_MARGIN). Steps that carry a prompt chunk are not measured (the caller says so), nor the
 * first step after a switch of arm (it wakes dormant drafter depths). Lossless either way: the cap
 * only chooses widths.
 *
 * Pure state over caller-owned memory: no allocation, no clock, no locking (the worker thread alone
 * uses it).
 */
#ifndef INK_SERVER_SPECCTL_H
#define INK_SERVER_SPECCTL_H

#define SRV_SPEC_EXPLORE 12    /* steps an exploration of the other arm lasts */
#define SRV_SPEC_GAP0 32       /* steps between explorations at first */
#define SRV_SPEC_GAP_MAX 2048  /* ... doubling up to this many while the other arm loses */
#define SRV_SPEC_MARGIN 1.03   /* the other arm must emit this much more per second to take over */

typedef struct srv_spec_ctl {
    double rate[2], xsum;  /* smoothed tokens / s of each arm; the running exploration's sum */
    int n[2], xn;          /* samples behind rate[]; samples of the running exploration */
    int arm;               /* the arm in use outside explorations */
    int exploring, left;   /* an exploration of the other arm is running, steps it has left */
    int gap, next, steps;  /* steps between explorations, when the next one starts, steps so far */
    int last;              /* the arm of the previous step (-1: none) */
} srv_spec_ctl;

void srv_spec_init(srv_spec_ctl *c);
/* The arm for the next engine step (0: own widths, 1: plain steps for the auto slots). */
int srv_spec_arm(srv_spec_ctl *c);
/* After that step: the arm it ran, whether it is a valid sample (no prompt chunk, a positive
 * time), and the tokens it emitted per second. */
void srv_spec_observe(srv_spec_ctl *c, int arm, int measured, double rate);

#endif
