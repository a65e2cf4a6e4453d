/* comm_tcp.c — the tcp communicator: a ring of TCP connections, a
 * bandwidth-optimal pipelined ring allreduce, ring broadcast, and failure
 * handling that never waits longer than the op timeout.
 *
 * Why a ring.  Each rank holds exactly two connections (send to the right
 * neighbour, receive from the left), and an allreduce of N bytes moves
 * 2(W−1)/W·N bytes through every link — the lower bound for any allreduce —
 * in a reduce-scatter (W−1 steps: each rank adds the segment it receives to
 * its own and passes it on) followed by an allgather (W−1 steps: the fully
 * reduced segments travel round once more).  Every segment is reduced by the
 * ranks in one fixed order and its final bytes are *copied* to everybody, so
 * every rank ends with bitwise identical results.
 *
 * Why one poll loop per op.  Both directions run at once on non-blocking
 * sockets: a rank writes chunk k of step t while it reads chunk k of step
 * t−1 from the left.  The whole op is one send stream and one receive stream;
 * the only coupling is that the bytes sent in step t are the bytes received
 * (and reduced) in step t−1, so the send side may run ahead up to what the
 * receive side has finished.  Reductions happen per chunk as chunks arrive,
 * out of a cache-sized staging buffer.  In the allgather the receive side
 * writes straight into the caller's buffer: the ring's causality guarantees
 * the bytes being overwritten were already sent (they are what came back).
 *
 * Why it cannot hang.  Every wait is a poll() bounded by the op's deadline,
 * with an eventfd that ea_comm_abort() writes.  Abort and any failure also
 * shutdown() both sockets, so the neighbours' polls wake with EOF/RST and
 * they fail too — one rank's failure sweeps around the ring within a few
 * round trips (each hop may first drain what its socket already holds,
 * milliseconds on loopback).  Each op starts with a 32-byte header (kind, dtype, op, root,
 * count, sequence) so ranks running different ops fail with -EPROTO instead
 * of silently mixing streams.
 *
 * Connecting.  Each rank connects to its right neighbour's listener and
 * accepts its left neighbour, both at once; the hello carries generation,
 * world and ranks.  A hello from an older generation is refused (that
 * connection is a leftover of a formation that has been superseded) and the
 * acceptor keeps waiting; a hello from a newer generation means this plan is
 * obsolete, and init fails with -ESTALE.
 */
#include "comm_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

/* Reduction chunk: received data is staged and reduced this many bytes at a
 * time, and the next step may forward it as soon as it is reduced.  128 KiB:
 * staging buffer plus destination chunk stay in L2 (256 KiB and up on
 * current server cores), and per-chunk bookkeeping is noise next to copying
 * 128 KiB.  Measured with bench/allreduce (W=3, 4–64 MiB, CPU per op) against
 * 32 KiB and 1 MiB on a shared, loaded 2-core machine: 32 KiB was within the
 * noise, 1 MiB cost ~10% more CPU at 64 MiB (docs/comm.md). */
#ifndef CHUNK_BYTES /* overridable only to repeat that measurement */
#define CHUNK_BYTES (128u << 10)
#endif
/* Connect retry backoff while the right neighbour is not listening yet:
 * 5 ms first (a peer in the same rendezvous starts within milliseconds),
 * doubling to 100 ms so a slow peer costs at most 0.1 s of extra latency. */
#define CONNECT_BACKOFF_MIN_MS 5
#define CONNECT_BACKOFF_MAX_MS 100
/* Accepted connections whose hello is still being read.  Only one is
 * legitimate; the rest are leftovers or strays, so a handful is plenty. */
#define MAX_PENDING 8
/* listen(2) backlog: one real connection per generation plus stale ones. */
#define LISTEN_BACKLOG 64

enum {
  HELLO_FIELDS = 32,
  HELLO_TAG = 16,
  HELLO_BYTES = HELLO_FIELDS + HELLO_TAG,
  OPHDR_BYTES = 32
};
#define HELLO_MAGIC 0x45414331u /* "EAC1" */
#define OPHDR_MAGIC 0x45414f50u /* "EAOP" */
/* 2: the hello and ack grew a 16-byte tag (the ring token, issue 11). */
#define PROTO_VERSION 2
enum { KIND_HELLO = 1, KIND_ACK = 2 };
/* Ack status: what the acceptor thinks of the hello. */
enum { ACK_OK = 0, ACK_YOU_ARE_STALE = 1, ACK_I_AM_STALE = 2, ACK_BAD_RANK = 3 };
enum { OP_ALLREDUCE = 1, OP_BROADCAST = 2, OP_BARRIER = 3 };

/*  hello / ack, 48 bytes, little endian:
 *   0  u32 magic "EAC1"      4  u16 version   6  u16 kind (hello|ack)
 *   8  u32 world            12  u32 from rank 16  u32 to rank
 *  20  u32 status (ack)     24  u64 generation
 *  32  tag[16]: BLAKE2b-128 keyed with the plan's hello_key over bytes
 *      0..31 (crypto_generichash); zero, and not checked, without a key.
 *      A hello whose tag does not verify is closed unanswered and counted
 *      (hellos_refused), so a host without the cluster key can neither make
 *      a rank's init fail (-ESTALE by a forged newer generation) nor take
 *      the left neighbour's place.  Replaying a real hello of the same
 *      generation is not prevented (the tag has no connection binding).
 *
 *  op header, 32 bytes, little endian, first on every op's stream:
 *   0  u32 magic "EAOP"      4  u8 kind  5 u8 dtype  6 u8 op  7 u8 0
 *   8  u32 root             12  u32 world
 *  16  u64 count (elements; bytes for broadcast)     24  u64 op sequence
 */

static void put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) {
  return (uint16_t)(p[0] | p[1] << 8);
}
static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

enum { RECV_NONE = 0, RECV_COPY = 1, RECV_REDUCE = 2 };

/* One step of an op: a byte range of the caller's buffer to send right and
 * one to receive from the left.  The send is allowed only as far as the
 * receive of step `dep` has got (-1: no dependency). */
typedef struct {
  size_t soff, slen;
  size_t roff, rlen;
  int rmode;
  long dep;
} step;

typedef struct {
  atomic_int left_fd, right_fd; /* published once connected; -1 before */
  int efd;                      /* abort eventfd */
  int listen_fd, own_listen;
  char right_addr[EA_COMM_ADDR_MAX];
  char self_addr[EA_COMM_ADDR_MAX];
  uint8_t *stage; /* CHUNK_BYTES, reduction staging */
  step *steps;
  size_t steps_cap;
  bool has_hello_key; /* the plan's ring token: hellos carry its tag */
  uint8_t hello_key[EA_COMM_HELLO_KEY_BYTES];
} tcp_be;

/* ---- addresses ---------------------------------------------------------- */

/* Split "host:port" / "[v6]:port" into host and port.  0 or -EINVAL. */
static int split_addr(const char *addr, char *host, size_t hcap, char *port, size_t pcap) {
  if (!addr) return -EINVAL;
  const char *colon, *hs, *he;
  if (addr[0] == '[') {
    he = strchr(addr, ']');
    if (!he || he[1] != ':') return -EINVAL;
    hs = addr + 1;
    colon = he + 1;
  } else {
    colon = strrchr(addr, ':');
    if (!colon) return -EINVAL;
    hs = addr;
    he = colon;
  }
  size_t hl = (size_t)(he - hs), pl = strlen(colon + 1);
  if (hl == 0 || hl >= hcap || pl == 0 || pl >= pcap) return -EINVAL;
  for (size_t i = 0; i < pl; i++)
    if (colon[1 + i] < '0' || colon[1 + i] > '9') return -EINVAL;
  if (atol(colon + 1) > 65535) return -EINVAL;
  memcpy(host, hs, hl);
  host[hl] = 0;
  memcpy(port, colon + 1, pl + 1);
  return 0;
}

static int resolve(const char *addr, int passive, struct sockaddr_storage *ss, socklen_t *len) {
  char host[256], port[8];
  if (split_addr(addr, host, sizeof host, port, sizeof port) < 0) return -EINVAL;
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  int g = getaddrinfo(host, port, &hints, &res);
  if (g != 0 || !res) return g == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

static void format_addr(const struct sockaddr_storage *ss, char *out, size_t cap) {
  char h[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
    inet_ntop(AF_INET, &a->sin_addr, h, sizeof h);
    port = ntohs(a->sin_port);
    snprintf(out, cap, "%s:%u", h, port);
  } else {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
    inet_ntop(AF_INET6, &a->sin6_addr, h, sizeof h);
    port = ntohs(a->sin6_port);
    snprintf(out, cap, "[%s]:%u", h, port);
  }
}

static int bind_listen(const char *addr, int *fd_out, struct sockaddr_storage *bound) {
  struct sockaddr_storage ss;
  socklen_t len;
  int rc = resolve(addr, 1, &ss, &len);
  if (rc < 0) return rc;
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
    rc = -errno;
    close(fd);
    return rc;
  }
  socklen_t bl = sizeof *bound;
  if (getsockname(fd, (struct sockaddr *)bound, &bl) < 0) {
    rc = -errno;
    close(fd);
    return rc;
  }
  *fd_out = fd;
  return 0;
}

int ea_comm_listen(const char *bind_addr, int *fd_out, char *addr_out, size_t addr_cap) {
  if (!bind_addr || !fd_out || !addr_out || addr_cap == 0) return -EINVAL;
  struct sockaddr_storage bound;
  int fd, rc = bind_listen(bind_addr, &fd, &bound);
  if (rc < 0) return rc;
  char tmp[EA_COMM_ADDR_MAX];
  format_addr(&bound, tmp, sizeof tmp);
  if (strlen(tmp) >= addr_cap) {
    close(fd);
    return -ENOSPC;
  }
  memcpy(addr_out, tmp, strlen(tmp) + 1);
  *fd_out = fd;
  return 0;
}

/* ---- construction --------------------------------------------------------- */

static const ea__comm_vt tcp_vt;

int ea__comm_tcp_new(ea_comm *c, const ea_comm_plan *p) {
  if (p->world > 1) {
    if (!p->peers) return -EINVAL;
    const char *right = p->peers[(p->rank + 1) % p->world];
    const char *self = p->peers[p->rank];
    if (!right || strlen(right) >= EA_COMM_ADDR_MAX) return -EINVAL;
    if (p->listen_fd < 0 && (!self || strlen(self) >= EA_COMM_ADDR_MAX)) return -EINVAL;
  }
  tcp_be *b = calloc(1, sizeof *b);
  if (!b) return -ENOMEM;
  atomic_init(&b->left_fd, -1);
  atomic_init(&b->right_fd, -1);
  b->listen_fd = p->listen_fd;
  b->has_hello_key = p->has_hello_key;
  if (p->has_hello_key) {
    if (sodium_init() < 0) {
      free(b);
      return -EIO;
    }
    memcpy(b->hello_key, p->hello_key, sizeof b->hello_key);
  }
  b->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (b->efd < 0) {
    int rc = -errno;
    free(b);
    return rc;
  }
  if (p->world > 1) {
    snprintf(b->right_addr, sizeof b->right_addr, "%s", p->peers[(p->rank + 1) % p->world]);
    if (p->peers[p->rank]) snprintf(b->self_addr, sizeof b->self_addr, "%s", p->peers[p->rank]);
  }
  c->vt = &tcp_vt;
  c->be = b;
  return 0;
}

static void tcp_destroy(ea_comm *c) {
  tcp_be *b = c->be;
  if (!b) return;
  int l = atomic_load(&b->left_fd), r = atomic_load(&b->right_fd);
  if (l >= 0) close(l);
  if (r >= 0) close(r);
  if (b->own_listen && b->listen_fd >= 0) close(b->listen_fd);
  close(b->efd);
  free(b->stage);
  free(b->steps);
  sodium_memzero(b->hello_key, sizeof b->hello_key);
  free(b);
  c->be = NULL;
}

static void shut_both(tcp_be *b) {
  int l = atomic_load(&b->left_fd), r = atomic_load(&b->right_fd);
  if (l >= 0) shutdown(l, SHUT_RDWR);
  if (r >= 0) shutdown(r, SHUT_RDWR);
}

static void tcp_abort(ea_comm *c) {
  tcp_be *b = c->be;
  uint64_t one = 1;
  /* The eventfd wakes a poll in connect or an op; the shutdowns make the
   * neighbours' ops fail at once.  fds are never closed before free, and
   * free may not race with abort, so the descriptors read here are ours. */
  ssize_t w = write(b->efd, &one, sizeof one);
  (void)w;
  shut_both(b);
}

/* Retransmissions without an acknowledgement before unacknowledged bytes
 * count as evidence against the link: two RTO expiries, at least 200 ms +
 * 400 ms of silence at Linux's minimum RTO (a loss the link recovers from
 * is acknowledged after the first), and checked only once an op has
 * already failed, at its timeout or when a neighbour's failure reached us. */
#define BLAME_MIN_RETRANSMITS 2

/* ea_comm_blame's evidence on an op's failure, read before the sockets are
 * shut down: bytes we sent right that its host has not acknowledged while
 * our kernel retransmits them.  (The left neighbour being silent is no
 * evidence: in a stalled ring every rank waits on a silent left one.) */
static void blame_right(ea_comm *c) {
  tcp_be *b = c->be;
  int fd = atomic_load(&b->right_fd);
  if (fd < 0 || c->blame_rank >= 0 || c->world < 2) return;
  struct tcp_info ti;
  socklen_t tl = sizeof ti;
  memset(&ti, 0, sizeof ti);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) < 0) return;
  if (ti.tcpi_unacked == 0 || ti.tcpi_retransmits < BLAME_MIN_RETRANSMITS) return;
  uint32_t right = (c->rank + 1) % c->world;
  c->blame_rank = right;
  snprintf(c->blame_why, sizeof c->blame_why,
           "rank %u at %.64s acknowledged none of %u segments in flight (%u TCP retransmissions)",
           right, b->right_addr, ti.tcpi_unacked, ti.tcpi_retransmits);
}

static void tcp_fail(ea_comm *c, int err) {
  if (err != -ECANCELED) blame_right(c);
  shut_both(c->be);
}

/* ---- connecting the ring -------------------------------------------------- */

static void make_hello(uint8_t *h, const ea_comm *c, uint16_t kind, uint32_t from, uint32_t to,
                       uint32_t status) {
  memset(h, 0, HELLO_BYTES);
  put32(h, HELLO_MAGIC);
  put16(h + 4, PROTO_VERSION);
  put16(h + 6, kind);
  put32(h + 8, c->world);
  put32(h + 12, from);
  put32(h + 16, to);
  put32(h + 20, status);
  put64(h + 24, c->generation);
  tcp_be *b = c->be;
  if (b->has_hello_key)
    crypto_generichash(h + HELLO_FIELDS, HELLO_TAG, h, HELLO_FIELDS, b->hello_key,
                       sizeof b->hello_key);
}

/* The tag of a hello or ack: right, or not checked (no key). */
static bool hello_tag_ok(const ea_comm *c, const uint8_t *h) {
  const tcp_be *b = c->be;
  if (!b->has_hello_key) return true;
  uint8_t want[HELLO_TAG];
  crypto_generichash(want, HELLO_TAG, h, HELLO_FIELDS, b->hello_key, sizeof b->hello_key);
  return crypto_verify_16(want, h + HELLO_FIELDS) == 0;
}

/* Socket options for the data path.  TCP_NODELAY: small tail writes of a
 * step must not wait for an ACK (Nagle + delayed ACK costs 40 ms).  Buffer
 * sizes are left to the kernel's autotuning: on loopback it grows to
 * tcp_wmem/tcp_rmem max (4 MiB / 32 MiB here), while a fixed SO_SNDBUF is
 * capped at wmem_max and switches autotuning off — it measured slower. */
static void tune_data_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

typedef struct {
  int fd;
  size_t got;
  uint8_t buf[HELLO_BYTES];
} pending;

static int ms_until(uint64_t deadline_ns) {
  uint64_t now = ea__comm_now_ns();
  if (now >= deadline_ns) return 0;
  uint64_t ms = (deadline_ns - now + 999999) / 1000000;
  return ms > 60000 ? 60000 : (int)ms;
}

/* Judge a complete hello read from an accepted connection.  Returns 1 if it
 * is our left neighbour of this generation, 0 to drop it and keep waiting,
 * or a negative errno to fail init (a newer generation exists). */
static int judge_hello(ea_comm *c, int fd, const uint8_t *h) {
  uint8_t ack[HELLO_BYTES];
  uint32_t left = (c->rank + c->world - 1) % c->world;
  if (get32(h) != HELLO_MAGIC || get16(h + 4) != PROTO_VERSION || get16(h + 6) != KIND_HELLO)
    return 0; /* not one of ours: drop silently */
  if (!hello_tag_ok(c, h)) {
    c->stats.hellos_refused++; /* not from a holder of this generation's token */
    return 0;
  }
  uint64_t gen = get64(h + 24);
  uint32_t status, verdict;
  if (gen < c->generation) {
    status = ACK_YOU_ARE_STALE;
    verdict = 0;
  } else if (gen > c->generation) {
    status = ACK_I_AM_STALE;
    verdict = 2;
  } else if (get32(h + 8) != c->world || get32(h + 12) != left || get32(h + 16) != c->rank) {
    status = ACK_BAD_RANK;
    verdict = 0;
  } else {
    status = ACK_OK;
    verdict = 1;
  }
  make_hello(ack, c, KIND_ACK, c->rank, get32(h + 12), status);
  /* A 32-byte write into a fresh socket's empty send buffer is never short;
   * if it somehow is, the connection is not usable anyway. */
  ssize_t n = send(fd, ack, sizeof ack, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (verdict == 2) return -ESTALE;
  if (verdict == 1 && n != (ssize_t)sizeof ack) return 0;
  return (int)verdict;
}

enum { CONN_IDLE, CONN_CONNECTING, CONN_HELLO, CONN_ACK, CONN_DONE };

static int tcp_connect(ea_comm *c) {
  tcp_be *b = c->be;
  if (c->world == 1) return 0;
  int rc = 0;
  if (b->listen_fd < 0) {
    struct sockaddr_storage bound;
    rc = bind_listen(b->self_addr, &b->listen_fd, &bound);
    if (rc < 0) return rc;
    b->own_listen = 1;
  } else {
    /* A borrowed listener must not block us if another thread raced us to
     * a connection; ea_comm_listen makes it non-blocking already. */
    int fl = fcntl(b->listen_fd, F_GETFL);
    if (fl >= 0 && !(fl & O_NONBLOCK)) fcntl(b->listen_fd, F_SETFL, fl | O_NONBLOCK);
  }
  b->stage = malloc(CHUNK_BYTES);
  if (!b->stage) return -ENOMEM;

  struct sockaddr_storage rss;
  socklen_t rlen;
  rc = resolve(b->right_addr, 0, &rss, &rlen);
  if (rc < 0) return rc;

  uint64_t deadline = ea__comm_now_ns() + (uint64_t)c->init_timeout_ms * 1000000ull;
  uint32_t right = (c->rank + 1) % c->world;
  int cstate = CONN_IDLE, cfd = -1, backoff = CONNECT_BACKOFF_MIN_MS;
  uint64_t retry_at = 0;
  size_t coff = 0;
  uint8_t chello[HELLO_BYTES], cack[HELLO_BYTES];
  pending pend[MAX_PENDING];
  int npend = 0, left_fd = -1;
  make_hello(chello, c, KIND_HELLO, c->rank, right, 0);

  while (cstate != CONN_DONE || left_fd < 0) {
    if (atomic_load(&c->aborted)) {
      rc = -ECANCELED;
      break;
    }
    uint64_t now = ea__comm_now_ns();
    if (now >= deadline) {
      rc = -ETIMEDOUT;
      /* The right neighbour's host took our SYN, hello or ack wait to the
       * deadline without an answer: evidence against that link (a refused
       * connect, retried from CONN_IDLE, is an answer: its host is there). */
      if (cstate == CONN_CONNECTING || cstate == CONN_HELLO || cstate == CONN_ACK) {
        c->blame_rank = right;
        snprintf(c->blame_why, sizeof c->blame_why, "rank %u at %.64s did not answer %s in %u ms",
                 right, b->right_addr,
                 cstate == CONN_CONNECTING ? "our connect"
                 : cstate == CONN_HELLO    ? "while we sent our hello"
                                           : "our hello",
                 c->init_timeout_ms);
      }
      break;
    }
    /* Start (or restart) the outgoing connection. */
    if (cstate == CONN_IDLE && now >= retry_at) {
      cfd = socket(rss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (cfd < 0) {
        rc = -errno;
        break;
      }
      coff = 0;
      if (connect(cfd, (struct sockaddr *)&rss, rlen) == 0)
        cstate = CONN_HELLO;
      else if (errno == EINPROGRESS)
        cstate = CONN_CONNECTING;
      else {
        close(cfd);
        cfd = -1;
        retry_at = now + (uint64_t)backoff * 1000000ull;
        backoff = backoff * 2 > CONNECT_BACKOFF_MAX_MS ? CONNECT_BACKOFF_MAX_MS : backoff * 2;
        continue;
      }
    }
    struct pollfd pfd[3 + MAX_PENDING];
    int n = 0;
    pfd[n++] = (struct pollfd){.fd = b->efd, .events = POLLIN};
    int li = -1, ci = -1;
    if (left_fd < 0) {
      li = n;
      pfd[n++] = (struct pollfd){.fd = b->listen_fd, .events = POLLIN};
    }
    if (cstate == CONN_CONNECTING || cstate == CONN_HELLO || cstate == CONN_ACK) {
      ci = n;
      pfd[n++] = (struct pollfd){.fd = cfd, .events = cstate == CONN_ACK ? POLLIN : POLLOUT};
    }
    int pi = n;
    for (int i = 0; i < npend; i++) pfd[n++] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
    int tmo = ms_until(deadline);
    if (cstate == CONN_IDLE) {
      int r = ms_until(retry_at);
      if (r < tmo) tmo = r;
    }
    int pr = poll(pfd, (nfds_t)n, tmo);
    if (pr < 0) {
      if (errno == EINTR) continue;
      rc = -errno;
      break;
    }
    if (pfd[0].revents) {
      rc = -ECANCELED;
      break;
    }
    /* Hellos on accepted connections (before accepting more, so the
     * pending array indices in pfd are still the ones we built). */
    for (int i = npend - 1; i >= 0; i--) {
      if (!pfd[pi + i].revents) continue;
      ssize_t got =
          recv(pend[i].fd, pend[i].buf + pend[i].got, HELLO_BYTES - pend[i].got, MSG_DONTWAIT);
      int drop = 0, take = 0;
      if (got > 0) {
        pend[i].got += (size_t)got;
        if (pend[i].got == HELLO_BYTES) {
          int v = 0;
          if (left_fd < 0)
            v = judge_hello(c, pend[i].fd, pend[i].buf);
          else if (get32(pend[i].buf) == HELLO_MAGIC && !hello_tag_ok(c, pend[i].buf))
            c->stats.hellos_refused++; /* a forgery behind the real neighbour: count it too */
          if (v < 0) {
            rc = v;
            break;
          }
          if (v == 1)
            take = 1;
          else
            drop = 1;
        }
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        drop = 1;
      }
      if (take) {
        left_fd = pend[i].fd;
        pend[i] = pend[--npend];
      } else if (drop) {
        close(pend[i].fd);
        pend[i] = pend[--npend];
      }
    }
    if (rc < 0) break;
    if (li >= 0 && left_fd < 0 && pfd[li].revents) {
      for (;;) {
        int fd = accept4(b->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break; /* EAGAIN, or a transient error: poll again */
        if (npend == MAX_PENDING) {
          /* Strays crowding the table: drop the oldest; a real neighbour
           * retries from its side when its hello goes unanswered. */
          close(pend[0].fd);
          pend[0] = pend[--npend];
        }
        pend[npend++] = (pending){.fd = fd, .got = 0};
      }
    }
    if (ci >= 0 && pfd[ci].revents) {
      int err = 0;
      if (cstate == CONN_CONNECTING) {
        socklen_t el = sizeof err;
        getsockopt(cfd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err == 0) cstate = CONN_HELLO;
      }
      if (!err && cstate == CONN_HELLO) {
        ssize_t w = send(cfd, chello + coff, HELLO_BYTES - coff, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0)
          coff += (size_t)w;
        else if (w < 0 && errno != EAGAIN && errno != EINTR)
          err = errno;
        if (coff == HELLO_BYTES) {
          cstate = CONN_ACK;
          coff = 0;
        }
      } else if (!err && cstate == CONN_ACK) {
        ssize_t got = recv(cfd, cack + coff, HELLO_BYTES - coff, MSG_DONTWAIT);
        if (got > 0)
          coff += (size_t)got;
        else if (got == 0)
          err = ECONNRESET;
        else if (errno != EAGAIN && errno != EINTR)
          err = errno;
        if (coff == HELLO_BYTES) {
          if (get32(cack) != HELLO_MAGIC || get16(cack + 6) != KIND_ACK) {
            rc = -EPROTO;
            break;
          }
          if (!hello_tag_ok(c, cack)) {
            /* not our neighbour's answer: count it, and try again */
            c->stats.hellos_refused++;
            err = EAGAIN;
          }
          uint32_t st = get32(cack + 20);
          if (err) {
            /* (the tag did not verify: handled below) */
          } else if (st == ACK_OK) {
            cstate = CONN_DONE;
          } else if (st == ACK_YOU_ARE_STALE) {
            rc = -ESTALE;
            break;
          } else if (st == ACK_BAD_RANK) {
            rc = -EPROTO;
            break;
          } else {
            err = EAGAIN; /* the neighbour is still in an older generation */
          }
        }
      }
      if (err) {
        /* Refused, reset, or an old-generation listener: retry later. */
        close(cfd);
        cfd = -1;
        cstate = CONN_IDLE;
        retry_at = ea__comm_now_ns() + (uint64_t)backoff * 1000000ull;
        backoff = backoff * 2 > CONNECT_BACKOFF_MAX_MS ? CONNECT_BACKOFF_MAX_MS : backoff * 2;
      }
    }
  }
  for (int i = 0; i < npend; i++) close(pend[i].fd);
  if (rc < 0) {
    if (cfd >= 0) close(cfd);
    if (left_fd >= 0) close(left_fd);
    return rc;
  }
  tune_data_socket(cfd);
  tune_data_socket(left_fd);
  atomic_store(&b->right_fd, cfd);
  atomic_store(&b->left_fd, left_fd);
  /* An abort that ran before the store saw no sockets to shut down. */
  if (atomic_load(&c->aborted)) shut_both(b);
  return 0;
}

/* ---- the op engine ------------------------------------------------------------ */

typedef struct {
  uint8_t *buf;
  size_t es;
  ea_comm_dtype dt;
  ea_comm_op op;
  const step *steps;
  size_t nsteps;
  uint8_t shdr[OPHDR_BYTES], rhdr[OPHDR_BYTES];
  size_t shoff, rhoff;
  size_t st, sdone;          /* send: step, bytes of it sent */
  size_t rt, rdone, rstaged; /* recv: step, bytes finished, bytes staged */
  /* The socket said EAGAIN: do not ask it again before poll says it is
   * ready (saves a failing syscall per chunk moved the other way). */
  int sfull, rempty;
} engine;

static int wire_err(int e) {
  /* EPIPE and friends all mean the same to the caller: the peer is gone. */
  if (e == EPIPE || e == ENOTCONN || e == ESHUTDOWN || e == ECONNABORTED) return -ECONNRESET;
  return -e;
}

/* Push as many bytes right as are allowed.  Returns bytes sent (≥ 0) or a
 * negative errno. */
static ssize_t pump_send(ea_comm *c, int fd, engine *e) {
  ssize_t total = 0;
  while (e->shoff < OPHDR_BYTES) {
    ssize_t n = send(fd, e->shdr + e->shoff, OPHDR_BYTES - e->shoff, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR) return wire_err(errno);
      e->sfull = errno == EAGAIN;
      return total;
    }
    e->shoff += (size_t)n;
    total += n;
  }
  while (e->st < e->nsteps) {
    const step *s = &e->steps[e->st];
    if (e->sdone == s->slen) {
      e->st++;
      e->sdone = 0;
      continue;
    }
    size_t limit = s->slen;
    if (s->dep >= 0) {
      if (e->rt < (size_t)s->dep)
        limit = 0;
      else if (e->rt == (size_t)s->dep)
        limit = e->rdone;
    }
    if (limit <= e->sdone) break; /* waiting for the left neighbour's data */
    ssize_t n =
        send(fd, e->buf + s->soff + e->sdone, limit - e->sdone, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR) return wire_err(errno);
      e->sfull = errno == EAGAIN;
      break;
    }
    e->sdone += (size_t)n;
    total += n;
    c->stats.bytes_sent += (uint64_t)n;
  }
  return total;
}

static int check_header(const engine *e) {
  /* Ours and the left neighbour's must agree byte for byte. */
  return memcmp(e->shdr, e->rhdr, OPHDR_BYTES) == 0 ? 0 : -EPROTO;
}

/* Pull what the left neighbour has sent.  Returns bytes received or a
 * negative errno. */
static ssize_t pump_recv(ea_comm *c, tcp_be *b, int fd, engine *e) {
  ssize_t total = 0;
  while (e->rhoff < OPHDR_BYTES) {
    ssize_t n = recv(fd, e->rhdr + e->rhoff, OPHDR_BYTES - e->rhoff, MSG_DONTWAIT);
    if (n == 0) return -ECONNRESET;
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR) return wire_err(errno);
      e->rempty = errno == EAGAIN;
      return total;
    }
    e->rhoff += (size_t)n;
    total += n;
    if (e->rhoff == OPHDR_BYTES && check_header(e) < 0) return -EPROTO;
  }
  while (e->rt < e->nsteps) {
    const step *s = &e->steps[e->rt];
    if (e->rdone == s->rlen) {
      e->rt++;
      e->rdone = 0;
      continue;
    }
    ssize_t n;
    if (s->rmode == RECV_REDUCE) {
      size_t chunk = s->rlen - e->rdone < CHUNK_BYTES ? s->rlen - e->rdone : CHUNK_BYTES;
      n = recv(fd, b->stage + e->rstaged, chunk - e->rstaged, MSG_DONTWAIT);
      if (n > 0) {
        e->rstaged += (size_t)n;
        if (e->rstaged == chunk) {
          ea__ring_reduce(e->buf + s->roff + e->rdone, b->stage, chunk, e->dt, e->op);
          e->rdone += chunk;
          e->rstaged = 0;
        }
      }
    } else {
      n = recv(fd, e->buf + s->roff + e->rdone, s->rlen - e->rdone, MSG_DONTWAIT);
      if (n > 0) e->rdone += (size_t)n;
    }
    if (n == 0) return -ECONNRESET;
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR) return wire_err(errno);
      e->rempty = errno == EAGAIN;
      break;
    }
    total += n;
    c->stats.bytes_recv += (uint64_t)n;
  }
  return total;
}

static int send_pending(const engine *e) {
  return e->shoff < OPHDR_BYTES || e->st < e->nsteps;
}
static int recv_pending(const engine *e) {
  return e->rhoff < OPHDR_BYTES || e->rt < e->nsteps;
}

/* Can the send side write right now (as opposed to waiting on the left)? */
static int send_ready(const engine *e) {
  if (e->shoff < OPHDR_BYTES) return 1;
  for (size_t t = e->st; t < e->nsteps; t++) {
    const step *s = &e->steps[t];
    size_t done = t == e->st ? e->sdone : 0;
    if (done == s->slen) continue;
    if (s->dep < 0 || e->rt > (size_t)s->dep) return 1;
    if (e->rt == (size_t)s->dep) return e->rdone > done;
    return 0;
  }
  return 0;
}

static int run_engine(ea_comm *c, engine *e) {
  tcp_be *b = c->be;
  int lfd = atomic_load(&b->left_fd), rfd = atomic_load(&b->right_fd);
  uint64_t deadline = ea__comm_now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
  for (;;) {
    if (atomic_load_explicit(&c->aborted, memory_order_relaxed)) return -ECANCELED;
    ssize_t moved = 0, n;
    if (send_pending(e) && !e->sfull) {
      if ((n = pump_send(c, rfd, e)) < 0) return (int)n;
      moved += n;
    }
    if (recv_pending(e) && !e->rempty) {
      if ((n = pump_recv(c, b, lfd, e)) < 0) return (int)n;
      moved += n;
    }
    int sp = send_pending(e), rp = recv_pending(e);
    if (!sp && !rp) return 0;
    if (ea__comm_now_ns() >= deadline) return -ETIMEDOUT;
    if (moved) continue; /* keep going while the sockets take and give */
    /* Nothing moved: each pending side is either at EAGAIN or (send) waiting
     * for data still to come from the left. */

    struct pollfd pfd[3];
    pfd[0] = (struct pollfd){.fd = b->efd, .events = POLLIN};
    /* The right neighbour never writes to us on this socket, so readability
     * or RDHUP there means it closed: fail now rather than at the timeout.
     * Only while we still owe it bytes — once it has all of them it may
     * legitimately finish and close before we do. */
    pfd[1] = (struct pollfd){
        .fd = sp ? rfd : -1,
        .events = (short)(POLLRDHUP | POLLIN | (e->sfull && send_ready(e) ? POLLOUT : 0))};
    pfd[2] = (struct pollfd){.fd = rp ? lfd : -1, .events = POLLIN};
    int pr = poll(pfd, 3, ms_until(deadline));
    if (pr < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (pfd[0].revents) return -ECANCELED;
    if (pfd[1].revents & POLLOUT) e->sfull = 0;
    if (pfd[2].revents) e->rempty = 0; /* data, EOF or error: recv tells which */
    if (pfd[1].revents & (POLLRDHUP | POLLIN | POLLHUP | POLLERR)) {
      int err = 0;
      socklen_t el = sizeof err;
      getsockopt(rfd, SOL_SOCKET, SO_ERROR, &err, &el);
      if (pfd[1].revents & POLLIN && !(pfd[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return -EPROTO; /* data where none may come */
      return err ? wire_err(err) : -ECONNRESET;
    }
  }
}

static void engine_init(engine *e, void *buf, ea_comm_dtype dt, ea_comm_op op, const step *steps,
                        size_t nsteps) {
  memset(e, 0, sizeof *e);
  e->buf = buf;
  e->dt = dt;
  e->op = op;
  e->es = ea_comm_dtype_size(dt);
  e->steps = steps;
  e->nsteps = nsteps;
}

static void make_ophdr(uint8_t *h, const ea_comm *c, int kind, int dt, int op, uint32_t root,
                       uint64_t count) {
  memset(h, 0, OPHDR_BYTES);
  put32(h, OPHDR_MAGIC);
  h[4] = (uint8_t)kind;
  h[5] = (uint8_t)dt;
  h[6] = (uint8_t)op;
  put32(h + 8, root);
  put32(h + 12, c->world);
  put64(h + 16, count);
  put64(h + 24, c->op_seq);
}

static step *steps_get(tcp_be *b, size_t n) {
  if (n > b->steps_cap) {
    step *s = realloc(b->steps, n * sizeof *s);
    if (!s) return NULL;
    b->steps = s;
    b->steps_cap = n;
  }
  return b->steps;
}

/* Segment j of the buffer in bytes (ring.c splits it in elements). */
static void segment(size_t count, uint32_t W, uint32_t j, size_t es, size_t *off, size_t *len) {
  ea__ring_segment(count, W, j, off, len);
  *off *= es;
  *len *= es;
}

static int ring_allreduce(ea_comm *c, void *buf, size_t count, ea_comm_dtype dt, ea_comm_op op,
                          int kind) {
  tcp_be *b = c->be;
  uint32_t W = c->world, r = c->rank;
  size_t es = ea_comm_dtype_size(dt), nsteps = 2 * (size_t)(W - 1);
  step *s = steps_get(b, nsteps);
  if (!s) return -ENOMEM;
  for (uint32_t k = 0; k < W - 1; k++) {
    /* reduce-scatter (ring.c's schedule, which ea_comm_ring_reduce follows
     * too): send one segment right, receive the next from the left and add
     * it into our own */
    step *t = &s[k];
    segment(count, W, ea__ring_rs_send(r, W, k), es, &t->soff, &t->slen);
    segment(count, W, ea__ring_rs_recv(r, W, k), es, &t->roff, &t->rlen);
    t->rmode = RECV_REDUCE;
    t->dep = (long)k - 1;
    /* allgather: pass the fully reduced segments round once (copies) */
    t = &s[W - 1 + k];
    segment(count, W, ea__ring_ag_send(r, W, k), es, &t->soff, &t->slen);
    segment(count, W, ea__ring_ag_recv(r, W, k), es, &t->roff, &t->rlen);
    t->rmode = RECV_COPY;
    t->dep = (long)(W - 1 + k) - 1;
  }
  engine e;
  engine_init(&e, buf, dt, op, s, nsteps);
  make_ophdr(e.shdr, c, kind, dt, op, 0, count);
  return run_engine(c, &e);
}

static int tcp_allreduce(ea_comm *c, void *buf, size_t count, ea_comm_dtype dt, ea_comm_op op) {
  return ring_allreduce(c, buf, count, dt, op, OP_ALLREDUCE);
}

static int tcp_barrier(ea_comm *c) {
  /* Completing any allreduce needs every rank's contribution, so one
   * 8-byte allreduce is a barrier (2(W−1) latency hops). */
  int64_t v = 0;
  return ring_allreduce(c, &v, 1, EA_COMM_I64, EA_COMM_SUM, OP_BARRIER);
}

static int tcp_broadcast(ea_comm *c, void *buf, size_t bytes, uint32_t root) {
  tcp_be *b = c->be;
  uint32_t W = c->world, r = c->rank, last = (root + W - 1) % W;
  step *s = steps_get(b, 1);
  if (!s) return -ENOMEM;
  /* Root streams right; every other rank forwards what it has received so
   * far (dep on its own receive), except the last, which only receives.
   * Everyone still exchanges op headers, so the root learns that its left
   * neighbour is running the same op. */
  s->soff = s->roff = 0;
  s->slen = r == last ? 0 : bytes;
  s->rlen = r == root ? 0 : bytes;
  s->rmode = r == root ? RECV_NONE : RECV_COPY;
  s->dep = r == root ? -1 : 0;
  engine e;
  engine_init(&e, buf, EA_COMM_I64, EA_COMM_SUM, s, 1);
  make_ophdr(e.shdr, c, OP_BROADCAST, 0, 0, root, bytes);
  return run_engine(c, &e);
}

static const ea__comm_vt tcp_vt = {
    .connect = tcp_connect,
    .allreduce = tcp_allreduce,
    .broadcast = tcp_broadcast,
    .barrier = tcp_barrier,
    .abort = tcp_abort,
    .fail = tcp_fail,
    .shrink = NULL,
    .destroy = tcp_destroy,
};
