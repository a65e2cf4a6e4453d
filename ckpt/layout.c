/* layout.c — where everything of a checkpoint directory lives and what it
 * is called: the one place that knows the names.
 *
 *   DIR/.lock  DIR/LATEST  DIR/LATEST.tmp
 *   DIR/step-<s>.gen-<g>/shard-<r>-of-<W>.bin  …/MANIFEST  …/MANIFEST.tmp
 *
 * (ea_ckpt.h draws the tree and says what each file means.)  Every other
 * file of ckpt/ builds these paths and parses these names through the
 * functions here, so a change of the layout is a change of this file.
 *
 * Names are canonical: decimal without leading zeros or a sign, nothing
 * after the last field, so one checkpoint has exactly one name and a
 * directory listing can be parsed without guessing ("step-07.gen-1" is not a
 * checkpoint, and neither is "step-7.gen-1.old").  Which byte range of the
 * state each shard holds is part of the layout too (ea_ckpt_shard_range):
 * the file names say rank and world, the range follows from them. */
#include "ckpt_int.h"

#include "ea_ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- paths -------------------------------------------------------------- */

int ea__ck_join(char *out, size_t cap, const char *dir, const char *name) {
  size_t dl = strlen(dir);
  while (dl > 1 && dir[dl - 1] == '/') dl--;
  int n = snprintf(out, cap, "%.*s/%s", (int)dl, dir, name);
  if (n < 0 || (size_t)n >= cap) return -ENAMETOOLONG;
  return 0;
}

int ea__ck_parent(char *out, size_t cap, const char *path) {
  if (snprintf(out, cap, "%s", path) >= (int)cap) return -ENAMETOOLONG;
  size_t l = strlen(out);
  while (l > 1 && out[l - 1] == '/') out[--l] = 0;
  char *s = strrchr(out, '/');
  if (!s)
    snprintf(out, cap, ".");
  else if (s == out)
    out[1] = 0;
  else
    *s = 0;
  return 0;
}

int ea__ck_step_path(char *out, size_t cap, const char *dir, uint64_t step, uint64_t generation) {
  char name[EA_CKPT_NAME_MAX];
  int rc = ea_ckpt_dir_name(name, sizeof name, step, generation);
  return rc < 0 ? rc : ea__ck_join(out, cap, dir, name);
}

int ea__ck_manifest_path(char *out, size_t cap, const char *ckpt_path, bool tmp) {
  return ea__ck_join(out, cap, ckpt_path, tmp ? EA__CK_MANIFEST_TMP : EA__CK_MANIFEST);
}

int ea__ck_latest_path(char *out, size_t cap, const char *dir, bool tmp) {
  return ea__ck_join(out, cap, dir, tmp ? EA__CK_LATEST_TMP : EA__CK_LATEST);
}

int ea__ck_lock_path(char *out, size_t cap, const char *dir) {
  return ea__ck_join(out, cap, dir, EA__CK_LOCK);
}

/* ---- names -------------------------------------------------------------- */

int ea_ckpt_dir_name(char *out, size_t cap, uint64_t step, uint64_t generation) {
  int n = snprintf(out, cap, "step-%" PRIu64 ".gen-%" PRIu64, step, generation);
  return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* One canonical decimal at *p (no leading zero unless it is "0", no
 * overflow); advances *p past it. */
static bool dec(const char **p, uint64_t *v) {
  const char *s = *p;
  if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9')) return false;
  uint64_t x = 0;
  while (*s >= '0' && *s <= '9') {
    unsigned d = (unsigned)(*s - '0');
    if (x > (UINT64_MAX - d) / 10) return false;
    x = x * 10 + d;
    s++;
  }
  *v = x;
  *p = s;
  return true;
}

int ea__ck_parse_u64(const char *s, uint64_t *v) {
  const char *p = s;
  return s && dec(&p, v) && !*p ? 0 : -EINVAL;
}

int ea_ckpt_parse_dir_name(const char *name, uint64_t *step, uint64_t *generation) {
  uint64_t s, g;
  if (!name || strncmp(name, "step-", 5) != 0) return -EINVAL;
  const char *p = name + 5;
  if (!dec(&p, &s) || strncmp(p, ".gen-", 5) != 0) return -EINVAL;
  p += 5;
  if (!dec(&p, &g) || *p) return -EINVAL;
  *step = s;
  *generation = g;
  return 0;
}

int ea_ckpt_shard_name(char *out, size_t cap, uint32_t rank, uint32_t world) {
  int n = snprintf(out, cap, "shard-%u-of-%u.bin", rank, world);
  return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int ea_ckpt_shard_path(char *out, size_t cap, const char *dir, uint64_t step, uint64_t generation,
                       uint32_t rank, uint32_t world) {
  char shard[EA_CKPT_NAME_MAX], ck[EA_CKPT_PATH_MAX];
  int rc;
  if ((rc = ea_ckpt_shard_name(shard, sizeof shard, rank, world)) < 0 ||
      (rc = ea__ck_step_path(ck, sizeof ck, dir, step, generation)) < 0)
    return rc;
  return ea__ck_join(out, cap, ck, shard);
}

void ea_ckpt_shard_range(uint64_t total, uint32_t world, uint32_t rank, uint64_t *offset,
                         uint64_t *length) {
  if (world == 0 || rank >= world) {
    *offset = total;
    *length = 0;
    return;
  }
  /* ⌊r·T/W⌋ without overflowing r·T: T = q·W + m */
  uint64_t q = total / world, m = total % world;
  uint64_t lo = q * rank + m * rank / world;
  uint64_t hi = q * (rank + 1) + m * (rank + 1) / world;
  *offset = lo;
  *length = hi - lo;
}

/* ---- LATEST ------------------------------------------------------------- */

int ea__ck_latest_line(char *out, size_t cap, const char *name) {
  int n = snprintf(out, cap, "%s\n", name);
  return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : n;
}

int ea_ckpt_read_latest(const char *dir, char *name, size_t cap) {
  char p[EA_CKPT_PATH_MAX], buf[EA_CKPT_NAME_MAX + 2];
  int rc = ea__ck_latest_path(p, sizeof p, dir, false);
  if (rc < 0) return rc;
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n < 0) return -EIO;
  buf[n] = 0;
  if (n > 0 && buf[n - 1] == '\n') buf[--n] = 0;
  uint64_t s, g;
  if (ea_ckpt_parse_dir_name(buf, &s, &g) < 0) return -EBADMSG;
  if ((size_t)n >= cap) return -ENAMETOOLONG;
  memcpy(name, buf, (size_t)n + 1);
  return 0;
}
