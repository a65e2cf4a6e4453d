/* The HTTP listener of observability.metrics_listen: GET /metrics,
 * /healthz and /readyz, the page (/) and its JSON (/api/v1/status,
 * /api/v1/history), served by libmicrohttpd in a thread of its own.
 *
 * Why a thread and not the agent's libuv loop: a scrape must not cost the
 * loop that carries gossip a format or a slow client, and /healthz must be
 * able to say "the loop is stuck" — which an endpoint served by that loop
 * could never do.  The thread reads nothing of the agent: the loop
 * publishes an immutable snapshot every EA__MX_PERIOD_MS (metrics.c) and
 * this file keeps the newest one behind a mutex with a reference count,
 * so a request formats a snapshot that stays valid however long it takes
 * while the loop goes on publishing newer ones.
 *
 * The page is static (page.c embeds it) and reads only the two JSON
 * documents, which the loop formats into the snapshot too — only while
 * someone looks (ea__http_wanted: a request for them in the last
 * EA__PAGE_IDLE_MS), so an agent nobody watches pays nothing for them.
 * Nothing served here changes the cluster: every method but GET and HEAD
 * is refused.  The page's Content-Security-Policy lets it run its own
 * inline script and style and fetch from this agent only; a browser then
 * refuses any other request even if a string from a member got through as
 * markup (the page writes every string as text: page.html).
 *
 * libmicrohttpd parses the requests (method, path, headers, limits); this
 * file compares the method and the path it hands over and parses nothing
 * itself.  What it answers is a pure function (ea__http_answer) of those
 * two, the snapshot and the time, which tests/fuzz/fuzz_http.c drives
 * with arbitrary bytes; a body repeats what it was sent only as UTF-8
 * (U+FFFD for what is not), as its charset says.
 *
 * Held connections must not starve the kubelet's probe (issue 27: 70 idle
 * connections from one host made every /healthz time out, and a liveness
 * probe would then restart a healthy agent).  So a connection is admitted
 * only while its source (an IPv4 address, an IPv6 /64) holds fewer than
 * HTTP_PER_SOURCE; one over is closed as soon as it is accepted, before
 * libmicrohttpd gives it a buffer, and counted (refused_per_source).
 *
 * The total, HTTP_MAX_CONNECTIONS, is shared max-min fairly rather than
 * first come, first served: 64 sources at their own limit fill it, and a
 * kubelet's probe from a 65th would otherwise be refused because of them.
 * When all are taken, a newcomer whose source holds c connections evicts
 * the oldest connection of the source that holds the most, M, if M >= c + 2
 * (after it, that source holds M - 1 >= c + 1, as many as the newcomer's or
 * more, so two sources never take a slot back and forth); otherwise every
 * source holds at most c + 1 and the newcomer is refused.  So a source is
 * refused for want of room only when the 512 are spread over at least
 * 512 / (c + 1) sources — 256 for a probe's source, which holds at most
 * one.  The eviction is a shutdown(2) of the victim's socket, which
 * libmicrohttpd sees on its next loop turn and closes as a client's hang-up
 * (its descriptor stays libmicrohttpd's to close); evicted connections
 * count as refused_full, like newcomers refused, and no longer count
 * against their source or the total while they wait to be closed.  The
 * oldest of the biggest source: the connection that has had the most
 * service from the source that has the most; ties between sources go to
 * the first found.
 *
 * A connection that has not sent a whole request within
 * HTTP_FIRST_REQUEST_TIMEOUT_S is closed (counted too); one that has gets
 * HTTP_IDLE_TIMEOUT_S between requests.  We count per source ourselves
 * (the accept policy and the connection notifications) rather than through
 * MHD_OPTION_PER_IP_CONNECTION_LIMIT because libmicrohttpd refuses over
 * that limit before any callback, silently: nothing could count it.  All
 * these callbacks run on libmicrohttpd's one polling thread.  Beyond
 * that, libmicrohttpd's 32 KiB of request memory per connection.
 *
 * We bind the socket ourselves and hand it over (MHD_OPTION_LISTEN_SOCKET):
 * the error names the address and the errno, port 0 works (the bound port
 * is read back and logged), and the socket is close-on-exec so the
 * workers, which the agent spawns, never inherit it.
 */
#include "obs.h"

#include "ea_log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

/* Connections from one source at once: a Prometheus keeps one, the
 * kubelet opens one per probe (three kinds), a person with curl; 8 is
 * twice that.  A source is an IPv4 address or an IPv6 /64 (what one host
 * is given). */
#define HTTP_PER_SOURCE 8
/* Connections at once, all sources: 64 sources at their per-source limit;
 * 25 hostile sources (issue 27) hold at most 200 and leave the rest to the
 * prober.  Each costs a descriptor and at most 32 KiB. */
#define HTTP_MAX_CONNECTIONS 512
/* libmicrohttpd's own limit, above ours so that ours (which counts) is
 * the one that refuses: ours plus the evicted ones not yet closed (a few
 * per loop turn: libmicrohttpd accepts at most 11 per turn and closes an
 * evicted one on the next).  Past it we refuse rather than evict, so
 * libmicrohttpd never reaches its limit (at which it would stop accepting
 * and leave connects waiting in the kernel's queue). */
#define HTTP_MHD_LIMIT (HTTP_MAX_CONNECTIONS + 64)
/* Seconds a connection has to send its first whole request: a probe or a
 * scraper sends it at once; 2 s allows a slow network and frees what an
 * idle or trickling client holds. */
#define HTTP_FIRST_REQUEST_TIMEOUT_S 2
/* Seconds an idle connection is kept after a request (Prometheus reuses its
 * connection between scrapes 15 s apart, and reconnects cheaply). */
#define HTTP_IDLE_TIMEOUT_S 10
/* Connections waiting to be accepted: a burst of connects is accepted (and
 * the over-limit ones closed) at once rather than dropped by the kernel,
 * which a client would see as a connect taking a 1 s SYN retransmit. */
#define HTTP_BACKLOG 1024

/* A connection's own record (libmicrohttpd's socket context), owned by this
 * file from NOTIFY_STARTED to NOTIFY_CLOSED. */
typedef struct http_conn http_conn;
struct http_conn {
  uint8_t key[16];
  struct MHD_Connection *c;
  http_conn *prev, *next; /* in its source's list, oldest first, while counted */
  bool requested;         /* a whole request arrived */
  bool counted;           /* in its source's count and list (the address was known) */
  bool evicted;           /* shut down to make room; not in the total any more */
};

/* One source that holds connections now: its key, how many, and which
 * (oldest first: the one an eviction takes).  Moved by value when another
 * is removed; the list's links live in the connections. */
typedef struct {
  uint8_t key[16];
  uint32_t conns;
  http_conn *oldest, *newest;
} http_source;

typedef struct {
  int refs; /* under ea__http.mu */
  ea__mx_snap *s;
} held;

struct ea__http {
  struct MHD_Daemon *d;
  pthread_mutex_t mu;
  held *cur;
  atomic_uint_fast64_t requests;
  /* Sources holding connections now (at most HTTP_MAX_CONNECTIONS, so a
   * linear walk: a few microseconds per accept); libmicrohttpd's thread
   * only. */
  http_source src[HTTP_MAX_CONNECTIONS];
  uint32_t nsrc;
  uint32_t open;     /* admitted, not closed, not evicted: what the limit counts */
  uint32_t evicting; /* evicted, not closed yet */
  atomic_uint_fast64_t refused_source, refused_full, closed_unrequested;
  /* CLOCK_MONOTONIC ms + 1 of the last request for the page or its JSON;
   * 0: none yet (ea__http_wanted). */
  atomic_uint_fast64_t wanted_ms;
};

static void held_put(ea__http *h, held *x) {
  if (!x) return;
  pthread_mutex_lock(&h->mu);
  int r = --x->refs;
  pthread_mutex_unlock(&h->mu);
  if (r == 0) {
    ea__mx_snap_free(x->s);
    free(x);
  }
}

static held *held_get(ea__http *h) {
  pthread_mutex_lock(&h->mu);
  held *x = h->cur;
  if (x) x->refs++;
  pthread_mutex_unlock(&h->mu);
  return x;
}

void ea__http_publish(ea__http *h, ea__mx_snap *s) {
  held *x = malloc(sizeof *x);
  if (!x) {
    ea__mx_snap_free(s); /* the previous snapshot stays: /healthz will see it age */
    return;
  }
  x->refs = 1;
  x->s = s;
  pthread_mutex_lock(&h->mu);
  held *old = h->cur;
  h->cur = x;
  pthread_mutex_unlock(&h->mu);
  held_put(h, old);
}

bool ea__http_wanted(const ea__http *h, uint64_t now_ms) {
  uint64_t w = atomic_load((atomic_uint_fast64_t *)&h->wanted_ms);
  return w && (now_ms + 1 < w || now_ms + 1 - w < EA__PAGE_IDLE_MS);
}

uint64_t ea__http_requests(const ea__http *h) {
  return atomic_load((atomic_uint_fast64_t *)&h->requests);
}

void ea__http_stats_get(const ea__http *h, ea__http_stats *out) {
  ea__http *m = (ea__http *)h;
  out->requests = atomic_load(&m->requests);
  out->refused_per_source = atomic_load(&m->refused_source);
  out->refused_full = atomic_load(&m->refused_full);
  out->closed_unrequested = atomic_load(&m->closed_unrequested);
}

/* ---- admission, per source -------------------------------------------------- */

/* The source of addr: an IPv4 address (also when mapped into IPv6) or an
 * IPv6 /64; false for another family (admitted, not counted). */
static bool source_key(const struct sockaddr *addr, socklen_t len, uint8_t key[16]) {
  memset(key, 0, 16);
  if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
    memcpy(key + 12, &((const struct sockaddr_in *)addr)->sin_addr, 4);
    key[10] = key[11] = 0xff;
    return true;
  }
  if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
    const uint8_t *a = ((const struct sockaddr_in6 *)addr)->sin6_addr.s6_addr;
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memcpy(key, a, memcmp(a, v4mapped, 12) == 0 ? 16 : 8);
    return true;
  }
  return false;
}

static http_source *source_find(ea__http *h, const uint8_t key[16]) {
  for (uint32_t i = 0; i < h->nsrc; i++)
    if (memcmp(h->src[i].key, key, 16) == 0) return &h->src[i];
  return NULL;
}

/* Takes hc out of its source's count and list; forgets a source left with
 * none. */
static void source_drop(ea__http *h, http_conn *hc) {
  http_source *x = hc->counted ? source_find(h, hc->key) : NULL;
  hc->counted = false;
  if (!x) return;
  if (hc->prev)
    hc->prev->next = hc->next;
  else
    x->oldest = hc->next;
  if (hc->next)
    hc->next->prev = hc->prev;
  else
    x->newest = hc->prev;
  hc->prev = hc->next = NULL;
  if (x->conns && --x->conns == 0) *x = h->src[--h->nsrc];
}

/* All are taken and a newcomer's source holds c: make room by shutting
 * down the oldest connection of the source that holds the most, if that
 * is at least c + 2 (the rule and why: the header comment).  False: no
 * room is fair to make. */
static bool evict_for(ea__http *h, uint32_t c) {
  http_source *big = NULL;
  for (uint32_t i = 0; i < h->nsrc; i++)
    if (!big || h->src[i].conns > big->conns) big = &h->src[i];
  if (!big || big->conns < c + 2 || !big->oldest) return false;
  http_conn *victim = big->oldest;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(victim->c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!ci || shutdown(ci->connect_fd, SHUT_RDWR) != 0) return false;
  source_drop(h, victim);
  victim->evicted = true;
  h->open--;
  h->evicting++;
  atomic_fetch_add(&h->refused_full, 1);
  return true;
}

/* libmicrohttpd asks before it sets a connection up: refuse a source at its
 * limit; once all are taken, make room fairly or refuse. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
  ea__http *h = cls;
  uint8_t key[16];
  const http_source *x = source_key(addr, addrlen, key) ? source_find(h, key) : NULL;
  if (x && x->conns >= HTTP_PER_SOURCE) {
    atomic_fetch_add(&h->refused_source, 1);
    return MHD_NO;
  }
  if (h->open < HTTP_MAX_CONNECTIONS) return MHD_YES;
  if (h->open + h->evicting < HTTP_MHD_LIMIT && evict_for(h, x ? x->conns : 0)) return MHD_YES;
  atomic_fetch_add(&h->refused_full, 1);
  return MHD_NO;
}

/* Every admitted connection starts and closes here: the per-source count,
 * and whether it closed without a whole request (a timeout, or a client
 * that gave up). */
static void on_connection(void *cls, struct MHD_Connection *c, void **ctx,
                          enum MHD_ConnectionNotificationCode what) {
  ea__http *h = cls;
  if (what == MHD_CONNECTION_NOTIFY_STARTED) {
    http_conn *hc = calloc(1, sizeof *hc);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    *ctx = hc;
    h->open++;
    if (!hc) return;
    hc->c = c;
    if (!ci || !ci->client_addr) return;
    /* libmicrohttpd does not say the address's length: the family does. */
    socklen_t len = ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                           : sizeof(struct sockaddr_in);
    if (!source_key(ci->client_addr, len, hc->key)) return;
    http_source *x = source_find(h, hc->key);
    if (!x && h->nsrc < HTTP_MAX_CONNECTIONS) {
      /* A slot past nsrc holds what was moved out of it: start afresh. */
      x = &h->src[h->nsrc++];
      *x = (http_source){0};
      memcpy(x->key, hc->key, 16);
    }
    if (!x) return;
    x->conns++;
    hc->counted = true;
    hc->prev = x->newest;
    if (x->newest)
      x->newest->next = hc;
    else
      x->oldest = hc;
    x->newest = hc;
    return;
  }
  if (what != MHD_CONNECTION_NOTIFY_CLOSED) return;
  http_conn *hc = *ctx;
  *ctx = NULL;
  if (hc && hc->evicted) {
    if (h->evicting) h->evicting--;
  } else if (h->open) {
    h->open--;
  }
  if (!hc) return;
  if (!hc->requested && !hc->evicted) atomic_fetch_add(&h->closed_unrequested, 1);
  source_drop(h, hc);
  free(hc);
}

/* ---- the answers, pure ------------------------------------------------------ */

static const char text_type[] = "text/plain; charset=utf-8";

/* What an answer repeats of the request or the snapshot: UTF-8, at most max
 * bytes of s, control characters as '?' (the answer stays one line). */
static void put_text(ea_sb *b, const char *s, size_t max) {
  size_t from = b->len;
  ea_sb_put_utf8(b, s, max);
  if (b->oom) return;
  for (size_t i = from; i < b->len; i++)
    if ((unsigned char)b->buf[i] < 0x20 || b->buf[i] == 0x7f) b->buf[i] = '?';
}

/* The page's policy: its own inline script and style, fetches to this
 * agent, images only as data: URLs; nothing else, and no framing. */
static const char page_csp[] =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";
static const char json_ctype[] = "application/json";

/* A JSON error document: {"error":"…"} and a newline. */
static void json_error(ea_sb *b, const char *msg) {
  ea_sb_puts(b, "{\"error\":");
  ea_sb_json_str(b, msg);
  ea_sb_puts(b, "}\n");
}

void ea__http_answer(const char *method, const char *url, const ea__mx_snap *s, uint64_t now_ms,
                     ea__http_reply *r) {
  memset(r, 0, sizeof *r);
  r->type = text_type;
  ea_sb b = {0};
  bool metrics = strcmp(url, "/metrics") == 0, healthz = strcmp(url, "/healthz") == 0,
       readyz = strcmp(url, "/readyz") == 0, api_status = strcmp(url, "/api/v1/status") == 0,
       api_history = strcmp(url, "/api/v1/history") == 0;
  uint64_t age = s && now_ms > s->mono_ms ? now_ms - s->mono_ms : 0;
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    r->code = MHD_HTTP_METHOD_NOT_ALLOWED;
    r->allow = true;
    ea_sb_puts(&b, "method ");
    put_text(&b, method, 64);
    ea_sb_puts(&b, " not allowed: GET or HEAD\n");
  } else if (strcmp(url, "/") == 0) {
    size_t n;
    const char *page = ea__page_html(&n);
    r->code = MHD_HTTP_OK;
    r->type = "text/html; charset=utf-8";
    r->csp = page_csp;
    ea_sb_putn(&b, page, n);
  } else if (api_status || api_history) {
    const char *doc = !s ? NULL : api_status ? s->status_json : s->history_json;
    r->type = json_ctype;
    if (!s) {
      r->code = MHD_HTTP_SERVICE_UNAVAILABLE;
      json_error(&b, "starting");
    } else if (!doc) {
      r->code = MHD_HTTP_SERVICE_UNAVAILABLE;
      json_error(&b,
                 "warming up: the agent formats this document while someone asks for it; "
                 "ask again in 0.5 s");
    } else {
      r->code = MHD_HTTP_OK;
      /* The loop's JSON is UTF-8 already; put_utf8 keeps the promise
       * whatever is handed over. */
      ea_sb_put_utf8(&b, doc, (size_t)-1);
      ea_sb_puts(&b, "\n");
    }
  } else if (!metrics && !healthz && !readyz) {
    r->code = MHD_HTTP_NOT_FOUND;
    ea_sb_puts(&b, "not found: ");
    put_text(&b, url, 200);
    ea_sb_puts(&b, " (try /, /metrics, /healthz, /readyz, /api/v1/status, /api/v1/history)\n");
  } else if (!s) {
    r->code = MHD_HTTP_SERVICE_UNAVAILABLE;
    ea_sb_puts(&b, "starting\n");
  } else if (healthz) {
    if (age <= EA__HEALTH_MAX_AGE_MS) {
      r->code = MHD_HTTP_OK;
      ea_sb_puts(&b, "ok\n");
    } else {
      r->code = MHD_HTTP_SERVICE_UNAVAILABLE;
      ea_sb_printf(&b, "the agent's loop has not answered for %.1f s (limit %.1f s)\n",
                   (double)age / 1000.0, EA__HEALTH_MAX_AGE_MS / 1000.0);
    }
  } else if (readyz) {
    if (age > EA__HEALTH_MAX_AGE_MS) {
      r->code = MHD_HTTP_SERVICE_UNAVAILABLE;
      ea_sb_printf(&b, "not ready: the agent's loop has not answered for %.1f s\n",
                   (double)age / 1000.0);
    } else {
      /* The reason names --join specs and members (any bytes) and was cut
       * by its buffer, perhaps inside a character. */
      r->code = s->ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
      put_text(&b, s->ready_why, sizeof s->ready_why);
      ea_sb_puts(&b, "\n");
    }
  } else {
    r->code = MHD_HTTP_OK;
    r->type = "text/plain; version=0.0.4; charset=utf-8";
    ea__mx_format(s, &b);
  }
  if (b.oom || !b.buf) {
    ea_sb_free(&b);
    r->code = MHD_HTTP_INTERNAL_SERVER_ERROR;
    r->type = text_type;
    r->allow = false;
    r->csp = NULL;
    return;
  }
  r->body = b.buf;
  r->len = b.len;
}

/* ---- the server ------------------------------------------------------------------ */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  ea__http *h = cls;
  (void)version, (void)upload_data, (void)upload_data_size, (void)con_cls;
  atomic_fetch_add(&h->requests, 1);
  /* A whole request came: this connection has earned the longer idle
   * timeout between requests. */
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  http_conn *hc = ci ? ci->socket_context : NULL;
  if (hc && !hc->requested) {
    hc->requested = true;
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S);
  }
  /* The page or its JSON: the loop formats the documents from now on. */
  if (strcmp(url, "/") == 0 || strncmp(url, "/api/", 5) == 0)
    atomic_store(&h->wanted_ms, uv_hrtime() / 1000000u + 1);
  held *x = held_get(h);
  ea__http_reply r;
  ea__http_answer(method, url, x ? x->s : NULL, uv_hrtime() / 1000000u, &r);
  held_put(h, x);
  /* The body (freed by libmicrohttpd); none (out of memory): a 500 without one. */
  struct MHD_Response *resp = MHD_create_response_from_buffer(
      r.len, r.body ? r.body : (char *)"", r.body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (!resp) {
    free(r.body);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r.type);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  if (r.allow) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  /* Every answer: no type sniffing, no referrer; the page: its policy. */
  MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
  if (r.csp) MHD_add_response_header(resp, "Content-Security-Policy", r.csp);
  enum MHD_Result ok = MHD_queue_response(c, r.code, resp);
  MHD_destroy_response(resp);
  return ok;
}

/* libmicrohttpd's own complaints (a client that sent garbage, out of
 * connections): debug lines, from its thread (ea_log writes a line at a
 * time). */
static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  if (!ea_log_enabled(EA_LOG_DEBUG)) return;
  char line[512];
  vsnprintf(line, sizeof line, fmt, ap);
  size_t n = strlen(line);
  while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
  ea_log(EA_LOG_DEBUG, "metrics", "http: %s", line);
}

/* HOST:PORT → host and port strings; IPv6 in brackets. */
static int split_listen(const char *spec, char *host, size_t hostlen, char *port, size_t portlen) {
  const char *colon = strrchr(spec, ':');
  if (!colon || colon == spec || !colon[1]) return -EINVAL;
  const char *h = spec;
  size_t n = (size_t)(colon - spec);
  if (h[0] == '[') {
    if (n < 3 || h[n - 1] != ']') return -EINVAL;
    h++;
    n -= 2;
  }
  if (n >= hostlen || strlen(colon + 1) >= portlen) return -EINVAL;
  memcpy(host, h, n);
  host[n] = 0;
  snprintf(port, portlen, "%s", colon + 1);
  return 0;
}

static int listen_socket(const char *spec, int *fdp, char *bound, size_t boundlen, char *err,
                         size_t errlen) {
  char host[256], port[16];
  if (split_listen(spec, host, sizeof host, port, sizeof port) < 0) {
    snprintf(err, errlen, "cannot parse '%s' as HOST:PORT", spec);
    return -EINVAL;
  }
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *res = NULL;
  int g = getaddrinfo(host, port, &hints, &res);
  if (g != 0) {
    snprintf(err, errlen, "cannot resolve '%s': %s", spec, gai_strerror(g));
    return -EINVAL;
  }
  int rc = -EADDRNOTAVAIL, fd = -1;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      rc = -errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, HTTP_BACKLOG) == 0) {
      rc = 0;
      break;
    }
    rc = -errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (rc < 0) {
    snprintf(err, errlen, "cannot listen on %s: %s", spec, strerror(-rc));
    return rc;
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char h[INET6_ADDRSTRLEN + 1] = "?", p[8] = "?";
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
    getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p,
                NI_NUMERICHOST | NI_NUMERICSERV);
  snprintf(bound, boundlen, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", h, p);
  *fdp = fd;
  return 0;
}

int ea__http_start(const char *spec, ea__http **out, char *bound, size_t boundlen, char *err,
                   size_t errlen) {
  *out = NULL;
  ea__http *h = calloc(1, sizeof *h);
  if (!h) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  int fd = -1;
  int rc = listen_socket(spec, &fd, bound, boundlen, err, errlen);
  if (rc < 0) {
    free(h);
    return rc;
  }
  pthread_mutex_init(&h->mu, NULL);
  atomic_init(&h->requests, 0);
  atomic_init(&h->refused_source, 0);
  atomic_init(&h->refused_full, 0);
  atomic_init(&h->closed_unrequested, 0);
  atomic_init(&h->wanted_ms, 0);
  /* The server's thread inherits the signal mask: block everything there,
   * so SIGTERM, SIGINT and SIGCHLD reach the loop's handlers only. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG, 0,
                          on_accept, h, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                          MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT,
                          (unsigned)HTTP_MHD_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT,
                          (unsigned)HTTP_FIRST_REQUEST_TIMEOUT_S, MHD_OPTION_NOTIFY_CONNECTION,
                          on_connection, h, MHD_OPTION_END);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (!h->d) {
    snprintf(err, errlen, "cannot start the HTTP server on %s (libmicrohttpd refused)", bound);
    close(fd);
    pthread_mutex_destroy(&h->mu);
    free(h);
    return -EIO;
  }
  *out = h;
  return 0;
}

void ea__http_stop(ea__http *h) {
  if (!h) return;
  MHD_stop_daemon(h->d); /* joins its thread; closes the listening socket */
  held *x = h->cur;
  h->cur = NULL;
  if (x) {
    ea__mx_snap_free(x->s);
    free(x);
  }
  pthread_mutex_destroy(&h->mu);
  free(h);
}
