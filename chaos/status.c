/* status.c — one `status` from an agent, over its admin socket, parsed into
 * the few fields the harness watches.
 *
 * The harness talks to the socket itself rather than running `elastic-agent
 * status --json` several times a second per agent: a fork+exec per poll
 * would cost more CPU than the agents on a shared 2-core machine.  The
 * protocol is the documented one (docs/operations.md): one line in, one JSON
 * document out, then the agent closes.  Every step has a deadline, so a
 * SIGSTOPped agent (whose kernel still accepts the connection) costs one
 * timeout, never a hang.
 */
#include "chaos.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* A status document of a few dozen members is ~10 KB; 4 MiB is far above
 * anything the harness's clusters produce and bounds a broken answer. */
#define STATUS_MAX (4u << 20)

uint64_t ea__chaos_gen_from_str(const char *s) {
  if (!s) return 0;
  char *end;
  errno = 0;
  unsigned long long term = strtoull(s, &end, 10);
  if (errno || end == s || *end != '/' || term == 0) return 0;
  const char *h = end + 1;
  uint32_t hi = 0;
  for (int i = 0; i < 4; i++) {
    char c = h[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return 0;
    hi = hi << 4 | (uint32_t)v;
  }
  return (uint64_t)term << 16 | hi;
}

static void copy(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src ? src : "");
}

int ea__chaos_status_from_json(const ea__cj *j, ea__chaos_status *st) {
  if (!ea__cj_path(j, "generation")) {
    const char *e = ea__cj_str(j, "error", "no generation in the status document");
    copy(st->err, sizeof st->err, e);
    return -EPROTO;
  }
  copy(st->name, sizeof st->name, ea__cj_str(j, "self.name", ""));
  copy(st->gossip, sizeof st->gossip, ea__cj_str(j, "self.gossip", ""));
  copy(st->phase, sizeof st->phase, ea__cj_str(j, "generation.phase", "?"));
  copy(st->agent_phase, sizeof st->agent_phase, ea__cj_str(j, "generation.agent_phase", "?"));
  copy(st->reason, sizeof st->reason, ea__cj_str(j, "generation.reason", ""));
  st->gen = ea__cj_u64(j, "generation.gen", 0);
  st->world = (uint32_t)ea__cj_u64(j, "generation.world", 0);
  st->last_step = ea__cj_u64(j, "generation.last_step", 0);
  st->controller = ea__cj_bool(j, "generation.controller", false);
  st->has_quorum = ea__cj_bool(j, "generation.has_quorum", false);
  st->accepted = ea__chaos_gen_from_str(ea__cj_str(j, "generation.accepted", ""));
  st->durable = ea__chaos_gen_from_str(ea__cj_str(j, "generation.durable", ""));
  st->formed = ea__chaos_gen_from_str(ea__cj_str(j, "generation.formed", ""));
  st->nnodes = 0;
  const ea__cj *nodes = ea__cj_path(j, "generation.nodes");
  for (size_t i = 0; nodes && nodes->type == EA__CJ_ARR && i < nodes->n; i++) {
    if (st->nnodes >= sizeof st->nodes / sizeof st->nodes[0]) break;
    if (nodes->items[i]->type == EA__CJ_STR)
      copy(st->nodes[st->nnodes++], CH_NAME_MAX, nodes->items[i]->str);
  }
  copy(st->ctrl_name, sizeof st->ctrl_name, ea__cj_str(j, "controller.name", ""));
  st->alive = (uint32_t)ea__cj_u64(j, "summary.alive", 0);
  st->suspect = (uint32_t)ea__cj_u64(j, "summary.suspect", 0);
  st->dead = (uint32_t)ea__cj_u64(j, "summary.dead", 0);
  st->left = (uint32_t)ea__cj_u64(j, "summary.left", 0);
  st->detection_bound_ms = ea__cj_u64(j, "config.detection_bound_ms", 0);
  st->nworkers = 0;
  const ea__cj *ws = ea__cj_path(j, "workers");
  for (size_t i = 0; ws && ws->type == EA__CJ_ARR && i < ws->n && i < CH_MAX_WPN; i++) {
    const ea__cj *w = ws->items[i];
    ea__chaos_wstat *o = &st->w[st->nworkers++];
    o->pid = (int)ea__cj_u64(w, "pid", 0);
    copy(o->state, sizeof o->state, ea__cj_str(w, "state", "?"));
    o->gen = ea__cj_u64(w, "gen", 0);
    o->step = ea__cj_u64(w, "step", 0);
    copy(o->digest, sizeof o->digest, ea__cj_str(w, "digest", ""));
    o->restarts = (uint32_t)ea__cj_u64(w, "restarts", 0);
  }
  /* The checkpoint flow reports itself in status once the agent runs it
   * (a "checkpoint" object, or checkpoint counters); until then the
   * harness skips the checkpoint faults instead of pretending. */
  const ea__cj *ck = ea__cj_path(j, "checkpoint");
  if (!ck) ck = ea__cj_path(j, "ckpt");
  if (!ck) ck = ea__cj_path(j, "counters.ckpt");
  if (!ck) ck = ea__cj_path(j, "counters.checkpoint");
  st->has_ckpt = ck && ck->type == EA__CJ_OBJ && ea__cj_bool(ck, "enabled", true);
  return 0;
}

int ea__chaos_status_query(const char *sock_path, int timeout_ms, ea__chaos_status *st) {
  memset(st, 0, sizeof *st);
  st->t_ms = ea__chaos_now_ms();
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(sock_path) >= sizeof sa.sun_path) {
    copy(st->err, sizeof st->err, "socket path too long");
    return -ENAMETOOLONG;
  }
  memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  int64_t deadline = ea__chaos_mono_ms() + timeout_ms;
  int rc = 0;
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS && errno != EAGAIN) {
    rc = -errno;
    snprintf(st->err, sizeof st->err, "connect: %s", strerror(errno));
    close(fd);
    return rc;
  }
  const char *req = "status\n";
  size_t sent = 0, len = 0, cap = 16384;
  char *buf = malloc(cap);
  if (!buf) {
    close(fd);
    return -ENOMEM;
  }
  for (;;) {
    int64_t left = deadline - ea__chaos_mono_ms();
    if (left <= 0) {
      rc = -ETIMEDOUT;
      copy(st->err, sizeof st->err, "no answer in time");
      break;
    }
    struct pollfd p = {.fd = fd, .events = (short)(sent < strlen(req) ? POLLOUT : POLLIN)};
    int pr = poll(&p, 1, (int)left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    if (sent < strlen(req)) {
      ssize_t w = send(fd, req + sent, strlen(req) - sent, MSG_NOSIGNAL);
      if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (w < 0) {
        rc = -errno;
        snprintf(st->err, sizeof st->err, "send: %s", strerror(errno));
        break;
      }
      sent += (size_t)w;
      continue;
    }
    if (len + 4096 > cap) {
      if (cap >= STATUS_MAX) {
        rc = -EMSGSIZE;
        copy(st->err, sizeof st->err, "answer too large");
        break;
      }
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        rc = -ENOMEM;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (r < 0) {
      rc = -errno;
      snprintf(st->err, sizeof st->err, "recv: %s", strerror(errno));
      break;
    }
    if (r == 0) break;
    len += (size_t)r;
  }
  close(fd);
  if (rc == 0) {
    char perr[128];
    ea__cj *j = ea__cj_parse(buf, len, perr, sizeof perr);
    if (!j) {
      snprintf(st->err, sizeof st->err, "bad JSON: %s", perr);
      rc = -EPROTO;
    } else {
      rc = ea__chaos_status_from_json(j, st);
      ea__cj_free(j);
    }
  }
  free(buf);
  st->ok = rc == 0;
  return rc;
}
