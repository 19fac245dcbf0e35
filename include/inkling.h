/*
 * inkling.h — public API of the inkling.c engine.
 *
 * The CLI, the server and the tests see only this header. Two opaque objects:
 *   ink_model   — a loaded checkpoint (config, mmapped weights, thread pool); immutable after open.
 *   ink_session — one inference timeline on a model: KV caches, short-conv states, position, scratch.
 * Snapshots (ink_snapshot) capture a session's state for exact rollback (speculative decoding).
 *
 * Conventions
 *   - Fallible functions return INK_OK (0) or a negative INK_E_* code and, when `err` is not NULL,
 *     fill it with a message that names the file / tensor / field, what was expected and what was
 *     found. The first error wins; later ones do not overwrite it.
 *   - `*out` parameters are set only on success. Every `_free(NULL)` is a no-op.
 *   - Ownership is stated per function. Borrowed pointers stay valid for the life of their owner.
 *   - Library code never calls exit(); it never reads the environment.
 */
#ifndef INKLING_H
#define INKLING_H

/* Version of the library and the `inkling` binary. */
#define INK_VERSION "0.3.0"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes and errors ------------------------------------------------------------ */

enum ink_status {
    INK_OK = 0,
    INK_E_IO = -1,          /* a file could not be opened / read / written */
    INK_E_FORMAT = -2,      /* a file is malformed (safetensors header, JSON, shapes) */
    INK_E_NOMEM = -3,       /* an allocation failed */
    INK_E_INVAL = -4,       /* bad argument: token id out of range, bad option value */
    INK_E_UNSUPPORTED = -5, /* valid input this build does not support (architecture, dtype) */
    INK_E_CTX_FULL = -6,    /* the session's context is full */
    INK_E_CANCELLED = -7,   /* the caller cancelled the operation */
    INK_E_NET = -8,         /* network / HTTP failure */
    INK_E_NUMERIC = -9,     /* a computation produced NaN or infinity (e.g. a corrupt checkpoint) */
    INK_E_ABSENT = -10,     /* the thing asked for is not there (ink_drafter_open: no MTP head) */
};

typedef struct ink_err {
    int code;       /* INK_OK while no error was recorded */
    char msg[1024]; /* human-readable, one line, no trailing newline */
} ink_err;

/* Records an error in `e` (if not NULL and no error was recorded yet). Returns `code`. */
int ink_err_set(ink_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Short name of a status code ("io error", "format error", ...). Static string. */
const char *ink_status_str(int code);

/* ---- model ------------------------------------------------------------------------------ */

typedef struct ink_model ink_model;

/* Activations of the matmuls. Quantized weights (MLX affine 2..8 bit, NVFP4) take int8 activations
 * unless F32; float weights take exact f32 activations unless BF16, a fast path that changes numbers
 * (judged by KL divergence against F32, tests/test_kld.c). */
enum ink_activations {
    INK_ACT_AUTO = 0, /* int8 activations for integer (quantized) weights, f32 for float weights */
    INK_ACT_F32 = 1,  /* f32 activations everywhere: matches a dequantized-f32 twin to float rounding */
    INK_ACT_INT8 = 2, /* int8 activations for quantized weights (the same as AUTO today) */
    INK_ACT_BF16 = 3, /* AUTO, and BF16 weights take activations rounded to bf16 (exact products, f32
                       * sums; vdpbf16ps where the CPU has AVX512_BF16): a verify of K rows or a batch
                       * of sequences costs about one row where the f32 path is compute-bound */
};

typedef struct ink_ep_transport ink_ep_transport;

typedef struct ink_model_opts {
    int n_threads;   /* compute threads; <= 0 means the number of online cores */
    int activations; /* enum ink_activations (0: AUTO) */
    /* NULL (or n_ranks 1): one process. Otherwise the model takes part in an expert-parallel job
     * (see "expert parallelism" below); the struct is copied, its ctx borrowed. */
    const ink_ep_transport *expert_parallel;
    /* 0: weights are mmapped (the default). 1 (`--no-mmap`): each file is read into anonymous memory
     * of the model's own at open: RAM for the whole checkpoint and a read at start-up, but steady
     * decoding on hosts that stall mapped page cache (docs/benchmarks.md); the drafter follows. */
    int no_mmap;
} ink_model_opts;

/* Parses "auto", "f32", "int8" or "bf16" into an enum ink_activations; -1 for anything else. */
int ink_activations_parse(const char *s);
/* "auto", "f32", "int8" or "bf16" (static string; NULL for an invalid value). */
const char *ink_activations_name(int a);

/* Opens the checkpoint in directory `dir` (config.json + safetensors, sharded or not). Weights are
 * mmapped, never copied (small vectors such as norms are widened to f32), unless opts->no_mmap. On
 * success the caller owns *out and frees it with ink_model_free. */
int ink_model_open(ink_model **out, const char *dir, const ink_model_opts *opts, ink_err *err);
/* The same with config.json and the safetensors headers only: every shape check of a full open, but
 * no tensor data mapped or read (vectors read as zeros). The model can be described (info,
 * ink_session_state_bytes) but not evaluated: ink_session_eval refuses it. */
int ink_model_open_headers(ink_model **out, const char *dir, const ink_model_opts *opts, ink_err *err);
void ink_model_free(ink_model *m);
/* `--check-tensors`: reads every floating-point weight of an open model once and fails with
 * INK_E_FORMAT naming the tensor, its file and the element index of the first NaN or Inf. Slow on
 * large models (all weights are read), so it is a separate opt-in call, not part of ink_model_open. */
int ink_model_check_tensors(ink_model *m, ink_err *err);

/* What a directory holds, from config.json and safetensors headers only (no weights read). */
typedef struct ink_model_info {
    char family[64];       /* "Inkling" or the foreign family name found */
    char variant[96];      /* "Inkling-Small (276B-A12B)", "custom", ... */
    char architecture[96]; /* config.json architectures[0] */
    char model_type[64];   /* config.json model_type */
    char layout[32];       /* "release" (text_config), "flat" (text fields at top level) */
    char names[32];        /* tensor naming: "release", "hf", "hf-causal", "unknown" */
    char dtype[64];        /* weight dtypes of the backbone, e.g. "BF16 (+F32 router)" */
    char quant[96];        /* "none", "mlx-affine 4-bit g64", "nvfp4 (routed experts)" */
    int supported;         /* 1 if ink_model_open can load it in this build */
    char reason[256];      /* why not, when supported == 0 */
    int n_layer, n_sliding, n_global, n_dense, n_moe;
    int hidden, vocab, vocab_unpadded;
    int n_expert, n_expert_used, n_shared;
    int mtp_depth_config;  /* mtp_config.num_nextn_predict_layers (0 if absent) */
    int mtp_depth_tensors; /* MTP blocks found in the safetensors headers */
    int max_ctx;           /* model_max_length */
    int eos;               /* top-level eos_token_id (-1 if absent) */
    int n_files;           /* safetensors files read for the backbone */
    int64_t n_params;      /* backbone parameter count (elements of bound tensors) */
} ink_model_info;

/* Fills `info` for directory `dir`. Returns INK_OK when config.json was readable and describes
 * something (supported or not; see info->supported), an error otherwise. */
int ink_model_detect(const char *dir, ink_model_info *info, ink_err *err);
/* Info of an opened model. Borrowed, valid until ink_model_free. */
const ink_model_info *ink_model_get_info(const ink_model *m);
int ink_model_n_vocab(const ink_model *m);  /* unpadded vocab: length of a logits row */
int ink_model_n_embd(const ink_model *m);   /* hidden size H */
int ink_model_n_threads(const ink_model *m);
/* 1 when the model's quantized matmuls use int8 activations (the resolved ink_model_opts.activations). */
int ink_model_int8_activations(const ink_model *m);
/* 1 when the model's BF16 matmuls use bf16 activations (ink_model_opts.activations = INK_ACT_BF16). */
int ink_model_bf16_activations(const ink_model *m);

/* ---- session ---------------------------------------------------------------------------- */

typedef struct ink_session ink_session;
typedef struct ink_snapshot ink_snapshot;

/* Creates a session with room for n_ctx tokens (<= 0: min(model_max_length, 4096)). All memory the
 * forward pass touches (KV, conv states, scratch) is allocated here, once. The model must outlive
 * the session. Caller frees with ink_session_free. */
int ink_session_create(ink_session **out, ink_model *m, int n_ctx, ink_err *err);
void ink_session_free(ink_session *s);
int ink_session_pos(const ink_session *s);         /* tokens consumed so far */
int ink_session_n_ctx(const ink_session *s);
size_t ink_session_state_bytes(const ink_session *s); /* KV + conv state bytes allocated */
void ink_session_reset(ink_session *s);            /* back to position 0, empty state */

/* Prompt cache. Conv states are recurrent and sliding layers keep only a window of KV rows, so a
 * session cannot go back to an earlier position by itself; a checkpoint stores what it would need
 * (every layer's conv states and each sliding layer's last W - 1 KV rows; global layers' rows stay
 * in place). ink_session_set_checkpoints allocates n slots (0 frees them; n < 0: as many as fit
 * in 256 MiB, 1..8); ink_session_checkpoint_bytes is the size of one. ink_session_checkpoint stores
 * the state at the current position (replacing the oldest slot; never allocates). ink_session_rewind
 * goes back to the latest checkpoint at a position <= limit whose tokens are still the session's
 * (a checkpoint beyond a position the session was reset, restored or rewound to is dropped), and
 * returns that position, or 0 after a reset when none applies. The rewound state equals the state
 * of having fed tokens[0..pos) freshly, bit for bit (tested). */
int ink_session_set_checkpoints(ink_session *s, int n, ink_err *err);
size_t ink_session_checkpoint_bytes(const ink_session *s);
void ink_session_checkpoint(ink_session *s);
int ink_session_rewind(ink_session *s, int limit);
/* The tokens consumed so far, by position: [ink_session_pos(s)] ids. Borrowed, valid until the next
 * call that changes the session. */
const int32_t *ink_session_tokens(const ink_session *s);

/* Optional outputs of ink_session_eval. Every pointer may be NULL; buffers belong to the caller. */
typedef struct ink_eval_out {
    float *logits;          /* all_logits ? [T, n_vocab] : [n_vocab] (last row only) */
    int all_logits;
    float *hidden_prenorm;  /* [T, H] last layer output before the final norm */
    float *hidden_postnorm; /* [T, H] after the final norm (not divided by mu) */
    float *embeddings;      /* [T, H] embed_norm(embed[id]) (diagnostics) */
    float *layer_outputs;   /* [n_layer, T, H] residual stream after each layer (diagnostics) */
} ink_eval_out;

/* Feeds T >= 1 tokens at positions pos .. pos+T-1. Validates every id (< n_vocab) and the context
 * before touching any state: on error the session is unchanged. Long inputs are processed in
 * chunks internally; results do not depend on the chunking beyond float summation order. */
int ink_session_eval(ink_session *s, const int32_t *tokens, int T, ink_eval_out *out, ink_err *err);

/* Batched evaluation (issue 18): one forward over the rows of several sessions of one model, so a
 * step reads the weights once for all of them (continuous batching; MTP verify rows of several
 * sequences). ink_batch_create sizes scratch for up to max_rows rows in all and contexts up to
 * n_ctx (caller frees with ink_batch_free). ink_batch_eval feeds tokens[i][0..n_tokens[i]) to
 * sessions[i] at its position (1 <= n_tokens[i] <= ink_session_rollback_slack), outputs as
 * ink_session_eval into outs[i] (outs may be NULL). Sessions must be distinct and of the batch's
 * model. Every input is validated before any state changes. Each session's outputs and state are
 * bitwise those of ink_session_eval on it alone, whatever the batch mix (tested). Never allocates. */
typedef struct ink_batch ink_batch;
int ink_batch_create(ink_batch **out, ink_model *m, int max_rows, int n_ctx, ink_err *err);
void ink_batch_free(ink_batch *b);
int ink_batch_max_rows(const ink_batch *b);
int ink_batch_eval(ink_batch *b, ink_session *const *sessions, const int32_t *const *tokens, const int *n_tokens,
                   const ink_eval_out *outs, int n, ink_err *err);

/* Snapshots. A snapshot holds the session position and every conv state; KV rows are not copied:
 * they stay valid because positions below the snapshot are never overwritten while at most
 * ink_session_rollback_slack() tokens have been fed since the save. Save and restore never
 * allocate. Caller frees with ink_snapshot_free. */
int ink_snapshot_create(ink_snapshot **out, const ink_session *s, ink_err *err);
void ink_snapshot_free(ink_snapshot *snap);
void ink_session_save(const ink_session *s, ink_snapshot *snap);
/* Restores the state saved in `snap` (which must come from this session). Fails with INK_E_INVAL
 * (session unchanged) if the session went back before the snapshot or more than the slack past it. */
int ink_session_restore(ink_session *s, const ink_snapshot *snap, ink_err *err);
int ink_session_rollback_slack(const ink_session *s);

/* Capture-and-commit rollback (an alternative to restore + replay). With capture on, each eval of at
 * most ink_session_rollback_slack() tokens records the raw inputs of every short conv. Afterwards
 * ink_session_commit(s, snap, n_keep) makes the state equal to having fed only the first n_keep of
 * those tokens after the snapshot `snap` (saved right before that eval): position and conv states are
 * rebuilt from the snapshot plus the captured rows; KV rows beyond are simply ignored. Capture
 * buffers are allocated by ink_session_set_capture (not on the hot path). */
int ink_session_set_capture(ink_session *s, int on, ink_err *err);
int ink_session_commit(ink_session *s, const ink_snapshot *snap, int n_keep, ink_err *err);

/* ---- sampling --------------------------------------------------------------------------- */

/* The sampling chain (llama.cpp's order): penalties over the last penalty_last_n tokens of the
 * history -> top-k -> top-p -> min-p -> temperature -> draw. Zero-initialised = greedy, no filters,
 * no penalties. */
typedef struct ink_sampling {
    float temp;              /* <= 0: greedy (argmax of the penalised logits, ties to the lowest id) */
    int top_k;               /* <= 0: off */
    float top_p;             /* >= 1 or <= 0: off */
    float min_p;             /* <= 0: off */
    uint64_t seed;
    float repeat_penalty;    /* <= 0 or 1: off; > 1 divides positive logits / multiplies negative ones */
    float frequency_penalty; /* 0: off; subtracts count * value */
    float presence_penalty;  /* 0: off; subtracts value once per token seen */
    int penalty_last_n;      /* tokens of history the penalties look at; 0: none, -1: all */
} ink_sampling;

/* ---- MTP drafter and generation ------------------------------------------------------- */

typedef struct ink_drafter ink_drafter;

#define INK_MAX_DEPTH 64
/* Largest draft block size K (drafts + 1) the generator accepts: CLI and server share this range. */
#define INK_MAX_BLOCK (INK_MAX_DEPTH + 1)
/* ink_gen_opts.block_size: choose K per round (the default: zero-initialised options get it). */
#define INK_BLOCK_AUTO 0

enum ink_mtp_mode {
    INK_MTP_PER_DEPTH = 0, /* mode P: per-depth history (mtp.md 7.1-7.8), the semantics the head was trained with */
    INK_MTP_COMPAT = 1,    /* Compat-X: the block-0-history procedure of mlx-vlm / mlxcel (mtp.md 7.9) */
};

/* Opens the MTP head in `dir` for `target`: any directory whose safetensors hold model.mtp.layers.*
 * tensors (a full checkpoint: only the shards holding them are opened; or config.json +
 * mtp.safetensors). Detection is by tensor presence, never by a config flag alone. The target must
 * outlive the drafter. Caller frees with ink_drafter_free. Fails with INK_E_ABSENT (and a message
 * saying so) when the directory holds no model.mtp.layers.* tensors at all: a model without a head,
 * not a broken one. */
int ink_drafter_open(ink_drafter **out, ink_model *target, const char *dir, ink_err *err);
/* A second drafter on src's weights and draft vocabulary (views, nothing copied or re-read), with
 * caches of its own: one per concurrent sequence (a server's slots). Drafters that share weights
 * draft together when their generators are stepped by ink_gen_step_many (one pass over each depth's
 * weights and the unembedding for all of them). src (and the drafter it shares, if any) must outlive
 * it and keep its draft vocabulary; ink_drafter_set_vocab on a shared drafter is refused. Caller
 * frees with ink_drafter_free (which leaves the weights to their owner). */
int ink_drafter_share(ink_drafter **out, const ink_drafter *src, ink_err *err);
void ink_drafter_free(ink_drafter *d);
int ink_drafter_n_depth(const ink_drafter *d);
/* Draft vocabulary: the drafter proposes only the tokens ids[0..n) (n = 0: the whole vocabulary).
 * Each draft's unembedding then costs n rows instead of the vocabulary: a packed copy of those rows
 * (n x H, in the checkpoint's dtype) is made here and owned by the drafter. The target still scores
 * the whole vocabulary, so greedy output is unchanged and speculative sampling stays lossless (the
 * draft distribution is zero outside the set). Ids must be distinct and < ink_model_n_vocab. */
int ink_drafter_set_vocab(ink_drafter *d, const int32_t *ids, int n, ink_err *err);
/* The same with the first n ids of `dir`/draft_vocab.json ({"ids": [...]}: token ids by descending
 * frequency, as tools/train/draft_vocab.py writes it). */
int ink_drafter_load_vocab(ink_drafter *d, const char *dir, int n, ink_err *err);

/* One speculative round, reported to the trace callback (fields as in the golden traces). */
typedef struct ink_round {
    int round, n, k_eff;
    int n_drafts;
    const int32_t *drafts;
    const int *draft_blocks;
    const float *draft_margins;
    int a;
    int n_emitted;
    const int32_t *emitted;
    int32_t bonus;
    int bonus_emitted;
    double draft_s, verify_s, rollback_s; /* the round's time by phase (rollback: restore + replay) */
} ink_round;

typedef struct ink_gen_opts {
    int max_tokens;            /* tokens to emit, including the first one from the prompt */
    int stop_eos;              /* stop after emitting eos */
    int eos;                   /* stop id (model's eos_token_id when < 0) */
    const int32_t *stop_ids;   /* more stop ids (e.g. the chat format's); generation stops after one */
    int n_stop_ids;
    int vocab_limit;           /* > 0: ids >= this are never sampled or drafted (tokenizer size) */
    ink_sampling sampling;
    ink_drafter *drafter;      /* NULL: plain decoding */
    int block_size;            /* K: verify width (bonus + drafts); 1: plain steps; <= 0 (INK_BLOCK_AUTO):
                                  chosen per round from this run's measured acceptance and costs */
    int block_max;             /* auto: the widest K it may choose (<= 0: depth + 1 in mode P, depth + 2
                                  in Compat-X); always within the session's rollback slack */
    int (*choose_block)(void *ud, int round, int k_max); /* auto: if set, replaces the controller's
                                  choice (clamped to 1..k_max): a hook for tests and experiments */
    const volatile int *block_cap; /* auto: if set and *block_cap >= 1, a round is at most that wide
                                  (read every round; the caller owns it): `serve` caps its auto slots
                                  at 1 (plain steps) while batched plain steps emit more per second */
    int mtp_mode;              /* enum ink_mtp_mode */
    int capture_commit;        /* 1: rollback by capture-and-commit instead of restore + replay */
    int reuse_prefix;          /* 1: when the prompt extends what the session has consumed (and the
                                  drafter state matches), feed only the new tokens */
    void (*on_token)(void *ud, int32_t token);       /* each emitted token, in order */
    void (*on_round)(void *ud, const ink_round *r);  /* each speculative round */
    void *ud;
    volatile int *cancel;      /* checked between steps; non-zero stops with INK_E_CANCELLED */
} ink_gen_opts;

typedef struct ink_gen_stats {
    int prompt_tokens, generated_tokens;
    int rounds, drafted, accepted;           /* speculative rounds; drafts proposed / accepted */
    int round_emitted;                       /* tokens emitted by speculative rounds (mean accepted length = this / rounds) */
    int k_requested, k_min, k_max;           /* verify widths */
    int zero_accept, partial_accept, full_accept;
    int n_pos;                               /* draft positions reported below */
    int pos_proposed[INK_MAX_DEPTH], pos_accepted[INK_MAX_DEPTH]; /* per draft position j (d_{j+1}) */
    int reused_tokens;                       /* prompt tokens served from the session's state */
    double prefill_s, decode_s;              /* wall time of prefill and of everything after it */
    double draft_s, verify_s, rollback_s;    /* parts of decode_s */
    /* every round (plain steps too) by its verify width k_eff: k_hist[1] counts the plain steps */
    int k_hist[INK_MAX_BLOCK + 1];
    /* the draft-length controller's view at the end of the run (with a drafter; auto or not):
     * widths 1..ctl_kmax, per width the smoothed seconds per round c(K) (0: never measured),
     * cost_n the rounds behind it, its yield Y(K) (measured tokens per round over the model's, 1
     * until measured), expected tokens per round Y(K) E(K), and the predicted tokens per second
     * Y(K) E(K) / c(K) (with unmeasured widths estimated as the controller does); alpha[j] the
     * smoothed conditional acceptance of draft j+1; ctl_best the width it would choose next.
     * ctl_text_period: the period of the text before the next round when it repeats (a greedy
     * loop; 0: it does not); there the expected tokens per round of a width are those of its cycle
     * where the controller's per-phase table covers it (gen/autok.h). */
    int auto_block, ctl_kmax, ctl_best;
    double ctl_cost_s[INK_MAX_BLOCK + 1], ctl_expected[INK_MAX_BLOCK + 1], ctl_rate[INK_MAX_BLOCK + 1];
    double ctl_yield[INK_MAX_BLOCK + 1];
    double ctl_overhead_s;                   /* drafter catch-up seconds per round of the best width, in cost_s */
    int ctl_cost_n[INK_MAX_BLOCK + 1];
    double ctl_alpha[INK_MAX_DEPTH];
    int ctl_text_period;
} ink_gen_stats;

/* Feeds the prompt (all of it, after a reset, unless reuse_prefix applies) and generates up to opts->max_tokens tokens into out[0..out_cap).
 * With temperature 0 the output is the plain greedy output whatever the drafter does; with
 * temperature > 0 drafts are accepted by lossless speculative sampling. *n_out = tokens emitted.
 * Logits that are not finite stop it with INK_E_NUMERIC naming the position.
 * ink_generate runs the session's own generator (created on first use, freed with the session):
 * it is ink_gen_run on that generator. */
int ink_generate(ink_session *s, const int32_t *prompt, int n_prompt, const ink_gen_opts *opts, int32_t *out,
                 int out_cap, int *n_out, ink_gen_stats *stats, ink_err *err);

/* ---- the generator: generation state as an object ------------------------------------
 * An ink_gen runs generations on one session (borrowed: it must outlive the generator). It owns
 * every buffer of the loop (allocated at the start of a run, kept while the sizes fit: nothing is
 * allocated per round) and the state a later run's reuse_prefix continues from. The drafter and
 * the options come with each run (borrowed until ink_gen_finish). Not thread-safe; one run at a time.
 *
 * A run is ink_gen_start (validation, prefill, first token), then ink_gen_step until ink_gen_done
 * (one speculative round, or one plain step, each), then ink_gen_finish. ink_gen_run does all three. */
typedef struct ink_gen ink_gen;
int ink_gen_create(ink_gen **out, ink_session *s, ink_err *err);
void ink_gen_free(ink_gen *g);
/* On failure the run is over (no ink_gen_finish needed) and nothing was emitted. */
int ink_gen_start(ink_gen *g, const int32_t *prompt, int n_prompt, const ink_gen_opts *opts, int32_t *out,
                  int out_cap, ink_gen_stats *stats, ink_err *err);
/* ink_gen_start in two parts, so a caller can spread a long prompt over several steps (a server
 * interleaving one slot's prefill with other slots' decoding): ink_gen_begin validates and sets up
 * (no forward; on failure the run is over); ink_gen_prefill feeds at most max_rows more prompt
 * tokens (<= 0: all) and returns 1 while some remain, 0 once the prompt is in and the first token
 * emitted (the run then steps as after ink_gen_start), or an error (the run is done; call
 * ink_gen_finish). The prompt must stay valid until then. ink_gen_prefilling says whether a run is
 * between the two (ink_gen_done is true then). Chunks do not change results: rows are computed
 * independently. */
int ink_gen_begin(ink_gen *g, const int32_t *prompt, int n_prompt, const ink_gen_opts *opts, int32_t *out,
                  int out_cap, ink_gen_stats *stats, ink_err *err);
int ink_gen_prefill(ink_gen *g, int max_rows, ink_err *err);
int ink_gen_prefilling(const ink_gen *g);
/* One round; on failure the run is done (call ink_gen_finish). */
int ink_gen_step(ink_gen *g, ink_err *err);
int ink_gen_done(const ink_gen *g);  /* stop rule met, budget or context used up, or a step failed */
int ink_gen_n_out(const ink_gen *g); /* tokens emitted so far in this run */
/* The same round in two halves around its verify forward, so that a caller stepping several
 * generators (a server's slots) can evaluate all their verify rows in one ink_batch_eval:
 * ink_gen_step_begin plans and drafts the round and describes the rows to evaluate in *v (the
 * session, the tokens, and the outputs to fill, all owned by the generator); it returns 1 when a
 * verify is needed, 0 when the run is done (nothing to evaluate), or an error (the run is done).
 * The caller evaluates exactly v->tokens[0..v->n_tokens) on v->session into v->out, then calls
 * ink_gen_step_end with that evaluation's status. ink_gen_step = begin + ink_session_eval + end. */
typedef struct ink_gen_verify {
    ink_session *session;
    const int32_t *tokens;
    int n_tokens;
    ink_eval_out out;
} ink_gen_verify;
int ink_gen_step_begin(ink_gen *g, ink_gen_verify *v, ink_err *err);
int ink_gen_step_end(ink_gen *g, int eval_rc, ink_err *err);
/* Lockstep: one round of every generator in gens[0..n) that is not done, their verify rows
 * evaluated together by ink_batch_eval on `b` in as few forwards as its row limit allows
 * (generators in order). Prefilling generators feed prompt rows instead, at most prefill_rows in
 * all per call: one chunk each in the same forwards as the rounds (the weights are read once for
 * both), then further chunks on their own while the budget lasts. errs[i] (errs may be NULL) receives generator i's failure, which
 * ends its run; the others go on. Returns how many generators ran a round (0: none could). Each
 * generator's output is bitwise what ink_gen_step alone would give (tests/test_batch.c). At most
 * INK_STEP_MANY_MAX generators per call; never allocates. */
#define INK_STEP_MANY_MAX 64
int ink_gen_step_many(ink_batch *b, ink_gen *const *gens, int n, int prefill_rows, ink_err *errs);
/* The prompt in chunks handed out like verify rows (what ink_gen_step_many batches): begin
 * describes the next chunk (at most max_rows, at most one forward's worth, ending on the prompt
 * cache's checkpoint positions) and returns 1, or 0 when the run is not prefilling; the caller
 * evaluates it and calls end with the evaluation's status, which returns 1 while prompt rows
 * remain, 0 when the prompt is done (the first token emitted), or an error (the run is done).
 * Bitwise the same as ink_gen_prefill. */
int ink_gen_prefill_begin(ink_gen *g, int max_rows, ink_gen_verify *v, ink_err *err);
int ink_gen_prefill_end(ink_gen *g, int eval_rc, ink_err *err);
/* Ends the run: final statistics; returns the run's status (INK_OK or a failed step's code). */
int ink_gen_finish(ink_gen *g);
int ink_gen_run(ink_gen *g, const int32_t *prompt, int n_prompt, const ink_gen_opts *opts, int32_t *out,
                int out_cap, int *n_out, ink_gen_stats *stats, ink_err *err);

/* ---- per-op profile (`--profile`) ---------------------------------------------------------- */

/* Parts of the forward pass a profile splits wall time into (matmul parts include their thread
 * hand-offs; sampling is the generator's token choice). Drafter layers count in the same parts. */
enum ink_prof_cat {
    INK_PROF_EMBED, INK_PROF_NORM, INK_PROF_QKV, INK_PROF_CONV, INK_PROF_ATTN, INK_PROF_WO, INK_PROF_ADD,
    INK_PROF_ROUTER, INK_PROF_EXPERT, INK_PROF_SHARED, INK_PROF_DENSE, INK_PROF_COMBINE, INK_PROF_HEAD,
    INK_PROF_SAMPLE,
    INK_PROF_EXCHANGE, /* expert parallel: sending MoE rows to the other ranks, waiting for their outputs */
    INK_PROF_N
};
typedef struct ink_profile {
    double seconds[INK_PROF_N];
    unsigned long long bytes[INK_PROF_N]; /* weight bytes streamed by the part's matmuls */
    unsigned long long calls[INK_PROF_N];
} ink_profile;
/* Process-wide and not synchronized: for one thread running forward passes (the CLI's). Off by
 * default; when off it costs one branch per part. */
void ink_profile_enable(int on);
void ink_profile_reset(void);
void ink_profile_get(ink_profile *out);
const char *ink_profile_name(int cat); /* static string */

/* ---- expert parallelism (issue 19, docs/distributed.md) ------------------------------------- */

/* A message transport between the ranks of one job. The library never links one: the CLI's is MPI
 * (src/cli/dist.c). Rank 0 runs the model as one process would (tokenizer, sampling, the drafter,
 * every dense part, the shared experts, all I/O) plus its share of the routed experts; every other
 * rank serves its share (ink_ep_serve) and touches no other weight. Routed experts are split in
 * contiguous ranges (ink_ep_range). Per MoE layer of a forward, rank 0 sends each rank owning a
 * chosen expert the rows that chose one of its experts, with their chosen ids, and receives the
 * outputs of its experts for those rows: one round trip per MoE layer for all rows of the forward
 * (a verify of K rows costs what one row does in latency). Rank 0 sums in the single-process order (routed experts
 * in ascending id, then shared), so logits, tokens and speculative traces are bitwise those of one
 * process, whatever the ranks' thread counts.
 * Messages between two ranks arrive in the order sent. A callback returns 0; one that cannot deliver
 * must end the job itself (a forward pass cannot stop half way), and so must `fail`, which the
 * library calls (with a message) when a message breaks the protocol; `fail` never returns. */
struct ink_ep_transport {
    int rank, n_ranks;
    void *ctx;
    int (*send)(void *ctx, int to, const void *buf, size_t n); /* buf may be reused when it returns */
    int (*probe)(void *ctx, int from, size_t *n); /* blocks until a message from `from` is there: its bytes */
    int (*recv)(void *ctx, int from, void *buf, size_t n); /* that message, whose size probe gave */
    void (*fail)(void *ctx, const char *msg);
};
/* Routed experts [*e0, *e1) of `rank` of n_ranks: ids n_expert*rank/n_ranks .. */
void ink_ep_range(int n_expert, int rank, int n_ranks, int *e0, int *e1);
/* A rank > 0: serves rank 0's MoE requests on model `m` (opened with this transport) until rank 0
 * sends the stop (ink_ep_stop). Returns INK_OK then; a malformed request ends it with INK_E_FORMAT.
 * Allocates only when a request has more rows than any before. */
int ink_ep_serve(ink_model *m, ink_err *err);
/* Rank 0: tells every other rank to leave ink_ep_serve. */
int ink_ep_stop(const ink_ep_transport *t);
/* What the exchange has cost so far (rank 0; zeros in one process). */
typedef struct ink_ep_stats {
    int rank, n_ranks, expert0, expert1; /* this rank's routed experts [expert0, expert1) */
    unsigned long long moe_layers;       /* MoE layer forwards (rank 0) */
    unsigned long long exchanges;        /* of those, the ones that needed another rank: round trips */
    unsigned long long requests;         /* requests sent (rank 0: up to n_ranks - 1 per round trip) or served */
    unsigned long long rows;             /* token rows of those layers (rank 0) or requests (served) */
    unsigned long long bytes_sent, bytes_recv;
    double seconds;                      /* wall time in send + waiting for the replies */
} ink_ep_stats;
void ink_model_ep_stats(const ink_model *m, ink_ep_stats *out);
/* One rank's part of the job. */
typedef struct ink_ep_rank {
    int rank, expert0, expert1;          /* its routed experts [expert0, expert1) */
    long long peak_rss_kb;               /* getrusage high-water mark (file pages included) */
    unsigned long long requests;         /* requests served (ranks > 0) */
    unsigned long long bytes_sent, bytes_recv;
} ink_ep_rank;
/* Rank 0: every rank's report into out[0 .. n_ranks) (one round trip to each other rank, between
 * forward passes). Returns n_ranks (1 in one process), or an error (cap too small, not rank 0). */
int ink_ep_ranks(ink_model *m, ink_ep_rank *out, int cap, ink_err *err);

/* ---- quantization: a checkpoint converted to MLX affine or NVFP4 ------------------------- */

enum ink_quant_mode { INK_QUANT_AFFINE = 0, INK_QUANT_NVFP4 = 1 };

/* One --override: modules whose path (the stored tensor name without ".weight") matches `glob`
 * (fnmatch) get `bits` (0: left in float) and `group` (0: the default group). Later rules win. */
typedef struct ink_quant_rule {
    const char *glob;
    int bits, group;
} ink_quant_rule;

/* What ink_quantize reports before each tensor it writes (and once more with index == count at the
 * end): its output name, what is done to it ("q4 g64", "nvfp4", "copy", "split", "conv layout"),
 * and the bytes read and written so far of the totals. */
typedef struct ink_quant_progress {
    int index, count;
    const char *name, *what;
    uint64_t bytes_in, total_in, bytes_out, total_out;
} ink_quant_progress;

typedef struct ink_quant_opts {
    int mode;                      /* enum ink_quant_mode */
    int bits, group;               /* affine defaults (0: 4 and 64); ignored for NVFP4 */
    const char *preset;            /* NULL or an mlx-lm recipe "mixed_L_H" (2_6, 3_4, 3_5, 3_6, 3_8, 4_6, 4_8) */
    const ink_quant_rule *rules;   /* n_rules overrides, applied after the preset */
    int n_rules;
    int force;                     /* write into a non-empty destination (replacing what it names) */
    uint64_t shard_bytes;          /* largest output shard before splitting (0: 5 GiB) */
    int n_threads;                 /* quantizing threads (<= 0: the online cores); output is the same for any */
    void (*progress)(void *ctx, const ink_quant_progress *p); /* NULL: silent */
    void *ctx;
} ink_quant_opts;

/* Converts the float checkpoint in `src` (BF16 release, transformers names, F32 or F16; sharded or
 * not; with or without an MTP head) into `dst` (created; it must be absent or empty unless
 * opts->force):
 *   INK_QUANT_AFFINE: the mlx-community layout (formats.md §3.4-§5): fused gate/up stacks split into
 *     gate_proj / up_proj (de-interleaved), convs in MLX layout [C, K, 1], every linear, expert stack,
 *     embedding and unembedding whose input width is a multiple of its group quantized with MLX's
 *     algorithm (scales and biases in BF16, F16 for an F16 source), the router, norms, convs,
 *     rel_logits_proj and 1-D tensors kept; config.json with a `quantization` block (mirrored in
 *     `quantization_config`) listing every module whose parameters differ from the defaults.
 *   INK_QUANT_NVFP4: the NVFP4 release's layout (§3.2): routed-expert stacks of the backbone as U8
 *     codes + F8_E4M3 .scale + F32 .scale2, everything else as stored, plus hf_quant_config.json.
 * The MTP head stays in its own unindexed mtp.safetensors (affine: quantized by the same rules).
 * Other files of `src` (tokenizer, generation config, chat template) are copied; model files are
 * written under temporary names and renamed when complete, config.json last. Fails with a message
 * naming the file or tensor (a source already quantized, an unknown dtype, a write error). */
int ink_quantize(const char *src, const char *dst, const ink_quant_opts *opts, ink_err *err);

#ifdef __cplusplus
}
#endif
#endif
