/* comm_int.h — what train/comm.c (dispatch) shares with the backends
 * (comm_tcp.c, comm_nccl.c).  Not a public header.
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
  atomic_int aborted;   /* set by ea_comm_abort, read by the op thread */
  int error;            /* sticky, op thread only */
  int connected;
  uint64_t op_seq;      /* ops started on this communicator */
  ea_comm_stats stats;  /* op thread only */
  void *be;             /* backend state */
};

/* Backend constructors: fill c->vt and c->be from plan (no I/O). */
int ea__comm_tcp_new(ea_comm *c, const ea_comm_plan *plan);
#ifdef EA_HAVE_NCCL
int ea__comm_nccl_new(ea_comm *c, const ea_comm_plan *plan);
int ea__comm_nccl_unique_id(uint8_t id[EA_COMM_NCCL_ID_BYTES]);
#endif

/* Monotonic clock in nanoseconds. */
uint64_t ea__comm_now_ns(void);

#endif
