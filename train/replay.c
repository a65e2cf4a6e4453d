/* replay.c — a data-parallel job of any world size, run inside one process,
 * bit for bit as W workers on the tcp backend would run it.
 *
 * The elastic semantics make a step's result depend on the world size only
 * through the order of the float sums: each rank sums its own samples
 * (ea_trainer_compute, the same code the workers run), and the ring adds
 * the W partial sums in its fixed order.  So a step at world size W is
 * every rank's ea_trainer_compute, ea_comm_ring_reduce (the ring's own
 * schedule and kernels, not a copy of them), and ea_trainer_apply of the
 * result.  The chaos harness replays a whole run this way and compares the
 * params digest at every step; a copy of the ring's order in the harness
 * would break silently the day the ring changed.
 *
 * The compute is as much as the whole cluster did, so the ranks of a step
 * are shared by up to `threads` threads, each with a trainer of its own
 * holding the same state: every trainer applies the same reduced gradient
 * and the update is deterministic, so they stay bit-identical (apply runs
 * on each thread, compute is split by rank k ≡ thread mod threads).  The
 * threads meet at three barriers per step: start, parts done, sum ready.
 */
#include "ea_train.h"

#include "ea_comm.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ea_train_replay replay;

typedef struct {
  replay *rp;
  unsigned idx;
  ea_trainer *t;
  pthread_t th;
  int rc; /* sticky, read by the main thread after the parts barrier */
} helper;

struct ea_train_replay {
  unsigned nth;    /* threads taking part, the caller's included */
  unsigned nalloc; /* helpers (and trainers) allocated: nth or more */
  helper *h;       /* h[0] runs on the caller's thread */
  pthread_barrier_t start, parts_done, reduced_ready;
  bool barriers;
  /* Helpers wait here until nth is final (a thread that fails to start
   * lowers it) and the barriers exist. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool go;
  uint32_t W, max_world;
  bool quit;
  float **parts; /* max_world rank sums */
  float *reduced;
  size_t n;
};

/* Thread j's share of a step: ranks j, j+nth, … into parts[]. */
static int compute_share(replay *rp, helper *h) {
  size_t n;
  float *g = ea_trainer_grad_buffer(h->t, &n);
  for (uint32_t k = h->idx; k < rp->W; k += rp->nth) {
    int rc = ea_trainer_compute(h->t, k, rp->W);
    if (rc < 0) return rc;
    memcpy(rp->parts[k], g, n * sizeof *g);
  }
  return 0;
}

static int apply_reduced(replay *rp, helper *h, ea_train_stats *st) {
  size_t n;
  float *g = ea_trainer_grad_buffer(h->t, &n);
  memcpy(g, rp->reduced, n * sizeof *g);
  return ea_trainer_apply(h->t, st);
}

static void *helper_main(void *arg) {
  helper *h = arg;
  replay *rp = h->rp;
  pthread_mutex_lock(&rp->mu);
  while (!rp->go) pthread_cond_wait(&rp->cv, &rp->mu);
  pthread_mutex_unlock(&rp->mu);
  for (;;) {
    pthread_barrier_wait(&rp->start);
    if (rp->quit) break;
    int rc = compute_share(rp, h);
    if (rc < 0 && !h->rc) h->rc = rc;
    pthread_barrier_wait(&rp->parts_done);
    pthread_barrier_wait(&rp->reduced_ready);
    ea_train_stats st;
    rc = apply_reduced(rp, h, &st);
    if (rc < 0 && !h->rc) h->rc = rc;
  }
  return NULL;
}

int ea_train_replay_new(const ea_train_config *c, const ea_data *data, uint32_t max_world,
                        unsigned threads, ea_train_replay **out, char *err, size_t errlen) {
  *out = NULL;
  if (max_world == 0) {
    if (err && errlen) snprintf(err, errlen, "replay: max_world is 0");
    return -EINVAL;
  }
  if (threads < 1) threads = 1;
  if (threads > max_world) threads = max_world;
  replay *rp = calloc(1, sizeof *rp);
  if (!rp) return -ENOMEM;
  rp->max_world = max_world;
  rp->nth = threads;
  pthread_mutex_init(&rp->mu, NULL);
  pthread_cond_init(&rp->cv, NULL);
  rp->h = calloc(threads, sizeof *rp->h);
  int rc = rp->h ? 0 : -ENOMEM;
  if (rp->h) rp->nalloc = threads;
  for (unsigned j = 0; rc == 0 && j < threads; j++) {
    rp->h[j].rp = rp;
    rp->h[j].idx = j;
    rc = ea_trainer_new(c, data, &rp->h[j].t, err, errlen);
  }
  if (rc == 0) {
    ea_trainer_grad_buffer(rp->h[0].t, &rp->n);
    rp->parts = calloc(max_world, sizeof *rp->parts);
    rp->reduced = malloc(rp->n * sizeof(float));
    if (!rp->parts || !rp->reduced) rc = -ENOMEM;
    for (uint32_t k = 0; rc == 0 && k < max_world; k++)
      if (!(rp->parts[k] = malloc(rp->n * sizeof(float)))) rc = -ENOMEM;
  }
  if (rc) {
    ea_train_replay_free(rp); /* no helper was started yet */
    return rc;
  }
  /* Start the helpers; if one cannot start, run with those that did (the
   * caller's thread alone computes every rank, at worst). */
  unsigned started = 1;
  while (started < threads &&
         pthread_create(&rp->h[started].th, NULL, helper_main, &rp->h[started]) == 0)
    started++;
  rp->nth = started;
  pthread_barrier_init(&rp->start, NULL, started);
  pthread_barrier_init(&rp->parts_done, NULL, started);
  pthread_barrier_init(&rp->reduced_ready, NULL, started);
  rp->barriers = true;
  pthread_mutex_lock(&rp->mu);
  rp->go = true;
  pthread_cond_broadcast(&rp->cv);
  pthread_mutex_unlock(&rp->mu);
  *out = rp;
  return 0;
}

int ea_train_replay_step(ea_train_replay *rp, uint32_t world, ea_train_stats *stats) {
  if (world == 0 || world > rp->max_world) return -EINVAL;
  helper *m = &rp->h[0];
  rp->W = world;
  pthread_barrier_wait(&rp->start);
  int rc = compute_share(rp, m);
  pthread_barrier_wait(&rp->parts_done);
  for (unsigned j = 1; j < rp->nth; j++)
    if (rp->h[j].rc && !rc) rc = rp->h[j].rc;
  if (rc == 0)
    rc = ea_comm_ring_reduce(rp->reduced, (const void *const *)rp->parts, world, rp->n, EA_COMM_F32,
                             EA_COMM_SUM);
  pthread_barrier_wait(&rp->reduced_ready);
  ea_train_stats st = {0};
  int rc2 = apply_reduced(rp, m, &st);
  if (stats) *stats = st;
  return rc ? rc : rc2;
}

int ea_train_replay_load_state(ea_train_replay *rp, const void *buf, size_t len, char *err,
                               size_t errlen) {
  for (unsigned j = 0; j < rp->nth; j++) {
    int rc = ea_trainer_state_load(rp->h[j].t, buf, len, err, errlen);
    if (rc) return rc;
  }
  return 0;
}

const ea_trainer *ea_train_replay_trainer(const ea_train_replay *rp) {
  return rp->h[0].t;
}

void ea_train_replay_free(ea_train_replay *rp) {
  if (!rp) return;
  if (rp->barriers) {
    if (rp->nth > 1) {
      rp->quit = true;
      pthread_barrier_wait(&rp->start);
    }
    for (unsigned j = 1; j < rp->nth; j++) pthread_join(rp->h[j].th, NULL);
    pthread_barrier_destroy(&rp->start);
    pthread_barrier_destroy(&rp->parts_done);
    pthread_barrier_destroy(&rp->reduced_ready);
  }
  if (rp->parts)
    for (uint32_t k = 0; k < rp->max_world; k++) free(rp->parts[k]);
  free(rp->parts);
  free(rp->reduced);
  if (rp->h)
    for (unsigned j = 0; j < rp->nalloc; j++) ea_trainer_free(rp->h[j].t);
  free(rp->h);
  pthread_cond_destroy(&rp->cv);
  pthread_mutex_destroy(&rp->mu);
  free(rp);
}
