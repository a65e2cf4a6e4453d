/* The HTTP listener of observability.metrics_listen: GET /metrics,
 * /healthz and /readyz, served by libmicrohttpd in a thread of its own.
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
 * libmicrohttpd parses the requests (method, path, headers, limits); this
 * file compares the method and the path it hands over and parses nothing
 * itself, which is why there is no fuzz harness for it.  Limits: 64
 * connections at once, 10 s idle timeout, libmicrohttpd's 32 KiB of
 * request memory per connection.
 *
 * We bind the socket ourselves and hand it over (MHD_OPTION_LISTEN_SOCKET):
 * the error names the address and the errno, port 0 works (the bound port
 * is read back and logged), and the socket is close-on-exec so the
 * workers, which the agent spawns, never inherit it.
 */
#include "agent_int.h"

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

/* 64 at once: a Prometheus or two, the kubelet's probes, a person with
 * curl; past that something is hammering the port. */
#define HTTP_MAX_CONNECTIONS 64
/* Seconds an idle connection is kept (Prometheus reuses its connection
 * between scrapes 15 s apart, and reconnects cheaply). */
#define HTTP_IDLE_TIMEOUT_S 10
#define HTTP_BACKLOG 64

typedef struct {
  int refs; /* under ea__http.mu */
  ea__mx_snap *s;
} held;

struct ea__http {
  struct MHD_Daemon *d;
  pthread_mutex_t mu;
  held *cur;
  atomic_uint_fast64_t requests;
};

static void held_put(ea__http *h, held *x) {
  if (!x) return;
  pthread_mutex_lock(&h->mu);
  int r = --x->refs;
  pthread_mutex_unlock(&h->mu);
  if (r == 0) {
    free(x->s);
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
    free(s); /* the previous snapshot stays: /healthz will see it age */
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

uint64_t ea__http_requests(const ea__http *h) {
  return atomic_load((atomic_uint_fast64_t *)&h->requests);
}

/* Queue a response whose body is the malloc'd text (freed by
 * libmicrohttpd); NULL text (out of memory) is a 500 without a body. */
static enum MHD_Result answer(struct MHD_Connection *c, unsigned code, char *text, size_t len,
                              const char *type) {
  if (!text) {
    code = MHD_HTTP_INTERNAL_SERVER_ERROR;
    len = 0;
  }
  struct MHD_Response *r = MHD_create_response_from_buffer(
      len, text ? text : (char *)"", text ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (!r) {
    free(text);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  enum MHD_Result ok = MHD_queue_response(c, code, r);
  MHD_destroy_response(r);
  return ok;
}

static enum MHD_Result answer_text(struct MHD_Connection *c, unsigned code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum MHD_Result answer_text(struct MHD_Connection *c, unsigned code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  int n = vasprintf(&s, fmt, ap);
  va_end(ap);
  if (n < 0) s = NULL;
  return answer(c, code, s, s ? (size_t)n : 0, "text/plain; charset=utf-8");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  ea__http *h = cls;
  (void)version, (void)upload_data, (void)upload_data_size, (void)con_cls;
  atomic_fetch_add(&h->requests, 1);
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
    return answer_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method %s not allowed: GET or HEAD\n",
                       method);
  bool metrics = strcmp(url, "/metrics") == 0, healthz = strcmp(url, "/healthz") == 0,
       readyz = strcmp(url, "/readyz") == 0;
  if (strcmp(url, "/") == 0)
    return answer_text(c, MHD_HTTP_OK,
                       "elastic-agent\n/metrics  Prometheus text exposition\n"
                       "/healthz  200 while the agent's loop answers\n"
                       "/readyz   200 while joined and training makes steps; else 503 and why\n");
  if (!metrics && !healthz && !readyz)
    return answer_text(c, MHD_HTTP_NOT_FOUND,
                       "not found: %.200s (try /metrics, /healthz, /readyz)\n", url);
  held *x = held_get(h);
  if (!x) return answer_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "starting\n");
  const ea__mx_snap *s = x->s;
  enum MHD_Result rc;
  uint64_t now = uv_hrtime() / 1000000u;
  uint64_t age = now > s->mono_ms ? now - s->mono_ms : 0;
  if (healthz) {
    if (age <= EA__HEALTH_MAX_AGE_MS)
      rc = answer_text(c, MHD_HTTP_OK, "ok\n");
    else
      rc = answer_text(c, MHD_HTTP_SERVICE_UNAVAILABLE,
                       "the agent's loop has not answered for %.1f s (limit %.1f s)\n",
                       (double)age / 1000.0, EA__HEALTH_MAX_AGE_MS / 1000.0);
  } else if (readyz) {
    if (age > EA__HEALTH_MAX_AGE_MS)
      rc = answer_text(c, MHD_HTTP_SERVICE_UNAVAILABLE,
                       "not ready: the agent's loop has not answered for %.1f s\n",
                       (double)age / 1000.0);
    else
      rc = answer_text(c, s->ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, "%s\n",
                       s->ready_why);
  } else {
    ea_sb b = {0};
    ea__mx_format(s, &b);
    if (b.oom) {
      ea_sb_free(&b);
      rc = answer(c, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, 0, "text/plain");
    } else {
      rc = answer(c, MHD_HTTP_OK, b.buf, b.len, "text/plain; version=0.0.4; charset=utf-8");
    }
  }
  held_put(h, x);
  return rc;
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
  /* The server's thread inherits the signal mask: block everything there,
   * so SIGTERM, SIGINT and SIGCHLD reach the loop's handlers only. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG, 0,
                          NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                          MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT,
                          (unsigned)HTTP_MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
                          (unsigned)HTTP_IDLE_TIMEOUT_S, MHD_OPTION_END);
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
    free(x->s);
    free(x);
  }
  pthread_mutex_destroy(&h->mu);
  free(h);
}
