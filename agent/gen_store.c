/* gen_store.c — <data-dir>/generation: the newest generation number this
 * node accepted or issued, kept across restarts.
 *
 * The rendezvous core promises that an agent never obeys a plan older than
 * one it acted on, and a controller never issues a number it issued before
 * (include/ea_rdzv.h).  Across a crash that promise is only as good as this
 * file: the core asks for a number to be made durable before it answers
 * READY or sends PREPARE, the agent writes it here with
 * ea__write_file_atomic (temp file, fsync, rename, fsync of the directory)
 * off the loop, and hands the loaded value back to ea_rdzv_new() at start.
 *
 * The format is one line of text an operator can read and compare across
 * nodes, "TERM CONTROLLER-ID", after a comment line:
 *
 *   # elastic-agent: newest generation accepted or issued here (term controller-id)
 *   7 1f2e3d4c5b6a79881f2e3d4c5b6a7988
 *
 * A file that does not parse is an error at start, not a silent zero: a
 * zero would let the node obey an older plan than one it already ran.
 */
#include "agent_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The file is a few dozen bytes; anything much longer is not ours. */
#define GEN_FILE_MAX 4096

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

int ea__gen_format(const ea_rdzv_gen *g, char *buf, size_t cap) {
  char hex[33];
  ea_node_id_hex(&g->ctrl, hex);
  int n = snprintf(buf, cap,
                   "# elastic-agent: newest generation accepted or issued here "
                   "(term controller-id)\n%" PRIu64 " %s\n",
                   g->term, hex);
  if (n < 0 || (size_t)n >= cap) return -ENOSPC;
  return n;
}

int ea__gen_load(const char *dir, ea_rdzv_gen *g, char *err, size_t errlen) {
  memset(g, 0, sizeof *g);
  char path[EA_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/%s", dir, EA__GEN_FILE);
  FILE *f = fopen(path, "re");
  if (!f) {
    if (errno == ENOENT) return 0;
    int e = errno;
    snprintf(err, errlen, "cannot read %s: %s", path, strerror(e));
    return -e;
  }
  char buf[GEN_FILE_MAX + 1];
  size_t n = fread(buf, 1, GEN_FILE_MAX + 1, f);
  bool rerr = ferror(f);
  fclose(f);
  if (rerr) {
    snprintf(err, errlen, "cannot read %s", path);
    return -EIO;
  }
  if (n > GEN_FILE_MAX) {
    snprintf(err, errlen, "%s: longer than %d bytes, not a generation file", path, GEN_FILE_MAX);
    return -EINVAL;
  }
  buf[n] = 0;
  int line = 0;
  for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    line++;
    while (*l == ' ' || *l == '\t') l++;
    if (*l == '#' || *l == 0) continue;
    char *end;
    errno = 0;
    unsigned long long term = strtoull(l, &end, 10);
    if (errno || end == l || *end != ' ' || l[0] == '-') {
      snprintf(err, errlen,
               "%s:%d: term: expected a decimal number followed by a space (the file is written "
               "by the agent; restore it from a backup rather than delete it: a node that forgets "
               "its generation may obey an older plan)",
               path, line);
      return -EINVAL;
    }
    const char *h = end + 1;
    ea_node_id id;
    for (int i = 0; i < 16; i++) {
      int hi = hexval(h[2 * i]), lo = hi < 0 ? -1 : hexval(h[2 * i + 1]);
      if (hi < 0 || lo < 0) {
        snprintf(err, errlen, "%s:%d: controller id: expected 32 hex digits", path, line);
        return -EINVAL;
      }
      id.b[i] = (uint8_t)(hi << 4 | lo);
    }
    const char *rest = h + 32;
    while (*rest == ' ' || *rest == '\t' || *rest == '\r') rest++;
    if (*rest) {
      snprintf(err, errlen, "%s:%d: unexpected text after the controller id", path, line);
      return -EINVAL;
    }
    g->term = term;
    g->ctrl = id;
    return 0;
  }
  snprintf(err, errlen, "%s: no generation line", path);
  return -EINVAL;
}
