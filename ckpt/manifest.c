/* The checkpoint manifest: its text form, a bounded parser, and the commit
 * that makes a checkpoint exist.
 *
 * The manifest is line-based "key value" text (docs/checkpoints.md), so an
 * operator can read it with `cat`, diff two of them, and check a shard with
 * `xxhsum -H3`.  Keys come in a fixed order and unknown keys are errors: the
 * format carries a version number, and a reader that guesses at a newer or
 * damaged file is worse than one that refuses it.  The last line holds an
 * XXH3-64 of every byte before it, so a damaged manifest is detected even
 * where the damage would still parse.
 *
 * The parser works on (pos, end) and never trusts a count before the bytes
 * that back it are there: "tensors 4000000000" in a 100-byte file is
 * rejected, not allocated.  Every error names the line and the field.
 *
 * Commit order (the only place a checkpoint comes into existence): fsync the
 * step directory (so the shard entries are durable), MANIFEST.tmp written
 * and fsynced, renamed to MANIFEST with RENAME_NOREPLACE (a second commit of
 * the same step and generation fails instead of replacing the first), the
 * directory fsynced; then LATEST the same way.  A crash at any point leaves
 * either no MANIFEST (the checkpoint does not exist; retention removes the
 * leftovers) or a MANIFEST whose shards were durable before it was written.
 * The generation fence, the shard check and both renames happen under
 * flock(DIR/.lock), fence first, so two controllers (an old one that has not
 * yet noticed it was replaced, and its successor) cannot interleave, and the
 * old one is told it is stale whatever became of its files.  The wait for
 * the lock is bounded; why a holder frozen inside a commit may still finish
 * it safely is argued above ea_ckpt_commit. */
#include "ckpt_int.h"

#include "ea_base.h"
#include "ea_ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxh_x86dispatch.h>

/* ---- building ----------------------------------------------------------- */

int ea_ckpt_manifest_init(ea_ckpt_manifest *m, uint64_t step, uint64_t generation, uint32_t world,
                          uint64_t total) {
  memset(m, 0, sizeof *m);
  if (world == 0 || world > EA_CKPT_MAX_WORLD) return -EINVAL;
  m->shards = calloc(world, sizeof *m->shards);
  if (!m->shards) return -ENOMEM;
  m->format_version = EA_CKPT_FORMAT_VERSION;
  m->step = step;
  m->generation = generation;
  m->world_size = world;
  m->total_bytes = total;
  snprintf(m->agent_version, sizeof m->agent_version, "%s", EA_VERSION);
  m->created = (int64_t)time(NULL);
  for (uint32_t r = 0; r < world; r++) {
    ea_ckpt_shard *s = &m->shards[r];
    s->rank = r;
    ea_ckpt_shard_name(s->file, sizeof s->file, r, world);
    ea_ckpt_shard_range(total, world, r, &s->offset, &s->length);
  }
  return 0;
}

int ea_ckpt_manifest_set_shard(ea_ckpt_manifest *m, uint32_t rank, const ea_ckpt_write_result *w) {
  if (!m->shards || rank >= m->world_size || !w) return -EINVAL;
  ea_ckpt_shard *s = &m->shards[rank];
  if (w->bytes != s->length || w->n_blocks > EA_CKPT_MAX_BLOCKS) return -EINVAL;
  s->hash = w->hash;
  s->block_size = w->block_size;
  s->n_blocks = w->n_blocks;
  memcpy(s->block_hash, w->block_hash, sizeof s->block_hash);
  s->set = true;
  return 0;
}

static bool good_tensor_name(const char *s, size_t n) {
  if (n == 0 || n >= EA_CKPT_TENSOR_NAME_MAX) return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) return false;
  return true;
}

static bool good_dtype(const char *s, size_t n) {
  if (n == 0 || n >= EA_CKPT_DTYPE_MAX) return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
      return false;
  return true;
}

static bool good_version(const char *s, size_t n) {
  if (n == 0 || n >= sizeof(((ea_ckpt_manifest *)0)->agent_version)) return false;
  return good_tensor_name(s, n);
}

int ea_ckpt_manifest_add_tensor(ea_ckpt_manifest *m, const char *name, const char *dtype,
                                uint32_t ndim, const uint64_t *shape, uint64_t offset,
                                uint64_t length) {
  if (!name || !dtype || !good_tensor_name(name, strlen(name)) ||
      !good_dtype(dtype, strlen(dtype)) || ndim > EA_CKPT_MAX_DIMS || (ndim && !shape) ||
      offset > m->total_bytes || length > m->total_bytes - offset)
    return -EINVAL;
  if (m->n_tensors >= EA_CKPT_MAX_TENSORS) return -E2BIG;
  if (m->n_tensors == m->cap_tensors) {
    uint32_t nc = m->cap_tensors ? m->cap_tensors * 2 : 16;
    ea_ckpt_tensor *t = realloc(m->tensors, (size_t)nc * sizeof *t);
    if (!t) return -ENOMEM;
    m->tensors = t;
    m->cap_tensors = nc;
  }
  ea_ckpt_tensor *t = &m->tensors[m->n_tensors++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
  t->ndim = ndim;
  for (uint32_t i = 0; i < ndim; i++) t->shape[i] = shape[i];
  t->offset = offset;
  t->length = length;
  return 0;
}

void ea_ckpt_manifest_close(ea_ckpt_manifest *m) {
  free(m->tensors);
  free(m->shards);
  memset(m, 0, sizeof *m);
}

int ea_ckpt_manifest_validate(const ea_ckpt_manifest *m, char *err, size_t errlen) {
  if (m->format_version != EA_CKPT_FORMAT_VERSION) {
    ea_seterr(err, errlen, "format %u not supported", m->format_version);
    return -EINVAL;
  }
  if (!m->shards || m->world_size == 0 || m->world_size > EA_CKPT_MAX_WORLD) {
    ea_seterr(err, errlen, "world_size %u out of range", m->world_size);
    return -EINVAL;
  }
  if (!good_version(m->agent_version, strlen(m->agent_version))) {
    ea_seterr(err, errlen, "agent_version: not a printable word");
    return -EINVAL;
  }
  uint64_t at = 0;
  for (uint32_t r = 0; r < m->world_size; r++) {
    const ea_ckpt_shard *s = &m->shards[r];
    char want[EA_CKPT_NAME_MAX];
    ea_ckpt_shard_name(want, sizeof want, r, m->world_size);
    if (!s->set) {
      ea_seterr(err, errlen, "shard %u: no write result recorded", r);
      return -EINVAL;
    }
    if (s->rank != r || strcmp(s->file, want) != 0) {
      ea_seterr(err, errlen, "shard %u: file is \"%s\", expected \"%s\"", r, s->file, want);
      return -EINVAL;
    }
    if (s->offset != at || s->length > m->total_bytes - at) {
      ea_seterr(err, errlen,
                "shard %u: range [%" PRIu64 ", +%" PRIu64 ") does not follow %" PRIu64
                " inside %" PRIu64 " bytes",
                r, s->offset, s->length, at, m->total_bytes);
      return -EINVAL;
    }
    uint64_t bs = s->block_size;
    if (bs < 4096 || (bs & (bs - 1)) || s->n_blocks > EA_CKPT_MAX_BLOCKS ||
        s->n_blocks != (s->length + bs - 1) / bs) {
      ea_seterr(err, errlen, "shard %u: %u blocks of %" PRIu64 " bytes do not cover %" PRIu64, r,
                s->n_blocks, bs, s->length);
      return -EINVAL;
    }
    at += s->length;
  }
  if (at != m->total_bytes) {
    ea_seterr(err, errlen, "shards cover %" PRIu64 " of %" PRIu64 " bytes", at, m->total_bytes);
    return -EINVAL;
  }
  for (uint32_t i = 0; i < m->n_tensors; i++) {
    const ea_ckpt_tensor *t = &m->tensors[i];
    if (!good_tensor_name(t->name, strlen(t->name)) || !good_dtype(t->dtype, strlen(t->dtype)) ||
        t->ndim > EA_CKPT_MAX_DIMS || t->offset > m->total_bytes ||
        t->length > m->total_bytes - t->offset) {
      ea_seterr(err, errlen, "tensor %u (%s): bad name, dtype, shape or range", i, t->name);
      return -EINVAL;
    }
  }
  return 0;
}

/* ---- text form ---------------------------------------------------------- */

static void fmt_time(char *out, size_t cap, int64_t t) {
  struct tm tm;
  time_t tt = (time_t)t;
  if (!gmtime_r(&tt, &tm) || strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    snprintf(out, cap, "1970-01-01T00:00:00Z");
}

int ea_ckpt_manifest_format(const ea_ckpt_manifest *m, char **out, size_t *len, char *err,
                            size_t errlen) {
  int rc = ea_ckpt_manifest_validate(m, err, errlen);
  if (rc < 0) return rc;
  ea_sb b = {0};
  if (!ea_sb_reserve(&b, 4096)) return -ENOMEM;
  char ts[32];
  fmt_time(ts, sizeof ts, m->created);
  ea_sb_printf(&b,
               "# elastic-agent checkpoint manifest; see docs/checkpoints.md\n"
               "format %u\nstep %" PRIu64 "\ngeneration %" PRIu64
               "\nworld_size %u\n"
               "total_bytes %" PRIu64 "\nconfig_hash %016" PRIx64
               "\nagent_version %s\n"
               "created %s\nhash xxh3-64\ntensors %u\n",
               m->format_version, m->step, m->generation, m->world_size, m->total_bytes,
               m->config_hash, m->agent_version, ts, m->n_tensors);
  for (uint32_t i = 0; i < m->n_tensors; i++) {
    const ea_ckpt_tensor *t = &m->tensors[i];
    ea_sb_printf(&b, "tensor %s %s ", t->name, t->dtype);
    if (t->ndim == 0) ea_sb_printf(&b, "-");
    for (uint32_t d = 0; d < t->ndim; d++)
      ea_sb_printf(&b, "%s%" PRIu64, d ? "x" : "", t->shape[d]);
    ea_sb_printf(&b, " %" PRIu64 " %" PRIu64 "\n", t->offset, t->length);
  }
  ea_sb_printf(&b, "shards %u\n", m->world_size);
  for (uint32_t r = 0; r < m->world_size; r++) {
    const ea_ckpt_shard *s = &m->shards[r];
    ea_sb_printf(&b, "shard %u %s %" PRIu64 " %" PRIu64 " %016" PRIx64 " %" PRIu64 " %u", r,
                 s->file, s->offset, s->length, s->hash, s->block_size, s->n_blocks);
    for (uint32_t k = 0; k < s->n_blocks; k++) ea_sb_printf(&b, " %016" PRIx64, s->block_hash[k]);
    ea_sb_printf(&b, "\n");
  }
  if (!b.oom)
    ea_sb_printf(&b, "end %016" PRIx64 "\n", (uint64_t)XXH3_64bits_dispatch(b.buf, b.len));
  if (b.oom) {
    ea_sb_free(&b);
    return -ENOMEM;
  }
  *out = b.buf;
  *len = b.len;
  return 0;
}

/* ---- parser ------------------------------------------------------------- */

typedef struct {
  const char *pos, *end;
  unsigned line;
  const char *start; /* of the current line */
  char *err;
  size_t errlen;
} lp;

#define MAX_TOKENS (8 + EA_CKPT_MAX_BLOCKS + 2)

typedef struct {
  const char *p[MAX_TOKENS];
  size_t n[MAX_TOKENS];
  size_t count;
} toks;

static int perr(lp *l, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int perr(lp *l, const char *field, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ea_seterr(l->err, l->errlen, "line %u: %s: %s", l->line, field, msg);
  return -EBADMSG;
}

/* Next non-comment line split on single spaces; -EBADMSG at end of input,
 * for a line without '\n', or one with more tokens than any valid line. */
static int next_line(lp *l, toks *t, const char *field) {
  for (;;) {
    if (l->pos >= l->end) {
      l->line++;
      return perr(l, field, "missing (end of manifest)");
    }
    l->line++;
    l->start = l->pos;
    const char *nl = memchr(l->pos, '\n', (size_t)(l->end - l->pos));
    if (!nl) return perr(l, field, "line not terminated");
    const char *p = l->pos;
    l->pos = nl + 1;
    if (*p == '#') continue;
    t->count = 0;
    while (p < nl) {
      const char *q = p;
      while (q < nl && *q != ' ') q++;
      if (q == p) return perr(l, field, "empty field (two spaces?)");
      if (t->count == MAX_TOKENS) return perr(l, field, "too many fields");
      t->p[t->count] = p;
      t->n[t->count++] = (size_t)(q - p);
      p = q < nl ? q + 1 : q;
      if (p == nl && q < nl) return perr(l, field, "trailing space");
    }
    return 0;
  }
}

static bool tok_is(const toks *t, size_t i, const char *s) {
  return i < t->count && t->n[i] == strlen(s) && memcmp(t->p[i], s, t->n[i]) == 0;
}

static bool parse_u64(const char *p, size_t n, uint64_t *v) {
  if (n == 0 || n > 20 || (n > 1 && p[0] == '0')) return false;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return false;
    unsigned d = (unsigned)(p[i] - '0');
    if (x > (UINT64_MAX - d) / 10) return false;
    x = x * 10 + d;
  }
  *v = x;
  return true;
}

static bool parse_hex64(const char *p, size_t n, uint64_t *v) {
  if (n != 16) return false;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    unsigned d;
    if (c >= '0' && c <= '9')
      d = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = (unsigned)(c - 'a' + 10);
    else
      return false;
    x = x << 4 | d;
  }
  *v = x;
  return true;
}

/* "key <u64>" */
static int kv_u64(lp *l, const char *key, uint64_t max, uint64_t *v) {
  toks t;
  int rc = next_line(l, &t, key);
  if (rc < 0) return rc;
  if (!tok_is(&t, 0, key)) return perr(l, key, "expected \"%s <n>\"", key);
  if (t.count != 2 || !parse_u64(t.p[1], t.n[1], v) || *v > max)
    return perr(l, key, "expected one decimal integer ≤ %" PRIu64, max);
  return 0;
}

static int kv_word(lp *l, const char *key, toks *t) {
  int rc = next_line(l, t, key);
  if (rc < 0) return rc;
  if (!tok_is(t, 0, key)) return perr(l, key, "expected \"%s <value>\"", key);
  if (t->count != 2) return perr(l, key, "expected one value");
  return 0;
}

static bool parse_time(const char *p, size_t n, int64_t *out) {
  char b[32];
  if (n != 20) return false;
  memcpy(b, p, n);
  b[n] = 0;
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  const char *e = strptime(b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (!e || *e) return false;
  time_t t = timegm(&tm);
  char back[32];
  fmt_time(back, sizeof back, (int64_t)t);
  if (strcmp(back, b) != 0) return false; /* e.g. "2026-02-31" normalised away */
  *out = (int64_t)t;
  return true;
}

static int parse_tensor(lp *l, const toks *t, ea_ckpt_manifest *m, uint32_t idx) {
  if (!tok_is(t, 0, "tensor") || t->count != 6)
    return perr(l, "tensor", "expected \"tensor <name> <dtype> <shape> <offset> <length>\"");
  ea_ckpt_tensor *x = &m->tensors[idx];
  memset(x, 0, sizeof *x);
  if (!good_tensor_name(t->p[1], t->n[1]))
    return perr(l, "tensor name", "not a printable word < 128 bytes");
  memcpy(x->name, t->p[1], t->n[1]);
  if (!good_dtype(t->p[2], t->n[2])) return perr(l, "tensor dtype", "expected [a-z0-9_]{1,15}");
  memcpy(x->dtype, t->p[2], t->n[2]);
  const char *s = t->p[3], *se = s + t->n[3];
  if (!(t->n[3] == 1 && *s == '-')) {
    while (s < se) {
      const char *d = s;
      while (d < se && *d != 'x') d++;
      if (x->ndim == EA_CKPT_MAX_DIMS)
        return perr(l, "tensor shape", "more than %d dimensions", EA_CKPT_MAX_DIMS);
      if (!parse_u64(s, (size_t)(d - s), &x->shape[x->ndim]))
        return perr(l, "tensor shape", "expected \"-\" or dimensions like 24x256");
      x->ndim++;
      if (d == se) break;
      s = d + 1;
      if (s == se) return perr(l, "tensor shape", "trailing 'x'");
    }
  }
  if (!parse_u64(t->p[4], t->n[4], &x->offset) || x->offset > m->total_bytes)
    return perr(l, "tensor offset", "not an integer inside total_bytes");
  if (!parse_u64(t->p[5], t->n[5], &x->length) || x->length > m->total_bytes - x->offset)
    return perr(l, "tensor length", "not an integer, or the tensor ends past total_bytes");
  return 0;
}

static int parse_shard(lp *l, const toks *t, ea_ckpt_manifest *m, uint32_t r, uint64_t *at) {
  if (!tok_is(t, 0, "shard") || t->count < 8)
    return perr(l, "shard",
                "expected \"shard <rank> <file> <offset> <length> <xxh3> <block_size> "
                "<n_blocks> <block xxh3>...\"");
  ea_ckpt_shard *s = &m->shards[r];
  uint64_t v;
  if (!parse_u64(t->p[1], t->n[1], &v) || v != r) return perr(l, "shard rank", "expected %u", r);
  s->rank = r;
  ea_ckpt_shard_name(s->file, sizeof s->file, r, m->world_size);
  if (t->n[2] != strlen(s->file) || memcmp(t->p[2], s->file, t->n[2]) != 0)
    return perr(l, "shard file", "expected %s", s->file);
  if (!parse_u64(t->p[3], t->n[3], &s->offset) || s->offset != *at)
    return perr(l, "shard offset", "expected %" PRIu64 " (shards tile the state in rank order)",
                *at);
  if (!parse_u64(t->p[4], t->n[4], &s->length) || s->length > m->total_bytes - *at)
    return perr(l, "shard length", "not an integer, or past total_bytes");
  if (!parse_hex64(t->p[5], t->n[5], &s->hash))
    return perr(l, "shard hash", "expected 16 hex digits");
  uint64_t bs, nb;
  if (!parse_u64(t->p[6], t->n[6], &bs) || bs < 4096 || (bs & (bs - 1)) || bs > (1ull << 62))
    return perr(l, "shard block_size", "expected a power of two ≥ 4096");
  if (!parse_u64(t->p[7], t->n[7], &nb) || nb > EA_CKPT_MAX_BLOCKS ||
      nb != (s->length + bs - 1) / bs)
    return perr(l, "shard n_blocks", "expected ceil(length / block_size) ≤ %d", EA_CKPT_MAX_BLOCKS);
  if (t->count != 8 + nb) return perr(l, "shard block hashes", "expected %" PRIu64, nb);
  s->block_size = bs;
  s->n_blocks = (uint32_t)nb;
  for (uint32_t k = 0; k < nb; k++)
    if (!parse_hex64(t->p[8 + k], t->n[8 + k], &s->block_hash[k]))
      return perr(l, "shard block hash", "block %u: expected 16 hex digits", k);
  s->set = true;
  *at += s->length;
  return 0;
}

int ea_ckpt_manifest_parse(const char *pos, const char *end, ea_ckpt_manifest *m, char *err,
                           size_t errlen) {
  memset(m, 0, sizeof *m);
  if (!pos || end < pos) return -EINVAL;
  if ((size_t)(end - pos) > EA_CKPT_MANIFEST_MAX) {
    ea_seterr(err, errlen, "manifest larger than %u bytes", EA_CKPT_MANIFEST_MAX);
    return -EBADMSG;
  }
  lp l = {.pos = pos, .end = end, .err = err, .errlen = errlen};
  toks t;
  uint64_t v;
  int rc;
  if ((rc = kv_u64(&l, "format", UINT32_MAX, &v)) < 0) goto bad;
  if (v != EA_CKPT_FORMAT_VERSION) {
    rc = perr(&l, "format", "version %" PRIu64 " not supported (this agent reads %d)", v,
              EA_CKPT_FORMAT_VERSION);
    goto bad;
  }
  m->format_version = (uint32_t)v;
  if ((rc = kv_u64(&l, "step", UINT64_MAX, &m->step)) < 0) goto bad;
  if ((rc = kv_u64(&l, "generation", UINT64_MAX, &m->generation)) < 0) goto bad;
  if ((rc = kv_u64(&l, "world_size", EA_CKPT_MAX_WORLD, &v)) < 0) goto bad;
  if (v == 0) {
    rc = perr(&l, "world_size", "must be ≥ 1");
    goto bad;
  }
  m->world_size = (uint32_t)v;
  if ((rc = kv_u64(&l, "total_bytes", UINT64_MAX, &m->total_bytes)) < 0) goto bad;
  if ((rc = kv_word(&l, "config_hash", &t)) < 0) goto bad;
  if (!parse_hex64(t.p[1], t.n[1], &m->config_hash)) {
    rc = perr(&l, "config_hash", "expected 16 hex digits");
    goto bad;
  }
  if ((rc = kv_word(&l, "agent_version", &t)) < 0) goto bad;
  if (!good_version(t.p[1], t.n[1])) {
    rc = perr(&l, "agent_version", "not a printable word < 32 bytes");
    goto bad;
  }
  memcpy(m->agent_version, t.p[1], t.n[1]);
  if ((rc = kv_word(&l, "created", &t)) < 0) goto bad;
  if (!parse_time(t.p[1], t.n[1], &m->created)) {
    rc = perr(&l, "created", "expected YYYY-MM-DDTHH:MM:SSZ");
    goto bad;
  }
  if ((rc = kv_word(&l, "hash", &t)) < 0) goto bad;
  if (!tok_is(&t, 1, "xxh3-64")) {
    rc = perr(&l, "hash", "only xxh3-64 is supported");
    goto bad;
  }
  /* a tensor line is at least 17 bytes ("tensor a b - 0 0\n") */
  uint64_t left = (uint64_t)(l.end - l.pos);
  if ((rc = kv_u64(&l, "tensors", EA_CKPT_MAX_TENSORS, &v)) < 0) goto bad;
  if (v > left / 17) {
    rc = perr(&l, "tensors", "%" PRIu64 " tensors cannot fit in the rest of the file", v);
    goto bad;
  }
  m->n_tensors = m->cap_tensors = (uint32_t)v;
  if (v && !(m->tensors = calloc(v, sizeof *m->tensors))) {
    rc = -ENOMEM;
    goto bad;
  }
  for (uint32_t i = 0; i < m->n_tensors; i++) {
    if ((rc = next_line(&l, &t, "tensor")) < 0 || (rc = parse_tensor(&l, &t, m, i)) < 0) goto bad;
  }
  if ((rc = kv_u64(&l, "shards", EA_CKPT_MAX_WORLD, &v)) < 0) goto bad;
  /* a shard line is at least 60 bytes */
  if (v != m->world_size || v > (uint64_t)(l.end - l.pos) / 60) {
    rc = perr(&l, "shards", "expected world_size (%u) shard lines", m->world_size);
    goto bad;
  }
  if (!(m->shards = calloc(m->world_size, sizeof *m->shards))) {
    rc = -ENOMEM;
    goto bad;
  }
  uint64_t at = 0;
  for (uint32_t r = 0; r < m->world_size; r++) {
    if ((rc = next_line(&l, &t, "shard")) < 0 || (rc = parse_shard(&l, &t, m, r, &at)) < 0)
      goto bad;
  }
  if (at != m->total_bytes) {
    rc = perr(&l, "shards", "cover %" PRIu64 " of total_bytes %" PRIu64, at, m->total_bytes);
    goto bad;
  }
  if ((rc = kv_word(&l, "end", &t)) < 0) goto bad;
  uint64_t sum;
  if (!parse_hex64(t.p[1], t.n[1], &sum)) {
    rc = perr(&l, "end", "expected 16 hex digits");
    goto bad;
  }
  uint64_t got = XXH3_64bits_dispatch(pos, (size_t)(l.start - pos));
  if (got != sum) {
    rc = perr(&l, "end",
              "checksum %016" PRIx64 " does not match the content (%016" PRIx64
              "): the manifest is damaged",
              sum, got);
    goto bad;
  }
  if (l.pos != l.end) {
    l.line++;
    rc = perr(&l, "end", "bytes after the end line");
    goto bad;
  }
  return 0;
bad:
  ea_ckpt_manifest_close(m);
  return rc;
}

int ea_ckpt_manifest_load(const char *ckpt_path, ea_ckpt_manifest *m, char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  char path[EA_CKPT_PATH_MAX];
  int rc = ea__ck_manifest_path(path, sizeof path, ckpt_path, false);
  if (rc < 0) {
    ea_seterr(err, errlen, "%s/MANIFEST: path too long", ckpt_path);
    return rc;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    rc = -errno;
    ea_seterr(err, errlen, "open %s: %s", path, ea__ck_strerror(rc));
    return rc;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    rc = -errno;
    close(fd);
    ea_seterr(err, errlen, "stat %s: %s", path, ea__ck_strerror(rc));
    return rc;
  }
  if ((uint64_t)st.st_size > EA_CKPT_MANIFEST_MAX) {
    close(fd);
    ea_seterr(err, errlen, "%s: larger than %u bytes", path, EA_CKPT_MANIFEST_MAX);
    return -EBADMSG;
  }
  size_t n = (size_t)st.st_size, got = 0;
  char *buf = malloc(n ? n : 1);
  if (!buf) {
    close(fd);
    return -ENOMEM;
  }
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  char perrbuf[512] = "";
  rc = ea_ckpt_manifest_parse(buf, buf + got, m, perrbuf, sizeof perrbuf);
  free(buf);
  if (rc < 0) ea_seterr(err, errlen, "%s: %s", path, perrbuf);
  return rc;
}

/* ---- commit ------------------------------------------------------------- */

/* Every shard file present with its recorded length (their data was made
 * durable by the writers; this catches a controller that commits before
 * all shards reported). */
static int check_shards(const char *ckpt, const ea_ckpt_manifest *m, char *err, size_t errlen) {
  for (uint32_t r = 0; r < m->world_size; r++) {
    char p[EA_CKPT_PATH_MAX];
    int rc = ea__ck_join(p, sizeof p, ckpt, m->shards[r].file);
    if (rc < 0) return rc;
    struct stat st;
    if (stat(p, &st) != 0) {
      rc = -errno;
      ea_seterr(err, errlen, "commit: stat %s: %s", p, ea__ck_strerror(rc));
      return rc;
    }
    if ((uint64_t)st.st_size != m->shards[r].length) {
      ea_seterr(err, errlen, "commit: %s has %lld bytes, the manifest says %" PRIu64, p,
                (long long)st.st_size, m->shards[r].length);
      return -EBADMSG;
    }
  }
  return 0;
}

/* Under the lock: the newest generation among complete checkpoints, and
 * whether LATEST names one of them.
 *
 * Only a checkpoint that exists and whose MANIFEST verifies (parses, its
 * own digest checks out, and it is for the directory it sits in) fences.
 * LATEST is a witness, not an authority: a LATEST naming a directory that
 * does not exist, or one without a valid MANIFEST, once fenced every later
 * commit forever (issue 11: "step-1.gen-281474976710655", written by anyone
 * who can write the directory, or left by a damaged manifest).  Such a
 * LATEST is not trusted here, and the commit replaces it. */
static int newest_generation(const char *dir, uint64_t *gen, char *name, size_t cap,
                             bool *latest_ok) {
  ea_ckpt_entry *e = NULL;
  size_t n = 0;
  *latest_ok = false;
  int rc = ea_ckpt_list(dir, &e, &n);
  if (rc < 0) return rc;
  bool any = false;
  for (size_t i = 0; i < n; i++) {
    if (!e[i].complete) continue;
    if (e[i].latest) *latest_ok = true;
    if (!any || e[i].generation > *gen) {
      *gen = e[i].generation;
      snprintf(name, cap, "%s", e[i].name);
      any = true;
    }
  }
  free(e);
  return any ? 1 : 0;
}

/* The order inside the lock is the point of this function.
 *
 * Lock first, then the fence, then everything else.  Nothing that depends
 * on the directory's state is looked at before the lock is held and the
 * fence applied: a stale controller (an old generation's, resumed after
 * SIGSTOP) is refused as stale, with both generations named, even when its
 * shards are long gone — the new controller's retention removes the
 * leftovers of an abandoned step — rather than with a misleading "No such
 * file" from the shard check.
 *
 * The lock wait is bounded (ea__ck_lock_dir, EA_CKPT_LOCK_TIMEOUT_MS).  A
 * commit that does not get the lock returns -ETIMEDOUT having written
 * nothing: only memory (validation, the text) is touched before the lock.
 *
 * A holder frozen inside this function (SIGSTOP, a hung client) may finish
 * when it wakes, and that is safe.  It took the lock, then passed the fence: no complete
 * checkpoint of a newer generation existed.  While it holds the lock no one
 * else can commit (or retain): every other commit times out and writes
 * nothing.  So when it wakes, the directory still holds no newer generation
 * and its fence decision is still true; it completes a commit that is
 * ordered, in lock order, before every commit of the newer generation, which
 * is exactly what the fence allows for a stale controller that committed
 * before it was replaced.  If the newer generation then commits a lower
 * step, the woken one's checkpoint is superseded (never resumed from,
 * deleted first) and LATEST moves to the newer generation, as for any
 * commit that beat its successor.  Its shards cannot vanish meanwhile
 * either: they were checked under the lock, and retention needs the lock.
 * A caller frozen *before* it got the lock has passed no fence: when it
 * wakes it tries once more, and if it gets the lock it is fenced then.  (A
 * network file system that revokes a hung client's lock breaks the premise;
 * docs/checkpoints.md says what still holds then.) */
int ea_ckpt_commit(const char *dir, const ea_ckpt_manifest *m, bool *latest_moved, char *err,
                   size_t errlen) {
  if (latest_moved) *latest_moved = false;
  char name[EA_CKPT_NAME_MAX], ckpt[EA_CKPT_PATH_MAX], tmp[EA_CKPT_PATH_MAX], fin[EA_CKPT_PATH_MAX];
  char verr[256];
  int rc = ea_ckpt_manifest_validate(m, verr, sizeof verr);
  if (rc < 0) {
    ea_seterr(err, errlen, "commit: invalid manifest: %s", verr);
    return rc;
  }
  if ((rc = ea_ckpt_dir_name(name, sizeof name, m->step, m->generation)) < 0 ||
      (rc = ea__ck_join(ckpt, sizeof ckpt, dir, name)) < 0 ||
      (rc = ea__ck_manifest_path(tmp, sizeof tmp, ckpt, true)) < 0 ||
      (rc = ea__ck_manifest_path(fin, sizeof fin, ckpt, false)) < 0) {
    ea_seterr(err, errlen, "commit %s: path too long", dir);
    return rc;
  }
  char *text;
  size_t len;
  if ((rc = ea_ckpt_manifest_format(m, &text, &len, verr, sizeof verr)) < 0) {
    ea_seterr(err, errlen, "commit %s: %s", ckpt, rc == -ENOMEM ? "out of memory" : verr);
    return rc;
  }
  char lerr[EA_CKPT_PATH_MAX + 600];
  int lk = ea__ck_lock_dir(dir, lerr, sizeof lerr);
  if (lk < 0) {
    ea_seterr(err, errlen, "commit %s: nothing written: %s", name, lerr);
    free(text);
    return lk;
  }

  uint64_t newest = 0;
  char newest_name[EA_CKPT_NAME_MAX] = "";
  bool latest_ok = false;
  rc = newest_generation(dir, &newest, newest_name, sizeof newest_name, &latest_ok);
  if (rc < 0) {
    ea_seterr(err, errlen, "commit: list %s: %s", dir, ea__ck_strerror(rc));
    goto out;
  }
  if (rc == 1 && m->generation < newest) {
    ea_seterr(err, errlen,
              "commit %s refused: generation %" PRIu64 " is older than generation %" PRIu64
              " already committed (%s)",
              name, m->generation, newest, newest_name);
    rc = -ESTALE;
    goto out;
  }
  if ((rc = check_shards(ckpt, m, err, errlen)) < 0) goto out;
  /* the shard entries must be durable before a MANIFEST can name them */
  if ((rc = ea__fs_fsync_dir(ckpt, err, errlen)) < 0) goto out;
  if ((rc = ea__fs_write_file(tmp, text, len, err, errlen)) < 0) {
    ea__fs_unlink(tmp); /* e.g. ENOSPC: give the space back (no-op after a crash) */
    goto out;
  }
  if ((rc = ea__fs_rename(tmp, fin, RENAME_NOREPLACE)) < 0) {
    ea_seterr(err, errlen, "rename %s -> MANIFEST: %s", tmp, ea__ck_strerror(rc));
    ea__fs_unlink(tmp);
    goto out;
  }
  if ((rc = ea__fs_fsync_dir(ckpt, err, errlen)) < 0) goto out;

  /* LATEST only moves forward in (generation, step), from a checkpoint
   * that exists: one that names no complete checkpoint is replaced */
  char cur[EA_CKPT_NAME_MAX];
  uint64_t cs, cg;
  int lr = ea_ckpt_read_latest(dir, cur, sizeof cur);
  bool move = !latest_ok || lr < 0 || ea_ckpt_parse_dir_name(cur, &cs, &cg) < 0 ||
              m->generation > cg || (m->generation == cg && m->step > cs);
  if (move) {
    char ltmp[EA_CKPT_PATH_MAX], lfin[EA_CKPT_PATH_MAX], line[EA_CKPT_NAME_MAX + 2];
    if ((rc = ea__ck_latest_path(ltmp, sizeof ltmp, dir, true)) < 0 ||
        (rc = ea__ck_latest_path(lfin, sizeof lfin, dir, false)) < 0) {
      ea_seterr(err, errlen, "commit %s: path too long", dir);
      goto out;
    }
    int ll = ea__ck_latest_line(line, sizeof line, name); /* name fits: it was built above */
    if ((rc = ea__fs_write_file(ltmp, line, (size_t)ll, err, errlen)) < 0) {
      ea__fs_unlink(ltmp);
      goto out;
    }
    if ((rc = ea__fs_rename(ltmp, lfin, 0)) < 0) {
      ea_seterr(err, errlen, "rename %s -> LATEST: %s", ltmp, ea__ck_strerror(rc));
      ea__fs_unlink(ltmp);
      goto out;
    }
    if ((rc = ea__fs_fsync_dir(dir, err, errlen)) < 0) goto out;
    if (latest_moved) *latest_moved = true;
  }
  rc = 0;
out:
  close(lk);
  free(text);
  return rc;
}
