/* agent_int.h — the one internal header of agent/'s top floor (libuv's
 * uv-common.h habit): what the module's files share and nothing outside
 * agent/ may include.  Reached by an include path (-Iagent), never by "../".
 *
 * The floor plan (docs/layout.md): the top floor, the files directly in
 * agent/, holds the loop and what only it may do; each wing below is a
 * folder with a README.md saying what it owns and may touch.
 *
 *   the agent's options and entry point    cli/main.c → agent.c
 *   data directory, node identity, peers   node_id.c
 *   control channel                        control.c
 *   the persisted generation               gen_store.c
 *   JSON documents (on jansson)            base/json.c (ea_json.h)
 *   admin socket                           admin.c
 *   the running agent's internals          agent.c (start-up, the loop),
 *                                          workers.c (orders, messages),
 *                                          drain.c (drain, shutdown),
 *                                          ckpt_glue.c (checkpoints),
 *                                          status.c (the status
 *                                          document), metrics.c
 *                                          (progress, stalls, readiness,
 *                                          the metrics snapshot)
 *   Prometheus exposition, HTTP server     obs/exposition.c (the text),
 *                                          obs/http.c (libmicrohttpd, its
 *                                          own thread)
 *   alerts: the agent's side               alerting.c
 *   alerts: registry, rate limit, delivery obs/alerts.c (libcurl, its own
 *                                          thread)
 *   spot/preemption notice poller          obs/notice.c (its own thread;
 *                                          preempt.c acts on a notice)
 *   cluster identity, the --join gate      ident.c
 *   the job: launch, outcome, pace         job_glue.c, job_pace.c (the
 *                                          components: job/)
 *   the smoke run's hooks                  smoke.c (smoke.h)
 *   the checkpoint-dir probe's answer      probe.c (ckpt/probe.h)
 *   the command line, preflight, the smoke
 *   run's report (above the loop)          cli/ (main.c, preflight.c,
 *                                          smoke.c)
 *
 * The wings' components keep headers of their own, each with its own
 * contract and tests, and this header includes them: the worker supervisor
 * (job/supervisor.h), launch and output (job/launch.h, job/output.h), the
 * job's outcome (job/job.h), the checkpoint flow (ckpt/ckpt_svc.h), the
 * checkpoint-dir probe (ckpt/probe.h), the smoke run (smoke.h), and the
 * alert records, metrics snapshot and HTTP server (obs/obs.h).  No wing
 * file includes this header: the wings' components know nothing of the
 * loop, and the files of this floor wire them to it
 * (`scripts/check-layout.sh` checks it).
 */
#ifndef EA_AGENT_INT_H
#define EA_AGENT_INT_H

#include "ckpt_svc.h"
#include "job.h"
#include "launch.h"
#include "link.h"
#include "obs.h"
#include "output.h"
#include "probe.h"
#include "smoke.h"
#include "supervisor.h"

#include "ea_comm.h"
#include "ea_config.h"
#include "ea_ipc.h"
#include "ea_rdzv.h"
#include "ea_train.h"
#include "ea_transport.h"

#include "ea_base.h"
#include "ea_json.h"
#include "ea_log.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <uv.h>

/* The documented gossip port (docs/operations.md) on every interface. */
#define EA__DEFAULT_BIND "0.0.0.0:7000"
#define EA__DEFAULT_DATA_DIR "./elastic-agent-data"
#define EA__ADMIN_SOCK "admin.sock"
#define EA__PEERS_FILE "peers"
#define EA__NODE_ID_FILE "node-id"
#define EA__BOOT_FILE "boot" /* the last boot epoch (node_id.c) */
#define EA__LOCK_FILE "lock"

/* ---- the agent (agent.c) ------------------------------------------------ */

typedef struct {
  ea_config cfg;                 /* defaults, then the file, then flags */
  char config_path[EA_PATH_MAX]; /* "" = built-in defaults only */
  char bind[256];
  char advertise[256];    /* "" = derived from bind */
  char control_bind[256]; /* "" = the bind address, port + 1 (0 stays 0) */
  char join[4096];        /* "host:port,…"; "" = none */
  char name[EA_NAME_MAX];
  char data_dir[EA_PATH_MAX];
  char key_file[EA_PATH_MAX]; /* "" = no cluster key */
  char role[EA_ROLE_MAX];     /* "worker" | "observer" */
  char tags[EA_TAGS_MAX];
  /* --resume-from: the checkpoint the first cold start loads (a spec of
   * ea_ckpt_resolve: a step, "step-S.gen-G", a path or "latest"); "" =
   * checkpoint.resume_from_last decides. */
  char resume_from[EA_PATH_MAX];
  /* --bootstrap: with --join, start a job alone when no seed answers
   * (ident.c); without it such an agent waits until it has joined. */
  bool bootstrap;
  /* `run … -- PROGRAM ARG…`: the workers' program, exec'd without a shell
   * (argc 0: none; compute.worker_command is the shell form).  Borrowed:
   * must outlive ea__agent_run. */
  int worker_argc;
  char **worker_argv;
  /* `run --smoke N` (smoke.h): what the agent saw, for main's report;
   * NULL otherwise.  Borrowed: must outlive ea__agent_run. */
  ea__smoke *smoke;
} ea__agent_opts;

/* Fills defaults: bind 0.0.0.0:7000, name = hostname, data dir
 * ./elastic-agent-data, role worker, config defaults. */
void ea__agent_opts_default(ea__agent_opts *o);

/* Run the agent (gossip, control channel, generations, workers) until it
 * has left — after the job ended, after SIGTERM/SIGINT or a drain — and
 * return the process exit status: 0 (the job succeeded, or this node was
 * drained), the job's failure code (job.h: 3 restarts exhausted, 4
 * min_nodes not reached, 5 final checkpoint failed), 2 for a start-up
 * value that cannot work (a --resume-from that does not resolve, a program
 * given twice, a key refused in this launch mode), 1 when it could not
 * start (the log says why). */
int ea__agent_run(const ea__agent_opts *o);

/* Upper bound (ms) on the time from a member's crash to every other member
 * seeing it dead, for a cluster of n members under cfg, no loss.  The
 * worst-case derivation is in status.c and docs/operations.md. */
uint64_t ea__detection_bound_ms(const ea_swim_config *cfg, size_t n);

/* ---- data directory (node_id.c) ----------------------------------------- */

/* mkdir -p dir; the last component is created 0700. */
int ea__data_dir_prepare(const char *dir, char *err, size_t errlen);
/* Take an exclusive lock on <dir>/lock (held until the process exits or
 * *fd is closed); -EBUSY when another agent holds it. */
int ea__data_dir_lock(const char *dir, int *fd, char *err, size_t errlen);
/* Read <dir>/node-id, or create it (random, written and fsynced before it
 * is returned).  *created tells which. */
int ea__node_id_load(const char *dir, ea_node_id *id, bool *created, char *err, size_t errlen);
/* This run's boot epoch: max(the one in <dir>/boot + 1, the wall clock in
 * seconds), written back (temp, fsync, rename, fsync of the directory)
 * before it is returned, so that it is larger than every earlier run's
 * even after a crash.  It is the epoch of every sealed message (the replay
 * windows of ea_antireplay.h) and this run's first incarnation.  A boot
 * file that does not parse is refused (the operator removes it). */
int ea__boot_epoch_next(const char *dir, uint64_t *epoch, char *err, size_t errlen);
/* The ring key of a cluster key: BLAKE2b-256 keyed with the cluster key
 * over a fixed label, so that what reaches the ring tokens cannot open a
 * sealed frame. */
void ea__ring_key(const uint8_t key[EA_KEY_BYTES], uint8_t ring_key[32]);
/* Generation g64's ring token (ea_comm_plan.hello_key): BLAKE2b-256 keyed
 * with the ring key over the label and g64.  Every member holding the key
 * computes the same token, so it never travels; without a key there is
 * none and the ring hello is not authenticated (docs/security.md). */
void ea__ring_token(const uint8_t ring_key[32], uint64_t g64, uint8_t token[32]);
/* Write data to path atomically: path.tmp, fsync, rename, fsync dir.
 * Blocking: call it off the loop (uv_queue_work) or before the loop runs. */
int ea__write_file_atomic(const char *path, const void *data, size_t len, int mode);
/* Read the remembered peers file ("ADDR NAME" per line) into a malloc'd
 * array; a missing file is 0 peers.  Malformed lines are skipped. */
int ea__peers_load(const char *dir, ea_addr **out, size_t *n);

/* ---- control channel (control.c) -----------------------------------------
 * Rendezvous messages between agents: a TCP listener of its own (default:
 * the gossip port + 1, advertised in meta.control), one cached outgoing
 * connection per peer, frames [u32 BE length][0xEA msg | 0xEB sealed msg]
 * as drawn in ea_rdzv.h.  Best effort: a frame that cannot be delivered is
 * dropped and counted.  Callbacks run on the loop; the message passed to
 * on_msg is valid for the duration of the call only. */

typedef struct ea__ctl ea__ctl;
typedef void (*ea__ctl_recv_fn)(void *ctx, const ea_rdzv_msg *m);

typedef struct {
  uint64_t frames_in, frames_out, bytes_in, bytes_out;
  uint64_t dropped_malformed;       /* did not decode, or a zero length */
  uint64_t dropped_unauthenticated; /* failed to open, or sealed/unsealed mismatch */
  uint64_t dropped_replayed;        /* authentic, but seen before or too old (ea_antireplay.h) */
  uint64_t dropped_oversize;        /* a length over the frame limit */
  uint64_t send_errors;             /* connect/write failed, queue full, no address */
  uint64_t encode_errors;           /* a message the codec refused */
  uint64_t connects, accepted;      /* outgoing connections made, incoming accepted */
  uint64_t conns_out, conns_in;     /* open now */
  uint64_t resets;                  /* outgoing connections dropped by ea__ctl_reset_peer */
  uint64_t preauth_evicted;         /* closed on probation: over the per-source or total cap */
  uint64_t preauth_timeouts;        /* no header (or no whole body) within the deadline */
  uint64_t refused_rate;            /* closed at accept: the source over its connect rate */
  uint64_t accepts_deferred;        /* loop turns that accepted a full batch (ea_accept_gate) */
} ea__ctl_stats;

/* Listen on bind (port 0: any free one).  key (EA_KEY_BYTES, copied) seals
 * every frame; NULL: none.  sender (borrowed, outlives the channel): the
 * epoch and counter every sealed frame carries (ea_wire_seal_rp), shared
 * with the transport; NULL: one of its own (a random id).  Every opened
 * frame is judged by a replay window (dropped_replayed).  On failure
 * returns a negative errno with a one-line reason in err, and nothing is
 * left open once the loop runs. */
int ea__ctl_start(uv_loop_t *loop, const ea_addr *bind, const uint8_t *key, ea_wire_sender *sender,
                  ea__ctl_recv_fn on_msg, void *ctx, ea__ctl **out, char *err, size_t errlen);
const ea_addr *ea__ctl_bound(const ea__ctl *c);
/* Send m to node `to` at addr (encoded and sealed now; m may go away after
 * the call).  Never fails loudly: undeliverable frames are counted. */
void ea__ctl_send(ea__ctl *c, const ea_node_id *to, const ea_addr *addr, const ea_rdzv_msg *m);
/* The same for a message of another codec that shares the channel (its
 * plaintext starts with 0xEA and its types are not the rendezvous's, like
 * ckpt_wire.c's): framed, sealed and sent as is. */
void ea__ctl_send_bytes(ea__ctl *c, const ea_node_id *to, const ea_addr *addr, const uint8_t *plain,
                        size_t len);
/* Offer every opened frame (plaintext, 0xEA first; valid during the call)
 * to fn first; a frame fn returns true for is consumed, the rest are
 * decoded as rendezvous messages.  Called with the ctx of ea__ctl_start. */
typedef bool (*ea__ctl_frame_fn)(void *ctx, const uint8_t *plain, size_t len);
void ea__ctl_set_frame_hook(ea__ctl *c, ea__ctl_frame_fn fn);
/* The codecs that share the channel, by family: a frame whose plaintext
 * starts with 0xEA and whose type's high nibble is `family`
 * (ea__mpr_family_is: checkpoint 0x20, job 0x30, probe 0x40; the
 * rendezvous's types are below 0x20) goes to fn, after the hook above; one
 * fn returns false for, and every frame of no registered family, is decoded
 * as a rendezvous message.  0, or -ENOSPC past EA__CTL_FAMILIES. */
#define EA__CTL_FAMILIES 8
int ea__ctl_on_family(ea__ctl *c, uint8_t family, ea__ctl_frame_fn fn);
/* Drop the outgoing connection to `to`, if any (frames still queued on it
 * are counted as send errors); the next send connects afresh.  For a
 * member that membership declared dead or found alive again: a connection
 * that lived through a partition may hold frames the kernel is still
 * retransmitting on its back-off, and nothing sent after the heal would
 * pass them. */
void ea__ctl_reset_peer(ea__ctl *c, const ea_node_id *to);
void ea__ctl_stats_get(const ea__ctl *c, ea__ctl_stats *out);
/* Close the listener and every connection; closed(ctx) runs once all are
 * closed and the channel is freed.  Sends after this are ignored. */
void ea__ctl_close(ea__ctl *c, void (*closed)(void *ctx), void *ctx);

/* ---- the persisted generation (gen_store.c) -------------------------------
 * <data-dir>/generation holds the newest generation number this node
 * accepted or issued, as "TERM CONTROLLER-ID-HEX", written atomically
 * (ea__write_file_atomic) before the number is acted on or advertised. */

#define EA__GEN_FILE "generation"

/* Read it: a missing file is term 0 (none) and returns 0; a malformed one
 * returns -EINVAL with a sentence naming the file and line in err. */
int ea__gen_load(const char *dir, ea_rdzv_gen *g, char *err, size_t errlen);
/* The file's contents for g, NUL-terminated; returns its length, or
 * -ENOSPC when cap is too small. */
int ea__gen_format(const ea_rdzv_gen *g, char *buf, size_t cap);

/* ---- admin socket (admin.c) ----------------------------------------------
 * Protocol: the client connects to <data-dir>/admin.sock, writes one line
 * "COMMAND [ARGS]\n" and reads one JSON document until the server closes.
 * Errors are {"error": "..."}.  New commands are new table entries (agent.c
 * has "status" and "drain NAME").  A connection that sends no full line within 5 s, or
 * a line over 1 KiB, is answered with an error and closed.  At most 16 are
 * served at once; over that, the oldest one without a request (or else the
 * newcomer) is answered {"error":"busy: …"}. */

/* Answer args with a JSON document in *out (owned by the caller, which
 * sends and releases it): return 0, or a negative errno with an
 * {"error":…} document in *out.  *out NULL (out of memory): the connection
 * is closed without an answer. */
typedef int (*ea__admin_fn)(void *ctx, const char *args, json_t **out);

typedef struct {
  const char *name;
  const char *help;
  ea__admin_fn fn;
  bool owner_only; /* changes state: only the agent's user or root (SO_PEERCRED) */
} ea__admin_cmd;

typedef struct ea__admin ea__admin;

/* Listen on path (mode 0600).  A stale socket file nobody answers on is
 * replaced; a live one is -EADDRINUSE.  cmds must outlive the server. */
int ea__admin_start(uv_loop_t *loop, const char *path, const ea__admin_cmd *cmds, size_t ncmds,
                    void *ctx, ea__admin **out, char *err, size_t errlen);
/* Stop listening, unlink the socket, close every connection; closed(ctx)
 * runs when the last handle is closed and the server is freed. */
void ea__admin_close(ea__admin *a, void (*closed)(void *ctx), void *ctx);

/* The request side of one connection, as pure functions (no socket, no
 * loop): the framing of the request line and the dispatch of a line to the
 * command table.  The server (admin.c) and tests/fuzz/fuzz_admin.c run the
 * same code.
 *
 * Framing: bytes are read into rx (ea__admin_rx_buf says where and how
 * many at most) and handed over with ea__admin_rx_got (the count, or a
 * negative UV error: UV_EOF at the client's end).  The line ends at the
 * first "\n" (a "\r" before it is dropped), or at EOF; a line of
 * EA__ADMIN_LINE_MAX bytes or more is refused once its end arrived (closing
 * a Unix socket with unread input resets it, and the error would be lost).
 * Every event but MORE ends the framing: the connection answers (or
 * closes) and reads nothing more into rx; ea__admin_rx_init starts over. */
#define EA__ADMIN_LINE_MAX 1024

typedef struct {
  size_t len;    /* bytes of the line so far (discarded ones excluded) */
  bool overlong; /* passed EA__ADMIN_LINE_MAX: discarding up to its end */
  bool extra;    /* bytes followed the line in what was read */
  char line[EA__ADMIN_LINE_MAX + 1];
} ea__admin_rx;

typedef enum {
  EA__ADMIN_RX_MORE,     /* no whole line yet: read on */
  EA__ADMIN_RX_LINE,     /* rx->line is the request, NUL-terminated, without "\r\n" */
  EA__ADMIN_RX_TOO_LONG, /* answer "request line too long" */
  EA__ADMIN_RX_CLOSE,    /* EOF before any byte, or a read error: close, no answer */
} ea__admin_rx_ev;

void ea__admin_rx_init(ea__admin_rx *rx);
/* Where the next read goes, and *room ≥ 1 bytes at most. */
char *ea__admin_rx_buf(ea__admin_rx *rx, size_t *room);
/* nread bytes were read to ea__admin_rx_buf (0: nothing), or nread < 0. */
ea__admin_rx_ev ea__admin_rx_got(ea__admin_rx *rx, ssize_t nread);

/* Answer one request line (split in place): "help", a command of cmds —
 * one that is owner_only only for the agent's own uid or root (have_peer,
 * peer_uid: SO_PEERCRED) — or an {"error":…} naming the word.  *out is
 * the document to send (owned by the caller); NULL when the command gave
 * none (out of memory): the connection is then finished without one. */
void ea__admin_dispatch(const ea__admin_cmd *cmds, size_t ncmds, void *ctx, char *line,
                        bool have_peer, uid_t peer_uid, json_t **out);

/* Client side (blocking; for the CLI, never on the loop): send line, read
 * the answer into *resp (malloc'd, NUL-terminated).  Errors are negative
 * errnos with a sentence in err ("no agent is running …"). */
int ea__admin_request(const char *path, const char *line, int timeout_ms, char **resp, size_t *len,
                      char *err, size_t errlen);

/* ---- cluster identity and the --join gate (ident.c) -----------------------
 * <data-dir>/cluster-id holds the cluster's identity (ckpt/cluster.c's
 * format), advertised in the gossip tags as EA__TAG_CLUSTER + 32 hex. */

#define EA__CLUSTER_ID_FILE "cluster-id"
#define EA__TAG_CLUSTER "ea.cluster="

typedef struct {
  bool have;    /* c is persisted and advertised */
  bool pending; /* a write of cluster-id is out */
  ea_ckpt_cluster c;
  char str[EA_CKPT_CLUSTER_STR];
  const char *how; /* "persisted", "created …", "adopted from NAME", "none yet" */
  char how_buf[EA_PATH_MAX + 96];
  char path[EA_PATH_MAX + 32];
  bool keyed;
  uint8_t key[EA_KEY_BYTES]; /* the binding's key (the cluster key) */
  bool gated;                /* --join without --bootstrap, no member met yet */
  uint32_t join_failures;
  uint64_t retry_ms;     /* a failed write of cluster-id is tried again then (0: none) */
  uint64_t foreign_seen; /* member views that held a member of another cluster */
  ea_node_id warned[64];
  uint32_t nwarned;
  /* DIR/CLUSTER as last read (before the loop, then with LATEST) */
  int dir_rc; /* 0: dir_c holds it; -ENOENT: none; other: unreadable */
  ea_ckpt_cluster dir_c;
  uint64_t refusals; /* resumes, commits (with their retention) refused */
  char last_refusal[EA_PATH_MAX + 400];
} ea__agent_ident;

/* ---- the running agent (agent.c, workers.c, ckpt_glue.c, drain.c, status.c)
 *
 * One ea__agent per process, heap memory owned by ea__agent_run() from
 * start to the return of uv_run.  Everything below runs on its loop
 * thread.  The rules that bind the files together:
 *   - only agent.c calls the rendezvous core's functions that change it;
 *     the rest of agent/ posts intents (ea__agent_do), which agent.c
 *     applies and follows with ea__agent_core_done() (the core's io
 *     callbacks only flag what must not run inside it);
 *   - a callback checks a->phase first: after EA__PHASE_CLOSING nothing
 *     but handle closes may happen;
 *   - the controller is ea_rdzv_election()'s answer, never a second
 *     election (agent.c, elect_update, says why that keeps behaviour). */

typedef struct ea__agent ea__agent;

/* Where the agent is on its way from start to exit: running, draining
 * (the group re-forms without us), stopping its workers, leaving (LEFT is
 * being broadcast), closing its handles (drain.c walks these). */
typedef enum {
  EA__PHASE_RUNNING,
  EA__PHASE_DRAINING,
  EA__PHASE_STOPPING,
  EA__PHASE_LEAVING,
  EA__PHASE_CLOSING
} ea__agent_phase;

typedef enum {
  EA__W_STARTING, /* spawned, no HELLO yet */
  EA__W_IDLE,     /* said HELLO, in no generation */
  EA__W_PREPARING,
  EA__W_READY,
  EA__W_TRAINING, /* committed; steps flowing */
  EA__W_FAILED,   /* its communicator broke; keeps its state */
  EA__W_PAUSED,
  EA__W_DONE, /* reached train.steps */
  EA__W_EXITED,
} ea__wstate; /* what the agent knows of worker k (workers.c) */

/* One worker slot as `status` shows it. */
typedef struct {
  int pid;
  ea__wstate state;
  uint64_t gen;       /* newest generation told (PREPARE/COMMIT), u64 form */
  uint64_t next_step; /* steps it has completed */
  uint64_t state_gen; /* the generation (u64) of its last step: ea_rdzv_worker.state_gen */
  double loss;
  bool has_loss;
  uint64_t digest;
  double step_s;
  uint32_t restarts;
  bool fail_pending; /* could not be told something: report it failed */
  char comm[EA_COMM_ADDR_MAX];
  uint64_t done_gen; /* it finished in this generation (DONE, or exit 0): the job's end */
  bool hello;        /* it said hello since it was (re)started */
  double compute_s;  /* forward/backward of its last step (step.compute_seconds), -1: not sent */
  char exit_reason[EA_IPC_TEXT_MAX]; /* its last `exiting` reason ("" before one) */
  int32_t exit_code;                 /* and the code that came with it */
  /* Its last communicator failure (`failed`): what it said, and the peer it
   * could not exchange with when it named one (fail_rank -1: none). */
  char fail_msg[EA_IPC_TEXT_MAX];
  uint64_t fail_gen;
  int64_t fail_rank;
  char fail_node[EA_NAME_MAX];
} ea__agent_wk;

/* What `status` shows about checkpoints.  Commits are known to the node
 * that was controller when they happened; every node also reads LATEST
 * (off the loop) after each shard it writes, so all of them can say which
 * checkpoint is the newest, one checkpoint late at worst. */
typedef struct {
  /* as controller: checkpoints of the whole job */
  uint64_t started, committed, failed, skipped, stale, bytes;
  bool have_last;
  uint64_t last_step, last_gen;
  double last_persist_s, last_write_s, last_commit_s, last_stall_s, last_wait_s;
  char last_error[512];
  /* this node's shards (the rest is in ea__ckpt_svc_stats) */
  double shard_write_s, shard_stall_s;
  /* shard reports: sent to the controller, delivered to our own
   * controller directly, received over the control channel, dropped (no
   * controller known, or a report for a controller we no longer are) */
  uint64_t reports_sent, reports_local, reports_in, reports_dropped, reports_bad;
  /* DIR/LATEST, read off the loop */
  char latest[EA_CKPT_NAME_MAX];
  bool latest_busy, latest_again;
  uint64_t latest_read_ms; /* the last periodic re-read (ea__agent_ckpt_tick) */
  bool unshared_said;      /* "checkpoint.dir is not shared" logged (once) */
  /* cold start */
  bool resume_done; /* --resume-from has been acted on: later cold starts take "latest" */
  bool loaded;
  char loaded_name[EA_CKPT_NAME_MAX];
  uint64_t loaded_step, loaded_digest;
  uint32_t loaded_fallbacks;
  double loaded_s;
  char loaded_why[EA_IPC_TEXT_MAX];
} ea__agent_ck;

struct ea__agent {
  uv_loop_t loop;
  const ea__agent_opts *o;
  ea_transport *tr;
  ea__admin *admin;
  ea__ctl *ctl;
  ea_rdzv *rdzv;
  ea__sup *sup;
  uv_signal_t sigterm, sigint;
  uv_idle_t settle; /* runs the post-change work once, right after the change */
  uv_timer_t peers_timer, rdzv_timer, drain_timer;
  uv_timer_t tick; /* the loop's one ticker (agent.c), every EA__TICK_MS: the link
                      probe, metrics, checkpoints, identity, spares, the ranks' pace */
  uint64_t ticks;
  bool handles_open;
  ea__agent_phase phase;
  int signals;
  bool members_dirty, peers_dirty, peers_busy;
  uint64_t peers_last_ms;
  /* The controller last logged (elect_update): for the log line only; who
   * the controller is, is ea_rdzv_election()'s answer. */
  bool ctrl_logged, ctrl_logged_have;
  ea_node_id ctrl_logged_id;
  ea_node_id id;
  ea_wire_sender sender; /* id, boot epoch and counter of everything sealed */
  uint32_t first_inc;    /* this run's first incarnation (agent.c) */
  /* With a cluster key: the key the ring tokens are derived from
   * (ea__ring_token), never the cluster key itself. */
  bool have_ring_key;
  uint8_t ring_key[32];
  uint64_t drains_refused; /* DRAINs naming another id or an earlier run's incarnation */
  char idhex[33];
  char sock_path[EA_PATH_MAX + 32];
  char peers_path[EA_PATH_MAX + 32];
  char gen_path[EA_PATH_MAX + 32];
  char job_path[EA_PATH_MAX + 32];
  uint64_t start_ms;
  bool joined;
  int join_failures;
  ea_meta meta; /* ours, as last given to the transport */

  /* ---- generations ---- */
  ea_comm_backend backend;
  uint32_t wpn;
  ea__agent_wk *w; /* wpn entries (none for an observer) */
  ea_ipc_msg *ipc; /* scratch: ~50 KiB, off the stack */
  bool draining_seen, drained_order;
  bool persist_failed; /* io.persist could not even start: tell the core */
  ea_rdzv_gen persist_failed_gen;
  int persist_failed_rc;
  char drained_why[EA_RDZV_REASON_MAX];
  char reason_shape[EA_RDZV_REASON_MAX];
  struct {
    bool active;
    ea_rdzv_gen gen;
    uint64_t g64;
    uint32_t rank_base, world;
    uint64_t at_ms; /* when the workers were told */
  } prep;
  struct {
    bool active;
    ea_rdzv_gen gen;
    uint64_t g64;
    uint32_t rank_base, world, nnodes;
    bool first_step_seen;
    uint64_t commit_ms;
  } run;
  uint64_t stall_ms; /* training stopped here at this time (0: it did not) */
  char stall_why[96];
  uint64_t progress_ms, progress_step;
  double last_loss;
  bool has_loss;
  uint64_t last_formation_ms, last_stall_ms;
  uint64_t gens_committed, recoveries, worker_failures, worker_restarts;
  bool restart_flagged; /* restart mode: a "starting" REPORT flag was set (workers.c) */

  /* ---- checkpoints ---- */
  char ckpt_dir[EA_PATH_MAX]; /* checkpoint.dir, resolved and absolute */
  ea__ckpt_svc *ckpt_svc;     /* our workers' shards to files */
  ea__ckpt_ctl *ckpt_ctl;     /* shard reports to MANIFESTs: while we are controller */
  bool have_dims;             /* the built-in trainer: the manifest's tensor table */
  ea_model_dims dims;
  ea__agent_ck ck;

  /* ---- the program and the job (job_glue.c: launch.c, output.c, job.c) ---- */
  ea__mode mode;
  ea__launch *launch;  /* restart mode (torchrun): a generation's processes */
  ea__out *out;        /* restart mode: the programs' output */
  ea__job *job;        /* when the job is over, in every mode */
  int exit_status;     /* what ea__agent_run returns once the loop is done */
  ea_node_id *run_ids; /* the running plan's nodes (restart mode: is a peer lost?) */
  uint32_t nrun_ids;
  char workers_dir[EA_PATH_MAX + 16];
  /* ---- metrics, stalls, readiness (metrics.c) ---- */
  struct ea__agent_mx *mx;
  /* ---- alerts (obs/alerts.c, alerting.c), the preemption notice (obs/notice.c) ---- */
  ea__alerts *al;
  /* node_lost (alerting.c): the nodes of the last running generation seen,
   * kept while none runs, because the core abandons a generation in the
   * same call that learns of the death */
  struct {
    ea_node_id *ids;
    char (*names)[EA_NAME_MAX];
    uint32_t n, wpn, world;
    uint64_t term;
  } lost_plan;
  ea__notice *notice;
  /* ---- the checkpoint before a mass preemption (preempt.c) ---- */
  struct ea__agent_preempt *preempt;
  /* ---- the job's pace, stragglers (job_pace.c) ---- */
  struct ea__agent_pace *pace;
  /* ---- the link probe (job/link.c, wired in job_glue.c) ---- */
  struct ea__agent_link *link;
  /* ---- spare nodes: the health check, the no_spare alert (spare.c) ---- */
  struct ea__agent_spare *spare;
  /* ---- cluster identity, the --join gate (ident.c) ---- */
  ea__agent_ident ident;
};

/* agent.c: the loop.  Its one periodic timer runs every EA__TICK_MS (the
 * link probe's round, job/link.h); the other tickers run on multiples. */
#define EA__TICK_MS EA__LINK_TICK_MS
static inline uint64_t ea__agent_now_ms(ea__agent *a) {
  return uv_now(&a->loop);
}
/* Precise milliseconds for durations that are logged (the loop's cached
 * time can be a whole callback behind). */
static inline uint64_t ea__agent_mono_ms(void) {
  return uv_hrtime() / 1000000u;
}
static inline const char *ea__agent_member_name(const ea_member *m) {
  return m && m->meta.name[0] ? m->meta.name : "?";
}
static inline const ea_member *ea__agent_find_member(ea__agent *a, const ea_node_id *id) {
  return ea_swim_find(ea_transport_swim(a->tr), id);
}
/* Report what the core's io callbacks could not, act on orders that must
 * not run inside it, advertise the generation we run, re-arm its timer.
 * agent.c runs it after each of its own calls into the core and after
 * each ea__agent_do. */
void ea__agent_core_done(ea__agent *a);

/* ---- intents: what the rest of agent/ asks of the rendezvous core ---------
 *
 * Only agent.c calls the core's functions that change it
 * (scripts/check-layout.sh checks this: a function of include/ea_rdzv.h
 * that takes a non-const ea_rdzv * is called nowhere else).  A feature
 * says what it wants done — this worker is ready, failed, took a step; a
 * member's worker failed; a link is down; hold a straggler out; drain a
 * node; re-form; the last checkpoint before a mass preemption is done —
 * and ea__agent_do applies a callback's intents in order with the loop's
 * clock, then runs what follows every call into the core
 * (ea__agent_core_done) once.  The rules live there: nothing reaches the
 * core before it exists or once the agent is closing, and nobody has to
 * remember the core-done step. */
typedef enum {
  EA__DO_WORKER_STARTING,    /* worker; on: its program is (re)starting */
  EA__DO_WORKER_READY,       /* worker, gen, listen, step, state_gen, nccl_id */
  EA__DO_WORKER_STEP,        /* worker; u64: the steps it has completed */
  EA__DO_WORKER_FAILED,      /* worker */
  EA__DO_WORKER_FAILED_PEER, /* worker; peer: whom its collective blames (may be NULL) */
  EA__DO_NODE_FAILED,        /* as controller: node's worker failed; text: what */
  EA__DO_LINK_DOWN,          /* as controller: node (by) cannot reach peer */
  EA__DO_HOLD_OUT,           /* as controller: node; hold: why (EA_RDZV_HOLD_*); text */
  EA__DO_DRAIN,              /* text: a member's name, NULL: this node */
  EA__DO_REFORM,             /* as controller: a fresh generation; text: why */
  EA__DO_LAST_CKPT_DONE,     /* u64: the generation whose last checkpoint is done */
  EA__DO_LATEST_CKPT,        /* u64: the newest committed checkpoint's generation (a
                                setting the next plan reads: no core-done step) */
  EA__DO_SETTLE,             /* no call: only the core-done step, for what a callback
                                inside the core flagged (a worker that could not be
                                told, one that did not start) */
} ea__do_kind;

typedef struct {
  ea__do_kind kind;
  uint32_t worker;
  bool on;
  uint8_t hold;
  uint64_t u64;
  uint64_t state_gen;
  const ea_node_id *node, *peer;
  const char *text;
  const ea_rdzv_gen *gen;
  const ea_addr *listen;
  const uint8_t *nccl_id;
} ea__intent;

/* Apply n intents in order, then ea__agent_core_done once (unless every
 * one was a setting).  Returns 0, the first negative errno a call returned
 * (the rest are still applied), or -ECANCELED when the core is not there
 * or the agent is closing (nothing applied). */
int ea__agent_do(ea__agent *a, const ea__intent *in, size_t n);
static inline int ea__agent_do1(ea__agent *a, ea__intent in) {
  return ea__agent_do(a, &in, 1);
}
/* Initialise the agent's own handles on a->loop (signals, the settle idle,
 * the peers, rendezvous, drain and tick timers; none started) and mark
 * them open: ea__agent_shutdown closes them.  ea__agent_run, and the
 * partial agent of tests/unit/agent_fake.h. */
void ea__agent_handles_init(ea__agent *a);
/* The rendezvous core's configuration for this agent: the job file's keys
 * and what the launch mode decides (restart mode, max_restarts, the last
 * checkpoint's grace).  Needs a->o and a->mode. */
void ea__agent_rdzv_config(const ea__agent *a, ea_rdzv_config *rc);
/* Training stood still from now on (the first reason is kept). */
void ea__agent_stall(ea__agent *a, const char *why);

/* workers.c: orders to the workers and what they say */
const char *ea__agent_wstate_str(ea__wstate s);
bool ea__agent_workers_running(const ea__agent *a);
/* io.order of the rendezvous core: runs inside the core. */
void ea__agent_io_order(void *ctx, const ea_rdzv_order *o);
/* The checkpoint service, the supervisor and every worker (observers:
 * none).  A negative errno with a sentence in err. */
int ea__agent_workers_start(ea__agent *a, char *err, size_t errlen);

/* ckpt_glue.c: the live checkpoint flow wired to the loop */
int ea__agent_ckpt_start(ea__agent *a, char *err, size_t errlen);
/* Own an ea__ckpt_ctl exactly while the election names us. */
void ea__agent_ckpt_ctl_update(ea__agent *a);
/* The control channel's handler of the checkpoint family (reports). */
bool ea__agent_ckpt_frame(void *ctx, const uint8_t *plain, size_t len);
/* probe.c: a preflight's checkpoint-dir probe (probe.h); true when the
 * frame was one (answered off the loop), false to try the next codec. */
bool ea__agent_probe_frame(void *ctx, const uint8_t *plain, size_t len);
/* A worker staged or skipped a checkpoint (CKPT_STAGED, CKPT_SKIPPED). */
void ea__agent_ckpt_from_worker(ea__agent *a, uint32_t k, const ea_ipc_msg *m);
/* The sync root's worker loaded a checkpoint (CKPT_LOADED). */
void ea__agent_ckpt_loaded(ea__agent *a, uint32_t k, const ea_ipc_msg *m);
/* checkpoint.dir made absolute into out (before the loop runs). */
int ea__agent_ckpt_dir_resolve(const ea__agent_opts *o, char *out, size_t cap, char *err,
                               size_t errlen);
/* Every metrics tick: while this node runs no generation (or all its
 * workers are done), re-read LATEST about once a second, so that the
 * rendezvous knows the newest committed checkpoint (ea_rdzv_set_latest_ckpt)
 * when it next plans — a node that was cut off has not seen the commits
 * made meanwhile — and the job sees a final checkpoint it did not write. */
void ea__agent_ckpt_tick(ea__agent *a);
/* Raise *g above every generation already in dir (before the loop runs). */
void ea__agent_ckpt_gen_floor(const char *dir, ea_rdzv_gen *g);

/* agent.c: run the post-membership-change work (view, election) again
 * this loop turn, as a membership change does. */
void ea__agent_settle_soon(ea__agent *a);

/* ident.c (see its header comment).  Before the loop: read cluster-id
 * (kept when bound to key, NULL: none) and DIR/CLUSTER; a negative errno
 * with a sentence in err (*usage: exit 2). */
int ea__ident_load(ea__agent *a, const uint8_t *key, bool *usage, char *err, size_t errlen);
/* The gossip tags we start with (identity, or the starting flag). */
void ea__ident_start_tags(ea__agent *a, char *tags, size_t cap);
/* Every membership settle, before the rendezvous sees the view: adopt an
 * identity, leave out members of other clusters (*view: a malloc'd
 * filtered copy to hand over instead and free, or NULL for ms itself), and
 * false while the --join gate is closed (hand the rendezvous nothing). */
bool ea__ident_settle(ea__agent *a, const ea_member *ms, size_t n, ea_member **view, size_t *nview);
/* After the election: the controller of a cluster without an identity makes one. */
void ea__ident_after_elect(ea__agent *a, const ea_member *ms, size_t n);
/* m advertises a cluster identity other than ours. */
bool ea__ident_foreign(ea__agent *a, const ea_member *m);
/* Every metrics tick: try a failed write of cluster-id again. */
void ea__ident_tick(ea__agent *a);
/* A join attempt reached no seed. */
void ea__ident_join_failed(ea__agent *a, const char *why);
/* Every seed of --join is this node itself (and no remembered peer): it
 * starts the cluster, as an agent without --join does. */
void ea__ident_seed_is_self(ea__agent *a);
/* Whether DIR/CLUSTER (as last read) is another cluster's: then true, the
 * refusal for `op` in why, counted and alerted. */
bool ea__ident_ckpt_refused(ea__agent *a, const char *op, char *why, size_t cap);
/* Count, keep and alert a refusal (ckpt_glue.c: a commit refused). */
void ea__ident_refusal(ea__agent *a, const char *why);
/* DIR/CLUSTER was read (off the loop): rc 0 with c, or the error. */
void ea__ident_dir_seen(ea__agent *a, int rc, const ea_ckpt_cluster *c);
/* "cluster" of the status document. */
void ea__ident_status(ea__agent *a, ea_jb *b, json_t *doc);

/* drain.c: drain, stop, leave, close */
void ea__agent_begin_drain(ea__agent *a, const char *why, bool core_knows);
void ea__agent_stop_and_leave(ea__agent *a, bool kill, const char *why);
void ea__agent_leave_now(ea__agent *a);
/* Close every handle; uv_run returns once they are closed. */
void ea__agent_shutdown(ea__agent *a);
void ea__agent_on_signal(uv_signal_t *h, int signum);
/* Admin command "drain NAME". */
int ea__agent_cmd_drain(void *ctx, const char *args, json_t **out);

/* status.c: admin command "status" */
int ea__agent_cmd_status(void *ctx, const char *args, json_t **out);
/* The newest checkpoint this node knows of: its own last commit as
 * controller, or DIR/LATEST as last read (status checkpoint.last_step). */
bool ea__agent_ckpt_newest(const ea__agent *a, uint64_t *step, uint64_t *gen);
/* Members of the table by state (EA_STATE_*; status summary). */
void ea__agent_member_counts(ea__agent *a, size_t counts[4]);

/* metrics.c: progress, stalls, readiness, the snapshot the HTTP thread
 * serves.  Start once the transport, the rendezvous and the workers run
 * (a metrics_listen that cannot be bound is an error line, not a failed
 * start: the agent trains without the endpoint); close in
 * ea__agent_shutdown.  The hooks are no-ops before start. */
int ea__agent_metrics_start(ea__agent *a, char *err, size_t errlen);
void ea__agent_metrics_close(ea__agent *a);
/* On the loop's tick (agent.c), at mono ms `now`: sample progress and
 * stalls first; publish the snapshot (and the export line) last.  No-ops
 * before start and after close. */
void ea__agent_metrics_sample(ea__agent *a, uint64_t now);
void ea__agent_metrics_publish(ea__agent *a, uint64_t now);
/* A generation this node runs committed after `seconds` of formation. */
void ea__agent_metrics_formation(ea__agent *a, double seconds);
/* As controller: a checkpoint committed, `seconds` from first report to
 * durable MANIFEST. */
void ea__agent_metrics_persist(ea__agent *a, double seconds);
/* Alerts of kind k raised since start (alerts.c counts them). */
uint64_t ea__agent_alerts(const ea__agent *a, ea__alert_kind k);

typedef struct {
  double steps_per_s;  /* over the last EA__RATE_WINDOW_MS */
  double since_step_s; /* since a local worker last completed a step */
  bool stalled;        /* runtime.stall_timeout_seconds without a step */
  double stalled_s;    /* how long, when stalled */
} ea__agent_progress;
void ea__agent_progress_get(const ea__agent *a, ea__agent_progress *p);
/* /readyz's answer: true, or false with why in why ("ok" when ready). */
bool ea__agent_ready(ea__agent *a, char *why, size_t cap);
/* The metrics listener's bound address, "" when off or not bound; err: the
 * bind error, "" if none. */
const char *ea__agent_metrics_addr(const ea__agent *a, const char **err);
/* The agent's listener's counters (zeros when it is off). */
void ea__agent_http_stats(const ea__agent *a, ea__http_stats *out);

/* ---- alerts (the registry: obs/alerts.c; the agent's side: alerting.c) ---------
 * The one way an alert is raised.  ea__agent_alert writes the `alert` log
 * line (event "alert", message = the summary, then " kind=K
 * severity=S"), counts it (counters.alerts, elastic_agent_alerts_total),
 * keeps it among the last EA__ALERT_RECENT for status, and hands it to the
 * delivery thread (Alertmanager, webhook, command: whichever is set).
 *
 * Two shapes.  An event kind (worker_exit, checkpoint_failed, job_failed,
 * resume_fallback, generation_churn, preempted) happens once: Alertmanager
 * gets it with endsAt = startsAt + EA__ALERT_EVENT_HOLD_S.  A condition
 * kind (stalled, loss_nan, node_lost, storage_timeout, straggler) is
 * firing from ea__agent_alert until ea__agent_alert_resolve with the same
 * (kind, subject): re-sent to Alertmanager every
 * observability.alert_resend_seconds (60, as Prometheus' resend delay) while
 * firing, then sent with endsAt = now.  Deliveries of fires are limited to
 * one per kind per EA__ALERT_RATE_S; the next one delivered carries the
 * count of those held back ("suppressed", and "(N more since …)" in its
 * summary).  Resolves are never held back.  Loop thread only; callable
 * before ea__agent_alerts_start (log line only) and after close (the
 * same). */

int ea__agent_alerts_start(ea__agent *a, char *err, size_t errlen);
/* Shutdown (ea__agent_shutdown): close the loop handles; deliveries queued
 * go on. */
void ea__agent_alerts_close(ea__agent *a);
/* After uv_run: let the thread deliver what is queued (bounded by
 * a few seconds), join it, free. */
void ea__agent_alerts_free(ea__agent *a);
void ea__agent_alert(ea__agent *a, ea__alert_kind k, ea__alert_sev sev, const char *subject,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The same with up to 8 typed fields for JSON lines (ea_log.h), after the
 * registry's own: alert (the kind), severity, subject. */
void ea__agent_alert_kv(ea__agent *a, ea__alert_kind k, ea__alert_sev sev, const char *subject,
                        const ea_log_kv *kv, unsigned nkv, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* Resolve a firing condition; a no-op (no line) when (k, subject) is not
 * firing.  fmt: the resolved line's text (logged at info). */
void ea__agent_alert_resolve(ea__agent *a, ea__alert_kind k, const char *subject, const char *fmt,
                             ...) __attribute__((format(printf, 4, 5)));
bool ea__agent_alert_firing(const ea__agent *a, ea__alert_kind k, const char *subject);
/* "alerts" of the status document: recent, firing, delivery counters. */
void ea__agent_alerts_status(ea__agent *a, ea_jb *b, json_t *doc);
/* After every core call (ea__agent_core_done): as controller, node_lost
 * for a node of the last running generation that is dead; resolved once
 * it is alive again.  Cheap: the plan's nodes, looked up by id. */
void ea__agent_alerts_members(ea__agent *a);

/* ---- spot/preemption notice (the poller: obs/notice.c; this: preempt.c) -----------
 * runtime.preemption_notice other than "none": the poller's notice is
 * logged, raises `preempted` and drains this node (ea__agent_begin_drain). */
int ea__agent_notice_start(ea__agent *a, char *err, size_t errlen);
/* Shutdown: stop polling (joins the thread: at most one request's timeout). */
void ea__agent_notice_close(ea__agent *a);

/* ---- the checkpoint before a mass preemption (preempt.c) ---------------------------
 * The rendezvous core holds the running generation while its drainers would
 * leave fewer than min_nodes (ea_rdzv_config.last_ckpt_ms); this takes one
 * checkpoint of the current step meanwhile (SAVE_NOW → CKPT_AT; restart
 * mode: SIGUSR1 to the programs) and tells the core when it is committed. */
int ea__agent_preempt_start(ea__agent *a, char *err, size_t errlen);
void ea__agent_preempt_close(ea__agent *a);
/* ea_rdzv_config.last_ckpt_ms: runtime.preemption_grace_seconds · 1000 where
 * a checkpoint can be taken (checkpoints on, or restart mode), else 0. */
uint32_t ea__agent_preempt_grace_ms(const ea__agent *a);
/* After every core call: as controller, start or end the last moment. */
void ea__agent_preempt_sync(ea__agent *a);
/* A SAVE_NOW from the controller (ckpt_glue.c's frame hook). */
void ea__agent_preempt_msg(ea__agent *a, const ea__ckpt_msg *m);
/* The commit core's events (ckpt_glue.c): records only. */
void ea__agent_preempt_ckpt_event(ea__agent *a, const ea__ckpt_event *e);

/* job_glue.c: the launch mode, restart mode's processes, the job's end */
/* Before anything starts: mode, keys that do nothing in it, old key names,
 * a --resume-from that cannot resolve (*usage: exit status 2). */
int ea__agent_job_preflight(ea__agent *a, bool *usage, char *err, size_t errlen);
int ea__agent_job_start(ea__agent *a, char *err, size_t errlen);
/* Restart mode, once the supervisor exists: the launcher and the output
 * capture; no worker starts before a generation commits. */
int ea__agent_restart_start(ea__agent *a, char *err, size_t errlen);
/* From io.order (inside the core): PREPARE / COMMIT in restart mode. */
void ea__agent_restart_prepare(ea__agent *a, const ea_rdzv_order *o);
void ea__agent_restart_commit(ea__agent *a, const ea_rdzv_plan *p, uint32_t node, const char *g);
/* Every local worker finished in the running generation: tell the job. */
void ea__agent_local_done_check(ea__agent *a, uint64_t step);
/* Library mode: advertise EA_RDZV_TAG_STARTING while a local worker has not
 * said hello since it (re)started, so no controller takes this node in
 * before its program is up; restart mode: while its first warm
 * interpreters import, before its first generation (workers.c).  Both
 * modes: while it has no cluster identity (ident.c). */
void ea__agent_update_starting(ea__agent *a);
/* After every core call (ea__agent_core_done): the job sees what we see. */
void ea__agent_job_sync(ea__agent *a);
/* The control channel's handler of the job family. */
bool ea__agent_job_frame(void *ctx, const uint8_t *plain, size_t len);
/* builtin: a checkpoint failed for good (as controller). */
void ea__agent_job_ckpt_failed(ea__agent *a, uint64_t step, const char *why, bool retry);
/* "job" of the status document. */
void ea__agent_job_status(ea__agent *a, ea_jb *b, json_t *doc);
/* Shutdown: free the launcher, the capture and the job. */
void ea__agent_job_close(ea__agent *a);
/* builtin, library: local worker k crashed (exited non-zero or by a
 * signal); the controller hears it (JOB_EXIT) and counts it toward the
 * node's flapping (ea_rdzv_node_failed). */
void ea__agent_job_worker_crashed(ea__agent *a, uint32_t k, int64_t status, int sig);

/* spare.c: spare nodes (compute.max_nodes; ea_rdzv_spares).  While this
 * node is in no generation, a health check every EA__SPARE_CHECK_MS (its
 * checkpoint directory; restart mode: a MASTER_PORT) whose failure sets
 * EA_RDZV_TAG_UNFIT; as controller, the no_spare alert.  From the loop's
 * tick; freed after uv_run. */
#define EA__SPARE_CHECK_MS 5000u
void ea__agent_spare_tick(ea__agent *a);
void ea__agent_spare_free(ea__agent *a);
/* "spares" of the status document. */
void ea__agent_spare_status(ea__agent *a, ea_jb *b, json_t *doc);
/* Spares by ea_rdzv_spare_state (4 entries), and whether this node is one. */
void ea__agent_spare_counts(ea__agent *a, uint32_t by_state[4], bool *self);

/* job_glue.c: the link probe (job/link.h), started and closed with the job.
 * A local worker's communicator failed without naming a peer (workers.c):
 * probe the generation's members now. */
void ea__agent_link_comm_failed(ea__agent *a);
/* The loop's ticker (agent.c), every EA__TICK_MS: the probe's round. */
void ea__agent_link_tick(ea__agent *a);
/* "link_probe" and "degraded" of the status document's generation object. */
void ea__agent_link_status(ea__agent *a, ea_jb *b, json_t *gen);

/* job_pace.c: each rank's compute time to the controller (JOB_PACE, every
 * second), the straggler detector there, its alert, status and eviction.
 * Started and closed with the job (job_glue.c). */
int ea__agent_pace_start(ea__agent *a, char *err, size_t errlen);
void ea__agent_pace_close(ea__agent *a);
/* The loop's ticker (agent.c), every EA__PACE_MS: send ours, judge. */
#define EA__PACE_MS 1000
void ea__agent_pace_tick(ea__agent *a);
/* A local worker's STEP (workers.c): its compute_seconds, when it sent them. */
void ea__agent_pace_step(ea__agent *a, uint32_t k, const ea_ipc_msg *m);
/* The job's callback for JOB_PACE frames. */
void ea__agent_pace_wire(ea__job_cbs *cb);
/* "stragglers" of the status document. */
void ea__agent_pace_status(ea__agent *a, ea_jb *b, json_t *doc);
/* Ranks judged stragglers now (the controller; 0 elsewhere). */
uint32_t ea__agent_pace_stragglers(ea__agent *a);

#endif
