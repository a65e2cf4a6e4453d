/* history_int.h — internal to chaos/history.c and chaos/history_parse.c:
 * the history the agents' logs are read into (history_parse.c) and judged
 * from (history.c; its opening comment says what the logs prove).  The rest
 * of chaos/ sees struct ea__chaos_history only as an opaque pointer
 * (chaos.h).
 *
 * Steps are kept per generation in dense arrays (digest, loss, count of
 * ranks), about 13 bytes per step, so a 30-minute soak with millions of
 * step lines fits in tens of megabytes.
 */
#ifndef EA_CHAOS_HISTORY_INT_H
#define EA_CHAOS_HISTORY_INT_H

#include "chaos.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The tcp ring carries at most 64 ranks per generation here (EA_IPC_MAX_PEERS
 * is the agent's own limit); the harness never runs more. */
#define MAX_RANKS 256

typedef struct {
  uint64_t gen;
  uint64_t first, last;
  uint64_t last_digest;
} seg;

typedef struct {
  int node;    /* index in r->nodes */
  int start_k; /* agent process (log file) */
  int widx;
  uint64_t pid;
  seg *segs;
  size_t nsegs, capsegs;
  /* last ready report */
  uint64_t ready_gen, ready_step, ready_digest;
  bool have_ready;
  bool any;
  uint64_t last_gen, last_step;
} proc;

typedef struct {
  uint64_t gen;
  uint32_t world;
  uint64_t base;
  size_t len, cap;
  uint64_t *dig;
  float *loss;
  uint8_t *cnt;
  int64_t ts_first, ts_last;
  /* commit */
  bool committed;
  char nodes[512];
  int sync_rank; /* -1 none */
  uint64_t sync_step;
  int64_t t_commit;
  char plan[700]; /* world + nodes + sync, to compare between nodes */
  char plan_node[CH_NAME_MAX];
  int root_proc; /* -1 unknown */
  uint64_t ready_digest;
  bool have_ready;
  bool have_start;
  uint64_t start;
  uint64_t rank_last[MAX_RANKS];
  bool rank_seen[MAX_RANKS];
  bool digest_reported, plan_reported, start_reported;
  /* lineage */
  bool lineage;
  uint64_t lin_from, lin_to;
  int pred; /* index of the predecessor generation, -1 init */
} hgen;

typedef struct {
  int64_t ts;
  char observer[CH_NAME_MAX];
  char member[CH_NAME_MAX];
  char to[12];
  char from[12];
} memev;

typedef struct {
  int64_t ts;
  int node;
  int kind; /* 0 worker comm failed, 1 worker exited, 2 drain/leave line, 3 paused no quorum */
} evrec;

struct ea__chaos_history {
  hgen *gens;
  size_t ngens, capgens;
  proc *procs;
  size_t nprocs, capprocs;
  memev *mem;
  size_t nmem, capmem;
  evrec *ev;
  size_t nev, capev;
  ea__chaos_ckev *ck;
  size_t nck, capck;
  ea__chaos_genview *views;
  size_t nviews;
  uint32_t *lin_world;
  uint64_t lin_len;
  int final_gen;
  uint64_t records, orphans, log_bytes;
  double parse_seconds;
  /* "first step logged at or after t", for each phase start t (sorted) */
  int64_t *probe_t, *probe_best;
  size_t nprobes;
  /* The episode being timed: its events are those before the next fault
   * (INT64_MAX for the last), never a later fault's of the same node. */
  int64_t t_end;
};

/* history_parse.c: reads one agent log (path: agent start start_k of node
 * `node`, an index in r->nodes) into h, recording the violations its lines
 * prove on the way; a missing file is no error.  *prepared_max carries the
 * newest generation the node prepared across its agent's restarts.
 * 0 or -errno. */
int ea__chaos_history_parse_file(ea__chaos_run *r, struct ea__chaos_history *h, int node,
                                 int start_k, const char *path, uint64_t *prepared_max);

#endif
