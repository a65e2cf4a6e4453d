/* worker.c — the built-in worker: the trainer, a communicator re-formed in
 * place each generation, and the agent's commands over the IPC socket.
 *
 * Two threads.  The training thread owns the trainer and the communicator
 * and does everything that blocks for long: computing, allreduce, state
 * sync, connecting.  The reader thread only reads the agent's packets and
 * turns them into flags under one mutex — with one exception that is the
 * reason it exists: a PREPARE that says "now" (a rank died), a PAUSE or a
 * STOP calls ea_comm_abort() on the live communicator at once, so an
 * allreduce stuck on a dead or partitioned peer returns within milliseconds
 * instead of waiting out the op timeout.  The communicator pointer is
 * published and withdrawn under the mutex and aborts happen under it, which
 * is exactly ea_comm's rule (abort must have returned before free).  Only
 * the training thread sends, so replies leave in the order things happened.
 *
 * Why no process restarts.  An allreduce that fails leaves the trainer
 * untouched — ea_trainer_apply() is only called after a successful
 * allreduce — so a survivor still holds the last step it completed, and its
 * next generation continues from there.  Ranks can disagree by one step
 * (a ring allreduce can finish on some ranks while failing on others), so
 * every generation starts with a state sync: one small MAX-allreduce tells
 * every rank the highest and lowest step, whether all params digests and
 * state sizes agree, and which step the designated sync root holds; every
 * rank takes the same decision from the same numbers (skip, or broadcast
 * from the root, or fail), so no rank waits on a broadcast nobody sends.
 * After a broadcast a second MAX-allreduce proves the digests are equal.
 *
 * Checkpoints need no coordination either.  A COMMIT that carries
 * ckpt_interval makes every rank, right after it completes a step count
 * that is a multiple of it, copy its byte range of the serialized state
 * (ea_ckpt_shard_range of rank/world) into a memfd shared with the agent,
 * hashing it on the way, and send CKPT_STAGED with the memfd attached
 * (SCM_RIGHTS).  Ranks that completed the same step hold bit-identical
 * state, so W independent copies make one consistent checkpoint.  The copy
 * is the only stall; the agent writes the file while training goes on, and
 * answers CKPT_DONE, after which the memfd may be overwritten: one shard in
 * flight per worker, and a checkpoint that comes due before then waits or
 * is skipped (and counted), as the COMMIT's ckpt_busy says.  The memfd is
 * created once and passed with each CKPT_STAGED, so the agent keeps no
 * per-worker staging state; it outlives this process while the agent holds
 * its copy of the fd, so a shard being written survives a worker crash.
 *
 * A cold start (COMMIT with `resume`) makes the sync root load the
 * checkpoint (ea_trainer_resume: newest that verifies and loads, or the one
 * named) after connecting and before the state sync, which then hands it to
 * every rank like a joiner's state: one reader of the shared file system,
 * one decision, and the sync's digest check covers the result.
 */
#include "ea_worker.h"

#include "ea_ckpt.h"
#include "ea_comm.h"
#include "ea_ipc.h"
#include "ea_log.h"
#include "ea_train.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_COMM_BIND "127.0.0.1:0"

typedef struct {
  int ipc_fd;
  const ea_config *cfg;
  uint32_t local_rank;
  char bind[EA_COMM_ADDR_MAX];
  /* EA_TEST_COMPUTE_DELAY_MS: tests only — this much longer in every
   * step's forward/backward, a slow accelerator (tests/e2e/test_straggler.sh). */
  uint32_t test_delay_ms;
  ea_data *data;
  ea_trainer *t;
  uint64_t steps; /* train.steps: stop here */
  uint8_t *state; /* serialized-state scratch for sync */
  size_t state_len;
  int lfd;
  char addr[EA_COMM_ADDR_MAX];
  int wake_fd; /* eventfd: the reader thread must quit */

  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* ---- under mu ---- */
  ea_comm *comm; /* published for the reader's abort */
  bool stop;
  bool agent_gone;
  bool pause;
  bool prepare;
  uint64_t prepare_gen;
  bool prepare_nccl;
  bool commit_pending;
  ea_ipc_msg *commit; /* the pending COMMIT */
  uint64_t max_gen;   /* newest generation the agent announced */
  bool ckpt_inflight; /* a staged shard the agent has not answered yet */
  uint64_t ckpt_inflight_step;
  /* EA_IPC_CKPT_AT: stage after completing ckpt_at_step steps of gen
   * ckpt_at_gen (the last moment before a mass preemption) */
  bool ckpt_at;
  uint64_t ckpt_at_gen, ckpt_at_step;

  /* ---- training thread only ---- */
  ea_ipc_msg *plan; /* the COMMIT being formed */
  ea_ipc_msg *out;  /* outgoing scratch */
  bool training;
  /* EA_IPC_CKPT_AGAIN: stage the final checkpoint again (under mu) */
  bool ckpt_again;
  uint64_t ckpt_again_gen, ckpt_again_step;
  uint64_t gen; /* generation of the communicator in use / last one */
  uint32_t rank, world;
  /* checkpoints, as the last COMMIT set them */
  uint32_t ckpt_interval; /* 0: off */
  uint32_t op_timeout_ms; /* the COMMIT's timeout_ms: bounds a busy wait */
  bool ckpt_skip;         /* busy policy "skip" (else "wait") */
  uint64_t ckpt_skipped;  /* checkpoints not staged, for any reason */
  int stage_fd;           /* the memfd, created on first use */
  uint8_t *stage_map;     /* its mapping, stage_len bytes */
  size_t stage_len;
  /* a shard being staged by the stager while the next step computes */
  bool stage_pending;
  uint64_t stage_step, stage_off, stage_len_now;
  double stage_waited; /* seconds it waited for the previous shard (busy) */

  /* ---- the stager thread and its hand-off (under smu) ---- */
  pthread_t stager;
  bool stager_started;
  pthread_mutex_t smu;
  pthread_cond_t scv;
  bool s_job, s_done, s_quit;
  int s_rc;
  uint64_t s_hash;

  /* ---- reader thread only ---- */
  ea_ipc_msg *in;
} worker;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void send_out(worker *w) {
  int rc = ea_ipc_send(w->ipc_fd, w->out);
  /* The agent being gone is noticed by the reader (end of stream); log the
   * rest, which would be a bug in what we send. */
  if (rc && rc != -EPIPE && rc != -ECONNRESET)
    ea_log(EA_LOG_WARN, "worker", "send %s: %s", ea_ipc_type_name(w->out->type), strerror(-rc));
}

/* ---- the reader thread ----------------------------------------------- */

/* Abort the live communicator, if any.  Caller holds mu. */
static void abort_locked(worker *w) {
  if (w->comm) ea_comm_abort(w->comm);
}

static void on_packet(worker *w, const ea_ipc_msg *m) {
  pthread_mutex_lock(&w->mu);
  switch ((int)m->type) {
    case EA_IPC_PREPARE:
      if (m->gen < w->max_gen) {
        ea_log(EA_LOG_INFO, "worker",
               "ignoring prepare gen=%" PRIu64 ": gen %" PRIu64 " already announced", m->gen,
               w->max_gen);
        break;
      }
      w->max_gen = m->gen;
      w->prepare = true;
      w->prepare_gen = m->gen;
      w->prepare_nccl = m->make_nccl_id;
      if (w->commit_pending && w->commit->gen < m->gen) w->commit_pending = false;
      if (!m->at_boundary) abort_locked(w);
      break;
    case EA_IPC_COMMIT:
      if (m->gen < w->max_gen) {
        ea_log(EA_LOG_INFO, "worker",
               "ignoring commit gen=%" PRIu64 ": gen %" PRIu64 " already announced", m->gen,
               w->max_gen);
        break;
      }
      w->max_gen = m->gen;
      memcpy(w->commit, m, sizeof *m);
      w->commit_pending = true;
      /* A running communicator of an older generation is superseded. */
      if (w->comm && ea_comm_generation(w->comm) < m->gen) abort_locked(w);
      break;
    case EA_IPC_PAUSE:
      ea_log(EA_LOG_INFO, "worker", "pause: %s", m->reason);
      w->pause = true;
      abort_locked(w);
      break;
    case EA_IPC_STOP:
      w->stop = true;
      abort_locked(w);
      break;
    case EA_IPC_CKPT_DONE:
      if (!w->ckpt_inflight || m->step != w->ckpt_inflight_step) {
        ea_log(EA_LOG_WARN, "worker", "ckpt_done for step %" PRIu64 " with none in flight, ignored",
               m->step);
        break;
      }
      w->ckpt_inflight = false;
      if (m->status)
        ea_log(EA_LOG_WARN, "worker", "checkpoint of step %" PRIu64 " failed in the agent: %s",
               m->step, m->message);
      break;
    case EA_IPC_CKPT_AT: /* the training thread stages it, or says it cannot (train_one) */
      ea_log(EA_LOG_INFO, "worker", "ckpt_at gen=%" PRIu64 " step=%" PRIu64 ": staging then",
             m->gen, m->step);
      w->ckpt_at = true;
      w->ckpt_at_gen = m->gen;
      w->ckpt_at_step = m->step;
      break;
    case EA_IPC_CKPT_AGAIN: /* the training thread checks it applies (run) */
      w->ckpt_again = true;
      w->ckpt_again_gen = m->gen;
      w->ckpt_again_step = m->step;
      break;
    default:
      ea_log(EA_LOG_WARN, "worker", "unexpected %s from the agent, ignored",
             ea_ipc_type_name(m->type));
      break;
  }
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void *reader_main(void *arg) {
  worker *w = arg;
  char err[160];
  for (;;) {
    struct pollfd p[2] = {{.fd = w->ipc_fd, .events = POLLIN},
                          {.fd = w->wake_fd, .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents) break;
    int rc = ea_ipc_recv(w->ipc_fd, w->in, 0, err, sizeof err);
    if (rc == 0) {
      on_packet(w, w->in);
      continue;
    }
    if (rc == -ETIMEDOUT) continue;
    if (rc == -EBADMSG || rc == -EMSGSIZE) {
      ea_log(EA_LOG_WARN, "worker", "bad packet from the agent dropped: %s", err);
      continue;
    }
    /* End of stream or a socket error: nobody is left to obey. */
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    w->agent_gone = true;
    abort_locked(w);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    break;
  }
  return NULL;
}

/* ---- the training thread ----------------------------------------------- */

/* Withdraw and free the communicator.  Once it is withdrawn under mu the
 * reader cannot be inside ea_comm_abort() on it, so freeing is safe. */
static void drop_comm(worker *w) {
  pthread_mutex_lock(&w->mu);
  ea_comm *c = w->comm;
  w->comm = NULL;
  pthread_mutex_unlock(&w->mu);
  ea_comm_free(c);
  w->training = false;
}

/* Something the agent sent since supersedes what the training thread is
 * doing: an error it causes is expected, not a failure to report. */
static bool interrupted(worker *w) {
  pthread_mutex_lock(&w->mu);
  bool i = w->stop || w->pause || w->prepare || w->commit_pending;
  pthread_mutex_unlock(&w->mu);
  return i;
}

static void fail(worker *w, uint64_t gen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void stage_finish(worker *w);

static void fail(worker *w, uint64_t gen, int rc, const char *fmt, ...) {
  stage_finish(w); /* the state of its step is intact: the shard still counts */
  /* Which peer it could not exchange with, if the communicator can tell:
   * read before it is freed (only this thread changes w->comm). */
  uint32_t peer = 0;
  char why[EA_COMM_BLAME_MAX] = "";
  bool blamed = w->comm && ea_comm_blame(w->comm, &peer, why, sizeof why);
  drop_comm(w);
  char what[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (interrupted(w)) {
    ea_log(EA_LOG_INFO, "worker", "gen=%" PRIu64 " %s: %s (superseded by the agent)", gen, what,
           strerror(-rc));
    return;
  }
  ea_log(EA_LOG_WARN, "worker", "gen=%" PRIu64 " %s: %s%s%s", gen, what, strerror(-rc),
         blamed ? "; " : "", why);
  ea_ipc_msg_init(w->out, EA_IPC_FAILED);
  w->out->gen = gen;
  w->out->error = rc < 0 ? rc : -EIO;
  /* bounded so that it fits: the reason, the error, the peer's part */
  snprintf(w->out->message, sizeof w->out->message, "%.150s: %.40s%s%.60s", what, strerror(-rc),
           blamed ? "; " : "", why);
  w->out->has_peer = blamed;
  w->out->peer = peer;
  w->out->next_step = ea_trainer_step(w->t);
  send_out(w);
}

/* The generation's first collective ops: agree on one state.  Slots of the
 * MAX-allreduce (as int64; ~x turns a MAX into a MIN without overflow):
 *   0 next_step   1 ~next_step   2 digest   3 ~digest
 *   4 the root's next_step (others −1)   5 state size   6 ~state size */
static int sync_state(worker *w, ea_comm *c, uint32_t root, bool loaded, bool *broadcast) {
  *broadcast = false;
  const int64_t step = (int64_t)ea_trainer_step(w->t);
  const int64_t dig = (int64_t)ea_trainer_params_digest(w->t);
  const int64_t size = (int64_t)w->state_len;
  /* v[7]: the root loaded a checkpoint just now — its state is the plan's
   * choice even where a left-behind live state elsewhere counts more
   * steps (a newer generation's checkpoint can be behind it). */
  int64_t v[8] = {
      step, ~step, dig, ~dig, w->rank == root ? step : -1, size, ~size, w->rank == root && loaded};
  int rc = ea_comm_allreduce(c, v, 8, EA_COMM_I64, EA_COMM_MAX);
  if (rc) return rc;
  if (v[5] != ~v[6]) {
    ea_log(EA_LOG_ERROR, "worker",
           "state sync: ranks have different state sizes (model or data differ)");
    return -EPROTO;
  }
  if (v[4] != v[0] && !v[7]) {
    ea_log(EA_LOG_ERROR, "worker",
           "state sync: sync_root %u holds step %" PRId64 ", the highest is %" PRId64, root, v[4],
           v[0]);
    return -EPROTO;
  }
  if (v[0] == ~v[1] && v[2] == ~v[3]) return 0; /* every rank holds the same state */

  *broadcast = true;
  if (w->rank == root) {
    rc = ea_trainer_state_serialize(w->t, w->state, w->state_len);
    if (rc) return rc;
  }
  rc = ea_comm_broadcast(c, w->state, w->state_len, root);
  if (rc) return rc;
  if (w->rank != root) {
    char err[160];
    rc = ea_trainer_state_load(w->t, w->state, w->state_len, err, sizeof err);
    if (rc) {
      ea_log(EA_LOG_ERROR, "worker", "state sync: the broadcast state does not load: %s", err);
      return -EPROTO;
    }
  }
  const int64_t d2 = (int64_t)ea_trainer_params_digest(w->t);
  int64_t check[2] = {d2, ~d2};
  rc = ea_comm_allreduce(c, check, 2, EA_COMM_I64, EA_COMM_MAX);
  if (rc) return rc;
  if (check[0] != ~check[1]) {
    ea_log(EA_LOG_ERROR, "worker", "state sync: params digests differ after the broadcast");
    return -EPROTO;
  }
  return 0;
}

static void do_prepare(worker *w, uint64_t gen, bool nccl) {
  drop_comm(w);
  ea_ipc_msg_init(w->out, EA_IPC_READY);
  w->out->gen = gen;
  snprintf(w->out->comm_addr, sizeof w->out->comm_addr, "%s", w->addr);
  w->out->next_step = ea_trainer_step(w->t);
  w->out->digest = ea_trainer_params_digest(w->t);
  if (nccl) {
    int rc = ea_comm_nccl_unique_id(w->out->nccl_id);
    if (rc) {
      fail(w, gen, rc, "making the nccl unique id");
      return;
    }
    w->out->has_nccl_id = true;
  }
  send_out(w);
}

/* ---- checkpoints -------------------------------------------------------- */

/* Size the staging memfd to len bytes and map it.  Only called with no
 * shard in flight: shrinking a file the agent still maps would fault its
 * reads.  MAP_POPULATE allocates the pages now (a generation change), not
 * inside the first checkpoint's stall. */
static int stage_ensure(worker *w, size_t len) {
  if (w->stage_fd < 0) {
    w->stage_fd = memfd_create("ea-ckpt-staging", MFD_CLOEXEC);
    if (w->stage_fd < 0) return -errno;
  }
  if (w->stage_map && w->stage_len == len) return 0;
  if (w->stage_map) munmap(w->stage_map, w->stage_len);
  w->stage_map = NULL;
  w->stage_len = 0;
  if (ftruncate(w->stage_fd, (off_t)len) < 0) return -errno;
  if (len == 0) return 0;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, w->stage_fd, 0);
  if (p == MAP_FAILED) return -errno;
  w->stage_map = p;
  w->stage_len = len;
  return 0;
}

static void shard_range(worker *w, uint64_t *off, uint64_t *len) {
  ea_ckpt_shard_range(w->state_len, w->world, w->rank, off, len);
}

static void ckpt_skipped(worker *w, uint64_t step, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void ckpt_skipped(worker *w, uint64_t step, const char *fmt, ...) {
  w->ckpt_skipped++;
  ea_ipc_msg_init(w->out, EA_IPC_CKPT_SKIPPED);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->out->reason, sizeof w->out->reason, fmt, ap);
  va_end(ap);
  ea_log(EA_LOG_WARN, "worker", "checkpoint of step %" PRIu64 " skipped: %s", step, w->out->reason);
  w->out->gen = w->gen;
  w->out->step = step;
  w->out->rank = w->rank;
  w->out->world = w->world;
  w->out->skipped = w->ckpt_skipped;
  send_out(w);
}

/* The stager: copies a shard range of the state into the memfd and hashes
 * it (ea_trainer_state_stage) while the training thread computes the next
 * step.  compute() only reads the params and writes the gradients, which
 * are not part of the state, so the copy sees the state of the step that
 * was due; whatever changes the state (apply, a sync, a resume) first waits
 * for it (stage_finish). */
static void *stager_main(void *arg) {
  worker *w = arg;
  pthread_mutex_lock(&w->smu);
  for (;;) {
    while (!w->s_job && !w->s_quit) pthread_cond_wait(&w->scv, &w->smu);
    if (w->s_quit) break;
    pthread_mutex_unlock(&w->smu);
    uint64_t hash = 0;
    int rc =
        ea_trainer_state_stage(w->t, w->stage_off, w->stage_map, (size_t)w->stage_len_now, &hash);
    pthread_mutex_lock(&w->smu);
    w->s_rc = rc;
    w->s_hash = hash;
    w->s_job = false;
    w->s_done = true;
    pthread_cond_broadcast(&w->scv);
  }
  pthread_mutex_unlock(&w->smu);
  return NULL;
}

static int stager_start(worker *w) {
  if (w->stager_started) return 0;
  int rc = pthread_create(&w->stager, NULL, stager_main, w);
  if (rc) {
    ea_log(EA_LOG_WARN, "worker", "no stager thread (%s): checkpoints stage in the step",
           strerror(rc));
    return -rc;
  }
  w->stager_started = true;
  return 0;
}

static void stager_stop(worker *w) {
  if (!w->stager_started) return;
  pthread_mutex_lock(&w->smu);
  while (w->s_job) pthread_cond_wait(&w->scv, &w->smu);
  w->s_quit = true;
  pthread_cond_broadcast(&w->scv);
  pthread_mutex_unlock(&w->smu);
  pthread_join(w->stager, NULL);
  w->stager_started = false;
}

/* The trainer has just completed `step` steps: if a checkpoint is due,
 * hand this rank's shard of that state to the stager (stage_finish
 * completes it). */
static void maybe_checkpoint(worker *w, uint64_t step) {
  /* The last step is always saved: the job ends there (job.h: success is
   * train.steps reached with its final checkpoint committed); so is the
   * step a CKPT_AT names (the last moment before a mass preemption). */
  bool last = step == w->steps;
  pthread_mutex_lock(&w->mu);
  if (w->ckpt_at && w->ckpt_at_gen == w->gen && w->ckpt_at_step == step) {
    w->ckpt_at = false;
    last = true; /* never skipped for a busy shard: it waits */
  }
  pthread_mutex_unlock(&w->mu);
  if (!w->ckpt_interval || (step % w->ckpt_interval && !last)) return;
  const double t0 = now_s();
  double waited = 0;
  pthread_mutex_lock(&w->mu);
  if (w->ckpt_inflight) {
    const uint64_t prev = w->ckpt_inflight_step;
    if (w->ckpt_skip && !last) { /* the final one waits: nothing follows it */
      pthread_mutex_unlock(&w->mu);
      ckpt_skipped(w, step, "busy: step %" PRIu64 " is still being written", prev);
      return;
    }
    /* Busy policy "wait": block until the agent answers, or until the
     * agent wants something else (which ends this checkpoint) — but not
     * past half the communicator's op timeout: the other ranks are waiting
     * for this one in the next allreduce, and a wait as long as the timeout
     * would fail the whole generation over a slow disk. */
    const uint32_t limit_ms = w->op_timeout_ms / 2;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += limit_ms / 1000;
    dl.tv_nsec += (long)(limit_ms % 1000) * 1000000;
    if (dl.tv_nsec >= 1000000000) dl.tv_sec++, dl.tv_nsec -= 1000000000;
    int wr = 0;
    while (w->ckpt_inflight && !w->stop && !w->pause && !w->prepare && !w->commit_pending &&
           wr != ETIMEDOUT)
      wr = limit_ms ? pthread_cond_timedwait(&w->cv, &w->mu, &dl)
                    : pthread_cond_wait(&w->cv, &w->mu);
    if (w->ckpt_inflight) {
      pthread_mutex_unlock(&w->mu);
      if (wr == ETIMEDOUT)
        ckpt_skipped(w, step, "busy: step %" PRIu64 " still being written after %u ms", prev,
                     limit_ms);
      else
        ckpt_skipped(w, step, "interrupted while waiting for step %" PRIu64, prev);
      return;
    }
    waited = now_s() - t0;
  }
  pthread_mutex_unlock(&w->mu);

  uint64_t off, len;
  shard_range(w, &off, &len);
  int rc = stage_ensure(w, (size_t)len);
  if (rc) {
    ckpt_skipped(w, step, "staging memfd of %" PRIu64 " bytes: %s", len, strerror(-rc));
    return;
  }
  w->stage_step = step;
  w->stage_off = off;
  w->stage_len_now = len;
  w->stage_waited = waited;
  w->stage_pending = true;
  if (stager_start(w) == 0) {
    pthread_mutex_lock(&w->smu);
    w->s_job = true;
    w->s_done = false;
    pthread_cond_signal(&w->scv);
    pthread_mutex_unlock(&w->smu);
  } else { /* no thread: stage here and now */
    w->s_rc = ea_trainer_state_stage(w->t, off, w->stage_map, (size_t)len, &w->s_hash);
    w->s_done = true;
  }
}

/* The shard maybe_checkpoint handed to the stager is complete: wait for it
 * (the training thread's stall: the copy that did not fit inside the step
 * that computed meanwhile) and tell the agent.  Called before anything
 * changes the trainer's state (apply, a sync, a resume) and before any
 * message that must follow the shard's (DONE, FAILED, ABORTED). */
static void stage_finish(worker *w) {
  if (!w->stage_pending) return;
  const double t1 = now_s();
  pthread_mutex_lock(&w->smu);
  while (!w->s_done) pthread_cond_wait(&w->scv, &w->smu);
  w->s_done = false;
  int rc = w->s_rc;
  const uint64_t hash = w->s_hash;
  pthread_mutex_unlock(&w->smu);
  const double stall = now_s() - t1;
  w->stage_pending = false;
  const uint64_t step = w->stage_step, off = w->stage_off, len = w->stage_len_now;
  const double waited = w->stage_waited;
  if (rc) {
    ckpt_skipped(w, step, "staging: %s", strerror(-rc));
    return;
  }
  ea_ipc_msg_init(w->out, EA_IPC_CKPT_STAGED);
  w->out->gen = w->gen;
  w->out->step = step;
  w->out->rank = w->rank;
  w->out->world = w->world;
  w->out->offset = off;
  w->out->length = len;
  w->out->total = w->state_len;
  w->out->hash = hash;
  w->out->stall_us = (uint64_t)(stall * 1e6);
  w->out->wait_us = (uint64_t)(waited * 1e6);
  w->out->skipped = w->ckpt_skipped;
  pthread_mutex_lock(&w->mu);
  w->ckpt_inflight = true;
  w->ckpt_inflight_step = step;
  pthread_mutex_unlock(&w->mu);
  rc = ea_ipc_send_fd(w->ipc_fd, w->out, w->stage_fd);
  if (rc) {
    /* Nobody will answer (the agent is gone, which the reader notices). */
    pthread_mutex_lock(&w->mu);
    w->ckpt_inflight = false;
    pthread_mutex_unlock(&w->mu);
    if (rc != -EPIPE && rc != -ECONNRESET)
      ea_log(EA_LOG_WARN, "worker", "send ckpt_staged: %s", strerror(-rc));
  }
}

/* The COMMIT names a checkpoint (the plan has no sync source): load it.
 * Normally this rank holds no state yet (a cold start); a live state here
 * is one the rendezvous left behind as older than the newest checkpoint
 * (ea_rdzv_set_latest_ckpt), and the checkpoint replaces it.  Sets
 * *loaded when a checkpoint was loaded.  False when the generation failed
 * (reported). */
static bool resume(worker *w, const ea_ipc_msg *m, bool *loaded) {
  *loaded = false;
  if (ea_trainer_step(w->t) != 0)
    ea_log(EA_LOG_INFO, "worker",
           "the live state at step %" PRIu64
           " is older than the newest checkpoint (the plan syncs from no rank): loading %s",
           ea_trainer_step(w->t), m->resume);
  const bool latest = strcmp(m->resume, "latest") == 0;
  ea_trainer_resume_info info;
  char err[512];
  int rc =
      ea_trainer_resume(w->t, m->ckpt_dir, m->resume, !m->ckpt_verify_size, &info, err, sizeof err);
  if (rc == -ENOENT && latest) {
    ea_log(EA_LOG_INFO, "worker", "no checkpoint in %s: starting at step 0", m->ckpt_dir);
    return true;
  }
  if (rc) {
    fail(w, m->gen, rc, "resume: %s", err);
    return false;
  }
  if (info.fallbacks)
    ea_log(EA_LOG_WARN, "alert",
           "resume passed over %u damaged checkpoint(s) and loaded %s; first reason: %s",
           info.fallbacks, info.name, info.why);
  ea_log(EA_LOG_INFO, "worker",
         "resumed from %s/%s: step %" PRIu64 " (written at world %u), %.1f ms", m->ckpt_dir,
         info.name, info.step, info.world_size, info.seconds * 1e3);
  *loaded = true;
  ea_ipc_msg_init(w->out, EA_IPC_CKPT_LOADED);
  w->out->gen = m->gen;
  w->out->step = info.step;
  snprintf(w->out->name, sizeof w->out->name, "%s", info.name);
  w->out->digest = ea_trainer_params_digest(w->t);
  w->out->fallbacks = info.fallbacks;
  snprintf(w->out->message, sizeof w->out->message, "%.*s", (int)sizeof w->out->message - 1,
           info.why);
  w->out->seconds = info.seconds;
  send_out(w);
  return true;
}

static void do_commit(worker *w) {
  const ea_ipc_msg *m = w->plan;
  drop_comm(w);
  w->gen = m->gen;
  w->rank = m->rank;
  w->world = m->world;
  w->ckpt_interval = m->ckpt_interval;
  w->ckpt_skip = m->ckpt_skip;
  w->op_timeout_ms = m->timeout_ms;
  if (w->ckpt_interval) {
    pthread_mutex_lock(&w->mu);
    bool busy = w->ckpt_inflight;
    pthread_mutex_unlock(&w->mu);
    uint64_t off, len;
    shard_range(w, &off, &len);
    /* Pre-size the staging buffer now, outside any stall; with a shard in
     * flight it is resized at the next checkpoint instead. */
    if (!busy) {
      int rc = stage_ensure(w, (size_t)len);
      if (rc)
        ea_log(EA_LOG_WARN, "worker", "staging memfd of %" PRIu64 " bytes: %s", len, strerror(-rc));
    }
  }
  const char *peers[EA_IPC_MAX_PEERS];
  for (uint32_t i = 0; i < m->npeers; i++) peers[i] = m->peers[i];
  ea_comm_plan p;
  ea_comm_plan_init(&p);
  p.backend = m->backend;
  p.rank = m->rank;
  p.world = m->world;
  p.generation = m->gen;
  p.timeout_ms = m->timeout_ms;
  p.peers = m->npeers ? peers : NULL;
  p.listen_fd = w->lfd;
  if (m->has_nccl_id) memcpy(p.nccl_id, m->nccl_id, sizeof p.nccl_id);
  p.cuda_device = (int)w->local_rank;
  p.has_hello_key = m->has_ring_token;
  if (m->has_ring_token) memcpy(p.hello_key, m->ring_token, sizeof p.hello_key);

  const double t0 = now_s();
  ea_comm *c;
  int rc = ea_comm_new(&p, &c);
  if (rc) {
    fail(w, m->gen, rc, "communicator of rank %u/%u", m->rank, m->world);
    return;
  }
  pthread_mutex_lock(&w->mu);
  w->comm = c;
  /* Anything that arrived since this COMMIT was taken supersedes it; the
   * reader could not abort a communicator it did not see yet. */
  if (w->stop || w->pause || w->prepare || w->commit_pending) ea_comm_abort(c);
  pthread_mutex_unlock(&w->mu);

  rc = ea_comm_connect(c);
  ea_comm_stats cs;
  ea_comm_get_stats(c, &cs);
  if (cs.hellos_refused)
    ea_log(EA_LOG_WARN, "worker",
           "gen=%" PRIu64 " refused %" PRIu64
           " ring hello%s without this generation's token (not from a cluster member: "
           "docs/security.md)",
           m->gen, cs.hellos_refused, cs.hellos_refused == 1 ? "" : "s");
  if (rc) {
    fail(w, m->gen, rc, "connecting rank %u/%u", m->rank, m->world);
    return;
  }
  const double t1 = now_s();
  bool loaded = false;
  if (m->resume[0] && m->rank == m->sync_root && !resume(w, m, &loaded)) return;
  bool bcast;
  rc = sync_state(w, c, m->sync_root, loaded, &bcast);
  if (rc) {
    fail(w, m->gen, rc, "state sync from rank %u", m->sync_root);
    return;
  }
  ea_log(EA_LOG_INFO, "worker",
         "gen=%" PRIu64 " rank=%u world=%u step=%" PRIu64 " connect_ms=%.1f sync_ms=%.1f sync=%s",
         m->gen, m->rank, m->world, ea_trainer_step(w->t), (t1 - t0) * 1e3, (now_s() - t1) * 1e3,
         bcast ? (m->rank == m->sync_root ? "sent" : "received") : "in-sync");
  w->training = true;
}

/* A CKPT_AT this worker cannot meet: a step it has completed already, or
 * another generation's.  Said at once, so the controller asks again. */
static void ckpt_at_check(worker *w, uint64_t step) {
  pthread_mutex_lock(&w->mu);
  bool past = w->ckpt_at && (w->ckpt_at_gen != w->gen || w->ckpt_at_step <= step ||
                             w->ckpt_at_step > w->steps || !w->ckpt_interval);
  const uint64_t at = w->ckpt_at_step, gen = w->ckpt_at_gen;
  if (past) w->ckpt_at = false;
  pthread_mutex_unlock(&w->mu);
  if (!past) return;
  if (gen != w->gen)
    ckpt_skipped(w, at, "ckpt_at names generation %" PRIu64 ", this worker runs %" PRIu64, gen,
                 w->gen);
  else if (!w->ckpt_interval)
    ckpt_skipped(w, at, "checkpoints are off (checkpoint.save_interval_steps 0)");
  else if (at > w->steps)
    ckpt_skipped(w, at, "step %" PRIu64 " is past train.steps %" PRIu64, at, w->steps);
  else
    ckpt_skipped(w, at, "step %" PRIu64 " is already completed (at %" PRIu64 ")", at, step);
}

static void train_one(worker *w) {
  ea_comm *c = w->comm; /* only this thread changes it */
  const uint64_t step = ea_trainer_step(w->t);
  ckpt_at_check(w, step);
  if (step >= w->steps) {
    stage_finish(w); /* the final shard goes before DONE */
    drop_comm(w);
    ea_ipc_msg_init(w->out, EA_IPC_DONE);
    w->out->gen = w->gen;
    w->out->next_step = step;
    w->out->digest = ea_trainer_params_digest(w->t);
    send_out(w);
    return;
  }
  const double t0 = now_s();
  int rc = ea_trainer_compute(w->t, w->rank, w->world);
  if (rc) {
    fail(w, w->gen, rc, "computing step %" PRIu64, step);
    return;
  }
  if (w->test_delay_ms) {
    struct timespec d = {w->test_delay_ms / 1000, (long)(w->test_delay_ms % 1000) * 1000000L};
    while (nanosleep(&d, &d) < 0 && errno == EINTR) {
    }
  }
  const double t1 = now_s();
  size_t n;
  float *g = ea_trainer_grad_buffer(w->t, &n);
  rc = ea_comm_allreduce(c, g, n, EA_COMM_F32, EA_COMM_SUM);
  if (rc) {
    fail(w, w->gen, rc, "allreduce of step %" PRIu64, step);
    return;
  }
  stage_finish(w); /* apply changes the state the stager copies */
  ea_train_stats st;
  rc = ea_trainer_apply(w->t, &st);
  if (rc) {
    /* Every rank applied the same sum and fails the same way: the state
     * stays at this step everywhere, for the controller to decide. */
    fail(w, w->gen, rc, "step %" PRIu64 ": loss or gradient is not finite", step);
    return;
  }
  uint64_t b, e;
  ea_train_rank_range(step, ea_trainer_config(w->t)->global_batch, w->rank, w->world, &b, &e);
  ea_ipc_msg_init(w->out, EA_IPC_STEP);
  w->out->gen = w->gen;
  w->out->step = st.step;
  w->out->loss = st.loss;
  w->out->digest = ea_trainer_params_digest(w->t);
  w->out->samples = e - b;
  w->out->seconds = now_s() - t0;
  w->out->has_grad_norm = true;
  w->out->grad_norm = st.grad_norm;
  w->out->has_compute_seconds = true;
  w->out->compute_seconds = t1 - t0;
  send_out(w);
  maybe_checkpoint(w, st.step + 1);
}

static void run(worker *w) {
  for (;;) {
    pthread_mutex_lock(&w->mu);
    while (!w->stop && !w->pause && !w->prepare && !w->commit_pending && !w->training &&
           !w->ckpt_again)
      pthread_cond_wait(&w->cv, &w->mu);
    if (w->stage_pending &&
        (w->stop || w->pause || w->prepare || w->commit_pending || w->ckpt_again)) {
      pthread_mutex_unlock(&w->mu);
      stage_finish(w); /* before whatever comes next touches the state */
      continue;
    }
    if (w->stop) {
      pthread_mutex_unlock(&w->mu);
      return;
    }
    if (w->pause) {
      w->pause = false;
      pthread_mutex_unlock(&w->mu);
      drop_comm(w);
      ea_ipc_msg_init(w->out, EA_IPC_ABORTED);
      w->out->gen = w->gen;
      w->out->next_step = ea_trainer_step(w->t);
      send_out(w);
      continue;
    }
    if (w->prepare) {
      w->prepare = false;
      uint64_t gen = w->prepare_gen;
      bool nccl = w->prepare_nccl;
      pthread_mutex_unlock(&w->mu);
      do_prepare(w, gen, nccl);
      continue;
    }
    if (w->commit_pending) {
      w->commit_pending = false;
      ea_ipc_msg *tmp = w->plan;
      w->plan = w->commit;
      w->commit = tmp;
      pthread_mutex_unlock(&w->mu);
      do_commit(w);
      continue;
    }
    if (w->ckpt_again) {
      w->ckpt_again = false;
      const bool busy = w->ckpt_inflight;
      const uint64_t gen = w->ckpt_again_gen, step = w->ckpt_again_step;
      pthread_mutex_unlock(&w->mu);
      /* Only a worker that finished in that generation still holds that
       * state; one whose last shard is still being written gets its answer
       * first (and the controller retries again if it failed). */
      if (busy || w->training || gen != w->gen || step != w->steps ||
          ea_trainer_step(w->t) != w->steps) {
        ea_log(EA_LOG_INFO, "worker", "ckpt_again gen=%" PRIu64 " step=%" PRIu64 " ignored%s", gen,
               step, busy ? ": a shard is in flight" : "");
        continue;
      }
      ea_log(EA_LOG_INFO, "worker", "staging the final checkpoint (step %" PRIu64 ") again",
             w->steps);
      maybe_checkpoint(w, w->steps);
      stage_finish(w); /* no step follows to overlap it with */
      continue;
    }
    pthread_mutex_unlock(&w->mu);
    train_one(w);
  }
}

/* ---- setup -------------------------------------------------------------- */

static void exiting(worker *w, const char *reason, int code) {
  ea_ipc_msg_init(w->out, EA_IPC_EXITING);
  snprintf(w->out->reason, sizeof w->out->reason, "%s", reason);
  w->out->code = code;
  send_out(w);
}

static void set_blas_threads(const ea_config *cfg) {
  if (getenv("OPENBLAS_NUM_THREADS")) return;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  uint32_t per = cfg->compute.workers_per_node ? cfg->compute.workers_per_node : 1;
  long n = cpus > 0 ? cpus / (long)per : 1;
  ea_train_blas_threads(n < 1 ? 1 : (int)n);
}

static int setup(worker *w, char *err, size_t errlen) {
  w->out = malloc(sizeof *w->out);
  w->in = malloc(sizeof *w->in);
  w->commit = malloc(sizeof *w->commit);
  w->plan = malloc(sizeof *w->plan);
  if (!w->out || !w->in || !w->commit || !w->plan) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  ea_train_config tc;
  int rc = ea_train_config_from(&tc, w->cfg, err, errlen);
  if (rc) return rc;
  w->steps = tc.steps;
  rc = ea_data_open(w->cfg->train.data, &w->data, err, errlen);
  if (rc) return rc;
  rc = ea_trainer_new(&tc, w->data, &w->t, err, errlen);
  if (rc) return rc;
  w->state_len = ea_trainer_state_size(w->t);
  w->state = malloc(w->state_len);
  if (!w->state) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  rc = ea_comm_listen(w->bind, &w->lfd, w->addr, sizeof w->addr);
  if (rc) {
    snprintf(err, errlen, "EA_COMM_BIND %s: %s", w->bind, strerror(-rc));
    return rc;
  }
  w->wake_fd = eventfd(0, EFD_CLOEXEC);
  if (w->wake_fd < 0) {
    rc = -errno;
    snprintf(err, errlen, "eventfd: %s", strerror(errno));
    return rc;
  }
  return 0;
}

int ea_worker_main(int ipc_fd, const ea_config *cfg) {
  signal(SIGPIPE, SIG_IGN); /* a vanished peer is an error return, not a death */
  worker *w = calloc(1, sizeof *w);
  if (!w) return -ENOMEM;
  w->ipc_fd = ipc_fd;
  w->cfg = cfg;
  w->lfd = -1;
  w->wake_fd = -1;
  w->stage_fd = -1;
  const char *lr = getenv("EA_LOCAL_RANK");
  w->local_rank = lr ? (uint32_t)strtoul(lr, NULL, 10) : 0;
  const char *bind = getenv("EA_COMM_BIND");
  snprintf(w->bind, sizeof w->bind, "%s", bind && *bind ? bind : DEFAULT_COMM_BIND);
  const char *slow = getenv("EA_TEST_COMPUTE_DELAY_MS");
  w->test_delay_ms = slow ? (uint32_t)strtoul(slow, NULL, 10) : 0;
  if (w->test_delay_ms > 60000) w->test_delay_ms = 60000;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  pthread_mutex_init(&w->smu, NULL);
  pthread_cond_init(&w->scv, NULL);
  set_blas_threads(cfg);

  char err[256] = "";
  int rc = setup(w, err, sizeof err);
  bool reader = false;
  pthread_t th;
  if (rc == 0) {
    rc = -pthread_create(&th, NULL, reader_main, w);
    if (rc) snprintf(err, sizeof err, "pthread_create: %s", strerror(-rc));
    reader = rc == 0;
  }
  if (rc) {
    ea_log(EA_LOG_ERROR, "worker", "cannot start: %s", err);
    if (w->out) exiting(w, err, 1);
  } else {
    ea_log(EA_LOG_INFO, "worker", "pid=%d local_rank=%u comm=%s step=%" PRIu64, (int)getpid(),
           w->local_rank, w->addr, ea_trainer_step(w->t));
    ea_ipc_msg_init(w->out, EA_IPC_HELLO);
    w->out->pid = (uint64_t)getpid();
    w->out->local_rank = w->local_rank;
    snprintf(w->out->comm_addr, sizeof w->out->comm_addr, "%s", w->addr);
    w->out->next_step = ea_trainer_step(w->t);
    w->out->digest = ea_trainer_params_digest(w->t);
    send_out(w);
    run(w);
    drop_comm(w);
    pthread_mutex_lock(&w->mu);
    bool gone = w->agent_gone;
    pthread_mutex_unlock(&w->mu);
    if (!gone) exiting(w, "stop", 0);
    rc = gone ? -ECONNRESET : 0;
  }
  if (reader) {
    uint64_t one = 1;
    ssize_t wr = write(w->wake_fd, &one, sizeof one);
    (void)wr; /* an eventfd write of 1 cannot fail short of a bug */
    pthread_join(th, NULL);
  }
  if (w->wake_fd >= 0) close(w->wake_fd);
  if (w->lfd >= 0) close(w->lfd);
  stager_stop(w);
  if (w->stage_map) munmap(w->stage_map, w->stage_len);
  if (w->stage_fd >= 0) close(w->stage_fd);
  ea_trainer_free(w->t);
  ea_data_close(w->data);
  free(w->state);
  free(w->out);
  free(w->in);
  free(w->commit);
  free(w->plan);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->scv);
  pthread_mutex_destroy(&w->smu);
  free(w);
  return rc;
}
