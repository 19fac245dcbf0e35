/* hub.h — Hugging Face Hub downloader (`inkling download`) and the local model cache.
 *
 * Flow of ink_hub_download: validate repo id, options and globs (no network yet) → resolve the
 * revision through `GET {EP}/api/models/{repo}/revision/{rev}?blobs=true` to a pinned commit and a
 * file list → select files (allow/deny list, then --include / --exclude globs) → for each file
 * `GET {EP}/{repo}/resolve/{commit}/{path}` into `<dest>.incomplete` (resumed with HTTP Range,
 * redirects followed by hand: the Authorization header goes to the endpoint's own origin only),
 * verify size and sha256 (LFS) or git blob sha1, fsync, rename into place.
 *
 * Cache layout (cache_dir is INKLING_CACHE_DIR, default ~/.cache/inkling, chosen by the CLI):
 *   <cache>/models/<owner>/<name>/refs/<revision, '/' as %2F>   text file: the commit sha
 *   <cache>/models/<owner>/<name>/snapshots/<commit>/<files>    plain files, as in the repo
 * With local_dir, files go to exactly <local_dir>/<files> and no ref is written.
 *
 * Library conventions of inkling.h apply: INK_OK or a negative INK_E_* code, first error wins,
 * *out only on success, no exit(), no getenv (endpoint, token and cache dir come in the options).
 * Depends on libcurl, jansson and libc/POSIX. */
#ifndef INK_DL_HUB_H
#define INK_DL_HUB_H

#include <stdint.h>
#include <stdio.h>

#include "inkling.h"

#define INK_HUB_DEFAULT_ENDPOINT "https://huggingface.co"

typedef struct ink_hub_opts {
    const char *endpoint;  /* NULL or "": INK_HUB_DEFAULT_ENDPOINT; a trailing '/' is ignored */
    const char *token;     /* NULL or "": anonymous; printable ASCII, sent only to the endpoint */
    const char *revision;  /* NULL or "": "main"; branch, tag, refs/pr/N or a 40-hex commit */
    const char *const *include; /* globs (formats.md §6.6); a file is kept if it matches any */
    int n_include;
    const char *const *exclude; /* globs; a matching file is dropped (applied after include) */
    int n_exclude;
    const char *cache_dir; /* required unless local_dir is set */
    const char *local_dir; /* NULL: the cache snapshot directory */
    int force;             /* re-download files that already exist (and drop partial files) */
    int allow_insecure;    /* allow a plain-http endpoint that is not a loopback address */
    FILE *log;             /* progress and per-file lines (NULL: silent) */
    int tty;               /* 1: redraw a progress bar on `log`; 0: one line per file */
    /* Tuning; 0 means the default shown. */
    int max_retries;          /* 5: attempts per file that make no progress, after the first */
    double backoff_s;         /* 1.0: first retry delay, doubled each time, capped at 30 s */
    long connect_timeout_s;   /* 10 */
    long read_timeout_s;      /* 30: abort a transfer that receives nothing for this long */
    int64_t free_bytes_override; /* tests: pretend the destination filesystem has this much free */
} ink_hub_opts;

typedef struct ink_hub_result {
    char commit[41];    /* the pinned commit sha */
    char dir[4096];     /* where the files are */
    int n_files;        /* files selected */
    int n_downloaded;   /* files transferred (fully or resumed) */
    int n_skipped;      /* files already present with the expected size */
    int64_t bytes;      /* bytes received over the network */
} ink_hub_result;

/* Downloads the selected files of `repo_id` ("owner/name"). On success fills *out (may be NULL). */
int ink_hub_download(const char *repo_id, const ink_hub_opts *opts, ink_hub_result *out,
                     ink_err *err);

/* Resolves a repo id to its snapshot directory in cache_dir when the files are there: the
 * snapshot that refs/main names if it is complete, else the most recently modified complete
 * snapshot. Complete = config.json present and the weights present (formats.md §2.3: every shard
 * the index names, a stale index with other shards, or without an index at least one top-level
 * *.safetensors). Writes the directory into out_dir (capacity n). INK_E_INVAL for a malformed id
 * or a too-small buffer, INK_E_IO when the repo is not (completely) in the cache. */
int ink_hub_resolve_local(const char *repo_id, const char *cache_dir, char *out_dir, size_t n,
                          ink_err *err);

/* What `-m ARG` means: an existing directory is used as is; otherwise an owner/name repo id is
 * resolved with ink_hub_resolve_local; anything else is INK_E_IO ("no such directory"). */
int ink_hub_model_arg(const char *arg, const char *cache_dir, char *out_dir, size_t n,
                      ink_err *err);

/* 1 if s has the form owner/name with Hub-legal characters ([A-Za-z0-9._-], no "..", no leading
 * or trailing '.' / '-'), 0 otherwise. A caller with "-m X" checks for an existing path first. */
int ink_hub_is_repo_id(const char *s);

/* Default cache directory from the values of INKLING_CACHE_DIR, XDG_CACHE_HOME and HOME (each may
 * be NULL): the first if set, else XDG_CACHE_HOME/inkling, else HOME/.cache/inkling. */
int ink_hub_default_cache_dir(const char *inkling_cache_dir, const char *xdg_cache_home,
                              const char *home, char *out, size_t n, ink_err *err);

/* ---- helpers, exposed for tests ---------------------------------------------------------- */

/* Glob of formats.md §6.6. ink_glob_check: INK_OK or INK_E_INVAL (unterminated '[', '**' next to
 * something other than '/', three or more '*'). ink_glob_match: 1 on a whole-string match. */
int ink_glob_check(const char *pat, ink_err *err);
int ink_glob_match(const char *pat, const char *s);

/* Candidate rules of formats.md §6.5: 1 if the repository path is safe (not empty, not absolute,
 * no '\\', "//", leading/trailing '/', '.' or '..' component, <= 512 bytes). */
int ink_hub_path_safe(const char *path);
/* 1 if the file is on the allow-list and not on the deny-list (what a download takes by default). */
int ink_hub_path_wanted(const char *path);

/* Percent-encodes s into out (capacity n): unreserved characters kept, and '/' kept when
 * keep_slash. Returns INK_OK or INK_E_INVAL when it does not fit. */
int ink_hub_urlencode(const char *s, int keep_slash, char *out, size_t n, ink_err *err);

#endif
