/* preflight_net.c — the checks of `elastic-agent preflight` that go over
 * the network (preflight.h): a real push-pull with each seed (--join), and
 * probes over the control channel to the agents the seeds know, which say
 * whether they see the same checkpoint directory and how far their clocks
 * are from ours.  preflight.c holds the command, the local checks and the
 * row table these add to.
 *
 * The seed check is a real push-pull: our frame carries no members (so
 * the seed merges nothing: preflight never appears in the member table)
 * and the seed answers with its full state, sealed with its key.  A seed
 * with another key (or none) drops our frame and closes the connection,
 * which is how "does not accept our key" shows.  The clock offset comes
 * from the probe's answers (the push-pull carries no time).
 */
#include "agent_int.h"
#include "preflight.h"
#include "probe.h"

#include "ea_log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A seed that does not answer a push-pull within this is unreachable for a
 * join too (the transport's own deadline is EA_TRANSPORT_SYNC_TIMEOUT_MS). */
#define SEED_TIMEOUT_MS 3000
/* Probe answers: a thread-pool read of one small file and a round trip. */
#define PROBE_TIMEOUT_MS 3000
#define PROBE_MAX_PEERS 64
/* Beyond this, log lines and alert times of different nodes disagree
 * visibly (one generation change takes about a second). */
#define CLOCK_WARN_MS 500.0

/* Wall-clock microseconds: the probes' send and receive times. */
static uint64_t wall_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void random_hex(char *out, size_t nbytes) {
  uint8_t b[32];
  if (nbytes > sizeof b) nbytes = sizeof b;
  if (getrandom(b, nbytes, 0) != (ssize_t)nbytes)
    for (size_t i = 0; i < nbytes; i++) b[i] = (uint8_t)(rand() ^ getpid() ^ (int)i);
  for (size_t i = 0; i < nbytes; i++) sprintf(out + 2 * i, "%02x", b[i]);
  out[2 * nbytes] = 0;
}

/* ---- the seeds: a push-pull each ----------------------------------------------------- */

/* One push-pull with sa: 0 with the seed's state, else a negative errno
 * with a sentence in why. */
static int pushpull(const struct sockaddr *sa, socklen_t sl, const uint8_t *key, ea__pf_seed *out,
                    char *why, size_t wl) {
  double deadline = ea__pf_mono_ms() + SEED_TIMEOUT_MS;
  int s = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return snprintf(why, wl, "socket: %s", strerror(errno)), -errno;
  int rc = connect(s, sa, sl);
  if (rc < 0 && errno != EINPROGRESS) {
    int e = errno;
    close(s);
    snprintf(why, wl, "connect: %s", strerror(e));
    return -e;
  }
  if (rc < 0) {
    rc = ea__pf_wait_fd(s, POLLOUT, deadline);
    int soerr = 0;
    socklen_t el = sizeof soerr;
    if (rc == 0 && getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &el) == 0 && soerr) rc = -soerr;
    if (rc < 0) {
      close(s);
      snprintf(why, wl, "connect: %s", strerror(-rc));
      return rc;
    }
  }
  socklen_t ll = sizeof out->local;
  getsockname(s, (struct sockaddr *)&out->local, &ll);
  /* Our frame: no members, so the seed merges nothing. */
  ea_node_id me;
  if (getrandom(me.b, sizeof me.b, 0) != sizeof me.b) memset(me.b, 0x7e, sizeof me.b);
  uint8_t *plain = NULL;
  size_t plen = 0;
  rc = ea_wire_encode_state(EA_SYNC_PERIODIC, &me, NULL, 0, &plain, &plen);
  if (rc < 0) {
    close(s);
    return snprintf(why, wl, "cannot encode a push-pull frame"), rc;
  }
  /* The push-pull framing (wire_frame.c), as the transport writes it. */
  uint8_t frame[EA_WIRE_FRAME_HDR_MAX + 256];
  size_t flen = 0;
  ea_wire_sender once = {.id = me, .epoch = 1};
  rc = ea_wire_frame_encode(key, &once, plain, plen, EA_WIRE_MAX_FRAME, frame, sizeof frame, &flen);
  free(plain);
  if (rc < 0) {
    close(s);
    return snprintf(why, wl, "cannot seal a push-pull frame"), rc;
  }
  size_t sent = 0;
  while (sent < flen) {
    if ((rc = ea__pf_wait_fd(s, POLLOUT, deadline)) < 0) break;
    ssize_t w = send(s, frame + sent, flen - sent, MSG_NOSIGNAL);
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (w < 0) {
      rc = -errno;
      break;
    }
    sent += (size_t)w;
  }
  if (rc < 0) {
    close(s);
    return snprintf(why, wl, "sending: %s", strerror(-rc)), rc;
  }
  /* The answer, through the same reader as the agents' own (ea_wire.h). */
  ea_wire_reader rd = {.key = key, .max_len = EA_WIRE_MAX_FRAME + EA_WIRE_SEAL_RP_OVERHEAD};
  int ev = EA_WIRE_RD_MORE;
  const char *herr = "?";
  bool header = false;
  rc = 0;
  while (rc == 0 && ev != EA_WIRE_RD_FRAME) {
    uint8_t buf[4096];
    if ((rc = ea__pf_wait_fd(s, POLLIN, deadline)) < 0) break;
    ssize_t r = read(s, buf, sizeof buf);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) {
      rc = r < 0 ? -errno : header || rd.hdr_got ? -EPIPE : -ECONNRESET;
      break;
    }
    for (size_t off = 0, used = 0; off < (size_t)r && ev != EA_WIRE_RD_FRAME && rc == 0;
         off += used) {
      ev = ea_wire_reader_feed(&rd, buf + off, (size_t)r - off, &used, &herr);
      if (ev < 0) rc = ev;
      if (ev == EA_WIRE_RD_HEADER) header = true;
      if (ev == EA_WIRE_RD_HEADER && (rd.flags & EA_WIRE_FRAME_BUSY)) rc = -EBUSY;
    }
  }
  close(s);
  if (!header && (rc == -ECONNRESET || rc == -EPIPE)) {
    ea_wire_reader_free(&rd);
    snprintf(why, wl,
             key ? "it closed the connection without answering: it did not accept our key (it "
                   "has another one, or none), or it is not an agent's gossip port"
                 : "it closed the connection without answering: it did not accept our unsealed "
                   "frame (it has a cluster key: pass --key-file)");
    return -EACCES;
  }
  if (!header && rc == -EBADMSG) {
    ea_wire_reader_free(&rd);
    return snprintf(why, wl,
                    key ? "its answer does not open with our key (it has another one, or none)"
                        : "it answered sealed: it has a cluster key, pass --key-file"),
           -EACCES;
  }
  if (rc == -EBUSY) {
    ea_wire_reader_free(&rd);
    return snprintf(why, wl, "busy: it has too many push-pull connections open; try again"), -EBUSY;
  }
  if (!header && (rc == -EA_EWIRE || rc == -EMSGSIZE)) {
    ea_wire_reader_free(&rd);
    return snprintf(why, wl, "answered a frame that is not an elastic-agent's (%s)", herr), -EPROTO;
  }
  if (!header) {
    ea_wire_reader_free(&rd);
    return snprintf(why, wl, "no answer within %d ms: %s", SEED_TIMEOUT_MS, strerror(-rc)), rc;
  }
  if (rc < 0) {
    ea_wire_reader_free(&rd);
    return snprintf(why, wl, "its answer was cut short: %s", strerror(-rc)), rc;
  }
  uint8_t *body = rd.body; /* ours now: freed below */
  const size_t n = rd.len;
  uint8_t *open_buf = malloc(n);
  if (!open_buf) {
    free(body);
    return snprintf(why, wl, "out of memory"), -ENOMEM;
  }
  const uint8_t *p = body;
  size_t pl = n;
  if (key && body[0] != EA_WIRE_MAGIC_SEALED_RP && body[0] != EA_WIRE_MAGIC_SEALED) {
    free(body), free(open_buf);
    return snprintf(why, wl, "it answered unsealed: it runs without a cluster key"), -EACCES;
  }
  if (key) {
    ea_wire_rp rp;
    int orc = ea_wire_open_rp(key, body, n, open_buf, n, &pl, &rp);
    if (orc == -EPROTO) {
      free(body), free(open_buf);
      return snprintf(why, wl, "it answered without a replay header: an agent of an older version"),
             -EPROTO;
    }
    if (orc < 0) {
      free(body), free(open_buf);
      return snprintf(why, wl, "its answer does not open with our key"), -EACCES;
    }
    p = open_buf;
  } else if (body[0] == EA_WIRE_MAGIC_SEALED || body[0] == EA_WIRE_MAGIC_SEALED_RP) {
    free(body), free(open_buf);
    return snprintf(why, wl, "it answered sealed: it has a cluster key, pass --key-file"), -EACCES;
  }
  uint8_t kind;
  const char *err = "?";
  rc = ea_wire_decode_state(p, pl, &kind, &out->id, &out->ups, &out->n, &err);
  free(body), free(open_buf);
  if (rc < 0) return snprintf(why, wl, "its answer does not decode (%s)", err), -EPROTO;
  return 0;
}

/* "host:port", "[v6]:port", "host" (port 7000). */
static int split_hostport(const char *spec, char *host, size_t hcap, char *port, size_t pcap) {
  const char *h = spec, *colon;
  size_t hl;
  if (spec[0] == '[') {
    const char *rb = strchr(spec, ']');
    if (!rb) return -EINVAL;
    h = spec + 1, hl = (size_t)(rb - h);
    colon = rb[1] == ':' ? rb + 1 : NULL;
  } else {
    colon = strrchr(spec, ':');
    if (colon && strchr(spec, ':') != colon) colon = NULL; /* a bare v6 address */
    hl = colon ? (size_t)(colon - spec) : strlen(spec);
  }
  if (hl == 0 || hl >= hcap) return -EINVAL;
  memcpy(host, h, hl);
  host[hl] = 0;
  snprintf(port, pcap, "%s", colon && colon[1] ? colon + 1 : "7000");
  return 0;
}

size_t ea__pf_check_seeds(const char *join, const uint8_t *key, ea__pf_seed *res, size_t cap) {
  char copy[4096];
  snprintf(copy, sizeof copy, "%s", join);
  size_t ns = 0;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok && ns < cap; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ') tok++;
    if (!*tok) continue;
    ea__pf_seed *r = &res[ns++];
    memset(r, 0, sizeof *r);
    snprintf(r->spec, sizeof r->spec, "%s", tok);
    char host[256], port[16], why[512] = "";
    if (split_hostport(tok, host, sizeof host, port, sizeof port) < 0) {
      ea__pf_add("seed", ST_FAIL, "--join takes host:port[,host:port...]", "%s: cannot parse", tok);
      continue;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(host, port, &hints, &ai);
    if (g != 0) {
      ea__pf_add("seed", ST_FAIL, "check the name in --join (DNS), or give an address", "%s: %s",
                 tok, gai_strerror(g));
      continue;
    }
    int rc = -ENOENT;
    int tried = 0;
    for (struct addrinfo *i = ai; i && tried < 8 && !r->ok; i = i->ai_next, tried++) {
      rc = pushpull(i->ai_addr, i->ai_addrlen, key, r, why, sizeof why);
      if (rc == 0) {
        r->ok = true;
        ea_addr_from_sockaddr(i->ai_addr, &r->addr);
      }
    }
    freeaddrinfo(ai);
    if (!r->ok) {
      const char *hint =
          rc == -EACCES ? "every node needs the same --key-file (or all none): copy the cluster's "
                          "key file here"
          : rc == -ECONNREFUSED
              ? "no agent listens there: is it running, with this --bind port? (TCP and UDP "
                "7000 by default)"
              : "check the address, that the agent runs, and the firewall (TCP and UDP gossip "
                "port)";
      ea__pf_add("seed", ST_FAIL, hint, "%s: %s", tok, why);
      continue;
    }
    size_t alive = 0;
    const char *name = "?";
    for (size_t k = 0; k < r->n; k++) {
      if (r->ups[k].state == EA_STATE_ALIVE) alive++;
      if (ea_node_id_cmp(&r->ups[k].id, &r->id) == 0 && r->ups[k].has_meta)
        name = r->ups[k].meta.name;
    }
    char as[64];
    ea_addr_str(&r->addr, as, sizeof as);
    ea__pf_add("seed", ST_PASS, NULL, "%s (%s, %s) answered%s: %zu members, %zu alive", tok, name,
               as, key ? " and accepted our key" : "", r->n, alive);
  }
  return ns;
}

/* ---- the shared checkpoint directory and the clock: probes over the control channel - */

typedef struct {
  ea_node_id id;
  char name[EA_NAME_MAX];
  ea_addr ctl;
  uint64_t nonce, t_send, t_recv;
  bool answered;
  ea__probe_msg ans;
} peer;

typedef struct {
  uv_loop_t loop;
  uv_timer_t timer;
  ea__ctl *ctl;
  peer *peers;
  size_t npeers, answered;
} probe_run;

static void probe_ignore(void *ctx, const ea_rdzv_msg *m) {
  (void)ctx, (void)m;
}

static bool probe_hook(void *ctx, const uint8_t *plain, size_t len) {
  probe_run *pr = ctx;
  if (!ea__probe_wire_is(plain, len)) return true;
  static ea__probe_msg m;
  if (ea__probe_decode(plain, len, &m, NULL) != 0 || m.type != EA__PROBE_ANS) return true;
  for (size_t i = 0; i < pr->npeers; i++) {
    peer *p = &pr->peers[i];
    if (p->answered || p->nonce != m.nonce) continue;
    p->t_recv = wall_us();
    p->answered = true;
    p->ans = m;
    if (++pr->answered == pr->npeers) uv_stop(&pr->loop);
    break;
  }
  return true;
}

static void probe_timeout(uv_timer_t *t) {
  uv_stop(t->loop);
}

static void ctl_closed(void *ctx) {
  *(bool *)ctx = true;
}

static void noop_close(uv_handle_t *h) {
  (void)h;
}

void ea__pf_check_shared(const char *ckdir, const uint8_t *key, ea__pf_seed *seeds, size_t nseeds) {
  /* The members to ask: alive workers in the first answering seed's view. */
  ea__pf_seed *s = NULL;
  for (size_t i = 0; i < nseeds && !s; i++)
    if (seeds[i].ok) s = &seeds[i];
  if (!s) {
    ea__pf_add("ckpt_shared", ST_WARN, "make a seed answer first (see the seed rows)",
               "not checked: no seed answered");
    ea__pf_add("clock", ST_WARN, NULL, "not checked: no seed answered");
    return;
  }
  static peer peers[PROBE_MAX_PEERS];
  size_t np = 0;
  for (size_t k = 0; k < s->n && np < PROBE_MAX_PEERS; k++) {
    const ea_update *u = &s->ups[k];
    if (u->state != EA_STATE_ALIVE || !u->has_meta || strcmp(u->meta.role, "worker") != 0 ||
        u->meta.control.family == 0)
      continue;
    peer *p = &peers[np++];
    memset(p, 0, sizeof *p);
    p->id = u->id;
    p->ctl = u->meta.control;
    snprintf(p->name, sizeof p->name, "%s", u->meta.name);
  }
  if (np == 0) {
    ea__pf_add("ckpt_shared", ST_WARN, NULL, "not checked: the cluster has no alive worker agent");
    ea__pf_add("clock", ST_WARN, NULL, "not checked: the cluster has no alive worker agent");
    return;
  }
  char token[80], hex[33], file[EA__PROBE_FILE_MAX], path[EA_PATH_MAX + 64];
  random_hex(hex, 16);
  snprintf(file, sizeof file, "%s%s", EA__PROBE_FILE_PREFIX, hex);
  random_hex(token, 24);
  snprintf(path, sizeof path, "%s/%s", ckdir, file);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  size_t tl = strlen(token);
  if (fd < 0 || write(fd, token, tl) != (ssize_t)tl || fsync(fd) < 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    unlink(path);
    ea__pf_add("ckpt_shared", ST_FAIL, NULL, "cannot write the probe file %s: %s", path,
               strerror(e));
    return;
  }
  close(fd);

  static probe_run pr;
  memset(&pr, 0, sizeof pr);
  pr.peers = peers;
  pr.npeers = np;
  uv_loop_init(&pr.loop);
  /* Our listener on the address we reached the seed from: the one the
   * peers can reach us at. */
  ea_addr bind;
  ea_addr_from_sockaddr((struct sockaddr *)&s->local, &bind);
  bind.port = 0;
  char err[512];
  int rc = ea__ctl_start(&pr.loop, &bind, key, NULL, probe_ignore, &pr, &pr.ctl, err, sizeof err);
  if (rc < 0) {
    unlink(path);
    uv_loop_close(&pr.loop);
    ea__pf_add("ckpt_shared", ST_WARN, NULL, "not checked: cannot listen for answers: %s", err);
    ea__pf_add("clock", ST_WARN, NULL, "not checked: cannot listen for answers");
    return;
  }
  ea__ctl_set_frame_hook(pr.ctl, probe_hook);
  ea_addr reply = bind;
  reply.port = ea__ctl_bound(pr.ctl)->port;
  ea_node_id me;
  if (getrandom(me.b, sizeof me.b, 0) != sizeof me.b) memset(me.b, 0x7d, sizeof me.b);
  static uint8_t buf[EA__PROBE_WIRE_MAX];
  for (size_t i = 0; i < np; i++) {
    ea__probe_msg q = {.type = EA__PROBE_REQ, .src = me, .reply_to = reply};
    if (getrandom(&q.nonce, sizeof q.nonce, 0) != sizeof q.nonce) q.nonce = i + 1;
    snprintf(q.file, sizeof q.file, "%s", file);
    snprintf(q.token, sizeof q.token, "%s", token);
    peers[i].nonce = q.nonce;
    size_t len;
    if (ea__probe_encode(&q, buf, sizeof buf, &len) != 0) continue;
    peers[i].t_send = wall_us();
    ea__ctl_send_bytes(pr.ctl, &peers[i].id, &peers[i].ctl, buf, len);
  }
  uv_timer_init(&pr.loop, &pr.timer);
  uv_timer_start(&pr.timer, probe_timeout, PROBE_TIMEOUT_MS, 0);
  uv_run(&pr.loop, UV_RUN_DEFAULT);
  bool closed = false;
  uv_timer_stop(&pr.timer);
  uv_close((uv_handle_t *)&pr.timer, noop_close);
  ea__ctl_close(pr.ctl, ctl_closed, &closed);
  uv_run(&pr.loop, UV_RUN_DEFAULT);
  uv_loop_close(&pr.loop);
  unlink(path);

  /* The directory: every peer must see the token. */
  char bad[1024] = "", none[512] = "", seen[512] = "";
  size_t nbad = 0, nnone = 0, nseen = 0;
  for (size_t i = 0; i < np; i++) {
    peer *p = &peers[i];
    char *dst = !p->answered ? none : p->ans.result == EA__PROBE_SEEN ? seen : bad;
    size_t cap = !p->answered                      ? sizeof none
                 : p->ans.result == EA__PROBE_SEEN ? sizeof seen
                                                   : sizeof bad;
    size_t used = strlen(dst);
    if (!p->answered) {
      snprintf(dst + used, cap - used, "%s%s", nnone++ ? ", " : "", p->name);
    } else if (p->ans.result == EA__PROBE_SEEN) {
      snprintf(dst + used, cap - used, "%s%s", nseen++ ? ", " : "", p->name);
    } else {
      snprintf(dst + used, cap - used, "%s%s: %s in %s%s%s", nbad++ ? "; " : "", p->name,
               ea__probe_result_str(p->ans.result), p->ans.dir, p->ans.error ? ": " : "",
               p->ans.error ? strerror((int)p->ans.error) : "");
    }
  }
  if (nbad)
    ea__pf_add(
        "ckpt_shared", ST_FAIL,
        "every node must see one checkpoint directory (the controller commits all ranks' shards "
        "from its own view of it): put checkpoint.dir on shared storage (NFS, a ReadWriteMany "
        "volume) and give every node the same path; the default, DATA_DIR/checkpoints, is per "
        "node",
        "%s is not the directory %zu of %zu agents see: %s", ckdir, nbad, np, bad);
  else if (nnone)
    ea__pf_add(
        "ckpt_shared", ST_WARN,
        "an agent that does not answer is an older version, its control port (gossip port + 1 "
        "by default) is firewalled from here, or it cannot connect back to this node (preflight "
        "takes the answers on an ephemeral TCP port)",
        "%zu of %zu agents see %s (%s); no answer from %s", nseen, np, ckdir, nseen ? seen : "none",
        none);
  else
    ea__pf_add("ckpt_shared", ST_PASS, NULL, "all %zu agents see %s (%s)", np, ckdir, seen);

  /* The clock: NTP's offset estimate, error at most half the round trip. */
  double worst = 0, worst_err = 0;
  const char *worst_name = NULL;
  for (size_t i = 0; i < np; i++) {
    peer *p = &peers[i];
    if (!p->answered) continue;
    double mid = ((double)p->t_send + (double)p->t_recv) / 2;
    double off = ((double)p->ans.wall_us - mid) / 1e3;
    if (!worst_name || fabs(off) > fabs(worst)) {
      worst = off;
      worst_err = ((double)p->t_recv - (double)p->t_send) / 2e3;
      worst_name = p->name;
    }
  }
  if (!worst_name)
    ea__pf_add("clock", ST_WARN, NULL, "not checked: no agent answered");
  else if (fabs(worst) - worst_err > CLOCK_WARN_MS)
    ea__pf_add("clock", ST_WARN,
               "log lines, alert times and checkpoint times of different nodes will disagree: run "
               "NTP (chrony, systemd-timesyncd) on every node",
               "%s is %+.1f ms (± %.1f ms) from this node", worst_name, worst, worst_err);
  else
    ea__pf_add("clock", ST_PASS, NULL, "largest offset %+.1f ms (± %.1f ms), %s", worst, worst_err,
               worst_name);
}
