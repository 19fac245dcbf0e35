/* args.c — see args.h. */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int arg_int(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "inkling: %s: expected an integer in %ld..%ld, found '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int arg_float(const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "inkling: %s: expected a number in %g..%g, found '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int arg_ids(const char *flag, const char *s, int32_t **out, int *n)
{
    int cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "inkling: %s: expected comma-separated non-negative token ids, found '%s'\n", flag, s);
            free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        if (!*end) break;
        p = end + 1;
    }
    *out = v, *n = k;
    return 0;
}

const char *arg_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "inkling: option %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_fail(const ink_err *e)
{
    fprintf(stderr, "inkling: %s: %s\n", ink_status_str(e->code), e->msg);
    return 1;
}

int arg_out_file(const char *flag, const char *path)
{
    FILE *f = fopen(path, "a"); /* checked before the run: never truncates, creates it as the run would */
    if (!f) {
        fprintf(stderr, "inkling: %s %s: cannot open for writing: %s\n", flag, path, strerror(errno));
        return -1;
    }
    fclose(f);
    return 0;
}

int arg_model_dir(const char *flag, const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        fprintf(stderr, "inkling: %s %s: no such directory\n", flag, dir);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "inkling: %s %s: not a directory\n", flag, dir);
        return -1;
    }
    return 0;
}

json_t *cfg_load(const char *dir, const char *name, char *path, size_t n, int *rc)
{
    snprintf(path, n, "%s/%s", dir, name);
    *rc = 0;
    if (access(path, F_OK) != 0) return NULL;
    json_error_t je;
    json_t *g = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!g) {
        fprintf(stderr, "inkling: %s: invalid JSON at line %d column %d: %s\n", path, je.line, je.column, je.text);
        *rc = 1;
        return NULL;
    }
    if (!json_is_object(g)) {
        fprintf(stderr, "inkling: %s: expected a JSON object\n", path);
        json_decref(g);
        *rc = 1;
        return NULL;
    }
    return g;
}

int cfg_num(const char *path, json_t *g, const char *key, double lo, double hi, double *out)
{
    json_t *v = json_object_get(g, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v) || json_number_value(v) < lo || json_number_value(v) > hi) {
        fprintf(stderr, "inkling: %s: field %s: expected a number in %g..%g\n", path, key, lo, hi);
        return -1;
    }
    *out = json_number_value(v);
    return 1;
}

int cfg_int(const char *path, json_t *g, const char *key, long lo, long hi, long *out)
{
    json_t *v = json_object_get(g, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        fprintf(stderr, "inkling: %s: field %s: expected an integer in %ld..%ld\n", path, key, lo, hi);
        return -1;
    }
    *out = (long)json_integer_value(v);
    return 1;
}

int cfg_generation(const char *dir, int set, double *temp, long *top_k, double *top_p, double *min_p, double *rep)
{
    char p[4352];
    int rc;
    json_t *g = cfg_load(dir, "generation_config.json", p, sizeof p, &rc);
    if (!g) return rc;
    double t = *temp, tp = *top_p, mp = *min_p, rp = *rep;
    long tk = *top_k;
    json_t *ds = json_object_get(g, "do_sample");
    if (cfg_num(p, g, "temperature", 0, 100, &t) < 0 || cfg_int(p, g, "top_k", 0, 1L << 30, &tk) < 0 ||
        cfg_num(p, g, "top_p", 0, 1, &tp) < 0 || cfg_num(p, g, "min_p", 0, 1, &mp) < 0 ||
        cfg_num(p, g, "repetition_penalty", 0, 10, &rp) < 0)
        rc = 1;
    else if (ds && !json_is_boolean(ds)) {
        fprintf(stderr, "inkling: %s: field do_sample: expected true or false\n", p);
        rc = 1;
    }
    if (!rc) {
        if (!(set & CFG_SET_TEMP)) *temp = json_is_false(ds) ? 0 : t;
        if (!(set & CFG_SET_TOP_K)) *top_k = tk;
        if (!(set & CFG_SET_TOP_P)) *top_p = tp;
        if (!(set & CFG_SET_MIN_P)) *min_p = mp;
        if (!(set & CFG_SET_REP)) *rep = rp;
    }
    json_decref(g);
    return rc;
}

int cfg_inkling(const char *dir, const char **kind, int set_kind, long *block, int set_block, long *dvocab, int set_dvocab)
{
    char p[4352];
    int rc;
    json_t *g = cfg_load(dir, "inkling.json", p, sizeof p, &rc), *v;
    if (!g) return rc;
    long bl = *block, dv = *dvocab;
    json_t *bs = json_object_get(g, "draft_block_size");
    int bs_auto = json_is_string(bs) && !strcmp(json_string_value(bs), "auto");
    const char *k = (v = json_object_get(g, "draft_kind")) && json_is_string(v) ? json_string_value(v) : NULL;
    if (v && !json_is_null(v) && (!k || (strcmp(k, "mtp") && strcmp(k, "none") && strcmp(k, "auto")))) {
        fprintf(stderr, "inkling: %s: field draft_kind: expected \"auto\", \"none\" or \"mtp\"%s%s%s\n", p,
                k ? ", found \"" : "", k ? k : "", k ? "\"" : "");
        rc = 1;
    } else if ((!bs_auto && cfg_int(p, g, "draft_block_size", 1, INK_MAX_BLOCK, &bl) < 0) ||
               cfg_int(p, g, "draft_vocab", 0, 1L << 30, &dv) < 0)
        rc = 1;
    if (!rc) {
        if (!set_kind && k) *kind = !strcmp(k, "mtp") ? "mtp" : !strcmp(k, "auto") ? "auto" : "none";
        if (!set_block) *block = bs_auto ? 0 : bl;
        if (!set_dvocab) *dvocab = dv;
    }
    json_decref(g);
    return rc;
}

void cli_sampling_init(cli_sampling *s)
{
    *s = (cli_sampling){.temp = 0.8, .top_p = 0.95, .min_p = 0.05, .rep = 1.0, .top_k = 40, .last_n = 64};
}

int cli_sampling_flag(int argc, char **argv, int *i, cli_sampling *s)
{
    const char *o = argv[*i], *v;
    double *f = NULL;
    long *n = NULL;
    double flo = 0, fhi = 0;
    long nlo = 0, nhi = 0;
    int bit = 0;
    if (!strcmp(o, "--temp") || !strcmp(o, "--temperature")) f = &s->temp, fhi = 100, bit = CFG_SET_TEMP;
    else if (!strcmp(o, "--top-k")) n = &s->top_k, nhi = 1L << 30, bit = CFG_SET_TOP_K;
    else if (!strcmp(o, "--top-p")) f = &s->top_p, fhi = 1, bit = CFG_SET_TOP_P;
    else if (!strcmp(o, "--min-p")) f = &s->min_p, fhi = 1, bit = CFG_SET_MIN_P;
    else if (!strcmp(o, "--repeat-penalty")) f = &s->rep, fhi = 10, bit = CFG_SET_REP;
    else if (!strcmp(o, "--repeat-last-n")) n = &s->last_n, nlo = -1, nhi = 1L << 30;
    else if (!strcmp(o, "--frequency-penalty")) f = &s->freq, flo = -10, fhi = 10;
    else if (!strcmp(o, "--presence-penalty")) f = &s->pres, flo = -10, fhi = 10;
    else if (!strcmp(o, "--seed") || !strcmp(o, "-s")) n = &s->seed, nhi = 0x7fffffffL;
    else return 0;
    if (!(v = arg_value(argc, argv, i))) return -1;
    if (f ? arg_float(o, v, flo, fhi, f) : arg_int(o, v, nlo, nhi, n)) return -1;
    s->set |= bit;
    if (n == &s->seed) s->seed_set = 1;
    return 1;
}

ink_sampling cli_sampling_value(const cli_sampling *s)
{
    return (ink_sampling){.temp = (float)s->temp, .top_k = (int)s->top_k, .top_p = (float)s->top_p,
                          .min_p = (float)s->min_p, .seed = (uint64_t)s->seed, .repeat_penalty = (float)s->rep,
                          .frequency_penalty = (float)s->freq, .presence_penalty = (float)s->pres,
                          .penalty_last_n = (int)s->last_n};
}

int cli_model_defaults(const char *dir, const char *ddir, cli_sampling *s, int apply_sampling, cli_engine *en)
{
    cli_sampling scratch = *s;
    cli_sampling *t = apply_sampling ? s : &scratch;
    if (cfg_generation(dir, t->set, &t->temp, &t->top_k, &t->top_p, &t->min_p, &t->rep) ||
        cfg_inkling(dir, &en->draft_kind, en->set_kind, &en->block, en->set_block, &en->dvocab, en->set_dvocab))
        return 1;
    char dvp[4200];
    snprintf(dvp, sizeof dvp, "%s/draft_vocab.json", ddir ? ddir : dir);
    if (en->dvocab > 0 && !en->set_dvocab && access(dvp, F_OK) != 0) en->dvocab = 0;
    return 0;
}

int cfg_generation_eos(const char *dir, int vocab)
{
    char p[4352];
    int rc;
    json_t *g = cfg_load(dir, "generation_config.json", p, sizeof p, &rc);
    if (!g) return rc;
    json_t *eos = json_object_get(g, "eos_token_id");
    size_t n = json_is_array(eos) ? json_array_size(eos) : eos && !json_is_null(eos) ? 1 : 0;
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *v = json_is_array(eos) ? json_array_get(eos, i) : eos;
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab) {
            fprintf(stderr, "inkling: %s: field eos_token_id: expected token ids in 0..%d (the vocabulary)\n", p,
                    vocab - 1);
            rc = 1;
        }
    }
    json_decref(g);
    return rc;
}
