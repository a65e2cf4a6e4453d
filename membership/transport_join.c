/* Joining and leaving the cluster over the libuv transport.  Join turns the
 * --join seed list (names or addresses, plus remembered peers) into
 * candidate addresses — DNS through uv_getaddrinfo, never blocking the loop —
 * and has the core push-pull with them; an attempt that reaches nobody is
 * retried with jittered exponential back-off, and every failure's reason is
 * logged.  Leave gossips our LEFT a few times before telling the caller it
 * may close.
 *
 * This is a file of its own because it is the transport's one piece of
 * policy (retries, giving up, the reasons shown to operators), and it keeps
 * transport_uv.c to the sockets.  It touches the shared struct
 * (transport_int.h) only in its join and leave parts and reaches sockets,
 * the timer and closing only through the ea__transport_* helpers.
 */
#include "transport_int.h"

#include "ea_log.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The LEFT update is considered delivered after this many sends; each
 * recipient re-gossips it, so three copies make loss of all of them
 * unlikely (memberlist waits for its broadcast queue to drain instead). */
#define LEAVE_SENDS 3
#define LEAVE_MAX_MS 1000
/* With no seeds, only remembered peers: give up after this many attempts
 * (≈ 0.2+0.4+0.8+1.6+3.2 s at the default backoff) and wait to be joined —
 * a restarted node whose whole cluster is gone should not retry forever. */
#define PEERS_ONLY_ATTEMPTS 5

/* ---- join ------------------------------------------------------------------ */

static bool addr_is_self(const ea_transport *t, const ea_addr *a) {
  if (a->port != t->bound.port) return false;
  if (ea_addr_eq(a, &t->gossip) || ea_addr_eq(a, &t->bound)) return true;
  for (size_t i = 0; i < t->nlocal; i++)
    if (a->family == t->local[i].family &&
        memcmp(a->ip, t->local[i].ip, a->family == 4 ? 4 : 16) == 0)
      return true;
  return false;
}

static void join_attempt(ea_transport *t);

static void join_stop(ea_transport *t) {
  t->join.active = false;
  uv_timer_stop(&t->join_timer);
}

static void join_timer_cb(uv_timer_t *h) {
  ea_transport *t = h->data;
  if (!t->join.active || t->closing) return;
  size_t alive = ea_swim_alive_count(t->swim);
  if (alive > 1) {
    ea_log(EA_LOG_INFO, "join",
           "another member reached us first: %zu alive members known; stopping seed retries",
           alive);
    join_stop(t);
    if (t->on_join) t->on_join(t->ctx, 1, "a peer that contacted us");
    return;
  }
  join_attempt(t);
}

static void join_append(char *buf, size_t cap, const char *fmt, const char *a, const char *b) {
  size_t n = strlen(buf);
  if (n + 1 >= cap) return;
  snprintf(buf + n, cap - n, fmt, a, b);
}

static void join_attempt_failed(ea_transport *t) {
  if (t->join.nseeds == 0 && t->join.attempt >= PEERS_ONLY_ATTEMPTS) {
    ea_log(EA_LOG_WARN, "join",
           "attempt %u failed: %s; none of the remembered peers answered: giving up, waiting "
           "for others to join (restart with --join to point at a live member)",
           t->join.attempt, t->join.why[0] ? t->join.why : "no address to try");
    if (t->on_join) t->on_join(t->ctx, 0, t->join.why);
    join_stop(t);
    return;
  }
  uint32_t b = t->join.backoff_ms;
  uint32_t delay = b / 2 + ea_rng_below(&t->rng, b / 2 + 1); /* "equal jitter" */
  ea_log(EA_LOG_WARN, "join", "attempt %u failed: %s; retrying in %u ms", t->join.attempt,
         t->join.why[0] ? t->join.why : "no address to try", delay);
  if (t->on_join) t->on_join(t->ctx, 0, t->join.why);
  uint64_t nb = (uint64_t)b * 2;
  t->join.backoff_ms = nb > t->join_retry_max_ms ? t->join_retry_max_ms : (uint32_t)nb;
  uv_timer_start(&t->join_timer, join_timer_cb, delay, 0);
}

void ea__transport_join_sync_done(ea_transport *t, const ea_addr *peer, bool ok, const char *why) {
  if (!t->join.active) return;
  char a[64];
  ea_addr_str(peer, a, sizeof a);
  t->join.syncs_pending--;
  if (ok) {
    ea_log(EA_LOG_INFO, "join", "joined via %s: %zu alive members known", a,
           ea_swim_alive_count(t->swim));
    join_stop(t);
    if (t->on_join) t->on_join(t->ctx, 1, a);
    return;
  }
  join_append(t->join.why, sizeof t->join.why, "%s%s", t->join.why[0] ? "; " : "", a);
  join_append(t->join.why, sizeof t->join.why, "%s%s", ": ", why);
  if (t->join.syncs_pending == 0) join_attempt_failed(t);
}

static void cand_add(ea_transport *t, const ea_addr *a) {
  if (a->family != t->bound.family || addr_is_self(t, a)) return;
  for (size_t i = 0; i < t->join.ncand; i++)
    if (ea_addr_eq(&t->join.cand[i], a)) return;
  if (t->join.ncand == t->join.capcand) {
    size_t cap = t->join.capcand ? t->join.capcand * 2 : 16;
    ea_addr *nc = realloc(t->join.cand, cap * sizeof *nc);
    if (!nc) return;
    t->join.cand = nc;
    t->join.capcand = cap;
  }
  t->join.cand[t->join.ncand++] = *a;
}

/* All seeds resolved: push-pull every candidate through the core. */
static void join_resolved(ea_transport *t) {
  if (t->closing || !t->join.active) return;
  for (size_t i = 0; i < t->join.nextra; i++) cand_add(t, &t->join.extra[i]);
  if (t->join.ncand == 0) {
    if (t->join.why[0] == 0) {
      ea_log(EA_LOG_INFO, "join",
             "every seed is this agent itself: starting a new cluster, waiting for others");
      join_stop(t);
      if (t->on_join) t->on_join(t->ctx, 2, NULL);
      return;
    }
    join_attempt_failed(t);
    return;
  }
  t->join.syncs_pending = 0;
  ea_swim_join(t->swim, uv_now(t->loop), t->join.cand, t->join.ncand);
  ea__transport_rearm(t);
  if (t->join.active && t->join.syncs_pending == 0) {
    /* The core started no push-pull (it may consider itself joined):
     * start them ourselves so the attempt has an outcome. */
    for (size_t i = 0; i < t->join.ncand; i++)
      ea__transport_sync(t, &t->join.cand[i], EA_SYNC_JOIN);
    if (t->join.syncs_pending == 0) join_attempt_failed(t);
  }
}

static void gai_done(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  gai_req *g = (gai_req *)req;
  ea_transport *t = g->t;
  t->join.gai_pending--;
  if (g->prev)
    g->prev->next = g->next;
  else
    t->join.gais = g->next;
  if (g->next) g->next->prev = g->prev;
  bool current = !t->closing && g->attempt == t->join.attempt;
  if (current && status < 0) {
    join_append(t->join.why, sizeof t->join.why, "%s%s", t->join.why[0] ? "; " : "",
                t->join.seeds[g->seed]);
    join_append(t->join.why, sizeof t->join.why, "%s%s", ": ", uv_strerror(status));
  }
  if (current && status == 0) {
    size_t before = t->join.ncand;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
      ea_addr a;
      ea_addr_from_sockaddr(ai->ai_addr, &a);
      if (a.family == 0) continue;
      a.port = t->join.ports[g->seed];
      cand_add(t, &a);
    }
    if (t->join.ncand == before && !res) {
      join_append(t->join.why, sizeof t->join.why, "%s%s", t->join.why[0] ? "; " : "",
                  t->join.seeds[g->seed]);
      join_append(t->join.why, sizeof t->join.why, "%s%s", ": ", "no address");
    }
  }
  if (res) uv_freeaddrinfo(res);
  free(g);
  if (t->closing) {
    ea__transport_maybe_free(t);
    return;
  }
  if (current && t->join.gai_pending == 0) join_resolved(t);
}

static void join_attempt(ea_transport *t) {
  t->join.attempt++;
  t->st.join_attempts++;
  t->join.ncand = 0;
  t->join.why[0] = 0;
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = t->bound.family == 6 ? AF_INET6 : AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  for (size_t i = 0; i < t->join.nseeds; i++) {
    ea_addr a;
    const char *hp = t->join.seeds[i];
    /* A numeric seed needs no resolver round trip. */
    if (ea_addr_parse(hp, EA__TRANSPORT_DEFAULT_PORT, &a) == 0) {
      cand_add(t, &a);
      continue;
    }
    char host[256];
    uint16_t port;
    ea__transport_split_hostport(hp, EA__TRANSPORT_DEFAULT_PORT, host, sizeof host,
                                 &port); /* checked by ea_transport_join */
    gai_req *g = calloc(1, sizeof *g);
    if (!g) continue;
    g->t = t;
    g->seed = i;
    g->attempt = t->join.attempt;
    int rc = uv_getaddrinfo(t->loop, &g->req, gai_done, host, NULL, &hints);
    if (rc < 0) {
      join_append(t->join.why, sizeof t->join.why, "%s%s", t->join.why[0] ? "; " : "", host);
      join_append(t->join.why, sizeof t->join.why, "%s%s", ": ", uv_strerror(rc));
      free(g);
      continue;
    }
    t->join.gai_pending++;
    g->next = t->join.gais;
    if (g->next) g->next->prev = g;
    t->join.gais = g;
  }
  if (t->join.gai_pending == 0) join_resolved(t);
}

/* A seed host is a numeric address or a DNS name (RFC 1123 characters, plus
 * '_' which some internal zones use). */
static bool host_ok(const char *h) {
  ea_addr a;
  char tmp[300];
  snprintf(tmp, sizeof tmp, "[%s]:1", h);
  if (ea_addr_parse(tmp, 0, &a) == 0) return true;
  if (!*h) return false;
  for (const char *p = h; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '-' || *p == '.' || *p == '_'))
      return false;
  return true;
}

int ea_transport_join(ea_transport *t, const char *seeds, const ea_addr *extra, size_t nextra,
                      char *err, size_t errlen) {
  if (t->closing || t->leave.active) return -EINVAL;
  size_t n = 0;
  char *copy = strdup(seeds ? seeds : "");
  if (!copy) return -ENOMEM;
  for (char *p = copy; *p; p++) n += *p == ',';
  char **list = calloc(n + 1, sizeof *list);
  uint16_t *ports = calloc(n + 1, sizeof *ports);
  ea_addr *ex = nextra ? malloc(nextra * sizeof *ex) : NULL;
  if (!list || !ports || (nextra && !ex)) {
    free(copy), free(list), free(ports), free(ex);
    return -ENOMEM;
  }
  size_t k = 0;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ') tok++;
    if (!*tok) continue;
    char host[256];
    if (ea__transport_split_hostport(tok, EA__TRANSPORT_DEFAULT_PORT, host, sizeof host,
                                     &ports[k]) < 0 ||
        !host_ok(host)) {
      snprintf(err, errlen, "--join: cannot parse seed '%s' (want host:port)", tok);
      for (size_t i = 0; i < k; i++) free(list[i]);
      free(copy), free(list), free(ports), free(ex);
      return -EINVAL;
    }
    list[k++] = strdup(tok);
    if (!list[k - 1]) k--;
  }
  free(copy);
  for (size_t i = 0; i < t->join.nseeds; i++) free(t->join.seeds[i]);
  free(t->join.seeds);
  free(t->join.ports);
  free(t->join.extra);
  t->join.seeds = list;
  t->join.ports = ports;
  t->join.nseeds = k;
  if (nextra) memcpy(ex, extra, nextra * sizeof *ex);
  t->join.extra = ex;
  t->join.nextra = nextra;
  if (k == 0 && nextra == 0) {
    ea_log(EA_LOG_INFO, "join", "no seeds given: starting a new cluster, waiting for others");
    return 0;
  }
  t->join.active = true;
  t->join.backoff_ms = EA_TRANSPORT_JOIN_BACKOFF_MS;
  if (t->join.backoff_ms > t->join_retry_max_ms) t->join.backoff_ms = t->join_retry_max_ms;
  join_attempt(t);
  return 0;
}

/* ---- leave --------------------------------------------------------------- */

static void leave_timer_cb(uv_timer_t *h) {
  ea_transport *t = h->data;
  if (!t->leave.active || t->closing) return;
  t->leave.active = false;
  uv_timer_stop(&t->leave_timer);
  ea_log(EA_LOG_INFO, "leave", "LEFT sent %d time%s; leaving", t->leave.sends,
         t->leave.sends == 1 ? "" : "s");
  if (t->leave.done) t->leave.done(t->leave.ctx);
}

static bool carries_our_left(const ea_transport *t, const ea_msg *m) {
  for (uint32_t i = 0; i < m->nupdates; i++)
    if (m->updates[i].state == EA_STATE_LEFT && ea_node_id_cmp(&m->updates[i].id, &t->self) == 0)
      return true;
  return false;
}

void ea__transport_leave_sent(ea_transport *t, const ea_msg *m) {
  if (t->leave.active && carries_our_left(t, m) && ++t->leave.sends == LEAVE_SENDS)
    uv_timer_start(&t->leave_timer, leave_timer_cb, 0, 0);
}

void ea_transport_leave(ea_transport *t, void (*done)(void *ctx), void *ctx) {
  if (t->closing || t->leave.active) return;
  join_stop(t);
  t->leave.active = true;
  t->leave.sends = 0;
  t->leave.done = done;
  t->leave.ctx = ctx;
  /* Anyone to tell?  Members that are alive or suspect may still hear us. */
  const ea_member *ms;
  size_t n = ea_swim_members(t->swim, &ms), others = 0;
  for (size_t i = 0; i < n; i++)
    if (ea_node_id_cmp(&ms[i].id, &t->self) != 0 &&
        (ms[i].state == EA_STATE_ALIVE || ms[i].state == EA_STATE_SUSPECT))
      others++;
  ea_swim_leave(t->swim, uv_now(t->loop));
  ea__transport_rearm(t);
  uv_timer_start(&t->leave_timer, leave_timer_cb,
                 others == 0 || t->leave.sends >= LEAVE_SENDS ? 0 : LEAVE_MAX_MS, 0);
}
