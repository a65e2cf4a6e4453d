/* comm.c — the communicator front door: plan checks, backend dispatch, the
 * sticky error, abort.
 *
 * The backends (comm_tcp.c, comm_nccl.c) only move bytes.  Everything every
 * backend must do the same way lives here, once: argument checks, the rule
 * that any failure other than a bad argument breaks the communicator for
 * good (a half-finished collective leaves ranks disagreeing about what was
 * exchanged, so the only safe continuation is a new generation), and
 * the rule that an aborted communicator answers -ECANCELED at once.
 */
#include "comm_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* communication_timeout_seconds defaults to 10 (ea_config.h). */
#define EA_COMM_DEFAULT_TIMEOUT_MS 10000u

uint64_t ea__comm_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ea_comm_plan_init(ea_comm_plan *p) {
  memset(p, 0, sizeof *p);
  p->backend = EA_COMM_TCP;
  p->world = 1;
  p->listen_fd = -1;
}

const char *ea_comm_backend_name(ea_comm_backend b) {
  switch (b) {
    case EA_COMM_TCP:
      return "tcp";
    case EA_COMM_NCCL:
      return "nccl";
  }
  return "?";
}

bool ea_comm_nccl_available(void) {
#ifdef EA_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

int ea_comm_backend_parse(const char *s, ea_comm_backend *out) {
  if (!s || !out) return -EINVAL;
  if (strcasecmp(s, "tcp") == 0)
    *out = EA_COMM_TCP;
  else if (strcasecmp(s, "nccl") == 0)
    *out = EA_COMM_NCCL;
  else if (strcasecmp(s, "auto") == 0)
    *out = ea_comm_nccl_available() ? EA_COMM_NCCL : EA_COMM_TCP;
  else
    return -EINVAL;
  return 0;
}

size_t ea_comm_dtype_size(ea_comm_dtype dt) {
  switch (dt) {
    case EA_COMM_F32:
      return 4;
    case EA_COMM_F64:
      return 8;
    case EA_COMM_I64:
      return 8;
  }
  return 0;
}

int ea_comm_nccl_unique_id(uint8_t id[EA_COMM_NCCL_ID_BYTES]) {
  if (!id) return -EINVAL;
#ifdef EA_HAVE_NCCL
  return ea__comm_nccl_unique_id(id);
#else
  return -EOPNOTSUPP;
#endif
}

int ea_comm_new(const ea_comm_plan *plan, ea_comm **out) {
  if (!plan || !out) return -EINVAL;
  *out = NULL;
  if (plan->world == 0 || plan->rank >= plan->world) return -EINVAL;
  ea_comm *c = calloc(1, sizeof *c);
  if (!c) return -ENOMEM;
  c->backend = plan->backend;
  c->rank = plan->rank;
  c->world = plan->world;
  c->generation = plan->generation;
  c->timeout_ms = plan->timeout_ms ? plan->timeout_ms : EA_COMM_DEFAULT_TIMEOUT_MS;
  c->init_timeout_ms = plan->init_timeout_ms ? plan->init_timeout_ms : c->timeout_ms;
  c->blame_rank = -1;
  atomic_init(&c->aborted, 0);
  int rc;
  switch (plan->backend) {
    case EA_COMM_TCP:
      rc = ea__comm_tcp_new(c, plan);
      break;
    case EA_COMM_NCCL:
#ifdef EA_HAVE_NCCL
      rc = ea__comm_nccl_new(c, plan);
#else
      rc = -EOPNOTSUPP;
#endif
      break;
    default:
      rc = -EINVAL;
  }
  if (rc < 0) {
    free(c);
    return rc;
  }
  *out = c;
  return 0;
}

/* The state check every op starts with. */
static int usable(ea_comm *c) {
  if (atomic_load_explicit(&c->aborted, memory_order_acquire)) return -ECANCELED;
  if (c->error) return c->error;
  if (!c->connected) return -ENOTCONN;
  return 0;
}

/* Make rc sticky (unless it is a plain argument error) and tell the peers. */
static int settle(ea_comm *c, int rc) {
  if (rc == 0) {
    c->stats.ops++;
    return 0;
  }
  if (rc == -EINVAL) return rc;
  /* An abort that raced with another failure reads as the abort: the
   * caller asked for it, and it is what every later op will say. */
  if (atomic_load_explicit(&c->aborted, memory_order_acquire)) rc = -ECANCELED;
  c->error = rc;
  c->stats.error = rc;
  if (c->vt->fail) c->vt->fail(c, rc);
  return rc;
}

int ea_comm_connect(ea_comm *c) {
  if (!c) return -EINVAL;
  if (atomic_load_explicit(&c->aborted, memory_order_acquire)) return -ECANCELED;
  if (c->error) return c->error;
  if (c->connected) return -EISCONN;
  int rc = c->vt->connect(c);
  if (rc == 0) {
    c->connected = 1;
    /* An abort that landed just as the connect finished still wins. */
    if (atomic_load_explicit(&c->aborted, memory_order_acquire))
      rc = -ECANCELED;
    else
      return 0;
  }
  return settle(c, rc);
}

int ea_comm_init(const ea_comm_plan *plan, ea_comm **out) {
  if (!out) return -EINVAL;
  *out = NULL;
  ea_comm *c;
  int rc = ea_comm_new(plan, &c);
  if (rc < 0) return rc;
  rc = ea_comm_connect(c);
  if (rc < 0) {
    ea_comm_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

int ea_comm_allreduce(ea_comm *c, void *buf, size_t count, ea_comm_dtype dtype, ea_comm_op op) {
  if (!c) return -EINVAL;
  if (ea_comm_dtype_size(dtype) == 0 || (op != EA_COMM_SUM && op != EA_COMM_MAX)) return -EINVAL;
  if (!buf && count) return -EINVAL;
  if (count > SIZE_MAX / 8) return -EINVAL;
  /* Reductions load whole elements: the buffer must be naturally aligned. */
  if ((uintptr_t)buf % ea_comm_dtype_size(dtype)) return -EINVAL;
  int rc = usable(c);
  if (rc < 0) return rc;
  c->op_seq++;
  if (c->world == 1 || count == 0) return settle(c, 0);
  return settle(c, c->vt->allreduce(c, buf, count, dtype, op));
}

int ea_comm_broadcast(ea_comm *c, void *buf, size_t bytes, uint32_t root) {
  if (!c || (!buf && bytes)) return -EINVAL;
  if (root >= c->world) return -EINVAL;
  int rc = usable(c);
  if (rc < 0) return rc;
  c->op_seq++;
  if (c->world == 1 || bytes == 0) return settle(c, 0);
  return settle(c, c->vt->broadcast(c, buf, bytes, root));
}

int ea_comm_barrier(ea_comm *c) {
  if (!c) return -EINVAL;
  int rc = usable(c);
  if (rc < 0) return rc;
  c->op_seq++;
  if (c->world == 1) return settle(c, 0);
  return settle(c, c->vt->barrier(c));
}

void ea_comm_abort(ea_comm *c) {
  if (!c) return;
  if (atomic_exchange_explicit(&c->aborted, 1, memory_order_acq_rel)) return;
  c->vt->abort(c);
}

int ea_comm_shrink(ea_comm *c, const uint32_t *excluded, size_t n, uint64_t new_generation,
                   ea_comm **out) {
  if (!c || !out || (!excluded && n)) return -EINVAL;
  *out = NULL;
  if (n >= c->world) return -EINVAL;
  for (size_t i = 0; i < n; i++) {
    if (excluded[i] >= c->world) return -EINVAL;
    if (excluded[i] == c->rank) return -EINVAL; /* an excluded rank does not call it */
    for (size_t j = 0; j < i; j++)
      if (excluded[j] == excluded[i]) return -EINVAL;
  }
  if (!c->vt->shrink) return -EOPNOTSUPP;
  if (!c->connected) return -ENOTCONN;
  /* Shrinking is how an aborted or broken NCCL communicator is salvaged
   * (abort → revoke → shrink), so neither the abort flag nor a sticky error
   * forbids it; the backend decides what it can still do. */
  return c->vt->shrink(c, excluded, n, new_generation, out);
}

void ea_comm_free(ea_comm *c) {
  if (!c) return;
  c->vt->destroy(c);
  free(c);
}

bool ea_comm_blame(const ea_comm *c, uint32_t *peer, char *why, size_t cap) {
  if (!c || c->blame_rank < 0 || c->error == 0 || c->error == -ECANCELED) return false;
  if (peer) *peer = (uint32_t)c->blame_rank;
  if (why && cap) snprintf(why, cap, "%s", c->blame_why);
  return true;
}

uint32_t ea_comm_rank(const ea_comm *c) {
  return c->rank;
}
uint32_t ea_comm_world(const ea_comm *c) {
  return c->world;
}
uint64_t ea_comm_generation(const ea_comm *c) {
  return c->generation;
}
ea_comm_backend ea_comm_get_backend(const ea_comm *c) {
  return c->backend;
}

void ea_comm_get_stats(const ea_comm *c, ea_comm_stats *st) {
  *st = c->stats;
  st->error = c->error;
}
