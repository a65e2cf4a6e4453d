/* link.c — the link probe: ping the generation's members over the control
 * channel while training stands, and say which of them answer nothing
 * (link.h says why and when).
 *
 * A round every EA__LINK_ROUND_MS: each member still waiting on the last
 * round's ping counts a miss (it had a whole round to answer); at
 * EA__LINK_MISSES in a row it is unreachable, and the controller hears it;
 * then every member gets a new ping with a fresh nonce.  A PONG answers
 * the ping of its nonce or any earlier one of the episode (a late answer
 * still proves the link carries data both ways): the member's misses go
 * back to 0.  Peers are kept by id across generations, so a re-formation
 * of the same nodes in the middle of a probe does not start its count
 * again.
 *
 * EA__LINK_ALWAYS (restart mode) runs the same rounds for as long as the
 * node runs a generation: an episode per stretch of generations, started
 * and ended quietly (a debug line) unless a member missed a ping in it.
 */
#include "link.h"

#include "ea_log.h"
#include "ea_wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  ea_node_id id;
  char name[EA_NAME_MAX];
  uint64_t nonce;   /* of the last ping sent (0: none this episode) */
  uint64_t acked;   /* the newest nonce answered */
  uint64_t sent_ms; /* when the last ping went */
  uint32_t misses;  /* rounds in a row without an answer */
  bool down;        /* misses reached EA__LINK_MISSES */
  uint64_t rtt_ms;  /* of the last answer */
  bool have_rtt;
} peer;

struct ea__link {
  ea_node_id self;
  char name[EA_NAME_MAX];
  ea__link_mode mode;
  ea__link_cbs cb;
  void *ctx;
  /* the generation seen last, and progress */
  uint64_t gen, gen_ms;
  uint64_t seen_step, step_ms;
  uint64_t iv_ms; /* recent step time, smoothed (0: not known) */
  uint64_t fail_until;
  /* the episode */
  bool active;
  uint64_t since_ms, next_round, nonce;
  char why[96];
  peer *peers;
  size_t npeers;
  /* counters */
  uint64_t episodes, rounds, pings_sent, pongs_in, pings_answered, downs;
};

ea__link *ea__link_new(const ea_node_id *self, const char *name, ea__link_mode mode,
                       const ea__link_cbs *cb, void *ctx) {
  ea__link *L = calloc(1, sizeof *L);
  if (!L) return NULL;
  L->self = *self;
  snprintf(L->name, sizeof L->name, "%s", name ? name : "");
  L->mode = mode;
  L->cb = *cb;
  L->ctx = ctx;
  return L;
}

void ea__link_free(ea__link *L) {
  if (!L) return;
  free(L->peers);
  free(L);
}

static void send_msg(ea__link *L, const ea_node_id *to, ea__job_msg *m) {
  uint8_t buf[EA__JOB_WIRE_MAX];
  size_t len;
  m->src = L->self;
  if (ea__job_encode(m, buf, sizeof buf, &len) == 0 && L->cb.send) L->cb.send(L->ctx, to, buf, len);
}

static peer *find(const ea__link *L, const ea_node_id *id) {
  for (size_t i = 0; i < L->npeers; i++)
    if (ea_node_id_cmp(&L->peers[i].id, id) == 0) return &L->peers[i];
  return NULL;
}

/* The running plan's members but us, keeping what is known of each. */
static void take_members(ea__link *L, const ea_rdzv_plan *p) {
  peer *n = p->nnodes ? calloc(p->nnodes, sizeof *n) : NULL;
  if (p->nnodes && !n) return; /* out of memory: probe the members we had */
  size_t k = 0;
  for (uint32_t i = 0; i < p->nnodes; i++) {
    const ea_rdzv_node *x = &p->nodes[i];
    if (ea_node_id_cmp(&x->id, &L->self) == 0) continue;
    const peer *old = find(L, &x->id);
    if (old)
      n[k] = *old;
    else
      n[k].id = x->id;
    snprintf(n[k].name, sizeof n[k].name, "%s", x->name[0] ? x->name : "?");
    k++;
  }
  free(L->peers);
  L->peers = n;
  L->npeers = k;
}

/* The episode ends: training moves again, or this node runs nothing. */
static void stop(ea__link *L, uint64_t now, const char *why) {
  if (!L->active) return;
  L->active = false;
  size_t ndown = 0, nmissed = 0;
  for (size_t i = 0; i < L->npeers; i++) {
    ndown += L->peers[i].down;
    nmissed += L->peers[i].misses > 0;
  }
  /* Always on, an episode that found nothing is every generation's end. */
  bool quiet = L->mode == EA__LINK_ALWAYS && !ndown && !nmissed;
  ea_log(quiet ? EA_LOG_DEBUG : EA_LOG_INFO, "link",
         "link probe ends after %.1f s (%s); %zu of %zu members were unreachable",
         (double)(now - L->since_ms) / 1000.0, why, ndown, L->npeers);
  for (size_t i = 0; i < L->npeers; i++) {
    peer *x = &L->peers[i];
    x->nonce = x->acked = 0;
    x->misses = 0;
    x->down = false;
  }
}

static void round_now(ea__link *L, uint64_t now) {
  L->rounds++;
  for (size_t i = 0; i < L->npeers; i++) {
    peer *x = &L->peers[i];
    if (L->cb.alive && !L->cb.alive(L->ctx, &x->id)) {
      x->misses = 0;
      x->down = false;
    } else if (x->nonce && x->acked != x->nonce) {
      x->misses++;
      /* the next ping on a fresh connection (link.h) */
      if (L->cb.reset) L->cb.reset(L->ctx, &x->id);
      if (x->misses >= EA__LINK_MISSES) {
        if (!x->down)
          ea_log(EA_LOG_WARN, "link",
                 "link probe: %s unreachable from %s: no answer to %u pings in a row, %u ms each, "
                 "over the control channel; telling the controller",
                 x->name, L->name, x->misses, EA__LINK_ROUND_MS);
        x->down = true;
        L->downs++;
        if (L->cb.down) L->cb.down(L->ctx, &x->id, L->gen);
      }
    }
    ea__job_msg m = {.type = EA__JOB_LINK_PING, .gen = L->gen, .nonce = ++L->nonce};
    x->nonce = m.nonce;
    x->sent_ms = now;
    L->pings_sent++;
    send_msg(L, &x->id, &m);
  }
}

void ea__link_tick(ea__link *L, uint64_t now, const ea_rdzv_plan *running, uint64_t last_step) {
  if (!L) return;
  if (last_step != L->seen_step) {
    /* steps back to back in one generation: the recent step time */
    if (running && last_step > L->seen_step && L->step_ms && now > L->step_ms &&
        ea_rdzv_gen_u64(&running->gen) == L->gen) {
      uint64_t iv = (now - L->step_ms) / (last_step - L->seen_step);
      L->iv_ms = L->iv_ms ? (3 * L->iv_ms + iv) / 4 : iv;
    }
    L->seen_step = last_step;
    L->step_ms = now;
  }
  if (!running || L->mode == EA__LINK_OFF) {
    stop(L, now, "this node runs no generation");
    L->gen = 0;
    return;
  }
  uint64_t g = ea_rdzv_gen_u64(&running->gen);
  if (g != L->gen) {
    L->gen = g;
    L->gen_ms = now;
    take_members(L, running);
  }
  uint64_t quiet_since = L->step_ms > L->gen_ms ? L->step_ms : L->gen_ms;
  uint64_t limit = (uint64_t)EA__LINK_QUIET_STEPS * L->iv_ms;
  if (limit < EA__LINK_QUIET_MIN_MS) limit = EA__LINK_QUIET_MIN_MS;
  bool quiet = now >= quiet_since && now - quiet_since >= limit;
  bool failed = now < L->fail_until;
  bool always = L->mode == EA__LINK_ALWAYS;
  if (!quiet && !failed && !always) {
    stop(L, now, "training moves again");
    return;
  }
  if (!L->npeers) return;
  if (!L->active) {
    L->active = true;
    L->episodes++;
    L->since_ms = now;
    L->next_round = now;
    if (always)
      snprintf(L->why, sizeof L->why, "always on: the programs report no steps");
    else if (quiet)
      snprintf(L->why, sizeof L->why, "no step for %.1f s", (double)(now - quiet_since) / 1000.0);
    else
      snprintf(L->why, sizeof L->why, "a communicator failed without naming a peer");
    ea_log(always ? EA_LOG_DEBUG : EA_LOG_INFO, "link",
           "link probe: pinging %zu members of generation %" PRIu64 " (%s)", L->npeers, g >> 16,
           L->why);
  }
  if (now >= L->next_round) {
    round_now(L, now);
    L->next_round = now + EA__LINK_ROUND_MS;
  }
}

void ea__link_comm_failed(ea__link *L, uint64_t now) {
  if (L && L->mode != EA__LINK_OFF) L->fail_until = now + EA__LINK_FAIL_MS;
}

void ea__link_on_msg(ea__link *L, uint64_t now, const ea__job_msg *m) {
  if (!L) return;
  if (m->type == EA__JOB_LINK_PING) {
    ea__job_msg r = {.type = EA__JOB_LINK_PONG, .gen = m->gen, .nonce = m->nonce};
    L->pings_answered++;
    send_msg(L, &m->src, &r);
    return;
  }
  /* By nonce alone (unique here): an answer to a ping of the generation
   * before a re-formation of the same members still proves the link. */
  if (m->type != EA__JOB_LINK_PONG || !L->active) return;
  peer *x = find(L, &m->src);
  if (!x || m->nonce > x->nonce || m->nonce <= x->acked) return;
  L->pongs_in++;
  if (x->down) ea_log(EA_LOG_INFO, "link", "link probe: %s answers %s again", x->name, L->name);
  x->acked = m->nonce;
  if (m->nonce == x->nonce) {
    x->rtt_ms = now - x->sent_ms;
    x->have_rtt = true;
  }
  x->misses = 0;
  x->down = false;
}

bool ea__link_active(const ea__link *L) {
  return L && L->active;
}

bool ea__link_degraded(const ea__link *L) {
  if (!L || !L->active) return false;
  if (L->mode != EA__LINK_ALWAYS) return true;
  for (size_t i = 0; i < L->npeers; i++)
    if (L->peers[i].misses || L->peers[i].down) return true;
  return false;
}

size_t ea__link_down_now(const ea__link *L, ea_node_id *out, size_t cap) {
  size_t n = 0;
  for (size_t i = 0; L && L->active && i < L->npeers; i++)
    if (L->peers[i].down) {
      if (n < cap) out[n] = L->peers[i].id;
      n++;
    }
  return n;
}

void ea__link_text(const ea__link *L, uint64_t now, char *out, size_t cap) {
  if (!cap) return;
  out[0] = 0;
  if (!ea__link_degraded(L)) return;
  size_t len = 0;
  for (size_t i = 0; i < L->npeers && len < cap; i++) {
    if (!L->peers[i].down) continue;
    int w = snprintf(out + len, cap - len, "%s%s", len ? ", " : "link probe: ", L->peers[i].name);
    if (w < 0) break;
    len += (size_t)w;
  }
  if (len && len < cap) {
    snprintf(out + len, cap - len, " unreachable from %s", L->name);
    return;
  }
  if (L->mode == EA__LINK_ALWAYS) {
    /* degraded: a member missed a ping, none is unreachable yet */
    const peer *w = NULL;
    for (size_t i = 0; i < L->npeers; i++)
      if (!w || L->peers[i].misses > w->misses) w = &L->peers[i];
    snprintf(out, cap, "link probe: %s missed %u ping%s from %s", w->name, w->misses,
             w->misses == 1 ? "" : "s", L->name);
    return;
  }
  snprintf(out, cap, "link probe: pinging %zu member%s for %.1f s (started: %s)", L->npeers,
           L->npeers == 1 ? "" : "s", (double)(now - L->since_ms) / 1000.0, L->why);
}

json_t *ea__link_status(const ea__link *L, uint64_t now) {
  json_t *o = json_object();
  if (!o) return NULL;
  bool bad = false;
  static const char *const modes[] = {"off", "quiet", "always"};
  bad |= json_object_set_new(o, "on", json_boolean(L && L->mode != EA__LINK_OFF)) != 0;
  bad |= json_object_set_new(o, "mode", json_string(modes[L ? L->mode : EA__LINK_OFF])) != 0;
  bad |= json_object_set_new(o, "active", json_boolean(ea__link_active(L))) != 0;
  bad |= json_object_set_new(o, "degraded", json_boolean(ea__link_degraded(L))) != 0;
  char t[256];
  ea__link_text(L, now, t, sizeof t);
  bad |= json_object_set_new(o, "text", json_string(t)) != 0;
  if (L) {
    uint64_t limit = (uint64_t)EA__LINK_QUIET_STEPS * L->iv_ms;
    if (limit < EA__LINK_QUIET_MIN_MS) limit = EA__LINK_QUIET_MIN_MS;
    bad |= json_object_set_new(o, "quiet_limit_ms", json_integer((json_int_t)limit)) != 0;
    bad |= json_object_set_new(o, "why", json_string(L->active ? L->why : "")) != 0;
    bad |=
        json_object_set_new(o, "since_s",
                            json_real(L->active ? (double)(now - L->since_ms) / 1000.0 : 0.0)) != 0;
    json_t *ps = json_array();
    for (size_t i = 0; ps && L->active && i < L->npeers; i++) {
      const peer *x = &L->peers[i];
      json_t *y = json_object();
      if (!y) break;
      json_object_set_new(y, "node", json_string(x->name));
      json_object_set_new(y, "state",
                          json_string(x->down     ? "unreachable"
                                      : x->misses ? "missed"
                                      : x->acked  ? "ok"
                                                  : "waiting"));
      json_object_set_new(y, "misses", json_integer(x->misses));
      if (x->have_rtt) json_object_set_new(y, "rtt_ms", json_integer((json_int_t)x->rtt_ms));
      json_array_append_new(ps, y);
    }
    bad |= !ps || json_object_set_new(o, "peers", ps) != 0;
    bad |= json_object_set_new(o, "episodes", json_integer((json_int_t)L->episodes)) != 0;
    bad |= json_object_set_new(o, "pings_sent", json_integer((json_int_t)L->pings_sent)) != 0;
    bad |= json_object_set_new(o, "pongs_received", json_integer((json_int_t)L->pongs_in)) != 0;
    bad |=
        json_object_set_new(o, "pings_answered", json_integer((json_int_t)L->pings_answered)) != 0;
    bad |= json_object_set_new(o, "unreachable_reports", json_integer((json_int_t)L->downs)) != 0;
  }
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}
