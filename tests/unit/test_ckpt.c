/* Check suite for ckpt/: the shard writer and reader, the manifest, commit,
 * fencing, retention, verification, resume and the ckpt CLI.
 *
 * The promises asserted here:
 *   - a shard of any length from 1 byte to 64 MiB (odd lengths, lengths
 *     around the alignment and the chunk size, several chunk/queue shapes)
 *     reads back bit-identical, the recorded XXH3 equals XXH3 of the data,
 *     and the file has exactly the true length (O_DIRECT padding removed);
 *   - O_DIRECT is used where the file system supports it (asserted on this
 *     machine's /tmp), and the buffered, unregistered and pread/pwrite paths
 *     (forced by flags, or by open(O_DIRECT) failing with EINVAL) produce
 *     the same file and hash;
 *   - progress reaches the length; a raised cancel flag gives -ECANCELED and
 *     no file;
 *   - the manifest round-trips; every single-byte change and every
 *     truncation of it is rejected; field errors name the line and field;
 *     an absurd count is rejected without allocating it;
 *   - a checkpoint written at W = 4 is read back at any world size (ranges
 *     cut for W' = 1, 3, 7, ranges spanning shards, a 1-byte read at every
 *     shard boundary), with O_DIRECT;
 *   - a flipped byte is found by full verify, which names the shard file and
 *     a byte range containing the flip no larger than one hash block; a
 *     truncated shard is found by size verify, with the missing range;
 *     resume then falls back to the previous checkpoint and says why;
 *   - the resume search offers its caller only what verified, newest first,
 *     records the caller's refusals like damage, tells the skip hook about
 *     every checkpoint passed over (superseded ones flagged), and ends with
 *     the caller's error when the caller says stop;
 *   - generation fencing: an older generation's commit is refused (-ESTALE)
 *     and writes no MANIFEST; LATEST only moves forward; a second commit of
 *     the same checkpoint is -EEXIST; a newer generation at a lower step
 *     supersedes the abandoned higher step; two processes committing at once
 *     always leave LATEST on the newer generation;
 *   - the fence comes first: a stale commit whose shards retention already
 *     removed is -ESTALE naming both generations (not "No such file"), and
 *     recreates nothing; a current one with a missing shard is -ENOENT;
 *   - the lock wait is bounded: with DIR/.lock held by a stopped process,
 *     commit and retention return -ETIMEDOUT within the bound, naming the
 *     holder's pid, and the directory is byte-for-byte unchanged; once the
 *     holder dies the next commit goes through;
 *   - a committer frozen inside its commit (after the fence) makes the
 *     newer generation's commit time out; woken, it completes its commit;
 *     the newer generation then commits, supersedes it and is resumed from;
 *   - retention keeps keep_last, never the newest complete nor LATEST's
 *     target, removes older leftovers but not newer ones nor in-progress ones;
 *   - a LATEST naming a checkpoint that does not exist or does not verify
 *     (step-1.gen-281474976710655) fences nothing, is replaced by the next
 *     commit and protects nothing from retention; leftovers newer than the
 *     newest complete checkpoint are bounded (EA_CKPT_PARTIAL_KEEP besides
 *     the in-progress ones), even when nothing is complete;
 *   - a full file system (8 MiB tmpfs in a private mount namespace) gives
 *     -ENOSPC naming the file, removes the partial shard, and leaves the
 *     previous checkpoint intact and chosen by resume;
 *   - EA_CKPT_FAULT arms a fault from the environment;
 *   - `ckpt ls|show|verify` print what they should and return 0/1/2.
 * Random data comes from a seed that is printed; EA_SEED=… replays it.
 */
#include "ea_ckpt.h"

#include "ckpt_svc.h" /* ea__ckpt_commit_run: the commit path's cluster check */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxh_x86dispatch.h>

static uint64_t g_seed;
static char g_dir[256]; /* this test's scratch directory */

/* ---- helpers ------------------------------------------------------------ */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint8_t *random_bytes(size_t n, uint64_t salt) {
  uint8_t *p = malloc(n ? n : 1);
  ck_assert_ptr_nonnull(p);
  uint64_t s = g_seed ^ (salt * 0x9e3779b97f4a7c15ull);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = splitmix(&s);
    memcpy(p + i, &v, 8);
  }
  for (; i < n; i++) p[i] = (uint8_t)splitmix(&s);
  return p;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}

static void rm_rf(const char *p) {
  nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ea-test-ckpt-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  ea_ckpt_fault_reset();
}

static void teardown(void) {
  ea_ckpt_fault_reset();
  char mnt[512];
  snprintf(mnt, sizeof mnt, "%s/mnt", g_dir);
  umount2(mnt, MNT_DETACH); /* test_enospc's tmpfs, if still there */
  rm_rf(g_dir);
}

static void path_in(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", g_dir, name);
}

/* Whether the file system under dir takes O_DIRECT at all. */
static bool fs_direct(const char *dir) {
  char p[512];
  snprintf(p, sizeof p, "%s/.odirect-probe", dir);
  int fd = open(p, O_WRONLY | O_CREAT | O_DIRECT, 0644);
  if (fd >= 0) close(fd);
  unlink(p);
  return fd >= 0;
}

/* Whether io_uring can be set up here (containers may block it; the
 * writer then falls back to pwrite, which the tests still check). */
static bool uring_ok(void) {
  struct io_uring r;
  if (io_uring_queue_init(2, &r, 0) != 0) return false;
  io_uring_queue_exit(&r);
  return true;
}

static uint8_t *read_file(const char *p, size_t *n) {
  int fd = open(p, O_RDONLY);
  ck_assert_msg(fd >= 0, "open %s: %s", p, strerror(errno));
  struct stat st;
  ck_assert_int_eq(fstat(fd, &st), 0);
  uint8_t *b = malloc((size_t)st.st_size + 1);
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
    ck_assert_int_gt(r, 0);
    got += (size_t)r;
  }
  close(fd);
  *n = got;
  return b;
}

static int write_one(const char *path, const void *data, uint64_t len, unsigned flags,
                     uint32_t chunk, uint32_t qd, ea_ckpt_write_result *res) {
  ea_ckpt_write_req q = {.path = path,
                         .data = data,
                         .length = len,
                         .flags = flags,
                         .chunk_bytes = chunk,
                         .queue_depth = qd};
  return ea_ckpt_write_shard(&q, res);
}

static void add_tensors(ea_ckpt_manifest *m) {
  /* a toy tensor table: two matrices, a vector, a scalar, covering the state */
  uint64_t T = m->total_bytes, a = T / 3, b = T / 3, c = T - a - b - (T >= 8 ? 8 : 0);
  uint64_t s1[2] = {a / 4 ? a / 4 : 1, 1}, s2[2] = {1, b}, s3[1] = {c};
  ck_assert_int_eq(ea_ckpt_manifest_add_tensor(m, "layers.0.weight", "f32", 2, s1, 0, a), 0);
  ck_assert_int_eq(ea_ckpt_manifest_add_tensor(m, "layers.0.bias", "u8", 2, s2, a, b), 0);
  ck_assert_int_eq(ea_ckpt_manifest_add_tensor(m, "opt.m", "u8", 1, s3, a + b, c), 0);
  if (T >= 8) ck_assert_int_eq(ea_ckpt_manifest_add_tensor(m, "step", "i64", 0, NULL, T - 8, 8), 0);
}

/* prepare + write every shard + the manifest, not committed (release m
 * with ea_ckpt_manifest_close). */
static void stage(const char *dir, uint64_t step, uint64_t gen, uint32_t W, const uint8_t *state,
                  uint64_t total, unsigned flags, ea_ckpt_manifest *m) {
  char err[1024];
  int rc = ea_ckpt_prepare(dir, step, gen, NULL, 0, err, sizeof err);
  ck_assert_msg(rc == 0, "prepare: %s", err);
  ck_assert_int_eq(ea_ckpt_manifest_init(m, step, gen, W, total), 0);
  m->config_hash = 0xfeedfacecafebeefull;
  add_tensors(m);
  for (uint32_t r = 0; r < W; r++) {
    char p[1024];
    ck_assert_int_eq(ea_ckpt_shard_path(p, sizeof p, dir, step, gen, r, W), 0);
    ea_ckpt_write_result res;
    rc = write_one(p, state + m->shards[r].offset, m->shards[r].length, flags, 0, 0, &res);
    ck_assert_msg(rc == 0, "write: %s", res.err);
    ck_assert_int_eq(ea_ckpt_manifest_set_shard(m, r, &res), 0);
  }
}

/* prepare + write every shard + commit: returns commit's result. */
static int save(const char *dir, uint64_t step, uint64_t gen, uint32_t W, const uint8_t *state,
                uint64_t total, unsigned flags) {
  char err[1024];
  ea_ckpt_manifest m;
  stage(dir, step, gen, W, state, total, flags, &m);
  int rc = ea_ckpt_commit(dir, &m, NULL, err, sizeof err);
  ea_ckpt_manifest_close(&m);
  return rc;
}

/* Runs the CLI with stdout captured into out. */
static int cli(char *out, size_t cap, int argc, char **argv) {
  char p[512];
  snprintf(p, sizeof p, "%s/.cli-out", g_dir);
  fflush(stdout);
  int saved = dup(1);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ck_assert_int_ge(fd, 0);
  dup2(fd, 1);
  close(fd);
  int rc = ea_ckpt_cli(argc, argv);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  fd = open(p, O_RDONLY);
  ssize_t n = read(fd, out, cap - 1);
  close(fd);
  out[n > 0 ? n : 0] = 0;
  unlink(p);
  return rc;
}

/* ---- names and ranges --------------------------------------------------- */

START_TEST(test_names) {
  char b[64];
  uint64_t s, g;
  ck_assert_int_eq(ea_ckpt_dir_name(b, sizeof b, 1200, 7), 0);
  ck_assert_str_eq(b, "step-1200.gen-7");
  ck_assert_int_eq(ea_ckpt_parse_dir_name(b, &s, &g), 0);
  ck_assert_uint_eq(s, 1200);
  ck_assert_uint_eq(g, 7);
  ck_assert_int_eq(ea_ckpt_parse_dir_name("step-18446744073709551615.gen-0", &s, &g), 0);
  ck_assert_uint_eq(s, UINT64_MAX);
  const char *bad[] = {"step-01.gen-1",
                       "step-1.gen-1x",
                       "step-.gen-1",
                       "step-1.gen-",
                       "step-18446744073709551616.gen-1",
                       "Step-1.gen-1",
                       "step-1.gen-1/",
                       ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_msg(ea_ckpt_parse_dir_name(bad[i], &s, &g) == -EINVAL, "accepted \"%s\"", bad[i]);
  ck_assert_int_eq(ea_ckpt_shard_name(b, sizeof b, 3, 4), 0);
  ck_assert_str_eq(b, "shard-3-of-4.bin");
  ck_assert_int_eq(ea_ckpt_dir_name(b, 8, 1200, 7), -ENAMETOOLONG);

  /* shard ranges tile the state, in order, sizes within one byte */
  const uint64_t totals[] = {0, 1, 7, 4096, 1000003, UINT64_MAX / 3};
  const uint32_t worlds[] = {1, 2, 3, 4, 7, 64, 65536};
  for (size_t i = 0; i < 6; i++)
    for (size_t j = 0; j < 7; j++) {
      uint64_t at = 0, mn = UINT64_MAX, mx = 0;
      for (uint32_t r = 0; r < worlds[j]; r++) {
        uint64_t o, l;
        ea_ckpt_shard_range(totals[i], worlds[j], r, &o, &l);
        ck_assert_uint_eq(o, at);
        at += l;
        if (l < mn) mn = l;
        if (l > mx) mx = l;
      }
      ck_assert_uint_eq(at, totals[i]);
      ck_assert_uint_le(mx - mn, 1);
    }
  /* block sizes: at least 1 MiB, a power of two, at most 64 blocks */
  const uint64_t lens[] = {0,         1, 1u << 20, (1u << 20) + 1, 64ull << 20, (64ull << 20) + 1,
                           1ull << 40};
  for (size_t i = 0; i < 7; i++) {
    uint64_t bs = ea_ckpt_block_size(lens[i]);
    ck_assert_uint_ge(bs, EA_CKPT_MIN_BLOCK);
    ck_assert_uint_eq(bs & (bs - 1), 0);
    ck_assert_uint_le((lens[i] + bs - 1) / bs, EA_CKPT_MAX_BLOCKS);
  }
}
END_TEST

/* ---- writer ------------------------------------------------------------- */

/* Where roundtrip's bytes lie: as malloc gives them, on a page boundary (as
 * the agent's mmap of a memfd: O_DIRECT reads them in place), or one byte
 * off one (every chunk is staged). */
enum { AS_MALLOC, PAGE_ALIGNED, MISALIGNED };

static void roundtrip_at(uint64_t len, unsigned flags, uint32_t chunk, uint32_t qd,
                         bool expect_direct, int where) {
  uint8_t *mem = random_bytes(len, len ^ flags ^ chunk), *d = mem, *block = NULL;
  if (where != AS_MALLOC) {
    ck_assert_int_eq(posix_memalign((void **)&block, 4096, len + 4096), 0);
    d = block + (where == MISALIGNED);
    memcpy(d, mem, len);
  }
  char p[512];
  path_in(p, sizeof p, "shard.bin");
  ea_ckpt_progress prog = {0};
  ea_ckpt_write_req q = {.path = p,
                         .data = d,
                         .length = len,
                         .flags = flags,
                         .chunk_bytes = chunk,
                         .queue_depth = qd,
                         .progress = &prog};
  ea_ckpt_write_result res;
  int rc = ea_ckpt_write_shard(&q, &res);
  ck_assert_msg(rc == 0, "len %" PRIu64 " flags %u: %s", len, flags, res.err);
  ck_assert_uint_eq(res.bytes, len);
  ck_assert_uint_eq(atomic_load(&prog.bytes_written), len);
  ck_assert_uint_eq(res.hash, XXH3_64bits_dispatch(d, len));
  if (expect_direct) ck_assert_msg(res.direct, "O_DIRECT not used for len %" PRIu64, len);
  if (flags & EA_CKPT_IO_BUFFERED) ck_assert(!res.direct);
  if (flags & EA_CKPT_IO_SYNC) ck_assert(!res.uring);
  if (res.direct) ck_assert_uint_gt(res.align, 0);
  if (!res.direct || where == MISALIGNED) ck_assert_uint_eq(res.in_place_bytes, 0);
  if (res.direct && where == PAGE_ALIGNED) {
    /* every chunk in place but a tail that is not a multiple of the
     * alignment (staged and padded) */
    uint64_t staged = len - res.in_place_bytes;
    ck_assert_uint_eq(res.in_place_bytes % res.align, 0);
    ck_assert_uint_lt(staged, chunk ? chunk + res.align : EA_CKPT_CHUNK_DEFAULT);
    ck_assert_uint_eq(staged == 0, len % res.align == 0);
  }
  /* block hashes are XXH3 of each block */
  ck_assert_uint_eq(res.block_size, ea_ckpt_block_size(len));
  ck_assert_uint_eq(res.n_blocks, (len + res.block_size - 1) / res.block_size);
  for (uint32_t k = 0; k < res.n_blocks; k++) {
    uint64_t lo = k * res.block_size, n = len - lo < res.block_size ? len - lo : res.block_size;
    ck_assert_uint_eq(res.block_hash[k], XXH3_64bits_dispatch(d + lo, n));
  }
  size_t n;
  uint8_t *back = read_file(p, &n);
  ck_assert_uint_eq(n, len);
  ck_assert_msg(memcmp(back, d, len) == 0, "content differs for len %" PRIu64, len);
  free(back);
  free(mem);
  free(block);
  unlink(p);
}

static void roundtrip(uint64_t len, unsigned flags, uint32_t chunk, uint32_t qd,
                      bool expect_direct) {
  roundtrip_at(len, flags, chunk, qd, expect_direct, AS_MALLOC);
}

START_TEST(test_write_sizes) {
  bool direct = fs_direct(g_dir);
  if (!direct) printf("SKIP(part): %s has no O_DIRECT; only the buffered path is checked\n", g_dir);
  const uint64_t lens[] = {1,
                           2,
                           511,
                           512,
                           513,
                           4095,
                           4096,
                           4097,
                           65537,
                           1u << 20,
                           (2u << 20) - 1,
                           2u << 20,
                           (2u << 20) + 1,
                           (9u << 20) + 7,
                           (64u << 20) - 1,
                           64u << 20};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) roundtrip(lens[i], 0, 0, 0, direct);
  /* many small chunks through a short queue: wrap-around, odd tail */
  roundtrip((3u << 20) + 4097, 0, 12288, 3, direct);
  roundtrip((3u << 20) + 4097, 0, 4096, EA_CKPT_QUEUE_MAX, direct);
  /* an unaligned chunk request is rounded up to the alignment */
  roundtrip(1000003, 0, 5000, 2, direct);
  /* aligned bytes go to the device in place, a ragged tail staged; one byte
   * off alignment, everything is staged */
  const uint64_t placed[] = {4096, 4097, (2u << 20) + 4096, (9u << 20) + 7, 5u << 20};
  for (size_t i = 0; i < sizeof placed / sizeof placed[0]; i++) {
    roundtrip_at(placed[i], 0, 0, 0, direct, PAGE_ALIGNED);
    roundtrip_at(placed[i], 0, 0, 0, direct, MISALIGNED);
    roundtrip_at(placed[i], EA_CKPT_IO_SYNC, 1u << 20, 3, direct, PAGE_ALIGNED);
    roundtrip_at(placed[i], EA_CKPT_IO_NO_REGISTER, 12288, 4, direct, PAGE_ALIGNED);
  }
}
END_TEST

START_TEST(test_write_paths_agree) {
  bool direct = fs_direct(g_dir);
  uint64_t len = (5u << 20) + 333;
  const unsigned flags[] = {0, EA_CKPT_IO_BUFFERED, EA_CKPT_IO_NO_REGISTER, EA_CKPT_IO_SYNC,
                            EA_CKPT_IO_SYNC | EA_CKPT_IO_BUFFERED};
  for (size_t i = 0; i < 5; i++)
    roundtrip(len, flags[i], 1u << 20, 4, direct && !(flags[i] & EA_CKPT_IO_BUFFERED));
  if (direct) {
    /* io_uring and registered buffers are used on the default path */
    uint8_t *d = random_bytes(len, 5);
    char p[512];
    path_in(p, sizeof p, "reg.bin");
    ea_ckpt_write_result res;
    ck_assert_int_eq(write_one(p, d, len, 0, 0, 0, &res), 0);
    if (!uring_ok()) {
      printf("SKIP(part): io_uring unavailable here; the pwrite fallback was used\n");
      ck_assert(!res.uring);
    } else {
      ck_assert(res.uring);
      if (geteuid() == 0) ck_assert(res.registered); /* root: no memlock limit */
    }
    ck_assert_int_eq(write_one(p, d, len, EA_CKPT_IO_NO_REGISTER, 0, 0, &res), 0);
    ck_assert(!res.registered);
    /* open(O_DIRECT) refused with EINVAL: falls back to buffered */
    ck_assert_int_eq(ea_ckpt_fault_arm("open", 1, EINVAL), 0);
    ck_assert_int_eq(write_one(p, d, len, 0, 0, 0, &res), 0);
    ck_assert(ea_ckpt_fault_fired());
    ck_assert(!res.direct);
    ck_assert_uint_eq(res.hash, XXH3_64bits_dispatch(d, len));
    free(d);
  }
  /* empty shard */
  roundtrip(0, 0, 0, 0, false);
}
END_TEST

START_TEST(test_write_cancel_and_errors) {
  uint64_t len = 8u << 20;
  uint8_t *d = random_bytes(len, 9);
  char p[512];
  path_in(p, sizeof p, "c.bin");
  ea_ckpt_progress prog = {0};
  atomic_store(&prog.cancel, true);
  ea_ckpt_write_req q = {.path = p, .data = d, .length = len, .progress = &prog};
  ea_ckpt_write_result res;
  ck_assert_int_eq(ea_ckpt_write_shard(&q, &res), -ECANCELED);
  ck_assert_int_ne(access(p, F_OK), 0); /* partial file removed */

  /* a failing write names the file, the operation and the offset */
  ck_assert_int_eq(ea_ckpt_fault_arm("write", 2, EIO), 0);
  ck_assert_int_eq(write_one(p, d, len, 0, 1u << 20, 2, &res), -EIO);
  ck_assert_msg(
      strstr(res.err, "write ") && strstr(res.err, p) && strstr(res.err, "offset 1048576"),
      "message: %s", res.err);
  ck_assert_int_ne(access(p, F_OK), 0);
  ck_assert_int_eq(ea_ckpt_fault_arm("fsync", 1, ENOSPC), 0);
  ck_assert_int_eq(write_one(p, d, len, 0, 0, 0, &res), -ENOSPC);
  ck_assert_msg(strstr(res.err, "fsync ") && strstr(res.err, "No space left"), "message: %s",
                res.err);
  /* a slow disk: the 1st fsync from now takes 300 ms more, and succeeds */
  ck_assert_int_eq(ea_ckpt_fault_parse("fsync:1:slow=300"), 0);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert_int_eq(write_one(p, d, len, 0, 0, 0, &res), 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  ck_assert(ea_ckpt_fault_fired());
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  ck_assert_msg(ms >= 300.0, "a slow fsync took %.1f ms", ms);
  ck_assert_uint_eq(res.hash, XXH3_64bits_dispatch(d, len));
  /* ... named in a spec only, with a time, and not for torn */
  ck_assert_int_eq(ea_ckpt_fault_arm("fsync", 1, EA_CKPT_FAULT_SLOW), -EINVAL);
  ck_assert_int_eq(ea_ckpt_fault_parse("fsync:1:slow=0"), -EINVAL);
  ck_assert_int_eq(ea_ckpt_fault_parse("fsync:1:slow="), -EINVAL);
  ck_assert_int_eq(ea_ckpt_fault_parse("write:1:slow=5x"), -EINVAL);
  ck_assert_int_eq(ea_ckpt_fault_parse("torn:1:slow=5"), -EINVAL);
  ea_ckpt_fault_reset();
  /* missing directory */
  ck_assert_int_eq(write_one("/nonexistent-ea-dir/x.bin", d, 10, 0, 0, 0, &res), -ENOENT);
  ck_assert_msg(strstr(res.err, "open /nonexistent-ea-dir/x.bin"), "message: %s", res.err);
  free(d);
}
END_TEST

typedef struct {
  const char *path;
  const uint8_t *data;
  uint64_t len;
  int rc;
  ea_ckpt_write_result res;
} thr_arg;

static void *thr_write(void *a) {
  thr_arg *t = a;
  t->rc = write_one(t->path, t->data, t->len, 0, 0, 0, &t->res);
  return NULL;
}

START_TEST(test_parallel_writers) {
  /* the agent runs one writer per local worker, concurrently */
  enum { N = 4 };
  uint64_t total = (24u << 20) + 5;
  uint8_t *state = random_bytes(total, 77);
  char err[1024];
  ck_assert_int_eq(ea_ckpt_prepare(g_dir, 3, 1, NULL, 0, err, sizeof err), 0);
  ea_ckpt_manifest m;
  ck_assert_int_eq(ea_ckpt_manifest_init(&m, 3, 1, N, total), 0);
  pthread_t th[N];
  thr_arg a[N];
  char paths[N][512];
  for (int r = 0; r < N; r++) {
    ea_ckpt_shard_path(paths[r], sizeof paths[r], g_dir, 3, 1, (uint32_t)r, N);
    a[r] = (thr_arg){paths[r], state + m.shards[r].offset, m.shards[r].length, -1};
    ck_assert_int_eq(pthread_create(&th[r], NULL, thr_write, &a[r]), 0);
  }
  for (int r = 0; r < N; r++) {
    pthread_join(th[r], NULL);
    ck_assert_msg(a[r].rc == 0, "%s", a[r].res.err);
    ck_assert_int_eq(ea_ckpt_manifest_set_shard(&m, (uint32_t)r, &a[r].res), 0);
  }
  ck_assert_int_eq(ea_ckpt_commit(g_dir, &m, NULL, err, sizeof err), 0);
  ea_ckpt_manifest_close(&m);
  ea_ckpt_resume rs;
  ck_assert_int_eq(ea_ckpt_find_resume(g_dir, EA_CKPT_VERIFY_FULL, &rs), 0);
  ck_assert_str_eq(rs.name, "step-3.gen-1");
  ea_ckpt_resume_close(&rs);
  free(state);
}
END_TEST

/* ---- manifest ----------------------------------------------------------- */

static void sample_manifest(ea_ckpt_manifest *m, uint64_t total, uint32_t W) {
  ck_assert_int_eq(ea_ckpt_manifest_init(m, 1200, 7, W, total), 0);
  m->config_hash = 0x0123456789abcdefull;
  add_tensors(m);
  uint64_t s = g_seed;
  for (uint32_t r = 0; r < W; r++) {
    ea_ckpt_write_result w;
    memset(&w, 0, sizeof w);
    w.bytes = m->shards[r].length;
    w.hash = splitmix(&s);
    w.block_size = ea_ckpt_block_size(w.bytes);
    w.n_blocks = (uint32_t)((w.bytes + w.block_size - 1) / w.block_size);
    for (uint32_t k = 0; k < w.n_blocks; k++) w.block_hash[k] = splitmix(&s);
    ck_assert_int_eq(ea_ckpt_manifest_set_shard(m, r, &w), 0);
  }
}

START_TEST(test_manifest_roundtrip) {
  ea_ckpt_manifest m, back;
  sample_manifest(&m, (300ull << 20) + 17, 3);
  char *text, err[512];
  size_t len;
  ck_assert_int_eq(ea_ckpt_manifest_format(&m, &text, &len, err, sizeof err), 0);
  ck_assert_int_eq(ea_ckpt_manifest_parse(text, text + len, &back, err, sizeof err), 0);
  ck_assert_uint_eq(back.step, 1200);
  ck_assert_uint_eq(back.generation, 7);
  ck_assert_uint_eq(back.world_size, 3);
  ck_assert_uint_eq(back.total_bytes, m.total_bytes);
  ck_assert_uint_eq(back.config_hash, m.config_hash);
  ck_assert_str_eq(back.agent_version, m.agent_version);
  ck_assert_int_eq(back.created, m.created);
  ck_assert_uint_eq(back.n_tensors, m.n_tensors);
  for (uint32_t i = 0; i < m.n_tensors; i++) {
    ck_assert_str_eq(back.tensors[i].name, m.tensors[i].name);
    ck_assert_str_eq(back.tensors[i].dtype, m.tensors[i].dtype);
    ck_assert_uint_eq(back.tensors[i].ndim, m.tensors[i].ndim);
    ck_assert_mem_eq(back.tensors[i].shape, m.tensors[i].shape, sizeof m.tensors[i].shape);
    ck_assert_uint_eq(back.tensors[i].offset, m.tensors[i].offset);
    ck_assert_uint_eq(back.tensors[i].length, m.tensors[i].length);
  }
  for (uint32_t r = 0; r < 3; r++) {
    ck_assert_str_eq(back.shards[r].file, m.shards[r].file);
    ck_assert_uint_eq(back.shards[r].offset, m.shards[r].offset);
    ck_assert_uint_eq(back.shards[r].length, m.shards[r].length);
    ck_assert_uint_eq(back.shards[r].hash, m.shards[r].hash);
    ck_assert_uint_eq(back.shards[r].n_blocks, m.shards[r].n_blocks);
    ck_assert_mem_eq(back.shards[r].block_hash, m.shards[r].block_hash,
                     m.shards[r].n_blocks * sizeof(uint64_t));
  }
  ea_ckpt_manifest_close(&back);

  /* every single-byte change is rejected (a field error or the checksum) */
  char *mut = malloc(len);
  for (size_t i = 0; i < len; i++) {
    memcpy(mut, text, len);
    mut[i] ^= (char)(1 + (i % 7));
    int rc = ea_ckpt_manifest_parse(mut, mut + len, &back, err, sizeof err);
    ck_assert_msg(rc == -EBADMSG, "byte %zu changed, parse gave %d", i, rc);
  }
  /* every truncation is rejected */
  for (size_t i = 0; i < len; i++)
    ck_assert_msg(ea_ckpt_manifest_parse(text, text + i, &back, err, sizeof err) == -EBADMSG,
                  "truncated to %zu accepted", i);
  free(mut);

  /* field errors name the line and the field */
  char *bad = strdup(text);
  char *w = strstr(bad, "world_size 3");
  w[11] = 'x';
  ck_assert_int_eq(ea_ckpt_manifest_parse(bad, bad + len, &back, err, sizeof err), -EBADMSG);
  ck_assert_msg(strstr(err, "line 5: world_size"), "err: %s", err);
  free(bad);
  /* an absurd count is refused before any allocation */
  const char *huge =
      "format 1\nstep 1\ngeneration 1\nworld_size 1\ntotal_bytes 1\n"
      "config_hash 0000000000000000\nagent_version x\ncreated 2026-01-01T00:00:00Z\n"
      "hash xxh3-64\ntensors 1000000\n";
  ck_assert_int_eq(ea_ckpt_manifest_parse(huge, huge + strlen(huge), &back, err, sizeof err),
                   -EBADMSG);
  ck_assert_msg(strstr(err, "tensors"), "err: %s", err);
  /* bad names are refused when building */
  ck_assert_int_eq(ea_ckpt_manifest_add_tensor(&m, "has space", "f32", 0, NULL, 0, 1), -EINVAL);
  ck_assert_int_eq(ea_ckpt_manifest_add_tensor(&m, "x", "F32", 0, NULL, 0, 1), -EINVAL);
  ck_assert_int_eq(ea_ckpt_manifest_add_tensor(&m, "x", "f32", 0, NULL, m.total_bytes, 1), -EINVAL);
  free(text);
  /* an incomplete manifest (a shard never reported) cannot be formatted */
  m.shards[1].set = false;
  ck_assert_int_eq(ea_ckpt_manifest_format(&m, &text, &len, err, sizeof err), -EINVAL);
  ck_assert_msg(strstr(err, "shard 1"), "err: %s", err);
  ea_ckpt_manifest_close(&m);
}
END_TEST

/* ---- commit, read at any world size, verify ----------------------------- */

START_TEST(test_read_any_world) {
  uint64_t total = (10u << 20) + 13;
  uint8_t *state = random_bytes(total, 1);
  ck_assert_int_eq(save(g_dir, 100, 1, 4, state, total, 0), 0);
  char latest[64];
  ck_assert_int_eq(ea_ckpt_read_latest(g_dir, latest, sizeof latest), 0);
  ck_assert_str_eq(latest, "step-100.gen-1");
  ea_ckpt_resume rs;
  ck_assert_int_eq(ea_ckpt_find_resume(g_dir, EA_CKPT_VERIFY_FULL, &rs), 0);
  ck_assert_uint_eq(rs.manifest.step, 100);
  ck_assert_uint_eq(rs.n_skipped, 0);
  ck_assert_uint_eq(rs.manifest.n_tensors, 4);
  ea_ckpt_reader *rd;
  char err[1024];
  ck_assert_int_eq(ea_ckpt_reader_open(&rd, rs.path, 0, err, sizeof err), 0);
  ea_ckpt_resume_close(&rs);
  uint8_t *buf = malloc(total);
  const uint32_t worlds[] = {1, 3, 7};
  for (int i = 0; i < 3; i++) {
    memset(buf, 0, total);
    for (uint32_t r = 0; r < worlds[i]; r++) {
      uint64_t o, l;
      ea_ckpt_shard_range(total, worlds[i], r, &o, &l);
      int rc = ea_ckpt_reader_read(rd, o, buf + o, l, err, sizeof err);
      ck_assert_msg(rc == 0, "%s", err);
    }
    ck_assert_msg(memcmp(buf, state, total) == 0, "state differs when read at W=%u", worlds[i]);
    if (fs_direct(g_dir)) ck_assert(ea_ckpt_reader_direct(rd));
  }
  /* a byte on each side of every shard boundary, and odd ranges */
  const ea_ckpt_manifest *m = ea_ckpt_reader_manifest(rd);
  for (uint32_t r = 1; r < m->world_size; r++) {
    uint64_t b = m->shards[r].offset;
    uint8_t two[2];
    ck_assert_int_eq(ea_ckpt_reader_read(rd, b - 1, two, 2, err, sizeof err), 0);
    ck_assert_mem_eq(two, state + b - 1, 2);
  }
  uint64_t s = g_seed;
  for (int k = 0; k < 50; k++) {
    uint64_t o = splitmix(&s) % total, l = splitmix(&s) % (total - o + 1);
    if (k % 2) l %= 9000;
    ck_assert_int_eq(ea_ckpt_reader_read(rd, o, buf, l, err, sizeof err), 0);
    ck_assert_msg(memcmp(buf, state + o, l) == 0, "range [%" PRIu64 ", +%" PRIu64 ")", o, l);
  }
  ck_assert_int_eq(ea_ckpt_reader_read(rd, total - 1, buf, 2, err, sizeof err), -EINVAL);
  ea_ckpt_reader_free(rd);
  /* the buffered reader agrees */
  ck_assert_int_eq(ea_ckpt_reader_open(&rd, g_dir, 0, err, sizeof err), -ENOENT); /* no MANIFEST */
  char ck[512];
  path_in(ck, sizeof ck, "step-100.gen-1");
  ck_assert_int_eq(
      ea_ckpt_reader_open(&rd, ck, EA_CKPT_IO_BUFFERED | EA_CKPT_IO_SYNC, err, sizeof err), 0);
  ck_assert_int_eq(ea_ckpt_reader_read(rd, 0, buf, total, err, sizeof err), 0);
  ck_assert(memcmp(buf, state, total) == 0);
  ck_assert(!ea_ckpt_reader_direct(rd));
  ea_ckpt_reader_free(rd);
  /* the same state written at W = 1: one shard of more chunks than reads in
   * flight, read back whole, and verified */
  ck_assert_int_eq(save(g_dir, 200, 1, 1, state, total, 0), 0);
  path_in(ck, sizeof ck, "step-200.gen-1");
  ck_assert_int_eq(ea_ckpt_verify(ck, NULL, EA_CKPT_VERIFY_FULL, 0, NULL), 0);
  ck_assert_int_eq(ea_ckpt_verify(ck, NULL, EA_CKPT_VERIFY_FULL, EA_CKPT_IO_SYNC, NULL), 0);
  const unsigned rf[] = {0, EA_CKPT_IO_SYNC, EA_CKPT_IO_BUFFERED, EA_CKPT_IO_NO_REGISTER};
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(ea_ckpt_reader_open(&rd, ck, rf[i], err, sizeof err), 0);
    memset(buf, 0, total);
    ck_assert_int_eq(ea_ckpt_reader_read(rd, 0, buf, total, err, sizeof err), 0);
    ck_assert_msg(memcmp(buf, state, total) == 0, "io flags %u: state differs", rf[i]);
    ea_ckpt_reader_free(rd);
  }
  free(buf);
  free(state);
}
END_TEST

static void flip_byte(const char *p, uint64_t off) {
  int fd = open(p, O_RDWR);
  ck_assert_int_ge(fd, 0);
  uint8_t b;
  ck_assert_int_eq(pread(fd, &b, 1, (off_t)off), 1);
  b ^= 0x20;
  ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)off), 1);
  close(fd);
}

START_TEST(test_verify_detects_damage) {
  uint64_t total = (7u << 20) + 3;
  uint8_t *state = random_bytes(total, 2);
  ck_assert_int_eq(save(g_dir, 10, 1, 3, state, total, 0), 0);
  ck_assert_int_eq(save(g_dir, 20, 1, 3, state, total, 0), 0);
  char ck[512], sh[600];
  path_in(ck, sizeof ck, "step-20.gen-1");
  ea_ckpt_verify_report rep;
  ck_assert_int_eq(ea_ckpt_verify(ck, NULL, EA_CKPT_VERIFY_FULL, 0, &rep), 0);

  /* a flipped byte in shard 1 */
  ea_ckpt_manifest m;
  char err[1024];
  ck_assert_int_eq(ea_ckpt_manifest_load(ck, &m, err, sizeof err), 0);
  uint64_t at = 1234567;
  snprintf(sh, sizeof sh, "%s/shard-1-of-3.bin", ck);
  flip_byte(sh, at);
  ck_assert_int_eq(ea_ckpt_verify(ck, NULL, EA_CKPT_VERIFY_SIZE, 0, &rep), 0); /* sizes are fine */
  ck_assert_int_eq(ea_ckpt_verify(ck, NULL, EA_CKPT_VERIFY_FULL, 0, &rep), -EBADMSG);
  ck_assert_int_eq(rep.shard, 1);
  ck_assert_str_eq(rep.file, "shard-1-of-3.bin");
  ck_assert_uint_le(rep.file_lo, at);
  ck_assert_uint_gt(rep.file_hi, at);
  ck_assert_uint_le(rep.file_hi - rep.file_lo, m.shards[1].block_size);
  ck_assert_uint_eq(rep.state_lo, m.shards[1].offset + rep.file_lo);
  ck_assert_msg(strstr(rep.msg, "shard-1-of-3.bin") && strstr(rep.msg, "bytes ["), "msg: %s",
                rep.msg);
  /* the one-pass load finds the same damage, in the same words */
  uint8_t *back = malloc(total);
  ck_assert_ptr_nonnull(back);
  ea_ckpt_verify_report rep2;
  ck_assert_int_eq(ea_ckpt_load_verified(ck, &m, back, total, 0, &rep2), -EBADMSG);
  ck_assert_int_eq(rep2.shard, 1);
  ck_assert_uint_eq(rep2.file_lo, rep.file_lo);
  ck_assert_uint_eq(rep2.file_hi, rep.file_hi);
  ck_assert_str_eq(rep2.msg, rep.msg);
  /* ... and the good one loads, every byte in its place, any I/O path */
  char ck10[512];
  path_in(ck10, sizeof ck10, "step-10.gen-1");
  const unsigned paths[] = {0, EA_CKPT_IO_SYNC, EA_CKPT_IO_BUFFERED};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    memset(back, 0, total);
    ck_assert_int_eq(ea_ckpt_load_verified(ck10, NULL, back, total, paths[i], &rep2), 0);
    ck_assert_int_eq(memcmp(back, state, total), 0);
  }
  ck_assert_int_eq(ea_ckpt_load_verified(ck10, NULL, back, total - 1, 0, &rep2), -EINVAL);
  ck_assert_msg(strstr(rep2.msg, "not the"), "msg: %s", rep2.msg);
  free(back);

  /* resume falls back to step 10 and says why */
  ea_ckpt_resume rs;
  ck_assert_int_eq(ea_ckpt_find_resume(g_dir, EA_CKPT_VERIFY_FULL, &rs), 0);
  ck_assert_str_eq(rs.name, "step-10.gen-1");
  ck_assert_uint_eq(rs.n_skipped, 1);
  ck_assert_str_eq(rs.skipped[0].name, "step-20.gen-1");
  ck_assert_msg(strstr(rs.skipped[0].reason, "shard-1-of-3.bin"), "reason: %s",
                rs.skipped[0].reason);
  ea_ckpt_resume_close(&rs);
  /* an explicit --resume-from of the damaged one is an error, no fallback */
  ck_assert_int_eq(ea_ckpt_resolve(g_dir, "20", EA_CKPT_VERIFY_FULL, &rs), -EBADMSG);
  ck_assert_msg(strstr(rs.skipped[0].reason, "shard-1-of-3.bin"), "reason: %s",
                rs.skipped[0].reason);
  ea_ckpt_resume_close(&rs);
  ck_assert_int_eq(ea_ckpt_resolve(g_dir, "step-10.gen-1", EA_CKPT_VERIFY_FULL, &rs), 0);
  ck_assert_uint_eq(rs.manifest.step, 10);
  ea_ckpt_resume_close(&rs);
  ck_assert_int_eq(ea_ckpt_resolve(g_dir, ck, EA_CKPT_VERIFY_SIZE, &rs),
                   0); /* by path, sizes only */
  ea_ckpt_resume_close(&rs);
  ck_assert_int_eq(ea_ckpt_resolve(g_dir, "30", EA_CKPT_VERIFY_FULL, &rs), -ENOENT);
  ea_ckpt_resume_close(&rs);

  /* a truncated shard 2: size verification names the missing range */
  flip_byte(sh, at); /* repair shard 1 */
  snprintf(sh, sizeof sh, "%s/shard-2-of-3.bin", ck);
  uint64_t cut = m.shards[2].length - 1000;
  ck_assert_int_eq(truncate(sh, (off_t)cut), 0);
  ck_assert_int_eq(ea_ckpt_verify(ck, NULL, EA_CKPT_VERIFY_SIZE, 0, &rep), -EBADMSG);
  ck_assert_int_eq(rep.shard, 2);
  ck_assert_uint_eq(rep.file_lo, cut);
  ck_assert_uint_eq(rep.file_hi, m.shards[2].length);
  ck_assert_uint_eq(rep.state_hi, total);
  ck_assert_msg(strstr(rep.msg, "truncated"), "msg: %s", rep.msg);
  /* the reader refuses the missing bytes too */
  ea_ckpt_reader *rd;
  ck_assert_int_eq(ea_ckpt_reader_open(&rd, ck, 0, err, sizeof err), 0);
  uint8_t *buf = malloc(total);
  ck_assert_int_eq(ea_ckpt_reader_read(rd, 0, buf, total, err, sizeof err), -EBADMSG);
  ck_assert_msg(strstr(err, "shard-2-of-3.bin"), "err: %s", err);
  ea_ckpt_reader_free(rd);
  free(buf);

  /* the CLI says the same and exits 1 */
  char out[8192];
  char *av[] = {"ckpt", "verify", g_dir, "20", NULL};
  ck_assert_int_eq(cli(out, sizeof out, 4, av), 1);
  ck_assert_msg(strstr(out, "CORRUPT") && strstr(out, "shard-2-of-3.bin"), "out: %s", out);
  char range[64];
  snprintf(range, sizeof range, "[%" PRIu64 ", %" PRIu64 ")", cut, m.shards[2].length);
  ck_assert_msg(strstr(out, range), "out: %s", out);
  char *av2[] = {"ckpt", "verify", g_dir, "10", NULL};
  ck_assert_int_eq(cli(out, sizeof out, 4, av2), 0);
  /* a missing shard */
  unlink(sh);
  ck_assert_int_eq(ea_ckpt_verify(ck, NULL, EA_CKPT_VERIFY_SIZE, 0, &rep), -ENOENT);
  ck_assert_int_eq(rep.shard, 2);
  ea_ckpt_manifest_close(&m);
  free(state);
}
END_TEST

/* ---- fencing ------------------------------------------------------------ */

static bool exists(const char *name) {
  char p[512];
  path_in(p, sizeof p, name);
  return access(p, F_OK) == 0;
}

/* What the search told the hooks. */
typedef struct {
  int offers;
  char offered[4][EA_CKPT_NAME_MAX];
  int refuse; /* the accept hook: > 0 passes over the first offer, < 0 stops at it */
  int nskip;
  char skipped[8][EA_CKPT_NAME_MAX];
  bool superseded[8];
} hook_log;

static int hook_accept(void *arg, const ea_ckpt_candidate *c, char *why, size_t whylen) {
  hook_log *h = arg;
  ck_assert_int_lt(h->offers, 4);
  ck_assert_ptr_nonnull(c->manifest);
  ck_assert_msg(strstr(c->path, c->name), "%s is not under %s", c->name, c->path);
  snprintf(h->offered[h->offers], sizeof h->offered[0], "%s", c->name);
  if (h->offers++ == 0 && h->refuse) {
    snprintf(why, whylen, "refused by the caller");
    return h->refuse;
  }
  return 0;
}

static void hook_skipped(void *arg, const char *name, const char *why, bool superseded) {
  hook_log *h = arg;
  ck_assert_int_lt(h->nskip, 8);
  ck_assert(why && *why);
  snprintf(h->skipped[h->nskip], sizeof h->skipped[0], "%s", name);
  h->superseded[h->nskip++] = superseded;
}

START_TEST(test_resume_search_hooks) {
  /* newest first: 20.gen-1 (superseded by 15.gen-2), 15.gen-2 (damaged),
   * 12.gen-2, 10.gen-1 */
  uint64_t total = (3u << 20) + 11;
  uint8_t *state = random_bytes(total, 5);
  ck_assert_int_eq(save(g_dir, 10, 1, 2, state, total, 0), 0);
  ck_assert_int_eq(save(g_dir, 20, 1, 2, state, total, 0), 0);
  ck_assert_int_eq(save(g_dir, 12, 2, 2, state, total, 0), 0);
  ck_assert_int_eq(save(g_dir, 15, 2, 2, state, total, 0), 0);
  char ck[512], sh[600];
  path_in(ck, sizeof ck, "step-15.gen-2");
  snprintf(sh, sizeof sh, "%s/shard-0-of-2.bin", ck);
  flip_byte(sh, 4242);
  ea_ckpt_resume rs;

  /* no hooks: what find_resume does */
  ck_assert_int_eq(ea_ckpt_search_resume(g_dir, EA_CKPT_VERIFY_FULL, NULL, &rs), 0);
  ck_assert_str_eq(rs.name, "step-12.gen-2");
  ck_assert(rs.listed);
  ck_assert_uint_eq(rs.n_skipped, 2);
  ea_ckpt_resume_close(&rs);

  /* the caller passes over 12.gen-2: recorded like damage, 10.gen-1 taken */
  hook_log h = {.refuse = 1};
  ea_ckpt_resume_hooks hk = {.accept = hook_accept, .skipped = hook_skipped, .arg = &h};
  ck_assert_int_eq(ea_ckpt_search_resume(g_dir, EA_CKPT_VERIFY_FULL, &hk, &rs), 0);
  ck_assert_str_eq(rs.name, "step-10.gen-1");
  ck_assert_uint_eq(rs.manifest.step, 10);
  ck_assert_int_eq(h.offers, 2); /* only what verified */
  ck_assert_str_eq(h.offered[0], "step-12.gen-2");
  ck_assert_str_eq(h.offered[1], "step-10.gen-1");
  ck_assert_int_eq(h.nskip, 3);
  ck_assert_str_eq(h.skipped[0], "step-20.gen-1");
  ck_assert(h.superseded[0]);
  ck_assert_str_eq(h.skipped[1], "step-15.gen-2");
  ck_assert(!h.superseded[1]);
  ck_assert_str_eq(h.skipped[2], "step-12.gen-2");
  ck_assert(!h.superseded[2]);
  ck_assert_uint_eq(rs.n_skipped, 3);
  ck_assert_msg(strstr(rs.skipped[1].reason, "shard-0-of-2.bin"), "%s", rs.skipped[1].reason);
  ck_assert_str_eq(rs.skipped[2].reason, "refused by the caller");
  ea_ckpt_resume_close(&rs);

  /* the caller stops the search: its error, nothing taken or recorded for it */
  h = (hook_log){.refuse = -EINVAL};
  ck_assert_int_eq(ea_ckpt_search_resume(g_dir, EA_CKPT_VERIFY_FULL, &hk, &rs), -EINVAL);
  ck_assert_int_eq(h.offers, 1);
  ck_assert_int_eq(h.nskip, 2);
  ck_assert_uint_eq(rs.n_skipped, 2);
  ea_ckpt_resume_close(&rs);

  /* no directory: the listing's error, and not listed */
  char none[600];
  snprintf(none, sizeof none, "%s/none", g_dir);
  ck_assert_int_eq(ea_ckpt_search_resume(none, EA_CKPT_VERIFY_FULL, &hk, &rs), -ENOENT);
  ck_assert(!rs.listed);
  ea_ckpt_resume_close(&rs);
  free(state);
}
END_TEST

START_TEST(test_generation_fencing) {
  uint64_t total = 100003;
  uint8_t *state = random_bytes(total, 3);
  char latest[64], err[1024];
  ck_assert_int_eq(save(g_dir, 10, 2, 2, state, total, 0), 0);
  /* an older generation (a stale controller) cannot commit, even a newer step */
  ck_assert_int_eq(save(g_dir, 20, 1, 2, state, total, 0), -ESTALE);
  ck_assert(!exists("step-20.gen-1/MANIFEST"));
  ck_assert(!exists("step-20.gen-1/MANIFEST.tmp"));
  ck_assert_int_eq(ea_ckpt_read_latest(g_dir, latest, sizeof latest), 0);
  ck_assert_str_eq(latest, "step-10.gen-2");
  /* the same generation at a lower step commits but LATEST stays */
  ck_assert_int_eq(save(g_dir, 5, 2, 2, state, total, 0), 0);
  ck_assert_int_eq(ea_ckpt_read_latest(g_dir, latest, sizeof latest), 0);
  ck_assert_str_eq(latest, "step-10.gen-2");
  /* committing the same checkpoint twice: -EEXIST, the first stays */
  ea_ckpt_manifest m;
  char ck[512];
  path_in(ck, sizeof ck, "step-10.gen-2");
  ck_assert_int_eq(ea_ckpt_manifest_load(ck, &m, err, sizeof err), 0);
  ck_assert_int_eq(ea_ckpt_commit(g_dir, &m, NULL, err, sizeof err), -EEXIST);
  ck_assert_int_eq(ea_ckpt_verify(ck, NULL, EA_CKPT_VERIFY_FULL, 0, NULL), 0);
  ea_ckpt_manifest_close(&m);
  /* a newer generation that restarted from an earlier step supersedes 10 */
  bool moved = false;
  ck_assert_int_eq(ea_ckpt_prepare(g_dir, 8, 3, NULL, 0, err, sizeof err), 0);
  ck_assert_int_eq(ea_ckpt_manifest_init(&m, 8, 3, 1, total), 0);
  char p[512];
  ea_ckpt_shard_path(p, sizeof p, g_dir, 8, 3, 0, 1);
  ea_ckpt_write_result res;
  ck_assert_int_eq(write_one(p, state, total, 0, 0, 0, &res), 0);
  ck_assert_int_eq(ea_ckpt_manifest_set_shard(&m, 0, &res), 0);
  ck_assert_int_eq(ea_ckpt_commit(g_dir, &m, &moved, err, sizeof err), 0);
  ck_assert(moved);
  ea_ckpt_manifest_close(&m);
  ck_assert_int_eq(ea_ckpt_read_latest(g_dir, latest, sizeof latest), 0);
  ck_assert_str_eq(latest, "step-8.gen-3");
  ea_ckpt_resume rs;
  ck_assert_int_eq(ea_ckpt_find_resume(g_dir, EA_CKPT_VERIFY_FULL, &rs), 0);
  ck_assert_str_eq(rs.name, "step-8.gen-3");
  ck_assert_uint_eq(rs.n_skipped, 1);
  ck_assert_str_eq(rs.skipped[0].name, "step-10.gen-2");
  ea_ckpt_resume_close(&rs);
  ea_ckpt_entry *e;
  size_t n;
  ck_assert_int_eq(ea_ckpt_list(g_dir, &e, &n), 0);
  ck_assert_uint_eq(n, 4);
  ck_assert_str_eq(e[0].name, "step-20.gen-1");
  ck_assert(!e[0].complete);
  ck_assert_str_eq(e[1].name, "step-10.gen-2");
  ck_assert(e[1].complete && e[1].superseded);
  ck_assert_str_eq(e[2].name, "step-8.gen-3");
  ck_assert(e[2].latest && !e[2].superseded);
  free(e);
  free(state);
}
END_TEST

START_TEST(test_fencing_race) {
  /* two controllers commit at once (processes, so flock really arbitrates):
   * generation 5 at a high step and generation 6 at a lower one.  Whatever
   * the interleaving, LATEST ends on generation 6 and generation 5's
   * MANIFEST exists only if it committed before 6 did. */
  uint64_t total = 50001;
  uint8_t *state = random_bytes(total, 4);
  for (int round = 0; round < 6; round++) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/r%d", g_dir, round);
    mkdir(dir, 0755);
    ck_assert_int_eq(save(dir, 1, 4, 1, state, total, 0), 0);
    pid_t pid[2];
    for (int c = 0; c < 2; c++) {
      pid[c] = fork();
      ck_assert_int_ge(pid[c], 0);
      if (pid[c] == 0) {
        int rc = c == 0 ? save(dir, 100 + (uint64_t)round, 5, 1, state, total, 0)
                        : save(dir, 50, 6, 1, state, total, 0);
        _exit(rc == 0 ? 0 : rc == -ESTALE ? 3 : 1);
      }
    }
    int st[2];
    for (int c = 0; c < 2; c++) {
      ck_assert_int_eq(waitpid(pid[c], &st[c], 0), pid[c]);
      ck_assert(WIFEXITED(st[c]));
    }
    ck_assert_int_eq(WEXITSTATUS(st[1]), 0);
    ck_assert_int_ne(WEXITSTATUS(st[0]), 1);
    char latest[64];
    ck_assert_int_eq(ea_ckpt_read_latest(dir, latest, sizeof latest), 0);
    ck_assert_str_eq(latest, "step-50.gen-6");
    ea_ckpt_resume rs;
    ck_assert_int_eq(ea_ckpt_find_resume(dir, EA_CKPT_VERIFY_FULL, &rs), 0);
    ck_assert_str_eq(rs.name, "step-50.gen-6");
    ea_ckpt_resume_close(&rs);
  }
  free(state);
}
END_TEST

/* ---- retention ---------------------------------------------------------- */

static void make_partial(const char *name, size_t bytes) {
  char p[512];
  path_in(p, sizeof p, name);
  ck_assert_int_eq(mkdir(p, 0755), 0);
  strcat(p, "/shard-0-of-2.bin");
  FILE *f = fopen(p, "w");
  for (size_t i = 0; i < bytes; i++) fputc('x', f);
  fclose(f);
}

/* ---- cluster identity (DIR/CLUSTER) ------------------------------------- */

static ea_ckpt_cluster cluster_of(uint8_t idbyte, uint8_t bindbyte, bool keyed) {
  ea_ckpt_cluster c;
  memset(c.id, idbyte, sizeof c.id);
  c.id[15] = (uint8_t)(idbyte + 1);
  memset(c.bind, bindbyte, sizeof c.bind);
  c.keyed = keyed;
  return c;
}

START_TEST(test_cluster_file) {
  ea_ckpt_cluster a = cluster_of(0xab, 0x11, true), b;
  char text[256], s[EA_CKPT_CLUSTER_STR], err[256];
  int n = ea_ckpt_cluster_format(&a, text, sizeof text);
  ck_assert_int_gt(n, 0);
  ea_ckpt_cluster_id_str(&a, s);
  ck_assert_uint_eq(strlen(s), 36);
  ck_assert(s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-');
  ck_assert_int_eq(ea_ckpt_cluster_parse(text, text + n, &b, err, sizeof err), 0);
  ck_assert(ea_ckpt_cluster_same(&a, &b));
  /* the same id under another binding, or unkeyed, is another cluster */
  b.bind[0] ^= 1;
  ck_assert(!ea_ckpt_cluster_same(&a, &b));
  b = a;
  b.keyed = false;
  ck_assert(!ea_ckpt_cluster_same(&a, &b));
  /* every damaged form is refused, naming the line */
  const char *bad[] = {"", "elastic-agent cluster 2\nid x\nbind none x\n",
                       "elastic-agent cluster 1\nid 0011\nbind none 00\n",
                       "elastic-agent cluster 1\nid abababab-abab-abab-abab-abababababac\nbind "
                       "maybe 00\n",
                       "elastic-agent cluster 1\nid abababab-abab-abab-abab-abababababac\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = 0;
    ck_assert_int_eq(ea_ckpt_cluster_parse(bad[i], bad[i] + strlen(bad[i]), &b, err, sizeof err),
                     -EBADMSG);
    ck_assert_msg(err[0], "no reason for bad[%zu]", i);
  }
  uint8_t id[16];
  ck_assert_int_eq(ea_ckpt_cluster_id_parse(s, strlen(s), id), 0);
  ck_assert_int_eq(memcmp(id, a.id, 16), 0);
  ck_assert_int_eq(ea_ckpt_cluster_id_parse("abc", 3, id), -EINVAL);
}
END_TEST

START_TEST(test_cluster_check) {
  ea_ckpt_cluster a = cluster_of(0x01, 0x22, true), other = cluster_of(0x02, 0x22, true);
  ea_ckpt_cluster rekeyed = a;
  rekeyed.bind[3] ^= 0x40; /* the same id bound to another key */
  char err[2048], sa[EA_CKPT_CLUSTER_STR], so[EA_CKPT_CLUSTER_STR];
  ea_ckpt_cluster_id_str(&a, sa);
  ea_ckpt_cluster_id_str(&other, so);
  /* a new directory: no owner yet */
  ck_assert_int_eq(ea_ckpt_cluster_check(g_dir, &a, "resume from", err, sizeof err), 1);
  ck_assert(!ea_ckpt_cluster_legacy(g_dir)); /* nothing in it */
  bool claimed = false;
  ck_assert_int_eq(ea_ckpt_cluster_claim(g_dir, &a, &claimed, err, sizeof err), 0);
  ck_assert(claimed);
  ck_assert(exists("CLUSTER") && !exists("CLUSTER.tmp"));
  /* the same cluster: accepted for every operation, claimed only once */
  const char *ops[] = {"resume from", "commit into", "delete from"};
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(ea_ckpt_cluster_check(g_dir, &a, ops[i], err, sizeof err), 0);
  ck_assert_int_eq(ea_ckpt_cluster_claim(g_dir, &a, &claimed, err, sizeof err), 0);
  ck_assert(!claimed);
  /* another cluster: refused for every operation, naming both and the dir */
  for (int i = 0; i < 3; i++) {
    err[0] = 0;
    ck_assert_int_eq(ea_ckpt_cluster_check(g_dir, &other, ops[i], err, sizeof err), -EXDEV);
    ck_assert_msg(strstr(err, sa) && strstr(err, so) && strstr(err, g_dir) && strstr(err, ops[i]),
                  "refusal lacks a name: %s", err);
  }
  ck_assert_int_eq(ea_ckpt_cluster_claim(g_dir, &other, &claimed, err, sizeof err), -EXDEV);
  ck_assert(!claimed);
  /* the same id under another key: refused, and said so */
  ck_assert_int_eq(ea_ckpt_cluster_check(g_dir, &rekeyed, "commit into", err, sizeof err), -EXDEV);
  ck_assert_msg(strstr(err, "under another cluster key"), "%s", err);
  /* the file is still the first cluster's */
  char p[512];
  path_in(p, sizeof p, "CLUSTER");
  ea_ckpt_cluster back;
  ck_assert_int_eq(ea_ckpt_cluster_load(p, &back, err, sizeof err), 0);
  ck_assert(ea_ckpt_cluster_same(&back, &a));
  /* a damaged CLUSTER is refused too, never overwritten */
  FILE *f = fopen(p, "w");
  fputs("garbage\n", f);
  fclose(f);
  ck_assert_int_eq(ea_ckpt_cluster_check(g_dir, &a, "resume from", err, sizeof err), -EBADMSG);
  ck_assert_int_eq(ea_ckpt_cluster_claim(g_dir, &a, &claimed, err, sizeof err), -EBADMSG);
  ck_assert_msg(strstr(err, "cannot be read"), "%s", err);
}
END_TEST

/* A directory with checkpoints but no CLUSTER (from before identities) is
 * adopted by the first cluster that commits into it (the commit path:
 * agent/ckpt/ckpt_ctl.c's ea__ckpt_commit_run); a partial step directory alone
 * does not make it legacy. */
START_TEST(test_cluster_legacy_adopted) {
  uint64_t total = 4099;
  uint8_t *state = random_bytes(total, 41);
  ea_ckpt_manifest pm;
  stage(g_dir, 5, 1, 2, state, total, 0, &pm); /* shards, no MANIFEST */
  ea_ckpt_manifest_close(&pm);
  ck_assert(!ea_ckpt_cluster_legacy(g_dir));
  ck_assert_int_eq(save(g_dir, 10, 1, 2, state, total, 0), 0);
  ck_assert(ea_ckpt_cluster_legacy(g_dir));
  ea_ckpt_cluster a = cluster_of(0x07, 0x33, false);
  char err[1024];
  ck_assert_int_eq(ea_ckpt_cluster_check(g_dir, &a, "resume from", err, sizeof err), 1);
  ea__ckpt_commit_job *j = calloc(1, sizeof *j);
  ck_assert_ptr_nonnull(j);
  j->step = 20;
  j->gen = 1;
  snprintf(j->dir, sizeof j->dir, "%s", g_dir);
  j->keep_last = 5;
  j->have_cluster = true;
  j->cluster = a;
  stage(g_dir, 20, 1, 2, state, total, 0, &j->manifest);
  ea__ckpt_commit_run(j);
  ck_assert_msg(j->rc == 0, "%s", j->err);
  ck_assert(j->cluster_claimed && j->cluster_adopted);
  ck_assert(exists("step-10.gen-1/MANIFEST") && exists("step-20.gen-1/MANIFEST"));
  ck_assert_int_eq(ea_ckpt_cluster_check(g_dir, &a, "resume from", err, sizeof err), 0);
  /* the next commit neither claims nor adopts */
  ea_ckpt_manifest_close(&j->manifest);
  memset(j, 0, sizeof *j);
  j->step = 30;
  j->gen = 1;
  snprintf(j->dir, sizeof j->dir, "%s", g_dir);
  j->keep_last = 5;
  j->have_cluster = true;
  j->cluster = a;
  stage(g_dir, 30, 1, 2, state, total, 0, &j->manifest);
  ea__ckpt_commit_run(j);
  ck_assert_msg(j->rc == 0, "%s", j->err);
  ck_assert(!j->cluster_claimed && !j->cluster_adopted);
  ea_ckpt_manifest_close(&j->manifest);
  free(j);
  free(state);
}
END_TEST

/* The commit path (agent/ckpt/ckpt_ctl.c's ea__ckpt_commit_run): in another
 * cluster's directory nothing is committed and retention deletes nothing;
 * in the cluster's own both run. */
START_TEST(test_cluster_commit_refused) {
  uint64_t total = 8191;
  uint8_t *state = random_bytes(total, 42);
  ea_ckpt_cluster mine = cluster_of(0x21, 0x44, true), theirs = cluster_of(0x22, 0x55, true);
  char err[1024];
  ck_assert_int_eq(ea_ckpt_cluster_claim(g_dir, &theirs, NULL, err, sizeof err), 0);
  for (uint64_t s = 1; s <= 3; s++) ck_assert_int_eq(save(g_dir, s * 10, 3, 2, state, total, 0), 0);
  ea__ckpt_commit_job *j = calloc(1, sizeof *j);
  ck_assert_ptr_nonnull(j);
  j->step = 40;
  j->gen = 4; /* a newer generation: without the check it would commit and fence theirs */
  snprintf(j->dir, sizeof j->dir, "%s", g_dir);
  j->keep_last = 1;
  j->have_cluster = true;
  j->cluster = mine;
  stage(g_dir, 40, 4, 2, state, total, 0, &j->manifest);
  ea__ckpt_commit_run(j);
  ck_assert_int_eq(j->rc, -EXDEV);
  ck_assert_msg(strstr(j->err, "refusing to commit into checkpoint.dir"), "%s", j->err);
  ck_assert(!exists("step-40.gen-4/MANIFEST"));
  ck_assert(exists("step-10.gen-3/MANIFEST") && exists("step-20.gen-3/MANIFEST") &&
            exists("step-30.gen-3/MANIFEST")); /* retention did not run */
  char name[64];
  ck_assert_int_eq(ea_ckpt_read_latest(g_dir, name, sizeof name), 0);
  ck_assert_str_eq(name, "step-30.gen-3");
  /* their own commit of the same files goes through, retention with it */
  j->cluster = theirs;
  j->rc = 0;
  ea__ckpt_commit_run(j);
  ck_assert_msg(j->rc == 0, "%s", j->err);
  ck_assert(!j->cluster_claimed);
  ck_assert(exists("step-40.gen-4/MANIFEST") && !exists("step-10.gen-3"));
  ea_ckpt_manifest_close(&j->manifest);
  free(j);
  free(state);
}
END_TEST

START_TEST(test_retention) {
  uint64_t total = 30011;
  uint8_t *state = random_bytes(total, 5);
  for (uint64_t s = 1; s <= 6; s++) ck_assert_int_eq(save(g_dir, s * 10, 2, 2, state, total, 0), 0);
  make_partial("step-25.gen-2", 10); /* older leftover: goes */
  make_partial("step-70.gen-1", 10); /* older generation, higher step: goes */
  make_partial("step-5.gen-2", 10);  /* older, but being written: stays */
  make_partial("step-70.gen-2", 10); /* newer than the newest complete: stays */
  char lt[512];
  path_in(lt, sizeof lt, "LATEST.tmp");
  FILE *f = fopen(lt, "w");
  fputs("junk", f);
  fclose(f);
  const char *inprog[] = {"step-5.gen-2"};
  ea_ckpt_retain_stats st;
  char err[1024];
  ck_assert_int_eq(ea_ckpt_retain(g_dir, 2, inprog, 1, &st, err, sizeof err), 0);
  ck_assert_uint_eq(st.kept, 2);
  ck_assert_uint_eq(st.removed_complete, 4);
  ck_assert_uint_eq(st.removed_partial, 3);
  ck_assert(exists("step-60.gen-2") && exists("step-50.gen-2"));
  ck_assert(!exists("step-40.gen-2") && !exists("step-10.gen-2"));
  ck_assert(!exists("step-25.gen-2") && !exists("step-70.gen-1") && !exists("LATEST.tmp"));
  ck_assert(exists("step-5.gen-2") && exists("step-70.gen-2"));
  /* keep_last 0 means 1: the newest complete is never deleted */
  ck_assert_int_eq(ea_ckpt_retain(g_dir, 0, inprog, 1, &st, err, sizeof err), 0);
  ck_assert(exists("step-60.gen-2") && !exists("step-50.gen-2"));
  ck_assert(exists("step-5.gen-2")); /* still being written */
  ck_assert_int_eq(ea_ckpt_retain(g_dir, 1, NULL, 0, &st, err, sizeof err), 0);
  ck_assert(!exists("step-5.gen-2")); /* no longer: an older leftover */
  ck_assert(exists("step-60.gen-2") && exists("step-70.gen-2"));
  ea_ckpt_resume rs;
  ck_assert_int_eq(ea_ckpt_find_resume(g_dir, EA_CKPT_VERIFY_FULL, &rs), 0);
  ck_assert_str_eq(rs.name, "step-60.gen-2");
  ea_ckpt_resume_close(&rs);

  /* LATEST's target is kept even when it is not among the newest */
  ck_assert_int_eq(save(g_dir, 80, 2, 2, state, total, 0), 0);
  ck_assert_int_eq(save(g_dir, 90, 2, 2, state, total, 0), 0);
  char lp[512];
  path_in(lp, sizeof lp, "LATEST");
  f = fopen(lp, "w");
  fputs("step-60.gen-2\n", f);
  fclose(f);
  ck_assert_int_eq(ea_ckpt_retain(g_dir, 1, NULL, 0, &st, err, sizeof err), 0);
  ck_assert(exists("step-60.gen-2") && exists("step-90.gen-2") && !exists("step-80.gen-2"));
  free(state);
}
END_TEST

/* ---- a LATEST that names no checkpoint (issue 11, item 5) --------------- */

static void write_latest(const char *text) {
  char lp[512];
  path_in(lp, sizeof lp, "LATEST");
  FILE *f = fopen(lp, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

START_TEST(test_bogus_latest_neither_fences_nor_sticks) {
  uint64_t total = 20011;
  uint8_t *state = random_bytes(total, 6);
  char latest[64], err[1024];
  /* a LATEST naming a checkpoint that does not exist, before anything was
   * committed: the first commit goes through and replaces it */
  write_latest("step-1.gen-281474976710655\n");
  ck_assert_int_eq(save(g_dir, 10, 2, 2, state, total, 0), 0);
  ck_assert_int_eq(ea_ckpt_read_latest(g_dir, latest, sizeof latest), 0);
  ck_assert_str_eq(latest, "step-10.gen-2");
  /* the same after a commit: a later commit of the same generation is not
   * fenced, and LATEST moves back to a checkpoint that exists */
  write_latest("step-1.gen-281474976710655\n");
  ck_assert_int_eq(save(g_dir, 20, 2, 2, state, total, 0), 0);
  ck_assert_int_eq(ea_ckpt_read_latest(g_dir, latest, sizeof latest), 0);
  ck_assert_str_eq(latest, "step-20.gen-2");
  /* a LATEST naming a directory whose MANIFEST does not verify (planted
   * with a huge generation) does not fence either, nor protect it */
  char ck[512];
  path_in(ck, sizeof ck, "step-30.gen-9000");
  ck_assert_int_eq(mkdir(ck, 0755), 0);
  char mp[600];
  snprintf(mp, sizeof mp, "%s/MANIFEST", ck);
  FILE *f = fopen(mp, "w");
  fputs("ea-ckpt-manifest 1\nstep 30\ngeneration 9000\n", f);
  fclose(f);
  write_latest("step-30.gen-9000\n");
  ck_assert_int_eq(save(g_dir, 40, 3, 2, state, total, 0), 0);
  ck_assert_int_eq(ea_ckpt_read_latest(g_dir, latest, sizeof latest), 0);
  ck_assert_str_eq(latest, "step-40.gen-3");
  /* a real newer generation still fences */
  ck_assert_int_eq(save(g_dir, 50, 2, 2, state, total, 0), -ESTALE);
  ea_ckpt_resume rs;
  ck_assert_int_eq(ea_ckpt_find_resume(g_dir, EA_CKPT_VERIFY_FULL, &rs), 0);
  ck_assert_str_eq(rs.name, "step-40.gen-3");
  ea_ckpt_resume_close(&rs);
  /* retention: the planted directory is a leftover, LATEST or not */
  write_latest("step-30.gen-9000\n");
  ea_ckpt_retain_stats st;
  ck_assert_int_eq(ea_ckpt_retain(g_dir, 3, NULL, 0, &st, err, sizeof err), 0);
  ck_assert(!exists("step-30.gen-9000"));
  ck_assert(exists("step-40.gen-3") && exists("step-20.gen-2") && exists("step-10.gen-2"));
  free(state);
}
END_TEST

START_TEST(test_leftovers_bounded_while_commits_fail) {
  /* commits that never succeed (here: nothing complete at all, as under a
   * fence that refused every commit) leave one step directory per save;
   * retention keeps the in-progress ones and EA_CKPT_PARTIAL_KEEP newest
   * others, never a complete checkpoint */
  char err[1024];
  char name[64];
  for (int s = 1; s <= 12; s++) {
    snprintf(name, sizeof name, "step-%d.gen-4", s * 10);
    make_partial(name, 100);
  }
  const char *inprog[] = {"step-30.gen-4"};
  ea_ckpt_retain_stats st;
  ck_assert_int_eq(ea_ckpt_retain(g_dir, 2, inprog, 1, &st, err, sizeof err), 0);
  ck_assert_uint_eq(st.removed_partial, 12 - 1 - EA_CKPT_PARTIAL_KEEP);
  ck_assert(exists("step-120.gen-4") && exists("step-110.gen-4") && exists("step-30.gen-4"));
  ck_assert(!exists("step-100.gen-4") && !exists("step-10.gen-4"));
  /* with complete checkpoints: they stay (keep_last), the newer leftovers
   * are bounded, the older ones go */
  uint64_t total = 5003;
  uint8_t *state = random_bytes(total, 7);
  ck_assert_int_eq(save(g_dir, 5, 4, 1, state, total, 0), 0);
  ck_assert_int_eq(save(g_dir, 7, 4, 1, state, total, 0), 0);
  for (int s = 13; s <= 20; s++) {
    snprintf(name, sizeof name, "step-%d.gen-4", s * 10);
    make_partial(name, 100);
  }
  make_partial("step-1.gen-4", 100);
  ck_assert_int_eq(ea_ckpt_retain(g_dir, 2, NULL, 0, &st, err, sizeof err), 0);
  ck_assert_uint_eq(st.kept, 2);
  ck_assert_uint_eq(st.removed_complete, 0);
  ck_assert(exists("step-5.gen-4") && exists("step-7.gen-4"));
  ck_assert(exists("step-200.gen-4") && exists("step-190.gen-4"));
  ck_assert(!exists("step-180.gen-4") && !exists("step-120.gen-4") && !exists("step-30.gen-4"));
  ck_assert(!exists("step-1.gen-4"));
  ea_ckpt_entry *e;
  size_t n;
  ck_assert_int_eq(ea_ckpt_list(g_dir, &e, &n), 0);
  ck_assert_uint_eq(n, 2 + EA_CKPT_PARTIAL_KEEP);
  free(e);
  free(state);
}
END_TEST

START_TEST(test_retention_keeps_saves_begun_after_the_commit) {
  /* the commit of step 20 runs its retention while the ranks trained on
   * and wrote shards of steps 25, 30 and 35 whose first reports had not
   * reached the controller when the commit was queued (its in-progress set
   * is empty): all three stay.  Plain retention would keep only the
   * EA_CKPT_PARTIAL_KEEP newest and delete step 25's shards under its
   * writers (found by test_ckpt_flow: "stat …/step-25.gen-1/shard-0-of-3.bin:
   * No such file or directory" at its commit) */
  char err[1024];
  uint64_t total = 4099;
  uint8_t *state = random_bytes(total, 11);
  ck_assert_int_eq(save(g_dir, 20, 3, 1, state, total, 0), 0);
  make_partial("step-15.gen-3", 100); /* behind the commit: abandoned */
  make_partial("step-25.gen-3", 100);
  make_partial("step-30.gen-3", 100);
  make_partial("step-35.gen-3", 100);
  make_partial("step-40.gen-2", 100); /* an older generation's: abandoned */
  ea_ckpt_retain_stats st;
  ck_assert_int_eq(ea_ckpt_retain_after(g_dir, 3, 20, 3, NULL, 0, &st, err, sizeof err), 0);
  ck_assert_uint_eq(st.removed_partial, 2);
  ck_assert(exists("step-25.gen-3") && exists("step-30.gen-3") && exists("step-35.gen-3"));
  ck_assert(!exists("step-15.gen-3") && !exists("step-40.gen-2"));
  ck_assert(exists("step-20.gen-3"));
  /* a (failed) commit of step 30 then judges them: 35 began after it, 25
   * and 30 fall under the bound (the two newest of the others) */
  make_partial("step-22.gen-3", 100);
  ck_assert_int_eq(ea_ckpt_retain_after(g_dir, 3, 30, 3, NULL, 0, &st, err, sizeof err), 0);
  ck_assert(exists("step-25.gen-3") && exists("step-30.gen-3") && exists("step-35.gen-3"));
  ck_assert(!exists("step-22.gen-3"));
  /* without a commit to be after, the bound applies to all of them */
  make_partial("step-45.gen-3", 100);
  ck_assert_int_eq(ea_ckpt_retain(g_dir, 3, NULL, 0, &st, err, sizeof err), 0);
  ck_assert(exists("step-45.gen-3") && exists("step-35.gen-3"));
  ck_assert(!exists("step-30.gen-3") && !exists("step-25.gen-3"));
  free(state);
}
END_TEST

/* ---- fence first, bounded lock --------------------------------------------- */

START_TEST(test_stale_fenced_before_shard_check) {
  uint64_t total = 70001;
  uint8_t *state = random_bytes(total, 6);
  char err[1024], latest[64];
  bool moved = true;
  ck_assert_int_eq(save(g_dir, 10, 1, 2, state, total, 0), 0);
  /* the old controller (generation 1) has every shard of step 20 durable,
   * then freezes before it commits */
  ea_ckpt_manifest old20, old30;
  stage(g_dir, 20, 1, 2, state, total, 0, &old20);
  stage(g_dir, 30, 1, 2, state, total, 0, &old30);
  /* its successor (generation 2) resumed from step 15, commits it, and its
   * retention removes generation 1's uncommitted step 20 entirely */
  ck_assert_int_eq(save(g_dir, 15, 2, 2, state, total, 0), 0);
  ea_ckpt_retain_stats st;
  const char *inprog[] = {"step-30.gen-1"}; /* kept on purpose: a half-removed one below */
  ck_assert_int_eq(ea_ckpt_retain(g_dir, 2, inprog, 1, &st, err, sizeof err), 0);
  ck_assert(!exists("step-20.gen-1"));
  ck_assert(exists("step-30.gen-1"));
  /* the old controller wakes up and commits: it is told it is stale (with
   * both generations), not that its files are missing, and nothing of
   * step 20 comes back */
  int rc = ea_ckpt_commit(g_dir, &old20, &moved, err, sizeof err);
  ck_assert_msg(rc == -ESTALE, "stale commit without its files: %d (%s)", rc, err);
  ck_assert_msg(strstr(err, "generation 1 ") && strstr(err, "generation 2 "),
                "the refusal does not name both generations: %s", err);
  ck_assert(!moved);
  ck_assert(!exists("step-20.gen-1"));
  /* the same with the directory there but one shard gone */
  char p[512];
  path_in(p, sizeof p, "step-30.gen-1/shard-0-of-2.bin");
  ck_assert_int_eq(unlink(p), 0);
  rc = ea_ckpt_commit(g_dir, &old30, &moved, err, sizeof err);
  ck_assert_msg(rc == -ESTALE, "stale commit with a shard missing: %d (%s)", rc, err);
  ck_assert(!exists("step-30.gen-1/MANIFEST") && !exists("step-30.gen-1/MANIFEST.tmp"));
  ck_assert_int_eq(ea_ckpt_read_latest(g_dir, latest, sizeof latest), 0);
  ck_assert_str_eq(latest, "step-15.gen-2");
  /* a commit that passes the fence still checks its shards */
  ea_ckpt_manifest cur;
  stage(g_dir, 25, 2, 2, state, total, 0, &cur);
  path_in(p, sizeof p, "step-25.gen-2/shard-1-of-2.bin");
  ck_assert_int_eq(unlink(p), 0);
  rc = ea_ckpt_commit(g_dir, &cur, &moved, err, sizeof err);
  ck_assert_msg(rc == -ENOENT && strstr(err, "shard-1-of-2.bin"), "missing shard: %d (%s)", rc,
                err);
  ck_assert(!exists("step-25.gen-2/MANIFEST"));
  ea_ckpt_manifest_close(&cur);
  ea_ckpt_manifest_close(&old30);
  ea_ckpt_manifest_close(&old20);
  free(state);
}
END_TEST

/* Every entry under dir (path, type, size, mtime, content hash of regular
 * files), sorted: equal snapshots mean nothing was written, renamed,
 * created or removed. */
static char **g_snap;
static size_t g_snap_n, g_snap_cap;

static int snap_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)flag;
  (void)ftw;
  uint64_t h = 0;
  if (S_ISREG(sb->st_mode)) {
    size_t n;
    uint8_t *b = read_file(p, &n);
    h = XXH3_64bits_dispatch(b, n);
    free(b);
  }
  char line[1024];
  snprintf(line, sizeof line, "%s %o %lld %lld.%09ld %016" PRIx64, p + strlen(g_dir),
           (unsigned)sb->st_mode, (long long)sb->st_size, (long long)sb->st_mtim.tv_sec,
           sb->st_mtim.tv_nsec, h);
  if (g_snap_n == g_snap_cap) {
    g_snap_cap = g_snap_cap ? g_snap_cap * 2 : 64;
    g_snap = realloc(g_snap, g_snap_cap * sizeof *g_snap);
    ck_assert_ptr_nonnull(g_snap);
  }
  g_snap[g_snap_n++] = strdup(line);
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *snapshot(void) {
  g_snap = NULL;
  g_snap_n = g_snap_cap = 0;
  ck_assert_int_eq(nftw(g_dir, snap_cb, 16, FTW_PHYS), 0);
  qsort(g_snap, g_snap_n, sizeof *g_snap, cmp_str);
  size_t len = 1;
  for (size_t i = 0; i < g_snap_n; i++) len += strlen(g_snap[i]) + 1;
  char *out = malloc(len), *o = out;
  for (size_t i = 0; i < g_snap_n; i++) {
    o += sprintf(o, "%s\n", g_snap[i]);
    free(g_snap[i]);
  }
  *o = 0;
  free(g_snap);
  return out;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A stopped child stays stopped until someone acts: make sure it dies with
 * this test's process whatever happens (SIGKILL works on stopped ones). */
static void die_with_parent(void) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
}

static void wait_stopped(pid_t pid) {
  int st;
  ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
  ck_assert_msg(WIFSTOPPED(st), "child did not stop (status %d)", st);
}

#define LOCK_BOUND_MS 300u
/* Slack over the bound for a loaded 2-core machine (and ASan): a timed-out
 * wait must still end long before a blocked one would (never). */
#define LOCK_SLACK_S 2.0

START_TEST(test_lock_timeout) {
  uint64_t total = 40009;
  uint8_t *state = random_bytes(total, 7);
  char err[1024], lockp[512], latest[64], want[64];
  ck_assert_int_eq(save(g_dir, 10, 1, 2, state, total, 0), 0);
  ea_ckpt_manifest m;
  stage(g_dir, 20, 1, 2, state, total, 0, &m);
  make_partial("step-5.gen-1", 10); /* a leftover retention would remove */
  /* a process that holds the lock and is stopped (like `flock DIR/.lock`
   * frozen, it does not record itself in the lock file) */
  path_in(lockp, sizeof lockp, ".lock");
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    die_with_parent();
    int fd = open(lockp, O_RDWR | O_CREAT, 0644);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) _exit(1);
    raise(SIGSTOP);
    _exit(0);
  }
  wait_stopped(pid);
  char *before = snapshot();
  uint32_t prev = ea_ckpt_set_lock_timeout_ms(LOCK_BOUND_MS);
  ck_assert_uint_eq(prev, EA_CKPT_LOCK_TIMEOUT_MS);
  bool moved = true;
  double t0 = now_s();
  int rc = ea_ckpt_commit(g_dir, &m, &moved, err, sizeof err);
  double el = now_s() - t0;
  ck_assert_msg(rc == -ETIMEDOUT, "commit with the lock held: %d (%s)", rc, err);
  ck_assert_msg(el >= LOCK_BOUND_MS / 1e3 && el < LOCK_BOUND_MS / 1e3 + LOCK_SLACK_S,
                "commit gave up after %.3f s, the bound is %.3f s", el, LOCK_BOUND_MS / 1e3);
  ck_assert(!moved);
  snprintf(want, sizeof want, "pid %d ", (int)pid);
  ck_assert_msg(strstr(err, want) && strstr(err, "nothing written"),
                "the error does not name the holder: %s", err);
  ea_ckpt_retain_stats st;
  t0 = now_s();
  rc = ea_ckpt_retain(g_dir, 1, NULL, 0, &st, err, sizeof err);
  el = now_s() - t0;
  ck_assert_msg(rc == -ETIMEDOUT && strstr(err, want), "retain with the lock held: %d (%s)", rc,
                err);
  ck_assert_double_lt(el, LOCK_BOUND_MS / 1e3 + LOCK_SLACK_S);
  ck_assert_uint_eq(st.removed_partial + st.removed_complete, 0);
  char *after = snapshot();
  ck_assert_msg(strcmp(before, after) == 0, "the directory changed:\n%s---\n%s", before, after);
  free(before);
  free(after);
  /* the holder dies: the kernel drops its flock, the next commit and
   * retention go through (within the same short bound) */
  ck_assert_int_eq(kill(pid, SIGKILL), 0);
  int ws;
  ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
  rc = ea_ckpt_commit(g_dir, &m, &moved, err, sizeof err);
  ck_assert_msg(rc == 0, "commit after the holder died: %d (%s)", rc, err);
  ck_assert(moved);
  ck_assert_int_eq(ea_ckpt_read_latest(g_dir, latest, sizeof latest), 0);
  ck_assert_str_eq(latest, "step-20.gen-1");
  ck_assert_int_eq(ea_ckpt_retain(g_dir, 1, NULL, 0, &st, err, sizeof err), 0);
  ck_assert(!exists("step-5.gen-1") && !exists("step-10.gen-1"));
  /* the winner recorded itself for the next waiter */
  size_t n;
  char *rec = (char *)read_file(lockp, &n);
  rec[n] = 0;
  snprintf(want, sizeof want, "pid %d host ", (int)getpid());
  ck_assert_msg(strncmp(rec, want, strlen(want)) == 0, "lock file holds \"%s\"", rec);
  free(rec);
  ck_assert_uint_eq(ea_ckpt_set_lock_timeout_ms(0), LOCK_BOUND_MS);
  ck_assert_uint_eq(ea_ckpt_set_lock_timeout_ms(0), EA_CKPT_LOCK_TIMEOUT_MS);
  ea_ckpt_manifest_close(&m);
  free(state);
}
END_TEST

/* Test seam for test_frozen_committer: the library's fsync calls resolve to
 * this definition (an executable's own symbols come before libc's), so a
 * child can stop itself at the first fsync of a commit — after it took the
 * lock, passed the fence and checked its shards, before it wrote anything:
 * the controller frozen inside a commit.  Otherwise it is the plain system
 * call. */
static volatile sig_atomic_t g_stop_at_fsync;
int fsync(int fd) {
  if (g_stop_at_fsync) {
    g_stop_at_fsync = 0;
    raise(SIGSTOP);
  }
  return (int)syscall(SYS_fsync, fd);
}

START_TEST(test_frozen_committer) {
  uint64_t total = 40009;
  uint8_t *state = random_bytes(total, 8);
  char err[1024], latest[64], want[64];
  ck_assert_int_eq(save(g_dir, 10, 1, 2, state, total, 0), 0);
  ea_ckpt_manifest old40, new30;
  stage(g_dir, 40, 1, 2, state, total, 0, &old40); /* the old controller's */
  stage(g_dir, 30, 2, 2, state, total, 0, &new30); /* its successor's, from step 20 */
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    die_with_parent();
    g_stop_at_fsync = 1;
    int rc = ea_ckpt_commit(g_dir, &old40, NULL, err, sizeof err);
    if (rc != 0) fprintf(stderr, "frozen committer: %s\n", err);
    _exit(rc == 0 ? 0 : rc == -ESTALE ? 3 : 1);
  }
  wait_stopped(pid);
  char *before = snapshot();
  ck_assert_uint_eq(ea_ckpt_set_lock_timeout_ms(LOCK_BOUND_MS), EA_CKPT_LOCK_TIMEOUT_MS);
  /* the successor cannot commit while the frozen one holds the lock: it
   * gives up within the bound, naming the holder, having written nothing */
  bool moved = true;
  double t0 = now_s();
  int rc = ea_ckpt_commit(g_dir, &new30, &moved, err, sizeof err);
  double el = now_s() - t0;
  ck_assert_msg(rc == -ETIMEDOUT, "commit behind a frozen committer: %d (%s)", rc, err);
  ck_assert_double_lt(el, LOCK_BOUND_MS / 1e3 + LOCK_SLACK_S);
  ck_assert(!moved);
  /* it recorded itself and /proc/locks agrees */
  snprintf(want, sizeof want, "pid %d (host ", (int)pid);
  ck_assert_msg(strstr(err, want), "the error does not name the holder: %s", err);
  char *after = snapshot();
  ck_assert_msg(strcmp(before, after) == 0, "the directory changed:\n%s---\n%s", before, after);
  free(before);
  free(after);
  /* it wakes and finishes: its fence decision still holds (nothing newer
   * could commit meanwhile) */
  ck_assert_int_eq(kill(pid, SIGCONT), 0);
  int ws;
  ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
  ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "woken committer: status %d", ws);
  ck_assert_int_eq(ea_ckpt_read_latest(g_dir, latest, sizeof latest), 0);
  ck_assert_str_eq(latest, "step-40.gen-1");
  char ck[512];
  path_in(ck, sizeof ck, "step-40.gen-1");
  ck_assert_int_eq(ea_ckpt_verify(ck, NULL, EA_CKPT_VERIFY_FULL, 0, NULL), 0);
  /* the successor's retry commits; its lower step supersedes step 40 */
  rc = ea_ckpt_commit(g_dir, &new30, &moved, err, sizeof err);
  ck_assert_msg(rc == 0, "successor's retry: %d (%s)", rc, err);
  ck_assert(moved);
  ck_assert_int_eq(ea_ckpt_read_latest(g_dir, latest, sizeof latest), 0);
  ck_assert_str_eq(latest, "step-30.gen-2");
  ea_ckpt_entry *e;
  size_t n;
  ck_assert_int_eq(ea_ckpt_list(g_dir, &e, &n), 0);
  ck_assert_uint_eq(n, 3);
  ck_assert_str_eq(e[0].name, "step-40.gen-1");
  ck_assert(e[0].complete && e[0].superseded);
  free(e);
  ea_ckpt_resume rs;
  ck_assert_int_eq(ea_ckpt_find_resume(g_dir, EA_CKPT_VERIFY_FULL, &rs), 0);
  ck_assert_str_eq(rs.name, "step-30.gen-2");
  ea_ckpt_resume_close(&rs);
  /* and the old generation, trying again, is fenced before anything else
   * (-ESTALE, not -EEXIST for its existing MANIFEST) */
  rc = ea_ckpt_commit(g_dir, &old40, &moved, err, sizeof err);
  ck_assert_msg(rc == -ESTALE, "old generation again: %d (%s)", rc, err);
  ea_ckpt_set_lock_timeout_ms(0);
  ea_ckpt_manifest_close(&new30);
  ea_ckpt_manifest_close(&old40);
  free(state);
}
END_TEST

/* ---- full file system ----------------------------------------------------- */

START_TEST(test_enospc) {
  if (geteuid() != 0) {
    printf("SKIP: test_enospc needs root to mount an 8 MiB tmpfs\n");
    return;
  }
  /* a private mount namespace where possible: the tmpfs then disappears
   * with this test's process, whatever happens to it */
  if (unshare(CLONE_NEWNS) == 0) mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
  char mnt[512];
  path_in(mnt, sizeof mnt, "mnt");
  ck_assert_int_eq(mkdir(mnt, 0755), 0);
  if (mount("tmpfs", mnt, "tmpfs", 0, "size=8m") != 0) {
    printf("SKIP: test_enospc: mount tmpfs: %s\n", strerror(errno));
    return;
  }
  char dir[600];
  snprintf(dir, sizeof dir, "%s/ck", mnt);
  uint64_t total = 2u << 20;
  uint8_t *state = random_bytes(7u << 20, 6);
  ck_assert_int_eq(save(dir, 1, 1, 2, state, total, 0), 0);
  /* 7 MiB more does not fit next to 2 MiB in 8 MiB */
  char err[1024];
  ck_assert_int_eq(ea_ckpt_prepare(dir, 2, 1, NULL, 0, err, sizeof err), 0);
  char p[1024];
  ea_ckpt_shard_path(p, sizeof p, dir, 2, 1, 0, 1);
  ea_ckpt_write_result res;
  int rc = write_one(p, state, 7u << 20, 0, 0, 0, &res);
  ck_assert_int_eq(rc, -ENOSPC);
  ck_assert_msg(strstr(res.err, p) && strstr(res.err, "No space left on device"), "err: %s",
                res.err);
  ck_assert_int_ne(access(p, F_OK), 0); /* the partial shard is gone, space is back */
  /* the previous checkpoint is intact and chosen */
  ea_ckpt_resume rs;
  ck_assert_int_eq(ea_ckpt_find_resume(dir, EA_CKPT_VERIFY_FULL, &rs), 0);
  ck_assert_str_eq(rs.name, "step-1.gen-1");
  ea_ckpt_resume_close(&rs);
  /* a commit on a full disk fails cleanly too: fill the disk, then commit */
  ck_assert_int_eq(ea_ckpt_prepare(dir, 3, 1, NULL, 0, err, sizeof err), 0);
  ea_ckpt_manifest m;
  ck_assert_int_eq(ea_ckpt_manifest_init(&m, 3, 1, 1, 100), 0);
  ea_ckpt_shard_path(p, sizeof p, dir, 3, 1, 0, 1);
  ck_assert_int_eq(write_one(p, state, 100, 0, 0, 0, &res), 0);
  ck_assert_int_eq(ea_ckpt_manifest_set_shard(&m, 0, &res), 0);
  char fill[700];
  snprintf(fill, sizeof fill, "%s/fill", mnt);
  int fd = open(fill, O_WRONLY | O_CREAT, 0644);
  while (write(fd, state, 1u << 16) > 0) {
  }
  while (write(fd, state, 1) > 0) {
  }
  close(fd);
  rc = ea_ckpt_commit(dir, &m, NULL, err, sizeof err);
  ck_assert_int_eq(rc, -ENOSPC);
  ck_assert_msg(strstr(err, "MANIFEST.tmp"), "err: %s", err);
  ea_ckpt_manifest_close(&m);
  ck_assert_int_eq(ea_ckpt_find_resume(dir, EA_CKPT_VERIFY_FULL, &rs), 0);
  ck_assert_str_eq(rs.name, "step-1.gen-1");
  ea_ckpt_resume_close(&rs);
  free(state); /* teardown unmounts (and a private namespace drops it on exit anyway) */
}
END_TEST

/* ---- fault injection from the environment ------------------------------- */

/* The child side: `test_ckpt --env-child PATH LEN CHUNK` writes LEN zero
 * bytes (buffered) and exits with the errno it got. */
static int env_child(char **argv) {
  size_t len = strtoul(argv[3], NULL, 10);
  uint8_t *d = calloc(1, len);
  ea_ckpt_write_result res;
  int rc = write_one(argv[2], d, len, EA_CKPT_IO_BUFFERED, (uint32_t)strtoul(argv[4], NULL, 10), 1,
                     &res);
  free(d);
  return -rc;
}

static int run_env_child(const char *spec, const char *path, size_t len, uint32_t chunk) {
  char l[32], c[32];
  snprintf(l, sizeof l, "%zu", len);
  snprintf(c, sizeof c, "%u", chunk);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    setenv("EA_CKPT_FAULT", spec, 1);
    execl("/proc/self/exe", "test_ckpt", "--env-child", path, l, c, (char *)NULL);
    _exit(127);
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  return st;
}

START_TEST(test_fault_env) {
  ck_assert_int_eq(ea_ckpt_fault_parse("fsync:2:ENOSPC"), 0);
  ck_assert_int_eq(ea_ckpt_fault_parse("torn:1:kill"), 0);
  ck_assert_int_eq(ea_ckpt_fault_parse("write:3:28"), 0);
  const char *bad[] = {"fsync", "fsync:0", "bogus:1", "write:1:EWHAT", "write:x", "write:1:0", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_msg(ea_ckpt_fault_parse(bad[i]) == -EINVAL, "accepted \"%s\"", bad[i]);
  ea_ckpt_fault_reset();
  /* the variable is read once per process, at its first checkpoint file
   * operation: run that in a fresh process (this binary, re-executed) */
  char p[512];
  path_in(p, sizeof p, "env.bin");
  int st = run_env_child("write:2:EROFS", p, 5000, 4096);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == EROFS, "status %d", st);
  /* "kill" really kills, after writing the torn prefix */
  path_in(p, sizeof p, "kill.bin");
  st = run_env_child("torn:1:kill", p, 10000, 0);
  ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  struct stat sb;
  ck_assert_int_eq(stat(p, &sb), 0);
  ck_assert_int_eq(sb.st_size, 5000); /* half of it: the prefix */
}
END_TEST

/* ---- CLI ---------------------------------------------------------------- */

START_TEST(test_cli) {
  uint64_t total = 77777;
  uint8_t *state = random_bytes(total, 8);
  ck_assert_int_eq(save(g_dir, 10, 1, 2, state, total, 0), 0);
  ck_assert_int_eq(save(g_dir, 20, 1, 3, state, total, 0), 0);
  make_partial("step-30.gen-1", 1000);
  char out[16384];
  char *ls[] = {"ckpt", "ls", g_dir, NULL};
  ck_assert_int_eq(cli(out, sizeof out, 3, ls), 0);
  ck_assert_msg(strstr(out, "STEP") && strstr(out, "partial") && strstr(out, "complete"), "%s",
                out);
  /* newest first, LATEST marked */
  char *l30 = strstr(out, "step-30.gen-1"), *l20 = strstr(out, "step-20.gen-1"),
       *l10 = strstr(out, "step-10.gen-1");
  ck_assert(l30 && l20 && l10 && l30 < l20 && l20 < l10);
  char *line20 = l20;
  while (line20 > out && line20[-1] != '\n') line20--;
  ck_assert_msg(line20[0] == '*', "LATEST marker missing: %s", out);
  char *show[] = {"ckpt", "show", g_dir, NULL};
  ck_assert_int_eq(cli(out, sizeof out, 3, show), 0);
  ck_assert_msg(strstr(out, "step           20") && strstr(out, "shard-2-of-3.bin") &&
                    strstr(out, "layers.0.weight") && strstr(out, "feedfacecafebeef"),
                "%s", out);
  char *show10[] = {"ckpt", "show", g_dir, "10", NULL};
  ck_assert_int_eq(cli(out, sizeof out, 4, show10), 0);
  ck_assert_msg(strstr(out, "shard-1-of-2.bin") && !strstr(out, "of-3"), "%s", out);
  char *ver[] = {"ckpt", "verify", g_dir, NULL};
  ck_assert_int_eq(cli(out, sizeof out, 3, ver), 0);
  ck_assert_msg(strstr(out, "ok ") && strstr(out, "step-10.gen-1") && strstr(out, "step-20.gen-1"),
                "%s", out);
  char p[600];
  snprintf(p, sizeof p, "%s/step-10.gen-1/shard-0-of-2.bin", g_dir);
  flip_byte(p, 5);
  ck_assert_int_eq(cli(out, sizeof out, 3, ver), 1);
  ck_assert_msg(
      strstr(out, "CORRUPT") && strstr(out, "shard-0-of-2.bin") && strstr(out, "bytes [0, "), "%s",
      out);
  char *sizeonly[] = {"ckpt", "verify", g_dir, "10", "--size", NULL};
  ck_assert_int_eq(cli(out, sizeof out, 5, sizeonly), 0);
  char *bad1[] = {"ckpt", "frob", g_dir, NULL};
  ck_assert_int_eq(cli(out, sizeof out, 3, bad1), 2);
  char *bad2[] = {"ckpt", NULL};
  ck_assert_int_eq(cli(out, sizeof out, 1, bad2), 2);
  char *nodir[] = {"ckpt", "ls", "/nonexistent-ea-dir", NULL};
  ck_assert_int_eq(cli(out, sizeof out, 3, nodir), 2);
  char *nostep[] = {"ckpt", "show", g_dir, "999", NULL};
  ck_assert_int_eq(cli(out, sizeof out, 4, nostep), 1);
  free(state);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ckpt");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_names);
  tcase_add_test(tc, test_write_sizes);
  tcase_add_test(tc, test_write_paths_agree);
  tcase_add_test(tc, test_write_cancel_and_errors);
  tcase_add_test(tc, test_parallel_writers);
  tcase_add_test(tc, test_manifest_roundtrip);
  tcase_add_test(tc, test_read_any_world);
  tcase_add_test(tc, test_verify_detects_damage);
  tcase_add_test(tc, test_resume_search_hooks);
  tcase_add_test(tc, test_generation_fencing);
  tcase_add_test(tc, test_fencing_race);
  tcase_add_test(tc, test_retention);
  tcase_add_test(tc, test_cluster_file);
  tcase_add_test(tc, test_cluster_check);
  tcase_add_test(tc, test_cluster_legacy_adopted);
  tcase_add_test(tc, test_cluster_commit_refused);
  tcase_add_test(tc, test_bogus_latest_neither_fences_nor_sticks);
  tcase_add_test(tc, test_leftovers_bounded_while_commits_fail);
  tcase_add_test(tc, test_retention_keeps_saves_begun_after_the_commit);
  tcase_add_test(tc, test_stale_fenced_before_shard_check);
  tcase_add_test(tc, test_lock_timeout);
  tcase_add_test(tc, test_frozen_committer);
  tcase_add_test(tc, test_enospc);
  tcase_add_test(tc, test_fault_env);
  tcase_add_test(tc, test_cli);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--env-child") == 0) return env_child(argv);
  const char *e = getenv("EA_SEED");
  g_seed = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
  printf("test_ckpt: seed %" PRIu64 " (EA_SEED=%" PRIu64 " replays)\n", g_seed, g_seed);
  fflush(stdout);
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
