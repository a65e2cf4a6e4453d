/* comm_int.h — what train/comm.c (dispatch) shares with the backends
 * (comm_tcp.c, comm_nccl.c), and the ring's order (ring.c).  Not a public
 * header.
 *
 * comm.c owns the ea_comm struct, checks arguments and the sticky error, and
 * calls the backend through a small table.  A backend keeps its own state
 * behind c->be and reports failures by returning a negative errno; comm.c
 * makes that error sticky (and calls the backend's fail hook so the
 * neighbours learn about it).
 */
#ifndef EA_COMM_INT_H
#define EA_COMM_INT_H

#include "ea_comm.h"

#include <stdatomic.h>
#include <stdint.h>

typedef struct {
  /* Connect the ring; called once. */
  int (*connect)(ea_comm *c);
  int (*allreduce)(ea_comm *c, void *buf, size_t count, ea_comm_dtype dt, ea_comm_op op);
  int (*broadcast)(ea_comm *c, void *buf, size_t bytes, uint32_t root);
  int (*barrier)(ea_comm *c);
  /* From any thread; must only touch what is safe to touch concurrently. */
  void (*abort)(ea_comm *c);
  /* The op thread hit an error: tell the neighbours (tcp: shutdown). */
  void (*fail)(ea_comm *c, int err);
  /* Optional (NULL = -EOPNOTSUPP). */
  int (*shrink)(ea_comm *c, const uint32_t *excluded, size_t n, uint64_t gen, ea_comm **out);
  /* Release backend state (c->be); the struct itself is freed by comm.c. */
  void (*destroy)(ea_comm *c);
} ea__comm_vt;

struct ea_comm {
  const ea__comm_vt *vt;
  ea_comm_backend backend;
  uint32_t rank, world;
  uint64_t generation;
  uint32_t timeout_ms, init_timeout_ms;
  atomic_int aborted; /* set by ea_comm_abort, read by the op thread */
  int error;          /* sticky, op thread only */
  int connected;
  uint64_t op_seq;     /* ops started on this communicator */
  ea_comm_stats stats; /* op thread only */
  /* ea_comm_blame: the rank a failure is blamed on (-1: none), set by the
   * backend on the op thread when it fails. */
  int64_t blame_rank;
  char blame_why[EA_COMM_BLAME_MAX];
  void *be; /* backend state */
};

/* Backend constructors: fill c->vt and c->be from plan (no I/O). */
int ea__comm_tcp_new(ea_comm *c, const ea_comm_plan *plan);
#ifdef EA_HAVE_NCCL
int ea__comm_nccl_new(ea_comm *c, const ea_comm_plan *plan);
int ea__comm_nccl_unique_id(uint8_t id[EA_COMM_NCCL_ID_BYTES]);
#endif

/* Monotonic clock in nanoseconds. */
uint64_t ea__comm_now_ns(void);

/* ---- ring.c: the ring's order (comm_tcp.c and ea_comm_ring_reduce) ---- */

/* Segment j of count elements split W ways, in elements: the first
 * count % W segments get one extra. */
void ea__ring_segment(size_t count, uint32_t W, uint32_t j, size_t *start, size_t *len);
/* Reduce-scatter step k (0 ≤ k < W−1) of rank r: it sends segment r−k to
 * its right neighbour and receives segment r−k−1 from its left one, which
 * it adds into its own (mod W).  So segment j is summed g_j, g_{j+1} + …,
 * around the ring, and ends complete on rank j−1. */
static inline uint32_t ea__ring_rs_send(uint32_t r, uint32_t W, uint32_t k) {
  return (r + W - k) % W;
}
static inline uint32_t ea__ring_rs_recv(uint32_t r, uint32_t W, uint32_t k) {
  return (r + 2 * W - k - 1) % W;
}
/* Allgather step k of rank r: it forwards segment r+1−k (complete) and
 * receives segment r−k, copying it. */
static inline uint32_t ea__ring_ag_send(uint32_t r, uint32_t W, uint32_t k) {
  return (r + 1 + W - k) % W;
}
static inline uint32_t ea__ring_ag_recv(uint32_t r, uint32_t W, uint32_t k) {
  return (r + W - k) % W;
}
/* d = d ⊕ s elementwise over bytes (a whole number of elements), d being
 * the receiving rank's own operand and s what arrived: sum (integers
 * wrap) or max (d kept unless s compares greater). */
void ea__ring_reduce(void *d, const void *s, size_t bytes, ea_comm_dtype dt, ea_comm_op op);

#endif
