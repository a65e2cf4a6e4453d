/* The data directory and what identifies an agent across restarts: the
 * 128-bit node id, the lock that keeps two agents off one directory, and
 * the remembered-peers file used to rejoin without seeds.
 *
 * The node id is random (getrandom), not derived from the host name or an
 * address: a replacement machine with the same name must not inherit the
 * old one's incarnation history, and ids are also the election order, where
 * randomness spreads the controller role fairly.  It is written, fsynced and
 * renamed into place *before* the agent gossips with it, so a crash at any
 * point leaves either no id or the id that was advertised — never a second
 * identity for the same directory.
 *
 * Everything here blocks and is called before the loop starts, except
 * ea__write_file_atomic, which the agent runs on the libuv thread pool.
 */
#include "agent_int.h"
#include "ea_base.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sodium.h>
#include <time.h>
#include <unistd.h>

/* The peers file lists at most a few dozen lines of ~80 bytes; anything
 * larger than this is not ours. */
#define PEERS_FILE_MAX (1u << 20)

int ea__data_dir_prepare(const char *dir, char *err, size_t errlen) {
  char path[EA_PATH_MAX];
  if (!dir || !*dir || strlen(dir) >= sizeof path) {
    snprintf(err, errlen, "--data-dir: empty or too long");
    return -EINVAL;
  }
  snprintf(path, sizeof path, "%s", dir);
  /* Parents as mkdir -p would make them; the directory itself 0700: it
   * holds the admin socket and the node identity. */
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(path, 0755) < 0 && errno != EEXIST) {
      int e = errno;
      snprintf(err, errlen, "cannot create %s: %s", path, strerror(e));
      return -e;
    }
    *p = '/';
  }
  if (mkdir(path, 0700) < 0 && errno != EEXIST) {
    int e = errno;
    snprintf(err, errlen, "cannot create data dir %s: %s", path, strerror(e));
    return -e;
  }
  struct stat st;
  if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "data dir %s is not a directory", path);
    return -ENOTDIR;
  }
  return 0;
}

int ea__data_dir_lock(const char *dir, int *fd, char *err, size_t errlen) {
  char path[EA_PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/%s", dir, EA__LOCK_FILE);
  int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (f < 0) {
    int e = errno;
    snprintf(err, errlen, "cannot open %s: %s", path, strerror(e));
    return -e;
  }
  if (flock(f, LOCK_EX | LOCK_NB) < 0) {
    int e = errno;
    char pid[32] = "";
    ssize_t r = pread(f, pid, sizeof pid - 1, 0);
    if (r > 0) pid[r] = 0, pid[strcspn(pid, "\n")] = 0;
    close(f);
    snprintf(err, errlen, "data dir %s is in use by another agent%s%s%s", dir,
             pid[0] ? " (pid " : "", pid, pid[0] ? ")" : "");
    return e == EWOULDBLOCK ? -EBUSY : -e;
  }
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
  if (ftruncate(f, 0) == 0 && pwrite(f, buf, (size_t)n, 0) != n) {
    /* The pid is only a hint for the error message above. */
  }
  *fd = f;
  return 0;
}

static int fsync_dir_of(const char *path) {
  char copy[EA_PATH_MAX + 16];
  snprintf(copy, sizeof copy, "%s", path);
  int d = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) return -errno;
  int rc = fsync(d) < 0 ? -errno : 0;
  close(d);
  return rc;
}

int ea__write_file_atomic(const char *path, const void *data, size_t len, int mode) {
  char tmp[EA_PATH_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return -errno;
  const char *p = data;
  size_t left = len;
  int rc = 0;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      rc = -errno;
      break;
    }
    p += w, left -= (size_t)w;
  }
  if (rc == 0 && fsync(fd) < 0) rc = -errno;
  if (close(fd) < 0 && rc == 0) rc = -errno;
  if (rc == 0 && rename(tmp, path) < 0) rc = -errno;
  if (rc < 0) {
    unlink(tmp);
    return rc;
  }
  return fsync_dir_of(path);
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int ea__node_id_load(const char *dir, ea_node_id *id, bool *created, char *err, size_t errlen) {
  char path[EA_PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/%s", dir, EA__NODE_ID_FILE);
  *created = false;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char buf[80];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 0) {
      int e = errno;
      snprintf(err, errlen, "cannot read %s: %s", path, strerror(e));
      return -e;
    }
    buf[n] = 0;
    size_t len = strcspn(buf, " \t\r\n");
    bool ok = len == 32;
    for (size_t i = 0; ok && i < 16; i++) {
      int hi = hexval(buf[2 * i]), lo = hexval(buf[2 * i + 1]);
      if (hi < 0 || lo < 0)
        ok = false;
      else
        id->b[i] = (uint8_t)(hi << 4 | lo);
    }
    if (!ok) {
      /* Never overwrite an identity we cannot read: the operator decides. */
      snprintf(err, errlen, "%s: expected 32 hex characters; fix or remove the file", path);
      return -EINVAL;
    }
    return 0;
  }
  if (errno != ENOENT) {
    int e = errno;
    snprintf(err, errlen, "cannot open %s: %s", path, strerror(e));
    return -e;
  }
  size_t got = 0;
  while (got < sizeof id->b) {
    ssize_t r = getrandom(id->b + got, sizeof id->b - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      snprintf(err, errlen, "getrandom: %s", strerror(e));
      return -e;
    }
    got += (size_t)r;
  }
  char hex[34];
  ea_node_id_hex(id, hex);
  hex[32] = '\n';
  hex[33] = 0;
  int rc = ea__write_file_atomic(path, hex, 33, 0600);
  if (rc < 0) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(-rc));
    return rc;
  }
  *created = true;
  return 0;
}

int ea__boot_epoch_next(const char *dir, uint64_t *epoch, char *err, size_t errlen) {
  char path[EA_PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/%s", dir, EA__BOOT_FILE);
  uint64_t prev = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char buf[40];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 0) {
      int e = errno;
      snprintf(err, errlen, "cannot read %s: %s", path, strerror(e));
      return -e;
    }
    buf[n] = 0;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || end == buf || (*end && *end != '\n') || v >= UINT64_MAX - 1) {
      snprintf(err, errlen,
               "%s: expected one decimal number (the last boot epoch); remove the file to "
               "start over",
               path);
      return -EINVAL;
    }
    prev = v;
  } else if (errno != ENOENT) {
    int e = errno;
    snprintf(err, errlen, "cannot open %s: %s", path, strerror(e));
    return -e;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t e = prev + 1;
  if ((uint64_t)ts.tv_sec > e) e = (uint64_t)ts.tv_sec;
  char out[32];
  int len = snprintf(out, sizeof out, "%llu\n", (unsigned long long)e);
  int rc = ea__write_file_atomic(path, out, (size_t)len, 0600);
  if (rc < 0) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(-rc));
    return rc;
  }
  *epoch = e;
  return 0;
}

void ea__ring_key(const uint8_t key[EA_KEY_BYTES], uint8_t ring_key[32]) {
  static const char label[] = "elastic-agent ring key v1";
  crypto_generichash(ring_key, 32, (const uint8_t *)label, sizeof label - 1, key, EA_KEY_BYTES);
}

void ea__ring_token(const uint8_t ring_key[32], uint64_t g64, uint8_t token[32]) {
  uint8_t in[24 + 8];
  memcpy(in, "elastic-agent ring hello", 24);
  for (int i = 0; i < 8; i++) in[24 + i] = (uint8_t)(g64 >> (8 * i));
  crypto_generichash(token, 32, in, sizeof in, ring_key, 32);
}

int ea__peers_load(const char *dir, ea_addr **out, size_t *n) {
  char path[EA_PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/%s", dir, EA__PEERS_FILE);
  *out = NULL;
  *n = 0;
  FILE *f = fopen(path, "re");
  if (!f) return errno == ENOENT ? 0 : -errno;
  size_t cap = 0, total = 0;
  char line[512];
  int rc = 0;
  while (fgets(line, sizeof line, f)) {
    total += strlen(line);
    if (total > PEERS_FILE_MAX) break;
    if (line[0] == '#') continue;
    line[strcspn(line, " \t\r\n")] = 0;
    ea_addr a;
    if (!line[0] || ea_addr_parse(line, 0, &a) < 0 || a.port == 0) continue;
    if ((rc = EA_ARRAY_RESERVE(*out, cap, *n + 1)) != 0) break;
    (*out)[(*n)++] = a;
  }
  fclose(f);
  if (rc < 0) {
    free(*out);
    *out = NULL;
    *n = 0;
  }
  return rc;
}
