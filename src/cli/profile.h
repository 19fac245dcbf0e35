/* profile.h — `--profile`: the per-op profile of the decode phase (ink_profile_*), printed as a
 * table on stderr and as a "profile" object in --stats-json. */
#ifndef INK_CLI_PROFILE_H
#define INK_CLI_PROFILE_H

#include "inkling.h"

#include <stdio.h>

/* The table: per part, ms per generated token, share of the decode time, weight GB/s; the part
 * of decode no part accounts for ("other": drafting bookkeeping, rollback, the loop); totals. */
void cli_profile_print(FILE *f, const ink_gen_stats *st);
/* `  "profile": {...},\n` for --stats-json. */
void cli_profile_json(FILE *f, const ink_gen_stats *st);

#endif
