/* bench/allreduce.c — allreduce bandwidth of the tcp communicator: W rank
 * processes on loopback, float32 sum, sizes 1 KiB … 256 MiB (×4 steps).
 *
 * For each size: warm up (and check the result once), then time `iters`
 * ops, each between a barrier and its completion, taking the slowest rank's
 * time per op (an allreduce of the per-rank times with max) and the median
 * over ops.  Reported as nccl-tests does:
 *     algbw = bytes / time
 *     busbw = algbw · 2(W−1)/W   (what each link actually carries)
 * busbw is the number to compare across W and against other libraries.
 * cpu_us is the CPU time (user + system, all ranks together) per op, from
 * getrusage around the timed loop: on a machine shared with other work the
 * wall-clock figures swing with the load, the CPU cost much less.
 *
 *   build/bench/allreduce [-w W] [--min BYTES] [--max BYTES] [--json]
 *
 * Benchmarks report; they do not assert (a failed op or a wrong result is
 * still an error exit).  Figures on a shared machine are noisy.
 */
#include "ea_comm.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXW 64

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Fewer repetitions for big sizes: ~8 for 256 MiB, up to 60 for small. */
static int iters_for(size_t bytes) {
  size_t it = (size_t)(1u << 30) / (bytes ? bytes : 1);
  return it < 8 ? 8 : it > 60 ? 60 : (int)it;
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
         ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) * 1e-6;
}

static int run_rank(int W, int r, const char *const *peers, int lfd, size_t lo, size_t hi,
                    int json) {
  ea_comm_plan p;
  ea_comm_plan_init(&p);
  p.world = (uint32_t)W;
  p.rank = (uint32_t)r;
  p.generation = 1;
  p.peers = peers;
  p.listen_fd = lfd;
  p.timeout_ms = 120000;
  ea_comm *c;
  int rc = ea_comm_init(&p, &c);
  if (rc < 0) {
    fprintf(stderr, "rank %d: init: %s\n", r, strerror(-rc));
    return 1;
  }
  float *buf = NULL;
  if (hi) buf = aligned_alloc(64, (hi + 63) / 64 * 64);
  if (!buf) return 1;
  if (r == 0) {
    if (json)
      printf("{\"impl\": \"ea_tcp\", \"world\": %d, \"results\": [", W);
    else
      printf(
          "# ea_comm tcp ring allreduce, float32 sum, W=%d (loopback)\n"
          "%12s %6s %12s %12s %12s %12s\n",
          W, "bytes", "iters", "time_us", "algbw_GB/s", "busbw_GB/s", "cpu_us");
  }
  int first = 1;
  for (size_t bytes = lo; bytes <= hi; bytes *= 4) {
    size_t n = bytes / 4;
    /* Warm-up doubles as a correctness check: W ones sum to W exactly. */
    for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
    rc = ea_comm_allreduce(c, buf, n, EA_COMM_F32, EA_COMM_SUM);
    if (rc == 0 && (buf[0] != (float)W || buf[n - 1] != (float)W || buf[n / 2] != (float)W)) {
      fprintf(stderr, "rank %d: wrong result at %zu bytes\n", r, bytes);
      return 1;
    }
    memset(buf, 0, bytes); /* zeros stay zeros: no growth, no denormals */
    int iters = iters_for(bytes);
    double *t = malloc((size_t)iters * sizeof *t);
    double cpu0 = cpu_s();
    for (int k = 0; rc == 0 && k < iters; k++) {
      rc = ea_comm_barrier(c);
      double t0 = now_s();
      if (rc == 0) rc = ea_comm_allreduce(c, buf, n, EA_COMM_F32, EA_COMM_SUM);
      double dt = now_s() - t0;
      if (rc == 0) rc = ea_comm_allreduce(c, &dt, 1, EA_COMM_F64, EA_COMM_MAX);
      t[k] = dt;
    }
    double cpu = (cpu_s() - cpu0) / iters;
    if (rc == 0) rc = ea_comm_allreduce(c, &cpu, 1, EA_COMM_F64, EA_COMM_SUM);
    if (rc < 0) {
      fprintf(stderr, "rank %d: %zu bytes: %s\n", r, bytes, strerror(-rc));
      return 1;
    }
    qsort(t, (size_t)iters, sizeof *t, cmp_d);
    double med = iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
    double alg = (double)bytes / med / 1e9, bus = alg * 2.0 * (W - 1) / W;
    if (r == 0) {
      if (json)
        printf(
            "%s\n  {\"bytes\": %zu, \"iters\": %d, \"time_us\": %.2f, \"algbw_gbps\": %.4f, "
            "\"busbw_gbps\": %.4f, \"cpu_us\": %.1f}",
            first ? "" : ",", bytes, iters, med * 1e6, alg, bus, cpu * 1e6);
      else
        printf("%12zu %6d %12.1f %12.3f %12.3f %12.1f\n", bytes, iters, med * 1e6, alg, bus,
               cpu * 1e6);
      fflush(stdout);
    }
    first = 0;
    free(t);
  }
  if (r == 0 && json) printf("\n]}\n");
  fflush(stdout); /* the child leaves through _exit, which does not flush */
  free(buf);
  ea_comm_free(c);
  return 0;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k')
    v *= 1024;
  else if (*end == 'M' || *end == 'm')
    v *= 1024 * 1024;
  else if (*end == 'G' || *end == 'g')
    v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

int main(int argc, char **argv) {
  int W = 2, json = 0;
  size_t lo = 1024, hi = 256u << 20;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-w") && i + 1 < argc)
      W = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--min") && i + 1 < argc)
      lo = parse_size(argv[++i]);
    else if (!strcmp(argv[i], "--max") && i + 1 < argc)
      hi = parse_size(argv[++i]);
    else if (!strcmp(argv[i], "--json"))
      json = 1;
    else {
      fprintf(stderr, "usage: %s [-w W] [--min BYTES] [--max BYTES] [--json]\n", argv[0]);
      return 2;
    }
  }
  if (W < 1 || W > MAXW || lo < 4 || hi < lo) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  /* Listeners first, in the parent, so every child knows every address. */
  static char addr[MAXW][EA_COMM_ADDR_MAX];
  const char *peers[MAXW];
  int lfd[MAXW];
  for (int r = 0; r < W; r++) {
    int rc = ea_comm_listen("127.0.0.1:0", &lfd[r], addr[r], sizeof addr[r]);
    if (rc < 0) {
      fprintf(stderr, "listen: %s\n", strerror(-rc));
      return 1;
    }
    peers[r] = addr[r];
  }
  fflush(stdout);
  pid_t pid[MAXW];
  for (int r = 0; r < W; r++) {
    pid[r] = fork();
    if (pid[r] < 0) {
      perror("fork");
      for (int k = 0; k < r; k++) kill(pid[k], SIGKILL);
      return 1;
    }
    if (pid[r] == 0) _exit(run_rank(W, r, peers, lfd[r], lo, hi, json));
  }
  int bad = 0;
  for (int r = 0; r < W; r++) {
    int st;
    /* A failing rank makes the others fail within the op timeout. */
    if (waitpid(pid[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
  }
  for (int r = 0; r < W; r++) close(lfd[r]);
  return bad;
}
