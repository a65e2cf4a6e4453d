/* The spot/preemption notice: drain before the machine is taken away.
 *
 * Cloud providers announce the reclaim of a spot/preemptible machine on
 * its metadata service some time ahead (AWS two minutes, GCP and Azure
 * about thirty seconds).  A drain re-forms the job without this node in a
 * few seconds, so acting on the notice turns a lost node (a generation
 * failing in its collectives, recovery from a checkpoint) into a planned
 * departure.
 *
 * A thread polls every EA__NOTICE_PERIOD_MS (at its multiples on the wall
 * clock, the same moments on every node) with libcurl (the metadata
 * service is local, but a hung request must never stall the loop); on a
 * notice it wakes the loop with a uv_async_t and stops polling, and the
 * loop's callback is told (on the loop thread); the agent's (preempt.c)
 * logs it, raises `preempted` and drains the node.  This file knows
 * nothing of the agent: obs.h is its contract.
 *
 *   aws    PUT  BASE/latest/api/token (X-aws-ec2-metadata-token-ttl-seconds)
 *               then GET BASE/latest/meta-data/spot/instance-action with
 *               the token: 200 with a JSON body is a notice, 404 none.
 *               BASE http://169.254.169.254
 *   gcp    GET  BASE/computeMetadata/v1/instance/preempted
 *               (Metadata-Flavor: Google): "TRUE" is a notice.
 *               BASE http://metadata.google.internal
 *   azure  GET  BASE/metadata/scheduledevents?api-version=2020-07-01
 *               (Metadata: true): an event with "EventType":"Preempt".
 *               BASE http://169.254.169.254
 *   URL    GET  URL: 200 is a notice (any body), anything else none.
 * runtime.preemption_metadata_url replaces BASE (tests: a fake server).
 */
#include "obs.h"

#include "ea_log.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A local metadata service answers in milliseconds; 1 s is one that is
 * not there (no notice can come from it). */
#define REQ_MS 1000
#define BODY_MAX 16384

typedef enum { P_AWS, P_GCP, P_AZURE, P_URL } provider;

struct ea__notice {
  ea__notice_fn fn;
  void *ctx;
  provider p;
  char url[300]; /* base, or the whole URL (P_URL) */
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  uv_async_t wake;
  char what[512]; /* the notice, for the log line (under mu) */
  bool got;
  bool closing; /* loop thread: ea__notice_close ran, fn is not called */
};

typedef struct {
  char b[BODY_MAX];
  size_t n;
} body;

static size_t take(char *p, size_t size, size_t n, void *u) {
  body *b = u;
  size_t len = size * n, room = sizeof b->b - 1 - b->n;
  size_t k = len < room ? len : room;
  memcpy(b->b + b->n, p, k);
  b->n += k;
  b->b[b->n] = 0;
  return len;
}

/* One request; the HTTP status (0: no answer). */
static long request(const char *method, const char *url, const char *h1, const char *h2,
                    body *out) {
  CURL *c = curl_easy_init();
  if (!c) return 0;
  struct curl_slist *h = NULL;
  if (h1) h = curl_slist_append(h, h1);
  if (h2) h = curl_slist_append(h, h2);
  out->n = 0;
  out->b[0] = 0;
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  if (strcmp(method, "PUT") == 0) curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)REQ_MS);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)REQ_MS);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, take);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*"); /* link-local: never through a proxy */
  long code = 0;
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  return code;
}

/* One poll: true with what in *what when a notice is up. */
static bool poll_once(ea__notice *N, body *b, char *what, size_t cap) {
  char url[400];
  long code;
  switch (N->p) {
    case P_AWS: {
      /* IMDSv2: a session token first (IMDSv1-only hosts answer the GET
       * without one, so a failed PUT still goes on). */
      char tok[300] = "", th[360] = "";
      snprintf(url, sizeof url, "%s/latest/api/token", N->url);
      if (request("PUT", url, "X-aws-ec2-metadata-token-ttl-seconds: 21600", NULL, b) == 200) {
        snprintf(tok, sizeof tok, "%.*s", (int)strcspn(b->b, "\r\n"), b->b);
        snprintf(th, sizeof th, "X-aws-ec2-metadata-token: %s", tok);
      }
      snprintf(url, sizeof url, "%s/latest/meta-data/spot/instance-action", N->url);
      code = request("GET", url, th[0] ? th : NULL, NULL, b);
      if (code != 200) return false;
      snprintf(what, cap, "aws spot/instance-action: %.400s", b->b);
      return true;
    }
    case P_GCP:
      snprintf(url, sizeof url, "%s/computeMetadata/v1/instance/preempted", N->url);
      code = request("GET", url, "Metadata-Flavor: Google", NULL, b);
      if (code != 200 || strncmp(b->b, "TRUE", 4) != 0) return false;
      snprintf(what, cap, "gcp instance/preempted: TRUE");
      return true;
    case P_AZURE: {
      snprintf(url, sizeof url, "%s/metadata/scheduledevents?api-version=2020-07-01", N->url);
      code = request("GET", url, "Metadata: true", NULL, b);
      if (code != 200) return false;
      json_error_t je;
      json_t *doc = json_loadb(b->b, b->n, 0, &je);
      json_t *ev = doc ? json_object_get(doc, "Events") : NULL;
      bool hit = false;
      for (size_t i = 0; ev && i < json_array_size(ev) && !hit; i++) {
        const char *t = json_string_value(json_object_get(json_array_get(ev, i), "EventType"));
        const char *nb = json_string_value(json_object_get(json_array_get(ev, i), "NotBefore"));
        if (t && strcmp(t, "Preempt") == 0) {
          hit = true;
          snprintf(what, cap, "azure scheduled event Preempt, NotBefore %s", nb ? nb : "?");
        }
      }
      json_decref(doc);
      return hit;
    }
    case P_URL:
      code = request("GET", N->url, NULL, NULL, b);
      if (code != 200) return false;
      snprintf(what, cap, "%.200s answered 200: %.200s", N->url, b->b);
      return true;
  }
  return false;
}

static void *notice_main(void *p) {
  ea__notice *N = p;
  body *b = malloc(sizeof *b);
  if (!b) return NULL;
  pthread_mutex_lock(&N->mu);
  while (!N->stop) {
    pthread_mutex_unlock(&N->mu);
    char what[512];
    bool hit = poll_once(N, b, what, sizeof what);
    pthread_mutex_lock(&N->mu);
    if (hit && !N->stop) {
      snprintf(N->what, sizeof N->what, "%s", what);
      N->got = true;
      uv_async_send(&N->wake);
      break; /* one notice is enough: the node drains */
    }
    /* The next poll at the next multiple of the period on the wall clock:
     * every node of a pool (NTP keeps them within milliseconds) asks at the
     * same moment, so notices to many nodes are seen together and the
     * controller can tell a mass preemption from one drain (preempt.c). */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    uint64_t next = (now_ms / EA__NOTICE_PERIOD_MS + 1) * EA__NOTICE_PERIOD_MS;
    ts.tv_sec = (time_t)(next / 1000u);
    ts.tv_nsec = (long)(next % 1000u) * 1000000L;
    if (!N->stop) pthread_cond_timedwait(&N->cv, &N->mu, &ts);
  }
  pthread_mutex_unlock(&N->mu);
  free(b);
  return NULL;
}

static void on_wake(uv_async_t *h) {
  ea__notice *N = h->data;
  char what[512];
  pthread_mutex_lock(&N->mu);
  bool got = N->got;
  snprintf(what, sizeof what, "%s", N->what);
  pthread_mutex_unlock(&N->mu);
  if (got && !N->closing) N->fn(N->ctx, what);
}

int ea__notice_start(uv_loop_t *loop, const char *v, const char *base, ea__notice_fn fn, void *ctx,
                     ea__notice **out, char *err, size_t errlen) {
  *out = NULL;
  if (!v[0] || strcmp(v, "none") == 0) return 0;
  ea__notice *N = calloc(1, sizeof *N);
  if (!N) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  N->fn = fn;
  N->ctx = ctx;
  const char *dflt = "http://169.254.169.254";
  if (strcmp(v, "aws") == 0) {
    N->p = P_AWS;
  } else if (strcmp(v, "gcp") == 0) {
    N->p = P_GCP;
    dflt = "http://metadata.google.internal";
  } else if (strcmp(v, "azure") == 0) {
    N->p = P_AZURE;
  } else {
    N->p = P_URL;
    dflt = v;
  }
  snprintf(N->url, sizeof N->url, "%s", N->p != P_URL && base[0] ? base : dflt);
  size_t n = strlen(N->url);
  while (N->p != P_URL && n > 0 && N->url[n - 1] == '/') N->url[--n] = 0;
  pthread_mutex_init(&N->mu, NULL);
  pthread_cond_init(&N->cv, NULL);
  uv_async_init(loop, &N->wake, on_wake);
  N->wake.data = N;
  curl_global_init(CURL_GLOBAL_DEFAULT); /* before the thread; counted, so a second call is fine */
  int rc = pthread_create(&N->th, NULL, notice_main, N);
  if (rc) {
    snprintf(err, errlen, "preemption notice thread: %s", strerror(rc));
    uv_close((uv_handle_t *)&N->wake, NULL); /* N leaks until exit: start fails anyway */
    return -rc;
  }
  *out = N;
  ea_log(EA_LOG_INFO, "notice", "polling %s for a preemption notice every %d ms (%s)", N->url,
         EA__NOTICE_PERIOD_MS, N->p == P_URL ? "url" : v);
  return 0;
}

static void notice_closed(uv_handle_t *h) {
  ea__notice *N = h->data;
  pthread_mutex_destroy(&N->mu);
  pthread_cond_destroy(&N->cv);
  free(N);
}

void ea__notice_close(ea__notice *N) {
  if (!N) return;
  N->closing = true;
  pthread_mutex_lock(&N->mu);
  N->stop = true;
  pthread_cond_broadcast(&N->cv);
  pthread_mutex_unlock(&N->mu);
  pthread_join(N->th, NULL); /* at most one request in flight: 2 × REQ_MS */
  uv_close((uv_handle_t *)&N->wake, notice_closed);
}
