/* bench/ckpt.c — what a checkpoint costs, each figure against a baseline
 * measured in the same run, on the same file system, with the same sizes.
 *
 *   build/bench/ckpt [-d DIR] [-s MiB,MiB,...] [-r REPEATS] [--quick] [--no-fio] [--sweep]
 *
 * Four tables (medians of REPEATS runs; the load average is printed with
 * each, because on a shared machine every wall-clock number moves with it):
 *
 *  1. persist: a whole checkpoint made durable by this project's path —
 *     ea_ckpt_prepare, ea_ckpt_write_shard (io_uring, O_DIRECT, registered
 *     buffers, XXH3 of every byte while writing, fsync) and ea_ckpt_commit
 *     (MANIFEST.tmp, fsync, RENAME_NOREPLACE, fsync dir, LATEST) — with one
 *     shard, and with four shards written by four threads (four workers of
 *     one node); against fio (`--rw=write --bs=1M --direct=1 --end_fsync=1`,
 *     psync, its own reported bandwidth, which includes the final fsync but
 *     not its process start) and a plain pwrite (1 MiB) + fsync through the
 *     page cache with no hashing.  Sizes 256 MiB .. 4 GiB.
 *  2. resume read: the checkpoint of table 1 read back with every byte
 *     hashed — ea_ckpt_verify (one pass, no copy); the path a resume takes
 *     (ea_ckpt_find_resume, sizes, + ea_ckpt_load_verified of the whole
 *     state: one pass, hashed as it arrives, placed in the state buffer:
 *     what ea_trainer_resume runs); and the two-pass path resumes took
 *     before (ea_ckpt_find_resume full verification, then
 *     ea_ckpt_reader_read) — against fio sequential read (`--rw=read
 *     --bs=1M --direct=1`) of the same file.
 *  3. step rate: training steps per second of the default model at W = 1
 *     while a checkpoint of the largest size is being persisted by another
 *     thread (as the agent does, in another process, on the same cores),
 *     against the rate without one; and the same with a pwrite+fsync
 *     persist.
 *  4. stall: what a checkpoint costs the training thread — the copy of its
 *     range of the serialized state into a memfd (ea_trainer_state_stage:
 *     copy + XXH3) at W = 1 and W = 4 (rank 0's range holds the header,
 *     whose digest hashes the whole payload), and the stall left when that
 *     copy runs on a thread while the next step computes, as the worker's
 *     stager does — against a synchronous save of the same state
 *     (serialize + write + fsync), for the default model and a large one.
 *
 * --tables 2,4: only those tables (1 and 2 come from one pass, so either
 * runs both).  --quick: sizes 256 and 1024 MiB, 3 repeats, shorter windows.  --sweep
 * adds chunk size × queue depth rows (the measurement behind
 * EA_CKPT_CHUNK_DEFAULT and EA_CKPT_QUEUE_DEFAULT).  Benchmarks report;
 * they do not assert.  Run it through bench/ckpt.sh. */
#include "ea_ckpt.h"
#include "ea_train.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZES 8
#define MAX_REPEATS 99
/* Four shards: a node with four accelerators runs four workers, each with
 * its own shard written by its agent. */
#define NODE_WORKERS 4
/* Pieces of the plain pwrite baseline: the block size fio is given too. */
#define PIECE (1u << 20)

static const char *g_dir = "build/bench-ckpt";
static int g_repeats = 5;
static bool g_fio = true;

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
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what, int rc, const char *detail) {
  fprintf(stderr, "bench/ckpt: %s: %s%s%s\n", what, strerror(rc < 0 ? -rc : rc),
          detail && *detail ? ": " : "", detail ? detail : "");
  exit(1);
}

static void loadavg(const char *when) {
  char buf[128] = "?";
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (!fgets(buf, sizeof buf, f)) snprintf(buf, sizeof buf, "?");
    fclose(f);
  }
  buf[strcspn(buf, "\n")] = 0;
  printf("(load average %s: %s)\n", when, buf);
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  remove(p);
  return 0;
}

static void rm_rf(const char *p) {
  nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void fill(uint8_t *d, uint64_t len) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (uint64_t i = 0; i + 8 <= len; i += 8) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    memcpy(d + i, &s, 8);
  }
}

/* ---- the persist path ---------------------------------------------------- */

typedef struct {
  ea_ckpt_write_req req;
  ea_ckpt_write_result res;
  char path[EA_CKPT_PATH_MAX];
  int rc;
} shard_job;

static void *shard_thread(void *arg) {
  shard_job *j = arg;
  j->rc = ea_ckpt_write_shard(&j->req, &j->res);
  return NULL;
}

/* One checkpoint of len bytes in `world` shards (one thread each when
 * world > 1), committed.  Returns seconds; *direct says whether O_DIRECT
 * was used. */
static double persist(const uint8_t *d, uint64_t len, uint32_t world, uint64_t step, unsigned flags,
                      uint32_t chunk, uint32_t qd, bool *direct) {
  char err[1024];
  shard_job jobs[NODE_WORKERS];
  pthread_t th[NODE_WORKERS];
  double t0 = now();
  int rc = ea_ckpt_prepare(g_dir, step, 1, NULL, 0, err, sizeof err);
  if (rc) die("prepare", rc, err);
  for (uint32_t r = 0; r < world; r++) {
    uint64_t off, n;
    ea_ckpt_shard_range(len, world, r, &off, &n);
    shard_job *j = &jobs[r];
    memset(j, 0, sizeof *j);
    ea_ckpt_shard_path(j->path, sizeof j->path, g_dir, step, 1, r, world);
    j->req = (ea_ckpt_write_req){.path = j->path,
                                 .data = d + off,
                                 .length = n,
                                 .flags = flags,
                                 .chunk_bytes = chunk,
                                 .queue_depth = qd};
    if (world == 1)
      shard_thread(j);
    else if (pthread_create(&th[r], NULL, shard_thread, j))
      die("pthread_create", EAGAIN, NULL);
  }
  for (uint32_t r = 0; world > 1 && r < world; r++) pthread_join(th[r], NULL);
  ea_ckpt_manifest m;
  if ((rc = ea_ckpt_manifest_init(&m, step, 1, world, len))) die("manifest", rc, NULL);
  for (uint32_t r = 0; r < world; r++) {
    if (jobs[r].rc) die("write", jobs[r].rc, jobs[r].res.err);
    if ((rc = ea_ckpt_manifest_set_shard(&m, r, &jobs[r].res))) die("manifest", rc, NULL);
  }
  uint64_t shape[1] = {len};
  if ((rc = ea_ckpt_manifest_add_tensor(&m, "state", "u8", 1, shape, 0, len)))
    die("manifest", rc, NULL);
  if ((rc = ea_ckpt_commit(g_dir, &m, NULL, err, sizeof err))) die("commit", rc, err);
  double s = now() - t0;
  ea_ckpt_manifest_close(&m);
  if (direct) *direct = jobs[0].res.direct;
  return s;
}

static void drop_step(uint64_t step) {
  char name[EA_CKPT_NAME_MAX], path[EA_CKPT_PATH_MAX];
  ea_ckpt_dir_name(name, sizeof name, step, 1);
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  rm_rf(path);
}

/* The plain baseline: pwrite 1 MiB at a time through the page cache, then
 * fsync; no hashing, no manifest. */
static double plain_write(const char *path, const uint8_t *d, uint64_t len) {
  unlink(path);
  double t0 = now();
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die(path, -errno, "open");
  for (uint64_t off = 0; off < len;) {
    size_t n = len - off < PIECE ? (size_t)(len - off) : PIECE;
    ssize_t w = pwrite(fd, d + off, n, (off_t)off);
    if (w < 0) die(path, -errno, "pwrite");
    off += (uint64_t)w;
  }
  if (fsync(fd) < 0) die(path, -errno, "fsync");
  close(fd);
  return now() - t0;
}

/* fio, terse output: its own bandwidth in MiB/s (field 7 read, 48 write,
 * KiB/s), or 0 when it failed. */
static double fio(const char *rw, const char *file, uint64_t mib) {
  char cmd[EA_CKPT_PATH_MAX + 512];
  snprintf(cmd, sizeof cmd,
           "fio --name=ckpt --filename=%s --rw=%s --bs=1M --size=%" PRIu64
           "M --direct=1%s --numjobs=1 --output-format=terse --terse-version=3 2>/dev/null",
           file, rw, mib, strcmp(rw, "write") == 0 ? " --end_fsync=1" : "");
  FILE *p = popen(cmd, "r");
  if (!p) return 0;
  static char line[1 << 16];
  double bw = 0;
  if (fgets(line, sizeof line, p)) {
    int field = 1;
    char *save = NULL;
    for (char *t = strtok_r(line, ";", &save); t; t = strtok_r(NULL, ";", &save), field++) {
      if (field == 5 && atoi(t) != 0) break; /* fio's error field */
      if (field == (strcmp(rw, "write") == 0 ? 48 : 7)) {
        bw = atof(t) / 1024.0;
        break;
      }
    }
  }
  if (pclose(p) != 0) return 0;
  return bw;
}

static double mibs(uint64_t len, double s) {
  return s > 0 ? (double)len / (1 << 20) / s : 0;
}

/* ---- tables 1 and 2 ------------------------------------------------------ */

typedef struct {
  uint64_t mib;
  double ours1, ours4, fio_w, plain;     /* MiB/s */
  double verify, resume, resume2, fio_r; /* MiB/s */
  bool direct;
} size_row;

static void run_size(uint8_t *d, size_row *row, uint64_t *step) {
  uint64_t len = row->mib << 20;
  double t1[MAX_REPEATS], t4[MAX_REPEATS], tp[MAX_REPEATS], fw[MAX_REPEATS];
  double tv[MAX_REPEATS], tr[MAX_REPEATS], t2[MAX_REPEATS], fr[MAX_REPEATS];
  int nfw = 0, nfr = 0;
  char plain_path[EA_CKPT_PATH_MAX], shard[EA_CKPT_PATH_MAX + 32], ck[EA_CKPT_PATH_MAX];
  snprintf(plain_path, sizeof plain_path, "%s/plain.bin", g_dir);
  char fio_path[EA_CKPT_PATH_MAX];
  snprintf(fio_path, sizeof fio_path, "%s/fio.bin", g_dir);
  uint64_t keep = 0;
  /* Interleaved, so a change of load hits every variant alike. */
  for (int r = 0; r < g_repeats; r++) {
    uint64_t s1 = ++*step;
    t1[r] = persist(d, len, 1, s1, 0, 0, 0, &row->direct);
    if (keep) drop_step(keep);
    keep = s1;
    uint64_t s4 = ++*step;
    t4[r] = persist(d, len, NODE_WORKERS, s4, 0, 0, 0, NULL);
    drop_step(s4);
    tp[r] = plain_write(plain_path, d, len);
    unlink(plain_path);
    if (g_fio) {
      unlink(fio_path);
      double bw = fio("write", fio_path, row->mib);
      if (bw > 0) fw[nfw++] = bw;
      unlink(fio_path);
    }
  }
  row->ours1 = mibs(len, median(t1, g_repeats));
  row->ours4 = mibs(len, median(t4, g_repeats));
  row->plain = mibs(len, median(tp, g_repeats));
  row->fio_w = median(fw, nfw);

  /* Read back the last one-shard checkpoint. */
  char name[EA_CKPT_NAME_MAX];
  ea_ckpt_dir_name(name, sizeof name, keep, 1);
  snprintf(ck, sizeof ck, "%s/%s", g_dir, name);
  snprintf(shard, sizeof shard, "%s/shard-0-of-1.bin", ck);
  for (int r = 0; r < g_repeats; r++) {
    ea_ckpt_verify_report rep;
    double t0 = now();
    int rc = ea_ckpt_verify(ck, NULL, EA_CKPT_VERIFY_FULL, 0, &rep);
    if (rc) die("verify", rc, rep.msg);
    tv[r] = now() - t0;
    t0 = now();
    ea_ckpt_resume res;
    if ((rc = ea_ckpt_find_resume(g_dir, EA_CKPT_VERIFY_SIZE, &res))) die("find_resume", rc, NULL);
    if ((rc = ea_ckpt_load_verified(res.path, &res.manifest, d, len, 0, &rep)))
      die("load_verified", rc, rep.msg);
    ea_ckpt_resume_close(&res);
    tr[r] = now() - t0;
    t0 = now();
    if ((rc = ea_ckpt_find_resume(g_dir, EA_CKPT_VERIFY_FULL, &res))) die("find_resume", rc, NULL);
    ea_ckpt_reader *rd;
    char err[512];
    if ((rc = ea_ckpt_reader_open(&rd, res.path, 0, err, sizeof err))) die("reader", rc, err);
    if ((rc = ea_ckpt_reader_read(rd, 0, d, len, err, sizeof err))) die("read", rc, err);
    ea_ckpt_reader_free(rd);
    ea_ckpt_resume_close(&res);
    t2[r] = now() - t0;
    if (g_fio) {
      double bw = fio("read", shard, row->mib);
      if (bw > 0) fr[nfr++] = bw;
    }
  }
  row->verify = mibs(len, median(tv, g_repeats));
  row->resume = mibs(len, median(tr, g_repeats));
  row->resume2 = mibs(len, median(t2, g_repeats));
  row->fio_r = median(fr, nfr);
  drop_step(keep);
}

static void ratio(char *out, size_t cap, double a, double b) {
  if (a > 0 && b > 0)
    snprintf(out, cap, "%.2fx", a / b);
  else
    snprintf(out, cap, "-");
}

static void fmt_rate(char *out, size_t cap, double v) {
  if (v > 0)
    snprintf(out, cap, "%.0f", v);
  else
    snprintf(out, cap, "-");
}

static void print_persist(const size_row *rows, int n) {
  printf("\n1. persist a checkpoint (MiB/s, median of %d)\n", g_repeats);
  printf(
      "| size | ours, 1 shard | ours, %d shards | fio write | pwrite+fsync | ours/fio | "
      "ours/pwrite |\n",
      NODE_WORKERS);
  printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i < n; i++) {
    char f[32], a[32], b[32];
    fmt_rate(f, sizeof f, rows[i].fio_w);
    ratio(a, sizeof a, rows[i].ours1, rows[i].fio_w);
    ratio(b, sizeof b, rows[i].ours1, rows[i].plain);
    printf("| %" PRIu64 " MiB | %.0f | %.0f | %s | %.0f | %s | %s |\n", rows[i].mib, rows[i].ours1,
           rows[i].ours4, f, rows[i].plain, a, b);
  }
  printf(
      "ours: prepare + write (%s from the page-aligned buffer in place, io_uring, XXH3 of every "
      "byte) + fsync + "
      "commit (MANIFEST, LATEST); fio: its own bandwidth, final fsync included\n",
      n && rows[0].direct ? "O_DIRECT" : "buffered");
}

static void print_resume(const size_row *rows, int n) {
  printf("\n2. read a checkpoint back, every byte hashed (MiB/s, median of %d)\n", g_repeats);
  printf(
      "| size | verify (1 pass) | resume (1 pass) | before: verify + read (2 passes) | fio read | "
      "verify/fio | resume/fio | before/fio |\n");
  printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i < n; i++) {
    char f[32], a[32], b[32], c[32];
    fmt_rate(f, sizeof f, rows[i].fio_r);
    ratio(a, sizeof a, rows[i].verify, rows[i].fio_r);
    ratio(b, sizeof b, rows[i].resume, rows[i].fio_r);
    ratio(c, sizeof c, rows[i].resume2, rows[i].fio_r);
    printf("| %" PRIu64 " MiB | %.0f | %.0f | %.0f | %s | %s | %s | %s |\n", rows[i].mib,
           rows[i].verify, rows[i].resume, rows[i].resume2, f, a, b, c);
  }
  printf(
      "resume: ea_ckpt_find_resume (sizes) + ea_ckpt_load_verified (what ea_trainer_resume "
      "runs); before: full verification, then ea_ckpt_reader_read\n");
}

/* ---- table 4: the training stall ---------------------------------------- */

static ea_data *g_data;

static ea_trainer *trainer(uint32_t context, uint32_t embed, uint32_t hidden, uint32_t layers) {
  if (!g_data) {
    /* A small corpus: the stall and the step rate do not depend on it. */
    static const char *const words[] = {
        "the",  "agent", "writes", "a",     "shard", "while", "ranks", "train", "on",   "every",
        "node", "and",   "state",  "moves", "to",    "disk",  "with",  "one",   "copy", "only"};
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    uint64_t x = 12345;
    while (buf && n + 16 < cap) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      n += (size_t)snprintf(buf + n, cap - n, "%s%s", words[(x >> 33) % 20],
                            (x >> 60) == 0 ? ".\n" : " ");
    }
    int rc = buf ? ea_data_from_memory(buf, n, &g_data) : -ENOMEM;
    free(buf);
    if (rc) die("data", rc, NULL);
  }
  ea_train_config c;
  ea_train_config_default(&c);
  c.model.context = context;
  c.model.embed_dim = embed;
  c.model.hidden = hidden;
  c.model.layers = layers;
  ea_trainer *t;
  char err[256];
  int rc = ea_trainer_new(&c, g_data, &t, err, sizeof err);
  if (rc) die("trainer", rc, err);
  return t;
}

static double stage_seconds(ea_trainer *t, uint8_t *map, uint32_t world, uint32_t rank) {
  uint64_t off, len, hash;
  ea_ckpt_shard_range(ea_trainer_state_size(t), world, rank, &off, &len);
  double t0 = now();
  int rc = ea_trainer_state_stage(t, off, map, (size_t)len, &hash);
  if (rc) die("stage", rc, NULL);
  return now() - t0;
}

/* What the worker does (train/worker.c, the stager): rank 0 of world 1
 * hands its range to a thread that waits for such work (created once)
 * while the training thread computes the next step (compute only reads
 * the state), and waits for it before the optimizer's apply.  The stall is
 * that wait. */
typedef struct {
  ea_trainer *t;
  uint8_t *map;
  uint64_t off, len;
  sem_t go, done;
  bool quit;
} stager;

static void *stager_main(void *arg) {
  stager *j = arg;
  for (;;) {
    while (sem_wait(&j->go) != 0) {
    }
    if (j->quit) return NULL;
    uint64_t hash;
    int rc = ea_trainer_state_stage(j->t, j->off, j->map, (size_t)j->len, &hash);
    if (rc) die("stage", rc, NULL);
    sem_post(&j->done);
  }
}

static double overlap_stall(stager *j, double *compute_s) {
  double t0 = now();
  sem_post(&j->go);
  int rc = ea_trainer_compute(j->t, 0, 1);
  if (rc) die("compute", rc, NULL);
  double t1 = now();
  while (sem_wait(&j->done) != 0) {
  }
  *compute_s = t1 - t0;
  return now() - t1;
}

/* A synchronous save: serialize the whole state, write it, fsync. */
static double sync_save(ea_trainer *t, uint8_t *buf, const char *path) {
  uint64_t total = ea_trainer_state_size(t);
  double t0 = now();
  int rc = ea_trainer_state_serialize(t, buf, total);
  if (rc) die("serialize", rc, NULL);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die(path, -errno, "open");
  for (uint64_t o = 0; o < total;) {
    ssize_t w = write(fd, buf + o, total - o);
    if (w < 0) die(path, -errno, "write");
    o += (uint64_t)w;
  }
  if (fsync(fd) < 0) die(path, -errno, "fsync");
  close(fd);
  return now() - t0;
}

static void stall_row(const char *label, ea_trainer *t) {
  uint64_t total = ea_trainer_state_size(t);
  /* The worker's staging buffer: a memfd, populated at a generation
   * change, so page faults are not part of a stall. */
  int fd = memfd_create("bench-staging", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)total) < 0) die("memfd", -errno, NULL);
  uint8_t *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  uint8_t *buf = malloc(total);
  if (map == MAP_FAILED || !buf) die("staging buffers", ENOMEM, NULL);
  char path[EA_CKPT_PATH_MAX];
  snprintf(path, sizeof path, "%s/sync-save.bin", g_dir);
  double w1[MAX_REPEATS], r0[MAX_REPEATS], r1[MAX_REPEATS], sy[MAX_REPEATS];
  double ov[MAX_REPEATS], cp[MAX_REPEATS];
  stager j = {.t = t, .map = map};
  ea_ckpt_shard_range(total, 1, 0, &j.off, &j.len);
  pthread_t th;
  if (sem_init(&j.go, 0, 0) || sem_init(&j.done, 0, 0) ||
      pthread_create(&th, NULL, stager_main, &j) != 0)
    die("stager thread", -EAGAIN, NULL);
  for (int r = 0; r < g_repeats; r++) {
    w1[r] = stage_seconds(t, map, 1, 0);
    ov[r] = overlap_stall(&j, &cp[r]);
    r0[r] = stage_seconds(t, map, NODE_WORKERS, 0);
    r1[r] = stage_seconds(t, map, NODE_WORKERS, 1);
    sy[r] = sync_save(t, buf, path);
    unlink(path);
  }
  j.quit = true;
  sem_post(&j.go);
  pthread_join(th, NULL);
  sem_destroy(&j.go);
  sem_destroy(&j.done);
  double a = median(w1, g_repeats), b = median(r0, g_repeats), c = median(r1, g_repeats),
         s = median(sy, g_repeats), o = median(ov, g_repeats), k = median(cp, g_repeats);
  printf(
      "| %s | %.1f MiB | %.2f ms | %.2f ms | %.2f ms | %.1f ms | %.0fx | %.0fx | %.1f ms | %.3f ms "
      "| %.1f%% |\n",
      label, (double)total / (1 << 20), a * 1e3, b * 1e3, c * 1e3, s * 1e3, s / a, s / c, k * 1e3,
      o * 1e3, s > 0 ? 100.0 * o / s : 0);
  fflush(stdout);
  munmap(map, total);
  close(fd);
  free(buf);
}

/* ---- table 3: step rate under a persist ---------------------------------- */

typedef struct {
  const uint8_t *d;
  uint64_t len, step;
  bool plain;
  atomic_bool done;
} bg_job;

static void *bg_thread(void *arg) {
  bg_job *j = arg;
  if (j->plain) {
    char path[EA_CKPT_PATH_MAX];
    snprintf(path, sizeof path, "%s/plain-bg.bin", g_dir);
    plain_write(path, j->d, j->len);
    unlink(path);
  } else {
    persist(j->d, j->len, 1, j->step, 0, 0, 0, NULL);
  }
  atomic_store(&j->done, true);
  return NULL;
}

/* Steps while bg runs in another thread (bg NULL: for `window` seconds);
 * *secs gets the time they took. */
static double steps_during(ea_trainer *t, bg_job *bg, double window, double *secs) {
  pthread_t th;
  if (bg && pthread_create(&th, NULL, bg_thread, bg)) die("pthread_create", EAGAIN, NULL);
  uint64_t n = 0;
  double t0 = now(), t1;
  for (;;) {
    int rc = ea_trainer_step_local(t, NULL);
    if (rc) die("step", rc, NULL);
    n++;
    t1 = now();
    if (bg ? atomic_load(&bg->done) : t1 - t0 >= window) break;
  }
  if (bg) pthread_join(th, NULL);
  *secs = t1 - t0;
  return (double)n;
}

int main(int argc, char **argv) {
  uint64_t sizes[MAX_SIZES] = {256, 1024, 2048, 4096};
  int nsizes = 4;
  bool quick = false, sweep = false, repeats_set = false;
  bool want[5] = {false, true, true, true, true}; /* tables 1..4 */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--tables") == 0 && i + 1 < argc) {
      memset(want, 0, sizeof want);
      for (const char *c = argv[++i]; *c; c++) {
        if (*c >= '1' && *c <= '4')
          want[*c - '0'] = true;
        else if (*c != ',')
          return fprintf(stderr, "--tables: a list of 1..4, got '%s'\n", argv[i]), 2;
      }
      want[1] = want[2] = want[1] || want[2]; /* one pass writes and reads back */
    } else if (strcmp(argv[i], "-d") == 0 && i + 1 < argc) {
      g_dir = argv[++i];
    } else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) {
      nsizes = 0;
      for (char *save = NULL, *t = strtok_r(argv[++i], ",", &save); t && nsizes < MAX_SIZES;
           t = strtok_r(NULL, ",", &save))
        sizes[nsizes++] = strtoull(t, NULL, 10);
    } else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) {
      g_repeats = atoi(argv[++i]);
      repeats_set = true;
    } else if (strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (strcmp(argv[i], "--no-fio") == 0) {
      g_fio = false;
    } else if (strcmp(argv[i], "--sweep") == 0) {
      sweep = true;
    } else {
      fprintf(stderr,
              "usage: %s [-d DIR] [-s MiB,MiB,...] [-r REPEATS] [--quick] [--no-fio] [--sweep] "
              "[--tables 1,2,3,4]\n",
              argv[0]);
      return 2;
    }
  }
  if (quick) {
    sizes[0] = 256, sizes[1] = 1024, nsizes = 2;
    if (!repeats_set) g_repeats = 3;
  }
  if (g_repeats < 1 || g_repeats > MAX_REPEATS || nsizes < 1) return 2;
  for (int i = 0; i < nsizes; i++)
    if (sizes[i] == 0) return 2;
  /* Everything happens in a directory of our own under DIR, removed at the
   * end: DIR itself may hold anything. */
  static char work[EA_CKPT_PATH_MAX];
  mkdir(g_dir, 0755);
  snprintf(work, sizeof work, "%s/ea-bench-ckpt.%d", g_dir, (int)getpid());
  if (mkdir(work, 0755) < 0) die(work, -errno, "mkdir");
  g_dir = work;
  ea_train_blas_threads(1); /* one worker thread per rank, as the agent starts them */

  uint64_t maxmib = 0;
  for (int i = 0; i < nsizes; i++)
    if (sizes[i] > maxmib) maxmib = sizes[i];
  /* page-aligned, as the agent's mmap of a worker's memfd: O_DIRECT writes
   * it in place */
  uint8_t *d = NULL;
  if (posix_memalign((void **)&d, 4096, maxmib << 20)) d = NULL;
  if (!d) die("data buffer", ENOMEM, NULL);
  fill(d, maxmib << 20);

  printf("checkpoint benchmark: %s, sizes", g_dir);
  for (int i = 0; i < nsizes; i++) printf(" %" PRIu64 " MiB", sizes[i]);
  printf(", median of %d%s\n", g_repeats, g_fio ? "" : ", no fio");
  loadavg("at start");

  /* 1 and 2 */
  size_row rows[MAX_SIZES];
  uint64_t step = 0;
  for (int i = 0; i < nsizes && want[1]; i++) {
    memset(&rows[i], 0, sizeof rows[i]);
    rows[i].mib = sizes[i];
    run_size(d, &rows[i], &step);
    fprintf(stderr, "  %" PRIu64 " MiB done\n", sizes[i]);
  }
  if (want[1]) {
    print_persist(rows, nsizes);
    print_resume(rows, nsizes);
    loadavg("after tables 1 and 2");
  }

  if (sweep) {
    printf("\n   sweep, %" PRIu64 " MiB, 1 shard: chunk x queue depth (MiB/s, median of %d)\n",
           sizes[0], g_repeats);
    const uint32_t chunks[] = {1u << 20, 2u << 20, 4u << 20};
    const uint32_t qds[] = {1, 2, 4, 8};
    for (int c = 0; c < 3; c++) {
      printf("   chunk %u MiB:", chunks[c] >> 20);
      for (int q = 0; q < 4; q++) {
        double t[MAX_REPEATS];
        for (int r = 0; r < g_repeats; r++) {
          uint64_t s = ++step;
          t[r] = persist(d, sizes[0] << 20, 1, s, 0, chunks[c], qds[q], NULL);
          drop_step(s);
        }
        printf("  qd %u %.0f", qds[q], mibs(sizes[0] << 20, median(t, g_repeats)));
      }
      printf("\n");
    }
  }

  /* 3: the default model's steps while the largest checkpoint is persisted.
   * The rate during a persist alone would flatter a slow writer (it spreads
   * the same work thinner), so the table also gives how long each persist
   * took and the steps it cost: rate without × its time − steps done. */
  if (want[3]) {
    printf("\n3. training steps per second (default model, W = 1) while a %" PRIu64
           " MiB checkpoint is persisted by another thread (median of %d)\n",
           maxmib, g_repeats);
    {
      ea_trainer *t = trainer(16, 24, 256, 2);
      double base[MAX_REPEATS], ours[MAX_REPEATS], plain[MAX_REPEATS];
      double ot[MAX_REPEATS], pt[MAX_REPEATS], ol[MAX_REPEATS], pl[MAX_REPEATS];
      double window = quick ? 1.0 : 2.0;
      for (int r = 0; r < 3; r++) ea_trainer_step_local(t, NULL); /* warm up */
      for (int r = 0; r < g_repeats; r++) {
        double secs, n = steps_during(t, NULL, window, &secs);
        base[r] = n / secs;
        bg_job j = {.d = d, .len = maxmib << 20, .step = ++step};
        n = steps_during(t, &j, 0, &ot[r]);
        ours[r] = n / ot[r];
        ol[r] = base[r] * ot[r] - n;
        drop_step(j.step);
        bg_job p = {.d = d, .len = maxmib << 20, .plain = true};
        n = steps_during(t, &p, 0, &pt[r]);
        plain[r] = n / pt[r];
        pl[r] = base[r] * pt[r] - n;
      }
      double b = median(base, g_repeats), o = median(ours, g_repeats), p = median(plain, g_repeats);
      double lo = median(ol, g_repeats), lp = median(pl, g_repeats);
      printf(
          "| no checkpoint | our persist: s | steps/s | steps lost | pwrite+fsync: s | steps/s | "
          "steps lost | rate ours/none | lost ours/pwrite |\n"
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
      printf("| %.0f | %.2f | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f | %.2f |\n", b,
             median(ot, g_repeats), o, lo, median(pt, g_repeats), p, lp, o / b,
             lp > 0 ? lo / lp : 0);
      ea_trainer_free(t);
    }
    loadavg("after table 3");
  }
  free(d);

  if (want[4]) {
    /* 4: the stall */
    printf(
        "\n4. training stall per checkpoint: staging copy into the memfd vs a synchronous save "
        "(median of %d)\n",
        g_repeats);
    printf(
        "| model | state | copy W=1 | copy W=%d rank 0 | copy W=%d rank 1 | synchronous save "
        "| sync/copy W=1 | sync/copy rank 1 | next step's compute | stall W=1, staged meanwhile "
        "| stall/sync |\n",
        NODE_WORKERS, NODE_WORKERS);
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    {
      ea_trainer *t = trainer(16, 24, 256, 2);
      stall_row("default (C16 E24 H256 L2)", t);
      ea_trainer_free(t);
      /* ~22 M parameters (~250 MiB of state); --quick keeps to it, the full
       * run adds ~78 M (~0.9 GiB). */
      t = trainer(16, 64, 4096, 2);
      stall_row("large (C16 E64 H4096 L2)", t);
      ea_trainer_free(t);
      if (!quick) {
        t = trainer(16, 64, 8192, 2);
        stall_row("larger (C16 E64 H8192 L2)", t);
        ea_trainer_free(t);
      }
    }
    printf(
        "copy: ea_trainer_state_stage on the training thread (the stall before); stall: the wait "
        "for that copy, run on a thread while the next step computes (the worker's stager), "
        "before the step's apply; rank 0's range holds the state header, whose digest hashes "
        "the whole payload\n");
  }
  loadavg("at the end");
  ea_data_close(g_data);
  rm_rf(g_dir);
  return 0;
}
