/* ea_rdzv.h — the rendezvous ("generations") state machine and the codec of
 * its control messages.
 *
 * Every agent runs one ea_rdzv.  Whoever ea_elect() names controller (and
 * only while it sees a quorum of the last formed generation) forms
 * generations: it picks the members, numbers the generation, persists the
 * number, sends PREPARE to every member, collects READY, and sends COMMIT
 * with the full plan.  Every agent, the controller's own included, obeys
 * only plans newer than anything it has seen, runs at most one generation at
 * a time, and tells its workers what to do.  The protocol, its invariants and
 * the reason strings shown by `status` are described in docs/rendezvous.md.
 *
 * The core is pure: no clock, socket, libuv or logging.  Time comes in as
 * now_ms (any monotonic milliseconds); everything it wants done goes out
 * through ea_rdzv_io, synchronously from inside the call that caused it.
 * The io callbacks must not call back into the core: record, act later.
 *
 * Driving contract (the agent wires these to its loop; tests to a fake one):
 *   - ea_rdzv_view() on every membership change, with the whole view
 *     (ourselves included, as ea_swim_members() returns it);
 *   - ea_rdzv_recv() for every decoded control message;
 *   - ea_rdzv_worker_*() for what the local workers report;
 *   - ea_rdzv_persisted() when a persist the core asked for is durable;
 *   - ea_rdzv_tick() when now >= ea_rdzv_next_deadline() (early is harmless);
 *   - after any call, re-read ea_rdzv_next_deadline() and ea_rdzv_last_gen()
 *     (the latter goes into our gossip metadata as meta.last_gen).
 *
 * Generations are numbered (term, controller id), ordered by term then id.
 * The controller picks term = 1 + the largest term it has seen anywhere, and
 * calls io.persist() before any message carrying the number leaves; an agent
 * persists a generation it accepts before it tells its workers anything or
 * answers READY.  So after a crash, the persisted number handed back to
 * ea_rdzv_new() is at least every number this agent ever acted on or
 * advertised, and it can never obey an older plan.
 */
#ifndef EA_RDZV_H
#define EA_RDZV_H

#include "ea_membership.h"
#include "ea_wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* compute.max_nodes and compute.workers_per_node bounds in config/keys.c. */
#define EA_RDZV_MAX_NODES 65536
#define EA_RDZV_MAX_WPN 64
/* Ranks in one plan.  A COMMIT takes at most 31 bytes per rank and 105 per
 * node, so 2^18 ranks and EA_RDZV_MAX_NODES nodes (≈ 15 MB) stay inside one
 * EA_WIRE_MAX_FRAME (16 MiB) TCP frame. */
#define EA_RDZV_MAX_WORLD (1u << 18)
/* NCCL_UNIQUE_ID_BYTES (= EA_COMM_NCCL_ID_BYTES; checked in agent/workers.c,
 * where plans become the workers' orders: rdzv/ does not know train/). */
#define EA_RDZV_NCCL_ID_BYTES 128
/* Room for a reason string shown by `status`. */
#define EA_RDZV_REASON_MAX 160

/* ---- generation numbers ------------------------------------------------ */

typedef struct {
  uint64_t term;   /* 0: no generation */
  ea_node_id ctrl; /* the controller that issued it */
} ea_rdzv_gen;

/* <0, 0, >0 like memcmp: term first, then controller id. */
int ea_rdzv_gen_cmp(const ea_rdzv_gen *a, const ea_rdzv_gen *b);
/* 64-bit form for ea_meta.last_gen and ea_comm_plan.generation: the term in
 * the high 48 bits, the controller id's first two bytes in the low 16, so
 * it orders like ea_rdzv_gen_cmp unless two same-term controllers share
 * those bytes (probability 2^-16), when the two compare equal. */
uint64_t ea_rdzv_gen_u64(const ea_rdzv_gen *g);
/* "7" or "7/1f2e3d4c" (term / first 8 hex digits of the controller id). */
void ea_rdzv_gen_str(const ea_rdzv_gen *g, char *out, size_t cap);

/* The 64-bit form, taken apart and put together.  Everything that handles
 * the u64 (meta.last_gen, plan and IPC generations, step-S.gen-G directory
 * names) asks these instead of shifting bits itself:
 *
 *   63                              16 15               0
 *   +---------------------------------+------------------+
 *   | term (48 bits)                  | ctrl.b[0] b[1]   |
 *   +---------------------------------+------------------+
 */
#define EA_RDZV_GEN64_CTRL_BITS 16
/* term << 16 | ctrl16, where ctrl16 is the controller id's first two bytes
 * (big endian).  ea_rdzv_gen_u64(g) = pack(g->term, those of g->ctrl), or 0
 * for term 0. */
uint64_t ea_rdzv_gen64_pack(uint64_t term, uint16_t ctrl16);
/* The term of a 64-bit generation (0: none). */
uint64_t ea_rdzv_gen64_term(uint64_t g64);
/* Its controller part: the first two bytes of the controller id. */
uint16_t ea_rdzv_gen64_ctrl(uint64_t g64);
/* The generation a 64-bit form names, as far as it tells: the term and the
 * controller id's first two bytes, its other 14 bytes zero (term 0: all
 * zero).  ea_rdzv_gen_u64(out) == g64 for every g64 ea_rdzv_gen_u64 returns. */
void ea_rdzv_gen64_unpack(uint64_t g64, ea_rdzv_gen *out);

/* ---- plans ------------------------------------------------------------- */

typedef struct {
  ea_addr listen; /* tcp backend: where this rank's worker accepts its peers */
  uint64_t step;  /* steps this rank has completed (0: no live state) */
  /* The 64-bit generation its last step was trained in (0: not known — a
   * state just loaded from a checkpoint, or a peer too old to say). */
  uint64_t state_gen;
} ea_rdzv_worker;

typedef struct {
  ea_node_id id;
  char name[EA_NAME_MAX];
  ea_addr control;
} ea_rdzv_node;

/* A committed generation.  Node i holds ranks [i·wpn, (i+1)·wpn); its local
 * worker k is rank i·wpn + k.  The rank with the most completed steps (the
 * lowest such rank on a tie) broadcasts its state: sync_rank.  has_sync is
 * false when no rank has live state (cold start, or every trained node
 * lost) or when every live state is older than the newest committed
 * checkpoint (ea_rdzv_set_latest_ckpt): the generation loads the newest
 * checkpoint instead. */
typedef struct {
  ea_rdzv_gen gen;
  uint32_t nnodes, wpn, world; /* world = nnodes · wpn */
  ea_rdzv_node *nodes;         /* nnodes, in rank order */
  ea_rdzv_worker *ranks;       /* world */
  bool has_sync;
  uint32_t sync_rank;
  uint64_t sync_step;
  bool has_nccl_id; /* made by rank 0's worker, handed to every rank */
  uint8_t nccl_id[EA_RDZV_NCCL_ID_BYTES];
  /* Times the job has been restarted after a worker failed, this plan
   * included (torchrun's TORCHELASTIC_RESTART_COUNT): one more than the
   * generation before when it re-formed, with the same nodes, because a
   * worker failed; the same otherwise (a node lost or joined, a drain). */
  uint64_t restarts;
} ea_rdzv_plan;

/* ---- control messages ---------------------------------------------------
 *
 * One message per TCP frame on the control connection (meta.control):
 *
 *   frame = [frame header][0xEA | msgpack msg]              (plaintext)
 *         = [frame header][0xEC | nonce | AEAD(rp | msg) ]  (sealed, ea_wire_seal_rp)
 *
 * (the frame header and the replay header rp: ea_wire.h).  The plaintext
 * starts with 0xEA so ea_wire_seal_rp/ea_wire_open_rp apply as they are; the types start at 0x10,
 * so a control message that reaches the gossip decoder (whose types are 1..5) or the reverse fails
 * at `type`.
 *
 *   msg     = [ version=1, type, src:bin16, gen, body ]
 *   gen     = [ term:uint, ctrl:bin16 ]          (term 0: none)
 *   addr    = bin19: family(1) port(2, big endian) ip(16)   (as ea_wire.h)
 *   nccl    = bin128 | nil
 *
 *   type  name     gen is            body
 *   0x10  PREPARE  the new one       [ world, wpn, rank_base, boundary:bool ]
 *   0x11  READY    the prepared one  [ [worker, …] (wpn of them), nccl,
 *                                      formed:gen ]
 *   0x12  COMMIT   the plan's        [ wpn, sync_rank|nil, sync_step, nccl,
 *                                      [node, …], [worker, …] (world) ]
 *   0x13  NACK     the refused one   [ seen:gen, why:uint (ea_rdzv_nack) ]
 *   0x14  ABORT    the abandoned one nil   (a prepared one, or the running
 *                                            one stopped: see below)
 *   0x15  DRAIN    none              [ name:str, target:bin16, incarnation:uint ]
 *   0x16  REPORT   running/prepared  [ accepted:gen, flags:uint ]  (EA_RDZV_F_*)
 *   0x17  QUERY    none              nil
 *   0x18  STATE    last formed       [ id:bin16, … ]  (rank order)
 *   0x19  RELEASE  the new one       nil
 *   0x1A  BLAME    the failed one    [ peer:bin16 ]
 *
 *   worker  = [ listen:addr, step:uint ]
 *   node    = [ id:bin16, name:str, control:addr ]
 *
 * Arrays have exactly the lengths shown, with one exception: a READY may
 * carry a 4th element and a COMMIT a 7th, `restarts:uint` (the job's restart
 * count: the newest a member knows, the plan's), sent only when it is not 0,
 * so agents of an older version understand every message of a job that has
 * not restarted.  world = len(nodes) · wpn is checked, as are every bound
 * below.
 *
 * BLAME (member → controller) goes with a REPORT that says a local worker
 * failed in gen, just before it, when that worker named the peer it could
 * not exchange with (ea_rdzv_worker_failed_peer): peer is that rank's node.
 * A type of its own rather than a third REPORT element, so that an older
 * controller drops only the blame ("type") and still reads the REPORT.
 *
 * In restart mode (torchrun) rank 0's worker entry carries MASTER_ADDR and
 * MASTER_PORT: the advertised address of its node and a port its agent found
 * free for this generation (where the program's rank 0 hosts its store).
 */

#define EA_RDZV_WIRE_VERSION 1

typedef enum {
  EA_RDZV_PREPARE = 0x10, /* controller → member: abort the old, get ready */
  EA_RDZV_READY = 0x11,   /* member → controller: my workers are ready */
  EA_RDZV_COMMIT = 0x12,  /* controller → member: the full plan, go */
  EA_RDZV_NACK = 0x13,    /* member → controller: refused, and why */
  EA_RDZV_ABORT = 0x14,   /* controller → member: forget that PREPARE; of the
                             generation running: stop it, it cannot re-form
                             without its draining members (a drainer drains,
                             the others pause) */
  EA_RDZV_DRAIN = 0x15,   /* anyone → the named node: drain yourself */
  EA_RDZV_REPORT = 0x16,  /* member → controller: failed / draining / idle */
  EA_RDZV_QUERY = 0x17,   /* controller → member: which generation formed last? */
  EA_RDZV_STATE = 0x18,   /* answer to QUERY and REPORT: the last formed
                             generation and its members */
  EA_RDZV_RELEASE = 0x19, /* controller → non-member: the group re-formed without you */
  EA_RDZV_BLAME = 0x1A,   /* member → controller: my worker could not exchange with peer */
} ea_rdzv_msg_type;

typedef enum {
  EA_RDZV_NACK_STALE = 1,    /* I have seen `seen`, which is not older than yours */
  EA_RDZV_NACK_DRAINING = 2, /* I am draining: leave me out */
  EA_RDZV_NACK_CONFIG = 3,   /* your workers_per_node is not mine */
} ea_rdzv_nack;

/* REPORT flags. */
#define EA_RDZV_F_RUNNING 0x01   /* gen is running here */
#define EA_RDZV_F_PREPARING 0x02 /* gen is prepared here, waiting for COMMIT */
#define EA_RDZV_F_FAILED 0x04    /* a local worker failed in gen */
#define EA_RDZV_F_DRAINING 0x08  /* this node is draining */
/* A local worker is (re)starting and has not said hello yet (library mode:
 * Python and `import torch` still running): take this node into no
 * generation — neither keep it as a survivor nor take it as a joiner —
 * until a REPORT without it (see "Admission after hello" below). */
#define EA_RDZV_F_STARTING 0x10
#define EA_RDZV_F_ALL 0x1f

typedef struct {
  uint8_t type; /* ea_rdzv_msg_type */
  ea_node_id src;
  ea_rdzv_gen gen;
  /* PREPARE: this node's workers become ranks rank_base .. rank_base+wpn-1
   * of world; boundary: the reason is a join, finish the step in flight. */
  uint32_t world, wpn, rank_base;
  bool boundary;
  /* READY: wpn entries, local worker order. */
  uint32_t nworkers;
  ea_rdzv_worker workers[EA_RDZV_MAX_WPN];
  bool has_nccl_id; /* READY: from the node holding rank 0 */
  uint8_t nccl_id[EA_RDZV_NCCL_ID_BYTES];
  /* READY: the last formed generation the member knows, so a controller
   * whose own reference is older learns of the newer one before it
   * commits anything on a stale quorum. */
  ea_rdzv_gen formed;
  /* READY: the newest restart count this member has seen in a COMMIT. */
  uint64_t restarts;
  /* NACK */
  ea_rdzv_gen seen;
  uint8_t nack; /* ea_rdzv_nack */
  /* REPORT: gen is the running (or prepared) one, term 0 when idle. */
  ea_rdzv_gen accepted;
  uint8_t flags;
  /* BLAME: the node of the rank a local worker could not exchange with */
  ea_node_id peer;
  /* DRAIN: the member it is for, precisely: its name, id and the
   * incarnation the sender saw.  The receiver drains only when the id is
   * its own and the incarnation one of this run's (a DRAIN of an earlier run
   * of the node, replayed, names an older incarnation: refused). */
  char name[EA_NAME_MAX];
  ea_node_id target;
  uint32_t target_inc;
  /* COMMIT: the whole plan (plan.gen == gen).  STATE: plan.nodes[i].id
   * only, world 0.  Arrays owned as documented at ea_rdzv_decode. */
  ea_rdzv_plan plan;
} ea_rdzv_msg;

const char *ea_rdzv_msg_type_str(uint8_t type);

/* Encode m into a malloc'd buffer (*out; the caller free()s it) that starts
 * with 0xEA.  Returns 0, -EINVAL for a message that breaks a bound (type,
 * counts, world), or -ENOMEM. */
int ea_rdzv_encode(const ea_rdzv_msg *m, uint8_t **out, size_t *len);
/* Decode a plaintext frame (0xEA first).  m is overwritten.  COMMIT and
 * STATE arrays are malloc'd, their counts bounded by the bytes that can hold
 * them before anything is allocated; release them with ea_rdzv_msg_release.
 * On error returns -EA_EWIRE (or -ENOMEM), allocates nothing, and points
 * *err (if not NULL) at a static string naming the bad field. */
int ea_rdzv_decode(const uint8_t *buf, size_t len, ea_rdzv_msg *m, const char **err);
/* Free what ea_rdzv_decode allocated in m; safe on any decoded or zeroed m. */
void ea_rdzv_msg_release(ea_rdzv_msg *m);

/* ---- the state machine -------------------------------------------------- */

typedef struct ea_rdzv ea_rdzv;

typedef struct {
  uint32_t min_nodes;             /* compute.min_nodes */
  uint32_t max_nodes;             /* compute.max_nodes */
  uint32_t workers_per_node;      /* compute.workers_per_node */
  uint32_t scale_up_delay_ms;     /* distributed.scale_up_delay_ms */
  uint32_t rendezvous_timeout_ms; /* runtime.rendezvous_timeout_seconds · 1000 */
  bool quorum_none;               /* distributed.quorum == "none" */
  /* Restart mode (torchrun): every generation restarts the programs, which
   * report no steps, so a join does not wait for a step boundary. */
  bool restart_mode;
  /* A re-formation after a worker failure that would make plan.restarts
   * exceed this fails the job instead (EA_RDZV_JOB_RESTARTS); UINT32_MAX:
   * never (builtin mode, where a node restarts its own workers). */
  uint32_t max_restarts;
  /* As controller with a quorum: waiting this long for min_nodes fails the
   * job (EA_RDZV_JOB_MIN_NODES); 0: wait for ever. */
  uint32_t min_nodes_timeout_ms;
  /* Flapping nodes (see "Hold-outs" below): a node that fails more than
   * flap_threshold times within flap_window_ms is held out of generations
   * for flap_cooldown_ms, doubled on each repeat.  flap_threshold 0: never
   * (the default of ea_rdzv_config_default; runtime.flap_* in a job).  The
   * cooldown is also what a straggler evicted by ea_rdzv_hold_out sits out. */
  uint32_t flap_threshold;
  uint32_t flap_window_ms;
  uint32_t flap_cooldown_ms;
  /* The last moment (see "A checkpoint before a mass preemption" below):
   * how long the controller holds the running generation together for one
   * last checkpoint when its drainers would leave fewer than min_nodes
   * (runtime.preemption_grace_seconds · 1000); 0: it lets them go at once. */
  uint32_t last_ckpt_ms;
} ea_rdzv_config;

/* The defaults of config/keys.c, with no job limits (max_restarts
 * UINT32_MAX, no min_nodes timeout: the simulator's tests run for ever). */
void ea_rdzv_config_default(ea_rdzv_config *c);

typedef enum {
  EA_RDZV_DO_PREPARE = 1, /* abort the old communicator; get ready for gen as
                             ranks rank_base + local of world; report with
                             ea_rdzv_worker_ready() */
  EA_RDZV_DO_COMMIT = 2,  /* init the communicator of plan; sync state */
  EA_RDZV_DO_PAUSE = 3,   /* stop training, drop the communicator, wait */
  EA_RDZV_DO_DRAINED = 4, /* the group re-formed without us: stop workers;
                             the agent may now leave and exit */
} ea_rdzv_order_kind;

typedef struct {
  uint8_t kind; /* ea_rdzv_order_kind */
  ea_rdzv_gen gen;
  uint32_t rank_base, world, wpn; /* PREPARE */
  const ea_rdzv_plan *plan;       /* COMMIT; valid during the call only */
  const char *why;                /* PAUSE, DRAINED: a reason for the log */
} ea_rdzv_order;

typedef struct {
  void *ctx; /* passed back unchanged */
  /* Send m to the agent `to` at its control address.  m and its arrays are
   * valid for the duration of the call only.  Delivery may fail silently:
   * the protocol retries or times out (PREPARE and READY are re-sent every
   * 250 ms while a formation waits, a lost COMMIT when the member's READY
   * asks again, REPORT and QUERY every second). */
  void (*send)(void *ctx, const ea_node_id *to, const ea_addr *control, const ea_rdzv_msg *m);
  /* Tell the local workers (through the supervisor) what to do. */
  void (*order)(void *ctx, const ea_rdzv_order *o);
  /* Make g durable (data_dir/generation: write, fsync, rename), then call
   * ea_rdzv_persisted(g, rc) — later, never from inside this callback.  The
   * core has at most one persist outstanding. */
  void (*persist)(void *ctx, const ea_rdzv_gen *g);
  /* Optional: the status reason changed (for the log). */
  void (*reason)(void *ctx, const char *text);
} ea_rdzv_io;

/* Create the rendezvous of agent `self`.  persisted is what the last
 * persist left durable (NULL or term 0: none).  The config and io are
 * copied.  Returns NULL on allocation failure or a config out of bounds
 * (0 workers, max_nodes · workers_per_node > EA_RDZV_MAX_WORLD, …). */
ea_rdzv *ea_rdzv_new(const ea_rdzv_config *cfg, const ea_node_id *self,
                     const ea_rdzv_gen *persisted, const ea_rdzv_io *io, uint64_t seed,
                     uint64_t now_ms);
void ea_rdzv_free(ea_rdzv *r);

/* The membership view changed.  members is copied. */
void ea_rdzv_view(ea_rdzv *r, uint64_t now_ms, const ea_member *members, size_t n);
/* A decoded control message arrived. */
void ea_rdzv_recv(ea_rdzv *r, uint64_t now_ms, const ea_rdzv_msg *m);
/* The persist of g finished: rc 0 (durable) or a negative errno. */
void ea_rdzv_persisted(ea_rdzv *r, uint64_t now_ms, const ea_rdzv_gen *g, int rc);

/* Local worker `local` (0 .. wpn-1) is ready for gen: listening at listen,
 * having completed `step` steps; nccl_id (NULL unless it holds rank 0 and
 * the backend is nccl) is its unique id.  Returns 0, -EINVAL for a bad
 * index, or -ESTALE when gen is not the one being prepared (ignored). */
int ea_rdzv_worker_ready(ea_rdzv *r, uint64_t now_ms, uint32_t local, const ea_rdzv_gen *gen,
                         const ea_addr *listen, uint64_t step, uint64_t state_gen,
                         const uint8_t *nccl_id);
/* The generation of the newest committed checkpoint this node knows of
 * (its LATEST, 64-bit form; 0: none).  Set it only when
 * generations without a sync source resume from the newest checkpoint
 * (checkpoint.resume_from_last).  A live state whose last step was trained
 * in an older generation than that checkpoint's is a lineage the job left
 * behind — a side cut off while the rest trained on and committed, then
 * finished or lost its own live state — and syncing from it would train
 * committed steps a second time: the plan skips such ranks as sync sources
 * (and with none left has no sync: the generation loads the checkpoint).
 * A state of unknown generation (0) counts as older. */
void ea_rdzv_set_latest_ckpt(ea_rdzv *r, uint64_t gen64);
/* As controller of a formed generation: form a new one from the members
 * (the running one stops, as after a membership change: nobody is blamed,
 * nothing counts as a failure or a restart); why is the reason status and
 * the log show.  The smoke run restores its checkpoint this way.  0, or
 * -EAGAIN when this node is not the controller or nothing is formed. */
int ea_rdzv_reform(ea_rdzv *r, uint64_t now_ms, const char *why);
/* Local worker `local` has completed `step` steps (a step boundary). */
void ea_rdzv_worker_step(ea_rdzv *r, uint64_t now_ms, uint32_t local, uint64_t step);
/* Local worker `local` failed: its communicator broke or it died. */
void ea_rdzv_worker_failed(ea_rdzv *r, uint64_t now_ms, uint32_t local);
/* The same, and the worker named the peer it could not exchange with: a
 * rank of node `peer` (NULL, ourselves: as ea_rdzv_worker_failed).  The
 * REPORT of the failure goes with a BLAME naming peer (see "Link blame"). */
void ea_rdzv_worker_failed_peer(ea_rdzv *r, uint64_t now_ms, uint32_t local,
                                const ea_node_id *peer);

/* Drain `name` (NULL or "" or our own name: ourselves).  Another node's name
 * is forwarded to it as DRAIN.  Returns 0, or -ENOENT when no alive member
 * has that name. */
int ea_rdzv_drain(ea_rdzv *r, uint64_t now_ms, const char *name);

/* Run timers.  Returns the next deadline (UINT64_MAX: none). */
uint64_t ea_rdzv_tick(ea_rdzv *r, uint64_t now_ms);
uint64_t ea_rdzv_next_deadline(const ea_rdzv *r);

/* For meta.last_gen: ea_rdzv_gen_u64 of the last generation this agent ran
 * as a member (0: none since start). */
uint64_t ea_rdzv_last_gen(const ea_rdzv *r);
/* The plan being run, or NULL.  Valid until the next call into the core. */
const ea_rdzv_plan *ea_rdzv_running(const ea_rdzv *r);

/* The controller election: the one answer on this node to "who is the
 * controller, and may it act?".  The core computes it with ea_elect() over
 * the view last given to ea_rdzv_view() and the quorum rule over the last
 * formed generation (distributed.quorum), after every call; callers ask
 * here instead of electing again.
 *
 *   have, controller  the alive or suspect, non-observer member with the
 *                     lowest id — named whether or not it has a quorum (the
 *                     quorum never changes *who*, only whether it may act);
 *   has_quorum        true under quorum: none, before any generation formed,
 *                     and while a majority of the last formed generation
 *                     (graceful leavers not counted) is alive in the view;
 *   eligible          eligible members alive in the view;
 *   reason            why this one / why none, and the quorum count
 *                     ("…; quorum 2 of 3", "no quorum: 1 of 3; …").
 *
 * NULL until the first ea_rdzv_view().  Valid until the next call into the
 * core. */
const ea_election *ea_rdzv_election(const ea_rdzv *r);

typedef enum {
  EA_RDZV_IDLE = 0,     /* in no generation (spare, or waiting for one) */
  EA_RDZV_PREPARED = 1, /* accepted a PREPARE, workers getting ready */
  EA_RDZV_RUNNING = 2,  /* running a committed generation */
  EA_RDZV_FAILED = 3,   /* running one whose communicator broke */
  EA_RDZV_PAUSED = 4,   /* stopped: no quorum, or the formation was aborted */
  EA_RDZV_DRAINED = 5,  /* drained: nothing more to do */
} ea_rdzv_phase;

/* Why the controller gave the job up (ea_rdzv_status.job_failed). */
typedef enum {
  EA_RDZV_JOB_OK = 0,
  EA_RDZV_JOB_RESTARTS = 1,  /* a worker failed again with max_restarts used up */
  EA_RDZV_JOB_MIN_NODES = 2, /* fewer than min_nodes for rendezvous_timeout */
} ea_rdzv_job_fail;

/* Admission after hello.  A node whose local worker has not yet said hello
 * since it (re)started — a library program still importing torch and
 * building its model — is taken into no generation: not as a joiner, not
 * into the first one, and not kept as a survivor when its worker restarted
 * in the running generation (the others re-form without it and it comes
 * back as a joiner), so the running ranks never stand still waiting for a
 * Python start (docs/pytorch.md).  Two signals say so:
 *   - the REPORT flag EA_RDZV_F_STARTING (ea_rdzv_worker_starting): fast,
 *     it goes out with the worker's failure report; the controller believes
 *     the newest REPORT of a node, either way, for EA_RDZV_STARTING_TTL_MS
 *     (the member re-sends it every REPORT_MS while a worker starts) — a
 *     REPORT without the flag only from a node that had set it (one that
 *     never does, builtin mode or an older agent, is judged by its tag);
 *   - otherwise its gossip tags ("k=v,k=v") holding EA_RDZV_TAG_STARTING,
 *     which its agent sets as long.
 * Waived for members of the running generation when without them fewer
 * than min_nodes would remain, or no majority of it: they are kept and
 * waited for, as before the flag. */
#define EA_RDZV_TAG_STARTING "ea.starting=1"
/* Three report periods: a lost REPORT costs at most this, after which the
 * gossip tag (by then propagated) decides. */
#define EA_RDZV_STARTING_TTL_MS 3000u
/* Local worker `local` is starting (on: spawned, no hello yet) or up (off:
 * it said hello).  Library mode only; a node that never calls it reports
 * no EA_RDZV_F_STARTING.  While any is starting, REPORTs carry the flag and
 * are re-sent every REPORT_MS; when the last says hello, one goes out
 * without it at once. */
void ea_rdzv_worker_starting(ea_rdzv *r, uint64_t now_ms, uint32_t local, bool on);
/* Whether the comma-separated tags hold token exactly. */
bool ea_rdzv_tags_have(const char *tags, const char *token);
/* Add (on) or remove (off) token in tags (capacity cap): 0, or -ENOSPC
 * when it does not fit (tags unchanged). */
int ea_rdzv_tags_set(char *tags, size_t cap, const char *token, bool on);

/* Churn damping.  A generation that breaks by a worker failure within
 * EA_RDZV_CHURN_WINDOW_MS of its commit, for the same reason as the one
 * before, makes a streak; from its second member on, the next formation
 * waits ea_rdzv_churn_delay_ms() (the first retry is immediate: one failure
 * is the common case and recovery time matters).  A generation that lives
 * longer ends the streak.  A minute: a restart storm (a program that dies
 * at import, a checkpoint that cannot load) turns over in seconds; a
 * generation that ran for a minute did work. */
#define EA_RDZV_CHURN_WINDOW_MS 60000u
/* The first wait of a streak; doubled per further failure. 500 ms: a few
 * formations (milliseconds each) plus process starts, so a storm drops from
 * hundreds of generations a second to a handful in the first seconds. */
#define EA_RDZV_CHURN_BASE_MS 500u
/* The wait before the next formation when the streak counts `streak`
 * generations (0 for streak < 2): base · 2^(streak−2), at most cap, times a
 * jitter factor in [½, 1) taken from r64 (any 64-bit random number), so
 * controllers and retries do not move in lockstep. */
uint64_t ea_rdzv_churn_delay_ms(uint32_t streak, uint64_t cap_ms, uint64_t r64);

/* ---- hold-outs (controller side) -----------------------------------------
 *
 * Horovod Elastic's blacklist with cooldown.  The controller counts the
 * failures of each node of the last formed generation: it died (DEAD in
 * the view), it restarted (a new incarnation that ran nothing since its
 * start: meta.last_gen back to 0), or its agent says a worker crashed
 * (ea_rdzv_node_failed) — at most one per node per formed generation, since
 * the generation it breaks is what a failure costs.  More than
 * flap_threshold of them within flap_window_ms hold the node out of every
 * generation (neither kept as a survivor nor taken as a joiner) for
 * flap_cooldown_ms · 2^(k−1) at its k-th hold-out, at most
 * max(flap_cooldown_ms, EA_RDZV_HOLD_CAP_MS); the count of hold-outs is
 * never forgiven while this controller lives (Horovod's neither).  When the
 * hold ends the node is a joiner like any other.  A node held out while it
 * is in the running generation (a straggler evicted) makes that generation
 * re-form without it.  A hold never costs the job its min_nodes or its
 * quorum: while fewer than min_nodes nodes could train without the
 * held-out ones, or those would be no majority of the last generation,
 * every hold is waived (ea_rdzv_held.waived) and they are kept or taken
 * like the others.  The controller never holds itself out.
 *
 * The record is the controller's alone: a new controller starts with none
 * (it has not seen the failures; docs/operations.md says so). */
#define EA_RDZV_HOLD_CAP_MS 3600000u /* an hour: the longest hold a repeat grows to */

typedef enum {
  EA_RDZV_HOLD_FLAP = 1,      /* it failed too often */
  EA_RDZV_HOLD_STRAGGLER = 2, /* evicted as a straggler (observability.straggler_evict) */
  EA_RDZV_HOLD_LINK = 3,      /* one end of a link blamed generation after generation */
} ea_rdzv_hold_why;

const char *ea_rdzv_hold_why_str(uint8_t why); /* "flapping", "straggler", "link" */

/* ---- link blame (controller side) ------------------------------------------
 *
 * A gray failure: one link between two nodes of the generation loses what
 * one end sends (a one-way drop), while gossip still reaches both through
 * other paths, so SWIM keeps both alive and every re-formation takes the
 * same nodes and stalls again.  A worker whose communicator can tell which
 * peer it could not exchange with (ea_comm_blame) names it; its agent's
 * BLAME reaches the controller with the failure's REPORT.  The controller
 * counts, per unordered pair of nodes, the consecutive formed generations
 * that failed with a blame on that pair (at most one per generation,
 * whoever sent it); at EA_RDZV_BLAME_GENS it holds one end out, as a
 * flapping node is held (why "link", for flap_cooldown_ms doubled on each
 * hold-out of that node, waived while the job would fall below min_nodes
 * or its quorum), so the rest trains; the node comes back as a joiner
 * once the hold ends, and if the link still fails the count starts again.
 * A formed generation without a blame on the pair ends its count.
 *
 * Which end: never the controller; otherwise the end the blames named,
 * when they named only one (the one that did not answer: the receiver of
 * a one-way drop is the end that acknowledges nothing); when both ends
 * named each other, the higher name (then the higher id), so every
 * controller picks the same one whatever order the blames arrive in. */
/* Two: one failed generation is what any failure costs (a peer process
 * that hung once); the same link failing again right after, with both
 * nodes alive, is the gray failure that would otherwise repeat until it
 * heals — two is the earliest that tells them apart. */
#define EA_RDZV_BLAME_GENS 2u

/* A link probe's verdict (agent/job/link.c), as controller: member `by`
 * pinged `peer` over the control channel twice in a row, a second apart,
 * and heard nothing, while gossip keeps both alive.  That is direct
 * evidence of the gray link, not a collective's failure that a hung
 * process could explain too, so one end is held out at once (why "link",
 * the cooldown and waiver of any hold) and the generation re-forms without
 * it.  Which end: never the controller; otherwise the higher name (then
 * the higher id) — a one-way drop breaks a TCP connection both ways, so
 * both ends find each other unreachable and which one said it first tells
 * nothing.  Returns 0 (held out now), -EPERM when this agent is not the
 * controller, -ENOENT when by or peer is not a member of the last formed
 * generation (a stale verdict), -ESRCH when either is not alive in this
 * view (suspect or dead: a node failure, membership's to judge), -EINVAL
 * when by == peer, -EALREADY when the end picked is held out already. */
int ea_rdzv_link_down(ea_rdzv *r, uint64_t now_ms, const ea_node_id *by, const ea_node_id *peer);

typedef struct {
  ea_node_id id;
  char name[EA_NAME_MAX];
  uint8_t why;       /* ea_rdzv_hold_why */
  char text[128];    /* "3 failures in 60 s (last: died)" */
  uint64_t until_ms; /* the core's clock: held out while now < until_ms */
  uint32_t holds;    /* hold-outs so far, this one included */
  uint32_t failures; /* failures counted within the window now */
  bool waived;       /* not applied now: fewer than min_nodes could train without it */
} ea_rdzv_held;

/* A worker of node `id` crashed (its agent told the controller): a failure
 * of that node, counted as above.  Ignored unless this agent is the
 * controller and id is a member of the last formed generation. */
void ea_rdzv_node_failed(ea_rdzv *r, uint64_t now_ms, const ea_node_id *id, const char *what);
/* Hold `id` out now for its next cooldown (as a flap hold-out would),
 * for `why` with `text` (shown in status).  Returns 0; -EPERM when this
 * agent is not the controller; -EINVAL for ourselves (never held out);
 * -EALREADY when it is held out already. */
int ea_rdzv_hold_out(ea_rdzv *r, uint64_t now_ms, const ea_node_id *id, uint8_t why,
                     const char *text);
/* The nodes held out now (controller only; 0 elsewhere), at most cap of
 * them into out; returns how many are held out in all. */
size_t ea_rdzv_held_out(const ea_rdzv *r, ea_rdzv_held *out, size_t cap);
/* Whether id is held out now. */
bool ea_rdzv_is_held(const ea_rdzv *r, const ea_node_id *id);

/* ---- spares ----------------------------------------------------------------
 *
 * Nodes beyond compute.max_nodes wait: once the last formed generation
 * holds max_nodes nodes, every other live worker node that is not draining
 * is a spare.  When a member is lost the controller fills the new
 * generation up to max_nodes with joiners in node-id order (the view's
 * order), skipping those not ready; so the spare taken first is the ready
 * one with the lowest id, on every controller alike.  Not ready:
 *   - STARTING: a worker still starting (library mode: no hello yet; restart
 *     mode: a warm interpreter importing), EA_RDZV_TAG_STARTING above;
 *   - UNFIT: its agent's own health check failed (a checkpoint directory it
 *     cannot write, …): the gossip tag EA_RDZV_TAG_UNFIT, which keeps a
 *     node out of every generation after the first as a joiner (a member
 *     keeps its place: its own checkpoint path reports its errors; the
 *     first generation takes everyone, as it would without the check);
 *   - HELD: held out (flapping, straggler, link) or sitting out a failed
 *     formation — known to the controller only.
 * Every node can list them from its view (the same order everywhere). */
#define EA_RDZV_TAG_UNFIT "ea.unfit=1"

typedef enum {
  EA_RDZV_SPARE_READY = 0,
  EA_RDZV_SPARE_STARTING = 1,
  EA_RDZV_SPARE_UNFIT = 2,
  EA_RDZV_SPARE_HELD = 3,
} ea_rdzv_spare_state;

typedef struct {
  ea_node_id id;
  char name[EA_NAME_MAX];
  uint8_t state; /* ea_rdzv_spare_state */
} ea_rdzv_spare;

/* The spares now, in the order they would be taken (ready ones first, each
 * group by node id), at most cap into out; returns how many there are (0
 * while the last formed generation holds fewer than max_nodes nodes: then
 * a waiting node is a joiner, taken in at the next formation). */
size_t ea_rdzv_spares(const ea_rdzv *r, ea_rdzv_spare *out, size_t cap);
/* The last formed generation known here (*gen; term 0: none) and its
 * nodes, at most cap into out; returns how many it holds.  A controller
 * outside it (a spare can be elected) knows it as well as a member. */
size_t ea_rdzv_formed_ids(const ea_rdzv *r, ea_rdzv_gen *gen, ea_node_id *out, size_t cap);
const char *ea_rdzv_spare_state_str(uint8_t state);

/* ---- a checkpoint before a mass preemption (controller side) ----------------
 *
 * The last moment.  When the members of the running generation that drain
 * (a preemption notice, SIGTERM, `drain`) would leave fewer than min_nodes,
 * no generation can form without them and the controller would stop the
 * running one at once (the drainers leave, the others pause), losing every
 * step since the last periodic checkpoint.  With last_ckpt_ms set, and
 * only while every member is still up and the generation is whole (no
 * member dead, excluded or restarting, no failure reported: its ranks can
 * still stage their state), the controller first holds the generation
 * together — the drainers keep training — and says so in its status
 * (ea_rdzv_status.last_ckpt: EA_RDZV_LASTCK_WAITING) until its agent has
 * committed one checkpoint of the current step and calls
 * ea_rdzv_last_ckpt_done, or last_ckpt_ms has passed
 * (EA_RDZV_LASTCK_TIMED_OUT: the agent says so and keeps the last good
 * checkpoint); then it stops the generation as before.  Once per formed
 * generation.  Taking the checkpoint is the agent's (agent/preempt.c):
 * this core only decides when, and how long it may take.
 *
 * The same hold when every member of the generation drains and spares
 * would form the next one alone (enough of them for min_nodes): none of
 * them holds the state, so without it they would resume the last periodic
 * checkpoint.  After the hold they form the next generation, which resumes
 * this checkpoint (ea_rdzv_status.last_ckpt_spares says which case).
 *
 * Notices to a pool arrive over a few hundred milliseconds (each agent
 * polls at its own moment; SIGTERMs from an orchestrator, one by one), and
 * a re-formation without the first drainer would let it go before the
 * next notice makes it a mass preemption.  So, with last_ckpt_ms set, a
 * generation broken only by drains re-forms EA_RDZV_DRAIN_BATCH_MS after
 * the first of them (the drainers train on meanwhile: the wait costs no
 * step, only the drainer's departure). */
#define EA_RDZV_DRAIN_BATCH_MS 500u
typedef enum {
  EA_RDZV_LASTCK_NONE = 0,
  EA_RDZV_LASTCK_WAITING = 1,   /* holding the generation for its checkpoint */
  EA_RDZV_LASTCK_DONE = 2,      /* ea_rdzv_last_ckpt_done came in time */
  EA_RDZV_LASTCK_TIMED_OUT = 3, /* last_ckpt_ms passed first */
} ea_rdzv_lastck;

const char *ea_rdzv_lastck_str(uint8_t s); /* "none", "waiting", "done", "timed out" */
/* The agent is done with the last checkpoint of generation gen64 (committed,
 * or given up: the generation is stopped either way).  Ignored unless this
 * agent is the controller holding that generation for it. */
void ea_rdzv_last_ckpt_done(ea_rdzv *r, uint64_t now_ms, uint64_t gen64);

/* ---- straggler detection (rdzv/straggler.c) --------------------------------
 *
 * The controller's judge of the ranks' pace.  Every member sends, once a
 * second, each of its ranks' mean forward/backward seconds per step
 * (step.compute_seconds: the allreduce is left out, since in synchronous
 * training every rank waits there for the slowest, which would hide it).
 * A rank is *slow* while its newest sample is over factor × the median of
 * the fresh samples (and over it by at least EA_RDZV_STRAG_MIN_EXCESS_S);
 * slow without a break for window_ms, it is a *straggler*. (Slow since the
 * first eval that found it slow, as of that sample's arrival.)  The median is
 * the lower one: with two ranks the faster is the reference, so the
 * slower of two can be a straggler; when most ranks are slow, the median is
 * slow and none is.  Fewer than two fresh ranks: nothing is judged.
 *
 * Pure: time comes in as now_ms; nothing is sent or logged.  One
 * generation at a time: a sample of a newer one forgets the older. */

/* Below a millisecond the difference is timer and scheduler noise (a
 * context switch, a cache miss storm), however large the ratio: a tiny
 * model's step takes tens of microseconds. */
#define EA_RDZV_STRAG_MIN_EXCESS_S 0.001
/* A rank whose newest sample is older than this is not compared (3 report
 * periods: it stopped stepping, or its reports are lost). */
#define EA_RDZV_STRAG_STALE_MS 3000

typedef struct ea_rdzv_strag ea_rdzv_strag;

typedef struct {
  bool have;              /* it has reported in this generation */
  ea_node_id node;        /* the member that reported it */
  double compute_s;       /* its newest sample */
  uint64_t at_ms;         /* when that arrived */
  bool slow;              /* over factor × median at the last eval */
  uint64_t slow_since_ms; /* its first slow sample of the current run (0: not slow) */
  bool straggler;         /* slow for window_ms */
} ea_rdzv_strag_rank;

/* factor > 1 (observability.straggler_factor), window_ms > 0.  NULL when
 * out of memory or out of bounds. */
ea_rdzv_strag *ea_rdzv_strag_new(double factor, uint32_t window_ms);
void ea_rdzv_strag_free(ea_rdzv_strag *s);
/* Forget everything (this agent no longer controls). */
void ea_rdzv_strag_reset(ea_rdzv_strag *s);
/* Rank `rank` of generation gen64 (world ranks) took compute_s per step,
 * said by node at now_ms.  Returns 0; -EINVAL for rank ≥ world, world 0 or
 * over EA_RDZV_MAX_WORLD, a gen64 of 0, or a compute_s that is negative or
 * not finite; -ESTALE for an older generation (ignored), -ENOMEM. */
int ea_rdzv_strag_sample(ea_rdzv_strag *s, uint64_t now_ms, uint64_t gen64, uint32_t world,
                         uint32_t rank, const ea_node_id *node, double compute_s);
/* Judge every rank as of now_ms; returns the number of stragglers. */
uint32_t ea_rdzv_strag_eval(ea_rdzv_strag *s, uint64_t now_ms);
/* The ranks of the current generation, indexed by rank (world of them;
 * entries with have false never reported); valid until the next call. */
size_t ea_rdzv_strag_ranks(const ea_rdzv_strag *s, const ea_rdzv_strag_rank **out);
/* Of the last eval: the median (0 when nothing was judged) and how many
 * fresh ranks it was taken over; the generation judged (0: none). */
double ea_rdzv_strag_median(const ea_rdzv_strag *s, uint32_t *nfresh);
uint64_t ea_rdzv_strag_gen(const ea_rdzv_strag *s);

typedef struct {
  uint8_t phase; /* ea_rdzv_phase */
  bool draining;
  bool controller; /* ea_elect names us */
  bool has_quorum;
  bool have_controller;
  ea_node_id controller_id;
  bool forming;         /* a formation of ours is in progress */
  ea_rdzv_gen seen;     /* newest generation heard of */
  ea_rdzv_gen accepted; /* newest one accepted as a member */
  ea_rdzv_gen durable;  /* newest one persisted */
  ea_rdzv_gen running;  /* term 0 when none */
  ea_rdzv_gen formed;   /* last formed generation known */
  uint32_t formed_nodes;
  uint64_t last_step;              /* most steps any local worker reported */
  char reason[EA_RDZV_REASON_MAX]; /* why things are as they are */
  uint64_t restarts;               /* of the newest plan known here */
  /* As controller: the job was given up (sticky); why, for the alert. */
  uint8_t job_failed; /* ea_rdzv_job_fail */
  char job_why[EA_RDZV_REASON_MAX];
  /* As controller: the current churn streak (0: none), its number (one per
   * streak, for "alert once"), its reason and the wait before the next
   * formation (0 when none is pending). */
  uint32_t churn;
  uint64_t churn_streak;
  char churn_why[96];
  uint64_t churn_wait_ms;
  /* counters */
  uint64_t formations_started, formations_committed, formations_failed;
  uint64_t nacks_sent, nacks_received;
  uint64_t stale_ignored; /* COMMIT/ABORT/READY for a generation not current */
  uint64_t persist_errors;
  uint64_t state_refused; /* STATE from neither the elected controller nor a member we asked,
                             or naming a member we do not know */
  uint64_t node_failures; /* as controller: failures counted toward flapping */
  uint64_t holds;         /* as controller: hold-outs started (flapping, straggler, link) */
  uint64_t blames;        /* as controller: BLAMEs counted (one per link per generation) */
  uint64_t link_downs;    /* as controller: link probes' verdicts that held an end out */
  uint32_t held_now;      /* nodes held out now */
  /* As controller: the last moment (ea_rdzv_lastck) of generation
   * last_ckpt_gen (64-bit form; 0: none yet), since last_ckpt_since_ms
   * (the core's clock), with last_ckpt_left_ms left while waiting. */
  uint8_t last_ckpt;
  bool last_ckpt_spares; /* held because spares would form the next one alone */
  uint64_t last_ckpt_gen, last_ckpt_since_ms, last_ckpt_left_ms;
} ea_rdzv_status;

void ea_rdzv_status_get(const ea_rdzv *r, ea_rdzv_status *out);
const char *ea_rdzv_phase_str(uint8_t phase);

#endif
