/* ea_ipc.h — the agent ↔ worker messages: one msgpack map per packet over a
 * SOCK_SEQPACKET socketpair.
 *
 * The agent starts each worker with one end of a socketpair as fd 3
 * (EA_IPC_FD in its environment).  SOCK_SEQPACKET keeps message boundaries,
 * so a message is exactly one send() and one recv(): no length prefix, no
 * partial reads, at most EA_IPC_MAX_MSG bytes.  Every message is a msgpack
 * map with string keys, so a worker may be any program with a msgpack
 * library (Python: `os.write(3, msgpack.packb({"type": "hello", ...}))`).
 * Unknown keys are skipped, so either side may add optional keys later;
 * missing required keys, wrong types and out-of-range values are errors.
 *
 *   packet   = map { "type": str, key: value, … }      (keys in any order)
 *   uint     = msgpack non-negative int of any width
 *   int      = msgpack int of any width, signed
 *   float    = msgpack float32/float64 (an int is accepted too)
 *   addr     = str "host:port" or "[v6]:port", < EA_COMM_ADDR_MAX bytes
 *   text     = str < EA_IPC_TEXT_MAX bytes (UTF-8, not checked)
 *
 * worker → agent
 *   "hello"    pid:uint local_rank:uint comm_addr:addr next_step:uint
 *              digest:uint
 *              First message after start.  comm_addr is the worker's
 *              communicator listen socket, bound once for its whole life.
 *   "ready"    gen:uint comm_addr:addr next_step:uint digest:uint
 *              [nccl_id:bin128]
 *              Answer to PREPARE(gen): the old communicator is gone and the
 *              worker waits for COMMIT.  nccl_id only when asked for.
 *   "step"     gen:uint step:uint loss:float digest:uint samples:uint
 *              seconds:float [grad_norm:float] [compute_seconds:float]
 *              Step `step` (0-based) completed on every rank of gen and was
 *              applied here; digest is XXH3-64 of the params after it,
 *              samples this rank's share of the global batch, seconds the
 *              wall time of the whole step, compute_seconds the part spent
 *              in forward/backward (the straggler signal: the allreduce
 *              hides who was slow).
 *   "failed"   gen:uint error:int message:text next_step:uint
 *              The communicator of gen broke (error is a negative errno:
 *              -ECONNRESET peer gone, -ETIMEDOUT, -ESTALE newer plan, -EPROTO
 *              state sync disagreement, -EDOM non-finite loss).  The step in
 *              flight was NOT applied; the process keeps its state at
 *              next_step and waits for PREPARE/COMMIT.
 *   "aborted"  gen:uint next_step:uint
 *              Answer to PAUSE: training stopped, communicator torn down,
 *              state kept.
 *   "done"     gen:uint next_step:uint digest:uint
 *              next_step reached train.steps; waiting for STOP (or a new
 *              generation, e.g. a joiner that still needs the state).
 *   "exiting"  reason:text code:int
 *              Sent once just before the process exits with `code`.
 *
 * agent → worker
 *   "prepare"  gen:uint at_boundary:bool [make_nccl_id:bool]
 *              at_boundary false: abort the communicator now (failure
 *              case); true: finish the step in flight first (joins,
 *              drains).  Then answer READY.  A rank that stops at a
 *              boundary tears its sockets down, so a neighbour already in
 *              the next step's allreduce fails at once instead of waiting
 *              for the timeout; it did not complete that step, and state
 *              sync makes everyone equal again.
 *   "commit"   gen:uint rank:uint world:uint peers:[addr…] sync_root:uint
 *              backend:str("tcp"|"nccl") timeout_ms:uint [nccl_id:bin128]
 *              Form the communicator of gen; peers[i] is rank i's
 *              comm_addr (tcp: exactly `world` of them; nccl: may be []
 *              and nccl_id is required).  sync_root is a rank holding the
 *              highest next_step: it broadcasts its state if ranks differ.
 *   "pause"    reason:text        Minority side: stop training, keep state.
 *   "stop"     (nothing)          Exit cleanly (EXITING, code 0).
 *
 * Generations only grow: a worker ignores PREPARE/COMMIT older than the
 * newest one it has seen, and reports that in its log.
 *
 * Encoding and decoding never allocate.  An ea_ipc_msg holds every field
 * of every type (flat, so a decoder fills what it finds); it is about
 * 50 KiB because of the peer table, so keep it off small stacks.
 */
#ifndef EA_IPC_H
#define EA_IPC_H

#include "ea_comm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One packet at most: a COMMIT with EA_IPC_MAX_PEERS addresses of the
 * longest form fits (512 × (95 + 2) ≈ 49 KiB), and the Unix socket's default
 * send buffer (212 KiB, net.core.wmem_default) holds a few such packets. */
#define EA_IPC_MAX_MSG 65536u
/* Ranks a tcp COMMIT can list.  A host-memory tcp ring of more than 512
 * ranks is not a use case (its allreduce latency grows with W); larger jobs
 * use nccl, whose COMMIT carries the unique id instead of peers. */
#define EA_IPC_MAX_PEERS 512u
/* Free-text fields (failure message, exit reason). */
#define EA_IPC_TEXT_MAX 256u
/* The fd a worker finds its socketpair end on, and its environment. */
#define EA_IPC_WORKER_FD 3

typedef enum {
  /* worker → agent */
  EA_IPC_HELLO = 1,
  EA_IPC_READY = 2,
  EA_IPC_STEP = 3,
  EA_IPC_FAILED = 4,
  EA_IPC_ABORTED = 5,
  EA_IPC_DONE = 6,
  EA_IPC_EXITING = 7,
  /* agent → worker */
  EA_IPC_PREPARE = 16,
  EA_IPC_COMMIT = 17,
  EA_IPC_PAUSE = 18,
  EA_IPC_STOP = 19,
} ea_ipc_type;

typedef struct {
  ea_ipc_type type;
  uint64_t gen; /* every type but hello, exiting, pause, stop */
  /* hello */
  uint64_t pid;
  uint32_t local_rank;
  /* hello, ready */
  char comm_addr[EA_COMM_ADDR_MAX];
  /* hello, ready, failed, aborted, done: steps completed = next to compute */
  uint64_t next_step;
  /* hello, ready, step, done: XXH3-64 of the params */
  uint64_t digest;
  /* step */
  uint64_t step;
  double loss;
  uint64_t samples;
  double seconds;
  bool has_grad_norm, has_compute_seconds;
  double grad_norm, compute_seconds;
  /* failed */
  int32_t error; /* negative errno */
  char message[EA_IPC_TEXT_MAX];
  /* exiting, pause */
  char reason[EA_IPC_TEXT_MAX];
  int32_t code; /* exiting: the process's exit status */
  /* prepare */
  bool at_boundary;
  bool make_nccl_id;
  /* commit */
  uint32_t rank, world, sync_root, timeout_ms;
  ea_comm_backend backend;
  uint32_t npeers;
  char peers[EA_IPC_MAX_PEERS][EA_COMM_ADDR_MAX];
  /* ready (when asked for), commit (nccl) */
  bool has_nccl_id;
  uint8_t nccl_id[EA_COMM_NCCL_ID_BYTES];
} ea_ipc_msg;

/* Zero *m and set its type. */
void ea_ipc_msg_init(ea_ipc_msg *m, ea_ipc_type type);
/* "hello", "commit", …; "?" for an unknown value. */
const char *ea_ipc_type_name(ea_ipc_type t);

/* Encode m into buf.  0 and *len, -EMSGSIZE if it does not fit in cap, or
 * -EINVAL (err names the field) for a message the decoder would reject, so
 * whatever encodes also decodes to an equal message. */
int ea_ipc_encode(const ea_ipc_msg *m, void *buf, size_t cap, size_t *len, char *err,
                  size_t errlen);
/* Decode one packet.  0, or -EBADMSG with err naming the field and what was
 * wrong ("commit.peers[2]: expected str < 96 bytes").  Bounded by len; on
 * error *m holds garbage. */
int ea_ipc_decode(const void *buf, size_t len, ea_ipc_msg *m, char *err, size_t errlen);

/* Encode and send one packet (MSG_NOSIGNAL; blocking unless fd is
 * non-blocking, which then gives -EAGAIN).  Safe from several threads: a
 * SOCK_SEQPACKET send is atomic.  Errors: the encoder's, or a send errno
 * (-EPIPE / -ECONNRESET when the other end is gone). */
int ea_ipc_send(int fd, const ea_ipc_msg *m);
/* Wait up to timeout_ms (−1: forever) for one packet and decode it.
 * -ETIMEDOUT, -ECONNRESET at end of stream (the other side closed), -EMSGSIZE
 * for a packet over EA_IPC_MAX_MSG (it is consumed), -EBADMSG (decode; err
 * says why); EINTR is retried.  Uses EA_IPC_MAX_MSG bytes of stack.  A
 * zero-length packet reads as end of stream (SOCK_SEQPACKET cannot tell the
 * two apart); no encoder produces one. */
int ea_ipc_recv(int fd, ea_ipc_msg *m, int timeout_ms, char *err, size_t errlen);

/* A socketpair for one worker: SOCK_SEQPACKET, close-on-exec on both ends
 * (the spawner maps the worker's end to fd 3, which clears it there). */
int ea_ipc_socketpair(int sv[2]);

#endif
