/* prof.c — per-op profile counters (see prof.h). */
#include "base/prof.h"

#include <string.h>

int ink_prof_on;
static ink_profile totals;

static const char *const names[INK_PROF_N] = {
    "embed", "norms", "attn proj (q k v r)", "convs", "attention", "attn out (o)", "residual adds",
    "router", "routed experts", "shared experts", "dense mlp", "moe gather/combine", "lm head", "sampling", "expert exchange",
};

void ink_prof_add(int cat, double seconds, size_t bytes)
{
    totals.seconds[cat] += seconds;
    totals.bytes[cat] += bytes;
    totals.calls[cat]++;
}

void ink_profile_enable(int on) { ink_prof_on = on != 0; }
void ink_profile_reset(void) { memset(&totals, 0, sizeof totals); }
void ink_profile_get(ink_profile *out) { *out = totals; }
const char *ink_profile_name(int cat) { return cat >= 0 && cat < INK_PROF_N ? names[cat] : "?"; }
