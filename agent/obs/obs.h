/* obs.h — internal to agent/obs/: what the wing's pure parts share with the
 * top floor and the tests: the alert kinds and records (alerts.c), the
 * metrics snapshot and its Prometheus text (metrics.c), the HTTP server
 * that answers from the published snapshot on its own thread (http.c), and
 * the preemption notice poller (notice.c).
 * Nothing here knows the agent: the functions that take an ea__agent (raise
 * an alert, start the poller, fill the snapshot) are declared in
 * agent_int.h, which includes this header.
 */
#ifndef EA_OBS_H
#define EA_OBS_H

#include "ea_base.h"
#include "ea_json.h"
#include "ea_log.h"
#include "ea_wire.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* ---- metrics snapshot and its exposition (metrics.c) ----------------------
 *
 * The loop publishes an immutable snapshot of what /metrics, /healthz and
 * /readyz answer; the HTTP thread (http.c) only formats the newest one.
 * Every value is taken from what `status` shows (metrics.c says where each
 * comes from), so the two never disagree by more than one publish period. */

/* Alert kinds (docs/operations.md, "Alerts"): the `kind` label of
 * elastic_agent_alerts_total and the keys of status counters.alerts.  All
 * are exported from the start (at 0) so that rate() and dashboards work
 * before the first one; which code raises which is in metrics.c. */
typedef enum {
  EA__ALERT_LOSS_NAN,
  EA__ALERT_CHECKPOINT_FAILED,
  EA__ALERT_STORAGE_TIMEOUT,
  EA__ALERT_WORKER_EXIT,
  EA__ALERT_NODE_LOST,
  EA__ALERT_STRAGGLER,
  EA__ALERT_STALLED,
  EA__ALERT_GENERATION_CHURN,
  EA__ALERT_RESUME_FALLBACK,
  EA__ALERT_JOB_FAILED,
  EA__ALERT_PREEMPTED,            /* a spot/preemption notice (notice.c) */
  EA__ALERT_NO_SPARE,             /* a member lost with no spare node left (spare.c) */
  EA__ALERT_PREEMPTED_CHECKPOINT, /* the checkpoint before a mass preemption (preempt.c) */
  EA__ALERT_KINDS
} ea__alert_kind;

const char *ea__alert_kind_str(ea__alert_kind k);

/* A histogram as Prometheus exposes it: bucket i counts observations
 * ≤ le[i] (cumulative, as exposed), +Inf is `count`. */
#define EA__MX_BUCKETS_MAX 16
typedef struct {
  const double *le; /* upper bounds, ascending; static storage */
  size_t n;         /* ≤ EA__MX_BUCKETS_MAX */
  uint64_t cum[EA__MX_BUCKETS_MAX];
  uint64_t count;
  double sum;
} ea__mx_hist;

/* Observe v (seconds) into h. */
void ea__mx_hist_observe(ea__mx_hist *h, double v);

/* What the listener answered and refused, since start (issue 27): requests
 * answered; connections closed as soon as accepted because their source
 * (an IPv4 address, an IPv6 /64) held its limit (8) or all 512 were held;
 * connections closed before a whole request came (the 2 s timeout, or the
 * client gave up).  Any thread;
 * ea__http_stats_get below. */
typedef struct {
  uint64_t requests, refused_per_source, refused_full, closed_unrequested;
} ea__http_stats;

typedef struct {
  /* labels and identity */
  char job[64]; /* experiment.name */
  char node[EA_NAME_MAX];
  char id[33], version[32], role[EA_ROLE_MAX];
  double start_time_s; /* unix time the agent started */
  /* health: when the loop published this (CLOCK_MONOTONIC ms, uv_hrtime) */
  uint64_t mono_ms;
  bool ready;
  char ready_why[256]; /* "ok" or why not */
  /* membership */
  uint64_t members[4]; /* by EA_STATE_* (alive, suspect, dead, left) */
  bool controller;
  /* generations */
  uint64_t generation; /* term of the generation this node runs; 0: none */
  uint32_t world;
  uint32_t held_out, stragglers; /* as controller: nodes held out, ranks straggling now */
  uint32_t spare_nodes[4];       /* spare nodes by ea_rdzv_spare_state (ea_rdzv_spares) */
  bool spare_self;               /* this node is one */
  uint64_t gens_committed;       /* generations this node ran (status committed_here) */
  uint64_t formations_started, formations_committed, formations_failed; /* as controller */
  ea__mx_hist formation; /* PREPARE → COMMIT, each generation this node ran */
  /* training */
  uint64_t step; /* status generation.last_step */
  double steps_per_s;
  bool has_loss;
  double loss;
  double since_step_s; /* seconds since a local worker last completed a step */
  bool stalled;
  uint64_t worker_failures, worker_restarts;
  /* warm interpreters (compute.warm_start): spares = local ranks that keep
   * one (0: none do); per local rank whether it is ready and its RSS */
  uint32_t spares;
  bool spare_ready[64];
  uint64_t spare_rss[64];
  uint64_t starts_warm, starts_cold; /* worker processes started each way */
  /* checkpoints */
  uint32_t ck_interval;                         /* checkpoint.save_interval_steps; 0: off */
  uint64_t ck_committed, ck_failed, ck_skipped; /* as controller */
  bool ck_have_last;
  uint64_t ck_last_step;
  double ck_last_time_s;       /* unix time this node first knew that checkpoint */
  uint64_t ck_bytes_written;   /* this node's shards, durable */
  uint64_t ck_bytes_committed; /* as controller: checkpoints committed */
  ea__mx_hist persist;         /* as controller: first report → MANIFEST durable */
  /* gossip (UDP datagrams; drops include push-pull frames) and control */
  uint64_t gossip_in, gossip_out, gossip_bytes_in, gossip_bytes_out;
  uint64_t gossip_drop_malformed, gossip_drop_unauth, gossip_drop_oversize, gossip_drop_replayed;
  uint64_t ctl_drop_malformed, ctl_drop_unauth, ctl_drop_oversize, ctl_drop_replayed;
  uint64_t drains_refused;
  ea__http_stats http; /* this listener's, as of the snapshot */
  /* alerts */
  uint64_t alerts[EA__ALERT_KINDS];
  /* The page's JSON (issue 31), formatted on the loop while someone looks
   * (ea__http_wanted): the `status --json` document and the
   * /api/v1/history document (history.h), each malloc'd, NUL-terminated
   * compact JSON owned by the snapshot; NULL when not formatted. */
  char *status_json, *history_json;
} ea__mx_snap;

/* Frees s and the texts it owns (NULL: nothing). */
void ea__mx_snap_free(ea__mx_snap *s);

/* The Prometheus text exposition (format 0.0.4) of s, appended to out
 * (check out->oom).  Label values are escaped (\\, \", \n); a NaN loss is
 * "NaN".  Pure: tests/unit/test_metrics.c pins the exact text. */
void ea__mx_format(const ea__mx_snap *s, ea_sb *out);

/* ---- the HTTP server (http.c, libmicrohttpd) -------------------------------
 * GET /metrics, /healthz, /readyz, the page (/) and its JSON on one
 * listener, answered by libmicrohttpd's own thread from the newest
 * published snapshot; the loop is never waited on.
 *   /healthz  200 "ok" while the newest snapshot is under
 *             EA__HEALTH_MAX_AGE_MS old (the loop publishes every
 *             EA__MX_PERIOD_MS), else 503 with the age;
 *   /readyz   200 "ok" when the snapshot says ready, else 503 with why;
 *   /metrics  200, text/plain; version=0.0.4;
 *   /         200, the page (page.html, embedded): text/html, with a
 *             Content-Security-Policy that lets it fetch from this agent
 *             only;
 *   /api/v1/status, /api/v1/history  200, application/json: the
 *             snapshot's status_json and history_json; 503 with
 *             {"error":…} before the first snapshot, or while the loop
 *             has not formatted them yet (the first request after
 *             EA__PAGE_IDLE_MS without one: the next publish has them).
 * Other paths 404, other methods 405.  Nothing of the request is parsed
 * here beyond comparing the method and path libmicrohttpd hands over. */

/* 500 ms: a tenth of the health deadline, and fresher than any scrape. */
#define EA__MX_PERIOD_MS 500
/* 5 s: ten publish periods missed is a loop that is stuck, not busy (a
 * turn of the loop takes microseconds to a few milliseconds). */
#define EA__HEALTH_MAX_AGE_MS 5000

/* The loop formats the page's JSON only while a request for it came in
 * the last minute: a page refreshes every 2 s, and an agent nobody looks at
 * pays nothing (the status document of a large cluster is ~100 KiB). */
#define EA__PAGE_IDLE_MS 60000

typedef struct ea__http ea__http;

/* The page (agent/obs/page.html, embedded at build time by page.c): len
 * bytes of UTF-8 HTML, NUL-terminated, static. */
const char *ea__page_html(size_t *len);

/* What the endpoint answers one request, as a pure function of the method
 * and path libmicrohttpd hands over (NUL-terminated; the path already
 * percent-decoded, so any bytes), the newest snapshot (NULL before the
 * first) and the time (CLOCK_MONOTONIC ms, as s->mono_ms): the server
 * (http.c), tests/unit/test_metrics.c and tests/fuzz/fuzz_http.c call
 * it.  Every body is UTF-8, as its type says: what a body repeats of the
 * request or of the snapshot's reason has invalid sequences replaced by
 * U+FFFD and control characters by '?', so a text answer stays one line. */
typedef struct {
  unsigned code;    /* HTTP status */
  char *body;       /* malloc'd, owned by the caller; NULL: out of memory (a 500) */
  size_t len;       /* of body */
  const char *type; /* Content-Type, static */
  bool allow;       /* a 405: add "Allow: GET, HEAD" */
  const char *csp;  /* Content-Security-Policy, static; NULL: none */
} ea__http_reply;

void ea__http_answer(const char *method, const char *url, const ea__mx_snap *s, uint64_t now_ms,
                     ea__http_reply *r);

/* Listen on HOST:PORT (a name is resolved now: call before the loop runs
 * or accept the blocking lookup); port 0 picks a free one.  The bound
 * address goes to bound ("127.0.0.1:9400", "[::1]:9400").  Returns 0, or a
 * negative errno with a sentence in err (nothing is left open). */
int ea__http_start(const char *spec, ea__http **out, char *bound, size_t boundlen, char *err,
                   size_t errlen);
/* Make s the snapshot answered from now on; takes ownership of s (malloc'd;
 * freed once no request uses it).  Thread-safe; never blocks on a request
 * being formatted. */
void ea__http_publish(ea__http *h, ea__mx_snap *s);
/* Whether a request for the page's JSON (or the page) came within the
 * last EA__PAGE_IDLE_MS before now_ms (CLOCK_MONOTONIC ms): the loop
 * formats status_json and history_json into its snapshots only then. */
bool ea__http_wanted(const ea__http *h, uint64_t now_ms);
/* Requests answered (for status), since start. */
uint64_t ea__http_requests(const ea__http *h);
void ea__http_stats_get(const ea__http *h, ea__http_stats *out);
/* Stop the thread (in-flight answers finish), close the socket, free. */
void ea__http_stop(ea__http *h);

/* ---- alert records and their delivery bodies (alerts.c) --------------------
 * How alerts are raised, held back and resolved: agent_int.h, "alerts". */

/* Alertmanager's own default resolve_timeout is 5 min: an event shows for
 * as long as an alert nobody re-sends would. */
#define EA__ALERT_EVENT_HOLD_S 300
/* One delivery per kind per minute: an operator's pager, not a log. */
#define EA__ALERT_RATE_S 60
#define EA__ALERT_RECENT 16
/* Queued deliveries: a minute of one alert per second; past that the
 * oldest is dropped (and counted): fresh news beats old. */
#define EA__ALERT_QUEUE_MAX 64

typedef enum { EA__SEV_WARNING, EA__SEV_CRITICAL } ea__alert_sev;
const char *ea__alert_sev_str(ea__alert_sev s);
/* Conditions (resolved explicitly) vs events (see above). */
bool ea__alert_kind_is_condition(ea__alert_kind k);

/* One alert as it is delivered and shown. */
typedef struct {
  ea__alert_kind kind;
  ea__alert_sev sev;
  bool firing;         /* false: resolved */
  char subject[128];   /* what it is about ("n3", "worker 1"), "" when the node itself */
  char summary[2048];  /* the log line's text */
  double starts_s;     /* unix time it fired */
  double ends_s;       /* unix time it resolved (or, for events, expires); 0: open */
  uint32_t suppressed; /* fires of this kind held back before this one */
} ea__alert_rec;

/* The rate limiter: one per kind.  admit returns true when a fire at now_ms
 * may be delivered (*held = fires held back since the last delivered one,
 * then reset), false when it is held back (counted). */
typedef struct {
  bool have;
  uint64_t last_ms;
  uint32_t held;
} ea__alert_rl;
bool ea__alert_rl_admit(ea__alert_rl *rl, uint64_t now_ms, uint64_t window_ms, uint32_t *held);

/* "2026-12-01T21:00:00.123Z" (UTC, RFC 3339 as Alertmanager parses it). */
void ea__alert_time_str(double unix_s, char *out, size_t cap);
/* The bodies, malloc'd NUL-terminated compact JSON (free()), NULL when out
 * of memory.  Pure: tests/unit/test_alerts.c pins the exact text.
 *   Alertmanager (POST /api/v2/alerts): an array of
 *     {"labels":{"alertname":KIND,"job":J,"node":N,"severity":S[,"subject":X]},
 *      "annotations":{"summary":…[,"suppressed":"N"]},"startsAt":T,"endsAt":T}
 *     (endsAt of a firing condition: now_s + 4 × resend_s, four re-sends ahead
 *     as Prometheus sets it);
 *   webhook: {"version":1,"status":"firing"|"resolved","kind":…,"severity":…,
 *     "job":…,"node":…,"subject":…,"summary":…,"startsAt":T,"endsAt":T|null,
 *     "suppressed":N}. */
char *ea__alert_am_body(const ea__alert_rec *const *r, size_t n, const char *job, const char *node,
                        double now_s, double resend_s);
char *ea__alert_webhook_body(const ea__alert_rec *r, const char *job, const char *node);

/* ---- the alert registry and its delivery (alerts.c) -----------------------
 * What an alert is and how it is delivered: agent_int.h, "alerts", where
 * the agent's ea__agent_alert* (agent/alerting.c) wrap these.  Loop thread
 * only.  al may be NULL (before the registry exists, after it is freed):
 * raising then only writes the log line, the rest are no-ops. */
typedef struct ea__alerts ea__alerts;
typedef struct {
  const char *job, *node;       /* experiment.name, this node's name */
  const char *alertmanager_url; /* observability.alertmanager_url ("" off) */
  const char *webhook;          /* observability.alert_webhook ("" off) */
  const char *command;          /* observability.alert_command ("" off) */
  uint32_t resend_seconds;      /* observability.alert_resend_seconds */
} ea__alerts_cfg;
/* The registry, its re-send timer on loop, and the delivery thread when a
 * receiver is configured (the strings are copied). */
int ea__alerts_new(uv_loop_t *loop, const ea__alerts_cfg *c, ea__alerts **out, char *err,
                   size_t errlen);
void ea__alerts_raise_v(ea__alerts *al, ea__alert_kind k, ea__alert_sev sev, const char *subject,
                        const ea_log_kv *kv, unsigned nkv, const char *fmt, va_list ap);
void ea__alerts_resolve_v(ea__alerts *al, ea__alert_kind k, const char *subject, const char *fmt,
                          va_list ap);
bool ea__alerts_firing(ea__alerts *al, ea__alert_kind k, const char *subject);
/* The i-th condition firing now (NULL past the last): resolving one moves
 * the later ones down by one. */
const ea__alert_rec *ea__alerts_firing_at(const ea__alerts *al, size_t i);
uint64_t ea__alerts_count(const ea__alerts *al, ea__alert_kind k);
/* "alerts" of the status document: recent, firing, delivery counters. */
void ea__alerts_status(ea__alerts *al, ea_jb *b, json_t *doc);
/* Shutdown: close the timer (deliveries queued go on). */
void ea__alerts_close(ea__alerts *al);
/* After uv_run: let the thread deliver what is queued (bounded by a few
 * seconds), join it, free. */
void ea__alerts_free(ea__alerts *al);

/* ---- the spot/preemption notice poller (notice.c) -------------------------
 * A thread polls the metadata service every EA__NOTICE_PERIOD_MS, at the
 * period's multiples on the wall clock (every node of a pool asks at the
 * same moment); the first notice wakes the loop, fn(ctx, what) runs on the
 * loop thread once, and polling stops.  provider is
 * runtime.preemption_notice ("" or "none": no poller, 0 and *out NULL;
 * aws, gcp, azure, or a URL), base runtime.preemption_metadata_url (""
 * for the provider's own). */
#define EA__NOTICE_PERIOD_MS 2000
typedef struct ea__notice ea__notice;
typedef void (*ea__notice_fn)(void *ctx, const char *what);
int ea__notice_start(uv_loop_t *loop, const char *provider, const char *base, ea__notice_fn fn,
                     void *ctx, ea__notice **out, char *err, size_t errlen);
/* Stop polling (joins the thread: at most one request's timeout), fn is
 * not called any more; the handle is freed once libuv has closed it. */
void ea__notice_close(ea__notice *n);

#endif
