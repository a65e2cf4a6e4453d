/* Check suite for the built-in worker (train/worker.c) and the agent's worker
 * supervisor (agent/job/supervisor.c).
 *
 * The worker tests are the real thing without an agent: the test forks
 * worker processes that run ea_worker_main() on a socketpair and plays the
 * controller over IPC (PREPARE, COMMIT, PAUSE, STOP), with a small model and
 * a small corpus in a temp file.  What they assert is the elastic promise:
 *   - every rank of a generation reports the same loss and params digest for
 *     every step;
 *   - a worker SIGKILLed mid-run makes the survivors report FAILED promptly,
 *     and they are the same processes (no restart);
 *   - the next generation continues from the highest completed step: over
 *     the whole run, reported step numbers are contiguous, no step is
 *     reported by two generations and none is skipped;
 *   - a joiner (at a step boundary) gets the state by broadcast and reports
 *     the same digest as everyone else from its first step;
 *   - PAUSE keeps the state, training to train.steps ends in DONE with equal
 *     digests, STOP ends every process with status 0;
 *   - the loss trajectory equals an uninterrupted W=1 run
 *     (ea_trainer_step_local) within 1e-4 relative at every step.
 * The supervisor tests run it on a real uv loop: two real workers (this
 * binary re-executed in `worker` mode) from HELLO to exit status 0, and a
 * user command that speaks the protocol by hand, exits 7 and is restarted
 * from on_exit, next to one that ignores SIGTERM and is SIGKILLed on time.
 * Each ends by asserting the loop closes with no handle left.
 *
 * The figures the suite prints (steps/s per world size, death → FAILED,
 * COMMIT → first STEP) are measurements, not assertions.
 */
#include "ea_comm.h"
#include "ea_config.h"
#include "ea_ipc.h"
#include "ea_train.h"
#include "ea_worker.h"

#include "supervisor.h"

#include <check.h>

#include "worker_fork.h"
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define MAXW 8
/* Deadlines: generous against a loaded 2-core machine, and far below the
 * Check timeout so a hang is reported as what was being waited for. */
#define WAIT_MS 20000
/* How far the loss may drift from the W=1 reference: only the float
 * summation order differs (rank partial sums, then the ring). */
#define LOSS_RTOL 1e-4
/* A "mid-run" window: every rank has reported this many steps of the
 * current generation before the test moves on. */
#define RUN_STEPS 10

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the fake controller's view of each worker ---------------------------- */

typedef struct {
  pid_t pid;
  int fd;
  bool eof, dead;
  char addr[EA_COMM_ADDR_MAX];
  bool hello;
  uint64_t commit_gen; /* the generation we committed it to */
  double t_commit;
  uint64_t ready_gen, ready_next;
  uint64_t failed_gen;
  int failed_err;
  double t_failed;
  uint64_t aborted_gen, aborted_next;
  bool done;
  uint64_t done_next, done_digest;
  bool exiting;
  int exit_code;
  int64_t last_step;
  uint64_t last_step_gen;
  uint64_t steps_in_gen;
  int64_t first_step_in_gen;
  uint64_t first_digest_in_gen;
  double t_first, t_last;
} tw;

typedef struct {
  bool have;
  uint64_t gen;
  double loss;
  uint64_t digest;
  uint32_t reporters; /* workers that reported it */
} rec;

static struct {
  tw w[MAXW];
  int n;
  rec *steps;
  size_t cap;
  int64_t max_step;
  ea_ipc_msg *m;
  ea_config cfg;
  char dir[64], data[96], yaml[96];
} T;

static void make_corpus(void) {
  snprintf(T.dir, sizeof T.dir, "/tmp/ea-test-worker-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(T.dir));
  snprintf(T.data, sizeof T.data, "%s/corpus.txt", T.dir);
  FILE *f = fopen(T.data, "w");
  ck_assert_ptr_nonnull(f);
  static const char *const words[] = {
      "the",   "agent", "gossips", "with",      "its",   "peers", "and", "a",     "node", "fails",
      "while", "ranks", "reduce",  "gradients", "state", "moves", "to",  "every", "new",  "worker"};
  uint64_t x = 12345;
  for (int i = 0; i < 3000; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    fprintf(f, "%s%s", words[(x >> 33) % 20], (x >> 60) == 0 ? ".\n" : " ");
  }
  fclose(f);
}

static void setup(void) {
  memset(&T, 0, sizeof T);
  T.m = malloc(sizeof *T.m);
  ck_assert_ptr_nonnull(T.m);
  T.max_step = -1;
  make_corpus();
  ea_config_default(&T.cfg);
  T.cfg.train.context = 8;
  T.cfg.train.embed_dim = 8;
  T.cfg.train.hidden = 32;
  T.cfg.train.layers = 1;
  T.cfg.train.warmup_steps = 10;
  T.cfg.train.steps = 1000000; /* "forever": the test ends the run */
  T.cfg.distributed.global_batch = 24;
  T.cfg.distributed.micro_batch = 8;
  T.cfg.compute.workers_per_node = 3;
  snprintf(T.cfg.train.data, sizeof T.cfg.train.data, "%s", T.data);
}

static void teardown(void) {
  for (int i = 0; i < T.n; i++) {
    if (T.w[i].pid > 0) {
      kill(T.w[i].pid, SIGKILL);
      waitpid(T.w[i].pid, NULL, 0);
    }
    if (T.w[i].fd >= 0) close(T.w[i].fd);
  }
  unlink(T.data);
  if (T.yaml[0]) unlink(T.yaml);
  rmdir(T.dir);
  free(T.steps);
  free(T.m);
}

static int spawn_worker(void) {
  ck_assert_int_lt(T.n, MAXW);
  int i = T.n++;
  int fds[MAXW];
  for (int j = 0; j < i; j++) fds[j] = T.w[j].fd;
  pid_t pid;
  int fd = ea_test_fork_worker(&T.cfg, i, fds, i, &pid);
  memset(&T.w[i], 0, sizeof T.w[i]);
  T.w[i].pid = pid;
  T.w[i].fd = fd;
  T.w[i].last_step = -1;
  return i;
}

static void record_step(int i, const ea_ipc_msg *m, double t) {
  tw *w = &T.w[i];
  ck_assert_msg(m->gen == w->commit_gen,
                "worker %d reported step %" PRIu64 " of gen %" PRIu64 ", committed to %" PRIu64, i,
                m->step, m->gen, w->commit_gen);
  if (w->last_step_gen == m->gen) {
    ck_assert_msg((int64_t)m->step == w->last_step + 1,
                  "worker %d: step %" PRIu64 " after %" PRId64, i, m->step, w->last_step);
  } else {
    w->last_step_gen = m->gen;
    w->steps_in_gen = 0;
    w->first_step_in_gen = (int64_t)m->step;
    w->first_digest_in_gen = m->digest;
    w->t_first = t;
  }
  w->last_step = (int64_t)m->step;
  w->steps_in_gen++;
  w->t_last = t;
  if (m->step >= T.cap) {
    size_t nc = T.cap ? T.cap : 1024;
    while (nc <= m->step) nc *= 2;
    T.steps = realloc(T.steps, nc * sizeof *T.steps);
    ck_assert_ptr_nonnull(T.steps);
    memset(T.steps + T.cap, 0, (nc - T.cap) * sizeof *T.steps);
    T.cap = nc;
  }
  rec *r = &T.steps[m->step];
  bool only_dead = r->have;
  for (int j = 0; j < T.n; j++)
    if ((r->reporters & (1u << j)) && !T.w[j].dead) only_dead = false;
  if (r->have && only_dead && r->gen != m->gen) {
    /* Only a rank that has died since finished this step (a ring allreduce
     * can complete on one rank and fail on the others): its state died with
     * it, and the survivors redo the step.  Not a repeat for them. */
    printf("  step %" PRIu64 " was completed only by a rank that died; redone in gen %" PRIu64 "\n",
           m->step, m->gen);
    r->have = false;
  }
  if (!r->have) {
    *r = (rec){
        .have = true, .gen = m->gen, .loss = m->loss, .digest = m->digest, .reporters = 1u << i};
  } else {
    r->reporters |= 1u << i;
    ck_assert_msg(r->gen == m->gen,
                  "step %" PRIu64 " reported by gen %" PRIu64 " and again by gen %" PRIu64, m->step,
                  r->gen, m->gen);
    ck_assert_msg(r->digest == m->digest && r->loss == m->loss,
                  "step %" PRIu64 " gen %" PRIu64 ": worker %d digest %016" PRIx64
                  " loss %.9g, another rank %016" PRIx64 " %.9g",
                  m->step, m->gen, i, m->digest, m->loss, r->digest, r->loss);
  }
  if ((int64_t)m->step > T.max_step) T.max_step = (int64_t)m->step;
}

static void handle(int i, const ea_ipc_msg *m) {
  tw *w = &T.w[i];
  double t = now_s();
  switch (m->type) {
    case EA_IPC_HELLO:
      ck_assert_int_eq((pid_t)m->pid, w->pid);
      ck_assert_uint_eq(m->local_rank, (unsigned)i);
      snprintf(w->addr, sizeof w->addr, "%s", m->comm_addr);
      w->hello = true;
      break;
    case EA_IPC_READY:
      ck_assert_str_eq(m->comm_addr, w->addr);
      w->ready_gen = m->gen;
      w->ready_next = m->next_step;
      break;
    case EA_IPC_STEP:
      record_step(i, m, t);
      break;
    case EA_IPC_FAILED:
      w->failed_gen = m->gen;
      w->failed_err = m->error;
      w->t_failed = t;
      break;
    case EA_IPC_ABORTED:
      w->aborted_gen = m->gen;
      w->aborted_next = m->next_step;
      break;
    case EA_IPC_DONE:
      w->done = true;
      w->done_next = m->next_step;
      w->done_digest = m->digest;
      break;
    case EA_IPC_EXITING:
      w->exiting = true;
      w->exit_code = m->code;
      break;
    default:
      ck_abort_msg("worker %d sent %s", i, ea_ipc_type_name(m->type));
  }
}

typedef bool (*pred_fn)(uint32_t mask, uint64_t v);

/* Read and handle messages until pred holds or the deadline passes. */
static bool pump(pred_fn pred, uint32_t mask, uint64_t v, int timeout_ms) {
  const double deadline = now_s() + timeout_ms / 1e3;
  char err[200];
  for (;;) {
    if (pred(mask, v)) return true;
    double left = deadline - now_s();
    if (left <= 0) return false;
    struct pollfd p[MAXW];
    int idx[MAXW], np = 0;
    for (int i = 0; i < T.n; i++)
      if (T.w[i].fd >= 0 && !T.w[i].eof) {
        p[np] = (struct pollfd){.fd = T.w[i].fd, .events = POLLIN};
        idx[np++] = i;
      }
    int pr = poll(p, (nfds_t)np, (int)(left * 1e3) + 1);
    if (pr < 0 && errno == EINTR) continue;
    ck_assert_int_ge(pr, 0);
    for (int k = 0; k < np; k++) {
      if (!p[k].revents) continue;
      int rc = ea_ipc_recv(p[k].fd, T.m, 0, err, sizeof err);
      if (rc == -ECONNRESET)
        T.w[idx[k]].eof = true;
      else if (rc != -ETIMEDOUT) {
        ck_assert_msg(rc == 0, "worker %d: %s", idx[k], err);
        handle(idx[k], T.m);
      }
    }
  }
}

#define EACH(i, mask)           \
  for (int i = 0; i < T.n; i++) \
    if ((mask) & (1u << i))

static bool p_hello(uint32_t mask, uint64_t v) {
  (void)v;
  EACH(i, mask) if (!T.w[i].hello) return false;
  return true;
}
static bool p_ready(uint32_t mask, uint64_t gen) {
  EACH(i, mask) if (T.w[i].ready_gen != gen) return false;
  return true;
}
static bool p_failed(uint32_t mask, uint64_t gen) {
  EACH(i, mask) if (T.w[i].failed_gen != gen) return false;
  return true;
}
static bool p_aborted(uint32_t mask, uint64_t gen) {
  EACH(i, mask) if (T.w[i].aborted_gen != gen) return false;
  return true;
}
static bool p_done(uint32_t mask, uint64_t v) {
  (void)v;
  EACH(i, mask) if (!T.w[i].done) return false;
  return true;
}
static bool p_exiting(uint32_t mask, uint64_t v) {
  (void)v;
  EACH(i, mask) if (!T.w[i].exiting) return false;
  return true;
}
/* every worker has reported at least v steps of the generation it was
 * last committed to */
static bool p_steps(uint32_t mask, uint64_t v) {
  EACH(i, mask) {
    const tw *w = &T.w[i];
    if (w->last_step_gen != w->commit_gen || w->steps_in_gen < v) return false;
  }
  return true;
}

static void wait_for(pred_fn pred, uint32_t mask, uint64_t v, const char *what) {
  ck_assert_msg(pump(pred, mask, v, WAIT_MS), "timed out waiting for %s", what);
}

static void send_to(int i, const ea_ipc_msg *m) {
  int rc = ea_ipc_send(T.w[i].fd, m);
  ck_assert_msg(rc == 0, "send %s to worker %d: %d", ea_ipc_type_name(m->type), i, rc);
}

static void prepare(uint32_t mask, uint64_t gen, bool at_boundary) {
  ea_ipc_msg *m = malloc(sizeof *m);
  ea_ipc_msg_init(m, EA_IPC_PREPARE);
  m->gen = gen;
  m->at_boundary = at_boundary;
  EACH(i, mask) send_to(i, m);
  free(m);
}

/* Commit gen with ranks[r] = worker index; the root is the rank with the
 * highest READY next_step (the controller's rule).  Returns that step. */
static uint64_t commit(uint64_t gen, const int *ranks, int world) {
  uint32_t root = 0;
  for (int r = 1; r < world; r++)
    if (T.w[ranks[r]].ready_next > T.w[ranks[root]].ready_next) root = (uint32_t)r;
  ea_ipc_msg *m = malloc(sizeof *m);
  ea_ipc_msg_init(m, EA_IPC_COMMIT);
  m->gen = gen;
  m->world = (uint32_t)world;
  m->npeers = (uint32_t)world;
  m->sync_root = root;
  m->timeout_ms = 5000;
  for (int r = 0; r < world; r++)
    snprintf(m->peers[r], sizeof m->peers[r], "%s", T.w[ranks[r]].addr);
  double t = now_s();
  for (int r = 0; r < world; r++) {
    m->rank = (uint32_t)r;
    T.w[ranks[r]].commit_gen = gen;
    T.w[ranks[r]].t_commit = t;
    send_to(ranks[r], m);
  }
  free(m);
  return T.w[ranks[root]].ready_next;
}

/* Steps per second of a generation as rank 0 saw it (first to last STEP). */
static double rate(int i) {
  const tw *w = &T.w[i];
  return w->steps_in_gen > 1 ? (double)(w->steps_in_gen - 1) / (w->t_last - w->t_first) : 0;
}

static void stop_all(uint32_t mask) {
  ea_ipc_msg *m = malloc(sizeof *m);
  ea_ipc_msg_init(m, EA_IPC_STOP);
  EACH(i, mask) send_to(i, m);
  free(m);
  wait_for(p_exiting, mask, 0, "EXITING after STOP");
  EACH(i, mask) {
    ck_assert_int_eq(T.w[i].exit_code, 0);
    int st = 0;
    pid_t r = 0;
    for (double dl = now_s() + WAIT_MS / 1e3; r == 0 && now_s() < dl;) {
      r = waitpid(T.w[i].pid, &st, WNOHANG);
      if (r == 0) poll(NULL, 0, 5); /* a bounded wait for the exit to land */
    }
    ck_assert_msg(r == T.w[i].pid, "worker %d did not exit after STOP", i);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker %d: status %#x", i, st);
    T.w[i].pid = 0;
  }
}

/* Every step 0..max_step was reported, and its loss is the W=1 run's. */
static void check_trajectory(void) {
  ck_assert_int_ge(T.max_step, 0);
  for (int64_t s = 0; s <= T.max_step; s++)
    ck_assert_msg(T.steps[s].have, "step %" PRId64 " never reported", s);
  ea_train_config tc;
  char err[200];
  ck_assert_msg(ea_train_config_from(&tc, &T.cfg, err, sizeof err) == 0, "%s", err);
  ea_data *d;
  ck_assert_int_eq(ea_data_open(T.data, &d, err, sizeof err), 0);
  ea_trainer *t;
  ck_assert_int_eq(ea_trainer_new(&tc, d, &t, err, sizeof err), 0);
  double worst = 0;
  int64_t worst_at = 0;
  for (int64_t s = 0; s <= T.max_step; s++) {
    ea_train_stats st;
    ck_assert_int_eq(ea_trainer_step_local(t, &st), 0);
    double rel = fabs(T.steps[s].loss - st.loss) / fabs(st.loss);
    if (rel > worst) {
      worst = rel;
      worst_at = s;
    }
    ck_assert_msg(rel <= LOSS_RTOL,
                  "step %" PRId64 ": loss %.9g, the W=1 reference %.9g (rel %.2g)", s,
                  T.steps[s].loss, st.loss, rel);
  }
  printf("  trajectory: steps 0..%" PRId64
         " all reported once; loss vs W=1 worst rel diff %.2g at step %" PRId64 "\n",
         T.max_step, worst, worst_at);
  ea_trainer_free(t);
  ea_data_close(d);
}

/* ---- worker tests ---------------------------------------------------------- */

START_TEST(test_kill_reform_and_join) {
  setup();
  int a = spawn_worker(), b = spawn_worker(), c = spawn_worker();
  const uint32_t all3 = 1u << a | 1u << b | 1u << c;
  wait_for(p_hello, all3, 0, "HELLO from 3 workers");

  /* gen 1: W = 3 */
  prepare(all3, 1, false);
  wait_for(p_ready, all3, 1, "READY gen 1");
  int g1[] = {a, b, c};
  ck_assert_uint_eq(commit(1, g1, 3), 0);
  wait_for(p_steps, all3, RUN_STEPS, "gen 1 steps");
  double r3 = rate(a);
  printf("  gen 1 (W=3): first STEP %.1f ms after COMMIT, %.0f steps/s\n",
         (T.w[a].t_first - T.w[a].t_commit) * 1e3, r3);

  /* SIGKILL c mid-run: a and b fail promptly, and stay the same processes */
  const double t_kill = now_s();
  ck_assert_int_eq(kill(T.w[c].pid, SIGKILL), 0);
  T.w[c].dead = true;
  const uint32_t ab = 1u << a | 1u << b;
  wait_for(p_failed, ab, 1, "FAILED gen 1 on the survivors");
  double fail_ms = (fmax(T.w[a].t_failed, T.w[b].t_failed) - t_kill) * 1e3;
  printf("  SIGKILL of one rank -> FAILED on both survivors within %.1f ms (errors %d, %d)\n",
         fail_ms, T.w[a].failed_err, T.w[b].failed_err);
  int st;
  ck_assert_int_eq(waitpid(T.w[c].pid, &st, 0), T.w[c].pid);
  ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  T.w[c].pid = 0;
  ck_assert_int_eq(waitpid(T.w[a].pid, &st, WNOHANG), 0);
  ck_assert_int_eq(waitpid(T.w[b].pid, &st, WNOHANG), 0);

  /* gen 2: W = 2, from the highest completed step */
  prepare(ab, 2, false);
  wait_for(p_ready, ab, 2, "READY gen 2");
  int g2[] = {a, b};
  uint64_t from = commit(2, g2, 2);
  /* the survivors' highest completed step, each having reported all of its */
  ck_assert_int_eq((int64_t)from,
                   (T.w[a].last_step > T.w[b].last_step ? T.w[a].last_step : T.w[b].last_step) + 1);
  wait_for(p_steps, ab, RUN_STEPS, "gen 2 steps");
  ck_assert_int_eq(T.w[a].first_step_in_gen, (int64_t)from);
  ck_assert_int_eq(T.w[b].first_step_in_gen, (int64_t)from);
  double r2 = rate(a);
  printf("  gen 2 (W=2) after the failure: first STEP %.1f ms after COMMIT, %.0f steps/s\n",
         (T.w[a].t_first - T.w[a].t_commit) * 1e3, r2);

  /* gen 3: a new worker joins at a step boundary */
  int d = spawn_worker();
  const uint32_t abd = ab | 1u << d;
  wait_for(p_hello, 1u << d, 0, "HELLO from the joiner");
  prepare(abd, 3, true);
  wait_for(p_ready, abd, 3, "READY gen 3");
  ck_assert_uint_eq(T.w[d].ready_next, 0);
  int g3[] = {a, b, d};
  from = commit(3, g3, 3);
  ck_assert_uint_gt(from, 0);
  wait_for(p_steps, abd, RUN_STEPS, "gen 3 steps");
  /* the joiner's first step is the group's next step, with the same digest
   * (record_step already compared every rank's digest per step) */
  ck_assert_int_eq(T.w[d].first_step_in_gen, (int64_t)from);
  ck_assert_uint_eq(T.w[d].first_digest_in_gen, T.steps[from].digest);
  printf(
      "  gen 3 (W=3) with a joiner (state by broadcast): first STEP %.1f ms after COMMIT, %.0f "
      "steps/s\n",
      (T.w[d].t_first - T.w[d].t_commit) * 1e3, rate(a));

  stop_all(abd);
  check_trajectory();
  teardown();
}
END_TEST

START_TEST(test_join_pause_done) {
  setup();
  T.cfg.train.steps = 400;
  int a = spawn_worker(), b = spawn_worker();
  const uint32_t ab = 1u << a | 1u << b;
  wait_for(p_hello, ab, 0, "HELLO");

  /* gen 1: a alone (W = 1), b idle */
  prepare(1u << a, 1, false);
  wait_for(p_ready, 1u << a, 1, "READY gen 1");
  int g1[] = {a};
  commit(1, g1, 1);
  wait_for(p_steps, 1u << a, RUN_STEPS, "gen 1 steps");
  printf("  gen 1 (W=1): %.0f steps/s\n", rate(a));

  /* gen 2: b joins at a boundary */
  prepare(ab, 2, true);
  wait_for(p_ready, ab, 2, "READY gen 2");
  ck_assert_uint_eq(T.w[b].ready_next, 0);
  int g2[] = {a, b};
  uint64_t from = commit(2, g2, 2);
  wait_for(p_steps, ab, RUN_STEPS, "gen 2 steps");
  ck_assert_int_eq(T.w[b].first_step_in_gen, (int64_t)from);
  printf("  gen 2 (W=2): %.0f steps/s\n", rate(a));

  /* pause: both stop and keep their state (they may differ by one step:
   * the abort can land between ranks finishing the same allreduce) */
  ea_ipc_msg *m = malloc(sizeof *m);
  ea_ipc_msg_init(m, EA_IPC_PAUSE);
  snprintf(m->reason, sizeof m->reason, "minority side");
  send_to(a, m);
  send_to(b, m);
  free(m);
  wait_for(p_aborted, ab, 2, "ABORTED after PAUSE");
  int64_t gap = (int64_t)T.w[a].aborted_next - (int64_t)T.w[b].aborted_next;
  ck_assert_int_le(llabs(gap), 1);
  ck_assert_int_eq((int64_t)(T.w[a].aborted_next > T.w[b].aborted_next ? T.w[a].aborted_next
                                                                       : T.w[b].aborted_next),
                   T.max_step + 1);

  /* gen 3: resume and run to train.steps */
  prepare(ab, 3, false);
  wait_for(p_ready, ab, 3, "READY gen 3");
  ck_assert_uint_eq(T.w[a].ready_next, T.w[a].aborted_next);
  ck_assert_uint_eq(T.w[b].ready_next, T.w[b].aborted_next);
  int g3[] = {b, a}; /* ranks swapped: order is the controller's choice */
  commit(3, g3, 2);
  wait_for(p_done, ab, 0, "DONE");
  ck_assert_uint_eq(T.w[a].done_next, 400);
  ck_assert_uint_eq(T.w[b].done_next, 400);
  ck_assert_uint_eq(T.w[a].done_digest, T.w[b].done_digest);
  ck_assert_uint_eq(T.w[a].done_digest, T.steps[399].digest);
  ck_assert_int_eq(T.max_step, 399);

  stop_all(ab);
  check_trajectory();
  teardown();
}
END_TEST

/* A peer that stops answering without closing anything (SIGSTOP: a hung
 * process or a partition) leaves the others blocked in the allreduce until
 * the op timeout — unless the agent's PREPARE aborts it, which must answer
 * READY far sooner than that timeout. */
START_TEST(test_prepare_aborts_a_stuck_allreduce) {
  setup();
  int a = spawn_worker(), b = spawn_worker(), c = spawn_worker();
  const uint32_t all3 = 1u << a | 1u << b | 1u << c, ab = 1u << a | 1u << b;
  wait_for(p_hello, all3, 0, "HELLO");
  prepare(all3, 1, false);
  wait_for(p_ready, all3, 1, "READY gen 1");
  int g1[] = {a, b, c};
  commit(1, g1, 3); /* op timeout 5 s */
  wait_for(p_steps, all3, RUN_STEPS, "gen 1 steps");
  ck_assert_int_eq(kill(T.w[c].pid, SIGSTOP), 0);
  T.w[c].dead = true;
  /* a and b are now stuck (or about to be) in an allreduce with c */
  int64_t before = T.max_step;
  ck_assert(!pump(p_steps, ab, (uint64_t)(T.max_step + 5), 300)); /* no progress without c */
  ck_assert_int_le(T.max_step, before + 1);
  double t0 = now_s();
  prepare(ab, 2, false);
  wait_for(p_ready, ab, 2, "READY gen 2 from the stuck ranks");
  double ms = (now_s() - t0) * 1e3;
  printf("  PREPARE -> READY from ranks blocked on a stopped peer: %.1f ms (op timeout 5000 ms)\n",
         ms);
  ck_assert_msg(ms < 2500, "READY took %.0f ms: the abort did not cut the 5 s op timeout short",
                ms);
  int g2[] = {a, b};
  commit(2, g2, 2);
  wait_for(p_steps, ab, RUN_STEPS, "gen 2 steps");
  kill(T.w[c].pid, SIGKILL);
  int st;
  ck_assert_int_eq(waitpid(T.w[c].pid, &st, 0), T.w[c].pid);
  T.w[c].pid = 0;
  close(T.w[c].fd);
  T.w[c].fd = -1;
  stop_all(ab);
  check_trajectory();
  teardown();
}
END_TEST

/* A COMMIT naming a peer that never answers fails within its timeout, the
 * worker stays up, and a stale PREPARE is ignored. */
START_TEST(test_commit_timeout_and_stale_gen) {
  setup();
  int a = spawn_worker();
  wait_for(p_hello, 1u << a, 0, "HELLO");
  prepare(1u << a, 5, false);
  wait_for(p_ready, 1u << a, 5, "READY gen 5");
  ea_ipc_msg *m = malloc(sizeof *m);
  ea_ipc_msg_init(m, EA_IPC_COMMIT);
  m->gen = 5;
  m->world = m->npeers = 2;
  m->rank = 0;
  m->timeout_ms = 300;
  snprintf(m->peers[0], sizeof m->peers[0], "%s", T.w[a].addr);
  snprintf(m->peers[1], sizeof m->peers[1], "127.0.0.1:1"); /* nobody */
  T.w[a].commit_gen = 5;
  double t0 = now_s();
  send_to(a, m);
  wait_for(p_failed, 1u << a, 5, "FAILED after a connect timeout");
  double ms = (T.w[a].t_failed - t0) * 1e3;
  printf("  commit to an absent peer: FAILED (%d) after %.0f ms (timeout 300 ms)\n",
         T.w[a].failed_err, ms);
  ck_assert_int_eq(T.w[a].failed_err, -ETIMEDOUT);
  ck_assert(ms >= 250 && ms < 5000);
  /* older generation: ignored, no READY for it */
  prepare(1u << a, 4, false);
  /* a newer one is still obeyed, proving the worker is alive and reading */
  prepare(1u << a, 6, false);
  wait_for(p_ready, 1u << a, 6, "READY gen 6");
  ck_assert_uint_eq(T.w[a].ready_next, 0);
  free(m);
  stop_all(1u << a);
  teardown();
}
END_TEST

/* ---- supervisor tests ------------------------------------------------------ */

typedef struct {
  ea__sup *sup;
  uv_timer_t watchdog;
  bool timed_out;
  int hello[2], done[2], exiting[2], exits[2];
  int64_t status[2];
  int signal[2];
  int restarts;
  bool committed;
  char addr[2][EA_COMM_ADDR_MAX];
  uint64_t digest[2];
  double t_stop, t_exit[2];
  char reason[EA_IPC_TEXT_MAX];
  bool closed;
} sup_ctx;

static void sup_closed(void *arg) {
  ((sup_ctx *)arg)->closed = true;
}

static void maybe_finish(sup_ctx *c) {
  if (c->exits[0] && c->exits[1] && !c->closed) {
    uv_close((uv_handle_t *)&c->watchdog, NULL);
    ea__sup_free(c->sup, sup_closed, c);
  }
}

static void on_watchdog(uv_timer_t *t) {
  sup_ctx *c = t->data;
  c->timed_out = true;
  uv_close((uv_handle_t *)&c->watchdog, NULL);
  ea__sup_free(c->sup, sup_closed, c);
}

static void real_on_message(void *ctx, uint32_t idx, const ea_ipc_msg *m) {
  sup_ctx *c = ctx;
  ck_assert_uint_lt(idx, 2);
  switch (m->type) {
    case EA_IPC_HELLO:
      c->hello[idx]++;
      ck_assert_int_eq((int)m->pid, ea__sup_pid(c->sup, idx));
      ck_assert_uint_eq(m->local_rank, idx);
      snprintf(c->addr[idx], sizeof c->addr[idx], "%s", m->comm_addr);
      if (c->hello[0] && c->hello[1] && !c->committed) {
        c->committed = true;
        ea_ipc_msg *cm = malloc(sizeof *cm);
        ea_ipc_msg_init(cm, EA_IPC_COMMIT);
        cm->gen = 1;
        cm->world = cm->npeers = 2;
        cm->timeout_ms = 5000;
        for (int r = 0; r < 2; r++) snprintf(cm->peers[r], sizeof cm->peers[r], "%s", c->addr[r]);
        for (uint32_t r = 0; r < 2; r++) {
          cm->rank = r;
          ck_assert_int_eq(ea__sup_send(c->sup, r, cm), 0);
        }
        free(cm);
      }
      break;
    case EA_IPC_STEP:
      break;
    case EA_IPC_DONE:
      c->done[idx]++;
      c->digest[idx] = m->digest;
      if (c->done[0] && c->done[1]) {
        c->t_stop = now_s();
        ea__sup_stop_all(c->sup);
      }
      break;
    case EA_IPC_EXITING:
      c->exiting[idx]++;
      break;
    default:
      ck_abort_msg("worker %u sent %s", idx, ea_ipc_type_name(m->type));
  }
}

static void real_on_exit(void *ctx, uint32_t idx, int64_t status, int sig) {
  sup_ctx *c = ctx;
  c->exits[idx]++;
  c->status[idx] = status;
  c->signal[idx] = sig;
  c->t_exit[idx] = now_s();
  ck_assert(!ea__sup_running(c->sup, idx));
  maybe_finish(c);
}

static void write_yaml(uint32_t steps) {
  snprintf(T.yaml, sizeof T.yaml, "%s/job.yaml", T.dir);
  FILE *f = fopen(T.yaml, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f,
          "compute:\n  workers_per_node: 2\n"
          "distributed:\n  global_batch: 24\n  micro_batch: 8\n"
          "train:\n  data: %s\n  context: 8\n  embed_dim: 8\n  hidden: 32\n  layers: 1\n"
          "  warmup_steps: 10\n  steps: %u\n",
          T.data, steps);
  fclose(f);
}

static void run_loop(uv_loop_t *loop, sup_ctx *c) {
  c->watchdog.data = c;
  uv_timer_init(loop, &c->watchdog);
  uv_timer_start(&c->watchdog, on_watchdog, WAIT_MS, 0);
  uv_run(loop, UV_RUN_DEFAULT);
  ck_assert_msg(!c->timed_out, "supervisor test timed out");
  ck_assert(c->closed);
  ck_assert_int_eq(uv_loop_close(loop), 0); /* no handle left behind */
}

START_TEST(test_supervisor_real_workers) {
  setup();
  write_yaml(5);
  uv_loop_t loop;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  sup_ctx *c = calloc(1, sizeof *c);
  ea__sup_opts o = {.workers = 2, .config_path = T.yaml};
  ea__sup_cbs cb = {.on_message = real_on_message, .on_exit = real_on_exit};
  ck_assert_int_eq(ea__sup_new(&loop, &o, &cb, c, &c->sup), 0);
  ck_assert_int_eq(ea__sup_start_all(c->sup), 0);
  ck_assert(ea__sup_running(c->sup, 0) && ea__sup_running(c->sup, 1));
  ck_assert_int_eq(ea__sup_start(c->sup, 0), -EBUSY);
  ck_assert_int_eq(ea__sup_start(c->sup, 2), -ERANGE);
  run_loop(&loop, c);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(c->hello[i], 1);
    ck_assert_int_eq(c->done[i], 1);
    ck_assert_int_eq(c->exiting[i], 1);
    ck_assert_int_eq(c->exits[i], 1);
    ck_assert_int_eq(c->status[i], 0);
    ck_assert_int_eq(c->signal[i], 0);
  }
  ck_assert_uint_eq(c->digest[0], c->digest[1]);
  printf(
      "  supervisor: 2 built-in workers HELLO -> 5 steps -> DONE -> STOP -> exit 0 in %.0f ms "
      "after STOP\n",
      (fmax(c->t_exit[0], c->t_exit[1]) - c->t_stop) * 1e3);
  free(c);
  teardown();
}
END_TEST

/* Slot 0: a user's program that speaks the protocol by hand (one EXITING
 * packet) and exits 7; it is restarted once from on_exit.  Slot 1 ignores
 * SIGTERM (and fd 3): stop must escalate to SIGKILL on time. */
static void user_on_message(void *ctx, uint32_t idx, const ea_ipc_msg *m) {
  sup_ctx *c = ctx;
  ck_assert_uint_eq(idx, 0);
  ck_assert_int_eq(m->type, EA_IPC_EXITING);
  ck_assert_int_eq(m->code, 7);
  snprintf(c->reason, sizeof c->reason, "%s", m->reason);
  c->exiting[idx]++;
}

static void user_on_exit(void *ctx, uint32_t idx, int64_t status, int sig) {
  sup_ctx *c = ctx;
  c->exits[idx]++;
  c->status[idx] = status;
  c->signal[idx] = sig;
  c->t_exit[idx] = now_s();
  if (idx == 0 && c->restarts == 0) {
    c->restarts++;
    ck_assert_int_eq(ea__sup_start(c->sup, 0), 0); /* the slot is free again */
    c->exits[0] = 0;
    return;
  }
  maybe_finish(c);
}

static void on_started(uv_timer_t *t) {
  /* give slot 1's shell time to set its trap, then stop it */
  sup_ctx *c = t->data;
  c->t_stop = now_s();
  ea__sup_stop(c->sup, 1);
  uv_close((uv_handle_t *)t, NULL);
}

START_TEST(test_supervisor_user_command_and_escalation) {
  setup();
  uv_loop_t loop;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  sup_ctx *c = calloc(1, sizeof *c);
  /* {"type":"exiting","reason":"x","code":7} packed by hand; dash's printf
   * writes it with one write(), i.e. one packet. */
  ea__sup_opts o = {
      .workers = 2,
      .worker_command =
          "if [ \"$EA_LOCAL_RANK\" = 0 ] && [ \"$EA_IPC_FD\" = 3 ]; then "
          "printf '\\203\\244type\\247exiting\\246reason\\241x\\244code\\007' >&3; exit 7; "
          "else trap '' TERM; exec sleep 30; fi",
      .stop_grace_ms = 150,
      .term_grace_ms = 150,
  };
  ea__sup_cbs cb = {.on_message = user_on_message, .on_exit = user_on_exit};
  ck_assert_int_eq(ea__sup_new(&loop, &o, &cb, c, &c->sup), 0);
  ck_assert_int_eq(ea__sup_start_all(c->sup), 0);
  uv_timer_t started;
  started.data = c;
  uv_timer_init(&loop, &started);
  uv_timer_start(&started, on_started, 300, 0);
  run_loop(&loop, c);
  ck_assert_int_eq(c->restarts, 1);
  ck_assert_int_eq(c->exiting[0], 2); /* once per run, before each exit */
  ck_assert_str_eq(c->reason, "x");
  ck_assert_int_eq(c->status[0], 7);
  ck_assert_int_eq(c->signal[0], 0);
  ck_assert_int_eq(c->signal[1], SIGKILL);
  double ms = (c->t_exit[1] - c->t_stop) * 1e3;
  printf("  supervisor: STOP ignored, SIGTERM ignored, SIGKILL after %.0f ms (grace 150 + 150)\n",
         ms);
  ck_assert(ms >= 290 && ms < 5000);
  free(c);
  teardown();
}
END_TEST

static Suite *worker_suite(void) {
  Suite *s = suite_create("worker");
  TCase *tc = tcase_create("elastic");
  tcase_set_timeout(tc, 90);
  tcase_add_test(tc, test_kill_reform_and_join);
  tcase_add_test(tc, test_join_pause_done);
  tcase_add_test(tc, test_prepare_aborts_a_stuck_allreduce);
  tcase_add_test(tc, test_commit_timeout_and_stale_gen);
  suite_add_tcase(s, tc);
  TCase *ts = tcase_create("supervisor");
  tcase_set_timeout(ts, 60);
  tcase_add_test(ts, test_supervisor_real_workers);
  tcase_add_test(ts, test_supervisor_user_command_and_escalation);
  suite_add_tcase(s, ts);
  return s;
}

/* `test_worker worker --ipc-fd N --config F`: what the supervisor test
 * spawns through /proc/self/exe, standing in for `elastic-agent worker`. */
static int worker_mode(int argc, char **argv) {
  int fd = -1;
  const char *cfgpath = NULL;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--ipc-fd") == 0)
      fd = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--config") == 0)
      cfgpath = argv[i + 1];
  }
  ea_config cfg;
  ea_config_default(&cfg);
  char err[300];
  if (fd < 0 || !cfgpath || ea_config_load(&cfg, cfgpath, err, sizeof err) != 0) {
    fprintf(stderr, "test_worker worker: bad arguments or config: %s\n",
            cfgpath ? err : "no --config");
    return 2;
  }
  return ea_worker_main(fd, &cfg) == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "worker") == 0) return worker_mode(argc, argv);
  ea_train_blas_threads(1);
  SRunner *sr = srunner_create(worker_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
