/* history.h — internal to agent/obs/: what the agent remembers of its
 * recent past for the page (issue 31): training progress sampled once a
 * second, the generations this node ran and why each formed, and the
 * newest checkpoint it knows of.  Bounded (a ring each), pure (the caller
 * passes the time; nothing here reads a clock or the agent), and formatted
 * as the /api/v1/history document (docs/operations.md, "The page").
 *
 * Ownership: an ea__hist is plain memory the caller owns (metrics.c keeps
 * one in its loop state, ~50 KiB); every string handed in is copied. */
#ifndef EA_OBS_HISTORY_H
#define EA_OBS_HISTORY_H

#include "ea_base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One point a second: the page's charts span minutes, and the loop's tick
 * (EA__MX_PERIOD_MS, 500 ms) samples twice per slot. */
#define EA__HIST_PERIOD_MS 1000
/* Ten minutes of points: what the charts show; 600 × 48 bytes. */
#define EA__HIST_POINTS 600
/* Generations kept: churn past a few dozen in ten minutes is already an
 * alert (generation_churn); 64 × ~300 bytes. */
#define EA__HIST_GENS 64

typedef struct {
  double t_s; /* unix time of the sample */
  uint64_t step;
  double steps_per_s;
  bool has_loss;
  double loss;
  uint64_t gen; /* term of the generation this node ran then; 0: none */
  uint32_t world;
} ea__hist_point;

/* Why a generation formed, as seen from this node: what changed in its
 * node set against the generation this node ran before. */
typedef enum {
  EA__HIST_START,    /* the first generation this node ran */
  EA__HIST_LOST,     /* a node of the previous one is dead (killed, crashed, partitioned) */
  EA__HIST_HELD_OUT, /* a node was held out (flapping, straggler, link) */
  EA__HIST_LEFT,     /* a node left gracefully (leave, preemption) */
  EA__HIST_DRAINED,  /* a node is out but alive (a drain) */
  EA__HIST_JOIN,     /* nodes joined, none went */
  EA__HIST_FAILURE,  /* the same nodes: a worker failed and the group restarted */
  EA__HIST_REFORM,   /* the same nodes, re-formed (a communicator broke, a pause) */
  EA__HIST_KINDS
} ea__hist_kind;
const char *ea__hist_kind_str(ea__hist_kind k);

/* What became of a node of the previous generation that is not in the new
 * one (the caller reads it off the member table and the hold-out list). */
typedef enum {
  EA__HIST_GONE_DEAD,
  EA__HIST_GONE_HELD,
  EA__HIST_GONE_LEFT,
  EA__HIST_GONE_ALIVE,
} ea__hist_gone;

typedef struct {
  uint64_t gen;                      /* term */
  char id[48];                       /* "TERM/CTRLID" as status shows it */
  double t_s;                        /* unix time it committed on this node */
  uint32_t world;                    /* ranks */
  uint32_t nodes;                    /* nodes */
  uint64_t formation_ms, stalled_ms; /* PREPARE → COMMIT here; training stood still */
  uint64_t step;                     /* this node's step when it committed */
  ea__hist_kind kind;
  char why[192]; /* "lost n3", "join n4, n5", "a worker failed" … (names any bytes) */
} ea__hist_gen;

typedef struct {
  bool have;
  uint64_t step, gen;
  double t_s; /* unix time this node first knew of it */
  bool have_bytes;
  uint64_t bytes; /* its size, when this node committed it (the controller) */
} ea__hist_ckpt;

typedef struct {
  ea__hist_point pt[EA__HIST_POINTS];
  size_t npt, pt_next; /* held, and the slot the next one goes to */
  bool sampled;
  uint64_t slot; /* now_ms / EA__HIST_PERIOD_MS of the newest point */
  uint64_t points_total;
  ea__hist_gen gen[EA__HIST_GENS];
  size_t ngen, gen_next;
  uint64_t gens_total;
  ea__hist_ckpt ck;
} ea__hist;

void ea__hist_init(ea__hist *h);
/* Keep p as the point of now_ms's one-second slot, unless that slot has
 * one already (the first sample of a slot wins: points stay a second apart
 * whatever the tick's jitter).  Returns whether it was kept.  A clock that
 * went back (now_ms in an older slot) is ignored too. */
bool ea__hist_sample(ea__hist *h, uint64_t now_ms, const ea__hist_point *p);
/* Record a generation (its kind and why as ea__hist_explain set them). */
void ea__hist_generation(ea__hist *h, const ea__hist_gen *g);
void ea__hist_checkpoint(ea__hist *h, const ea__hist_ckpt *ck);
/* The i-th point and generation held, oldest first (NULL past the end). */
const ea__hist_point *ea__hist_point_at(const ea__hist *h, size_t i);
const ea__hist_gen *ea__hist_gen_at(const ea__hist *h, size_t i);

/* Set g->kind and g->why from what changed: first (no generation ran here
 * before), the nodes of the previous generation that are not in this one
 * (gone[i] with fate[i]), those that are new (joined), and whether the job
 * counted a restart (a worker failed: torchrun's restart count, or this
 * node's workers failing).  Every cause present is named, in the order of
 * ea__hist_kind, which also picks kind (the first present): "lost n3;
 * join n4"; lists longer than the text allows end in "…". */
void ea__hist_explain(ea__hist_gen *g, bool first, const char *const *gone,
                      const ea__hist_gone *fate, size_t ngone, const char *const *joined,
                      size_t njoined, bool restarted);

/* The /api/v1/history document, compact JSON appended to out (check
 * out->oom):
 *   {"version":1,"node":N,"now":T,"period_ms":1000,
 *    "capacity":{"points":600,"generations":64},
 *    "points_total":n,"generations_total":n,
 *    "points":[{"t":T,"step":n,"steps_per_s":x,"loss":x|null,"gen":n,"world":n}…],
 *    "generations":[{"gen":n,"id":S,"t":T,"world":n,"nodes":n,"formation_ms":n,
 *                    "stalled_ms":n,"step":n,"kind":S,"why":S}…],
 *    "checkpoint":{"step":n,"gen":n,"t":T,"bytes":n|null}|null}
 * oldest first; T unix seconds with 3 decimals; strings escaped as JSON
 * (invalid UTF-8 as U+FFFD).  Pure: tests/unit/test_history.c pins it. */
void ea__hist_format(const ea__hist *h, const char *node, double now_s, ea_sb *out);

#endif
