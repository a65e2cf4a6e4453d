/* The running agent: one libuv loop that owns the gossip transport (and
 * through it the SWIM core), the admin socket, the signal handlers and the
 * small bookkeeping that turns membership events into what operators see —
 * log lines for every member and controller change, the remembered-peers
 * file, and the `status` document.
 *
 * Membership changes arrive from inside the core (on_change) where nothing
 * may call back into it, so they are only logged and flagged there; an
 * idle handle started by the first change of a loop turn then re-runs the
 * election and schedules the peers file, once, before the loop sleeps.  This is the Redis cluster
 * bus's "do side effects once per loop turn" habit: a burst of fifty updates in one push-pull costs
 * one election and at most one file write per second.
 *
 * Shutdown is a graceful leave: on SIGTERM/SIGINT the transport broadcasts
 * LEFT and reports back once it has gone out (bounded at 1 s), then every
 * handle is closed and uv_run returns because nothing is left — the loop is
 * then closed and must report no leaked handle.  A second signal skips the
 * wait.
 */
#include "agent.h"

#include "ea_log.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* Peers file rewrites are rate-limited: membership can change many times a
 * second during a mass join, and the file only matters across restarts. */
#define PEERS_WRITE_INTERVAL_MS 1000
/* Remembered peers: enough to find a live one after losing many, few
 * enough that a rejoin does not open hundreds of connections at once. */
#define PEERS_MAX 64

typedef enum { PHASE_RUNNING, PHASE_LEAVING, PHASE_CLOSING } phase;

typedef struct {
  uv_loop_t loop;
  const ea__agent_opts *o;
  ea_transport *tr;
  ea__admin *admin;
  uv_signal_t sigterm, sigint;
  uv_idle_t settle; /* runs the post-change work once, right after the change */
  uv_timer_t peers_timer;
  bool handles_open;
  phase phase;
  bool members_dirty, peers_dirty, peers_busy;
  uint64_t peers_last_ms;
  ea_election elect;
  bool elect_valid;
  ea_node_id id;
  char idhex[33];
  char sock_path[EA_PATH_MAX + 32];
  char peers_path[EA_PATH_MAX + 32];
  uint64_t start_ms;
  bool joined;
  int join_failures;
} agent;

typedef struct {
  uv_work_t w;
  agent *a;
  char *buf;
  size_t len;
  int rc;
} peers_job;

/* ---- detection bound ------------------------------------------------------ */

/* How long after a member crashes can it take until every other member has
 * it dead?  docs/membership.md derives a bound that holds with probability
 * 1 − ε, assuming suspicion confirmations arrive in time (the timer then runs
 * its minimum).  Operators and the end-to-end test want a bound that needs
 * no luck, so this one takes each step's worst case (no packet loss, healthy
 * members, Lifeguard health 0), with N = members alive or suspect:
 *
 *   1. first probe of the crashed member: probes walk a shuffled round-robin
 *      over the N−1 others, reshuffled every round, so one prober's gap
 *      between two probes of the same target is at most 2(N−1)−1 intervals
 *      (first in one round, last in the next);
 *   2. that probe fails at the end of its interval (direct timeout, then the
 *      ping-req round): + 1 interval, and the member is SUSPECT;
 *   3. the suspicion timer starts at its maximum and only shrinks with
 *      confirmations: + suspicion max
 *      (= suspicion_max_mult · suspicion_mult · log10(max(N,10)) · interval);
 *   4. DEAD reaches everyone by push gossip, fanout g every G:
 *      ⌈log_{g+1} N + ln N / g⌉ rounds (Pittel), + 1 round for the delay.
 *
 * tests/e2e/test_cluster.sh asserts the measured time stays under it. */
uint64_t ea__detection_bound_ms(const ea_swim_config *c, size_t n) {
  if (n < 2) n = 2;
  double interval = c->probe_interval_ms;
  double first_probe = (2.0 * (double)(n - 1) - 1.0) * interval;
  double verdict = interval > c->probe_timeout_ms ? interval : c->probe_timeout_ms;
  double min = c->suspicion_mult * log10(n > 10 ? (double)n : 10.0) * interval;
  double susp = (c->suspicion_max_mult > 1 ? c->suspicion_max_mult : 1) * min;
  double g = c->gossip_nodes ? c->gossip_nodes : 1;
  double rounds = ceil(log((double)n) / log(g + 1.0) + log((double)n) / g) + 1.0;
  return (uint64_t)ceil(first_probe + verdict + susp + rounds * c->gossip_interval_ms);
}

/* ---- helpers ---------------------------------------------------------------- */

static const char *member_name(const ea_member *m) {
  return m && m->meta.name[0] ? m->meta.name : "?";
}

static const ea_member *find_member(agent *a, const ea_node_id *id) {
  return ea_swim_find(ea_transport_swim(a->tr), id);
}

/* ---- shutdown ------------------------------------------------------------------ */

static void shutdown_all(agent *a) {
  if (a->phase == PHASE_CLOSING) return;
  a->phase = PHASE_CLOSING;
  if (a->admin) ea__admin_close(a->admin, NULL, NULL);
  a->admin = NULL;
  if (a->tr) ea_transport_close(a->tr, NULL, NULL);
  a->tr = NULL;
  if (a->handles_open) {
    a->handles_open = false;
    uv_close((uv_handle_t *)&a->sigterm, NULL);
    uv_close((uv_handle_t *)&a->sigint, NULL);
    uv_close((uv_handle_t *)&a->settle, NULL);
    uv_close((uv_handle_t *)&a->peers_timer, NULL);
  }
}

static void left_done(void *ctx) {
  agent *a = ctx;
  ea_log(EA_LOG_INFO, "leave", "left the cluster; shutting down");
  shutdown_all(a);
}

static void on_signal(uv_signal_t *h, int signum) {
  agent *a = h->data;
  if (a->phase == PHASE_RUNNING) {
    ea_log(EA_LOG_INFO, "leave", "received %s: leaving the cluster gracefully",
           signum == SIGTERM ? "SIGTERM" : "SIGINT");
    a->phase = PHASE_LEAVING;
    ea_transport_leave(a->tr, left_done, a);
  } else {
    ea_log(EA_LOG_WARN, "leave", "second signal: exiting without waiting for the leave");
    shutdown_all(a);
  }
}

/* ---- membership events ---------------------------------------------------------- */

static void on_settle(uv_idle_t *h);

/* Called from inside the core: log and flag only. */
static void on_change(void *ctx, const ea_member *m, uint8_t old_state) {
  agent *a = ctx;
  char hex[33], addr[64];
  ea_node_id_hex(&m->id, hex);
  ea_addr_str(&m->meta.gossip, addr, sizeof addr);
  bool self = ea_node_id_cmp(&m->id, &a->id) == 0;
  ea_log(m->state == EA_STATE_DEAD ? EA_LOG_WARN : EA_LOG_INFO, "member",
         "name=%s id=%.8s addr=%s state=%s->%s incarnation=%" PRIu32 "%s", member_name(m), hex,
         addr, old_state == 0xff ? "new" : ea_member_state_str(old_state),
         ea_member_state_str(m->state), m->incarnation, self ? " (self)" : "");
  a->members_dirty = true;
  /* An active idle handle makes the next poll non-blocking, so the
   * election and the peers file follow within this loop turn. */
  if (a->handles_open) uv_idle_start(&a->settle, on_settle);
}

static void on_join(void *ctx, int ok, const char *via) {
  agent *a = ctx;
  (void)via; /* the transport logged the details */
  if (ok)
    a->joined = true;
  else
    a->join_failures++;
}

static void elect_update(agent *a) {
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(a->tr), &ms);
  ea_election e;
  ea_elect(ms, n, NULL, &e);
  bool changed = !a->elect_valid || e.have != a->elect.have ||
                 (e.have && ea_node_id_cmp(&e.controller, &a->elect.controller) != 0);
  a->elect = e;
  a->elect_valid = true;
  if (!changed) return;
  if (e.have) {
    char hex[33];
    ea_node_id_hex(&e.controller, hex);
    const ea_member *c = find_member(a, &e.controller);
    ea_log(EA_LOG_INFO, "election", "controller=%s id=%s%s reason=\"%s\"", member_name(c), hex,
           ea_node_id_cmp(&e.controller, &a->id) == 0 ? " (self)" : "", e.reason);
  } else {
    ea_log(EA_LOG_WARN, "election", "no controller reason=\"%s\"", e.reason);
  }
}

/* ---- remembered peers ------------------------------------------------------------- */

static void peers_schedule(agent *a);

static void peers_work(uv_work_t *w) {
  peers_job *j = (peers_job *)w;
  j->rc = ea__write_file_atomic(j->a->peers_path, j->buf, j->len, 0600);
}

static void peers_after(uv_work_t *w, int status) {
  peers_job *j = (peers_job *)w;
  agent *a = j->a;
  if (status == 0 && j->rc < 0)
    ea_log(EA_LOG_WARN, "peers", "cannot write %s: %s", a->peers_path, strerror(-j->rc));
  free(j->buf);
  free(j);
  a->peers_busy = false;
  a->peers_last_ms = uv_now(&a->loop);
  if (a->peers_dirty && a->phase == PHASE_RUNNING) peers_schedule(a);
}

static void peers_write_now(agent *a) {
  a->peers_dirty = false;
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(a->tr), &ms);
  ea__sb b = {0};
  ea__sb_puts(&b,
              "# elastic-agent: peers last seen alive (gossip address, name); rewritten "
              "on membership changes\n");
  size_t k = 0;
  for (size_t i = 0; i < n && k < PEERS_MAX; i++) {
    if (ea_node_id_cmp(&ms[i].id, &a->id) == 0) continue;
    if (ms[i].state != EA_STATE_ALIVE && ms[i].state != EA_STATE_SUSPECT) continue;
    char addr[64];
    ea_addr_str(&ms[i].meta.gossip, addr, sizeof addr);
    ea__sb_printf(&b, "%s %s\n", addr, member_name(&ms[i]));
    k++;
  }
  /* With nobody else alive, keep the previous list: after a partition or a
   * cluster-wide outage, the last known peers are still the best guess. */
  if (k == 0 || b.oom) {
    ea__sb_free(&b);
    return;
  }
  peers_job *j = calloc(1, sizeof *j);
  if (!j) {
    ea__sb_free(&b);
    return;
  }
  j->a = a;
  j->buf = b.buf;
  j->len = b.len;
  if (uv_queue_work(&a->loop, &j->w, peers_work, peers_after) < 0) {
    free(j->buf);
    free(j);
    return;
  }
  a->peers_busy = true;
}

static void peers_timer_cb(uv_timer_t *h) {
  agent *a = h->data;
  if (a->phase == PHASE_RUNNING && a->peers_dirty && !a->peers_busy) peers_write_now(a);
}

static void peers_schedule(agent *a) {
  a->peers_dirty = true;
  if (a->peers_busy) return; /* peers_after re-schedules */
  uint64_t now = uv_now(&a->loop);
  if (a->peers_last_ms == 0 || now - a->peers_last_ms >= PEERS_WRITE_INTERVAL_MS) {
    peers_write_now(a);
  } else if (!uv_is_active((uv_handle_t *)&a->peers_timer)) {
    uv_timer_start(&a->peers_timer, peers_timer_cb,
                   PEERS_WRITE_INTERVAL_MS - (now - a->peers_last_ms), 0);
  }
}

static void on_settle(uv_idle_t *h) {
  agent *a = h->data;
  uv_idle_stop(h);
  if (!a->members_dirty || !a->tr || a->phase == PHASE_CLOSING) return;
  a->members_dirty = false;
  elect_update(a);
  if (a->phase == PHASE_RUNNING) peers_schedule(a);
}

/* ---- status ------------------------------------------------------------------------- */

static int cmp_member_ptr(const void *x, const void *y) {
  const ea_member *a = *(const ea_member *const *)x, *b = *(const ea_member *const *)y;
  int c = strcmp(a->meta.name, b->meta.name);
  return c ? c : ea_node_id_cmp(&a->id, &b->id);
}

static void json_addr(ea__sb *o, const char *key, const ea_addr *addr) {
  char s[64];
  ea_addr_str(addr, s, sizeof s);
  ea__sb_printf(o, "\"%s\":", key);
  ea__sb_json_str(o, s);
}

static int cmd_status(void *ctx, const char *args, ea__sb *o) {
  agent *a = ctx;
  (void)args;
  if (!a->tr) {
    ea__sb_puts(o, "{\"error\":\"shutting down\"}");
    return -ESHUTDOWN;
  }
  const ea_swim *s = ea_transport_swim(a->tr);
  uint64_t now = uv_now(&a->loop);
  const ea_member *ms;
  size_t n = ea_swim_members(s, &ms);
  const ea_member **sorted = malloc((n ? n : 1) * sizeof *sorted);
  if (!sorted) {
    ea__sb_puts(o, "{\"error\":\"out of memory\"}");
    return -ENOMEM;
  }
  size_t counts[4] = {0};
  for (size_t i = 0; i < n; i++) {
    sorted[i] = &ms[i];
    if (ms[i].state < 4) counts[ms[i].state]++;
  }
  qsort(sorted, n, sizeof *sorted, cmp_member_ptr);

  const ea_member *self = ea_swim_self(s);
  ea__sb_printf(o, "{\"version\":\"%s\",\"self\":{\"name\":", EA_VERSION);
  ea__sb_json_str(o, a->o->name);
  ea__sb_printf(o, ",\"id\":\"%s\",", a->idhex);
  json_addr(o, "gossip", ea_transport_addr(a->tr));
  ea__sb_puts(o, ",");
  json_addr(o, "control", ea_transport_addr(a->tr));
  ea__sb_puts(o, ",");
  json_addr(o, "bound", ea_transport_bound(a->tr));
  ea__sb_puts(o, ",\"admin\":");
  ea__sb_json_str(o, a->sock_path);
  ea__sb_puts(o, ",\"role\":");
  ea__sb_json_str(o, a->o->role);
  ea__sb_printf(o,
                ",\"state\":\"%s\",\"incarnation\":%" PRIu32
                ",\"pid\":%ld,\"uptime_s\":%.1f,"
                "\"joined\":%s,\"leaving\":%s},",
                ea_member_state_str(self->state), self->incarnation, (long)getpid(),
                (double)(now - a->start_ms) / 1000.0, a->joined ? "true" : "false",
                a->phase != PHASE_RUNNING ? "true" : "false");

  ea__sb_printf(o,
                "\"summary\":{\"members\":%zu,\"alive\":%zu,\"suspect\":%zu,\"dead\":%zu,"
                "\"left\":%zu},\"members\":[",
                n, counts[EA_STATE_ALIVE], counts[EA_STATE_SUSPECT], counts[EA_STATE_DEAD],
                counts[EA_STATE_LEFT]);
  for (size_t i = 0; i < n; i++) {
    const ea_member *m = sorted[i];
    char hex[33];
    ea_node_id_hex(&m->id, hex);
    ea__sb_printf(o, "%s{\"name\":", i ? "," : "");
    ea__sb_json_str(o, m->meta.name);
    ea__sb_printf(o, ",\"id\":\"%s\",", hex);
    json_addr(o, "gossip", &m->meta.gossip);
    ea__sb_puts(o, ",");
    json_addr(o, "control", &m->meta.control);
    ea__sb_puts(o, ",\"role\":");
    ea__sb_json_str(o, m->meta.role);
    ea__sb_puts(o, ",\"version\":");
    ea__sb_json_str(o, m->meta.version);
    ea__sb_printf(o, ",\"state\":\"%s\",\"incarnation\":%" PRIu32 ",\"since_s\":%.1f,\"self\":%s}",
                  ea_member_state_str(m->state), m->incarnation,
                  now >= m->since_ms ? (double)(now - m->since_ms) / 1000.0 : 0.0,
                  ea_node_id_cmp(&m->id, &a->id) == 0 ? "true" : "false");
  }
  free(sorted);
  ea__sb_puts(o, "],\"controller\":");
  if (a->elect_valid && a->elect.have) {
    char hex[33];
    ea_node_id_hex(&a->elect.controller, hex);
    const ea_member *c = ea_swim_find(s, &a->elect.controller);
    ea__sb_puts(o, "{\"name\":");
    ea__sb_json_str(o, member_name(c));
    ea__sb_printf(o, ",\"id\":\"%s\",\"self\":%s,\"eligible\":%" PRIu32 ",\"reason\":", hex,
                  ea_node_id_cmp(&a->elect.controller, &a->id) == 0 ? "true" : "false",
                  a->elect.eligible);
    ea__sb_json_str(o, a->elect.reason);
    ea__sb_puts(o, "}");
  } else {
    ea__sb_puts(o, "{\"name\":null,\"id\":null,\"reason\":");
    ea__sb_json_str(o, a->elect_valid ? a->elect.reason : "no election yet");
    ea__sb_puts(o, "}");
  }

  ea_transport_stats t;
  ea_transport_stats_get(a->tr, &t);
  ea__sb_printf(o,
                ",\"counters\":{\"transport\":{\"packets_in\":%" PRIu64 ",\"packets_out\":%" PRIu64
                ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64 ",\"dropped_malformed\":%" PRIu64
                ",\"dropped_unauthenticated\":%" PRIu64 ",\"dropped_oversize\":%" PRIu64
                ",\"send_errors\":%" PRIu64 ",\"encode_errors\":%" PRIu64
                ",\"updates_trimmed\":%" PRIu64 ",\"syncs_ok\":%" PRIu64
                ",\"syncs_failed\":%" PRIu64 ",\"syncs_served\":%" PRIu64
                ",\"syncs_refused\":%" PRIu64 ",\"join_attempts\":%" PRIu64 "},",
                t.packets_in, t.packets_out, t.bytes_in, t.bytes_out, t.dropped_malformed,
                t.dropped_unauthenticated, t.dropped_oversize, t.send_errors, t.encode_errors,
                t.updates_trimmed, t.syncs_ok, t.syncs_failed, t.syncs_served, t.syncs_refused,
                t.join_attempts);
  ea_swim_stats w;
  ea_swim_stats_get(s, &w);
  ea__sb_printf(o,
                "\"swim\":{\"msgs_in\":%" PRIu64 ",\"msgs_out\":%" PRIu64 ",\"pings_sent\":%" PRIu64
                ",\"acks_recv\":%" PRIu64 ",\"ping_reqs_sent\":%" PRIu64 ",\"nacks_recv\":%" PRIu64
                ",\"suspicions\":%" PRIu64 ",\"refutations\":%" PRIu64 ",\"declared_dead\":%" PRIu64
                ",\"updates_sent\":%" PRIu64 ",\"syncs_started\":%" PRIu64
                ",\"syncs_merged\":%" PRIu64 ",\"stale_dropped\":%" PRIu64 ",\"health\":%" PRIu32
                "}},",
                w.msgs_in, w.msgs_out, w.pings_sent, w.acks_recv, w.ping_reqs_sent, w.nacks_recv,
                w.suspicions, w.refutations, w.declared_dead, w.updates_sent, w.syncs_started,
                w.syncs_merged, w.stale_dropped, w.health);

  const ea_swim_config *c = &a->o->cfg.membership;
  uint64_t smin = 0, smax = 0;
  ea_swim_suspicion_bounds(s, &smin, &smax);
  ea__sb_puts(o, "\"config\":{\"bind\":");
  ea__sb_json_str(o, a->o->bind);
  ea__sb_puts(o, ",\"join\":");
  ea__sb_json_str(o, a->o->join);
  ea__sb_printf(o, ",\"key\":%s,\"data_dir\":", ea_transport_has_key(a->tr) ? "true" : "false");
  ea__sb_json_str(o, a->o->data_dir);
  ea__sb_puts(o, ",\"config_file\":");
  ea__sb_json_str(o, a->o->config_path);
  ea__sb_printf(o,
                ",\"probe_interval_ms\":%" PRIu32 ",\"probe_timeout_ms\":%" PRIu32
                ",\"gossip_interval_ms\":%" PRIu32 ",\"push_pull_interval_ms\":%" PRIu32
                ",\"suspicion_min_ms\":%" PRIu64 ",\"suspicion_max_ms\":%" PRIu64
                ",\"detection_bound_ms\":%" PRIu64 ",\"log_level\":",
                c->probe_interval_ms, c->probe_timeout_ms, c->gossip_interval_ms,
                c->push_pull_interval_ms, smin, smax,
                ea__detection_bound_ms(c, counts[EA_STATE_ALIVE] + counts[EA_STATE_SUSPECT]));
  ea__sb_json_str(o, a->o->cfg.logging.level);
  ea__sb_puts(o, "}}");
  return o->oom ? -ENOMEM : 0;
}

static const ea__admin_cmd admin_cmds[] = {
    {"status", "members, controller, counters and configuration summary as JSON", cmd_status},
};

/* ---- run ------------------------------------------------------------------------------ */

void ea__agent_opts_default(ea__agent_opts *o) {
  memset(o, 0, sizeof *o);
  ea_config_default(&o->cfg);
  snprintf(o->bind, sizeof o->bind, "%s", EA__DEFAULT_BIND);
  snprintf(o->data_dir, sizeof o->data_dir, "%s", EA__DEFAULT_DATA_DIR);
  snprintf(o->role, sizeof o->role, "worker");
  char host[256];
  if (gethostname(host, sizeof host) < 0) snprintf(host, sizeof host, "node");
  host[sizeof host - 1] = 0;
  snprintf(o->name, sizeof o->name, "%.*s", EA_NAME_MAX - 1, host);
}

int ea__agent_run(const ea__agent_opts *o) {
  char err[512];
  int rc = ea__data_dir_prepare(o->data_dir, err, sizeof err);
  int lock_fd = -1;
  if (rc == 0) rc = ea__data_dir_lock(o->data_dir, &lock_fd, err, sizeof err);
  agent *a = calloc(1, sizeof *a);
  if (rc == 0 && !a) rc = -ENOMEM, snprintf(err, sizeof err, "out of memory");
  bool created = false;
  if (rc == 0) rc = ea__node_id_load(o->data_dir, &a->id, &created, err, sizeof err);
  uint8_t key[EA_KEY_BYTES];
  bool have_key = false;
  if (rc == 0 && o->key_file[0]) {
    const char *kerr = "key file";
    rc = ea_wire_load_key(o->key_file, key, &kerr);
    if (rc < 0)
      snprintf(err, sizeof err, "--key-file %.300s: %s", o->key_file, kerr);
    else
      have_key = true;
  }
  if (rc < 0) {
    ea_log(EA_LOG_ERROR, "start", "%s", err);
    if (lock_fd >= 0) close(lock_fd);
    free(a);
    return rc;
  }
  a->o = o;
  ea_node_id_hex(&a->id, a->idhex);
  snprintf(a->sock_path, sizeof a->sock_path, "%s/%s", o->data_dir, EA__ADMIN_SOCK);
  snprintf(a->peers_path, sizeof a->peers_path, "%s/%s", o->data_dir, EA__PEERS_FILE);
  if (created)
    ea_log(EA_LOG_INFO, "start", "new node id %s written to %s/%s", a->idhex, o->data_dir,
           EA__NODE_ID_FILE);

  uv_loop_init(&a->loop);
  a->start_ms = uv_now(&a->loop);
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = a->start_ms ^ (uint64_t)getpid();

  ea_transport_opts to = {
      .bind = o->bind,
      .advertise = o->advertise[0] ? o->advertise : NULL,
      .key = have_key ? key : NULL,
      .swim = o->cfg.membership,
      .self = a->id,
      .seed = seed,
      .join_retry_max_ms = o->cfg.runtime.join_retry_max_ms,
      .ctx = a,
      .on_change = on_change,
      .on_join = on_join,
  };
  snprintf(to.meta.name, sizeof to.meta.name, "%s", o->name);
  snprintf(to.meta.role, sizeof to.meta.role, "%s", o->role);
  snprintf(to.meta.tags, sizeof to.meta.tags, "%s", o->tags);
  snprintf(to.meta.version, sizeof to.meta.version, "%s", EA_VERSION);
  rc = ea_transport_start(&a->loop, &to, &a->tr, err, sizeof err);
  memset(key, 0, sizeof key);
  if (rc == 0)
    rc = ea__admin_start(&a->loop, a->sock_path, admin_cmds,
                         sizeof admin_cmds / sizeof admin_cmds[0], a, &a->admin, err, sizeof err);
  if (rc < 0) {
    ea_log(EA_LOG_ERROR, "start", "%s", err); /* shutdown_all closes what started */
  } else {
    uv_signal_init(&a->loop, &a->sigterm);
    uv_signal_init(&a->loop, &a->sigint);
    uv_idle_init(&a->loop, &a->settle);
    uv_timer_init(&a->loop, &a->peers_timer);
    a->sigterm.data = a->sigint.data = a->settle.data = a->peers_timer.data = a;
    a->handles_open = true;
    uv_signal_start(&a->sigterm, on_signal, SIGTERM);
    uv_signal_start(&a->sigint, on_signal, SIGINT);

    char gaddr[64];
    ea_addr_str(ea_transport_addr(a->tr), gaddr, sizeof gaddr);
    ea_log(EA_LOG_INFO, "listen",
           "name=%s id=%s gossip=%s (udp) push-pull=%s (tcp) admin=%s version=%s role=%s", o->name,
           a->idhex, gaddr, gaddr, a->sock_path, EA_VERSION, o->role);
    if (!have_key)
      ea_log(EA_LOG_WARN, "security",
             "gossip is not authenticated: anyone who can reach UDP/TCP port %u can join this "
             "cluster and read its membership; create a key with `elastic-agent keygen FILE` "
             "and give every agent --key-file FILE",
             ea_transport_addr(a->tr)->port);
    ea_addr *peers = NULL;
    size_t npeers = 0;
    if (ea__peers_load(o->data_dir, &peers, &npeers) == 0 && npeers > 0)
      ea_log(EA_LOG_INFO, "join", "%zu remembered peer%s in %s will be tried too", npeers,
             npeers == 1 ? "" : "s", a->peers_path);
    a->members_dirty = true; /* first election: ourselves */
    uv_idle_start(&a->settle, on_settle);
    rc = ea_transport_join(a->tr, o->join, peers, npeers, err, sizeof err);
    free(peers);
    if (rc < 0) ea_log(EA_LOG_ERROR, "join", "%s", err);
  }
  if (rc < 0) shutdown_all(a);

  uv_run(&a->loop, UV_RUN_DEFAULT);
  int lrc = uv_loop_close(&a->loop);
  if (lrc < 0) {
    ea_log(EA_LOG_ERROR, "exit", "event loop still has open handles at exit: %s", uv_strerror(lrc));
    if (rc == 0) rc = lrc;
  } else if (rc == 0) {
    ea_log(EA_LOG_INFO, "exit", "stopped cleanly");
  }
  close(lock_fd);
  free(a);
  return rc;
}
