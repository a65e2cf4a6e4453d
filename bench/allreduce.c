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
 *   build/bench/allreduce --stream [--min BYTES] [--max BYTES] [--json]
 *
 * --stream is the wire's baseline: one loopback TCP connection between two
 * processes (TCP_NODELAY, kernel-autotuned buffers, as the ring's sockets),
 * the sender writes each size in one blocking send loop, the receiver reads
 * it into one buffer and answers one byte; time per transfer from the first
 * write to that byte, median over the same number of repetitions.  Its GB/s
 * (bytes / time, printed in the busbw column) is what one TCP stream carries
 * on this machine: the ceiling a ring link is compared against.
 *
 * Benchmarks report; they do not assert (a failed op or a wrong result is
 * still an error exit).  Figures on a shared machine are noisy.
 */
#include "ea_comm.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
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

/* --stream: plain TCP streams, no protocol, no reduction.  Process r sends
 * `bytes` per op to its right neighbour and receives `bytes` per op from its
 * left, both at once in one non-blocking poll loop (as a ring rank does);
 * with one link (sfd or rfd < 0) it only sends or only receives.  An op
 * starts when the parent writes a byte to `go` and is over when this process
 * writes one to `done`; after the last op it writes its CPU seconds per op
 * to `res`. */
static int stream_rank(int sfd, int rfd, size_t bytes, int iters, int go, int done, int res) {
  char *buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
  char *sink = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!buf || !sink) return 1;
  memset(buf, 0, bytes);
  memset(sink, 0, bytes);
  double cpu0 = 0;
  for (int k = 0; k <= iters; k++) { /* op 0 warms up */
    char c;
    if (read(go, &c, 1) != 1) return 1;
    if (k == 1) cpu0 = cpu_s();
    size_t sent = sfd < 0 ? bytes : 0, got = rfd < 0 ? bytes : 0;
    while (sent < bytes || got < bytes) {
      struct pollfd pfd[2] = {{.fd = sent < bytes ? sfd : -1, .events = POLLOUT},
                              {.fd = got < bytes ? rfd : -1, .events = POLLIN}};
      if (poll(pfd, 2, 120000) <= 0) return 1;
      if (pfd[0].revents) {
        ssize_t n = send(sfd, buf + sent, bytes - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EINTR) return 1;
        if (n > 0) sent += (size_t)n;
      }
      if (pfd[1].revents) {
        ssize_t n = recv(rfd, sink + got, bytes - got, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return 1;
        if (n > 0) got += (size_t)n;
      }
    }
    if (write(done, &c, 1) != 1) return 1;
  }
  double cpu = (cpu_s() - cpu0) / iters;
  free(buf);
  free(sink);
  return write(res, &cpu, sizeof cpu) == (ssize_t)sizeof cpu ? 0 : 1;
}

static int tcp_pair(int *a, int *b) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof sa;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 1) < 0 ||
      getsockname(lfd, (struct sockaddr *)&sa, &al) < 0)
    return -1;
  *a = socket(AF_INET, SOCK_STREAM, 0);
  if (*a < 0 || connect(*a, (struct sockaddr *)&sa, sizeof sa) < 0) return -1;
  *b = accept(lfd, NULL, NULL);
  close(lfd);
  if (*b < 0) return -1;
  setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return 0;
}

/* The baseline of the ring's links, timed as the ring is: per op, from a
 * common start to the last process done, median over ops.  W = 1: one
 * stream, process 0 → process 1; W ≥ 2: W processes, links r → r+1. */
static int stream_main(int W, size_t lo, size_t hi, int json) {
  int P = W == 1 ? 2 : W, nlinks = W == 1 ? 1 : W;
  if (json)
    printf("{\"impl\": \"tcp_stream\", \"world\": %d, \"results\": [", W);
  else
    printf("# %s, loopback\n%12s %6s %12s %12s %12s\n",
           W == 1 ? "one TCP stream" : "a ring of plain TCP streams (each rank sends and receives)",
           "bytes", "iters", "time_us", "GB/s", "cpu_us");
  int first = 1;
  for (size_t bytes = lo; bytes <= hi; bytes *= 4) {
    int iters = iters_for(bytes), sfd[MAXW], rfd[MAXW], go[MAXW][2], done[2], res[2];
    for (int r = 0; r < P; r++) sfd[r] = rfd[r] = -1;
    for (int r = 0; r < nlinks; r++)
      if (tcp_pair(&sfd[r], &rfd[(r + 1) % P]) < 0) {
        perror("stream: connect");
        return 1;
      }
    if (pipe(done) < 0 || pipe(res) < 0) return 1;
    fflush(stdout);
    pid_t pid[MAXW];
    for (int r = 0; r < P; r++) {
      if (pipe(go[r]) < 0 || (pid[r] = fork()) < 0) return 1;
      if (pid[r] == 0) {
        for (int k = 0; k < P; k++)
          if (k != r) close(sfd[k]), close(rfd[k]);
        fcntl(sfd[r], F_SETFL, O_NONBLOCK);
        fcntl(rfd[r], F_SETFL, O_NONBLOCK);
        _exit(stream_rank(sfd[r], rfd[r], bytes, iters, go[r][0], done[1], res[1]));
      }
      close(go[r][0]);
    }
    for (int r = 0; r < P; r++) close(sfd[r]), close(rfd[r]);
    close(done[1]);
    close(res[1]);
    double *t = malloc((size_t)(iters + 1) * sizeof *t), cpu = 0, v;
    int bad = !t;
    for (int k = 0; !bad && k <= iters; k++) {
      double t0 = now_s();
      for (int r = 0; r < P; r++) bad |= write(go[r][1], "g", 1) != 1;
      char c;
      for (int r = 0; r < P; r++) bad |= read(done[0], &c, 1) != 1;
      t[k] = now_s() - t0;
    }
    for (int r = 0; !bad && r < P; r++) {
      bad |= read(res[0], &v, sizeof v) != (ssize_t)sizeof v;
      cpu += v;
    }
    for (int r = 0; r < P; r++) close(go[r][1]);
    close(done[0]);
    close(res[0]);
    for (int r = 0; r < P; r++) {
      int st;
      if (waitpid(pid[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "stream: process %d: status %#x\n", r, st);
        bad = 1;
      }
    }
    if (bad) {
      fprintf(stderr, "stream: %zu bytes: a process failed\n", bytes);
      return 1;
    }
    qsort(t + 1, (size_t)iters, sizeof *t, cmp_d);
    double med = iters % 2 ? t[1 + iters / 2] : 0.5 * (t[iters / 2] + t[1 + iters / 2]);
    double bw = (double)bytes / med / 1e9;
    if (json)
      printf(
          "%s\n  {\"bytes\": %zu, \"iters\": %d, \"time_us\": %.2f, \"busbw_gbps\": %.4f, "
          "\"cpu_us\": %.1f}",
          first ? "" : ",", bytes, iters, med * 1e6, bw, cpu * 1e6);
    else
      printf("%12zu %6d %12.1f %12.3f %12.1f\n", bytes, iters, med * 1e6, bw, cpu * 1e6);
    fflush(stdout);
    free(t);
    first = 0;
  }
  if (json) printf("\n]}\n");
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
  int W = 0, json = 0, stream = 0;
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
    else if (!strcmp(argv[i], "--stream"))
      stream = 1;
    else {
      fprintf(stderr, "usage: %s [-w W | --stream] [--min BYTES] [--max BYTES] [--json]\n",
              argv[0]);
      return 2;
    }
  }
  if (!W) W = stream ? 1 : 2;
  if (W < 1 || W > MAXW || lo < 4 || hi < lo) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  if (stream) return stream_main(W, lo, hi, json);
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
