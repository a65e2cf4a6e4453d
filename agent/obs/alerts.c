/* Alerts: the one registry every `alert` goes through, and its delivery.
 *
 * An alert is raised on the loop (ea__alerts_raise_v; the agent's
 * ea__agent_alert, agent/alerting.c): the log line, the
 * counter and the status entry happen there and then, because they are
 * cheap and must never be lost.  Delivery is not cheap — an HTTP POST to
 * Alertmanager or a webhook, a command run — and may hang on a dead
 * receiver, so it happens on a thread of its own: the loop formats the
 * body and appends it to a bounded queue under a mutex; the thread takes
 * one item at a time and posts it with libcurl (timeouts on connect and on
 * the whole transfer, retries with doubling back-off), or runs the command
 * with posix_spawn and waits for it with a deadline.  A full queue drops
 * its oldest item and counts it: the newest news is what an operator
 * needs.  The thread reads nothing of the agent.
 *
 * Alertmanager's model (API v2) is a set of alerts identified by their
 * labels, each with startsAt/endsAt; a firing alert must be re-sent or it
 * resolves itself at endsAt.  Conditions here are kept in a small table
 * while firing and re-sent every observability.alert_resend_seconds from a
 * loop timer,
 * with endsAt four re-sends ahead (what Prometheus does); resolving sends
 * endsAt = now.  Events carry endsAt = startsAt + EA__ALERT_EVENT_HOLD_S.
 *
 * Repeats of a kind are rate-limited per kind (ea__alert_rl): a fire held
 * back is still logged and counted, only not delivered; the next one
 * delivered says how many were held back.  A condition held back still
 * reaches Alertmanager at the next re-send, since the firing table holds
 * it.
 *
 * At exit the queue is flushed for at most FLUSH_MS: the `job failed`
 * alert is raised just before the agent exits and is the one that matters
 * most.
 *
 * This file knows nothing of the agent (obs.h is its contract): what it
 * needs of the job file is handed to ea__alerts_new.
 */
#include "obs.h"

#include "ea_json.h"

#include "ea_log.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Connect within 2 s, whole POST within 5 s: a receiver on the same
 * network answers in milliseconds; one that does not is down. */
#define CONNECT_MS 2000
#define TRANSFER_MS 5000
/* Four tries, 0.5 s then doubling (0.5 + 1 + 2 s of back-off): a receiver
 * restarting comes back within that; longer belongs to the next re-send. */
#define TRIES 4
#define BACKOFF_MS 500
/* A command gets 10 s, then SIGKILL: a hook, not a job. */
#define COMMAND_MS 10000
/* At exit, what is queued gets 3 s (systemd's and Kubernetes' stop
 * deadlines are tens of seconds; a drain has used some). */
#define FLUSH_MS 3000
/* Conditions firing at once: kinds × a few subjects (nodes lost). */
#define FIRING_MAX 32

typedef enum { D_AM, D_HOOK, D_CMD } dkind;

typedef struct item {
  dkind kind;
  char *body; /* JSON (AM, webhook, and EA_ALERT_JSON for the command) */
  char **env; /* D_CMD: EA_ALERT_* strings, NULL-terminated */
  struct item *next;
} item;

typedef struct {
  pthread_t th;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  item *head, *tail;
  size_t n;
  bool stop;
  uint64_t deadline_ms; /* set at stop: give up retrying after this */
  /* counters (under mu) */
  uint64_t queued, sent, failed, dropped;
  char last_error[256];
  /* read-only after start */
  char am_url[300], hook[300], cmd[512];
} deliv;

struct ea__alerts {
  char job[EA_NAME_MAX], node[EA_NAME_MAX];
  uint32_t resend_s;
  char cfg_am[300], cfg_hook[300]; /* as configured, for status */
  bool cfg_cmd;
  uv_timer_t timer;
  bool timer_open;
  uint64_t counts[EA__ALERT_KINDS];
  ea__alert_rl rl[EA__ALERT_KINDS];
  uint64_t held_total;
  ea__alert_rec recent[EA__ALERT_RECENT];
  size_t nrecent, recent_head;
  ea__alert_rec firing[FIRING_MAX];
  size_t nfiring;
  deliv *d; /* NULL when no delivery is configured */
};

/* ---- pure parts -------------------------------------------------------------- */

const char *ea__alert_sev_str(ea__alert_sev s) {
  return s == EA__SEV_CRITICAL ? "critical" : "warning";
}

bool ea__alert_kind_is_condition(ea__alert_kind k) {
  return k == EA__ALERT_STALLED || k == EA__ALERT_LOSS_NAN || k == EA__ALERT_NODE_LOST ||
         k == EA__ALERT_STORAGE_TIMEOUT || k == EA__ALERT_STRAGGLER || k == EA__ALERT_NO_SPARE;
}

bool ea__alert_rl_admit(ea__alert_rl *rl, uint64_t now_ms, uint64_t window_ms, uint32_t *held) {
  if (rl->have && now_ms >= rl->last_ms && now_ms - rl->last_ms < window_ms) {
    rl->held++;
    return false;
  }
  *held = rl->held;
  rl->held = 0;
  rl->have = true;
  rl->last_ms = now_ms;
  return true;
}

void ea__alert_time_str(double unix_s, char *out, size_t cap) {
  time_t t = (time_t)unix_s;
  int ms = (int)((unix_s - (double)t) * 1000.0);
  if (ms < 0) ms = 0;
  if (ms > 999) ms = 999;
  struct tm tm;
  gmtime_r(&t, &tm);
  char b[32];
  strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out, cap, "%s.%03dZ", b, ms);
}

char *ea__alert_am_body(const ea__alert_rec *const *r, size_t n, const char *job, const char *node,
                        double now_s, double resend_s) {
  ea_jb b = {0};
  json_t *arr = json_array();
  if (!arr) return NULL;
  for (size_t i = 0; i < n; i++) {
    const ea__alert_rec *x = r[i];
    json_t *o = ea_jb_obj(&b, arr, NULL);
    json_t *l = ea_jb_obj(&b, o, "labels");
    ea_jb_str(&b, l, "alertname", ea__alert_kind_str(x->kind));
    ea_jb_str(&b, l, "job", job);
    ea_jb_str(&b, l, "node", node);
    ea_jb_str(&b, l, "severity", ea__alert_sev_str(x->sev));
    if (x->subject[0]) ea_jb_str(&b, l, "subject", x->subject);
    json_t *an = ea_jb_obj(&b, o, "annotations");
    ea_jb_str(&b, an, "summary", x->summary);
    if (x->suppressed) {
      char s[16];
      snprintf(s, sizeof s, "%" PRIu32, x->suppressed);
      ea_jb_str(&b, an, "suppressed", s);
    }
    char t[40];
    ea__alert_time_str(x->starts_s, t, sizeof t);
    ea_jb_str(&b, o, "startsAt", t);
    double ends = x->ends_s;
    if (x->firing && ea__alert_kind_is_condition(x->kind)) ends = now_s + 4.0 * resend_s;
    ea__alert_time_str(ends, t, sizeof t);
    ea_jb_str(&b, o, "endsAt", t);
  }
  char *s = b.oom ? NULL : ea_json_dump(arr);
  json_decref(arr);
  return s;
}

char *ea__alert_webhook_body(const ea__alert_rec *x, const char *job, const char *node) {
  ea_jb b = {0};
  json_t *o = json_object();
  if (!o) return NULL;
  ea_jb_int(&b, o, "version", 1);
  ea_jb_str(&b, o, "status", x->firing ? "firing" : "resolved");
  ea_jb_str(&b, o, "kind", ea__alert_kind_str(x->kind));
  ea_jb_str(&b, o, "severity", ea__alert_sev_str(x->sev));
  ea_jb_str(&b, o, "job", job);
  ea_jb_str(&b, o, "node", node);
  ea_jb_str(&b, o, "subject", x->subject);
  ea_jb_str(&b, o, "summary", x->summary);
  char t[40];
  ea__alert_time_str(x->starts_s, t, sizeof t);
  ea_jb_str(&b, o, "startsAt", t);
  if (!x->firing) {
    ea__alert_time_str(x->ends_s, t, sizeof t);
    ea_jb_str(&b, o, "endsAt", t);
  } else {
    ea_jb_null(&b, o, "endsAt");
  }
  ea_jb_u64(&b, o, "suppressed", x->suppressed);
  char *s = b.oom ? NULL : ea_json_dump(o);
  json_decref(o);
  return s;
}

/* ---- the delivery thread ---------------------------------------------------------- */

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void item_free(item *it) {
  if (!it) return;
  free(it->body);
  if (it->env)
    for (char **e = it->env; *e; e++) free(*e);
  free(it->env);
  free(it);
}

static size_t discard(char *p, size_t size, size_t n, void *u) {
  (void)p, (void)u;
  return size * n;
}

/* One POST: 0 (2xx), or -1 with why in err; *retry says whether trying
 * again can help (a refused connection, a timeout, 5xx, 429). */
static int post(const char *url, const char *body, bool *retry, char *err, size_t errlen) {
  CURL *c = curl_easy_init();
  *retry = true;
  if (!c) {
    snprintf(err, errlen, "curl_easy_init failed");
    return -1;
  }
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  char ebuf[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* a thread: no SIGALRM for timeouts */
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_MS);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)TRANSFER_MS);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "elastic-agent/" EA_VERSION);
  CURLcode rc = curl_easy_perform(c);
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  if (rc != CURLE_OK) {
    snprintf(err, errlen, "POST %.120s: %.120s", url, ebuf[0] ? ebuf : curl_easy_strerror(rc));
    return -1;
  }
  if (code >= 200 && code < 300) return 0;
  *retry = code >= 500 || code == 429;
  snprintf(err, errlen, "POST %.200s: HTTP %ld", url, code);
  return -1;
}

static int run_command(const char *cmd, char **extra, char *err, size_t errlen) {
  size_t ne = 0, nx = 0;
  while (environ[ne]) ne++;
  while (extra[nx]) nx++;
  char **env = calloc(ne + nx + 1, sizeof *env);
  if (!env) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  size_t k = 0;
  for (size_t i = 0; i < ne; i++)
    if (strncmp(environ[i], "EA_ALERT_", 9) != 0) env[k++] = environ[i];
  for (size_t i = 0; i < nx; i++) env[k++] = extra[i];
  char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, env);
  free(env);
  if (rc) {
    snprintf(err, errlen, "alert_command: cannot run /bin/sh: %s", strerror(rc));
    return -1;
  }
  uint64_t until = mono_ms() + COMMAND_MS;
  int st = 0;
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      snprintf(err, errlen, "alert_command: waitpid: %s", strerror(errno));
      return -1;
    }
    if (mono_ms() >= until) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      snprintf(err, errlen, "alert_command: killed after %d s", COMMAND_MS / 1000);
      return -1;
    }
    usleep(20000); /* 20 ms: a hook's exit is noticed well within a second */
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
  snprintf(err, errlen, "alert_command exited %s %d", WIFEXITED(st) ? "with status" : "by signal",
           WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
  return -1;
}

/* Wait ms, or less once stopping past the deadline; false: give up. */
static bool backoff(deliv *d, uint64_t ms) {
  pthread_mutex_lock(&d->mu);
  uint64_t until = mono_ms() + ms;
  while (!d->stop || mono_ms() < d->deadline_ms) {
    uint64_t now = mono_ms();
    if (now >= until) break;
    uint64_t wait = until - now;
    if (d->stop && d->deadline_ms - now < wait) wait = d->deadline_ms - now;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(wait / 1000);
    ts.tv_nsec += (long)(wait % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&d->cv, &d->mu, &ts);
  }
  bool go = !d->stop || mono_ms() < d->deadline_ms;
  pthread_mutex_unlock(&d->mu);
  return go;
}

static void deliver(deliv *d, item *it) {
  char err[256] = "";
  bool ok = false;
  uint64_t wait = BACKOFF_MS;
  for (int t = 0; t < TRIES && !ok; t++) {
    if (t > 0 && !backoff(d, wait)) break;
    if (t > 0) wait *= 2;
    bool retry = true;
    if (it->kind == D_CMD) {
      ok = run_command(d->cmd, it->env, err, sizeof err) == 0;
      retry = false; /* a hook that failed once fails the same way again */
    } else {
      char url[400];
      if (it->kind == D_AM)
        snprintf(url, sizeof url, "%s/api/v2/alerts", d->am_url);
      else
        snprintf(url, sizeof url, "%s", d->hook);
      ok = post(url, it->body, &retry, err, sizeof err) == 0;
    }
    if (!retry) break;
  }
  pthread_mutex_lock(&d->mu);
  if (ok) {
    d->sent++;
  } else {
    d->failed++;
    snprintf(d->last_error, sizeof d->last_error, "%s", err);
  }
  pthread_mutex_unlock(&d->mu);
  /* The thread may log: ea_log writes whole lines (one write each). */
  if (!ok) ea_log(EA_LOG_WARN, "alert", "delivery failed: %s", err);
}

static void *deliv_main(void *p) {
  deliv *d = p;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (!d->head && !d->stop) pthread_cond_wait(&d->cv, &d->mu);
    if (!d->head) break; /* stopping, nothing left */
    if (d->stop && mono_ms() >= d->deadline_ms) break;
    item *it = d->head;
    d->head = it->next;
    if (!d->head) d->tail = NULL;
    d->n--;
    pthread_mutex_unlock(&d->mu);
    deliver(d, it);
    item_free(it);
    pthread_mutex_lock(&d->mu);
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

static void enqueue(deliv *d, item *it) {
  item *drop = NULL;
  pthread_mutex_lock(&d->mu);
  if (d->n >= EA__ALERT_QUEUE_MAX) {
    drop = d->head;
    d->head = drop->next;
    if (!d->head) d->tail = NULL;
    d->n--;
    d->dropped++;
  }
  if (d->tail)
    d->tail->next = it;
  else
    d->head = it;
  d->tail = it;
  d->n++;
  d->queued++;
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
  item_free(drop);
}

/* ---- the registry (loop thread) ---------------------------------------------------- */

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void push_am(ea__alerts *al, const ea__alert_rec *const *r, size_t n) {
  if (!al->d || !al->d->am_url[0] || n == 0) return;
  item *it = calloc(1, sizeof *it);
  if (!it) return;
  it->kind = D_AM;
  it->body = ea__alert_am_body(r, n, al->job, al->node, wall_s(), (double)al->resend_s);
  if (!it->body) {
    free(it);
    return;
  }
  enqueue(al->d, it);
}

static char *envf(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *envf(const char *name, const char *fmt, ...) {
  char v[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v, sizeof v, fmt, ap);
  va_end(ap);
  char *s = NULL;
  if (asprintf(&s, "%s=%s", name, v) < 0) return NULL;
  return s;
}

/* To the webhook and the command (not Alertmanager). */
static void push_notify(ea__alerts *al, const ea__alert_rec *r) {
  deliv *d = al->d;
  if (!d || (!d->hook[0] && !d->cmd[0])) return;
  char *body = ea__alert_webhook_body(r, al->job, al->node);
  if (!body) return;
  if (d->hook[0]) {
    item *it = calloc(1, sizeof *it);
    if (it) {
      it->kind = D_HOOK;
      it->body = strdup(body);
      if (it->body)
        enqueue(d, it);
      else
        free(it);
    }
  }
  if (d->cmd[0]) {
    item *it = calloc(1, sizeof *it);
    char **env = calloc(12, sizeof *env);
    if (it && env) {
      char ts[40];
      ea__alert_time_str(r->starts_s, ts, sizeof ts);
      size_t k = 0;
      env[k++] = envf("EA_ALERT_KIND", "%s", ea__alert_kind_str(r->kind));
      env[k++] = envf("EA_ALERT_SEVERITY", "%s", ea__alert_sev_str(r->sev));
      env[k++] = envf("EA_ALERT_STATUS", "%s", r->firing ? "firing" : "resolved");
      env[k++] = envf("EA_ALERT_SUBJECT", "%s", r->subject);
      env[k++] = envf("EA_ALERT_SUMMARY", "%s", r->summary);
      env[k++] = envf("EA_ALERT_JOB", "%s", al->job);
      env[k++] = envf("EA_ALERT_NODE", "%s", al->node);
      env[k++] = envf("EA_ALERT_STARTS_AT", "%s", ts);
      env[k++] = envf("EA_ALERT_SUPPRESSED", "%" PRIu32, r->suppressed);
      env[k++] = envf("EA_ALERT_JSON", "%s", body);
      bool ok = true;
      for (size_t i = 0; i < k; i++) ok = ok && env[i];
      it->kind = D_CMD;
      it->env = env;
      if (ok)
        enqueue(d, it);
      else
        item_free(it);
    } else {
      free(it);
      free(env);
    }
  }
  free(body);
}

static void remember(ea__alerts *al, const ea__alert_rec *r) {
  al->recent[al->recent_head] = *r;
  al->recent_head = (al->recent_head + 1) % EA__ALERT_RECENT;
  if (al->nrecent < EA__ALERT_RECENT) al->nrecent++;
}

static ea__alert_rec *find_firing(ea__alerts *al, ea__alert_kind k, const char *subject) {
  for (size_t i = 0; i < al->nfiring; i++)
    if (al->firing[i].kind == k && strcmp(al->firing[i].subject, subject) == 0)
      return &al->firing[i];
  return NULL;
}

/* Extra fields a caller may add to the line. */
#define KV_MAX 8

void ea__alerts_raise_v(ea__alerts *al, ea__alert_kind k, ea__alert_sev sev, const char *subject,
                        const ea_log_kv *kv, unsigned nkv, const char *fmt, va_list ap) {
  if ((unsigned)k >= EA__ALERT_KINDS) return;
  ea__alert_rec r = {.kind = k, .sev = sev, .firing = true, .starts_s = wall_s()};
  snprintf(r.subject, sizeof r.subject, "%s", subject ? subject : "");
  vsnprintf(r.summary, sizeof r.summary, fmt, ap);
  /* JSON lines carry alert (the kind), severity and subject as fields. */
  ea_log_kv f[3 + KV_MAX];
  unsigned n = 0;
  f[n++] = EA_KV_S("alert", ea__alert_kind_str(k));
  f[n++] = EA_KV_S("severity", ea__alert_sev_str(sev));
  if (r.subject[0]) f[n++] = EA_KV_S("subject", r.subject);
  for (unsigned i = 0; i < nkv && i < KV_MAX; i++) f[n++] = kv[i];
  ea_logkv(sev == EA__SEV_CRITICAL ? EA_LOG_ERROR : EA_LOG_WARN, "alert", f, n,
           "%s kind=%s severity=%s", r.summary, ea__alert_kind_str(k), ea__alert_sev_str(sev));
  if (!al) return;
  al->counts[k]++;
  bool cond = ea__alert_kind_is_condition(k);
  if (cond) {
    ea__alert_rec *f = find_firing(al, k, r.subject);
    if (f) {
      r.starts_s = f->starts_s; /* the same alert, still firing */
    } else {
      if (al->nfiring == FIRING_MAX) { /* the oldest gives way */
        memmove(&al->firing[0], &al->firing[1], (FIRING_MAX - 1) * sizeof al->firing[0]);
        al->nfiring--;
      }
      f = &al->firing[al->nfiring++];
    }
    *f = r;
  } else {
    r.ends_s = r.starts_s + EA__ALERT_EVENT_HOLD_S;
  }
  uint32_t held = 0;
  bool admit = ea__alert_rl_admit(&al->rl[k], mono_ms(), EA__ALERT_RATE_S * 1000u, &held);
  if (!admit) {
    al->held_total++;
    remember(al, &r);
    return;
  }
  r.suppressed = held;
  if (held) {
    size_t len = strlen(r.summary);
    snprintf(r.summary + len, sizeof r.summary - len, " (%" PRIu32 " more since the last one)",
             held);
  }
  remember(al, &r);
  const ea__alert_rec *one = &r;
  push_am(al, &one, 1);
  push_notify(al, &r);
}

void ea__alerts_resolve_v(ea__alerts *al, ea__alert_kind k, const char *subject, const char *fmt,
                          va_list ap) {
  if (!al || (unsigned)k >= EA__ALERT_KINDS) return;
  ea__alert_rec *f = find_firing(al, k, subject ? subject : "");
  if (!f) return;
  ea__alert_rec r = *f;
  size_t i = (size_t)(f - al->firing);
  memmove(&al->firing[i], &al->firing[i + 1], (al->nfiring - i - 1) * sizeof al->firing[0]);
  al->nfiring--;
  r.firing = false;
  r.suppressed = 0;
  r.ends_s = wall_s();
  vsnprintf(r.summary, sizeof r.summary, fmt, ap);
  ea_log_kv kv[2] = {EA_KV_S("alert", ea__alert_kind_str(k)), EA_KV_S("subject", r.subject)};
  ea_logkv(EA_LOG_INFO, "alert", kv, r.subject[0] ? 2 : 1, "%s kind=%s", r.summary,
           ea__alert_kind_str(k));
  remember(al, &r);
  const ea__alert_rec *one = &r;
  push_am(al, &one, 1);
  push_notify(al, &r);
}

bool ea__alerts_firing(ea__alerts *al, ea__alert_kind k, const char *subject) {
  return al && find_firing(al, k, subject ? subject : "") != NULL;
}

const ea__alert_rec *ea__alerts_firing_at(const ea__alerts *al, size_t i) {
  return al && i < al->nfiring ? &al->firing[i] : NULL;
}

uint64_t ea__alerts_count(const ea__alerts *al, ea__alert_kind k) {
  return al && (unsigned)k < EA__ALERT_KINDS ? al->counts[k] : 0;
}

static void on_resend(uv_timer_t *h) {
  ea__alerts *al = h->data;
  const ea__alert_rec *r[FIRING_MAX];
  for (size_t i = 0; i < al->nfiring; i++) r[i] = &al->firing[i];
  push_am(al, r, al->nfiring);
}

void ea__alerts_status(ea__alerts *al, ea_jb *b, json_t *doc) {
  json_t *o = ea_jb_obj(b, doc, "alerts");
  json_t *rec = ea_jb_arr(b, o, "recent");
  if (!al) return;
  for (size_t i = 0; i < al->nrecent; i++) {
    const ea__alert_rec *r =
        &al->recent[(al->recent_head + EA__ALERT_RECENT - al->nrecent + i) % EA__ALERT_RECENT];
    json_t *x = ea_jb_obj(b, rec, NULL);
    char t[40];
    ea__alert_time_str(r->firing ? r->starts_s : r->ends_s, t, sizeof t);
    ea_jb_str(b, x, "time", t);
    ea_jb_str(b, x, "kind", ea__alert_kind_str(r->kind));
    ea_jb_str(b, x, "severity", ea__alert_sev_str(r->sev));
    ea_jb_str(b, x, "state", r->firing ? "firing" : "resolved");
    ea_jb_str(b, x, "subject", r->subject);
    ea_jb_str(b, x, "summary", r->summary);
  }
  json_t *fa = ea_jb_arr(b, o, "firing");
  for (size_t i = 0; i < al->nfiring; i++) {
    json_t *x = ea_jb_obj(b, fa, NULL);
    ea_jb_str(b, x, "kind", ea__alert_kind_str(al->firing[i].kind));
    ea_jb_str(b, x, "subject", al->firing[i].subject);
  }
  ea_jb_u64(b, o, "held_back", al->held_total);
  json_t *d = ea_jb_obj(b, o, "delivery");
  ea_jb_str(b, d, "alertmanager_url", al->cfg_am);
  ea_jb_str(b, d, "webhook", al->cfg_hook);
  ea_jb_bool(b, d, "command", al->cfg_cmd);
  uint64_t q = 0, s = 0, f = 0, dr = 0, pend = 0;
  char le[256] = "";
  if (al->d) {
    pthread_mutex_lock(&al->d->mu);
    q = al->d->queued, s = al->d->sent, f = al->d->failed, dr = al->d->dropped, pend = al->d->n;
    snprintf(le, sizeof le, "%s", al->d->last_error);
    pthread_mutex_unlock(&al->d->mu);
  }
  ea_jb_u64(b, d, "queued", q);
  ea_jb_u64(b, d, "pending", pend);
  ea_jb_u64(b, d, "sent", s);
  ea_jb_u64(b, d, "failed", f);
  ea_jb_u64(b, d, "dropped", dr);
  ea_jb_str(b, d, "last_error", le);
}

int ea__alerts_new(uv_loop_t *loop, const ea__alerts_cfg *c, ea__alerts **out, char *err,
                   size_t errlen) {
  *out = NULL;
  ea__alerts *al = calloc(1, sizeof *al);
  if (!al) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  snprintf(al->job, sizeof al->job, "%s", c->job);
  snprintf(al->node, sizeof al->node, "%s", c->node);
  al->resend_s = c->resend_seconds;
  snprintf(al->cfg_am, sizeof al->cfg_am, "%s", c->alertmanager_url);
  snprintf(al->cfg_hook, sizeof al->cfg_hook, "%s", c->webhook);
  al->cfg_cmd = c->command[0] != 0;
  if (c->alertmanager_url[0] || c->webhook[0] || c->command[0]) {
    deliv *d = calloc(1, sizeof *d);
    if (!d) {
      free(al);
      snprintf(err, errlen, "out of memory");
      return -ENOMEM;
    }
    snprintf(d->am_url, sizeof d->am_url, "%s", c->alertmanager_url);
    size_t n = strlen(d->am_url);
    while (n > 0 && d->am_url[n - 1] == '/') d->am_url[--n] = 0;
    snprintf(d->hook, sizeof d->hook, "%s", c->webhook);
    snprintf(d->cmd, sizeof d->cmd, "%s", c->command);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    /* Before any thread runs: curl_global_init is not thread-safe. */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = pthread_create(&d->th, NULL, deliv_main, d);
    if (rc) {
      pthread_mutex_destroy(&d->mu);
      pthread_cond_destroy(&d->cv);
      free(d);
      free(al);
      snprintf(err, errlen, "alert delivery thread: %s", strerror(rc));
      return -rc;
    }
    d->started = true;
    al->d = d;
    ea_log(EA_LOG_INFO, "alert", "delivery: alertmanager=%s webhook=%s command=%s",
           d->am_url[0] ? d->am_url : "off", d->hook[0] ? d->hook : "off",
           d->cmd[0] ? "on" : "off");
  }
  uv_timer_init(loop, &al->timer);
  al->timer.data = al;
  al->timer_open = true;
  uint64_t every_ms = (uint64_t)al->resend_s * 1000u;
  uv_timer_start(&al->timer, on_resend, every_ms, every_ms);
  *out = al;
  return 0;
}

void ea__alerts_close(ea__alerts *al) {
  if (!al || !al->timer_open) return;
  al->timer_open = false;
  uv_close((uv_handle_t *)&al->timer, NULL);
}

void ea__alerts_free(ea__alerts *al) {
  if (!al) return;
  deliv *d = al->d;
  if (d) {
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    d->deadline_ms = mono_ms() + FLUSH_MS;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->th, NULL);
    size_t left = d->n;
    while (d->head) {
      item *it = d->head;
      d->head = it->next;
      item_free(it);
    }
    if (left) ea_log(EA_LOG_WARN, "alert", "%zu alert deliveries not made before exit", left);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
  }
  free(al);
}
