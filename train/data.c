/* data.c — the trainer's corpus and its elastic data order.
 *
 * The corpus is loaded whole into memory: the default (/usr/share/common-
 * licenses) is a few hundred KB, and a flat byte array makes every sample a
 * pointer offset.  Loading is deterministic so that every node, walking its
 * own copy, gets the same bytes: files are ordered by path, symlink aliases
 * are collapsed by (st_dev, st_ino), and the result is fingerprinted (size +
 * XXH3) so a node with different data is refused when it loads state.
 *
 * The order of samples is a pure function of (seed, global index): index g
 * lives in epoch g / n at position g % n of that epoch's seeded Fisher–Yates
 * permutation.  Together with the fixed global batch this makes the data
 * cursor equal to the step number, whatever the world size; ranks only
 * choose which slice of the step's B indices they compute.
 *
 * The PRNG is base's (ea_rng, splitmix64 → xoshiro256**, domain
 * EA_RNG_EPOCH); its exact definition is in ea_base.h because the data order
 * depends on every bit of it.
 */
#include "ea_train.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxh_x86dispatch.h>

/* ---- corpus ------------------------------------------------------------- */

struct ea_data {
  uint8_t *bytes;
  size_t len;
  uint64_t hash;
  size_t nfiles, nskipped;
};

typedef struct {
  char *path;
  dev_t dev;
  ino_t ino;
} file_ent;

typedef struct {
  file_ent *files;
  size_t nfiles, capfiles;
  struct {
    dev_t dev;
    ino_t ino;
  } * dirs; /* every directory entered: loop guard */
  size_t ndirs, capdirs;
  size_t nskipped;
  char *err;
  size_t errlen;
} walk;

/* Deep enough for any real tree; a bound keeps a pathological one (or a
 * bind-mount maze the inode check cannot see) from exhausting the stack. */
#define WALK_MAX_DEPTH 64

static int add_file(walk *w, const char *path, const struct stat *st) {
  if (w->nfiles == w->capfiles) {
    size_t cap = w->capfiles ? w->capfiles * 2 : 32;
    file_ent *f = realloc(w->files, cap * sizeof *f);
    if (!f) return -ENOMEM;
    w->files = f;
    w->capfiles = cap;
  }
  char *p = strdup(path);
  if (!p) return -ENOMEM;
  w->files[w->nfiles++] = (file_ent){p, st->st_dev, st->st_ino};
  return 0;
}

static int cmp_dirent(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

static int walk_dir(walk *w, const char *dir, const struct stat *dst, int depth) {
  for (size_t i = 0; i < w->ndirs; i++)
    if (w->dirs[i].dev == dst->st_dev && w->dirs[i].ino == dst->st_ino) {
      w->nskipped++;
      return 0;
    }
  if (depth >= WALK_MAX_DEPTH) {
    ea_seterr(w->err, w->errlen, "%s: deeper than %d directories", dir, WALK_MAX_DEPTH);
    return -ELOOP;
  }
  if (w->ndirs == w->capdirs) {
    size_t cap = w->capdirs ? w->capdirs * 2 : 16;
    void *d = realloc(w->dirs, cap * sizeof *w->dirs);
    if (!d) return -ENOMEM;
    w->dirs = d;
    w->capdirs = cap;
  }
  w->dirs[w->ndirs].dev = dst->st_dev;
  w->dirs[w->ndirs].ino = dst->st_ino;
  w->ndirs++;

  /* Entries in byte order, so that when one directory is reachable by two
   * paths (a symlink alias) the walk meets the same one first on every node. */
  struct dirent **ents = NULL;
  int n = scandir(dir, &ents, NULL, cmp_dirent);
  if (n < 0) {
    int e = -errno;
    ea_seterr(w->err, w->errlen, "%s: %s", dir, strerror(errno));
    return e;
  }
  int rc = 0;
  size_t dlen = strlen(dir);
  for (int k = 0; k < n; k++) {
    const char *name = ents[k]->d_name;
    if (rc || !strcmp(name, ".") || !strcmp(name, "..")) continue;
    size_t plen = dlen + 1 + strlen(name) + 1;
    char *p = malloc(plen);
    if (!p) {
      rc = -ENOMEM;
      continue;
    }
    snprintf(p, plen, "%s%s%s", dir, dlen && dir[dlen - 1] == '/' ? "" : "/", name);
    struct stat st;
    if (stat(p, &st) == 0) { /* else a dangling symlink, or raced away: not data */
      if (S_ISDIR(st.st_mode))
        rc = walk_dir(w, p, &st, depth + 1);
      else if (S_ISREG(st.st_mode))
        rc = add_file(w, p, &st);
    }
    free(p);
  }
  for (int k = 0; k < n; k++) free(ents[k]);
  free(ents);
  return rc;
}

static int cmp_ident(const void *a, const void *b) {
  const file_ent *x = a, *y = b;
  if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
  if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
  return strcmp(x->path, y->path);
}

static int cmp_path(const void *a, const void *b) {
  return strcmp(((const file_ent *)a)->path, ((const file_ent *)b)->path);
}

/* Append the file's bytes.  O_NONBLOCK + fstat guard against the path having
 * been swapped for a fifo since stat (open would otherwise block). */
static int read_file(const char *path, uint8_t **buf, size_t *len, size_t *cap, char *err,
                     size_t errlen) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int e = -errno;
    ea_seterr(err, errlen, "%s: %s", path, strerror(errno));
    return e;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return 0; /* no longer a regular file: skip, as the walk would have */
  }
  if ((uint64_t)st.st_size > EA_DATA_MAX_BYTES - *len) {
    close(fd);
    ea_seterr(err, errlen, "%s: corpus exceeds %llu bytes", path,
              (unsigned long long)EA_DATA_MAX_BYTES);
    return -EFBIG;
  }
  size_t want = (size_t)st.st_size;
  if (*len + want > *cap) {
    size_t ncap = *cap ? *cap : 1 << 16;
    while (ncap < *len + want) ncap *= 2;
    uint8_t *nb = realloc(*buf, ncap);
    if (!nb) {
      close(fd);
      return -ENOMEM;
    }
    *buf = nb;
    *cap = ncap;
  }
  size_t got = 0;
  while (got < want) { /* a file that shrinks meanwhile contributes what it has */
    ssize_t r = read(fd, *buf + *len + got, want - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = -errno;
      ea_seterr(err, errlen, "%s: read: %s", path, strerror(errno));
      close(fd);
      return e;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  close(fd);
  *len += got;
  return 0;
}

static int data_finish(ea_data *d) {
  d->hash = XXH3_64bits_dispatch(d->bytes, d->len);
  return 0;
}

int ea_data_open(const char *path, ea_data **out, char *err, size_t errlen) {
  *out = NULL;
  if (!path || !*path) {
    ea_seterr(err, errlen, "train.data: empty path");
    return -EINVAL;
  }
  struct stat st;
  if (stat(path, &st) != 0) {
    int e = -errno;
    ea_seterr(err, errlen, "%s: %s", path, strerror(errno));
    return e;
  }
  walk w = {.err = err, .errlen = errlen};
  int rc = 0;
  if (S_ISDIR(st.st_mode))
    rc = walk_dir(&w, path, &st, 0);
  else if (S_ISREG(st.st_mode))
    rc = add_file(&w, path, &st);
  else {
    ea_seterr(err, errlen, "%s: not a regular file or directory", path);
    rc = -EINVAL;
  }

  ea_data *d = NULL;
  size_t cap = 0;
  if (rc == 0) {
    /* Collapse aliases: among entries naming the same inode keep the one
     * with the smallest path, so the choice does not depend on readdir. */
    if (w.nfiles > 1) qsort(w.files, w.nfiles, sizeof *w.files, cmp_ident);
    size_t keep = 0;
    for (size_t i = 0; i < w.nfiles; i++) {
      if (keep > 0 && w.files[keep - 1].dev == w.files[i].dev &&
          w.files[keep - 1].ino == w.files[i].ino) {
        free(w.files[i].path);
        w.nskipped++;
        continue;
      }
      w.files[keep++] = w.files[i];
    }
    w.nfiles = keep;
    if (w.nfiles > 1) qsort(w.files, w.nfiles, sizeof *w.files, cmp_path);
    d = calloc(1, sizeof *d);
    if (!d) rc = -ENOMEM;
  }
  for (size_t i = 0; rc == 0 && i < w.nfiles; i++)
    rc = read_file(w.files[i].path, &d->bytes, &d->len, &cap, err, errlen);
  if (rc == 0 && d->len == 0) {
    ea_seterr(err, errlen, "%s: no data (no non-empty regular files)", path);
    rc = -ENODATA;
  }
  if (rc == 0) {
    d->nfiles = w.nfiles;
    d->nskipped = w.nskipped;
    data_finish(d);
    *out = d;
  } else if (d) {
    free(d->bytes);
    free(d);
  }
  for (size_t i = 0; i < w.nfiles; i++) free(w.files[i].path);
  free(w.files);
  free(w.dirs);
  return rc;
}

int ea_data_from_memory(const void *bytes, size_t len, ea_data **out) {
  *out = NULL;
  if (len == 0) return -ENODATA;
  if (len > EA_DATA_MAX_BYTES) return -EFBIG;
  ea_data *d = calloc(1, sizeof *d);
  if (!d) return -ENOMEM;
  d->bytes = malloc(len);
  if (!d->bytes) {
    free(d);
    return -ENOMEM;
  }
  memcpy(d->bytes, bytes, len);
  d->len = len;
  d->nfiles = 1;
  data_finish(d);
  *out = d;
  return 0;
}

void ea_data_close(ea_data *d) {
  if (!d) return;
  free(d->bytes);
  free(d);
}

size_t ea_data_size(const ea_data *d) {
  return d->len;
}
const uint8_t *ea_data_bytes(const ea_data *d) {
  return d->bytes;
}
uint64_t ea_data_hash(const ea_data *d) {
  return d->hash;
}
size_t ea_data_nfiles(const ea_data *d) {
  return d->nfiles;
}
size_t ea_data_nskipped(const ea_data *d) {
  return d->nskipped;
}

void ea_data_sample(const ea_data *d, uint32_t pos, uint32_t context, uint8_t *ctx,
                    uint8_t *target) {
  /* Zero padding before the start keeps every position a sample (n samples
   * per epoch, n = bytes), matching "the data cursor is the step". */
  uint32_t pad = pos < context ? context - pos : 0;
  memset(ctx, 0, pad);
  memcpy(ctx + pad, d->bytes + pos - (context - pad), context - pad);
  *target = d->bytes[pos];
}

/* ---- elastic order ------------------------------------------------------ */

void ea_train_rank_range(uint64_t step, uint32_t global_batch, uint32_t rank, uint32_t world,
                         uint64_t *begin, uint64_t *end) {
  /* rank·B < 2^64 since both are 32-bit: no overflow in the split. */
  uint64_t base = step * (uint64_t)global_batch;
  *begin = base + (uint64_t)rank * global_batch / world;
  *end = base + ((uint64_t)rank + 1) * global_batch / world;
}

struct ea_sampler {
  const ea_data *d;
  uint64_t seed;
  uint64_t epoch; /* epoch held in perm; valid only if have */
  int have;
  uint32_t *perm;
};

int ea_sampler_new(const ea_data *d, uint64_t seed, ea_sampler **out) {
  *out = NULL;
  ea_sampler *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  s->perm = malloc(d->len * sizeof *s->perm);
  if (!s->perm) {
    free(s);
    return -ENOMEM;
  }
  s->d = d;
  s->seed = seed;
  *out = s;
  return 0;
}

void ea_sampler_free(ea_sampler *s) {
  if (!s) return;
  free(s->perm);
  free(s);
}

static void build_perm(ea_sampler *s, uint64_t epoch) {
  size_t n = s->d->len;
  for (size_t i = 0; i < n; i++) s->perm[i] = (uint32_t)i;
  ea_rng r;
  ea_rng_seed(&r, s->seed, EA_RNG_EPOCH, epoch);
  for (size_t i = n - 1; i > 0; i--) { /* Durstenfeld's Fisher–Yates */
    uint32_t j = ea_rng_below(&r, (uint64_t)i + 1);
    uint32_t t = s->perm[i];
    s->perm[i] = s->perm[j];
    s->perm[j] = t;
  }
  s->epoch = epoch;
  s->have = 1;
}

uint32_t ea_sampler_position(ea_sampler *s, uint64_t g) {
  uint64_t n = s->d->len;
  uint64_t e = g / n;
  if (!s->have || s->epoch != e) build_perm(s, e);
  return s->perm[g % n];
}
