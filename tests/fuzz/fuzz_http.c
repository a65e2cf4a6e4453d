/* libFuzzer harness for the metrics and probe endpoint (agent/obs/http.c,
 * agent/obs/exposition.c): what /metrics, /healthz, /readyz and every other
 * request are answered (ea__http_answer, the function the server calls
 * with what libmicrohttpd hands over), and the Prometheus exposition
 * (ea__mx_format), driven with arbitrary methods, paths and snapshots.
 *
 * The input: byte 0 picks the method (GET, HEAD, POST, or the first
 * string below), byte 1 the path (/metrics, /healthz, /readyz, /, none,
 * /api/v1/status, /api/v1/history, or the second string), bytes
 * 2..2+NUMS feed the snapshot's numbers (counters, gauges as raw doubles:
 * NaN and infinities too, histogram observations, the snapshot's age),
 * and the rest is strings separated by NUL bytes: method, path, job, node,
 * id, version, role, ready_why (any bytes; each cut to its field as
 * metrics.c's snprintf would), then the page's two JSON texts (any bytes;
 * each present or not by a flag).
 *
 * Beyond "no crash, no sanitizer report", it checks the promises: the
 * status code, type and Allow header follow from the method, path,
 * snapshot and age as the header says; every body is valid UTF-8 and ends
 * with "\n", and a text answer is one line, its echoed part exactly the
 * UTF-8 model of fuzz_text.h; / is the embedded page whole, as HTML with
 * its policy; the JSON endpoints answer the snapshot's text (its UTF-8
 * model) and a newline, or a one-line JSON error; /metrics is text
 * format 0.0.4 — every line a HELP, a TYPE or a sample whose family had a
 * TYPE, names as the format allows, label values escaped (\\, \", \n and
 * nothing else) and, unescaped, the model of the snapshot's strings, job
 * and node on every sample, each value a number Prometheus reads.  A
 * mismatch aborts, which libFuzzer reports as a crash with the input saved.
 *
 * Build and run through scripts/fuzz.sh (make fuzz).  Seeds:
 * tests/fuzz/corpus/http (each path, a ready and a stale snapshot, a path
 * and names that are not UTF-8, a POST).
 */
#include "agent_int.h"
#include "fuzz_text.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                       \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "fuzz_http: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                            \
    }                                                                                     \
  } while (0)

#define NUMS 160

typedef struct {
  const uint8_t *p;
  size_t n;
} rd;

FUZZ_NOCOV static uint64_t take(rd *r, size_t k) {
  uint64_t v = 0;
  for (size_t i = 0; i < k; i++) {
    v = v << 8 | (r->n ? *r->p : 0);
    if (r->n) r->p++, r->n--;
  }
  return v;
}

FUZZ_NOCOV static double take_dbl(rd *r) {
  uint64_t bits = take(r, 8);
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

static const double le_a[] = {0.005, 0.01, 0.5, 1, 30};
static const double le_b[] = {0.1, 2.5, 300};

/* ---- the text format ---------------------------------------------------------- */

FUZZ_NOCOV static bool name_ok(const char *s, size_t n) {
  if (n == 0) return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!(isalpha(c) || c == '_' || c == ':' || (i > 0 && isdigit(c)))) return false;
  }
  return true;
}

FUZZ_NOCOV static bool value_ok(const char *s) {
  if (!strcmp(s, "NaN") || !strcmp(s, "+Inf") || !strcmp(s, "-Inf")) return true;
  char *end;
  double v = strtod(s, &end);
  return end != s && *end == 0 && isfinite(v);
}

/* What a label value must read as: the model of its field (cut as the
 * snapshot's snprintf cut it). */
typedef struct {
  char job[3 * 64 + 1], node[3 * EA_NAME_MAX + 1], id[3 * 33 + 1], version[3 * 32 + 1],
      role[3 * EA_ROLE_MAX + 1];
} want_labels;

FUZZ_NOCOV static const char *want_of(const want_labels *w, const char *k, size_t kl) {
  if (kl == 3 && !memcmp(k, "job", 3)) return w->job;
  if (kl == 4 && !memcmp(k, "node", 4)) return w->node;
  if (kl == 2 && !memcmp(k, "id", 2)) return w->id;
  if (kl == 7 && !memcmp(k, "version", 7)) return w->version;
  if (kl == 4 && !memcmp(k, "role", 4)) return w->role;
  return NULL;
}

/* One sample line: NAME{K="V",…} VALUE */
FUZZ_NOCOV static void check_sample(const char *l, size_t n, const char *typed,
                                    const want_labels *w) {
  size_t nl = strcspn(l, "{ ");
  CHECK(nl < n && name_ok(l, nl));
  CHECK(typed[0] && strncmp(l, typed, strlen(typed)) == 0); /* of the family last TYPEd */
  CHECK(l[nl] == '{');
  size_t i = nl + 1;
  bool job = false, node = false;
  static char val[4096];
  for (;;) {
    size_t kl = strcspn(l + i, "=");
    CHECK(i + kl < n && name_ok(l + i, kl));
    const char *k = l + i;
    i += kl + 1;
    CHECK(l[i] == '"');
    i++;
    size_t vl = 0;
    while (l[i] != '"') {
      CHECK(i < n && l[i] != '\n');
      if (l[i] == '\\') {
        i++;
        CHECK(l[i] == '\\' || l[i] == '"' || l[i] == 'n');
        val[vl++] = l[i] == 'n' ? '\n' : l[i];
      } else {
        val[vl++] = l[i];
      }
      CHECK(vl < sizeof val);
      i++;
    }
    val[vl] = 0;
    i++;
    const char *want = want_of(w, k, kl);
    if (want) CHECK(strcmp(val, want) == 0);
    job |= kl == 3 && !memcmp(k, "job", 3);
    node |= kl == 4 && !memcmp(k, "node", 4);
    if (l[i] == ',') {
      i++;
      continue;
    }
    CHECK(l[i] == '}');
    i++;
    break;
  }
  CHECK(job && node);
  CHECK(l[i] == ' ');
  char num[64];
  size_t ml = n - i - 1;
  CHECK(ml > 0 && ml < sizeof num);
  memcpy(num, l + i + 1, ml);
  num[ml] = 0;
  CHECK(value_ok(num));
}

FUZZ_NOCOV static void check_exposition(const char *b, size_t len, const want_labels *w) {
  CHECK(len > 0 && b[len - 1] == '\n');
  char typed[160] = "";
  for (const char *l = b; l < b + len;) {
    const char *e = memchr(l, '\n', (size_t)(b + len - l));
    CHECK(e);
    size_t n = (size_t)(e - l);
    if (n >= 7 && !memcmp(l, "# HELP ", 7)) {
      size_t nl = strcspn(l + 7, " \n");
      CHECK(name_ok(l + 7, nl) && l[7 + nl] == ' ');
      /* help text: "\\" only as an escape, no raw newline (the line ends it) */
      for (size_t i = 8 + nl; i < n; i++)
        if (l[i] == '\\') CHECK(l[i + 1] == '\\' || l[i + 1] == 'n');
    } else if (n >= 7 && !memcmp(l, "# TYPE ", 7)) {
      size_t nl = strcspn(l + 7, " \n");
      CHECK(name_ok(l + 7, nl) && nl < sizeof typed);
      const char *t = l + 8 + nl;
      size_t tl = (size_t)(e - t);
      CHECK((tl == 7 && !memcmp(t, "counter", 7)) || (tl == 5 && !memcmp(t, "gauge", 5)) ||
            (tl == 9 && !memcmp(t, "histogram", 9)));
      memcpy(typed, l + 7, nl);
      typed[nl] = 0;
    } else {
      check_sample(l, n, typed, w);
    }
    l = e + 1;
  }
}

/* ---- the harness ---------------------------------------------------------------- */

/* The answer rep to method and url, with the snapshot s (have_snap) at now,
 * against the promises. */
FUZZ_NOCOV static void check_reply(const char *method, const char *url, bool have_snap,
                                   const ea__mx_snap *s, uint64_t now, const ea__http_reply *rep) {
  CHECK(rep->body != NULL); /* no allocation fails here */
  CHECK(strlen(rep->body) == rep->len);
  CHECK(rep->len > 0 && rep->body[rep->len - 1] == '\n');
  CHECK(fuzz_utf8_valid(rep->body, rep->len));
  CHECK(rep->allow == (rep->code == 405));

  bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
  bool metrics = !strcmp(url, "/metrics"), healthz = !strcmp(url, "/healthz"),
       readyz = !strcmp(url, "/readyz"), index = !strcmp(url, "/"),
       api_status = !strcmp(url, "/api/v1/status"), api_history = !strcmp(url, "/api/v1/history");
  bool api = api_status || api_history;
  const char *doc = !have_snap ? NULL : api_status ? s->status_json : s->history_json;
  CHECK(rep->csp == NULL || (get && index));
  uint64_t real_age = now > s->mono_ms ? now - s->mono_ms : 0;
  bool fresh = real_age <= EA__HEALTH_MAX_AGE_MS;
  static char want[3 * 4096 + 256], m[3 * 4096 + 1];
  unsigned code;
  if (!get) {
    code = 405;
    fuzz_utf8_model(method, 64, true, m);
    snprintf(want, sizeof want, "method %s not allowed: GET or HEAD\n", m);
  } else if (index) {
    code = 200;
    want[0] = 0;
    size_t n;
    const char *page = ea__page_html(&n);
    CHECK(rep->len == n && memcmp(rep->body, page, n) == 0);
    CHECK(!strcmp(rep->type, "text/html; charset=utf-8"));
    CHECK(rep->csp && strstr(rep->csp, "connect-src 'self'"));
  } else if (api) {
    CHECK(!strcmp(rep->type, "application/json"));
    if (!have_snap) {
      code = 503;
      snprintf(want, sizeof want, "{\"error\":\"starting\"}\n");
    } else if (!doc) {
      code = 503;
      want[0] = 0;
      CHECK(!strncmp(rep->body, "{\"error\":\"warming up: ", 22));
    } else {
      code = 200;
      fuzz_utf8_model(doc, (size_t)-1, false, m);
      snprintf(want, sizeof want, "%s\n", m);
    }
  } else if (!metrics && !healthz && !readyz) {
    code = 404;
    fuzz_utf8_model(url, 200, true, m);
    snprintf(want, sizeof want,
             "not found: %s (try /, /metrics, /healthz, /readyz, /api/v1/status, "
             "/api/v1/history)\n",
             m);
  } else if (!have_snap) {
    code = 503;
    snprintf(want, sizeof want, "starting\n");
  } else if (healthz) {
    code = fresh ? 200 : 503;
    snprintf(want, sizeof want, "%s", fresh ? "ok\n" : "");
  } else if (readyz) {
    code = !fresh ? 503 : s->ready ? 200 : 503;
    if (fresh) {
      fuzz_utf8_model(s->ready_why, sizeof s->ready_why, true, m);
      snprintf(want, sizeof want, "%s\n", m);
    } else {
      want[0] = 0;
    }
  } else {
    code = 200;
    want[0] = 0;
  }
  CHECK(rep->code == code);
  if (want[0]) CHECK(strcmp(rep->body, want) == 0);
  if (!(get && index) && !(metrics && get && have_snap) && !(get && api && doc))
    CHECK(memchr(rep->body, '\n', rep->len) == rep->body + rep->len - 1); /* one line */
  if (metrics && get && have_snap) {
    CHECK(strcmp(rep->type, "text/plain; version=0.0.4; charset=utf-8") == 0);
    static want_labels w;
    fuzz_utf8_model(s->job, (size_t)-1, false, w.job);
    fuzz_utf8_model(s->node, (size_t)-1, false, w.node);
    fuzz_utf8_model(s->id, (size_t)-1, false, w.id);
    fuzz_utf8_model(s->version, (size_t)-1, false, w.version);
    fuzz_utf8_model(s->role, (size_t)-1, false, w.role);
    check_exposition(rep->body, rep->len, &w);
  } else if (!(get && (index || api))) {
    CHECK(strcmp(rep->type, "text/plain; charset=utf-8") == 0);
  }
}

/* The next NUL-separated string of the input (empty once it ran out). */
FUZZ_NOCOV static const char *next_str(const uint8_t **p, size_t *n, char *buf, size_t cap) {
  size_t k = 0;
  while (*n && **p) {
    if (k + 1 < cap) buf[k++] = (char)**p;
    (*p)++, (*n)--;
  }
  if (*n) (*p)++, (*n)--; /* the NUL */
  buf[k] = 0;
  return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2 || size > 1 << 15) return 0;
  rd r = {data + 2, size - 2 < NUMS ? size - 2 : NUMS};
  const uint8_t *sp = data + 2 + r.n;
  size_t sn = size - 2 - r.n;
  static char f_method[4096], f_url[4096], f_job[4096], f_node[4096], f_id[4096], f_ver[4096],
      f_role[4096], f_why[4096], f_status[4096], f_history[4096];
  next_str(&sp, &sn, f_method, sizeof f_method);
  next_str(&sp, &sn, f_url, sizeof f_url);
  next_str(&sp, &sn, f_job, sizeof f_job);
  next_str(&sp, &sn, f_node, sizeof f_node);
  next_str(&sp, &sn, f_id, sizeof f_id);
  next_str(&sp, &sn, f_ver, sizeof f_ver);
  next_str(&sp, &sn, f_role, sizeof f_role);
  next_str(&sp, &sn, f_why, sizeof f_why);
  next_str(&sp, &sn, f_status, sizeof f_status);
  next_str(&sp, &sn, f_history, sizeof f_history);

  static const char *const methods[] = {"GET", "HEAD", "POST"};
  static const char *const paths[] = {"/metrics", "/healthz",       "/readyz",        "/",
                                      "",         "/api/v1/status", "/api/v1/history"};
  const char *method = data[0] % 4 < 3 ? methods[data[0] % 4] : f_method;
  const char *url = data[1] % 8 < 7 ? paths[data[1] % 8] : f_url;

  uint64_t flags = take(&r, 2);
  bool have_snap = !(flags & 1);
  static ea__mx_snap snap;
  ea__mx_snap *s = &snap;
  memset(s, 0, sizeof *s);
  snprintf(s->job, sizeof s->job, "%s", f_job);
  snprintf(s->node, sizeof s->node, "%s", f_node);
  snprintf(s->id, sizeof s->id, "%s", f_id);
  snprintf(s->version, sizeof s->version, "%s", f_ver);
  snprintf(s->role, sizeof s->role, "%s", f_role);
  snprintf(s->ready_why, sizeof s->ready_why, "%s", f_why);
  s->mono_ms = take(&r, 4) + 1000000;
  uint64_t age = take(&r, 2) * 16;                                           /* up to ~17 min */
  uint64_t now = flags & 2 ? s->mono_ms - (age & 0xffff) : s->mono_ms + age; /* or in its past */
  s->ready = flags & 4;
  s->controller = flags & 8;
  s->has_loss = flags & 16;
  s->stalled = flags & 32;
  s->ck_have_last = flags & 64;
  /* the page's JSON: the harness owns the texts (the snapshot is static) */
  s->status_json = flags & 128 ? f_status : NULL;
  s->history_json = flags & 256 ? f_history : NULL;
  s->start_time_s = take_dbl(&r);
  for (int i = 0; i < 4; i++) s->members[i] = take(&r, 2);
  s->generation = take(&r, 8);
  s->world = (uint32_t)take(&r, 2);
  s->held_out = (uint32_t)take(&r, 1);
  s->stragglers = (uint32_t)take(&r, 1);
  s->gens_committed = take(&r, 3);
  s->formations_started = take(&r, 2);
  s->formations_committed = take(&r, 2);
  s->formations_failed = take(&r, 2);
  s->formation = (ea__mx_hist){.le = le_a, .n = sizeof le_a / sizeof le_a[0]};
  s->persist = (ea__mx_hist){.le = le_b, .n = sizeof le_b / sizeof le_b[0]};
  for (int i = (int)take(&r, 1) % 4; i > 0; i--) ea__mx_hist_observe(&s->formation, take_dbl(&r));
  for (int i = (int)take(&r, 1) % 4; i > 0; i--) ea__mx_hist_observe(&s->persist, take_dbl(&r));
  s->step = take(&r, 8);
  s->steps_per_s = take_dbl(&r);
  s->loss = take_dbl(&r);
  s->since_step_s = take_dbl(&r);
  s->worker_failures = take(&r, 2);
  s->worker_restarts = take(&r, 2);
  s->ck_interval = (uint32_t)take(&r, 4);
  s->ck_committed = take(&r, 8);
  s->ck_failed = take(&r, 2);
  s->ck_skipped = take(&r, 2);
  s->ck_last_step = take(&r, 8);
  s->ck_last_time_s = take_dbl(&r);
  s->ck_bytes_written = take(&r, 8);
  s->ck_bytes_committed = take(&r, 8);
  s->gossip_in = take(&r, 4);
  s->gossip_out = take(&r, 4);
  s->gossip_drop_malformed = take(&r, 2);
  s->ctl_drop_unauth = take(&r, 2);
  for (int k = 0; k < EA__ALERT_KINDS; k++) s->alerts[k] = take(&r, 1);

  ea__http_reply rep;
  ea__http_answer(method, url, have_snap ? s : NULL, now, &rep);
  check_reply(method, url, have_snap, s, now, &rep);
  free(rep.body);
  return 0;
}
