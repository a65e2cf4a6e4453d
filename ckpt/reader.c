/* The checkpoint reader and verifier.
 *
 * A checkpoint is a set of byte ranges of one serialized state, so loading is
 * "read bytes [a, b) of the state" whatever world size wrote it: a range is
 * cut at shard boundaries and each piece read from its shard file.  That is
 * what lets a checkpoint written by 4 ranks be loaded by 3 or 7.
 *
 * Reads use the same machinery as the writer, for the same reasons: io_uring
 * with several large reads in flight, O_DIRECT where the file system allows
 * (a multi-gigabyte restore should not evict the page cache, and the files
 * were written with O_DIRECT so nothing useful is cached anyway), aligned
 * staging buffers registered with the ring.  O_DIRECT reads must start and
 * end on the alignment, so each piece is widened to aligned bounds and only
 * the requested bytes are copied out; the file's tail is shorter than its
 * aligned end, and a short read there is expected, not an error.  Chunks
 * complete out of order but are delivered in order, so verification can
 * stream them through XXH3 while later reads are in flight.
 *
 * Verification says where a shard is damaged, not just that it is: each
 * shard carries one hash per block (ea_ckpt_block_size), and the report
 * names the shard file and the byte range of the damaged blocks, both as
 * file offsets and as state offsets. */
#include "ckpt_int.h"

#include "ea_ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* Reads in flight and their size: the writer's defaults (EA_CKPT_QUEUE_DEFAULT
 * × EA_CKPT_CHUNK_DEFAULT), measured by bench/ckpt.c for both directions. */
#define RD_QD EA_CKPT_QUEUE_DEFAULT
#define RD_CHUNK EA_CKPT_CHUNK_DEFAULT
/* See writer.c: a device that keeps saying EAGAIN is not coming back. */
#define EAGAIN_MAX 10000

typedef struct {
  uint64_t off; /* file offset of the chunk */
  uint32_t len; /* bytes asked for */
  uint32_t got; /* bytes read so far */
  unsigned eagain;
  bool busy; /* a read is in flight */
  bool done; /* complete (got == len, or the file ended) */
} rslot;

typedef struct {
  bool uring, registered;
  struct io_uring ring;
  uint8_t *stage;
  uint32_t chunk, qd;
  rslot slot[RD_QD];
} reng;

/* Staging for reads of at most `largest` bytes at a time: small checkpoints
 * get small buffers (pinning pages for registration costs time in
 * proportion to their number). */
static int reng_init(reng *e, unsigned io_flags, uint64_t largest) {
  memset(e, 0, sizeof *e);
  /* an O_DIRECT range widens by up to one alignment unit at each end */
  uint64_t want = (largest + 2 * 4096 + 4095) / 4096 * 4096;
  e->chunk = want < RD_CHUNK ? (uint32_t)want : RD_CHUNK;
  uint64_t chunks = (want + e->chunk - 1) / e->chunk;
  e->qd = chunks < RD_QD ? (uint32_t)chunks : RD_QD;
  /* 4096-aligned staging satisfies every dio_mem_align seen in practice;
   * open_shard checks the reported value against it */
  if (posix_memalign((void **)&e->stage, 4096, (size_t)e->qd * e->chunk) != 0) return -ENOMEM;
  if (!(io_flags & EA_CKPT_IO_SYNC) && io_uring_queue_init(e->qd, &e->ring, 0) == 0) {
    e->uring = true;
    if (!(io_flags & EA_CKPT_IO_NO_REGISTER)) {
      struct iovec iov[RD_QD];
      for (uint32_t i = 0; i < e->qd; i++)
        iov[i] = (struct iovec){e->stage + (size_t)i * e->chunk, e->chunk};
      e->registered = io_uring_register_buffers(&e->ring, iov, e->qd) == 0;
    }
  }
  return 0;
}

static void reng_close(reng *e) {
  if (e->uring) io_uring_queue_exit(&e->ring);
  free(e->stage);
  e->stage = NULL;
  e->uring = false;
}

static uint8_t *slot_buf(reng *e, uint32_t i) {
  return e->stage + (size_t)i * e->chunk;
}

/* Issues the rest of slot i; in pread mode completes it on the spot. */
static int rd_submit(reng *e, int fd, uint32_t i, bool direct, uint32_t align) {
  rslot *s = &e->slot[i];
  uint8_t *buf = slot_buf(e, i) + s->got;
  uint32_t len = s->len - s->got;
  uint64_t off = s->off + s->got;
  if (!e->uring) {
    for (;;) {
      ssize_t n = pread(fd, buf, len, (off_t)off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return -errno;
      s->got += (uint32_t)n;
      if (n == 0 || s->got == s->len || (direct && s->got % align)) break;
      buf += n;
      len -= (uint32_t)n;
      off += (uint64_t)n;
    }
    s->done = true;
    return 0;
  }
  struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);
  if (!sqe) return -EBUSY; /* cannot happen: one SQE per slot */
  if (e->registered)
    io_uring_prep_read_fixed(sqe, fd, buf, len, off, (int)i);
  else
    io_uring_prep_read(sqe, fd, buf, len, off);
  io_uring_sqe_set_data64(sqe, i);
  int rc = io_uring_submit(&e->ring);
  if (rc < 0) return rc;
  s->busy = true;
  return 0;
}

typedef int (*deliver_fn)(void *arg, uint64_t file_off, const uint8_t *p, size_t n);

/* Reads file bytes [lo, hi) of fd and hands them to cb in order.  Returns
 * 0; -EBADMSG with *eof set when the file ends before hi; another -errno
 * (with *eof_or_off = the failing offset) for I/O errors. */
static int reng_read(reng *e, int fd, bool direct, uint32_t align, uint64_t lo, uint64_t hi,
                     deliver_fn cb, void *arg, uint64_t *where) {
  uint64_t a = direct ? align : 1;
  uint64_t next = lo / a * a;
  uint64_t stop = direct ? (hi + a - 1) / a * a : hi;
  uint64_t issued = 0, delivered = 0;
  uint32_t inflight = 0;
  int err = 0;
  for (;;) {
    while (!err && next < stop && issued - delivered < e->qd) {
      uint32_t i = (uint32_t)(issued % e->qd);
      rslot *s = &e->slot[i];
      uint64_t n = stop - next < e->chunk ? stop - next : e->chunk;
      *s = (rslot){.off = next, .len = (uint32_t)n};
      int rc = rd_submit(e, fd, i, direct, (uint32_t)a);
      if (rc < 0) {
        err = rc;
        *where = next;
        break;
      }
      if (s->busy) inflight++;
      next += n;
      issued++;
    }
    /* deliver finished chunks in order */
    while (!err && delivered < issued && e->slot[delivered % e->qd].done) {
      rslot *s = &e->slot[delivered % e->qd];
      uint64_t want_hi = s->off + s->len < hi ? s->off + s->len : hi;
      uint64_t got_hi = s->off + s->got;
      if (got_hi < want_hi) { /* the file ended early */
        err = -EBADMSG;
        *where = got_hi;
        break;
      }
      uint64_t from = s->off > lo ? s->off : lo;
      if (want_hi > from) {
        int rc = cb(arg, from, slot_buf(e, (uint32_t)(delivered % e->qd)) + (from - s->off),
                    (size_t)(want_hi - from));
        if (rc < 0) {
          err = rc;
          *where = from;
          break;
        }
      }
      delivered++;
    }
    if (inflight == 0 && (err || (delivered == issued && next >= stop))) break;
    if (inflight == 0) continue; /* nothing to wait for: issue the next chunks */
    struct io_uring_cqe *cqe;
    int rc;
    do rc = io_uring_wait_cqe(&e->ring, &cqe);
    while (rc == -EINTR);
    if (rc < 0) return rc; /* the ring is broken; nothing else will complete */
    uint32_t i = (uint32_t)io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&e->ring, cqe);
    rslot *s = &e->slot[i];
    s->busy = false;
    inflight--;
    if (err) continue; /* draining */
    if ((res == -EAGAIN || res == -EINTR) && ++s->eagain <= EAGAIN_MAX) {
      if ((rc = rd_submit(e, fd, i, direct, (uint32_t)a)) < 0) {
        err = rc;
        *where = s->off;
      } else {
        inflight++;
      }
      continue;
    }
    if (res < 0) {
      err = res;
      *where = s->off + s->got;
      continue;
    }
    s->got += (uint32_t)res;
    /* 0 = end of file; with O_DIRECT a read stopping off the alignment
     * stopped at the end of the file as well */
    if (res == 0 || s->got == s->len || (direct && s->got % a)) {
      s->done = true;
    } else if ((rc = rd_submit(e, fd, i, direct, (uint32_t)a)) < 0) {
      err = rc;
      *where = s->off + s->got;
    } else {
      inflight++;
    }
  }
  return err;
}

/* Opens a shard for reading: O_DIRECT unless refused or unsupported. */
static int open_shard(const char *path, unsigned io_flags, bool *direct, uint32_t *align) {
  int fd = -1;
  *direct = false;
  if (!(io_flags & EA_CKPT_IO_BUFFERED)) {
    fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd >= 0) {
      uint32_t mem;
      if (ea__ck_dio_align(fd, align, &mem) && mem <= 4096 && *align <= 4096) {
        *direct = true;
        return fd;
      }
      close(fd); /* no O_DIRECT for this file (or our staging cannot meet it) */
    } else if (errno != EINVAL) {
      return -errno;
    }
  }
  fd = open(path, O_RDONLY | O_CLOEXEC);
  *align = 1;
  return fd < 0 ? -errno : fd;
}

/* ---- reader ------------------------------------------------------------- */

struct ea_ckpt_reader {
  char path[EA_CKPT_PATH_MAX];
  ea_ckpt_manifest m;
  unsigned io_flags;
  int *fd;
  bool *direct;
  uint32_t *align;
  reng eng;
  bool last_direct;
};

int ea_ckpt_reader_open(ea_ckpt_reader **out, const char *ckpt_path, unsigned io_flags, char *err,
                        size_t errlen) {
  *out = NULL;
  ea_ckpt_reader *r = calloc(1, sizeof *r);
  if (!r) return -ENOMEM;
  if (snprintf(r->path, sizeof r->path, "%s", ckpt_path) >= (int)sizeof r->path) {
    free(r);
    return -ENAMETOOLONG;
  }
  int rc = ea_ckpt_manifest_load(ckpt_path, &r->m, err, errlen);
  if (rc < 0) {
    free(r);
    return rc;
  }
  r->io_flags = io_flags;
  r->fd = malloc(r->m.world_size * sizeof *r->fd);
  r->direct = calloc(r->m.world_size, sizeof *r->direct);
  r->align = calloc(r->m.world_size, sizeof *r->align);
  uint64_t largest = 0;
  for (uint32_t i = 0; i < r->m.world_size; i++)
    if (r->m.shards[i].length > largest) largest = r->m.shards[i].length;
  if (!r->fd || !r->direct || !r->align || (rc = reng_init(&r->eng, io_flags, largest)) < 0) {
    if (rc == 0) rc = -ENOMEM;
    free(r->fd);
    free(r->direct);
    free(r->align);
    ea_ckpt_manifest_close(&r->m);
    free(r);
    ea_seterr(err, errlen, "reader for %s: out of memory", ckpt_path);
    return rc;
  }
  for (uint32_t i = 0; i < r->m.world_size; i++) r->fd[i] = -1;
  *out = r;
  return 0;
}

const ea_ckpt_manifest *ea_ckpt_reader_manifest(const ea_ckpt_reader *r) {
  return &r->m;
}

bool ea_ckpt_reader_direct(const ea_ckpt_reader *r) {
  return r->last_direct;
}

void ea_ckpt_reader_free(ea_ckpt_reader *r) {
  if (!r) return;
  for (uint32_t i = 0; i < r->m.world_size; i++)
    if (r->fd[i] >= 0) close(r->fd[i]);
  free(r->fd);
  free(r->direct);
  free(r->align);
  reng_close(&r->eng);
  ea_ckpt_manifest_close(&r->m);
  free(r);
}

typedef struct {
  uint8_t *dst;  /* where state offset `base` goes */
  uint64_t base; /* state offset of dst[0] */
  uint64_t shard_off;
} copy_arg;

static int copy_out(void *arg, uint64_t file_off, const uint8_t *p, size_t n) {
  copy_arg *c = arg;
  memcpy(c->dst + (c->shard_off + file_off - c->base), p, n);
  return 0;
}

int ea_ckpt_reader_read(ea_ckpt_reader *r, uint64_t offset, void *buf, size_t len, char *err,
                        size_t errlen) {
  const ea_ckpt_manifest *m = &r->m;
  if (offset > m->total_bytes || len > m->total_bytes - offset) {
    ea_seterr(err, errlen, "read [%" PRIu64 ", +%zu) of %s: outside the %" PRIu64 "-byte state",
              offset, len, r->path, m->total_bytes);
    return -EINVAL;
  }
  if (len == 0) return 0;
  uint64_t end = offset + len;
  /* first shard ending after offset (shards tile the state in order) */
  uint32_t lo = 0, hi = m->world_size;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (m->shards[mid].offset + m->shards[mid].length <= offset)
      lo = mid + 1;
    else
      hi = mid;
  }
  bool all_direct = true;
  for (uint32_t k = lo; k < m->world_size && m->shards[k].offset < end; k++) {
    const ea_ckpt_shard *s = &m->shards[k];
    if (s->length == 0) continue;
    char p[EA_CKPT_PATH_MAX];
    int rc = ea__ck_join(p, sizeof p, r->path, s->file);
    if (rc < 0) return rc;
    if (r->fd[k] < 0) {
      rc = open_shard(p, r->io_flags, &r->direct[k], &r->align[k]);
      if (rc < 0) {
        ea_seterr(err, errlen, "open %s: %s", p, ea__ck_strerror(rc));
        return rc;
      }
      r->fd[k] = rc;
    }
    uint64_t a = offset > s->offset ? offset : s->offset;
    uint64_t b = end < s->offset + s->length ? end : s->offset + s->length;
    copy_arg c = {(uint8_t *)buf, offset, s->offset};
    uint64_t where = 0;
    rc = reng_read(&r->eng, r->fd[k], r->direct[k], r->align[k], a - s->offset, b - s->offset,
                   copy_out, &c, &where);
    if (rc == -EBADMSG) {
      ea_seterr(err, errlen,
                "read %s: the file ends at byte %" PRIu64 " but the manifest says %" PRIu64
                " (state bytes [%" PRIu64 ", %" PRIu64 ") missing)",
                p, where, s->length, s->offset + where, s->offset + s->length);
      return rc;
    }
    if (rc < 0) {
      ea_seterr(err, errlen, "read %s at offset %" PRIu64 ": %s", p, where, ea__ck_strerror(rc));
      return rc;
    }
    all_direct = all_direct && r->direct[k];
  }
  r->last_direct = all_direct;
  return 0;
}

/* ---- verify ------------------------------------------------------------- */

typedef struct {
  ea__ck_hasher *h;
  uint8_t *dst; /* NULL: verify only; else where file offset 0 goes */
} feed_arg;

/* Verification's delivery: every byte through the hasher, in order, and
 * (a one-pass load) into its place in the state. */
static int feed_hash(void *arg, uint64_t file_off, const uint8_t *p, size_t n) {
  feed_arg *f = arg;
  ea__ck_hasher_feed(f->h, p, n);
  if (f->dst) memcpy(f->dst + file_off, p, n);
  return 0;
}

static void report(ea_ckpt_verify_report *rep, const char *ckpt, const ea_ckpt_shard *s,
                   uint64_t lo, uint64_t hi, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void report(ea_ckpt_verify_report *rep, const char *ckpt, const ea_ckpt_shard *s,
                   uint64_t lo, uint64_t hi, const char *fmt, ...) {
  if (!rep) return;
  rep->shard = (int)s->rank;
  snprintf(rep->file, sizeof rep->file, "%s", s->file);
  rep->file_lo = lo;
  rep->file_hi = hi;
  rep->state_lo = s->offset + lo;
  rep->state_hi = s->offset + hi;
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  snprintf(rep->msg, sizeof rep->msg,
           "%s/%s: bytes [%" PRIu64 ", %" PRIu64 ") of the file (state bytes [%" PRIu64 ", %" PRIu64
           ")): %s",
           ckpt, s->file, lo, hi, rep->state_lo, rep->state_hi, why);
}

/* dst: NULL, or where the shard's bytes go (a one-pass load; mode FULL). */
static int verify_shard(const char *ckpt, const ea_ckpt_shard *s, ea_ckpt_verify_mode mode,
                        unsigned io_flags, reng *eng, uint8_t *dst, ea_ckpt_verify_report *rep) {
  char p[EA_CKPT_PATH_MAX];
  int rc = ea__ck_join(p, sizeof p, ckpt, s->file);
  if (rc < 0) return rc;
  bool direct;
  uint32_t align;
  int fd = open_shard(p, io_flags, &direct, &align);
  if (fd < 0) {
    report(rep, ckpt, s, 0, s->length, "cannot open: %s", ea__ck_strerror(fd));
    return fd;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    rc = -errno;
    close(fd);
    report(rep, ckpt, s, 0, s->length, "stat: %s", ea__ck_strerror(rc));
    return rc;
  }
  uint64_t size = (uint64_t)st.st_size;
  if (size < s->length) {
    close(fd);
    report(rep, ckpt, s, size, s->length,
           "truncated: the file has %" PRIu64 " bytes, the manifest says %" PRIu64, size,
           s->length);
    return -EBADMSG;
  }
  if (size > s->length) {
    close(fd);
    report(rep, ckpt, s, s->length, size,
           "the file has %" PRIu64 " bytes, the manifest says %" PRIu64, size, s->length);
    return -EBADMSG;
  }
  if (mode == EA_CKPT_VERIFY_SIZE) {
    close(fd);
    return 0;
  }
  ea__ck_hasher h;
  uint64_t blocks[EA_CKPT_MAX_BLOCKS];
  if ((rc = ea__ck_hasher_init(&h, s->length, blocks)) < 0) {
    close(fd);
    return rc;
  }
  uint64_t where = 0;
  feed_arg fa = {&h, dst};
  rc = reng_read(eng, fd, direct, align, 0, s->length, feed_hash, &fa, &where);
  close(fd);
  uint32_t nb = 0;
  uint64_t whole = ea__ck_hasher_final(&h, &nb);
  ea__ck_hasher_free(&h);
  if (rc == -EBADMSG) { /* shrank while we read it */
    report(rep, ckpt, s, where, s->length, "the file ends early");
    return rc;
  }
  if (rc < 0) {
    report(rep, ckpt, s, where, s->length, "read error: %s", ea__ck_strerror(rc));
    return rc;
  }
  int first = -1, last = -1, bad = 0;
  for (uint32_t k = 0; k < s->n_blocks && k < nb; k++)
    if (blocks[k] != s->block_hash[k] || h.block_size != s->block_size) {
      if (first < 0) first = (int)k;
      last = (int)k;
      bad++;
    }
  if (first >= 0) {
    uint64_t lo = (uint64_t)first * s->block_size;
    uint64_t hi = ((uint64_t)last + 1) * s->block_size;
    if (hi > s->length) hi = s->length;
    report(rep, ckpt, s, lo, hi,
           "content does not match its XXH3 (%d of %u blocks of %" PRIu64 " bytes differ)", bad,
           s->n_blocks, s->block_size);
    return -EBADMSG;
  }
  if (whole != s->hash) {
    report(rep, ckpt, s, 0, s->length,
           "XXH3 %016" PRIx64 " does not match the manifest's %016" PRIx64, whole, s->hash);
    return -EBADMSG;
  }
  return 0;
}

static int verify_all(const char *ckpt_path, const ea_ckpt_manifest *m, ea_ckpt_verify_mode mode,
                      unsigned io_flags, uint8_t *dst, size_t len, ea_ckpt_verify_report *rep) {
  if (rep) {
    memset(rep, 0, sizeof *rep);
    rep->shard = -1;
  }
  ea_ckpt_manifest own;
  int rc;
  if (!m) {
    char err[sizeof rep->msg];
    if ((rc = ea_ckpt_manifest_load(ckpt_path, &own, err, sizeof err)) < 0) {
      if (rep) snprintf(rep->msg, sizeof rep->msg, "%s", err);
      return rc;
    }
    m = &own;
  }
  reng eng;
  memset(&eng, 0, sizeof eng);
  uint64_t largest = 0;
  for (uint32_t i = 0; i < m->world_size; i++)
    if (m->shards[i].length > largest) largest = m->shards[i].length;
  if (dst && len != m->total_bytes) {
    if (rep)
      snprintf(rep->msg, sizeof rep->msg,
               "%s holds a state of %" PRIu64 " bytes, not the %zu asked for", ckpt_path,
               m->total_bytes, len);
    rc = -EINVAL;
    goto out;
  }
  if (mode == EA_CKPT_VERIFY_FULL && (rc = reng_init(&eng, io_flags, largest)) < 0) goto out;
  rc = 0;
  for (uint32_t r = 0; r < m->world_size && rc == 0; r++)
    rc = verify_shard(ckpt_path, &m->shards[r], mode, io_flags, &eng,
                      dst ? dst + m->shards[r].offset : NULL, rep);
  if (mode == EA_CKPT_VERIFY_FULL) reng_close(&eng);
out:
  if (m == &own) ea_ckpt_manifest_close(&own);
  return rc;
}

int ea_ckpt_verify(const char *ckpt_path, const ea_ckpt_manifest *m, ea_ckpt_verify_mode mode,
                   unsigned io_flags, ea_ckpt_verify_report *rep) {
  return verify_all(ckpt_path, m, mode, io_flags, NULL, 0, rep);
}

int ea_ckpt_load_verified(const char *ckpt_path, const ea_ckpt_manifest *m, void *buf, size_t len,
                          unsigned io_flags, ea_ckpt_verify_report *rep) {
  return verify_all(ckpt_path, m, EA_CKPT_VERIFY_FULL, io_flags, buf, len, rep);
}
