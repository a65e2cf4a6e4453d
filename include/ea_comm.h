/* ea_comm.h — communicators: allreduce / broadcast / barrier across the ranks
 * of one generation, with abort and timeouts that never hang.
 *
 * A worker builds one communicator per generation:
 *
 *     int lfd; char addr[EA_COMM_ADDR_MAX];
 *     ea_comm_listen("10.0.0.7:0", &lfd, addr, sizeof addr); // once, at start
 *     ... report addr to the agent; the controller collects every rank's ...
 *     ea_comm_plan p; ea_comm_plan_init(&p);
 *     p.backend = EA_COMM_TCP; p.rank = r; p.world = W; p.generation = g;
 *     p.peers = addrs; p.listen_fd = lfd; p.timeout_ms = 10000;
 *     ea_comm *c;
 *     if (ea_comm_init(&p, &c) == 0) {
 *       rc = ea_comm_allreduce(c, grads, n, EA_COMM_F32, EA_COMM_SUM);
 *       ...
 *     }
 *     ea_comm_free(c);                   // then the next generation
 *
 * Errors.  Every call returns 0 or a negative errno.  The ones callers see:
 *   -ETIMEDOUT   the op (or init) did not finish within its timeout
 *   -ECANCELED   ea_comm_abort() was called on this communicator
 *   -ECONNRESET  a peer went away (died, aborted, timed out, or failed)
 *   -ESTALE      init met a peer of a newer generation: this plan is obsolete
 *   -EPROTO      a peer spoke garbage or ran a different op (count, dtype,
 *                root or sequence mismatch)
 *   -EINVAL      bad argument;  -EOPNOTSUPP  backend not built / op not
 *                supported by the backend.
 * Any error other than -EINVAL is sticky: the communicator is broken, every
 * later op returns the same error at once, and the caller frees it and forms
 * a new generation.  A failing rank shuts its connections down so that its
 * neighbours fail promptly too: one dead or aborted rank makes every rank's
 * in-flight op return an error, not wait for the timeout.
 *
 * Threads.  One thread at a time runs ops (init/connect, allreduce, broadcast,
 * barrier, shrink) on a communicator.  ea_comm_abort() may be called from any
 * thread at any time between a successful ea_comm_new() and ea_comm_free();
 * the caller must make sure abort has returned before calling free.
 *
 * Backends.
 *   tcp   host memory; a bandwidth-optimal ring (reduce-scatter + allgather,
 *         chunked and pipelined) over one TCP connection to each neighbour.
 *         Results are bitwise identical on every rank: each segment is
 *         reduced once, by one rank, in one fixed order, and its bytes are
 *         then copied to everybody.
 *   nccl  built only when CUDA and NCCL were found at build time
 *         (ea_comm_nccl_available()).  Buffers may be device pointers (the
 *         fast path) or host pointers, which are staged through a device
 *         scratch buffer owned by the communicator (copy in, op, copy out).
 *         NCCL's algorithms hand one reduced copy to every rank too, but
 *         bitwise equality across ranks is not something NCCL documents.
 *         After an error a *device* buffer may still be written by a dying
 *         kernel until ea_comm_free() returns.
 *
 * The tcp data path is neither encrypted nor authenticated (like NCCL's
 * and gloo's sockets): run it on the cluster's private network.
 */
#ifndef EA_COMM_H
#define EA_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ea_comm ea_comm;

typedef enum { EA_COMM_TCP = 1, EA_COMM_NCCL = 2 } ea_comm_backend;

typedef enum { EA_COMM_F32 = 0, EA_COMM_F64 = 1, EA_COMM_I64 = 2 } ea_comm_dtype;

typedef enum { EA_COMM_SUM = 0, EA_COMM_MAX = 1 } ea_comm_op;

/* "host:port" or "[v6addr]:port", NUL included. */
#define EA_COMM_ADDR_MAX 96
/* Size of the NCCL unique id (NCCL_UNIQUE_ID_BYTES), opaque to everyone else. */
#define EA_COMM_NCCL_ID_BYTES 128
/* The tcp ring's per-generation hello key (ea_comm_plan.hello_key). */
#define EA_COMM_HELLO_KEY_BYTES 32

typedef struct {
  ea_comm_backend backend;
  uint32_t rank;            /* 0 .. world-1 */
  uint32_t world;           /* ≥ 1 */
  uint64_t generation;      /* the rendezvous generation; a connection from
                               another generation is refused */
  uint32_t timeout_ms;      /* per op, whole op; 0 = default (10 s, the
                               communication_timeout_seconds default) */
  uint32_t init_timeout_ms; /* connecting the ring; 0 = timeout_ms */
  /* tcp: peers[i] is rank i's listen address ("host:port").  Read during
   * ea_comm_new() only (copied); may be NULL when world == 1. */
  const char *const *peers;
  /* tcp: a socket from ea_comm_listen(), BORROWED: the communicator accepts
   * on it but never closes it, so one listener can serve every generation.
   * -1: ea_comm_connect() binds peers[rank] itself and closes it at free. */
  int listen_fd;
  /* nccl: the unique id made by rank 0 (ea_comm_nccl_unique_id) and handed
   * to every rank by the controller; the CUDA device this rank drives. */
  uint8_t nccl_id[EA_COMM_NCCL_ID_BYTES];
  int cuda_device;
  /* tcp: the generation's ring token (the agent derives it from the
   * cluster key: docs/security.md).  With it, every hello and ack carries
   * a keyed BLAKE2b tag over its fields; a hello whose tag does not verify
   * is dropped without an answer and counted (ea_comm_stats.hellos_refused)
   * and the ring keeps waiting for its real neighbour — a forged hello
   * costs nothing.  Without it (has_hello_key false) the tag is not checked:
   * anyone who reaches the port can disturb the formation. */
  bool has_hello_key;
  uint8_t hello_key[EA_COMM_HELLO_KEY_BYTES];
} ea_comm_plan;

/* Zero a plan and set the defaults (tcp, world 1, listen_fd -1). */
void ea_comm_plan_init(ea_comm_plan *p);

/* Bind and listen on bind_addr ("host:port"; port 0 = ephemeral) before the
 * plan exists, so the address can be reported during rendezvous.  On success
 * *fd_out is a non-blocking, close-on-exec listening socket OWNED BY THE
 * CALLER (close() it when done), and addr_out receives the bound address
 * with the port the kernel chose ("127.0.0.1:40123").  Bind a concrete host:
 * a wildcard address would be reported as such and is useless to peers. */
int ea_comm_listen(const char *bind_addr, int *fd_out, char *addr_out, size_t addr_cap);

/* Allocate a communicator for plan (copied; plan may be freed after the
 * call).  No I/O: connect separately, so another thread can already abort. */
int ea_comm_new(const ea_comm_plan *plan, ea_comm **out);
/* Connect the ring (tcp: connect to the right neighbour, accept the left one,
 * both handshakes carrying generation and ranks; nccl: non-blocking
 * ncclCommInitRankConfig under a watchdog).  Blocks until done, the init
 * timeout, an abort, or an error.  Call once. */
int ea_comm_connect(ea_comm *c);
/* ea_comm_new + ea_comm_connect.  On failure *out is NULL and nothing leaks. */
int ea_comm_init(const ea_comm_plan *plan, ea_comm **out);

/* In-place allreduce of count elements of buf (every rank passes the same
 * count, dtype and op).  Integer sums wrap (two's complement).  count 0 is a
 * valid no-op that still checks the communicator's state. */
int ea_comm_allreduce(ea_comm *c, void *buf, size_t count, ea_comm_dtype dtype, ea_comm_op op);
/* The tcp ring's result, computed in one process: out[i] becomes what
 * every rank holds after an allreduce on a tcp ring of `world` ranks in
 * which rank r passed parts[r] — bit for bit, because it follows the
 * ring's own schedule with its own kernels (segment j of the buffer is
 * reduced g_j, then g_{j+1} ⊕ that, …, around the ring, each rank's own
 * operand first).  For replaying a W-rank job without W processes (the
 * chaos harness, tests).  parts[0..world) hold count elements each; out
 * must not overlap them.  0, or -EINVAL for a bad argument.  The nccl
 * backend sums in its own order, which this does not reproduce. */
int ea_comm_ring_reduce(void *out, const void *const *parts, uint32_t world, size_t count,
                        ea_comm_dtype dtype, ea_comm_op op);

/* Copy bytes of root's buf into every other rank's buf. */
int ea_comm_broadcast(ea_comm *c, void *buf, size_t bytes, uint32_t root);
/* Returns on any rank only after every rank has entered the barrier. */
int ea_comm_barrier(ea_comm *c);

/* Thread-safe (any thread, any time): every in-flight op on c returns
 * -ECANCELED promptly (well under a second), and so does every later one.
 * Idempotent.  Neighbours see the connections close and fail too. */
void ea_comm_abort(ea_comm *c);

/* nccl only: a new communicator without the ranks in excluded[0..n) (ranks of
 * c), made with ncclCommShrink where NCCL has it (≥ 2.27), so that ranks only
 * leaving need no new unique id.  Every surviving rank calls it with the same
 * list.  The usual sequence is ea_comm_abort(c) (which revokes c on NCCL ≥
 * 2.28), then ea_comm_shrink(c, …): an aborted or failed c may be shrunk.
 * On NCCL < 2.28 abort destroys c's NCCL communicator, and shrink then
 * returns -ECANCELED: form a new one with a fresh unique id.  c stays valid
 * and must still be freed.  The new communicator carries new_generation; its
 * ranks are renumbered densely in the old order.  -EOPNOTSUPP for tcp (form
 * a new ring instead) and for NCCL < 2.27. */
int ea_comm_shrink(ea_comm *c, const uint32_t *excluded, size_t n, uint64_t new_generation,
                   ea_comm **out);

/* Close connections and release everything.  NULL is a no-op.  Must not race
 * with an op or with ea_comm_abort on another thread. */
void ea_comm_free(ea_comm *c);

uint32_t ea_comm_rank(const ea_comm *c);
uint32_t ea_comm_world(const ea_comm *c);
uint64_t ea_comm_generation(const ea_comm *c);
ea_comm_backend ea_comm_get_backend(const ea_comm *c);

typedef struct {
  uint64_t ops;        /* completed ops */
  uint64_t bytes_sent; /* payload bytes written to the network (tcp) */
  uint64_t bytes_recv;
  uint64_t hellos_refused; /* tcp init: hellos without this generation's tag, dropped */
  int error;               /* the sticky error, 0 while healthy */
} ea_comm_stats;
void ea_comm_get_stats(const ea_comm *c, ea_comm_stats *st);

/* Room for ea_comm_blame's why, NUL included. */
#define EA_COMM_BLAME_MAX 192
/* After a failure: the rank this one could not exchange with, when the
 * backend has evidence about that one link, and why (e.g. "rank 2 at
 * 198.18.0.12:4100 acknowledged none of 3 segments in flight (4 TCP
 * retransmissions)").  Returns true and fills *peer
 * and why (cap bytes, truncated), or false when it cannot tell.
 *
 *   tcp   the connect to the right neighbour got no answer (SYN or hello
 *         unanswered at the init timeout), or bytes sent to it stayed
 *         unacknowledged while the kernel retransmitted them (TCP_INFO at
 *         the moment the op failed) — its host does not get what we send,
 *         or we do not get its acknowledgements.  A neighbour that closed
 *         or reset its connection is not blamed: it failed on its own (or
 *         passed on its own neighbour's failure) and says so itself; nor is
 *         a left neighbour that is merely silent, since every rank of a
 *         stalled ring waits on a silent left neighbour.
 *   nccl  never (NCCL does not say which peer).
 *
 * Op thread only, like the ops; valid until ea_comm_free. */
bool ea_comm_blame(const ea_comm *c, uint32_t *peer, char *why, size_t cap);

/* "tcp" | "nccl"; parse also accepts "auto" (nccl when built, else tcp). */
const char *ea_comm_backend_name(ea_comm_backend b);
int ea_comm_backend_parse(const char *s, ea_comm_backend *out);
size_t ea_comm_dtype_size(ea_comm_dtype dt);

/* True when the nccl backend was compiled in (it may still find no GPU). */
bool ea_comm_nccl_available(void);
/* Rank 0 makes the id (ncclGetUniqueId) that every rank's plan carries.
 * -EOPNOTSUPP when NCCL is not built in. */
int ea_comm_nccl_unique_id(uint8_t id[EA_COMM_NCCL_ID_BYTES]);

#endif
