/* libFuzzer harness for the job-file loader (config/config.c over libyaml):
 * the one decoder every operator feeds by hand.
 *
 * Beyond "no crash, no sanitizer report", it checks the loader's promises
 * (the same as tests/unit/test_config.c's seeded mutations, without the
 * seeds' limits): a file is either loaded — and then its dump loads back to
 * the same configuration, byte for byte and hash for hash — or refused with
 * -EINVAL and a message of lines "PATH:LINE: …", each LINE within the file,
 * leaving the configuration it was loaded over untouched.  A mismatch
 * aborts, which libFuzzer reports as a crash with the input saved.
 *
 * The input reaches ea_config_load() through a memfd (/proc/self/fd/N), as
 * a file would.  Build and run through scripts/fuzz.sh (make fuzz).  Seeds:
 * tests/fuzz/corpus/config (examples/job.yaml, the deployment guide's file,
 * and a few small files).
 */
#include "ea_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK(cond)                                                                         \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "fuzz_config: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                              \
    }                                                                                       \
  } while (0)

/* The bytes as a file: a memfd and its /proc path. */
static int as_file(const uint8_t *data, size_t size, char *path, size_t cap) {
  int fd = memfd_create("fuzz-job", MFD_CLOEXEC);
  CHECK(fd >= 0);
  size_t off = 0;
  while (off < size) {
    ssize_t w = write(fd, data + off, size - off);
    CHECK(w > 0);
    off += (size_t)w;
  }
  snprintf(path, cap, "/proc/self/fd/%d", fd);
  return fd;
}

static char *dump_alloc(const ea_config *c) {
  int n = ea_config_dump(c, NULL, 0);
  CHECK(n > 0);
  char *buf = malloc((size_t)n + 1);
  CHECK(buf);
  CHECK(ea_config_dump(c, buf, (size_t)n + 1) == n);
  return buf;
}

/* Every line of err is "PATH:LINE: text" with 1 ≤ LINE ≤ lines. */
static void check_message(const char *err, const char *path, size_t lines) {
  size_t pl = strlen(path);
  CHECK(err[0]);
  for (const char *l = err; l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    if (!*l) break;
    CHECK(strncmp(l, path, pl) == 0 && l[pl] == ':');
    char *end;
    unsigned long line = strtoul(l + pl + 1, &end, 10);
    CHECK(line >= 1 && line <= lines);
    CHECK(end[0] == ':' && end[1] == ' ' && end[2] && end[2] != '\n');
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 16) return 0; /* job files are small; long inputs only slow the search */
  char path[64];
  int fd = as_file(data, size, path, sizeof path);
  /* Allocated once: an ea_config is large, and a fresh one per input cost
   * more in page faults than the loader itself. */
  static ea_config *c, *before, *back;
  if (!c) {
    c = malloc(sizeof *c), before = malloc(sizeof *before), back = malloc(sizeof *back);
    CHECK(c && before && back);
  }
  ea_config_default(c);
  memcpy(before, c, sizeof *c);
  char err[4096] = "";
  int rc = ea_config_load(c, path, err, sizeof err);
  if (rc == 0) {
    /* loaded: the dump is a complete, canonical description of it */
    char *dump = dump_alloc(c);
    char p2[64];
    int fd2 = as_file((const uint8_t *)dump, strlen(dump), p2, sizeof p2);
    ea_config_default(back);
    CHECK(ea_config_set(back, "compute.workers_per_node", "3", err, sizeof err) == 0);
    CHECK(ea_config_set(back, "train.data", "/elsewhere", err, sizeof err) == 0);
    int rc2 = ea_config_load(back, p2, err, sizeof err);
    if (rc2 != 0) fprintf(stderr, "fuzz_config: the dump does not load: %s\n%s\n", err, dump);
    CHECK(rc2 == 0);
    char *again = dump_alloc(back);
    CHECK(strcmp(again, dump) == 0);
    CHECK(ea_config_hash(back) == ea_config_hash(c));
    back->aliases_used = c->aliases_used; /* not a key: which old names the file used */
    CHECK(memcmp(back, c, sizeof *c) == 0);
    free(again);
    free(dump);
    close(fd2);
  } else {
    CHECK(rc == -EINVAL);
    CHECK(memcmp(c, before, sizeof *c) == 0); /* a refused file changes nothing */
    CHECK(memchr(err, 0, sizeof err) != NULL);
    /* as YAML 1.1 (libyaml) counts them: \n, \r\n, a lone \r, and the
     * UTF-8 NEL (U+0085), LINE SEPARATOR and PARAGRAPH SEPARATOR (U+2028/9)
     * each end a line (the long run found a message on "line 4" of a file
     * an editor shows as 3 lines: a U+2028 inside a quoted string) */
    size_t lines = 1;
    for (size_t i = 0; i < size; i++)
      lines += data[i] == '\n' || (data[i] == '\r' && (i + 1 >= size || data[i + 1] != '\n')) ||
               (data[i] == 0xc2 && i + 1 < size && data[i + 1] == 0x85) ||
               (data[i] == 0xe2 && i + 2 < size && data[i + 1] == 0x80 &&
                (data[i + 2] == 0xa8 || data[i + 2] == 0xa9));
    check_message(err, path, lines);
  }
  close(fd);
  return 0;
}
