/* smoke.h — the top floor's: `elastic-agent run --smoke N`, a short
 * trial of the job as configured before the long run (smoke.c,
 * docs/operations.md "Smoke run").
 *
 * Built-in trainer: N is steps.  The run trains N steps
 * (train.steps = N), commits one checkpoint (save_interval_steps = N: the
 * final one the job ends on) into CHECKPOINT_DIR/smoke (resume_from_last
 * off, so a smoke run never resumes from, or retains away, the real
 * checkpoints).  When every rank has reached step N and the checkpoint is
 * committed, the controller does not end the job yet: it sends JOB_RESTORE
 * (job.h) and forms a fresh generation of the same nodes in which no node
 * offers its live state (ea__smoke_restore), so the generation loads the
 * checkpoint — the sync root reads it, the others receive it from that
 * rank, exactly a cold start — and finishes at step N at once; then the
 * job ends and every agent exits, as any built-in job does.  Each agent
 * compares the digest its workers hold after that generation with the one
 * they held before it.  Then, in its own process after its loop is done,
 * it verifies the checkpoint (every shard re-read and hashed: the code of
 * `elastic-agent ckpt verify`) and loads it once more into a fresh trainer
 * of its own (ea_trainer_resume, the cold-start path) to compare the
 * digest and step again.
 *
 * A user's program (torchrun, library mode): N is seconds.  The program
 * runs as configured; at N s the agent drains as on SIGTERM, unless the
 * job ended first.  The report says what can honestly be said: a
 * generation formed, the program started, no worker failed, how it ended
 * (its own exit codes, or still running at N s), and that its output was
 * captured.
 *
 * Give --smoke N to every agent of the job (it changes the job's keys,
 * as --set would).  The agent calls the hooks below on its loop; the
 * struct is the caller's (main.c) and outlives ea__agent_run.
 */
#ifndef EA_AGENT_SMOKE_H
#define EA_AGENT_SMOKE_H

#include "ea_config.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define EA__SMOKE_DIR "smoke" /* under checkpoint.dir */

typedef struct ea__smoke {
  uint64_t n;          /* --smoke N: steps (built-in) or seconds (a program) */
  bool builtin;        /* the built-in trainer (decided by ea__smoke_prepare) */
  uv_timer_t deadline; /* a program's N seconds; the built-in trainer's restore */
  bool timer_open, deadline_hit;
  uint64_t start_ms;
  /* steps: from worker 0's STEP messages */
  bool have_first;
  uint64_t first_step, last_step, first_ms, last_ms;
  double first_loss, last_loss;
  uint32_t world;
  /* as controller: the checkpoint committed */
  bool committed;
  char ck_name[64];
  uint64_t ck_bytes;
  double ck_seconds;
  /* at shutdown */
  bool closed;
  uint64_t next_step, digest; /* worker 0's last report */
  bool digests_agree;         /* every local worker reported worker 0's digest */
  uint32_t wpn;
  uint64_t gens, failures, failures_at_deadline, restarts;
  bool have_out; /* restart mode: the output capture ran */
  uint64_t out_lines;
  char failure[512]; /* the job's last failure as status shows it, "" if none */
  char ckpt_dir[EA_PATH_MAX];
  /* the restore into a fresh generation (JOB_RESTORE) */
  bool restore_asked;        /* from now on no live state is offered */
  char restore_spec[24];     /* the step, as --resume-from names it */
  uint64_t restore_from_gen; /* the generation that finished first */
  uint64_t before_digest;    /* worker 0's digest then */
  bool before_agree;         /* every local worker's */
  uint64_t restore_gen;      /* the first generation committed after (0: none) */
  bool restore_synced_live;  /* its plan synced a live state (it should not) */
  uint32_t restore_world;
  bool loaded_here; /* a worker here loaded the checkpoint in it */
  char loaded_name[64];
  uint64_t loaded_digest;
} ea__smoke;

struct ea__agent;

/* main.c, after the configuration is built: rewrite the job's keys for a
 * smoke run of s->n (see above).  0, or a negative errno with a sentence
 * in err (a usage error). */
int ea__smoke_prepare(ea__smoke *s, ea_config *cfg, const char *data_dir, int argc,
                      char *const *argv, char *err, size_t errlen);
/* The agent's hooks (loop thread). */
void ea__smoke_start(struct ea__agent *a);
void ea__smoke_step(ea__smoke *s, uint32_t worker, uint64_t step, double loss, uint32_t world);
void ea__smoke_committed(ea__smoke *s, const char *name, uint64_t bytes, double seconds);
/* JOB_RESTORE arrived: gen finished at step (the checkpoint's); remember
 * the local workers' digests and offer no live state from now on. */
void ea__smoke_restore(struct ea__agent *a, uint64_t gen, uint64_t step);
/* A generation committed here (has_sync: its plan syncs from a live state). */
void ea__smoke_generation(ea__smoke *s, uint64_t gen64, bool has_sync, uint32_t world);
/* A local worker loaded a checkpoint (a generation without a sync source). */
void ea__smoke_loaded(ea__smoke *s, const char *name, uint64_t digest);
/* First thing of ea__agent_shutdown: what the report needs, the timer closed. */
void ea__smoke_close(struct ea__agent *a);
/* main.c, after ea__agent_run returned rc: the checks, the report on
 * stdout, and the exit status (0 only when every check passed; 2 stays 2). */
int ea__smoke_report(ea__smoke *s, const ea_config *cfg, int rc);

#endif
