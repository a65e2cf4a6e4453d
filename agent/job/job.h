/* job.h — internal to agent/job/: the job's lifecycle (agent/job/job.c) and the
 * control messages that carry it (agent/job/job_wire.c).
 *
 * A job ends, in every launch mode, in one of these ways, and every agent
 * exits with the code of that way (README "Exit status"):
 *
 *   success      every worker of the running generation exited 0 (torchrun,
 *                library), or reached train.steps with its final checkpoint
 *                committed (builtin)                                  0
 *   restarts     a worker failed again with runtime.max_restarts used up 3
 *   min_nodes    fewer than compute.min_nodes nodes for
 *                runtime.rendezvous_timeout_seconds                   4
 *   final ckpt   the built-in trainer's final checkpoint failed        5
 *
 * Exit status 1 (could not start) and 2 (a bad flag or value, or a
 * --resume-from that does not resolve) are main's and the agent's start.
 *
 * Who decides.  The controller (the rendezvous' elected one): it hears
 * every member's DONE (its workers finished) and every worker failure
 * (JOB_EXIT: rank, node, exit code or signal, the program's message), reads
 * the rendezvous' verdicts (restarts exhausted, min_nodes out of reach),
 * decides, and sends END to every member it sees alive, again every
 * END_RESEND_MS until they have left; each member that hears END passes it
 * on to a few others (so the outcome survives the controller's own death
 * half-way), reports it (log, status, alert on failure), leaves and exits
 * with its code.  An agent that misses every copy still ends: alone below
 * min_nodes, its own controller half gives the job up after the rendezvous
 * timeout (exit 4).
 *
 * Control messages, on the control channel in the rendezvous framing, with
 * types of their own (ea__job_wire_is tells them apart):
 *
 *   msg  = 0xEA [ version=1, type, src:bin16, body ]
 *   0x30 JOB_EXIT  [ gen:uint, rank:uint, node:str, code:uint|nil,
 *                    signal:uint, source:uint, at_ms:uint, message:str ]
 *   0x31 JOB_DONE  [ gen:uint, step:uint ]
 *   0x32 JOB_END   [ kind:uint, reason:str, failure:JOB_EXIT-body|nil ]
 *   0x33 JOB_PACE  [ gen:uint, world:uint, [ [rank:uint, compute:float], … ] ]
 *   0x34 JOB_CKPT_AGAIN [ gen:uint, step:uint ]
 *   0x35 JOB_RESTORE    [ gen:uint, step:uint ]
 *   0x36 JOB_LINK_PING  [ gen:uint, nonce:uint ]
 *   0x37 JOB_LINK_PONG  [ gen:uint, nonce:uint ]
 *   0x38 JOB_LINK_DOWN  [ gen:uint, peer:bin16 ]
 *
 * code: the exit status (0..255), nil when a signal ended it; source: 0 no
 * message, 1 the TORCHELASTIC_ERROR_FILE, 2 the last lines of stderr;
 * at_ms: the exit's wall-clock time (the first failure of a generation by
 * this clock is reported as its cause, as torchelastic does with its error
 * files' timestamps); kind: ea__job_kind.  JOB_PACE (agent/job_pace.c)
 * goes to the controller once a second from every member of the running
 * generation: per local rank that stepped since the last one, its mean
 * forward/backward seconds per step (step.compute_seconds), for the
 * straggler detector.  JOB_RESTORE (a smoke run): generation gen reached
 * train.steps = step and its checkpoint is committed; restore it into a
 * fresh generation before the job ends (ea__job_opts.smoke_restore).
 * JOB_LINK_PING/PONG/DOWN (agent/job/job_link.c): a member of a generation
 * that makes no step pings every other member over this channel, each
 * answers PONG with the same gen and nonce; a peer that answers two pings
 * in a row in no time is reported to the controller as LINK_DOWN (peer:
 * its id; gen: the generation probed).  gen > 0 in all three; the nonce
 * is any uint.
 * JOB_PACE: 1 to EA_RDZV_MAX_WPN entries, rank < world ≤
 * EA_RDZV_MAX_WORLD, compute finite and ≥ 0.  Every string is bounded (EA__JOB_MSG_MAX,
 * EA__JOB_REASON_MAX, EA_NAME_MAX) and NUL-free; the decoder checks every
 * field and names the wrong one.
 */
#ifndef EA_JOB_H
#define EA_JOB_H

#include "ea_membership.h"
#include "ea_rdzv.h"
#include "launch.h"

#include "ea_base.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define EA__EXIT_OK 0
#define EA__EXIT_START 1
#define EA__EXIT_USAGE 2
#define EA__EXIT_RESTARTS 3
#define EA__EXIT_MIN_NODES 4
#define EA__EXIT_FINAL_CKPT 5

typedef enum {
  EA__JOB_SUCCESS = 1,
  EA__JOB_RESTARTS = 2,
  EA__JOB_MIN_NODES = 3,
  EA__JOB_FINAL_CKPT = 4,
} ea__job_kind;

/* The process exit status for a job that ended this way (0 for success). */
int ea__job_exit_code(uint8_t kind);
/* "succeeded", "restarts exhausted", "min_nodes not reached", "final
 * checkpoint failed"; "?" otherwise. */
const char *ea__job_kind_str(uint8_t kind);
/* The job kind of a rendezvous verdict (EA_RDZV_JOB_*), 0 for none. */
uint8_t ea__job_kind_of_rdzv(uint8_t rdzv_fail);

/* A worker's message: a TORCHELASTIC_ERROR_FILE (torchelastic's @record,
 * ~2 KiB typically) is read up to this much; the message kept is shorter. */
#define EA__JOB_ERRFILE_MAX (64 * 1024)
#define EA__JOB_MSG_MAX 1024
#define EA__JOB_REASON_MAX 512

enum { EA__JOB_SRC_NONE = 0, EA__JOB_SRC_ERROR_FILE = 1, EA__JOB_SRC_STDERR = 2 };

/* How a worker failed. */
typedef struct {
  uint64_t gen; /* 64-bit form */
  uint32_t rank;
  char node[EA_NAME_MAX];
  bool has_code; /* exited with `code`; else a signal ended it */
  uint8_t code;
  uint32_t signal;
  uint8_t source; /* EA__JOB_SRC_* */
  uint64_t at_ms; /* when its agent saw it exit (wall clock, ms since the epoch) */
  char message[EA__JOB_MSG_MAX];
} ea__job_failure;

/* The message of a torchelastic error file: {"message": {"message": TEXT,
 * "extraInfo": {"py_callstack": TB, "timestamp": T}}} (torch's @record), or
 * {"message": TEXT}; TEXT, followed by the last line of the traceback when
 * TEXT does not end with it.  0, or -EINVAL when the JSON is not of that
 * shape (out then holds its first line, for a message anyway). */
int ea__job_parse_error_file(const char *json, size_t len, char *out, size_t cap);
/* "rank 1 on n2 exited with code 1: RuntimeError: boom" (signal: "was
 * killed by signal 9 (Killed)"); the message's newlines become " | ". */
void ea__job_failure_str(const ea__job_failure *f, char *out, size_t cap);

/* ---- wire (job_wire.c) ----------------------------------------------------------- */

#define EA__JOB_WIRE_VERSION 1
/* The largest message: JOB_END with a full failure ≈ 1 + 20 + 530 + 1100. */
#define EA__JOB_WIRE_MAX 2048

/* The high nibble of every type here (ea__ctl_on_family). */
#define EA__JOB_FAMILY 0x30
typedef enum {
  EA__JOB_EXIT = 0x30,
  EA__JOB_DONE = 0x31,
  EA__JOB_END = 0x32,
  EA__JOB_PACE = 0x33,
  EA__JOB_CKPT_AGAIN = 0x34, /* controller → members: stage the final checkpoint again */
  EA__JOB_RESTORE = 0x35,    /* controller → members (smoke run): restore it, fresh generation */
  EA__JOB_LINK_PING = 0x36,  /* member → member: are you reachable over the control channel? */
  EA__JOB_LINK_PONG = 0x37,  /* the answer, gen and nonce echoed */
  EA__JOB_LINK_DOWN = 0x38,  /* member → controller: peer answered no ping (job_link.c) */
} ea__job_msg_type;

/* One rank's pace (JOB_PACE). */
typedef struct {
  uint32_t rank;
  double compute_s; /* mean seconds of forward/backward per step since the last report */
} ea__job_pace;

typedef struct {
  uint8_t type;
  ea_node_id src;
  /* JOB_EXIT: f; JOB_DONE, JOB_CKPT_AGAIN, JOB_RESTORE: gen, step; JOB_END: kind, reason,
   * has_failure, f; JOB_PACE: gen, world, npace entries of pace; JOB_LINK_PING,
   * JOB_LINK_PONG: gen, nonce; JOB_LINK_DOWN: gen, peer */
  uint64_t gen, step;
  uint64_t nonce;
  ea_node_id peer;
  uint32_t world, npace;
  ea__job_pace pace[EA_RDZV_MAX_WPN];
  uint8_t kind;
  char reason[EA__JOB_REASON_MAX];
  bool has_failure;
  ea__job_failure f;
} ea__job_msg;

bool ea__job_wire_is(const uint8_t *buf, size_t len);
/* 0 and *len; -EINVAL for a message the decoder would refuse; -EMSGSIZE
 * when cap is too small (EA__JOB_WIRE_MAX always fits). */
int ea__job_encode(const ea__job_msg *m, uint8_t *buf, size_t cap, size_t *len);
/* 0, or -EA_EWIRE with *err naming the field; allocates nothing. */
int ea__job_decode(const uint8_t *buf, size_t len, ea__job_msg *m, const char **err);

/* ---- the lifecycle (job.c) ------------------------------------------------------------ */

typedef struct ea__job ea__job;

typedef struct {
  /* Send a frame (plaintext, 0xEA first) to member `to`; the agent finds
   * its control address.  Best effort. */
  void (*send)(void *ctx, const ea_node_id *to, const uint8_t *buf, size_t len);
  /* The job is over here: report done, now leave and exit with code. */
  void (*end)(void *ctx, uint8_t kind, int code);
  /* An alert (what: EA__JOB_ALERT_*): the agent's registry logs and
   * delivers text.  NULL: job.c logs the `alert` line itself. */
  void (*alert)(void *ctx, int what, const char *text);
  /* builtin: the final checkpoint of generation gen (step) is tried again:
   * forget the failed attempt (as controller) and have the local workers
   * that finished in gen stage it again.  Runs on every member of gen. */
  void (*ckpt_again)(void *ctx, uint64_t gen, uint64_t step);
  /* Optional, as controller: member `src` says a worker of its failed
   * (JOB_EXIT; ours too).  In restart mode every program of a generation
   * exits when one fails, so it is not said there. */
  void (*worker_failed)(void *ctx, const ea_node_id *src, const ea__job_failure *f);
  /* Optional: a JOB_PACE arrived (the agent checks that it controls). */
  void (*pace)(void *ctx, const ea__job_msg *m);
  /* Optional: a JOB_LINK_PING, JOB_LINK_PONG or JOB_LINK_DOWN arrived
   * (job_link.c answers, matches, or holds an end out as controller). */
  void (*link)(void *ctx, const ea__job_msg *m);
  /* smoke_restore: generation gen finished at `step` with its checkpoint
   * committed; offer no live state to the generations from now on (they
   * load that checkpoint) and, as controller, form a new one.  Runs on
   * every member (JOB_RESTORE; the controller's own first). */
  void (*restore)(void *ctx, uint64_t gen, uint64_t step);
} ea__job_cbs;

enum { EA__JOB_ALERT_FAILED = 0, EA__JOB_ALERT_CHURN = 1 };

typedef struct {
  ea__mode mode;
  const char *command; /* shown in status: the program, or "" (builtin) */
  uint32_t wpn;
  uint64_t train_steps; /* builtin: the last step */
  bool ckpt_on;         /* builtin: checkpoints are taken (the final one counts) */
  uint32_t max_restarts;
  uint32_t churn_cap_ms; /* the longest back-off (runtime.rendezvous_timeout_seconds) */
  /* builtin: a failed final checkpoint is tried again for this long before
   * the job fails with exit status 5 (checkpoint.timeout_seconds) */
  uint32_t final_ckpt_timeout_ms;
  /* builtin (run --smoke): when the job would succeed, restore its final
   * checkpoint into a fresh generation first (JOB_RESTORE); it succeeds
   * when that generation has finished too */
  bool smoke_restore;
  ea_node_id self;
  const char *name;
} ea__job_opts;

/* What the agent knows after each call into the rendezvous (core_done). */
typedef struct {
  bool have_controller, controller; /* one is elected; it is us */
  ea_node_id controller_id;
  const ea_rdzv_status *st;
  const ea_member *members;
  size_t nmembers;
  uint64_t ckpt_step; /* builtin: the newest committed checkpoint's step (0: none) */
  bool ckpt_known;
} ea__job_view;

int ea__job_new(uv_loop_t *loop, const ea__job_opts *o, const ea__job_cbs *cb, void *ctx,
                ea__job **out);
void ea__job_update(ea__job *J, const ea__job_view *v);
/* A local worker of generation f->gen failed: logged here, and told to the
 * controller (before the agent tells the rendezvous, so the controller has
 * the details when it decides). */
void ea__job_local_failure(ea__job *J, const ea__job_failure *f);
/* Every local worker of generation gen finished (gen 0: none any more, a
 * new generation is being prepared).  Told to the controller until the job
 * ends. */
void ea__job_local_done(ea__job *J, uint64_t gen, uint64_t step);
/* builtin: the checkpoint of step `step` failed (as controller).  For the
 * final one the job retries (ckpt_again) with a back-off of 1, 2, 4, … 10 s
 * until final_ckpt_timeout_ms has passed since its first failure, then
 * fails; at once when `retry` is false (a failure no retry can mend: a
 * checkpoint.dir the nodes do not share). */
void ea__job_ckpt_failed(ea__job *J, uint64_t step, const char *why, bool retry);
/* A control frame; true when it was a job message (consumed). */
bool ea__job_on_frame(ea__job *J, const uint8_t *plain, size_t len);
/* ended: the job is over (and how: kind, exit code). */
bool ea__job_ended(const ea__job *J, uint8_t *kind, int *code);
/* The "job" object of the status document (a new reference; NULL when
 * out of memory). */
json_t *ea__job_status(const ea__job *J);
void ea__job_free(ea__job *J);

#endif
