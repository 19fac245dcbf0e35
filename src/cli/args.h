/* args.h — small argument helpers shared by the subcommands (strict number parsing, id lists). */
#ifndef INK_CLI_ARGS_H
#define INK_CLI_ARGS_H

#include "inkling.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Parses a decimal integer in [lo, hi]; on failure prints "inkling: FLAG: ..." and returns -1. */
int arg_int(const char *flag, const char *s, long lo, long hi, long *out);
int arg_float(const char *flag, const char *s, double lo, double hi, double *out);
/* "1,2,3" -> malloc'd array (caller frees); prints an error and returns -1 on bad input. */
int arg_ids(const char *flag, const char *s, int32_t **out, int *n);
/* Fetches the value of a flag taking one argument; prints an error if missing. */
const char *arg_value(int argc, char **argv, int *i);

/* Prints "inkling: <status>: <message>" for a library error and returns exit code 1. */
int cli_fail(const ink_err *e);

/* Checks before a run that an output file can be written (opens it for append, creates it);
 * prints "inkling: FLAG PATH: cannot open for writing: ..." and returns -1 if not. */
int arg_out_file(const char *flag, const char *path);
/* Checks that a model argument names an existing directory ("FLAG DIR: no such directory"). */
int arg_model_dir(const char *flag, const char *dir);

/* Model-directory side files (generation_config.json, inkling.json). cfg_load: NULL with *rc 0 when
 * DIR/NAME is absent; NULL with *rc 1 after printing "PATH: invalid JSON at line L column C" (or not an
 * object); else the object (caller decrefs). path receives DIR/NAME. */
json_t *cfg_load(const char *dir, const char *name, char *path, size_t n, int *rc);
/* A field KEY of g: 0 absent (or null), 1 stored in *out, -1 wrong type/range (message names PATH and KEY). */
int cfg_num(const char *path, json_t *g, const char *key, double lo, double hi, double *out);
int cfg_int(const char *path, json_t *g, const char *key, long lo, long hi, long *out);
/* generation_config.json sampling defaults for the values whose CFG_SET_* bit is not in `set`;
 * returns 0, or 1 after an error naming the file and field (nothing is applied then). */
enum { CFG_SET_TEMP = 1, CFG_SET_TOP_K = 2, CFG_SET_TOP_P = 4, CFG_SET_MIN_P = 8, CFG_SET_REP = 16 };
int cfg_generation(const char *dir, int set, double *temp, long *top_k, double *top_p, double *min_p, double *rep);
/* inkling.json engine defaults: {"draft_kind": "auto"|"mtp"|"none", "draft_block_size": K|"auto",
 * "draft_vocab": N}, each applied only where set_* is 0 (the command line did not set it); *kind
 * points at a static string; *block 0 means auto. Returns 0, or 1 after an error naming file and field
 * (nothing is applied then). Shared by generate, chat and serve. */
int cfg_inkling(const char *dir, const char **kind, int set_kind, long *block, int set_block, long *dvocab, int set_dvocab);
/* ---- sampling flags and model defaults: one place for generate, chat and serve ----------------- */

/* The sampling options of the command line, with the reference defaults until a flag or the model's
 * generation_config.json sets them (temp 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1,
 * last-n 64, no frequency/presence penalty, seed 0). */
typedef struct cli_sampling {
    double temp, top_p, min_p, rep, freq, pres;
    long top_k, last_n, seed;
    int set;      /* CFG_SET_* bits of the values the command line set */
    int seed_set; /* --seed was given */
} cli_sampling;
void cli_sampling_init(cli_sampling *s);
/* argv[*i] as a sampling flag (--temp/--temperature, --top-k, --top-p, --min-p, --repeat-penalty,
 * --repeat-last-n, --frequency-penalty, --presence-penalty, -s/--seed): 1 handled (its value consumed,
 * *i advanced), 0 not a sampling flag, -1 bad or missing value (message printed: exit 2). */
int cli_sampling_flag(int argc, char **argv, int *i, cli_sampling *s);
ink_sampling cli_sampling_value(const cli_sampling *s);

/* The engine defaults inkling.json may set where the command line did not. */
typedef struct cli_engine {
    const char *draft_kind; /* "auto" (the default), "mtp" or "none" (static strings or argv) */
    long block, dvocab;     /* --draft-block-size (0: auto), --draft-vocab */
    int set_kind, set_block, set_dvocab;
} cli_engine;

/* A model directory's defaults for what the command line did not set: generation_config.json's
 * sampling values (validated only when apply_sampling is 0: token mode keeps the reference defaults),
 * then inkling.json's engine defaults; a draft vocabulary inkling.json names is dropped where the
 * drafter directory `ddir` (NULL: dir) has no draft_vocab.json. Returns 0, or 1 after an error naming
 * the file and field (see cfg_generation, cfg_inkling). */
int cli_model_defaults(const char *dir, const char *ddir, cli_sampling *s, int apply_sampling, cli_engine *en);

/* generation_config.json's eos_token_id (int or list) must lie in 0..vocab-1; 0 ok, 1 after an error. */
int cfg_generation_eos(const char *dir, int vocab);

#endif
