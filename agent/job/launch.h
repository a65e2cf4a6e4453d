/* launch.h — internal to agent/job/: which kind of program the workers are, and
 * in restart mode (torchrun) how a generation's processes are started and
 * stopped (agent/job/launch.c).
 *
 * Three launch modes (DESIGN.md, "User programs"):
 *
 *   builtin   `elastic-agent worker`: the C trainer, re-formed in place;
 *   torchrun  any program that reads torchrun's environment: every
 *             committed generation (re)starts it on every member with that
 *             generation's RANK, WORLD_SIZE, MASTER_ADDR, …; a PREPARE stops
 *             it first (SIGTERM to its process group, SIGKILL after a grace);
 *   library   a program speaking the worker protocol on fd 3 (ea_ipc.h),
 *             re-formed in place like the built-in trainer.
 *
 * The pure half (mode, environment, key checks) is unit-tested
 * (tests/unit/test_job.c).  The stateful half, ea__launch, drives the
 * supervisor's slots for restart mode: it owns nothing but timers, and
 * reports through callbacks that run on the loop, never from inside the
 * call that caused them (so never from inside the rendezvous core).
 *
 * Lifetime: ea__launch_new .. ea__launch_free (the caller closes the loop
 * afterwards: free closes its timer and calls `closed`).  Strings in the
 * options are copied.
 */
#ifndef EA_LAUNCH_H
#define EA_LAUNCH_H

#include "ea_config.h"
#include "ea_rdzv.h"
#include "supervisor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef enum { EA__MODE_BUILTIN = 0, EA__MODE_TORCHRUN = 1, EA__MODE_LIBRARY = 2 } ea__mode;

const char *ea__mode_name(ea__mode m); /* "builtin", "torchrun", "library" */

/* The mode from compute.protocol, compute.worker_command and the exec form
 * (`run … -- PROGRAM ARG…`: argc > 0).  auto: torchrun with a program,
 * builtin without.  -EINVAL with a sentence in err for a program given
 * twice, builtin with a program, or torchrun/library without one. */
int ea__launch_mode(const ea_config *c, int argc, char *const *argv, ea__mode *mode, char *err,
                    size_t errlen);

/* Keys that do nothing in mode m.  Refused (-EINVAL, a sentence in err):
 * --resume-from in torchrun mode (the program resumes from its own
 * checkpoint).  Warned about (a sentence in warn, "" when none; the agent
 * logs it once at start): train.* and checkpoint.* keys that differ from
 * the defaults in torchrun or library mode, distributed.global_batch and
 * micro_batch in torchrun mode, runtime.lost_peer_grace_ms outside torchrun
 * mode. */
int ea__launch_check_keys(const ea_config *c, ea__mode m, bool resume_from, char *warn, size_t wcap,
                          char *err, size_t errlen);

/* Whether the workers can start from warm interpreters (compute.warm_start
 * not off, a torchrun or library program that is a Python script or -m
 * module: agent/job/warm.h): 0, or -ENOTSUP with why. */
int ea__launch_warm(const ea_config *c, ea__mode m, int argc, char *const *argv, char *why,
                    size_t cap);

/* ---- the torchrun environment --------------------------------------------- */

/* What one worker of one generation is told, as torch.distributed.elastic
 * documents it (plus ours).  Strings are borrowed for the call. */
typedef struct {
  uint32_t rank, local_rank, world, local_world; /* RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE */
  uint32_t group_rank, group_world;              /* GROUP_RANK GROUP_WORLD_SIZE: the node */
  const char *master_addr;                       /* MASTER_ADDR: rank 0's node */
  uint16_t master_port;                          /* MASTER_PORT */
  uint64_t restart_count;                        /* TORCHELASTIC_RESTART_COUNT */
  uint32_t max_restarts;                         /* TORCHELASTIC_MAX_RESTARTS */
  const char *run_id;                            /* TORCHELASTIC_RUN_ID: experiment.name */
  const char *error_file;                        /* TORCHELASTIC_ERROR_FILE */
  uint64_t generation;                           /* EA_GENERATION: the term */
  const char *node_name, *data_dir;              /* EA_NODE_NAME, EA_DATA_DIR */
} ea__torch_env;

/* The names ea__launch_env sets (NULL-terminated), for tests and docs. */
extern const char *const ea__torch_env_names[];

/* Build a worker's environment: every "NAME=value" of base (NULL-terminated)
 * whose NAME is not one of ours, then ours.  OMP_NUM_THREADS=1 is added when
 * base has none and local_world > 1 (torchrun does the same);
 * PYTHONUNBUFFERED=1 when base has none, so print() output reaches the log
 * line by line; TORCH_NCCL_ASYNC_ERROR_HANDLING=1 when base sets neither it
 * nor the 1.13 name NCCL_ASYNC_ERROR_HANDLING (torchrun's default).  *out is a malloc'd
 * NULL-terminated array: free it with ea__env_free.  0 or -ENOMEM. */
int ea__launch_env(const ea__torch_env *e, char *const *base, char ***out);
void ea__env_free(char **env);
/* The value of NAME in env, or NULL. */
const char *ea__env_get(char *const *env, const char *name);

/* The numeric host of a (no port, no brackets): "10.0.0.7", "fd00::7". */
void ea__addr_host(const ea_addr *a, char *out, size_t cap);
/* A TCP port on host's address nobody listens on now, other than avoid (the
 * previous generation's, which may sit in TIME_WAIT); 0 or a negative errno. */
int ea__launch_free_port(const ea_addr *host, uint16_t avoid, uint16_t *port);

/* ---- library mode: where python/elastic_agent is ------------------------- */

/* The directory to put on a library worker's PYTHONPATH: the one holding
 * elastic_agent/__init__.py next to the binary exe (a build tree:
 * bin/elastic-agent → ../python; `make install`: $(PREFIX)/bin/elastic-agent
 * → ../lib/elastic-agent/python), tried in that order.  0 with the
 * absolute directory in out, -ENOENT when neither holds the package,
 * -ENAMETOOLONG. */
int ea__launch_python_dir(const char *exe, char *out, size_t cap);
/* The package directory this agent uses: $EA_PYTHONPATH when set (a build
 * tree run from elsewhere, `make asan`), else ea__launch_python_dir of this
 * binary.  0, or a negative errno with out "". */
int ea__launch_python_home(char *out, size_t cap);

/* ---- restart mode: a generation's processes ----------------------------------- */

typedef struct ea__launch ea__launch;

/* How a worker of the running generation ended by itself (not stopped by
 * us).  Valid for the duration of the callback. */
typedef struct {
  uint32_t local, rank;
  uint64_t gen; /* 64-bit form */
  int64_t status;
  int signal;
} ea__launch_exit;

typedef struct {
  /* Every local slot is stopped for the generation being prepared: report
   * READY with these listen addresses (wpn entries; rank 0's node: its
   * advertised ip and the MASTER_PORT it picked; otherwise port 0). */
  void (*ready)(void *ctx, uint64_t gen, const ea_addr *listen, uint32_t n);
  /* A worker of the running generation ended by itself. */
  void (*exited)(void *ctx, const ea__launch_exit *x);
  /* Give slot k's spawn its output pipes and environment (the agent's
   * output capture); return 0 or a negative errno.  May be NULL. */
  int (*spawning)(void *ctx, uint32_t k, uint32_t rank, uint64_t term, ea__sup_spawn *sp);
  /* The spawn of slot k returned rc (0: it runs).  May be NULL. */
  void (*spawned)(void *ctx, uint32_t k, int rc);
} ea__launch_cbs;

typedef struct {
  uint32_t wpn;
  const char *node_name, *data_dir, *run_id;
  uint32_t max_restarts;
  uint32_t stop_grace_ms, lost_peer_grace_ms;
  ea_addr advertise; /* this node's advertised address (MASTER_ADDR when rank 0) */
} ea__launch_opts;

int ea__launch_new(uv_loop_t *loop, ea__sup *sup, const ea__launch_opts *o,
                   const ea__launch_cbs *cb, void *ctx, ea__launch **out);
/* Generation gen (64-bit form, term `term`) is being prepared; this node
 * holds ranks rank_base .. rank_base+wpn-1.  Stop every running slot:
 * SIGTERM now, SIGKILL after lost_peer_grace_ms when peer_lost (a member of
 * the generation running is dead or suspect), else stop_grace_ms; once all
 * are gone (at once when none runs, but always from a later loop turn),
 * pick a MASTER_PORT when rank_base is 0 and call ready(). */
void ea__launch_prepare(ea__launch *L, uint64_t gen, uint64_t term, uint32_t rank_base,
                        bool peer_lost);
/* Plan p committed and this node is node `node`: start every slot with its
 * environment.  Returns the first spawn error (the others are tried). */
int ea__launch_commit(ea__launch *L, const ea_rdzv_plan *p, uint32_t node, uint64_t gen64);
/* Start the supervisor's spares (warm interpreters, when it keeps them),
 * each with what every generation's environment of its slot has in common:
 * LOCAL_RANK, LOCAL_WORLD_SIZE, OMP_NUM_THREADS, … without RANK, WORLD_SIZE,
 * MASTER_*, the restart count and the error file. */
int ea__launch_spares_start(ea__launch *L);
/* Stop every slot (a pause, a drain, the job's end): SIGTERM, then SIGKILL
 * after grace_ms (0: SIGKILL now).  Nothing is reported for them. */
void ea__launch_stop_all(ea__launch *L, uint32_t grace_ms);
/* The supervisor saw slot k exit: true when launch handled it (restart
 * mode); it calls exited() for a worker that ended by itself. */
bool ea__launch_on_exit(ea__launch *L, uint32_t k, int64_t status, int sig);
/* The rank slot k runs as (UINT32_MAX when none), its generation, and the
 * master address of the running generation ("" before the first). */
uint32_t ea__launch_rank(const ea__launch *L, uint32_t k);
const char *ea__launch_master(const ea__launch *L);
/* Slot k's TORCHELASTIC_ERROR_FILE for the running generation. */
const char *ea__launch_error_file(const ea__launch *L, uint32_t k);
void ea__launch_free(ea__launch *L);

#endif
