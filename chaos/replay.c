/* replay.c — the reference runs the cluster's final state is compared with.
 *
 * Two of them, both in this process with the library's trainer:
 *
 *  * The W=1 reference: the same job (seed, model, global batch, schedule)
 *    trained without faults by ea_trainer_step_local, on a thread of its
 *    own at the lowest priority while the cluster runs.  The elastic
 *    semantics make the trajectory independent of the world size except
 *    for float summation order (the allreduce sums W partial sums in ring
 *    order, W=1 sums micro-batches), so this one cannot match bit for bit:
 *    the final loss is compared within a tolerance (--loss-tol), and the
 *    digest equality is reported for what it is.
 *
 *  * The exact replay: after the run, the final history says which world
 *    size trained each step, and train/'s replay (ea_train_replay_step)
 *    runs each step at that world size, every rank's gradient sum added in
 *    the tcp ring's own order (ea_comm_ring_reduce, the schedule the ring
 *    runs: the harness keeps no copy of it).  A fault-free run of the same
 *    world sizes is then bit-identical to the cluster, so the params digest
 *    is compared at *every* step: the first step where they differ
 *    pinpoints a lost, repeated or corrupted step or a bad state hand-off.
 *
 * Both use the same OpenBLAS kernels as the workers: main() re-executes
 * the harness with the OPENBLAS_CORETYPE the agent gives its workers, since
 * another kernel would sum the matrix products in another order.
 */
#include "chaos.h"

#include "ea_train.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* The final loss is also compared as the mean over the last steps: one
 * batch's loss is noisy, 200 consecutive batches are not. */
#define LOSS_WINDOW 200

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int make_trainer(const ea_config *cfg, ea_data **data, ea_trainer **t, char *err,
                        size_t errlen) {
  ea_train_config tc;
  int rc = ea_train_config_from(&tc, cfg, err, errlen);
  if (rc < 0) return rc;
  rc = ea_data_open(cfg->train.data, data, err, errlen);
  if (rc < 0) return rc;
  rc = ea_trainer_new(&tc, *data, t, err, errlen);
  if (rc < 0) {
    ea_data_close(*data);
    *data = NULL;
  }
  return rc;
}

static void *ref_main(void *arg) {
  ea__chaos_run *r = arg;
  ea__chaos_refres *x = &r->ref;
  /* Lowest priority: the cluster under test comes first on a 2-core box. */
  setpriority(PRIO_PROCESS, (id_t)gettid(), 19);
  double t0 = mono_s();
  ea_data *data = NULL;
  ea_trainer *t = NULL;
  x->ref_rc = make_trainer(&r->cfg, &data, &t, x->ref_err, sizeof x->ref_err);
  if (x->ref_rc == 0) {
    for (uint64_t s = 0; s < x->ref_steps && !ea__chaos_interrupted; s++) {
      ea_train_stats st;
      int rc = ea_trainer_step_local(t, &st);
      if (rc < 0) {
        x->ref_rc = rc;
        snprintf(x->ref_err, sizeof x->ref_err, "step %" PRIu64 ": %s", s, strerror(-rc));
        break;
      }
      x->ref_loss[s] = (float)st.loss;
    }
    x->ref_digest = ea_trainer_params_digest(t);
    if (ea__chaos_interrupted && x->ref_rc == 0) x->ref_rc = -EINTR;
  }
  if (t) ea_trainer_free(t);
  if (data) ea_data_close(data);
  x->ref_seconds = mono_s() - t0;
  x->ref_done = true;
  return NULL;
}

int ea__chaos_reference_start(ea__chaos_run *r) {
  ea__chaos_refres *x = &r->ref;
  x->ref_steps = r->target_steps;
  x->ref_loss = calloc(x->ref_steps ? x->ref_steps : 1, sizeof *x->ref_loss);
  if (!x->ref_loss) return -ENOMEM;
  int rc = pthread_create(&r->ref_thread, NULL, ref_main, r);
  if (rc) return -rc;
  r->ref_started = true;
  return 0;
}

void ea__chaos_reference_join(ea__chaos_run *r) {
  if (!r->ref_started) return;
  pthread_join(r->ref_thread, NULL);
  r->ref_started = false;
}

/* The replay shares the ranks of a step among REPLAY_THREADS threads (the
 * harness's included): the replay is as much compute as the whole cluster
 * did, and this machine has two cores. */
#define REPLAY_THREADS 2

static void exact_replay(ea__chaos_run *r) {
  ea__chaos_refres *x = &r->ref;
  x->first_mismatch = -1;
  uint64_t nsteps;
  const uint32_t *world = ea__chaos_lineage_world(r, &nsteps);
  if (!world || !nsteps) {
    x->replay_rc = -ENOENT;
    snprintf(x->replay_err, sizeof x->replay_err, "no final history to replay");
    return;
  }
  double t0 = mono_s();
  uint32_t maxw = 1;
  for (uint64_t s = 0; s < nsteps; s++)
    if (world[s] > maxw) maxw = world[s];
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned nth = (unsigned)(cpus < REPLAY_THREADS ? (cpus > 0 ? cpus : 1) : REPLAY_THREADS);
  ea_train_config tc;
  ea_data *data = NULL;
  ea_train_replay *rp = NULL;
  x->replay_rc = ea_train_config_from(&tc, &r->cfg, x->replay_err, sizeof x->replay_err);
  if (x->replay_rc == 0)
    x->replay_rc = ea_data_open(r->cfg.train.data, &data, x->replay_err, sizeof x->replay_err);
  if (x->replay_rc == 0)
    x->replay_rc =
        ea_train_replay_new(&tc, data, maxw, nth, &rp, x->replay_err, sizeof x->replay_err);
  for (uint64_t s = 0; x->replay_rc == 0 && s < nsteps && !ea__chaos_interrupted; s++) {
    ea_train_stats st;
    int rc = ea_train_replay_step(rp, world[s] ? world[s] : 1, &st);
    if (rc < 0) {
      x->replay_rc = rc;
      snprintf(x->replay_err, sizeof x->replay_err, "step %" PRIu64 ": %s", s, strerror(-rc));
      break;
    }
    x->replay_steps = s + 1;
    uint64_t live;
    float live_loss;
    if (!ea__chaos_lineage_digest(r, s, &live, &live_loss)) continue;
    uint64_t mine = ea_trainer_params_digest(ea_train_replay_trainer(rp));
    if (mine != live) {
      x->first_mismatch = (int64_t)s;
      snprintf(x->mismatch, sizeof x->mismatch,
               "step %" PRIu64 " (world %u): the cluster logged params digest %016" PRIx64
               " (loss %.6f), a "
               "fault-free replay of the same world sizes gives %016" PRIx64 " (loss %.6f)",
               s, world[s], live, live_loss, mine, st.loss);
      break;
    }
  }
  if (rp) x->replay_digest = ea_trainer_params_digest(ea_train_replay_trainer(rp));
  ea_train_replay_free(rp);
  ea_data_close(data);
  x->replay_seconds = mono_s() - t0;
  x->replay_done = x->replay_rc == 0;
}

void ea__chaos_replay_check(ea__chaos_run *r) {
  ea__chaos_refres *x = &r->ref;
  x->first_mismatch = -1;
  ea__chaos_reference_join(r);
  uint64_t nsteps = 0;
  ea__chaos_lineage_world(r, &nsteps);
  bool reached = r->t_done && nsteps >= r->target_steps;
  if (!r->o.no_replay && nsteps) {
    exact_replay(r);
    if (x->replay_rc < 0)
      ea__chaos_violate(r, EA__I_REFERENCE, "the exact replay could not run: %s", x->replay_err);
    else if (x->first_mismatch >= 0)
      ea__chaos_violate(r, EA__I_REFERENCE, "%s", x->mismatch);
    else if (reached && r->final_digest_known && x->replay_steps == r->target_steps &&
             x->replay_digest != r->final_digest)
      ea__chaos_violate(r, EA__I_REFERENCE,
                        "final params digest %016" PRIx64 " differs from the replay's %016" PRIx64,
                        r->final_digest, x->replay_digest);
  }
  /* Against the W=1 reference: the final loss within the tolerance. */
  if (!reached) return;
  if (!x->ref_done || x->ref_rc < 0) {
    ea__chaos_violate(r, EA__I_REFERENCE, "the W=1 reference did not run: %s",
                      x->ref_err[0] ? x->ref_err : "interrupted");
    return;
  }
  uint64_t N = r->target_steps;
  float cl = 0;
  if (!ea__chaos_lineage_digest(r, N - 1, NULL, &cl)) return;
  x->final_loss_cluster = cl;
  x->final_loss_ref = x->ref_loss[N - 1];
  x->final_rel_diff =
      fabs(x->final_loss_cluster - x->final_loss_ref) / fmax(fabs(x->final_loss_ref), 1e-12);
  x->window = N < LOSS_WINDOW ? N : LOSS_WINDOW;
  double a = 0, b = 0;
  for (uint64_t s = N - x->window; s < N; s++) {
    float l = 0;
    ea__chaos_lineage_digest(r, s, NULL, &l);
    a += l;
    b += x->ref_loss[s];
  }
  x->window_rel_diff = fabs(a - b) / fmax(fabs(b), 1e-12);
  x->digest_equal_ref = r->final_digest_known && r->final_digest == x->ref_digest;
  if (!(x->window_rel_diff <= r->o.loss_tol))
    ea__chaos_violate(r, EA__I_REFERENCE,
                      "mean loss of the last %" PRIu64
                      " steps %.6f vs the W=1 reference's %.6f: relative "
                      "difference %.3g > %.3g",
                      x->window, a / (double)x->window, b / (double)x->window, x->window_rel_diff,
                      r->o.loss_tol);
}
