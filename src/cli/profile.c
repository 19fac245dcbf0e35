/* profile.c — printing the per-op profile (see profile.h). */
#include "cli/profile.h"

static double per_token(const ink_gen_stats *st) { return st->generated_tokens > 1 ? st->generated_tokens - 1 : 1; }

void cli_profile_print(FILE *f, const ink_gen_stats *st)
{
    ink_profile p;
    ink_profile_get(&p);
    double n = per_token(st), sum = 0, mm = 0, dec = st->decode_s > 0 ? st->decode_s : 1e-12;
    unsigned long long bytes = 0;
    fprintf(f, "profile of decode (%d tokens, %.2f ms): part, ms/token, %% of decode, calls/token, weight GB/s\n",
            st->generated_tokens > 1 ? st->generated_tokens - 1 : 0, st->decode_s * 1e3);
    for (int c = 0; c < INK_PROF_N; c++) {
        if (!p.calls[c]) continue;
        sum += p.seconds[c], bytes += p.bytes[c];
        if (p.bytes[c]) mm += p.seconds[c];
        fprintf(f, "  %-22s %9.4f %6.1f%% %8.1f", ink_profile_name(c), p.seconds[c] * 1e3 / n, 100 * p.seconds[c] / dec,
                (double)p.calls[c] / n);
        if (p.bytes[c]) fprintf(f, " %8.2f", (double)p.bytes[c] / p.seconds[c] / 1e9);
        fputc('\n', f);
    }
    fprintf(f, "  %-22s %9.4f %6.1f%%\n", "other", (dec - sum) * 1e3 / n, 100 * (dec - sum) / dec);
    fprintf(f, "  weights streamed: %.2f MB/token, %.2f GB/s over the whole decode, %.2f GB/s inside the matmul parts\n",
            (double)bytes / n / 1e6, (double)bytes / dec / 1e9, mm > 0 ? (double)bytes / mm / 1e9 : 0.0);
}

void cli_profile_json(FILE *f, const ink_gen_stats *st)
{
    ink_profile p;
    ink_profile_get(&p);
    double n = per_token(st), sum = 0;
    fprintf(f, "  \"profile\": {\"tokens\": %.0f, \"parts\": [", n);
    for (int c = 0, first = 1; c < INK_PROF_N; c++) {
        if (!p.calls[c]) continue;
        sum += p.seconds[c];
        fprintf(f, "%s\n    {\"part\": \"%s\", \"seconds\": %.6f, \"calls\": %llu, \"weight_bytes\": %llu}", first ? "" : ",",
                ink_profile_name(c), p.seconds[c], p.calls[c], p.bytes[c]);
        first = 0;
    }
    fprintf(f, "\n  ], \"other_seconds\": %.6f},\n", st->decode_s - sum);
}
