/* Cluster identity files: DIR/CLUSTER in a checkpoint directory, and the
 * same text in an agent's <data-dir>/cluster-id.
 *
 * Why.  A checkpoint directory is shared storage, and nothing in a step
 * directory says which cluster wrote it: an agent of another cluster (a
 * different key, or a lone agent that could not join) pointed at the same
 * checkpoint.dir used to resume from the cluster's newest checkpoint,
 * number its generations above the cluster's, fence the real controller out
 * of every commit and delete the cluster's checkpoints by retention.  The
 * first cluster to commit into a directory therefore records its identity
 * there, and every resume, commit and retention checks it first
 * (ea_ckpt_cluster_check, ea_ckpt_cluster_claim).
 *
 * An identity is 16 random bytes plus a binding to the cluster key: a
 * 32-byte keyed hash of the id (or, without a key, an unkeyed one), made by
 * the caller (agent/ident.c).  Two identities are the same only when both
 * match, so a copied id under another key (or without a key) is foreign.
 *
 * The file is three lines of text, so an operator can read it:
 *
 *   elastic-agent cluster 1
 *   id 6f1c2a9b-0d4e-4c1a-9e2b-7a5d3c1f0e88
 *   bind keyed 3fa0…(64 hex)          ("bind none …" without a key)
 *
 * Written once, atomically: a temporary file of this process, fsync, then
 * renameat2(RENAME_NOREPLACE) — of two writers (two controllers of two
 * clusters racing for a fresh directory) exactly one wins, and the other
 * reads the winner's file and is refused.  A directory without the file
 * (written before identities existed) is claimed by the first cluster that
 * commits into it.
 */
#include "ckpt_int.h"

#include "ea_ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC_LINE "elastic-agent cluster 1"

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void ea_ckpt_cluster_id_str(const ea_ckpt_cluster *c, char *out) {
  static const char hx[] = "0123456789abcdef";
  size_t o = 0;
  for (int i = 0; i < EA_CKPT_CLUSTER_ID_BYTES; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
    out[o++] = hx[c->id[i] >> 4];
    out[o++] = hx[c->id[i] & 15];
  }
  out[o] = 0;
}

int ea_ckpt_cluster_id_parse(const char *s, size_t len, uint8_t id[EA_CKPT_CLUSTER_ID_BYTES]) {
  int k = 0, hi = -1;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '-') {
      if (hi >= 0) return -EINVAL;
      continue;
    }
    int v = hexval(s[i]);
    if (v < 0 || k >= EA_CKPT_CLUSTER_ID_BYTES) return -EINVAL;
    if (hi < 0) {
      hi = v;
    } else {
      id[k++] = (uint8_t)(hi << 4 | v);
      hi = -1;
    }
  }
  return k == EA_CKPT_CLUSTER_ID_BYTES && hi < 0 ? 0 : -EINVAL;
}

bool ea_ckpt_cluster_same(const ea_ckpt_cluster *a, const ea_ckpt_cluster *b) {
  return memcmp(a->id, b->id, sizeof a->id) == 0 && a->keyed == b->keyed &&
         memcmp(a->bind, b->bind, sizeof a->bind) == 0;
}

int ea_ckpt_cluster_format(const ea_ckpt_cluster *c, char *buf, size_t cap) {
  char id[EA_CKPT_CLUSTER_STR];
  char bind[2 * EA_CKPT_CLUSTER_BIND_BYTES + 1];
  ea_ckpt_cluster_id_str(c, id);
  for (int i = 0; i < EA_CKPT_CLUSTER_BIND_BYTES; i++)
    snprintf(bind + 2 * i, 3, "%02x", c->bind[i]);
  int n =
      snprintf(buf, cap, MAGIC_LINE "\nid %s\nbind %s %s\n", id, c->keyed ? "keyed" : "none", bind);
  return n < 0 || (size_t)n >= cap ? -ENOSPC : n;
}

int ea_ckpt_cluster_parse(const char *pos, const char *end, ea_ckpt_cluster *c, char *err,
                          size_t errlen) {
  memset(c, 0, sizeof *c);
  const char *lines[3];
  size_t lens[3];
  int n = 0;
  while (pos < end && n < 3) {
    const char *nl = memchr(pos, '\n', (size_t)(end - pos));
    if (!nl) break;
    lines[n] = pos;
    lens[n] = (size_t)(nl - pos);
    n++;
    pos = nl + 1;
  }
  if (n < 3 || pos != end) {
    ea_seterr(err, errlen, "want 3 lines (\"%s\", \"id …\", \"bind …\")", MAGIC_LINE);
    return -EBADMSG;
  }
  if (lens[0] != strlen(MAGIC_LINE) || memcmp(lines[0], MAGIC_LINE, lens[0]) != 0) {
    ea_seterr(err, errlen, "line 1: not \"%s\"", MAGIC_LINE);
    return -EBADMSG;
  }
  if (lens[1] < 3 || memcmp(lines[1], "id ", 3) != 0 ||
      ea_ckpt_cluster_id_parse(lines[1] + 3, lens[1] - 3, c->id) < 0) {
    ea_seterr(err, errlen, "line 2: id: want \"id\" and 32 hex digits");
    return -EBADMSG;
  }
  const char *b = lines[2];
  size_t bl = lens[2], skip;
  if (bl > 11 && memcmp(b, "bind keyed ", 11) == 0) {
    c->keyed = true;
    skip = 11;
  } else if (bl > 10 && memcmp(b, "bind none ", 10) == 0) {
    skip = 10;
  } else {
    ea_seterr(err, errlen, "line 3: bind: want \"bind keyed|none\" and 64 hex digits");
    return -EBADMSG;
  }
  if (bl - skip != 2 * EA_CKPT_CLUSTER_BIND_BYTES) {
    ea_seterr(err, errlen, "line 3: bind: want 64 hex digits");
    return -EBADMSG;
  }
  for (int i = 0; i < EA_CKPT_CLUSTER_BIND_BYTES; i++) {
    int h = hexval(b[skip + 2 * i]), l = hexval(b[skip + 2 * i + 1]);
    if (h < 0 || l < 0) {
      ea_seterr(err, errlen, "line 3: bind: not hex");
      return -EBADMSG;
    }
    c->bind[i] = (uint8_t)(h << 4 | l);
  }
  return 0;
}

int ea_ckpt_cluster_load(const char *path, ea_ckpt_cluster *c, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e != ENOENT) ea_seterr(err, errlen, "open %s: %s", path, ea__ck_strerror(e));
    return -e;
  }
  char buf[512];
  ssize_t n = read(fd, buf, sizeof buf);
  int e = errno;
  close(fd);
  if (n < 0) {
    ea_seterr(err, errlen, "read %s: %s", path, ea__ck_strerror(e));
    return -e;
  }
  if ((size_t)n == sizeof buf) {
    ea_seterr(err, errlen, "%s: not a cluster identity file (too long)", path);
    return -EBADMSG;
  }
  char why[160];
  int rc = ea_ckpt_cluster_parse(buf, buf + n, c, why, sizeof why);
  if (rc) ea_seterr(err, errlen, "%s: %s", path, why);
  return rc;
}

int ea_ckpt_cluster_write(const char *path, const ea_ckpt_cluster *c, bool noreplace, char *err,
                          size_t errlen) {
  char text[256], tmp[EA_CKPT_PATH_MAX + 32], parent[EA_CKPT_PATH_MAX];
  int len = ea_ckpt_cluster_format(c, text, sizeof text);
  if (len < 0) return len;
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp ||
      ea__ck_parent(parent, sizeof parent, path) < 0) {
    ea_seterr(err, errlen, "%s: path too long", path);
    return -ENAMETOOLONG;
  }
  int rc = ea__fs_write_file(tmp, text, (size_t)len, err, errlen);
  if (rc) {
    (void)ea__fs_unlink(tmp);
    return rc;
  }
  rc = ea__fs_rename(tmp, path, noreplace ? RENAME_NOREPLACE : 0);
  if (rc) {
    if (rc != -EEXIST)
      ea_seterr(err, errlen, "rename %s to %s: %s", tmp, path, ea__ck_strerror(rc));
    (void)ea__fs_unlink(tmp);
    return rc;
  }
  return ea__fs_fsync_dir(parent, err, errlen);
}

/* The refusal, naming the directory, both identities and what was refused. */
static void foreign_msg(const char *dir, const ea_ckpt_cluster *theirs, const ea_ckpt_cluster *self,
                        const char *op, char *err, size_t errlen) {
  char t[EA_CKPT_CLUSTER_STR], s[EA_CKPT_CLUSTER_STR];
  ea_ckpt_cluster_id_str(theirs, t);
  ea_ckpt_cluster_id_str(self, s);
  bool same_id = memcmp(theirs->id, self->id, sizeof self->id) == 0;
  ea_seterr(
      err, errlen,
      "refusing to %s checkpoint.dir %s: it belongs to cluster %s%s (%s/%s), not to "
      "this cluster %s%s; give each cluster its own checkpoint.dir",
      op, dir, t,
      same_id ? (theirs->keyed ? " under another cluster key" : " without a cluster key") : "", dir,
      EA_CKPT_CLUSTER_FILE, s, same_id && !self->keyed ? " (no cluster key)" : "");
}

int ea_ckpt_cluster_match(const char *dir, const ea_ckpt_cluster *theirs,
                          const ea_ckpt_cluster *self, const char *op, char *err, size_t errlen) {
  if (ea_ckpt_cluster_same(theirs, self)) return 0;
  foreign_msg(dir, theirs, self, op, err, errlen);
  return -EXDEV;
}

int ea_ckpt_cluster_check(const char *dir, const ea_ckpt_cluster *self, const char *op, char *err,
                          size_t errlen) {
  char path[EA_CKPT_PATH_MAX + 16], why[EA_CKPT_PATH_MAX + 200];
  if (ea__ck_join(path, sizeof path, dir, EA_CKPT_CLUSTER_FILE) < 0) return -ENAMETOOLONG;
  ea_ckpt_cluster theirs;
  int rc = ea_ckpt_cluster_load(path, &theirs, why, sizeof why);
  /* No file, or no directory at all (ENOTDIR: a path through a file): no
   * owner; whatever comes next fails on its own, with its own error. */
  if (rc == -ENOENT || rc == -ENOTDIR) return 1;
  if (rc) {
    ea_seterr(err, errlen,
              "refusing to %s checkpoint.dir %s: its cluster identity cannot be read (%s)", op, dir,
              why);
    return rc;
  }
  return ea_ckpt_cluster_match(dir, &theirs, self, op, err, errlen);
}

bool ea_ckpt_cluster_legacy(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return false;
  bool any = false;
  struct dirent *e;
  uint64_t s, g;
  char m[sizeof e->d_name + 16];
  while (!any && (e = readdir(d))) {
    if (ea_ckpt_parse_dir_name(e->d_name, &s, &g) != 0) continue;
    snprintf(m, sizeof m, "%s/MANIFEST", e->d_name);
    any = faccessat(dirfd(d), m, F_OK, 0) == 0;
  }
  closedir(d);
  return any;
}

int ea_ckpt_cluster_claim(const char *dir, const ea_ckpt_cluster *self, bool *claimed, char *err,
                          size_t errlen) {
  if (claimed) *claimed = false;
  int rc = ea_ckpt_cluster_check(dir, self, "commit into", err, errlen);
  if (rc <= 0) return rc;
  char path[EA_CKPT_PATH_MAX + 16];
  if (ea__ck_join(path, sizeof path, dir, EA_CKPT_CLUSTER_FILE) < 0) return -ENAMETOOLONG;
  rc = ea_ckpt_cluster_write(path, self, true, err, errlen);
  if (rc == -EEXIST) { /* another writer won the race: is it us? */
    rc = ea_ckpt_cluster_check(dir, self, "commit into", err, errlen);
    return rc == 1 ? -ENOENT : rc; /* (1: it vanished again: an operator's rm) */
  }
  if (rc) return rc;
  if (claimed) *claimed = true;
  return 0;
}
