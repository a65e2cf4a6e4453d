/* agent.h — internal to agent/: the running agent (agent.c), its data
 * directory and node identity (node_id.c), and the admin socket with the
 * small JSON toolkit both ends of it use (admin.c).  Not a public header:
 * main.c and future agent/ files include it; other modules must not.
 */
#ifndef EA_AGENT_H
#define EA_AGENT_H

#include "ea_config.h"
#include "ea_rdzv.h"
#include "ea_transport.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* The documented gossip port (docs/operations.md) on every interface. */
#define EA__DEFAULT_BIND "0.0.0.0:7000"
#define EA__DEFAULT_DATA_DIR "./elastic-agent-data"
#define EA__ADMIN_SOCK "admin.sock"
#define EA__PEERS_FILE "peers"
#define EA__NODE_ID_FILE "node-id"
#define EA__LOCK_FILE "lock"

/* ---- the agent (agent.c) ------------------------------------------------ */

typedef struct {
  ea_config cfg;                 /* defaults, then the file, then flags */
  char config_path[EA_PATH_MAX]; /* "" = built-in defaults only */
  char bind[256];
  char advertise[256]; /* "" = derived from bind */
  char control_bind[256]; /* "" = the bind address, port + 1 (0 stays 0) */
  char join[4096];     /* "host:port,…"; "" = none */
  char name[EA_NAME_MAX];
  char data_dir[EA_PATH_MAX];
  char key_file[EA_PATH_MAX]; /* "" = no cluster key */
  char role[EA_ROLE_MAX];     /* "worker" | "observer" */
  char tags[EA_TAGS_MAX];
  /* --resume-from: the checkpoint the first cold start loads (a spec of
   * ea_ckpt_resolve: a step, "step-S.gen-G", a path or "latest"); "" =
   * checkpoint.resume_from_last decides. */
  char resume_from[EA_PATH_MAX];
  /* `run … -- PROGRAM ARG…`: the workers' program, exec'd without a shell
   * (argc 0: none; compute.worker_command is the shell form).  Borrowed:
   * must outlive ea__agent_run. */
  int worker_argc;
  char **worker_argv;
} ea__agent_opts;

/* Fills defaults: bind 0.0.0.0:7000, name = hostname, data dir
 * ./elastic-agent-data, role worker, config defaults. */
void ea__agent_opts_default(ea__agent_opts *o);

/* Run the agent (gossip, control channel, generations, workers) until it
 * has left — after the job ended, after SIGTERM/SIGINT or a drain — and
 * return the process exit status: 0 (the job succeeded, or this node was
 * drained), the job's failure code (agent/job.h: 3 restarts exhausted, 4
 * min_nodes not reached, 5 final checkpoint failed), 2 for a start-up
 * value that cannot work (a --resume-from that does not resolve, a program
 * given twice, a key refused in this launch mode), 1 when it could not
 * start (the log says why). */
int ea__agent_run(const ea__agent_opts *o);

/* Upper bound (ms) on the time from a member's crash to every other member
 * seeing it dead, for a cluster of n members under cfg, no loss.  The
 * worst-case derivation is in agent.c and docs/operations.md. */
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
  uint64_t dropped_oversize;        /* a length over the frame limit */
  uint64_t send_errors;             /* connect/write failed, queue full, no address */
  uint64_t encode_errors;           /* a message the codec refused */
  uint64_t connects, accepted;      /* outgoing connections made, incoming accepted */
  uint64_t conns_out, conns_in;     /* open now */
} ea__ctl_stats;

/* Listen on bind (port 0: any free one).  key (EA_KEY_BYTES, copied) seals
 * every frame; NULL: none.  On failure returns a negative errno with a
 * one-line reason in err, and nothing is left open once the loop runs. */
int ea__ctl_start(uv_loop_t *loop, const ea_addr *bind, const uint8_t *key,
                  ea__ctl_recv_fn on_msg, void *ctx, ea__ctl **out, char *err, size_t errlen);
const ea_addr *ea__ctl_bound(const ea__ctl *c);
/* Send m to node `to` at addr (encoded and sealed now; m may go away after
 * the call).  Never fails loudly: undeliverable frames are counted. */
void ea__ctl_send(ea__ctl *c, const ea_node_id *to, const ea_addr *addr, const ea_rdzv_msg *m);
/* The same for a message of another codec that shares the channel (its
 * plaintext starts with 0xEA and its types are not the rendezvous's, like
 * ckpt_wire.c's): framed, sealed and sent as is. */
void ea__ctl_send_bytes(ea__ctl *c, const ea_node_id *to, const ea_addr *addr,
                        const uint8_t *plain, size_t len);
/* Offer every opened frame (plaintext, 0xEA first; valid during the call)
 * to fn first; a frame fn returns true for is consumed, the rest are
 * decoded as rendezvous messages.  Called with the ctx of ea__ctl_start. */
typedef bool (*ea__ctl_frame_fn)(void *ctx, const uint8_t *plain, size_t len);
void ea__ctl_set_frame_hook(ea__ctl *c, ea__ctl_frame_fn fn);
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

/* ---- string builder and JSON (admin.c) ----------------------------------- */

typedef struct {
  char *buf;
  size_t len, cap;
  bool oom; /* an append failed; buf holds what fitted */
} ea__sb;

void ea__sb_printf(ea__sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ea__sb_puts(ea__sb *b, const char *s);
/* Append s as a JSON string literal, quotes included. */
void ea__sb_json_str(ea__sb *b, const char *s);
void ea__sb_free(ea__sb *b);

typedef enum { EA__J_NULL, EA__J_BOOL, EA__J_NUM, EA__J_STR, EA__J_ARR, EA__J_OBJ } ea__jtype;

typedef struct ea__json {
  ea__jtype type;
  char *key;  /* name of this value inside its object, else NULL */
  char *text; /* STR: the decoded string; NUM: the literal as written */
  bool b;
  double num;
  struct ea__json *child, *next; /* first element/member, next sibling */
  size_t n;                      /* number of elements/members */
} ea__json;

/* Parse one JSON document (nesting ≤ 64).  Returns 0 or -EINVAL with a
 * message naming the offset. */
int ea__json_parse(const char *s, size_t len, ea__json **out, char *err, size_t errlen);
void ea__json_free(ea__json *j);
/* Look up a dotted path of object keys ("counters.transport.packets_in"). */
const ea__json *ea__json_get(const ea__json *j, const char *path);
/* A string (or a number's literal, or "true"/"false"/"null") at path. */
const char *ea__json_str(const ea__json *j, const char *path, const char *dflt);
double ea__json_num(const ea__json *j, const char *path, double dflt);

/* ---- admin socket (admin.c) ----------------------------------------------
 * Protocol: the client connects to <data-dir>/admin.sock, writes one line
 * "COMMAND [ARGS]\n" and reads one JSON document until the server closes.
 * Errors are {"error": "..."}.  New commands are new table entries (agent.c
 * has "status" and "drain NAME").  A connection that sends no full line within 5 s, or
 * a line over 1 KiB, is answered with an error and closed. */

/* Write the JSON answer for args into out; return 0, or a negative errno
 * after writing {"error":…} into out. */
typedef int (*ea__admin_fn)(void *ctx, const char *args, ea__sb *out);

typedef struct {
  const char *name;
  const char *help;
  ea__admin_fn fn;
} ea__admin_cmd;

typedef struct ea__admin ea__admin;

/* Listen on path (mode 0600).  A stale socket file nobody answers on is
 * replaced; a live one is -EADDRINUSE.  cmds must outlive the server. */
int ea__admin_start(uv_loop_t *loop, const char *path, const ea__admin_cmd *cmds, size_t ncmds,
                    void *ctx, ea__admin **out, char *err, size_t errlen);
/* Stop listening, unlink the socket, close every connection; closed(ctx)
 * runs when the last handle is closed and the server is freed. */
void ea__admin_close(ea__admin *a, void (*closed)(void *ctx), void *ctx);

/* Client side (blocking; for the CLI, never on the loop): send line, read
 * the answer into *resp (malloc'd, NUL-terminated).  Errors are negative
 * errnos with a sentence in err ("no agent is running …"). */
int ea__admin_request(const char *path, const char *line, int timeout_ms, char **resp, size_t *len,
                      char *err, size_t errlen);

#endif
