/* warm.h — internal to agent/job/: which programs can start from a warm
 * interpreter, and what the agent tells one when it takes it
 * (agent/job/warm.c; the interpreter's side is python/elastic_agent/_warm.py,
 * the processes are the supervisor's "spares").
 *
 * A warm interpreter is `PYTHON [OPTIONS] _warm.py MODULE…`, started ahead
 * of need: it imports compute.preload and waits for the handover, then runs
 * the script (or -m module) exactly as `PYTHON [OPTIONS] SCRIPT ARG…` would.
 * Only a command line of that shape is started warm: the interpreter (a word
 * whose last path element is python, python3, python3.11, …), options that
 * change nothing a warm start could get wrong, then a script or `-m MODULE`.
 * Everything here is pure and unit-tested (tests/unit/test_warm.c).
 */
#ifndef EA_WARM_H
#define EA_WARM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t ninterp; /* argv[0 .. ninterp): the interpreter and its options */
  bool module;      /* argv[ninterp] is "-m", argv[ninterp + 1] the module */
} ea__warm_form;

/* argv (NULL-terminated) as a Python program: 0 and *f, or -ENOTSUP with
 * the reason in why ("not a Python interpreter: torchrun", "-c runs no
 * file", …).  Options accepted before the script: -b -B -d -E -I -O -OO -P
 * -q -R -s -S -u -v (alone or combined, "-uB"), -W ARG and -X ARG (joined
 * or not); anything else (-c, -i, -x, -, --long) is not started warm. */
int ea__warm_form_of(char *const *argv, ea__warm_form *f, char *why, size_t cap);

/* A shell command (compute.worker_command) as words, when it is plain words
 * separated by blanks with no shell syntax (no quotes, $, `, \, ;, &, |, <,
 * >, (, ), {, }, *, ?, [, ~, #, newline; an = is plain but in a first word, which is then
 * no interpreter) — what /bin/sh -c would run as
 * the same argv.  0 and a malloc'd NULL-terminated array (ea__warm_words_free),
 * -ENOTSUP with the reason in why, -ENOMEM. */
int ea__warm_split(const char *cmd, char ***words, char *why, size_t cap);
void ea__warm_words_free(char **words);

/* compute.preload ("torch, torch.distributed"; config/keys.c checks it):
 * module names separated by commas and/or blanks. */
/* The names as words (malloc'd, NULL-terminated; none: an empty array). */
int ea__warm_preload_words(const char *s, char ***words);

/* The handover packet (see _warm.py): argv whole, f its form, env the
 * worker's environment, cwd its working directory.  Malloc'd into *buf;
 * 0, -ENOMEM, or -E2BIG above max bytes. */
int ea__warm_handover(char *const *argv, const ea__warm_form *f, char *const *env, const char *cwd,
                      size_t max, char **buf, size_t *len);

/* Whether an interpreter started with environment `was` can become a worker
 * whose environment is `now`: every variable the interpreter reads once at
 * start (PYTHON*, LANG, LC_*, and the thread and allocator settings a
 * preloaded torch reads at import: OMP_NUM_THREADS, MKL_NUM_THREADS,
 * OPENBLAS_NUM_THREADS, CUDA_VISIBLE_DEVICES, LD_PRELOAD, LD_LIBRARY_PATH,
 * PATH, MALLOC_*, TORCH_*, PYTORCH_*) has the same value in both, or is
 * absent from both.  false with the first differing name in name. */
bool ea__warm_env_compatible(char *const *was, char *const *now, char *name, size_t cap);

#endif
