/* agent.h — internal to agent/: the running agent (agent.c), its data
 * directory and node identity (node_id.c), and the admin socket with the
 * small JSON toolkit both ends of it use (admin.c).  Not a public header:
 * main.c and future agent/ files include it; other modules must not.
 */
#ifndef EA_AGENT_H
#define EA_AGENT_H

#include "ea_config.h"
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
  char join[4096];     /* "host:port,…"; "" = none */
  char name[EA_NAME_MAX];
  char data_dir[EA_PATH_MAX];
  char key_file[EA_PATH_MAX]; /* "" = no cluster key */
  char role[EA_ROLE_MAX];     /* "worker" | "observer" */
  char tags[EA_TAGS_MAX];
} ea__agent_opts;

/* Fills defaults: bind 0.0.0.0:7000, name = hostname, data dir
 * ./elastic-agent-data, role worker, config defaults. */
void ea__agent_opts_default(ea__agent_opts *o);

/* Run the agent until SIGTERM/SIGINT (graceful leave) and return 0, or
 * return a negative errno after logging why it could not start. */
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
 * Errors are {"error": "..."}.  New commands are new table entries: e.g.
 * "drain NAME" later.  A connection that sends no full line within 5 s, or
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
