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
 *
 * The document is read with jansson (a DOM, a few kilobytes, several times
 * a second per agent: noise) rather than the agent's own reader, which is
 * internal to agent/.  Absent or mistyped members read as their defaults,
 * so an agent that reports less (an older one, a phase without workers) is
 * still watched.
 */
#include "chaos.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
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

/* ---- reading the document ------------------------------------------------ */

/* A member by dotted path ("generation.phase"), through objects only; NULL
 * if any part is absent (or a key is 128 bytes or longer: no status key
 * is). */
static const json_t *jpath(const json_t *v, const char *path) {
  char key[128];
  while (v && path && *path) {
    size_t l = strcspn(path, ".");
    if (l >= sizeof key || !json_is_object(v)) return NULL;
    memcpy(key, path, l);
    key[l] = 0;
    v = json_object_get(v, key);
    path += l;
    if (*path == '.') path++;
  }
  return v;
}

static const char *jstr(const json_t *v, const char *path, const char *def) {
  const json_t *x = jpath(v, path);
  return json_is_string(x) ? json_string_value(x) : def;
}

/* Counters and ids: an integer as is; a negative number is absent; a
 * fraction is cut (the agent prints none); one beyond int64 (parsed as a
 * real, see parse_doc) is taken as near as a double gets. */
static uint64_t ju64(const json_t *v, const char *path, uint64_t def) {
  const json_t *x = jpath(v, path);
  if (json_is_integer(x)) {
    json_int_t i = json_integer_value(x);
    return i < 0 ? def : (uint64_t)i;
  }
  if (json_is_real(x)) {
    double d = json_real_value(x);
    return signbit(d) || isnan(d) ? def : d >= 0x1p64 ? UINT64_MAX : (uint64_t)d;
  }
  return def;
}

static bool jbool(const json_t *v, const char *path, bool def) {
  const json_t *x = jpath(v, path);
  return json_is_boolean(x) ? json_is_true(x) : def;
}

/* jansson refuses an integer beyond int64 outright; the agent prints u64
 * counters, so such a document is read again with every integer as a real
 * rather than lost. */
static json_t *parse_doc(const char *buf, size_t len, char *err, size_t errlen) {
  json_error_t je;
  json_t *j = json_loadb(buf, len, JSON_DECODE_ANY, &je);
  if (!j && json_error_code(&je) == json_error_numeric_overflow)
    j = json_loadb(buf, len, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
  if (!j) snprintf(err, errlen, "offset %d: %.100s", je.position, je.text);
  return j;
}

static int from_json(const json_t *j, ea__chaos_status *st) {
  if (!jpath(j, "generation")) {
    const char *e = jstr(j, "error", "no generation in the status document");
    copy(st->err, sizeof st->err, e);
    return -EPROTO;
  }
  copy(st->name, sizeof st->name, jstr(j, "self.name", ""));
  copy(st->gossip, sizeof st->gossip, jstr(j, "self.gossip", ""));
  copy(st->metrics, sizeof st->metrics, jstr(j, "self.metrics", ""));
  copy(st->phase, sizeof st->phase, jstr(j, "generation.phase", "?"));
  copy(st->agent_phase, sizeof st->agent_phase, jstr(j, "generation.agent_phase", "?"));
  copy(st->reason, sizeof st->reason, jstr(j, "generation.reason", ""));
  st->gen = ju64(j, "generation.gen", 0);
  st->world = (uint32_t)ju64(j, "generation.world", 0);
  st->last_step = ju64(j, "generation.last_step", 0);
  st->controller = jbool(j, "generation.controller", false);
  st->has_quorum = jbool(j, "generation.has_quorum", false);
  st->accepted = ea__chaos_gen_from_str(jstr(j, "generation.accepted", ""));
  st->durable = ea__chaos_gen_from_str(jstr(j, "generation.durable", ""));
  st->formed = ea__chaos_gen_from_str(jstr(j, "generation.formed", ""));
  st->nnodes = 0;
  const json_t *nodes = jpath(j, "generation.nodes");
  for (size_t i = 0; json_is_array(nodes) && i < json_array_size(nodes); i++) {
    if (st->nnodes >= sizeof st->nodes / sizeof st->nodes[0]) break;
    const json_t *x = json_array_get(nodes, i);
    if (json_is_string(x)) copy(st->nodes[st->nnodes++], CH_NAME_MAX, json_string_value(x));
  }
  copy(st->ctrl_name, sizeof st->ctrl_name, jstr(j, "controller.name", ""));
  st->alive = (uint32_t)ju64(j, "summary.alive", 0);
  st->suspect = (uint32_t)ju64(j, "summary.suspect", 0);
  st->dead = (uint32_t)ju64(j, "summary.dead", 0);
  st->left = (uint32_t)ju64(j, "summary.left", 0);
  st->detection_bound_ms = ju64(j, "config.detection_bound_ms", 0);
  st->nworkers = 0;
  const json_t *ws = jpath(j, "workers");
  for (size_t i = 0; json_is_array(ws) && i < json_array_size(ws) && i < CH_MAX_WPN; i++) {
    const json_t *w = json_array_get(ws, i);
    ea__chaos_wstat *o = &st->w[st->nworkers++];
    o->pid = (int)ju64(w, "pid", 0);
    copy(o->state, sizeof o->state, jstr(w, "state", "?"));
    o->gen = ju64(w, "gen", 0);
    o->step = ju64(w, "step", 0);
    copy(o->digest, sizeof o->digest, jstr(w, "digest", ""));
    o->restarts = (uint32_t)ju64(w, "restarts", 0);
  }
  /* The checkpoint flow reports itself in status once the agent runs it
   * (a "checkpoint" object, or checkpoint counters); until then the
   * harness skips the checkpoint faults instead of pretending. */
  const json_t *ck = jpath(j, "checkpoint");
  if (!ck) ck = jpath(j, "ckpt");
  if (!ck) ck = jpath(j, "counters.ckpt");
  if (!ck) ck = jpath(j, "counters.checkpoint");
  st->has_ckpt = json_is_object(ck) && jbool(ck, "enabled", true);
  st->spare = jbool(j, "spares.self.spare", false);
  copy(st->spare_state, sizeof st->spare_state, jstr(j, "spares.self.state", ""));
  st->spares_ready = (uint32_t)ju64(j, "spares.ready", 0);
  st->nheld = 0;
  const json_t *hs = jpath(j, "held_out");
  for (size_t i = 0; json_is_array(hs) && i < json_array_size(hs) && st->nheld < 4; i++) {
    const json_t *h = json_array_get(hs, i);
    const json_t *left = json_object_get(h, "remaining_s");
    if (!json_is_number(left) || jbool(h, "waived", false)) continue;
    copy(st->held[st->nheld], CH_NAME_MAX, jstr(h, "node", ""));
    st->held_left_ms[st->nheld] = (int64_t)(json_number_value(left) * 1000.0 + 0.5);
    st->held_holds[st->nheld++] = (uint32_t)ju64(h, "holds", 1);
  }
  return 0;
}

int ea__chaos_status_parse(const char *buf, size_t len, ea__chaos_status *st) {
  char perr[128];
  json_t *j = parse_doc(buf, len, perr, sizeof perr);
  if (!j) {
    snprintf(st->err, sizeof st->err, "bad JSON: %.117s", perr);
    return -EPROTO;
  }
  int rc = from_json(j, st);
  json_decref(j);
  return rc;
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
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS &&
      errno != EAGAIN) {
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
  if (rc == 0) rc = ea__chaos_status_parse(buf, len, st);
  free(buf);
  st->ok = rc == 0;
  return rc;
}
