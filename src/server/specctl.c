/* specctl.c — the server's batch-wide drafting choice; see specctl.h. */
#include "server/specctl.h"

#include <string.h>

void srv_spec_init(srv_spec_ctl *c)
{
    memset(c, 0, sizeof *c);
    c->gap = SRV_SPEC_GAP0, c->next = SRV_SPEC_GAP0 / 4, c->last = -1;
}

int srv_spec_arm(srv_spec_ctl *c)
{
    if (!c->exploring && c->steps >= c->next) c->exploring = 1, c->left = SRV_SPEC_EXPLORE, c->xsum = 0, c->xn = 0;
    c->steps++;
    return c->exploring ? !c->arm : c->arm;
}

void srv_spec_observe(srv_spec_ctl *c, int arm, int measured, double rate)
{
    int first = arm != c->last;
    c->last = arm;
    if (arm == c->arm && !c->exploring) {
        if (!measured || first) return;
        double w = 1.0 / (c->n[arm] + 1);
        if (w < 0.05) w = 0.05;
        c->rate[arm] += w * (rate - c->rate[arm]), c->n[arm]++;
        return;
    }
    if (measured && !first) c->xsum += rate, c->xn++;
    if (--c->left > 0) return;
    c->exploring = 0;
    if (c->xn) c->rate[arm] = c->xsum / c->xn, c->n[arm] += c->xn;
    if (c->xn && c->n[c->arm] && c->rate[arm] > c->rate[c->arm] * SRV_SPEC_MARGIN) c->arm = arm, c->gap = SRV_SPEC_GAP0;
    else if (c->gap < SRV_SPEC_GAP_MAX) c->gap *= 2;
    c->next = c->steps + c->gap;
}
