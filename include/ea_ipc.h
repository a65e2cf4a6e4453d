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
 *   "failed"   gen:uint error:int message:text next_step:uint [peer:uint]
 *              The communicator of gen broke (error is a negative errno:
 *              -ECONNRESET peer gone, -ETIMEDOUT, -ESTALE newer plan, -EPROTO
 *              state sync disagreement, -EDOM non-finite loss).  The step in
 *              flight was NOT applied; the process keeps its state at
 *              next_step and waits for PREPARE/COMMIT.  peer: the rank of
 *              gen this worker could not exchange with, when it has evidence
 *              about that one link (ea_comm_blame; message says what); absent
 *              when it cannot tell (a peer that reset its connection failed
 *              on its own; torch's gloo does not name the peer).  The agent
 *              tells the controller, which excludes one end of a link blamed
 *              generation after generation (docs/rendezvous.md).
 *   "aborted"  gen:uint next_step:uint
 *              Answer to PAUSE: training stopped, communicator torn down,
 *              state kept.
 *   "done"     gen:uint next_step:uint digest:uint
 *              next_step reached train.steps; waiting for STOP (or a new
 *              generation, e.g. a joiner that still needs the state).
 *   "exiting"  reason:text code:int
 *              Sent once just before the process exits with `code`.
 *   "ckpt_staged" gen:uint step:uint rank:uint world:uint offset:uint
 *              length:uint total:uint hash:uint stall_us:uint wait_us:uint
 *              skipped:uint [layout:str("ea-state-1") header_bytes:uint]
 *                                                 + one fd (SCM_RIGHTS)
 *              The state after `step` completed steps (a multiple of
 *              ckpt_interval) is staged: bytes [offset, offset+length) of
 *              the total-byte serialized state (ea_ckpt_shard_range of
 *              rank/world) are at offset 0 of the memfd that rides with the
 *              packet; hash is their XXH3-64.  stall_us is what staging cost
 *              the training thread (copy + hash), wait_us how long it first
 *              waited for the previous shard's CKPT_DONE (busy policy
 *              "wait"), skipped how many checkpoints this worker has skipped
 *              so far.  The worker does not touch the memfd again until the
 *              agent answers CKPT_DONE for this step.  layout and
 *              header_bytes come together or not at all: the state is in
 *              the library's self-describing format and its bytes
 *              [0, header_bytes) (≤ total) hold the tensor table, which the
 *              controller copies into the MANIFEST.
 *   "ckpt_skipped" gen:uint step:uint rank:uint world:uint reason:text
 *              skipped:uint
 *              This worker did not stage `step` (busy policy "skip" while
 *              its previous shard is still being written, or the wait was
 *              interrupted by the agent): that checkpoint cannot complete.
 *   "ckpt_loaded" gen:uint step:uint name:text digest:uint fallbacks:uint
 *              message:text seconds:float
 *              Cold start: this worker (the COMMIT's sync_root) loaded
 *              checkpoint `name` (a step directory) of DIR, `step` steps;
 *              digest is the params digest after loading; fallbacks counts
 *              newer checkpoints passed over, message says why (the first
 *              reason, "" if none).  State sync then hands it to every rank.
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
 *              [ckpt_interval:uint ckpt_busy:str("wait"|"skip")]
 *              [ckpt_dir:path] [resume:path ckpt_verify:str("full"|"size")]
 *              [store:addr] [torch_backend:str("gloo"|"nccl")]
 *              [ring_token:bin32]
 *              Form the communicator of gen; peers[i] is rank i's
 *              comm_addr (tcp: exactly `world` of them; nccl: may be []
 *              and nccl_id is required).  sync_root is a rank holding the
 *              highest next_step: it broadcasts its state if ranks differ.
 *              ckpt_interval > 0 turns checkpoints on: after every step
 *              count that is a multiple of it, stage this rank's shard and
 *              send CKPT_STAGED (absent or 0: off).  resume (a spec of
 *              ea_ckpt_resolve: "latest", a step, a step directory name or
 *              a path; ckpt_dir required) makes the sync_root, if it holds
 *              no state yet (step 0), load that checkpoint before the state
 *              sync (a cold start: the plan has no live state).  store and
 *              torch_backend are for library programs: the host:port of the
 *              generation's TCPStore (absent: peers[0]) and the backend of
 *              torch.distributed (absent: the program chooses).
 *              ring_token (builtin workers, tcp backend, with a cluster
 *              key): the generation's ring token, the key of the tag every
 *              ring hello carries (ea_comm_plan.hello_key).
 *   "pause"    reason:text        Minority side: stop training, keep state.
 *   "stop"     (nothing)          Exit cleanly (EXITING, code 0).
 *   "ckpt_done" gen:uint step:uint status:int message:text
 *              The shard staged for `step` is written (status 0) or failed
 *              (a negative errno; message says why).  Either way the memfd
 *              is the worker's again.
 *   "ckpt_again" gen:uint step:uint
 *              The final checkpoint (`step` = train.steps) of generation
 *              gen failed and is tried again: a worker that finished there
 *              stages its shard once more (ckpt_staged, as the first time);
 *              any other worker ignores it.
 *   "ckpt_at"  gen:uint step:uint
 *              The last moment before a mass preemption (docs/operations.md,
 *              "A checkpoint before a mass preemption"): stage this rank's
 *              shard right after completing `step` steps in generation gen,
 *              as for a periodic checkpoint (ckpt_staged; ckpt_interval need
 *              not divide step), and keep training.  Every rank of gen gets
 *              the same step.  A worker that has completed `step` steps
 *              already, or runs another generation, answers ckpt_skipped
 *              for it (reason says why); the controller then asks again for
 *              a later step.  Needs checkpoints on (ckpt_interval > 0 in the
 *              COMMIT).
 *
 *   path     = str < EA_IPC_PATH_MAX bytes
 *
 * File descriptors: a packet may carry one fd (SCM_RIGHTS); only
 * "ckpt_staged" does.  ea_ipc_recv hands it over in m->fd (close-on-exec;
 * the caller owns it), -1 when none came.
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
#include <sys/types.h>

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
/* Paths in a COMMIT (checkpoint dir, resume spec): PATH_MAX.  The largest
 * COMMIT (512 peers + two such paths) is ≈ 58 KiB, still one packet. */
#define EA_IPC_PATH_MAX 4096u
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

/* The checkpoint messages: ea_ipc_type values like the others, but kept
 * out of the enum's list so that switches written over the original set
 * stay exhaustive under -Wswitch; switch on (int)m->type to handle them. */
/* worker → agent */
#define EA_IPC_CKPT_STAGED ((ea_ipc_type)8)
#define EA_IPC_CKPT_SKIPPED ((ea_ipc_type)9)
#define EA_IPC_CKPT_LOADED ((ea_ipc_type)10)
/* agent → worker */
#define EA_IPC_CKPT_DONE ((ea_ipc_type)20)
#define EA_IPC_CKPT_AGAIN ((ea_ipc_type)21)
#define EA_IPC_CKPT_AT ((ea_ipc_type)22)

/* commit.torch_backend: absent, "gloo", "nccl". */
typedef enum {
  EA_IPC_TORCH_NONE = 0,
  EA_IPC_TORCH_GLOO = 1,
  EA_IPC_TORCH_NCCL = 2
} ea_ipc_torch_backend;
/* ckpt_staged.layout: absent (opaque state), "ea-state-1" (docs/pytorch.md,
 * "Checkpoints": "EASTATE\0", version, H, T, then the tensor table). */
typedef enum { EA_IPC_LAYOUT_NONE = 0, EA_IPC_LAYOUT_EA_STATE_1 = 1 } ea_ipc_layout;

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
  bool has_peer; /* peer: the rank it could not exchange with */
  uint32_t peer;
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
  /* commit: the generation's ring token (tcp ring hellos; ea_comm_plan) */
  bool has_ring_token;
  uint8_t ring_token[EA_COMM_HELLO_KEY_BYTES];
  /* ckpt_staged (all), ckpt_skipped (step, rank, world, reason, skipped),
   * ckpt_loaded (step, digest, seconds, message), ckpt_done and ckpt_again (step) */
  uint64_t offset, length, total, hash;
  uint64_t stall_us, wait_us, skipped;
  /* ckpt_done: 0 or a negative errno (message says why) */
  int32_t status;
  /* ckpt_loaded */
  char name[EA_IPC_TEXT_MAX];
  uint32_t fallbacks;
  /* commit: checkpoints (ckpt_busy "skip" ⇔ ckpt_skip; ckpt_verify "size"
   * ⇔ ckpt_verify_size; resume "" = no resume) */
  uint32_t ckpt_interval;
  bool ckpt_skip;
  bool ckpt_verify_size;
  char ckpt_dir[EA_IPC_PATH_MAX];
  char resume[EA_IPC_PATH_MAX];
  /* commit, for library programs (python/elastic_agent): the TCPStore of
   * this generation ("" = absent: the program takes peers[0]) and the
   * torch.distributed backend (EA_IPC_TORCH_NONE = absent: the program
   * picks nccl where CUDA is, else gloo). */
  char store[EA_COMM_ADDR_MAX];
  ea_ipc_torch_backend torch_backend;
  /* ckpt_staged: the state's format (EA_IPC_LAYOUT_NONE = absent, opaque
   * bytes) and, with a format, the bytes [0, header_bytes) that hold its
   * preamble and tensor table (header_bytes <= total). */
  ea_ipc_layout layout;
  uint64_t header_bytes;
  /* The fd that came with the packet (SCM_RIGHTS), -1 if none.  Not part
   * of the encoding: ea_ipc_send_fd sends one, ea_ipc_recv fills it. */
  int fd;
} ea_ipc_msg;

/* Zero *m, set its type, and fd = -1. */
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
/* ea_ipc_send with one file descriptor attached (SCM_RIGHTS; the caller
 * keeps its own fd, the receiver gets a new one).  fd < 0: no fd. */
int ea_ipc_send_fd(int sock, const ea_ipc_msg *m, int fd);
/* Receive one raw packet without blocking (for a poll-driven reader such
 * as the agent's supervisor): returns its true length (MSG_TRUNC: larger
 * than cap means it was cut and must be dropped), 0 at end of stream, or a
 * negative errno (-EAGAIN: nothing there).  *fd (may be NULL) gets the fd
 * that came with it (close-on-exec, caller owns it) or -1; extra fds are
 * closed, and so is any fd when fd is NULL.  Every packet the other side
 * sent before it closed is returned before end of stream, even when it
 * closed with packets of ours unread (Linux then reports ECONNRESET ahead
 * of them; that report is read past). */
ssize_t ea_ipc_recv_packet(int sock, void *buf, size_t cap, int *fd);
/* Wait up to timeout_ms (−1: forever) for one packet and decode it.
 * -ETIMEDOUT, -ECONNRESET at end of stream (the other side closed), -EMSGSIZE
 * for a packet over EA_IPC_MAX_MSG (it is consumed), -EBADMSG (decode; err
 * says why); EINTR is retried.  Uses EA_IPC_MAX_MSG bytes of stack.  A
 * zero-length packet reads as end of stream (SOCK_SEQPACKET cannot tell the
 * two apart); no encoder produces one.  A packet's fd lands in m->fd (the
 * caller closes it); on any error it has been closed already. */
int ea_ipc_recv(int fd, ea_ipc_msg *m, int timeout_ms, char *err, size_t errlen);

/* A socketpair for one worker: SOCK_SEQPACKET, close-on-exec on both ends
 * (the spawner maps the worker's end to fd 3, which clears it there). */
int ea_ipc_socketpair(int sv[2]);

#endif
