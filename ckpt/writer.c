/* The shard writer: one blocking call that puts a byte range of the training
 * state on disk, durably, as fast as the device allows, and hashes it on the
 * way.
 *
 * Why it is built this way:
 *  - io_uring with several large writes in flight (EA_CKPT_QUEUE_DEFAULT ×
 *    EA_CKPT_CHUNK_DEFAULT): while the device works on chunks k..k+3 the
 *    calling thread copies and hashes chunk k+4, so hashing costs no extra
 *    wall time once the device is the bottleneck.  No SQPOLL: a polling
 *    kernel thread would burn a core of a 2-core node.
 *  - O_DIRECT when the file system allows it (alignment from statx
 *    STATX_DIOALIGN): a checkpoint is written once and not read back soon,
 *    so pushing gigabytes through the page cache only evicts the training
 *    job's data.  O_DIRECT needs aligned buffers, offsets and lengths.  A
 *    chunk whose bytes are aligned where they lie (the agent's mmap of a
 *    worker's memfd is page-aligned, so every chunk but a ragged tail) is
 *    written in place: the device reads the caller's pages and the only pass
 *    over them on a CPU is the hash.  Copying each chunk into staging first
 *    doubled the memory traffic, and a training step on the other core paid
 *    for it (bench/ckpt.c table 3: steps/s during a 1 GiB persist 0.94 ->
 *    0.97 of none, the persist 1.7 -> 1.3 s).  The caller must not change
 *    the bytes during the call (the worker does not touch its memfd until
 *    CKPT_DONE): the hash and the device read them at different moments.
 *    Other chunks are copied into aligned staging — registered with
 *    io_uring_register_buffers so the kernel does not pin and unpin the
 *    pages on every write — and the tail is padded with zeros; after the
 *    writes the file is truncated back to its true length.  If O_DIRECT is
 *    refused (EINVAL at open, or statx reports no support) the same loop
 *    writes straight from the caller's buffer through the page cache.
 *  - Completions are checked as liburing's examples do: -EAGAIN/-EINTR is
 *    resubmitted, a short write is advanced and resubmitted.
 *  - The fsync is issued only after every write has completed.  Linking it
 *    to the last write (IOSQE_IO_LINK) would order it after that one write
 *    only, not after the other writes still in flight.
 *  - If io_uring is unavailable (seccomp in containers blocks it), the same
 *    loop runs with pwrite, one chunk at a time.
 *
 * Every file operation passes through faults.c so that the tests can fail or
 * tear any one of them. */
#include "ckpt_int.h"

#include "ea_ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* Consecutive -EAGAIN completions of one write before giving up: a device
 * that says "again" this many times in a row (each resubmission waits for
 * the ring) is not going to recover within a checkpoint interval. */
#define EAGAIN_MAX 10000
/* Largest write issued: Linux caps a single write at 2 GiB - 4 KiB
 * (MAX_RW_COUNT) and larger chunks bring nothing once 4 are in flight. */
#define CHUNK_MAX (64u << 20)

typedef struct {
  uint8_t *stage;     /* aligned staging buffer (O_DIRECT) or NULL */
  const uint8_t *ptr; /* next byte to write */
  uint64_t off;       /* its file offset */
  uint32_t left;      /* bytes still to write, padding included */
  uint64_t data_end;  /* file offset where this chunk's real data ends */
  unsigned eagain;
  bool busy;
  bool torn;     /* a torn (prefix-only) write: crash once it lands */
  bool in_place; /* O_DIRECT straight from the caller's bytes, not stage */
  int sync_res;  /* pwrite mode: the result, delivered by reap() */
} wslot;

typedef struct {
  const ea_ckpt_write_req *req;
  ea_ckpt_write_result *res;
  int fd;
  bool direct;
  bool uring;
  bool registered;
  uint32_t align;
  struct io_uring ring;
  wslot *slots;
  uint32_t nslots;
  uint32_t inflight;
  int sync_done[EA_CKPT_QUEUE_MAX]; /* pwrite mode: completed slot indices */
  uint32_t sync_n;
} wctx;

static void fail(wctx *w, int rc, const char *op, uint64_t off, bool with_off) {
  if (w->res->err[0]) return; /* keep the first error */
  if (with_off)
    ea_seterr(w->res->err, sizeof w->res->err, "%s %s at offset %llu: %s", op, w->req->path,
              (unsigned long long)off, ea__ck_strerror(rc));
  else
    ea_seterr(w->res->err, sizeof w->res->err, "%s %s: %s", op, w->req->path, ea__ck_strerror(rc));
}

/* Issues slot i's remaining bytes (or a prefix of `len` for a torn write). */
static int submit(wctx *w, uint32_t i, uint32_t len) {
  wslot *s = &w->slots[i];
  if (!w->uring) {
    ssize_t n;
    do n = pwrite(w->fd, s->ptr, len, (off_t)s->off);
    while (n < 0 && errno == EINTR);
    s->sync_res = n < 0 ? -errno : (int)n;
    w->sync_done[w->sync_n++] = (int)i;
  } else {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
    if (!sqe) return -EBUSY; /* cannot happen: the ring has a slot per write */
    if (w->registered && !s->in_place)
      io_uring_prep_write_fixed(sqe, w->fd, s->ptr, len, s->off, (int)i);
    else
      io_uring_prep_write(sqe, w->fd, s->ptr, len, s->off);
    io_uring_sqe_set_data64(sqe, i);
    int rc = io_uring_submit(&w->ring);
    if (rc < 0) return rc;
  }
  s->busy = true;
  w->inflight++;
  return 0;
}

/* Waits for one completion: slot index and result. */
static int reap(wctx *w, uint32_t *slot, int *res) {
  if (!w->uring) {
    *slot = (uint32_t)w->sync_done[--w->sync_n];
    *res = w->slots[*slot].sync_res;
  } else {
    struct io_uring_cqe *cqe;
    int rc;
    do rc = io_uring_wait_cqe(&w->ring, &cqe);
    while (rc == -EINTR);
    if (rc < 0) return rc;
    *slot = (uint32_t)io_uring_cqe_get_data64(cqe);
    *res = cqe->res;
    io_uring_cqe_seen(&w->ring, cqe);
  }
  w->slots[*slot].busy = false;
  w->inflight--;
  return 0;
}

/* First write of a freshly filled slot: the fault layer may fail it or
 * tear it (write an aligned prefix, then "crash"). */
static int submit_new(wctx *w, uint32_t i) {
  wslot *s = &w->slots[i];
  int c = ea__fs_write_check(w->fd, s->left);
  if (c < 0) return c;
  if (c == 1) {
    uint32_t a = w->direct ? w->align : 1;
    uint32_t prefix = s->left / 2 / a * a;
    s->torn = true;
    if (prefix == 0) return ea__fs_torn_done();
    return submit(w, i, prefix);
  }
  return submit(w, i, s->left);
}

static void progress(wctx *w, uint64_t from, uint64_t to, uint64_t data_end) {
  if (from > data_end) from = data_end;
  if (to > data_end) to = data_end;
  if (w->req->progress && to > from) atomic_fetch_add(&w->req->progress->bytes_written, to - from);
}

/* Handles one completion; returns 0 or the error that ends the shard. */
static int complete(wctx *w, uint32_t i, int r) {
  wslot *s = &w->slots[i];
  if (r == -EAGAIN || r == -EINTR) {
    if (++s->eagain > EAGAIN_MAX) {
      fail(w, r, "write", s->off, true);
      return r;
    }
    return submit(w, i, s->left);
  }
  if (r < 0) {
    fail(w, r, "write", s->off, true);
    return r;
  }
  if (r == 0 && s->left > 0 && !s->torn) {
    fail(w, -EIO, "write (no progress)", s->off, true);
    return -EIO;
  }
  ea__fs_wrote(w->fd, s->off, (uint64_t)r);
  progress(w, s->off, s->off + (uint64_t)r, s->data_end);
  if (s->torn) {
    int rc = ea__fs_torn_done();
    fail(w, rc, "write (torn, simulated crash)", s->off, true);
    return rc;
  }
  s->eagain = 0;
  s->off += (uint64_t)r;
  s->ptr += r;
  s->left -= (uint32_t)r;
  if (s->left == 0) return 0;
  /* short write: O_DIRECT only ever stops on a block boundary; anything else
   * cannot be resubmitted with O_DIRECT */
  if (w->direct && (uint32_t)r % w->align != 0) {
    fail(w, -EIO, "write (unaligned short O_DIRECT write)", s->off, true);
    return -EIO;
  }
  return submit(w, i, s->left);
}

static int do_fsync(wctx *w) {
  int c = ea__fs_fsync_check(w->fd);
  if (c < 0) return c;
  if (c == 0) {
    if (w->uring) {
      struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
      if (!sqe) return -EBUSY;
      io_uring_prep_fsync(sqe, w->fd, 0);
      int rc = io_uring_submit(&w->ring);
      if (rc < 0) return rc;
      struct io_uring_cqe *cqe;
      do rc = io_uring_wait_cqe(&w->ring, &cqe);
      while (rc == -EINTR);
      if (rc < 0) return rc;
      rc = cqe->res;
      io_uring_cqe_seen(&w->ring, cqe);
      if (rc < 0) return rc;
    } else if (fsync(w->fd) != 0) {
      return -errno;
    }
  }
  ea__fs_synced(w->fd);
  return 0;
}

static int open_target(wctx *w) {
  int flags = O_WRONLY | O_CREAT | O_TRUNC;
  w->direct = !(w->req->flags & EA_CKPT_IO_BUFFERED);
  int fd = ea__fs_open(w->req->path, flags | (w->direct ? O_DIRECT : 0), 0644);
  if (fd == -EINVAL && w->direct) { /* the file system refuses O_DIRECT */
    w->direct = false;
    fd = ea__fs_open(w->req->path, flags, 0644);
  }
  if (fd < 0) {
    fail(w, fd, "open", 0, false);
    return fd;
  }
  w->fd = fd;
  if (w->direct) {
    uint32_t mem_align;
    if (!ea__ck_dio_align(fd, &w->align, &mem_align)) {
      /* statx says this file cannot do O_DIRECT although open accepted it */
      int fl = fcntl(fd, F_GETFL);
      if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) < 0) {
        int rc = -errno;
        fail(w, rc, "fcntl(clear O_DIRECT)", 0, false);
        return rc;
      }
      w->direct = false;
    } else if (mem_align > w->align) {
      w->align = mem_align; /* chunk offsets must satisfy both */
    }
  }
  if (!w->direct) w->align = 0;
  return 0;
}

static int setup_slots(wctx *w, uint32_t chunk) {
  const ea_ckpt_write_req *q = w->req;
  uint32_t qd = q->queue_depth ? q->queue_depth : EA_CKPT_QUEUE_DEFAULT;
  if (qd > EA_CKPT_QUEUE_MAX) qd = EA_CKPT_QUEUE_MAX;
  uint64_t chunks = (q->length + chunk - 1) / chunk;
  w->nslots = chunks < qd ? (chunks ? (uint32_t)chunks : 1) : qd;
  w->slots = calloc(w->nslots, sizeof *w->slots);
  if (!w->slots) return -ENOMEM;
  if (!(q->flags & EA_CKPT_IO_SYNC)) {
    /* one SQE per write in flight plus the fsync */
    if (io_uring_queue_init(w->nslots + 1, &w->ring, 0) == 0) w->uring = true;
  }
  if (w->direct) {
    void *mem;
    size_t al = w->align > 4096 ? w->align : 4096;
    if (posix_memalign(&mem, al, (size_t)w->nslots * chunk) != 0) return -ENOMEM;
    for (uint32_t i = 0; i < w->nslots; i++) w->slots[i].stage = (uint8_t *)mem + (size_t)i * chunk;
    if (w->uring && !(q->flags & EA_CKPT_IO_NO_REGISTER)) {
      struct iovec iov[EA_CKPT_QUEUE_MAX];
      for (uint32_t i = 0; i < w->nslots; i++) iov[i] = (struct iovec){w->slots[i].stage, chunk};
      /* fails with ENOMEM past RLIMIT_MEMLOCK: plain writes then */
      w->registered = io_uring_register_buffers(&w->ring, iov, w->nslots) == 0;
    }
  }
  return 0;
}

int ea_ckpt_write_shard(const ea_ckpt_write_req *req, ea_ckpt_write_result *res) {
  double t0 = ea__ck_now();
  memset(res, 0, sizeof *res);
  if (!req || !req->path || (!req->data && req->length > 0)) {
    ea_seterr(res->err, sizeof res->err, "write shard: bad arguments");
    return -EINVAL;
  }
  wctx w = {.req = req, .res = res, .fd = -1};
  ea__ck_hasher h;
  int rc = ea__ck_hasher_init(&h, req->length, res->block_hash);
  if (rc < 0) {
    fail(&w, rc, "hash state for", 0, false);
    return rc;
  }
  if ((rc = open_target(&w)) < 0) goto out;

  uint32_t chunk = req->chunk_bytes ? req->chunk_bytes : EA_CKPT_CHUNK_DEFAULT;
  if (chunk > CHUNK_MAX) chunk = CHUNK_MAX;
  if (req->length > 0 && req->length < chunk)
    chunk = (uint32_t)req->length; /* small shard: small staging */
  if (w.direct) {
    uint32_t g = w.align > 4096 ? w.align : 4096; /* staging is page-aligned too */
    chunk = (chunk + g - 1) / g * g;
  }
  if ((rc = setup_slots(&w, chunk)) < 0) {
    fail(&w, rc, "allocate staging for", 0, false);
    goto out;
  }

  const uint8_t *src = req->data;
  uint64_t next = 0;
  for (;;) {
    for (uint32_t i = 0; rc == 0 && i < w.nslots && next < req->length; i++) {
      if (w.slots[i].busy) continue;
      if (req->progress && atomic_load(&req->progress->cancel)) {
        rc = -ECANCELED;
        fail(&w, rc, "write", next, true);
        break;
      }
      wslot *s = &w.slots[i];
      uint64_t n64 = req->length - next;
      uint32_t n = n64 < chunk ? (uint32_t)n64 : chunk;
      s->off = next;
      s->data_end = next + n;
      s->eagain = 0;
      s->torn = false;
      s->in_place = w.direct && (uintptr_t)(src + next) % w.align == 0 && n % w.align == 0;
      if (s->in_place) {
        /* aligned bytes (a memfd mapping, a page-aligned buffer): the device
         * reads them where they are, no copy */
        ea__ck_hasher_feed(&h, src + next, n);
        s->ptr = src + next;
        s->left = n;
        res->in_place_bytes += n;
      } else if (w.direct) {
        /* copy and hash in pieces that stay in cache for the hash */
        for (uint32_t k = 0; k < n;) {
          uint32_t p = n - k < (256u << 10) ? n - k : (256u << 10);
          memcpy(s->stage + k, src + next + k, p);
          ea__ck_hasher_feed(&h, s->stage + k, p);
          k += p;
        }
        uint32_t padded = (n + w.align - 1) / w.align * w.align;
        memset(s->stage + n, 0, padded - n);
        s->ptr = s->stage;
        s->left = padded;
      } else {
        ea__ck_hasher_feed(&h, src + next, n);
        s->ptr = src + next;
        s->left = n;
      }
      next += n;
      rc = submit_new(&w, i);
      if (rc < 0) fail(&w, rc, "write", s->off, true);
    }
    if (w.inflight == 0) break;
    uint32_t i;
    int r;
    int e = reap(&w, &i, &r);
    if (e < 0) { /* the ring itself failed: nothing more will complete */
      if (rc == 0) rc = e;
      fail(&w, e, "io_uring wait for", 0, false);
      break;
    }
    if (rc != 0) { /* draining after an error: record what landed */
      if (r > 0) ea__fs_wrote(w.fd, w.slots[i].off, (uint64_t)r);
      if (w.slots[i].torn) ea__fs_torn_done();
      continue;
    }
    rc = complete(&w, i, r);
  }
  if (rc < 0) goto out;

  if (w.direct && req->length % w.align != 0 && (rc = ea__fs_ftruncate(w.fd, req->length)) < 0) {
    fail(&w, rc, "ftruncate", req->length, true);
    goto out;
  }
  if ((rc = do_fsync(&w)) < 0) {
    fail(&w, rc, "fsync", 0, false);
    goto out;
  }

out:
  if (rc == 0) {
    res->hash = ea__ck_hasher_final(&h, &res->n_blocks);
    res->block_size = h.block_size;
    res->bytes = req->length;
  }
  ea__ck_hasher_free(&h);
  res->direct = w.direct;
  res->registered = w.registered;
  res->uring = w.uring;
  res->align = w.align;
  if (w.uring) io_uring_queue_exit(&w.ring);
  if (w.slots) {
    if (w.direct && w.slots[0].stage) free(w.slots[0].stage);
    free(w.slots);
  }
  if (w.fd >= 0) ea__fs_close(w.fd);
  /* A failed shard is garbage; remove it so it does not hold space (a
   * full disk is a likely cause).  After a simulated crash nothing runs. */
  if (rc < 0 && w.fd >= 0 && !ea_ckpt_fault_crashed()) ea__fs_unlink(req->path);
  res->seconds = ea__ck_now() - t0;
  return rc;
}
