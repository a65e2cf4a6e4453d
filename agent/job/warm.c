/* warm.c — which programs start from a warm interpreter, and the handover
 * packet (warm.h).  Pure: no I/O, no globals.
 *
 * Why so strict about the command line.  A warm interpreter was started
 * before the generation, as `PYTHON OPTIONS _warm.py`, and must end up
 * indistinguishable from `PYTHON OPTIONS SCRIPT`.  Options that only set
 * interpreter flags (-u, -O, -W …) are given to the warm one as they are and
 * stay true; options that change what runs (-c, -i, -x, reading stdin) have
 * no warm equivalent, so such programs start cold, as before.  A shell
 * command is taken only when the shell would do nothing but split it into
 * words; anything else (a pipeline, a variable, a quote) runs as it always
 * did, through /bin/sh.
 */
#include "warm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_python(const char *word) {
  const char *base = strrchr(word, '/');
  base = base ? base + 1 : word;
  if (strncmp(base, "python", 6) != 0) return false;
  for (const char *p = base + 6; *p; p++)
    if (!((*p >= '0' && *p <= '9') || *p == '.')) return false;
  return true;
}

int ea__warm_form_of(char *const *argv, ea__warm_form *f, char *why, size_t cap) {
  if (!argv || !argv[0]) {
    snprintf(why, cap, "no program");
    return -ENOTSUP;
  }
  if (!is_python(argv[0])) {
    snprintf(why, cap, "not a Python interpreter: %.200s", argv[0]);
    return -ENOTSUP;
  }
  uint32_t i = 1;
  for (; argv[i]; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || strcmp(a, "-m") == 0) break;
    if (strcmp(a, "-") == 0 || a[1] == '-') {
      snprintf(why, cap, "option %.100s has no warm equivalent", a);
      return -ENOTSUP;
    }
    for (const char *p = a + 1; *p; p++) {
      if (strchr("bBdEIOPqRsSuv", *p)) continue;
      if (*p == 'W' || *p == 'X') {
        if (p[1] == 0 && !argv[++i]) { /* the value is the next word */
          snprintf(why, cap, "-%c without its value", *p);
          return -ENOTSUP;
        }
        break;
      }
      if (*p == 'm' && p[1] == 0) { /* "-um MODULE": -m last in a group */
        snprintf(why, cap, "-m inside %.40s: give it as a word of its own", a);
        return -ENOTSUP;
      }
      snprintf(why, cap, "option -%c (in %.40s) has no warm equivalent", *p, a);
      return -ENOTSUP;
    }
  }
  if (!argv[i]) {
    snprintf(why, cap, "no script: %.100s reads standard input", argv[0]);
    return -ENOTSUP;
  }
  f->ninterp = i;
  f->module = strcmp(argv[i], "-m") == 0;
  if (f->module && (!argv[i + 1] || !argv[i + 1][0])) {
    snprintf(why, cap, "-m without a module");
    return -ENOTSUP;
  }
  if (!argv[i][0]) {
    snprintf(why, cap, "an empty script name");
    return -ENOTSUP;
  }
  return 0;
}

void ea__warm_words_free(char **words) {
  for (size_t i = 0; words && words[i]; i++) free(words[i]);
  free(words);
}

/* Split s at blanks (space, tab); *out NULL-terminated, malloc'd. */
static int split_blank(const char *s, const char *seps, char ***out) {
  size_t n = 0, len = strlen(s);
  char **w = calloc(len / 2 + 2, sizeof *w);
  if (!w) return -ENOMEM;
  for (const char *p = s; *p;) {
    p += strspn(p, seps);
    size_t k = strcspn(p, seps);
    if (!k) break;
    if (!(w[n] = strndup(p, k))) {
      ea__warm_words_free(w);
      return -ENOMEM;
    }
    n++;
    p += k;
  }
  *out = w;
  return 0;
}

int ea__warm_split(const char *cmd, char ***words, char *why, size_t cap) {
  *words = NULL;
  static const char syntax[] = "'\"$`\\;&|<>(){}*?[~#\n\r";
  size_t k = strcspn(cmd, syntax);
  if (cmd[k]) {
    snprintf(why, cap, "the shell command uses shell syntax ('%c'): it runs through /bin/sh",
             cmd[k] == '\n' ? ' ' : cmd[k]);
    return -ENOTSUP;
  }
  int rc = split_blank(cmd, " \t", words);
  if (rc) return rc;
  if (!(*words)[0]) {
    ea__warm_words_free(*words);
    *words = NULL;
    snprintf(why, cap, "an empty command");
    return -ENOTSUP;
  }
  return 0;
}

int ea__warm_preload_words(const char *s, char ***words) {
  return split_blank(s, ", \t", words);
}

/* ---- the handover packet -------------------------------------------------- */

typedef struct {
  char *p;
  size_t n, cap, max;
  int err;
} buf;

static void put(buf *b, const char *s, size_t n) {
  if (b->err) return;
  if (b->n + n + 1 > b->max) {
    b->err = -E2BIG;
    return;
  }
  if (b->n + n + 1 > b->cap) {
    size_t c = b->cap ? b->cap : 4096;
    while (c < b->n + n + 1) c *= 2;
    char *q = realloc(b->p, c);
    if (!q) {
      b->err = -ENOMEM;
      return;
    }
    b->p = q;
    b->cap = c;
  }
  memcpy(b->p + b->n, s, n);
  b->p[b->n + n] = 0;
  b->n += n + 1;
}

static void put_s(buf *b, const char *s) {
  put(b, s, strlen(s));
}

static void put_u(buf *b, size_t v) {
  char num[24];
  int n = snprintf(num, sizeof num, "%zu", v);
  put(b, num, (size_t)n);
}

int ea__warm_handover(char *const *argv, const ea__warm_form *f, char *const *env, const char *cwd,
                      size_t max, char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  buf b = {.max = max};
  size_t na = 0, ne = 0;
  while (argv[na]) na++;
  while (env && env[ne]) ne++;
  put_s(&b, "EAW1");
  put_u(&b, na);
  for (size_t i = 0; i < na; i++) put_s(&b, argv[i]);
  put_u(&b, f->ninterp);
  put_s(&b, f->module ? "m" : "s");
  put_u(&b, ne);
  for (size_t i = 0; i < ne; i++) put_s(&b, env[i]);
  put_s(&b, cwd);
  if (b.err) {
    free(b.p);
    return b.err;
  }
  *out = b.p;
  *len = b.n;
  return 0;
}

/* ---- environments --------------------------------------------------------- */

static bool read_at_start(const char *kv) {
  static const char *const prefix[] = {"PYTHON", "LC_", "MALLOC_", "TORCH_", "PYTORCH_"};
  static const char *const exact[] = {"LANG",
                                      "OMP_NUM_THREADS",
                                      "MKL_NUM_THREADS",
                                      "OPENBLAS_NUM_THREADS",
                                      "CUDA_VISIBLE_DEVICES",
                                      "LD_PRELOAD",
                                      "LD_LIBRARY_PATH",
                                      "PATH"};
  for (size_t i = 0; i < sizeof prefix / sizeof prefix[0]; i++)
    if (strncmp(kv, prefix[i], strlen(prefix[i])) == 0) return true;
  size_t n = strcspn(kv, "=");
  for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
    if (strlen(exact[i]) == n && strncmp(kv, exact[i], n) == 0) return true;
  return false;
}

/* The entry of env with the same name as kv, or NULL. */
static const char *find(char *const *env, const char *kv) {
  size_t n = strcspn(kv, "=");
  for (size_t i = 0; env && env[i]; i++)
    if (strncmp(env[i], kv, n) == 0 && env[i][n] == '=') return env[i];
  return NULL;
}

static bool one_way(char *const *a, char *const *b, char *name, size_t cap) {
  for (size_t i = 0; a && a[i]; i++) {
    if (!read_at_start(a[i])) continue;
    const char *o = find(b, a[i]);
    if (o && strcmp(o, a[i]) == 0) continue;
    snprintf(name, cap, "%.*s", (int)strcspn(a[i], "="), a[i]);
    return false;
  }
  return true;
}

bool ea__warm_env_compatible(char *const *was, char *const *now, char *name, size_t cap) {
  return one_way(was, now, name, cap) && one_way(now, was, name, cap);
}
