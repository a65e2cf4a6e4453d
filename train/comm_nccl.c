/* comm_nccl.c — the nccl communicator: NCCL collectives driven so that no
 * call can block past the op timeout, and abort works from another thread.
 *
 * Built only when CUDA and NCCL are found (the Makefile compiles *_nccl.c and
 * defines EA_HAVE_NCCL).  Compiled and linked against NCCL 2.28.9 / CUDA 13;
 * the machine it was written on has no GPU.  It has run on one GPU at world
 * 1 only (scripts/gpu-check.sh, docs/comm.md): nothing with a lost peer.
 *
 * Why non-blocking.  A blocking NCCL communicator can hang forever inside
 * init or a collective when a peer dies.  With config.blocking = 0 every
 * NCCL call returns at once (ncclInProgress while work is pending), and this
 * file polls: ncclCommGetAsyncError for the communicator's state,
 * cudaStreamQuery for the op's stream, the abort flag and the deadline — the
 * watchdog PyTorch runs in a thread, run here in the op's own loop.
 *
 * Why a mutex.  ncclCommAbort frees the communicator, so another thread must
 * not call it while the op thread is inside an NCCL call.  The op thread
 * holds `mu` only around its (non-blocking, short) NCCL calls, never while
 * waiting, so ea_comm_abort takes it promptly and then revokes the
 * communicator (ncclCommRevoke, NCCL ≥ 2.28: in-flight kernels stop and the
 * communicator stays valid for ncclCommShrink) or, on older NCCL, aborts it
 * outright.  The op thread sees the abort flag within one poll interval.
 *
 * Buffers.  NCCL reads and writes device memory.  A device (or managed)
 * pointer is used as is; a host pointer is staged through a device scratch
 * buffer owned by the communicator: copy in, collective, wait (polled), copy
 * out.  The copy out happens only after the collective has been seen to
 * complete, so an abort or timeout never leaves a copy pending into the
 * caller's host memory.  After an error a *device* buffer may still be
 * written by a dying kernel until ea_comm_free() returns (it aborts the
 * communicator, which waits for its kernels).
 */
#include "comm_int.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Non-blocking communicators appeared in NCCL 2.14; 2.18 is the oldest we
 * accept (the project's floor).  Only 2.28 has been compiled against. */
#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "the nccl backend needs NCCL >= 2.18"
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define EA_NCCL_HAVE_REVOKE 1
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
#define EA_NCCL_HAVE_SHRINK 1
#endif

/* Polling: the first SPIN_POLLS checks back to back (a small collective
 * finishes in tens of microseconds, and sleeping would double that), then
 * every POLL_SLEEP_NS (50 µs: negligible against a large op, and what bounds
 * how fast an abort from another thread is noticed). */
#define SPIN_POLLS 2000
#define POLL_SLEEP_NS 50000L

typedef struct {
  pthread_mutex_t mu; /* serializes NCCL calls on `comm` (see above) */
  ncclComm_t comm;    /* NULL once aborted and freed */
  int revoked;        /* ncclCommRevoke issued */
  int ready;          /* init finished: the abort thread may act on comm */
  int device;
  cudaStream_t stream;
  void *scratch; /* device staging for host buffers */
  size_t scratch_cap;
  void *one; /* 8 device bytes for the barrier */
  ncclUniqueId id;
} nccl_be;

static const ea__comm_vt nccl_vt;

static int from_cuda(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return 0;
    case cudaErrorMemoryAllocation:
      return -ENOMEM;
    case cudaErrorInvalidValue:
      return -EINVAL;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: /* what a machine without a GPU driver says */
    case cudaErrorInvalidDevice:
      return -ENODEV;
    default:
      return -EIO;
  }
}

static int from_nccl(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return 0;
    case ncclInProgress:
      return -EINPROGRESS;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return -EINVAL;
    case ncclRemoteError:
    case ncclSystemError:
      return -ECONNRESET; /* a peer or the network failed */
    case ncclUnhandledCudaError:
    case ncclInternalError:
    default:
      return -EIO;
  }
}

static void nap(unsigned *polls) {
  if (++*polls < SPIN_POLLS) return;
  struct timespec ts = {0, POLL_SLEEP_NS};
  nanosleep(&ts, NULL);
}

int ea__comm_nccl_unique_id(uint8_t id[EA_COMM_NCCL_ID_BYTES]) {
  _Static_assert(sizeof(ncclUniqueId) == EA_COMM_NCCL_ID_BYTES, "ncclUniqueId size");
  ncclUniqueId u;
  int rc = from_nccl(ncclGetUniqueId(&u));
  if (rc < 0) return rc;
  memcpy(id, &u, sizeof u);
  return 0;
}

static int be_alloc(ea_comm *c, int device, const ncclUniqueId *id) {
  nccl_be *b = calloc(1, sizeof *b);
  if (!b) return -ENOMEM;
  pthread_mutex_init(&b->mu, NULL);
  b->device = device;
  if (id) b->id = *id;
  c->vt = &nccl_vt;
  c->be = b;
  return 0;
}

int ea__comm_nccl_new(ea_comm *c, const ea_comm_plan *p) {
  ncclUniqueId id;
  memcpy(&id, p->nccl_id, sizeof id);
  return be_alloc(c, p->cuda_device, &id);
}

/* Stream and barrier scratch: the per-communicator CUDA resources. */
static int cuda_setup(nccl_be *b) {
  int rc = from_cuda(cudaSetDevice(b->device));
  if (rc == 0) rc = from_cuda(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
  if (rc == 0) rc = from_cuda(cudaMalloc(&b->one, 8));
  return rc;
}

/* Wait until comm leaves ncclInProgress: 0, an NCCL error, -ETIMEDOUT, or
 * -ECANCELED when *cancel becomes set (cancel may be NULL).  Used for init,
 * shrink, enqueueing, and a revoked communicator becoming quiescent. */
static int wait_state(const atomic_int *cancel, nccl_be *b, ncclComm_t comm, uint64_t deadline) {
  unsigned polls = 0;
  for (;;) {
    ncclResult_t st = ncclSuccess;
    pthread_mutex_lock(&b->mu);
    ncclResult_t r = ncclCommGetAsyncError(comm, &st);
    pthread_mutex_unlock(&b->mu);
    if (r != ncclSuccess) return from_nccl(r);
    if (st != ncclInProgress) return from_nccl(st);
    if (cancel && atomic_load(cancel)) return -ECANCELED;
    if (ea__comm_now_ns() >= deadline) return -ETIMEDOUT;
    nap(&polls);
  }
}

/* Tear comm down from the op thread (mutex held by caller). */
static void kill_comm_locked(nccl_be *b) {
  if (b->comm) {
    ncclCommAbort(b->comm);
    b->comm = NULL;
  }
}

static int nccl_connect(ea_comm *c) {
  nccl_be *b = c->be;
  int rc = cuda_setup(b);
  if (rc < 0) return rc;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  uint64_t deadline = ea__comm_now_ns() + (uint64_t)c->init_timeout_ms * 1000000ull;
  pthread_mutex_lock(&b->mu);
  ncclResult_t r = ncclCommInitRankConfig(&b->comm, (int)c->world, b->id, (int)c->rank, &cfg);
  pthread_mutex_unlock(&b->mu);
  if (r != ncclSuccess && r != ncclInProgress) {
    rc = from_nccl(r);
  } else {
    rc = wait_state(&c->aborted, b, b->comm, deadline);
  }
  pthread_mutex_lock(&b->mu);
  if (rc < 0)
    kill_comm_locked(b); /* a half-made communicator is useless */
  else
    b->ready = 1;
  pthread_mutex_unlock(&b->mu);
  return rc;
}

/* Wait for the op on b->stream: done, NCCL async error, abort, deadline. */
static int wait_op(ea_comm *c, nccl_be *b, uint64_t deadline) {
  unsigned polls = 0;
  for (;;) {
    if (atomic_load(&c->aborted)) return -ECANCELED;
    cudaError_t q = cudaStreamQuery(b->stream);
    if (q == cudaSuccess) return 0;
    if (q != cudaErrorNotReady) return from_cuda(q);
    ncclResult_t st = ncclSuccess, r = ncclSuccess;
    pthread_mutex_lock(&b->mu);
    int alive = b->comm != NULL;
    if (alive) r = ncclCommGetAsyncError(b->comm, &st);
    pthread_mutex_unlock(&b->mu);
    if (!alive) return -ECANCELED;
    if (r != ncclSuccess) return from_nccl(r);
    if (st != ncclSuccess && st != ncclInProgress) return from_nccl(st);
    if (ea__comm_now_ns() >= deadline) return -ETIMEDOUT;
    nap(&polls);
  }
}

static int is_device_ptr(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError(); /* older runtimes flag plain host pointers as errors */
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static int scratch_get(nccl_be *b, size_t bytes) {
  if (bytes <= b->scratch_cap) return 0;
  if (b->scratch) cudaFree(b->scratch);
  b->scratch = NULL;
  b->scratch_cap = 0;
  int rc = from_cuda(cudaMalloc(&b->scratch, bytes));
  if (rc == 0) b->scratch_cap = bytes;
  return rc;
}

static ncclDataType_t nccl_dtype(ea_comm_dtype dt) {
  switch (dt) {
    case EA_COMM_F32:
      return ncclFloat32;
    case EA_COMM_F64:
      return ncclFloat64;
    case EA_COMM_I64:
      return ncclInt64;
  }
  return ncclFloat32;
}

enum { K_ALLREDUCE, K_BROADCAST };

/* One collective: stage if needed, enqueue, wait, unstage. */
static int run_coll(ea_comm *c, int kind, void *buf, size_t count, ea_comm_dtype dt, ea_comm_op op,
                    uint32_t root) {
  nccl_be *b = c->be;
  uint64_t deadline = ea__comm_now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
  size_t bytes = kind == K_ALLREDUCE ? count * ea_comm_dtype_size(dt) : count;
  int rc = from_cuda(cudaSetDevice(b->device));
  if (rc < 0) return rc;
  void *dev = buf;
  int host = !is_device_ptr(buf);
  if (host) {
    if ((rc = scratch_get(b, bytes)) < 0) return rc;
    dev = b->scratch;
    if (kind == K_ALLREDUCE || c->rank == root) {
      rc = from_cuda(cudaMemcpyAsync(dev, buf, bytes, cudaMemcpyHostToDevice, b->stream));
      if (rc < 0) return rc;
    }
  }
  pthread_mutex_lock(&b->mu);
  ncclResult_t r;
  if (!b->comm)
    r = ncclInvalidUsage;
  else if (kind == K_ALLREDUCE)
    r = ncclAllReduce(dev, dev, count, nccl_dtype(dt), op == EA_COMM_SUM ? ncclSum : ncclMax,
                      b->comm, b->stream);
  else
    r = ncclBroadcast(dev, dev, count, ncclUint8, (int)root, b->comm, b->stream);
  ncclComm_t comm = b->comm;
  pthread_mutex_unlock(&b->mu);
  if (!comm) return -ECANCELED;
  if (r == ncclInProgress)
    rc = wait_state(&c->aborted, b, comm, deadline);
  else
    rc = from_nccl(r);
  if (rc == 0) rc = wait_op(c, b, deadline);
  if (rc == 0 && host) {
    /* The stream is idle (checked above), so this copy cannot wait on the
     * collective: it is a plain, bounded device-to-host copy. */
    rc = from_cuda(cudaMemcpy(buf, dev, bytes, cudaMemcpyDeviceToHost));
  }
  /* -EINVAL means "bad argument, communicator untouched" to comm.c; that is
   * only true when NCCL refused the call outright. */
  if (rc == -EINVAL && (r == ncclSuccess || r == ncclInProgress)) rc = -EIO;
  return rc;
}

static int nccl_allreduce(ea_comm *c, void *buf, size_t count, ea_comm_dtype dt, ea_comm_op op) {
  return run_coll(c, K_ALLREDUCE, buf, count, dt, op, 0);
}

static int nccl_broadcast(ea_comm *c, void *buf, size_t bytes, uint32_t root) {
  return run_coll(c, K_BROADCAST, buf, bytes, EA_COMM_I64, EA_COMM_SUM, root);
}

static int nccl_barrier(ea_comm *c) {
  nccl_be *b = c->be;
  /* An allreduce of one device word completes on no rank before every rank
   * has contributed: a barrier. */
  return run_coll(c, K_ALLREDUCE, b->one, 1, EA_COMM_I64, EA_COMM_SUM, 0);
}

/* Stop in-flight work; called with mu held. */
static void stop_locked(nccl_be *b) {
  if (!b->comm || !b->ready) return; /* init in progress: the op thread aborts */
#ifdef EA_NCCL_HAVE_REVOKE
  if (!b->revoked) {
    ncclCommRevoke(b->comm, NCCL_REVOKE_DEFAULT);
    b->revoked = 1;
  }
#else
  kill_comm_locked(b);
#endif
}

static void nccl_abort(ea_comm *c) {
  nccl_be *b = c->be;
  pthread_mutex_lock(&b->mu);
  stop_locked(b);
  pthread_mutex_unlock(&b->mu);
}

static void nccl_fail(ea_comm *c, int err) {
  (void)err;
  nccl_abort(c);
}

static int nccl_shrink(ea_comm *c, const uint32_t *excluded, size_t n, uint64_t gen,
                       ea_comm **out) {
#ifdef EA_NCCL_HAVE_SHRINK
  nccl_be *b = c->be;
  uint64_t deadline = ea__comm_now_ns() + (uint64_t)c->init_timeout_ms * 1000000ull;
  int *ex = malloc((n ? n : 1) * sizeof *ex);
  if (!ex) return -ENOMEM;
  uint32_t below = 0;
  for (size_t i = 0; i < n; i++) {
    ex[i] = (int)excluded[i];
    if (excluded[i] < c->rank) below++;
  }
  ea_comm *nc = calloc(1, sizeof *nc);
  int rc = nc ? 0 : -ENOMEM;
  if (rc == 0) {
    *nc = (ea_comm){.backend = EA_COMM_NCCL,
                    .rank = c->rank - below,
                    .world = c->world - (uint32_t)n,
                    .generation = gen,
                    .timeout_ms = c->timeout_ms,
                    .init_timeout_ms = c->init_timeout_ms};
    atomic_init(&nc->aborted, 0);
    rc = be_alloc(nc, b->device, NULL);
  }
  nccl_be *nb = rc == 0 ? nc->be : NULL;
  if (rc == 0) rc = cuda_setup(nb);
  /* Snapshot the parent under the lock: on NCCL < 2.28 an abort frees it. */
  pthread_mutex_lock(&b->mu);
  int revoked = b->revoked;
  ncclComm_t parent = b->comm;
  pthread_mutex_unlock(&b->mu);
  if (rc == 0 && !parent) rc = -ECANCELED; /* aborted without revoke: re-init */
  /* A revoked parent must become quiescent first (ncclCommRevoke's
   * contract).  Its abort flag is set by then — abort-then-shrink is the
   * normal sequence — so only the deadline bounds this wait. */
  if (rc == 0 && revoked) rc = wait_state(NULL, b, parent, deadline);
  if (rc == 0) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    /* A broken or revoked parent may still have work in flight: have NCCL
     * terminate it before shrinking. */
    int flags = (c->error || revoked) ? NCCL_SHRINK_ABORT : NCCL_SHRINK_DEFAULT;
    pthread_mutex_lock(&b->mu);
    ncclResult_t r = ncclCommShrink(b->comm, ex, (int)n, &nb->comm, &cfg, flags);
    pthread_mutex_unlock(&b->mu);
    if (r == ncclInProgress || r == ncclSuccess)
      rc = wait_state(&nc->aborted, nb, nb->comm, deadline);
    else
      rc = from_nccl(r);
  }
  free(ex);
  if (rc < 0) {
    if (nc) {
      if (nc->be) {
        pthread_mutex_lock(&nb->mu);
        kill_comm_locked(nb);
        pthread_mutex_unlock(&nb->mu);
        nc->vt->destroy(nc);
      }
      free(nc);
    }
    return rc;
  }
  nb->ready = 1;
  nc->connected = 1;
  *out = nc;
  return 0;
#else
  (void)c, (void)excluded, (void)n, (void)gen, (void)out;
  return -EOPNOTSUPP;
#endif
}

static void nccl_destroy(ea_comm *c) {
  nccl_be *b = c->be;
  if (!b) return;
  cudaSetDevice(b->device);
  pthread_mutex_lock(&b->mu);
  if (b->comm) {
    /* A healthy communicator is finalized, then destroyed (it flushes and
     * lets the peers release their side cleanly); anything else is
     * aborted.  Finalize is non-blocking here, bounded by the op timeout. */
    int clean = !c->error && !b->revoked && b->ready && !atomic_load(&c->aborted);
    ncclResult_t st = ncclInternalError;
    if (clean) {
      ncclResult_t r = ncclCommFinalize(b->comm);
      st = r;
      if (r == ncclInProgress) {
        uint64_t deadline = ea__comm_now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
        unsigned polls = 0;
        while (ncclCommGetAsyncError(b->comm, &st) == ncclSuccess && st == ncclInProgress &&
               ea__comm_now_ns() < deadline)
          nap(&polls);
      }
    }
    if (st == ncclSuccess)
      ncclCommDestroy(b->comm);
    else
      ncclCommAbort(b->comm);
    b->comm = NULL;
  }
  pthread_mutex_unlock(&b->mu);
  if (b->stream) cudaStreamDestroy(b->stream);
  if (b->scratch) cudaFree(b->scratch);
  if (b->one) cudaFree(b->one);
  pthread_mutex_destroy(&b->mu);
  free(b);
  c->be = NULL;
}

static const ea__comm_vt nccl_vt = {
    .connect = nccl_connect,
    .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .fail = nccl_fail,
    .shrink = nccl_shrink,
    .destroy = nccl_destroy,
};
