/* supervisor.h — internal to agent/job/: the agent's worker processes on its
 * libuv loop (agent/job/supervisor.c; the spares: agent/job/supervisor_warm.c).
 *
 * The supervisor starts compute.workers_per_node workers, each with one end
 * of an ea_ipc_socketpair as fd 3, delivers their messages (ea_ipc.h) and
 * their exits to the agent the moment the loop sees them, sends them
 * messages, and stops them: STOP, then SIGTERM to the worker's process
 * group after stop_grace_ms, then SIGKILL after term_grace_ms.  Nothing here
 * blocks the loop: reads and writes are non-blocking and every wait is a
 * timer.
 *
 * What a worker runs:
 *   built-in (worker_command "")   exe worker --ipc-fd 3 [--config PATH]
 *   a user's program               /bin/sh -c "worker_command"
 * Either way its environment carries EA_IPC_FD=3, EA_LOCAL_RANK=<idx>,
 * EA_CONFIG=<path> (when given) and EA_COMM_BIND (when given), and stdout
 * and stderr are the agent's.  Each worker leads its own process group (so
 * a signal reaches a user's shell pipeline whole, and a terminal's Ctrl-C
 * reaches only the agent, which then stops the workers in order).
 *
 * Spares (warm interpreters, compute.warm_start): with warm_launcher set,
 * the supervisor keeps one more process per slot for a Python program, started
 * ahead of need as `PYTHON [OPTIONS] warm_launcher MODULE…` (agent/job/warm.h,
 * python/elastic_agent/_warm.py): it imports the preload and waits on a
 * control socket.  A start of that slot then takes the spare instead of
 * spawning: it is sent the start's argv, environment, working directory
 * and output, and becomes the worker (same pid from then on: the exit,
 * signals, process group and messages are a worker's).  The next spare is
 * started spare_delay_ms later.  A spare whose preload fails, or that dies
 * before it is ready, turns its slot's spares off with one warning (starts
 * are cold from then on, as without spares); one that dies while ready is
 * replaced, three in a row turn them off.  A start the spare cannot serve
 * (a different interpreter word, an environment variable the interpreter
 * reads at start that differs, a handover over 192 KiB) is cold.
 *
 * Lifetime (libuv rules): the supervisor is heap memory owned by the caller
 * from _new until the `closed` callback of ea__sup_free; callbacks run on
 * the loop thread, never from inside the call that caused them; after
 * ea__sup_free no callback but `closed` runs.  The message passed to
 * on_message is valid for the duration of the callback only.  Callbacks may
 * call any ea__sup_* function, ea__sup_free included.
 */
#ifndef EA_SUPERVISOR_H
#define EA_SUPERVISOR_H

#include "ea_ipc.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct ea__sup ea__sup;

typedef struct {
  /* A decoded message from worker idx.  Packets that do not decode are
   * logged and counted (ea__sup_bad_packets), not delivered. */
  void (*on_message)(void *ctx, uint32_t idx, const ea_ipc_msg *m);
  /* Worker idx exited: exit_status as waitpid reports it, or term_signal
   * when a signal killed it.  Every message it sent before exiting has been
   * delivered.  The slot is free again: ea__sup_start(idx) restarts it. */
  void (*on_exit)(void *ctx, uint32_t idx, int64_t exit_status, int term_signal);
  /* Slot idx's spare became ready, or its spares were turned off
   * (ea__sup_spare_get says which).  May be NULL. */
  void (*on_spare)(void *ctx, uint32_t idx);
} ea__sup_cbs;

typedef struct {
  uint32_t workers;           /* slots, ≥ 1 (compute.workers_per_node) */
  const char *worker_command; /* NULL or "": the built-in worker (or argv) */
  char *const *argv;          /* exec form (no shell): argv[0] found on PATH; NULL: none */
  bool no_ipc;                /* restart mode: no fd 3, and a stop is SIGTERM (no STOP) */
  const char *exe;            /* built-in: the binary; NULL = /proc/self/exe */
  const char *config_path;    /* NULL or "": none */
  const char *comm_bind;      /* EA_COMM_BIND; NULL or "": the worker's default */
  uint64_t train_steps;       /* EA_TRAIN_STEPS (train.steps); 0: not exported */
  uint32_t stop_grace_ms;     /* STOP → SIGTERM; 0 = EA__SUP_STOP_GRACE_MS */
  uint32_t term_grace_ms;     /* SIGTERM → SIGKILL; 0 = EA__SUP_TERM_GRACE_MS */
  const char *warm_launcher;  /* _warm.py: keep spares; NULL or "": none */
  const char *preload;        /* compute.preload: module names (commas, blanks) */
  uint32_t spare_delay_ms;    /* a take → the next spare starts */
} ea__sup_opts;

/* A worker answers STOP within one step: milliseconds for the built-in
 * model, seconds for a large user model on one accelerator; 5 s covers
 * that and, with the SIGTERM stage, keeps a full stop (10 s) far inside
 * systemd's default 90 s stop timeout. */
#define EA__SUP_STOP_GRACE_MS 5000u
#define EA__SUP_TERM_GRACE_MS 5000u
/* A take → the next spare starts.  Its imports take a core for seconds:
 * started at once they would compete with the first steps of the
 * generation that just took the last one. */
#define EA__SUP_SPARE_DELAY_MS 2000u

/* The strings in o are copied.  -EINVAL for workers == 0. */
int ea__sup_new(uv_loop_t *loop, const ea__sup_opts *o, const ea__sup_cbs *cb, void *ctx,
                ea__sup **out);
/* Spawn worker idx.  -EBUSY when it is running, -ERANGE for a bad idx, or
 * the spawn's error (then no callback for this attempt). */
int ea__sup_start(ea__sup *s, uint32_t idx);
/* One start with an environment and output of its own (restart mode).
 * env: the whole environment (NULL: the usual one); out, err: pipes the
 * caller initialised with uv_pipe_init and owns (reads and closes), which
 * become the worker's stdout and stderr (NULL: the agent's own).  Borrowed
 * for the call. */
typedef struct {
  char **env;
  uv_pipe_t *out, *err;
} ea__sup_spawn;
int ea__sup_start_ex(ea__sup *s, uint32_t idx, const ea__sup_spawn *sp);
/* A program word with torchrun's ${local_rank} macro replaced by
 * local_rank, exactly as torchrun's string.Template.safe_substitute does
 * ("$local_rank" too; "$$" → "$"); shell: a /bin/sh -c command, where "$$"
 * stays and only the two local_rank forms are replaced.  Malloc'd; NULL when
 * out of memory.  ea__sup_start_ex applies it to every word it spawns. */
char *ea__sup_subst_local_rank(const char *arg, uint32_t local_rank, bool shell);
/* Slot idx's spares start with env (copied) instead of the usual
 * environment: restart mode gives the part of a worker's environment that is
 * the same in every generation.  Call before ea__sup_spares_start. */
int ea__sup_spare_env(ea__sup *s, uint32_t idx, char *const *env);
/* Start the spares (no-op without warm_launcher).  A program that is not
 * one a spare can run turns them off (ea__sup_spare_get says why). */
void ea__sup_spares_start(ea__sup *s);
typedef struct {
  bool kept;           /* the supervisor keeps spares (warm_launcher) */
  int pid;             /* the spare now, 0: none */
  bool ready;          /* its preload is done */
  uint64_t rss;        /* its resident memory, bytes (/proc; 0: none) */
  bool off;            /* this slot starts cold from now on */
  const char *why;     /* off: why (valid until the next supervisor call) */
  uint64_t warm, cold; /* starts of this slot from a spare / by spawning */
  uint64_t lost;       /* spares that died before they were taken */
} ea__sup_spare;
void ea__sup_spare_get(const ea__sup *s, uint32_t idx, ea__sup_spare *out);
/* Worker processes started from a spare / spawned, since the start. */
void ea__sup_starts(const ea__sup *s, uint64_t *warm, uint64_t *cold);
/* Spawn every slot that is not running; the first error is returned after
 * trying them all. */
int ea__sup_start_all(ea__sup *s);
/* Send one message to worker idx without blocking: 0, -ESRCH when it is
 * not running, -EAGAIN when its socket buffer is full (a worker that does
 * not read), -EPIPE when it closed its end, or the encoder's error. */
int ea__sup_send(ea__sup *s, uint32_t idx, const ea_ipc_msg *m);
/* STOP, SIGTERM after stop_grace_ms, SIGKILL after term_grace_ms more;
 * on_exit reports the end.  No-op when not running or already stopping. */
void ea__sup_stop(ea__sup *s, uint32_t idx);
void ea__sup_stop_all(ea__sup *s);
/* SIGKILL worker idx's process group now (a node-level emergency). */
void ea__sup_kill(ea__sup *s, uint32_t idx);
/* SIGTERM worker idx's process group now, SIGKILL after grace_ms (0: SIGKILL
 * now).  No-op when it is not running; shortens a stop already under way. */
void ea__sup_terminate(ea__sup *s, uint32_t idx, uint32_t grace_ms);
bool ea__sup_running(const ea__sup *s, uint32_t idx);
int ea__sup_pid(const ea__sup *s, uint32_t idx); /* 0 when not running */
uint32_t ea__sup_count(const ea__sup *s);        /* slots */
uint64_t ea__sup_bad_packets(const ea__sup *s);
/* Kill (SIGKILL) whatever still runs, wait for those exits, close every
 * handle, free the supervisor and then call closed(ctx) (may be NULL).
 * Stop the workers gracefully first (ea__sup_stop_all, wait for on_exit)
 * when that matters. */
void ea__sup_free(ea__sup *s, void (*closed)(void *ctx), void *ctx);

#endif
