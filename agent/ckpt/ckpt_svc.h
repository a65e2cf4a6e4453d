/* ckpt_svc.h — internal to agent/ckpt/: the live checkpoint flow
 * (ckpt_svc.c, ckpt_core.c, ckpt_ctl.c, ckpt_wire.c), between the workers'
 * staged shards and a committed MANIFEST.  docs/checkpoints.md ("The live
 * flow") draws the whole path.
 *
 *   worker r ── CKPT_STAGED + memfd ──▶ agent: ea__ckpt_svc        (each node)
 *   worker r ◀── CKPT_DONE ─────────────  writes DIR/step-s.gen-g/shard-r-of-W.bin
 *                                         on a uv_queue_work thread
 *                          SHARD_DURABLE | SHARD_FAILED (control channel)
 *                                              │
 *                                              ▼
 *                     controller: ea__ckpt_ctl (an ea__ckpt_core on its loop)
 *                       all W shards of (s, g) in → MANIFEST (ea_ckpt_commit,
 *                       generation fence) → retention, on a uv_queue_work thread
 *
 * Assumption: checkpoint.dir is one file system every node sees (NFS,
 * Lustre, a parallel FS; on one machine simply the same directory).  Each
 * agent writes its own workers' shard files into it and the controller
 * writes the MANIFEST that names all of them; nothing is copied between
 * nodes.
 *
 * Where the agent hooks in (ckpt_glue.c, workers.c / control.c):
 *   - on a worker's CKPT_STAGED or CKPT_SKIPPED: ea__ckpt_svc_on_worker();
 *     the supervisor must read packets with ea_ipc_recv_packet so the
 *     memfd arrives in m->fd (borrowed here, dup'd);
 *   - svc.reply: ea__sup_send(sup, local, m) (a CKPT_DONE);
 *   - svc.report: ea__ckpt_encode() and send the bytes to the controller
 *     over the control channel, or ea__ckpt_ctl_recv() directly when this
 *     agent is the controller;
 *   - control channel: a frame for which ea__ckpt_wire_is() holds goes to
 *     ea__ckpt_decode() and, on the controller, ea__ckpt_ctl_recv();
 *   - the controller (only while it acts as one) owns an ea__ckpt_ctl;
 *     events from both go to the log, status and alerts
 *     (ea__ckpt_event_format gives the log line).
 *
 * Lifetimes follow libuv: objects are heap memory owned by the caller from
 * _new until their `closed` callback; callbacks run on the loop thread;
 * after _close only `closed` runs.  The svc's callbacks never run from
 * inside the call that caused them; the controller's event callback may
 * (ea__ckpt_ctl_recv reports what a report changed at once), so it must
 * only record and log.  Messages and events passed to callbacks are valid
 * for the duration of the callback only.
 */
#ifndef EA_CKPT_SVC_H
#define EA_CKPT_SVC_H

#include "ea_ckpt.h"
#include "ea_ipc.h"
#include "ea_train.h"
#include "ea_wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* ---- control messages (ckpt_wire.c) -------------------------------------
 *
 * On the control channel, in the rendezvous framing of ea_rdzv.h (one
 * message per frame, optionally sealed), with types of their own so the
 * receiver tells the two codecs apart from the type byte
 * (ea__ckpt_wire_is):
 *
 *   msg   = 0xEA [ version=1, type, src:bin16, body ]
 *
 *   type  name           body
 *   0x20  SHARD_DURABLE  [ gen, step, rank, world, total, offset, length,
 *                          hash, block_size, [block_hash…], write_us,
 *                          stall_us, wait_us, direct:bool ]
 *   0x21  SHARD_FAILED   [ gen, step, rank, world, kind, errno,
 *                          message:str ]
 *   0x22  SAVE_NOW       [ gen, step ]
 *
 * SAVE_NOW goes the other way, controller → every member of generation gen
 * (agent/preempt.c, the checkpoint before a mass preemption): stage the
 * state after `step` completed steps (its workers get CKPT_AT); in restart
 * mode (step 0) signal the programs to save their own.  Step 0 in built-in
 * and library mode, from a controller that runs no part of gen, asks the
 * receiving member to pick the step and send SAVE_NOW(gen, step) to every
 * member and to the controller.
 *
 * gen is the 64-bit generation that names the step directory
 * (ea_rdzv_gen_u64), step the state's step count, [offset, offset+length)
 * = ea_ckpt_shard_range(total, world, rank), hash the file's XXH3-64,
 * block hashes as in the manifest (block_size = ea_ckpt_block_size(length),
 * ceil(length / block_size) of them), the times in microseconds (write:
 * the agent's ea_ckpt_write_shard, fsync included; stall: the worker's
 * copy; wait: the worker's busy wait), errno positive.  Every bound is
 * checked by the decoder, and the encoder refuses what the decoder would.
 */

#define EA__CKPT_WIRE_VERSION 1
/* Bytes of the largest message: SHARD_DURABLE with 64 block hashes is
 * 1 + 4 + 18 + 13·9 + 3 + 64·9 ≈ 720; SHARD_FAILED ≤ 1 + 4 + 18 + 6·9 + 3 +
 * 255 ≈ 340.  1 KiB with margin. */
#define EA__CKPT_WIRE_MAX 1024
#define EA__CKPT_TEXT_MAX 256

/* The high nibble of every type here: the control channel hands these
 * frames to the handler registered for it (ea__ctl_on_family). */
#define EA__CKPT_FAMILY 0x20
typedef enum {
  EA__CKPT_SHARD_DURABLE = 0x20,
  EA__CKPT_SHARD_FAILED = 0x21,
  EA__CKPT_SAVE_NOW = 0x22,
} ea__ckpt_msg_type;

typedef enum {
  EA__CKPT_FAIL_WRITE = 1,   /* writing the shard failed (ENOSPC, EIO, …) */
  EA__CKPT_FAIL_SKIPPED = 2, /* the worker did not stage it (busy, interrupted) */
  EA__CKPT_FAIL_INVALID = 3, /* the staged shard was malformed (no memfd, bad range) */
} ea__ckpt_fail_kind;

typedef struct {
  uint8_t type; /* ea__ckpt_msg_type */
  ea_node_id src;
  uint64_t gen, step;
  uint32_t rank, world;
  uint64_t total, offset, length; /* SHARD_DURABLE only (0 in SHARD_FAILED) */
  /* SHARD_DURABLE */
  uint64_t hash, block_size;
  uint32_t n_blocks;
  uint64_t block_hash[EA_CKPT_MAX_BLOCKS];
  uint64_t write_us, stall_us, wait_us;
  bool direct;
  /* SHARD_FAILED */
  uint8_t kind;   /* ea__ckpt_fail_kind */
  uint32_t error; /* errno, positive */
  char message[EA__CKPT_TEXT_MAX];
} ea__ckpt_msg;

const char *ea__ckpt_msg_type_str(uint8_t type);
/* Whether a plaintext control frame (0xEA first) holds a checkpoint
 * message rather than a rendezvous one: looks at the version and type
 * only; the decoder still checks everything. */
bool ea__ckpt_wire_is(const uint8_t *buf, size_t len);
/* Encode m into buf (at most cap bytes; EA__CKPT_WIRE_MAX always fits).
 * 0 and *len, -EINVAL for a message the decoder would refuse, -EMSGSIZE
 * when cap is too small. */
int ea__ckpt_encode(const ea__ckpt_msg *m, uint8_t *buf, size_t cap, size_t *len);
/* Decode a plaintext frame; bounded by len, allocates nothing.  0, or
 * -EA_EWIRE with *err (if not NULL) pointing at a static string naming the
 * field that was wrong. */
int ea__ckpt_decode(const uint8_t *buf, size_t len, ea__ckpt_msg *m, const char **err);

/* ---- events (both sides) ------------------------------------------------ */

typedef enum {
  /* agent (ea__ckpt_svc) */
  EA__CKPT_EV_SHARD_WRITTEN = 1, /* a local worker's shard is durable */
  EA__CKPT_EV_SHARD_FAILED = 2,  /* a local shard failed or was skipped */
  /* controller (ea__ckpt_core / ea__ckpt_ctl) */
  EA__CKPT_EV_STARTED = 3,       /* first shard report of (step, gen) */
  EA__CKPT_EV_SHARD_DURABLE = 4, /* a shard report arrived */
  EA__CKPT_EV_COMMITTED = 5,     /* MANIFEST durable: the checkpoint exists */
  EA__CKPT_EV_FAILED = 6,        /* (step, gen) will not be committed; why */
  EA__CKPT_EV_STALE = 7,         /* commit refused by the generation fence */
} ea__ckpt_ev_kind;

typedef struct {
  uint8_t kind; /* ea__ckpt_ev_kind */
  bool alert;   /* operators should hear of it (failed, stale) */
  uint64_t step, gen;
  char name[EA_CKPT_NAME_MAX]; /* "step-<s>.gen-<g>" */
  /* shard events: the shard */
  uint32_t rank, world;
  uint32_t local; /* svc: the local worker */
  /* controller: shards expected and received */
  uint32_t shards, shards_in;
  uint64_t bytes;        /* shard: its length; committed: the state's size */
  double seconds;        /* shard: its write; committed: first report → MANIFEST durable */
  double write_seconds;  /* committed: the slowest shard's write */
  double commit_seconds; /* committed: commit + retention */
  double stall_seconds;  /* shard: its staging stall; committed: the worst one */
  double wait_seconds;   /* shard: its busy wait; committed: the worst one */
  int error;             /* failed, stale: negative errno */
  bool latest_moved;     /* committed: LATEST now names it */
  bool cluster_claimed;  /* committed: DIR/CLUSTER was written by this commit */
  bool cluster_adopted;  /* ... into a directory that held checkpoints already */
  int retain_error;      /* committed, failed, stale: retention's result (0, or a negative errno) */
  bool shard_unseen;     /* failed: the commit found a shard that was reported durable
                            missing from this node's view of the directory (ENOENT): on a
                            multi-node job, checkpoint.dir is not shared */
  ea_ckpt_retain_stats retained;
  char why[512]; /* failed, stale: what happened, naming shard/file */
} ea__ckpt_event;

/* ckpt_core.c: the events' names and text, for either side. */
const char *ea__ckpt_ev_name(uint8_t kind);
/* One log line ("committed step-40.gen-3 bytes=… shards=3/3 …"). */
void ea__ckpt_event_format(const ea__ckpt_event *e, char *buf, size_t cap);
/* Fill e->name from e->step and e->gen ("" if they make no name). */
void ea__ckpt_event_name(ea__ckpt_event *e);

/* ---- the agent side: staged shards to files (ckpt_svc.c) ---------------- */

typedef struct ea__ckpt_svc ea__ckpt_svc;

typedef struct {
  const char *dir;   /* checkpoint.dir (resolved: never ""); copied */
  unsigned io_flags; /* EA_CKPT_IO_* for ea_ckpt_write_shard */
  ea_node_id self;   /* src of the reports */
} ea__ckpt_svc_opts;

typedef struct {
  /* Send m (a CKPT_DONE) to local worker `local`. */
  void (*reply)(void *ctx, uint32_t local, const ea_ipc_msg *m);
  /* Deliver m (SHARD_DURABLE or SHARD_FAILED) to the controller. */
  void (*report)(void *ctx, const ea__ckpt_msg *m);
  /* Optional: for the log and status. */
  void (*event)(void *ctx, const ea__ckpt_event *e);
} ea__ckpt_svc_cbs;

typedef struct {
  uint64_t staged;  /* CKPT_STAGED accepted */
  uint64_t written; /* shards made durable */
  uint64_t failed;  /* shards that failed (write, hash, invalid) */
  uint64_t skipped; /* CKPT_SKIPPED forwarded */
  uint64_t bytes;   /* bytes made durable */
  uint32_t in_flight;
} ea__ckpt_svc_stats;

/* -EINVAL for a missing dir or callback, -ENOMEM. */
int ea__ckpt_svc_new(uv_loop_t *loop, const ea__ckpt_svc_opts *o, const ea__ckpt_svc_cbs *cb,
                     void *ctx, ea__ckpt_svc **out);
/* A worker's CKPT_STAGED (its memfd in m->fd, borrowed: dup'd here) or
 * CKPT_SKIPPED.  Every CKPT_STAGED is answered with one reply (CKPT_DONE,
 * status 0 or a negative errno) and one report, later, from the loop; the
 * shard is written off the loop.  -EINVAL for another message type (nothing
 * happens), -ESHUTDOWN after close; an invalid CKPT_STAGED (no fd, a range
 * that is not ea_ckpt_shard_range's, a memfd shorter than the shard) still
 * returns 0 and is answered with -EINVAL / -EBADF / -EBADMSG. */
int ea__ckpt_svc_on_worker(ea__ckpt_svc *s, uint32_t local, const ea_ipc_msg *m);
void ea__ckpt_svc_stats_get(const ea__ckpt_svc *s, ea__ckpt_svc_stats *out);
/* Cancel what is in flight (a write stops at its next chunk and removes its
 * partial file), wait for it, free, then closed(ctx) (may be NULL).  No
 * reply or report is made for what was cancelled. */
void ea__ckpt_svc_close(ea__ckpt_svc *s, void (*closed)(void *ctx), void *ctx);

/* ---- the controller side: shard reports to a MANIFEST (ckpt_core.c, ckpt_ctl.c) */

typedef struct {
  const char *dir;           /* checkpoint.dir; copied */
  uint32_t keep_last;        /* checkpoint.keep_last (≥ 1) */
  uint64_t config_hash;      /* ea_config_hash of the job */
  const ea_model_dims *dims; /* the built-in trainer's dims: the manifest's
                                tensor table; NULL (a user's worker): one
                                opaque "state" tensor */
  uint32_t max_pending;      /* checkpoints collected at once; 0 = default */
  /* The committing cluster's identity (copied; NULL: none known, no
   * DIR/CLUSTER check): every commit claims or checks DIR/CLUSTER first
   * and is refused, retention included, in another cluster's directory. */
  const ea_ckpt_cluster *cluster;
} ea__ckpt_ctl_opts;

/* Checkpoints being collected at once.  With one shard in flight per
 * worker, at most two steps are in progress in a healthy job (one being
 * written, one being reported); 8 also holds the leftovers of a few
 * generation changes until a newer commit clears them.  max_pending is
 * capped at EA__CKPT_PENDING_MAX. */
#define EA__CKPT_PENDING_DEFAULT 8u
#define EA__CKPT_PENDING_MAX 32u

/* A commit the core wants done: ea__ckpt_commit_run() (ckpt_ctl.c) fills the results,
 * off the loop.  Owned by the core. */
typedef struct {
  uint64_t step, gen;
  char dir[EA_CKPT_PATH_MAX];
  uint32_t keep_last;
  bool have_cluster; /* check and claim DIR/CLUSTER for cluster first */
  ea_ckpt_cluster cluster;
  ea_ckpt_manifest manifest;
  /* step directories being collected (retention must leave them) */
  size_t n_in_progress;
  char in_progress[EA__CKPT_PENDING_MAX][EA_CKPT_NAME_MAX];
  /* results */
  int rc;               /* ea_ckpt_commit's, or -EXDEV: DIR is another cluster's (nothing
                           written or removed; err says whose) */
  bool cluster_claimed; /* DIR/CLUSTER was written by this job */
  bool cluster_adopted; /* ... in a directory with checkpoints from before identities */
  bool latest_moved;
  int retain_rc;
  ea_ckpt_retain_stats retained;
  double seconds;
  char err[512];
  /* A library program's state: whether its ea-state-1 tensor table was
   * looked for (the manifest held only the opaque `state u8` tensor), the
   * result (0: the manifest lists its tensors now) and what happened. */
  bool table_tried;
  int table_rc;
  char table_why[160];
} ea__ckpt_commit_job;

/* With have_cluster, ea_ckpt_cluster_check first: in another cluster's
 * directory nothing else happens (-EXDEV); one without CLUSTER is claimed
 * (ea_ckpt_cluster_claim) once the commit succeeded.  Then
 * ea_ckpt_commit, then ea_ckpt_retain (also after a failed commit, so
 * leftovers stay bounded while commits fail; not after a lock timeout).
 * Blocks.  Before
 * the commit, a manifest with only the opaque `state u8` tensor gets the
 * state's own table when the state is in the ea-state-1 layout
 * (ea__ckpt_state_table). */
void ea__ckpt_commit_run(ea__ckpt_commit_job *job);

/* ckpt_state.c: read the ea-state-1 preamble and tensor table (docs/pytorch.md,
 * "Checkpoints") from the shard files in ckpt_path (the step directory,
 * written but not yet committed) and replace m's tensors with it.  0 (why
 * says how many), -ENOENT when the state is not in that layout, another
 * negative errno when it is but the table cannot be read or parsed (why
 * says what; m unchanged).  Blocks (pread): call it off the loop. */
int ea__ckpt_state_table(const char *ckpt_path, ea_ckpt_manifest *m, char *why, size_t cap);

/* The pure core (ckpt_core.c): no loop, no clock, no disk.  Time comes in as `now`
 * (seconds, any monotonic origin); a commit goes out through io.commit,
 * and its result comes back through ea__ckpt_core_committed.  io.event may
 * be called from inside any core call. */
typedef struct ea__ckpt_core ea__ckpt_core;

typedef struct {
  void *ctx;
  /* Run job (ea__ckpt_commit_run) and then call ea__ckpt_core_committed —
   * later, not from inside this callback.  One job at a time. */
  void (*commit)(void *ctx, ea__ckpt_commit_job *job);
  void (*event)(void *ctx, const ea__ckpt_event *e);
} ea__ckpt_core_io;

typedef struct {
  uint64_t reports;    /* shard reports taken */
  uint64_t committed;  /* checkpoints committed */
  uint64_t failed;     /* checkpoints that will not commit (failed shard, superseded, error) */
  uint64_t stale;      /* commits refused by the generation fence */
  uint64_t ignored;    /* reports for a checkpoint already finished, or malformed */
  uint32_t pending;    /* being collected or committed */
  uint32_t committing; /* of those: complete, waiting for or in their commit */
  bool have_last;
  uint64_t last_step, last_gen; /* the last one this core committed */
} ea__ckpt_core_stats;

/* -EINVAL for a bad option (no dir, keep_last 0, dims out of range), -ENOMEM. */
int ea__ckpt_core_new(const ea__ckpt_ctl_opts *o, const ea__ckpt_core_io *io, ea__ckpt_core **out);
/* A SHARD_DURABLE or SHARD_FAILED report (from any agent). */
void ea__ckpt_core_recv(ea__ckpt_core *c, double now, const ea__ckpt_msg *m);
/* The job io.commit was given has run. */
void ea__ckpt_core_committed(ea__ckpt_core *c, double now, ea__ckpt_commit_job *job);
void ea__ckpt_core_stats_get(const ea__ckpt_core *c, ea__ckpt_core_stats *out);
/* Checkpoint (step, gen) is attempted again (the job's final one, after a
 * failure): forget that it was given up, so the new reports start a new
 * collection instead of being ignored.  No-op while it is being collected
 * or once committed. */
void ea__ckpt_core_retry(ea__ckpt_core *c, uint64_t step, uint64_t gen);
/* Frees the core and every job it owns (one handed to io.commit must have
 * come back first). */
void ea__ckpt_core_free(ea__ckpt_core *c);

/* The core on a libuv loop, commits on uv_queue_work. */
typedef struct ea__ckpt_ctl ea__ckpt_ctl;

typedef struct {
  void (*event)(void *ctx, const ea__ckpt_event *e);
} ea__ckpt_ctl_cbs;

int ea__ckpt_ctl_new(uv_loop_t *loop, const ea__ckpt_ctl_opts *o, const ea__ckpt_ctl_cbs *cb,
                     void *ctx, ea__ckpt_ctl **out);
/* A report from any agent (ours included); m is copied. */
void ea__ckpt_ctl_recv(ea__ckpt_ctl *c, const ea__ckpt_msg *m);
void ea__ckpt_ctl_stats_get(const ea__ckpt_ctl *c, ea__ckpt_core_stats *out);
/* The identity later commits claim and check (the agent learns it after
 * it started committing: ident.c). */
void ea__ckpt_core_set_cluster(ea__ckpt_core *c, const ea_ckpt_cluster *cl);
void ea__ckpt_ctl_set_cluster(ea__ckpt_ctl *c, const ea_ckpt_cluster *cl);
/* ea__ckpt_core_retry on the loop's core. */
void ea__ckpt_ctl_retry(ea__ckpt_ctl *c, uint64_t step, uint64_t gen);
/* Wait for a commit in flight (a commit is never cut half-way), free, then
 * closed(ctx) (may be NULL).  No event after this call. */
void ea__ckpt_ctl_close(ea__ckpt_ctl *c, void (*closed)(void *ctx), void *ctx);

#endif
