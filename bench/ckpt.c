/* Checkpoint write/verify throughput: ea_ckpt_write_shard (io_uring,
 * O_DIRECT, registered buffers, XXH3 while writing) against the baseline a
 * first implementation would use — pwrite(2) in 2 MiB pieces through the
 * page cache, then fsync, hashing before writing — measured in the same run,
 * on the same file system, with the same data.
 *
 *   build/bench/ckpt [-d DIR] [-s MiB] [-r REPEATS] [--sweep]
 *
 * Prints one row per variant: MiB/s (median of REPEATS), and the ratio to
 * the baseline.  --sweep adds chunk size × queue depth rows, the measurement
 * behind EA_CKPT_CHUNK_DEFAULT / EA_CKPT_QUEUE_DEFAULT.  The numbers only
 * mean something on a quiet machine with a real disk: run bench/ckpt.sh
 * there (it also runs fio as an external reference). */
#include "ea_ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxh_x86dispatch.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The baseline: hash, then pwrite 2 MiB at a time, then fsync. */
static int baseline(const char *path, const uint8_t *d, uint64_t len, uint64_t *hash) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -errno;
  *hash = XXH3_64bits_dispatch(d, len);
  for (uint64_t off = 0; off < len;) {
    size_t n = len - off < (2u << 20) ? (size_t)(len - off) : (2u << 20);
    ssize_t w = pwrite(fd, d + off, n, (off_t)off);
    if (w < 0) {
      int e = -errno;
      close(fd);
      return e;
    }
    off += (uint64_t)w;
  }
  int rc = fsync(fd) == 0 ? 0 : -errno;
  close(fd);
  return rc;
}

typedef struct {
  const char *name;
  unsigned flags;
  uint32_t chunk, qd;
  int kind; /* 0 baseline, 1 writer, 2 hash only, 3 verify */
} variant;

int main(int argc, char **argv) {
  const char *dir = "build/bench-ckpt";
  uint64_t mib = 1024;
  int repeats = 3;
  int sweep = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-d") == 0 && i + 1 < argc)
      dir = argv[++i];
    else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc)
      mib = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
      repeats = atoi(argv[++i]);
    else if (strcmp(argv[i], "--sweep") == 0)
      sweep = 1;
    else {
      fprintf(stderr, "usage: %s [-d DIR] [-s MiB] [-r REPEATS] [--sweep]\n", argv[0]);
      return 2;
    }
  }
  if (mib == 0 || repeats < 1 || repeats > 99) return 2;
  mkdir(dir, 0755);
  uint64_t len = mib << 20;
  /* an odd length, as real shards have */
  len += 4097;
  uint8_t *d = malloc(len);
  if (!d) {
    fprintf(stderr, "out of memory for %" PRIu64 " bytes\n", len);
    return 1;
  }
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (uint64_t i = 0; i + 8 <= len; i += 8) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    memcpy(d + i, &s, 8);
  }
  char path[4096], ck[3072];
  if (strlen(dir) > 2000) return 2;
  snprintf(ck, sizeof ck, "%s/step-1.gen-1", dir);
  mkdir(ck, 0755);
  snprintf(path, sizeof path, "%s/shard-0-of-1.bin", ck);

  variant vs[64];
  int nv = 0;
  vs[nv++] = (variant){"baseline: pwrite 2MiB + fsync (buffered)", 0, 0, 0, 0};
  vs[nv++] = (variant){"hash only: XXH3-64 dispatch", 0, 0, 0, 2};
  vs[nv++] = (variant){"ea_ckpt_write_shard (default)", 0, 0, 0, 1};
  vs[nv++] = (variant){"ea_ckpt_write_shard buffered", EA_CKPT_IO_BUFFERED, 0, 0, 1};
  vs[nv++] = (variant){"ea_ckpt_write_shard no-register", EA_CKPT_IO_NO_REGISTER, 0, 0, 1};
  vs[nv++] = (variant){"ea_ckpt_write_shard pwrite fallback", EA_CKPT_IO_SYNC, 0, 0, 1};
  vs[nv++] = (variant){"ea_ckpt_verify full (O_DIRECT read+hash)", 0, 0, 0, 3};
  static char names[32][64];
  if (sweep) {
    const uint32_t chunks[] = {1u << 20, 2u << 20, 4u << 20};
    const uint32_t qds[] = {1, 2, 4, 8};
    int k = 0;
    for (int c = 0; c < 3; c++)
      for (int q = 0; q < 4; q++, k++) {
        snprintf(names[k], sizeof names[k], "  sweep chunk %u MiB × qd %u", chunks[c] >> 20,
                 qds[q]);
        vs[nv++] = (variant){names[k], 0, chunks[c], qds[q], 1};
      }
  }

  printf("checkpoint write: %" PRIu64 " bytes to %s, median of %d\n", len, dir, repeats);
  printf("%-44s %10s %10s %8s  %s\n", "variant", "MiB/s", "seconds", "ratio", "notes");
  double base = 0;
  uint64_t ref_hash = 0;
  ea_ckpt_manifest m;
  int have_manifest = 0;
  for (int v = 0; v < nv; v++) {
    double t[99];
    char notes[128] = "";
    for (int r = 0; r < repeats; r++) {
      double t0 = now();
      int rc = 0;
      if (vs[v].kind == 0) {
        rc = baseline(path, d, len, &ref_hash);
      } else if (vs[v].kind == 2) {
        volatile uint64_t h = XXH3_64bits_dispatch(d, len);
        (void)h;
      } else if (vs[v].kind == 1) {
        ea_ckpt_write_req q = {.path = path,
                               .data = d,
                               .length = len,
                               .flags = vs[v].flags,
                               .chunk_bytes = vs[v].chunk,
                               .queue_depth = vs[v].qd};
        ea_ckpt_write_result res;
        rc = ea_ckpt_write_shard(&q, &res);
        if (rc < 0)
          fprintf(stderr, "%s\n", res.err);
        else if (res.hash != ref_hash) {
          fprintf(stderr, "hash mismatch\n");
          return 1;
        }
        snprintf(notes, sizeof notes, "%s%s%s", res.direct ? "O_DIRECT " : "buffered ",
                 res.registered ? "registered " : "", res.uring ? "io_uring" : "pwrite");
        if (!have_manifest && rc == 0 && vs[v].flags == 0 && vs[v].chunk == 0) {
          ea_ckpt_manifest_init(&m, 1, 1, 1, len);
          ea_ckpt_manifest_set_shard(&m, 0, &res);
          have_manifest = 1;
        }
      } else {
        if (!have_manifest) break;
        ea_ckpt_verify_report rep;
        rc = ea_ckpt_verify(ck, &m, EA_CKPT_VERIFY_FULL, 0, &rep);
        if (rc < 0) fprintf(stderr, "verify: %s\n", rep.msg);
      }
      if (rc < 0) {
        fprintf(stderr, "%s: %s\n", vs[v].name, strerror(-rc));
        return 1;
      }
      t[r] = now() - t0;
    }
    double sec = median(t, repeats);
    double mbs = (double)len / (1 << 20) / sec;
    if (v == 0) base = mbs;
    printf("%-44s %10.0f %10.3f %7.2fx  %s\n", vs[v].name, mbs, sec, mbs / base, notes);
    fflush(stdout);
  }
  if (have_manifest) ea_ckpt_manifest_close(&m);
  unlink(path);
  rmdir(ck);
  free(d);
  return 0;
}
