/* ckpt_state.c — the tensor table of a library program's checkpoint.
 *
 * A program using python/elastic_agent stages its state in a
 * self-describing flat format ("ea-state-1", docs/pytorch.md,
 * "Checkpoints"): a 32-byte preamble ("EASTATE\0", u32 version 1, u32 0,
 * u64 H, u64 T), then up to byte H a table in the MANIFEST's own `tensor`
 * line syntax, then the tensors.  The controller knows nothing of the
 * program's model, so where the built-in trainer's table comes from its
 * dims, this one is read back from the shards just written: the commit job
 * (a worker thread, before ea_ckpt_commit) reads bytes [0, H) — a few KiB,
 * in shard 0 unless shards are tiny — and copies the table into the
 * manifest, so `ckpt show` lists the program's tensors.  Anything that
 * does not parse leaves the manifest as it was (one opaque `state u8`
 * tensor) and says why: a checkpoint must never fail for its table.
 *
 * Plain pread, not io_uring: a few KiB once per checkpoint, off the loop.
 */
#include "ckpt_svc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PREAMBLE 32u
/* The largest table read back: EA_CKPT_MAX_TENSORS lines would be ~200 MiB;
 * 64 MiB (≈ 300 000 tensors of long names) is far past any model's state
 * dict and bounds what a damaged H can make us allocate. */
#define TABLE_MAX (64u << 20)

static uint64_t rd64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* State bytes [off, off+len) from the shard files in ckpt_path. */
static int read_state(const char *ckpt_path, const ea_ckpt_manifest *m, uint64_t off, uint8_t *buf,
                      uint64_t len, char *why, size_t cap) {
  for (uint32_t r = 0; r < m->world_size && len > 0; r++) {
    const ea_ckpt_shard *s = &m->shards[r];
    if (off < s->offset || off >= s->offset + s->length) continue;
    uint64_t n = s->offset + s->length - off;
    if (n > len) n = len;
    char path[EA_CKPT_PATH_MAX + EA_CKPT_NAME_MAX + 2];
    snprintf(path, sizeof path, "%s/%s", ckpt_path, s->file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      snprintf(why, cap, "open %s: %s", path, strerror(errno));
      return -errno;
    }
    uint64_t done = 0;
    while (done < n) {
      ssize_t got = pread(fd, buf + done, n - done, (off_t)(off - s->offset + done));
      if (got <= 0) {
        int e = got < 0 ? errno : EIO;
        snprintf(why, cap, "read %s: %s", path, got < 0 ? strerror(e) : "short file");
        close(fd);
        return -e;
      }
      done += (uint64_t)got;
    }
    close(fd);
    buf += n, off += n, len -= n;
  }
  if (len) {
    snprintf(why, cap, "bytes from %" PRIu64 " are in no shard", off);
    return -EINVAL;
  }
  return 0;
}

/* One "tensor NAME DTYPE SHAPE OFFSET LENGTH" line into m. */
static int add_line(ea_ckpt_manifest *m, char *line, char *why, size_t cap) {
  char *save = NULL, *f[7];
  int n = 0;
  for (char *t = strtok_r(line, " ", &save); t && n < 7; t = strtok_r(NULL, " ", &save)) f[n++] = t;
  if (n != 6 || strcmp(f[0], "tensor") != 0) {
    snprintf(why, cap, "expected \"tensor NAME DTYPE SHAPE OFFSET LENGTH\"");
    return -EINVAL;
  }
  uint64_t shape[EA_CKPT_MAX_DIMS];
  uint32_t nd = 0;
  if (strcmp(f[3], "-") != 0) {
    for (char *p = f[3];;) {
      char *e;
      if (nd == EA_CKPT_MAX_DIMS || *p < '0' || *p > '9') goto bad;
      shape[nd++] = strtoull(p, &e, 10);
      if (*e == 0) break;
      if (*e != 'x') goto bad;
      p = e + 1;
    }
  }
  char *e1, *e2;
  uint64_t off = strtoull(f[4], &e1, 10), len = strtoull(f[5], &e2, 10);
  if (*e1 || *e2 || f[4][0] < '0' || f[4][0] > '9' || f[5][0] < '0' || f[5][0] > '9') goto bad;
  int rc = ea_ckpt_manifest_add_tensor(m, f[1], f[2], nd, shape, off, len);
  if (rc) snprintf(why, cap, "tensor %.100s: bad name, dtype, shape or range", f[1]);
  return rc;
bad:
  snprintf(why, cap, "tensor %.100s: bad shape, offset or length", f[1]);
  return -EINVAL;
}

int ea__ckpt_state_table(const char *ckpt_path, ea_ckpt_manifest *m, char *why, size_t cap) {
  uint8_t pre[PREAMBLE];
  if (m->total_bytes < PREAMBLE) {
    snprintf(why, cap, "state of %" PRIu64 " bytes", m->total_bytes);
    return -ENOENT;
  }
  int rc = read_state(ckpt_path, m, 0, pre, PREAMBLE, why, cap);
  if (rc) return rc;
  if (memcmp(pre, "EASTATE", 8) != 0) {
    snprintf(why, cap, "not an ea-state layout");
    return -ENOENT;
  }
  uint32_t version = rd32(pre + 8);
  uint64_t h = rd64(pre + 16), t = rd64(pre + 24);
  if (version != 1 || h % 64 || h < PREAMBLE || h > t || t != m->total_bytes || h > TABLE_MAX) {
    snprintf(why, cap,
             "ea-state preamble: version %u, header %" PRIu64 ", total %" PRIu64 " (state %" PRIu64
             " bytes)",
             version, h, t, m->total_bytes);
    return -EINVAL;
  }
  size_t n = (size_t)(h - PREAMBLE);
  char *tab = malloc(n + 1);
  if (!tab) return -ENOMEM;
  rc = read_state(ckpt_path, m, PREAMBLE, (uint8_t *)tab, n, why, cap);
  if (rc) {
    free(tab);
    return rc;
  }
  tab[n] = 0;               /* the NUL padding after "end\n" ends the text too */
  ea_ckpt_manifest tm = *m; /* parsed into a copy: m changes only on success */
  tm.n_tensors = tm.cap_tensors = 0;
  tm.tensors = NULL;
  char *save = NULL, *line = strtok_r(tab, "\n", &save);
  char *e = "";
  unsigned long long count =
      line && strncmp(line, "tensors ", 8) == 0 ? strtoull(line + 8, &e, 10) : ULLONG_MAX;
  if (count > EA_CKPT_MAX_TENSORS || (line && *e)) {
    snprintf(why, cap, "ea-state table: expected \"tensors N\"");
    rc = -EINVAL;
  }
  for (unsigned long long i = 0; rc == 0 && i < count; i++) {
    line = strtok_r(NULL, "\n", &save);
    if (!line) {
      snprintf(why, cap, "ea-state table: %llu of %llu tensor lines", i, count);
      rc = -EINVAL;
    } else {
      rc = add_line(&tm, line, why, cap);
    }
  }
  if (rc == 0 && (!(line = strtok_r(NULL, "\n", &save)) || strcmp(line, "end") != 0)) {
    snprintf(why, cap, "ea-state table: no \"end\" after %llu tensors", count);
    rc = -EINVAL;
  }
  free(tab);
  if (rc) {
    free(tm.tensors);
    return rc;
  }
  free(m->tensors);
  m->tensors = tm.tensors;
  m->n_tensors = tm.n_tensors;
  m->cap_tensors = tm.cap_tensors;
  snprintf(why, cap, "%u tensors from the ea-state-1 table (%" PRIu64 " header bytes)",
           m->n_tensors, h);
  return 0;
}
