/* ea_ckpt.h — sharded checkpoints: io_uring shard writer and reader, the
 * manifest and its crash-safe commit, retention, verification, resume, and
 * the `elastic-agent ckpt ls|show|verify` commands.
 *
 * On disk (DIR is checkpoint.dir):
 *
 *   DIR/.lock                          flock'd by commit and retention (a
 *                                      bounded wait); holds "pid P host H"
 *                                      of the last holder
 *   DIR/LATEST                         "step-<s>.gen-<g>\n", moved by commit
 *   DIR/CLUSTER                        the identity of the cluster that owns
 *                                      DIR, written by its first commit
 *                                      (see "cluster identity" below)
 *   DIR/step-<s>.gen-<g>/
 *       shard-<r>-of-<W>.bin           bytes [offset, offset+length) of the
 *                                      serialized training state
 *       MANIFEST                       text; its presence is the commit point
 *
 * A step directory without MANIFEST does not exist as a checkpoint.  The
 * order of a save is:
 *
 *   controller: ea_ckpt_prepare(DIR, s, g)           mkdir + fsync DIR
 *   each agent: ea_ckpt_write_shard(shard r)         io_uring, XXH3, fsync
 *   controller: ea_ckpt_manifest_init/_set_shard/_add_tensor
 *               ea_ckpt_commit(DIR, &m)              MANIFEST, then LATEST
 *               ea_ckpt_retain(DIR, keep_last, ...)  delete old + leftovers
 *
 * Resume: ea_ckpt_find_resume() (newest complete checkpoint that verifies,
 * falling back and recording why; ea_ckpt_search_resume() when the caller
 * also has a say, e.g. "and it loads") or ea_ckpt_resolve() (--resume-from
 * PATH|STEP), then ea_ckpt_reader_* to read any byte range of the state at
 * any world size.
 *
 * Errors: every call returns 0 (or a documented non-negative value) or a
 * negative errno.  Calls that take an `err` buffer also write one line that
 * names the file and the operation ("fsync /ck/step-4.gen-2/MANIFEST.tmp:
 * Input/output error").  Codes with a checkpoint-specific meaning:
 *   -ESTALE   commit refused: a newer generation already committed
 *   -EEXIST   commit refused: this step/generation already has a MANIFEST
 *   -EBADMSG  verification failed: a hash or length does not match, or the
 *             manifest is malformed
 *   -ENOENT   no complete checkpoint / shard file missing
 *   -ETIMEDOUT  commit or retention gave up waiting for DIR/.lock (held
 *             longer than the lock timeout; the message names the holder):
 *             nothing was written or removed
 *   -ECANCELED  the caller's cancel flag was raised
 *
 * Threads: every function may be called from any thread; none keeps global
 * state except the fault-injection layer (which is locked) and the lock
 * timeout (an atomic).  The writer and
 * reader block; the agent runs them off its libuv loop on a worker thread.
 */
#ifndef EA_CKPT_H
#define EA_CKPT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EA_CKPT_FORMAT_VERSION 1
/* Path buffers: PATH_MAX on Linux. */
#define EA_CKPT_PATH_MAX 4096
/* "step-<20 digits>.gen-<20 digits>" fits in 64. */
#define EA_CKPT_NAME_MAX 64
/* Tensor names are the trainer's dotted names ("layers.0.weight"): 127 bytes
 * is the longest PyTorch state-dict key we have seen, with margin. */
#define EA_CKPT_TENSOR_NAME_MAX 128
#define EA_CKPT_DTYPE_MAX 16
#define EA_CKPT_MAX_DIMS 8
/* Bounds the manifest parser accepts (a manifest larger than these is
 * rejected, never allocated): 65536 ranks and 1M tensors are far above any
 * job this agent runs, and keep a hostile MANIFEST from asking for gigabytes. */
#define EA_CKPT_MAX_WORLD 65536
#define EA_CKPT_MAX_TENSORS (1u << 20)
#define EA_CKPT_MANIFEST_MAX (256u << 20)
/* Each shard also records one XXH3 per block so verify can say *where* a
 * shard is damaged.  At most 64 blocks per shard keeps a manifest line near
 * 1.2 KB whatever the shard size; blocks are at least 1 MiB so small shards
 * do not pay one hash line per few KiB. */
#define EA_CKPT_MAX_BLOCKS 64
#define EA_CKPT_MIN_BLOCK (1u << 20)

/* ---- naming ------------------------------------------------------------ */

/* "step-<s>.gen-<g>" into out.  Returns 0 or -ENAMETOOLONG. */
int ea_ckpt_dir_name(char *out, size_t cap, uint64_t step, uint64_t generation);
/* Parses a canonical "step-<s>.gen-<g>" (no leading zeros, no trailing
 * bytes).  Returns 0 or -EINVAL. */
int ea_ckpt_parse_dir_name(const char *name, uint64_t *step, uint64_t *generation);
/* "shard-<r>-of-<W>.bin". */
int ea_ckpt_shard_name(char *out, size_t cap, uint32_t rank, uint32_t world);
/* DIR/step-<s>.gen-<g>/shard-<r>-of-<W>.bin */
int ea_ckpt_shard_path(char *out, size_t cap, const char *dir, uint64_t step, uint64_t generation,
                       uint32_t rank, uint32_t world);
/* Rank r of W owns bytes [⌊r·T/W⌋, ⌊(r+1)·T/W⌋) of a state of T bytes (the
 * same split as the data cursor): contiguous, in rank order, sizes differ by
 * at most one byte. */
void ea_ckpt_shard_range(uint64_t total, uint32_t world, uint32_t rank, uint64_t *offset,
                         uint64_t *length);
/* Block size used for the per-block hashes of a shard of `length` bytes. */
uint64_t ea_ckpt_block_size(uint64_t length);

/* ---- shard writer ------------------------------------------------------ */

/* Optional, caller-owned, shared with the writing thread for the duration of
 * the call.  `bytes_written` grows as writes complete (not yet durable);
 * setting `cancel` makes the writer stop at the next chunk, remove the
 * partial file and return -ECANCELED. */
typedef struct {
  _Atomic uint64_t bytes_written;
  atomic_bool cancel;
} ea_ckpt_progress;

enum {
  /* Never use O_DIRECT (the buffered path, also the automatic fallback when
   * the file system refuses O_DIRECT). */
  EA_CKPT_IO_BUFFERED = 1u << 0,
  /* Do not register the staging buffers with io_uring (plain writes from
   * the same aligned buffers; also the automatic fallback when registration
   * fails, e.g. RLIMIT_MEMLOCK). */
  EA_CKPT_IO_NO_REGISTER = 1u << 1,
  /* Use pread/pwrite instead of io_uring (automatic when io_uring_setup
   * fails, e.g. blocked by a container's seccomp profile). */
  EA_CKPT_IO_SYNC = 1u << 2,
};

/* Defaults: 4 writes of 2 MiB in flight.  8 MiB outstanding is above the
 * bandwidth-delay product of one NVMe device (7 GB/s × ~1 ms), each 2 MiB
 * request is already split into several device commands (max_sectors_kb is
 * 128–1280 KiB), and hashing+copying one 2 MiB chunk (~0.2 ms at 10 GB/s)
 * finishes before one write does, so one core keeps the queue full.  8 MiB of
 * registered (pinned) staging also fits the default 8 MiB RLIMIT_MEMLOCK.
 * bench/ckpt.c sweeps both so the choice can be re-measured. */
#define EA_CKPT_CHUNK_DEFAULT (2u << 20)
#define EA_CKPT_QUEUE_DEFAULT 4u
#define EA_CKPT_QUEUE_MAX 64u

typedef struct {
  const char *path; /* target file; created or truncated */
  const void *data; /* the shard bytes; read-only, valid for the call */
  uint64_t length;
  unsigned flags;             /* EA_CKPT_IO_* */
  uint32_t chunk_bytes;       /* 0 = EA_CKPT_CHUNK_DEFAULT (rounded up to the alignment) */
  uint32_t queue_depth;       /* 0 = EA_CKPT_QUEUE_DEFAULT, at most EA_CKPT_QUEUE_MAX */
  ea_ckpt_progress *progress; /* optional */
} ea_ckpt_write_req;

typedef struct {
  uint64_t bytes; /* true length written (= req.length on success) */
  /* of those, written by O_DIRECT straight from req.data (the aligned
   * chunks of an aligned buffer) rather than copied into staging */
  uint64_t in_place_bytes;
  uint64_t hash; /* XXH3-64 of the bytes (what `xxhsum -H3` prints) */
  uint64_t block_size;
  uint32_t n_blocks;
  uint64_t block_hash[EA_CKPT_MAX_BLOCKS];
  double seconds;  /* wall time of the whole call, fsync included */
  bool direct;     /* O_DIRECT was used */
  bool registered; /* staging buffers were registered with io_uring */
  bool uring;      /* io_uring was used (false: pread/pwrite fallback) */
  uint32_t align;  /* O_DIRECT offset/length alignment used (0 if buffered) */
  char err[512];   /* on failure: "<op> <path>[ at offset N]: <reason>" */
} ea_ckpt_write_result;

/* Writes req->data to req->path and makes it durable (fsync; with O_DIRECT
 * the tail is padded to the alignment and the file truncated back to its
 * true length before the fsync).  Blocks; call it from a worker thread.  On
 * failure the partial file is removed (unless a simulated crash is in
 * progress, see fault injection) and res->err says what failed.  Does not
 * fsync the parent directory: ea_ckpt_commit does, before the MANIFEST. */
int ea_ckpt_write_shard(const ea_ckpt_write_req *req, ea_ckpt_write_result *res);

/* ---- manifest ---------------------------------------------------------- */

typedef struct {
  char name[EA_CKPT_TENSOR_NAME_MAX]; /* printable, no spaces */
  char dtype[EA_CKPT_DTYPE_MAX];      /* "f32", "bf16", "i64", … ([a-z0-9_]) */
  uint32_t ndim;                      /* 0 = scalar */
  uint64_t shape[EA_CKPT_MAX_DIMS];
  uint64_t offset; /* byte offset in the state */
  uint64_t length;
} ea_ckpt_tensor;

typedef struct {
  uint32_t rank;
  char file[EA_CKPT_NAME_MAX]; /* "shard-<r>-of-<W>.bin" */
  uint64_t offset;             /* in the state */
  uint64_t length;
  uint64_t hash; /* XXH3-64 of the file */
  uint64_t block_size;
  uint32_t n_blocks;
  uint64_t block_hash[EA_CKPT_MAX_BLOCKS];
  bool set; /* filled (by _set_shard or the parser) */
} ea_ckpt_shard;

/* Caller-owned struct; _init/_parse allocate the arrays, _close frees them. */
typedef struct {
  uint32_t format_version;
  uint64_t step;
  uint64_t generation;
  uint32_t world_size;
  uint64_t total_bytes;
  uint64_t config_hash;
  char agent_version[32];
  int64_t created; /* unix seconds (UTC) */
  uint32_t n_tensors, cap_tensors;
  ea_ckpt_tensor *tensors;
  ea_ckpt_shard *shards; /* world_size entries, rank order */
} ea_ckpt_manifest;

/* Sets up a manifest for `world` shards of a `total`-byte state, with shard
 * names and ranges from ea_ckpt_shard_range, created = now and
 * agent_version = this binary's.  Returns 0, -EINVAL, -ENOMEM. */
int ea_ckpt_manifest_init(ea_ckpt_manifest *m, uint64_t step, uint64_t generation, uint32_t world,
                          uint64_t total);
/* Records shard `rank`'s write result; -EINVAL if its length is not the
 * range's. */
int ea_ckpt_manifest_set_shard(ea_ckpt_manifest *m, uint32_t rank, const ea_ckpt_write_result *w);
/* Appends a tensor (copied).  -EINVAL for a bad name/dtype/ndim or a range
 * outside the state. */
int ea_ckpt_manifest_add_tensor(ea_ckpt_manifest *m, const char *name, const char *dtype,
                                uint32_t ndim, const uint64_t *shape, uint64_t offset,
                                uint64_t length);
void ea_ckpt_manifest_close(ea_ckpt_manifest *m);
/* Checks a manifest is complete and consistent (every shard set, shards tile
 * [0,total) in rank order, names canonical, tensors inside the state).
 * Writes the first problem into err. */
int ea_ckpt_manifest_validate(const ea_ckpt_manifest *m, char *err, size_t errlen);
/* Text form (see docs/checkpoints.md) into a malloc'd buffer (*out, *len;
 * caller frees).  Validates first. */
int ea_ckpt_manifest_format(const ea_ckpt_manifest *m, char **out, size_t *len, char *err,
                            size_t errlen);
/* Bounded parser over [pos, end): checks every field and the trailing
 * checksum, reports "line N: <field>: <problem>" in err.  On success *m is
 * initialised (release with _close); on failure *m is left empty. */
int ea_ckpt_manifest_parse(const char *pos, const char *end, ea_ckpt_manifest *m, char *err,
                           size_t errlen);
/* Reads and parses CKPT/MANIFEST (CKPT is a step directory). */
int ea_ckpt_manifest_load(const char *ckpt_path, ea_ckpt_manifest *m, char *err, size_t errlen);

/* ---- layout, commit, retention ----------------------------------------- */

/* Creates DIR (one level) and DIR/step-<s>.gen-<g> (an existing one is
 * fine: a retry of the same save) and makes both entries durable.  The step
 * directory's path goes to path_out (may be NULL). */
int ea_ckpt_prepare(const char *dir, uint64_t step, uint64_t generation, char *path_out,
                    size_t path_cap, char *err, size_t errlen);

/* Commits a checkpoint whose shards are all durable.  Only memory is
 * touched before the lock is held, then, in this order:
 *   0. flock(DIR/.lock), waiting at most the lock timeout (see
 *      ea_ckpt_set_lock_timeout_ms): -ETIMEDOUT, nothing written;
 *   1. generation fence: if a complete checkpoint (or LATEST) has a newer
 *      generation, return -ESTALE (the message names both generations) and
 *      write nothing — whatever became of this checkpoint's files;
 *   2. every shard file exists with its recorded length (-ENOENT naming a
 *      missing file, -EBADMSG for a wrong length);
 *   3. fsync the step directory (the shard entries), write MANIFEST.tmp,
 *      fsync it, renameat2(RENAME_NOREPLACE) to MANIFEST (-EEXIST if the
 *      checkpoint was committed already), fsync the dir;
 *   4. if (generation, step) is newer than LATEST's, write LATEST.tmp,
 *      fsync, rename over LATEST, fsync DIR.
 * *latest_moved (may be NULL) says whether step 4 happened. */
int ea_ckpt_commit(const char *dir, const ea_ckpt_manifest *m, bool *latest_moved, char *err,
                   size_t errlen);

/* How long ea_ckpt_commit and ea_ckpt_retain wait for DIR/.lock before
 * giving up with -ETIMEDOUT, having written nothing.  A commit holds the
 * lock for a listing of DIR, two small files and about five fsyncs: 3 ms
 * mean, 14 ms worst over 40 commits on the 2-core development VM (ext4,
 * loaded; docs/checkpoints.md), a round trip more per fsync and rename on a
 * network file system; only a second controller (a hand-over, a split brain) or an
 * operator's `flock DIR/.lock ckpt verify` contend for it.  5 s is far
 * above a healthy holder, so a timeout means a frozen or hung one, and it
 * keeps the controller's one-at-a-time commit queue moving behind it (one
 * checkpoint fails, with an alert, per 5 s the holder stays frozen). */
#define EA_CKPT_LOCK_TIMEOUT_MS 5000u
/* Sets the lock timeout for this process (0: back to the default) and
 * returns the previous one.  Meant for tests and tools; takes effect at the
 * next lock wait. */
uint32_t ea_ckpt_set_lock_timeout_ms(uint32_t ms);

/* Reads DIR/LATEST into name (a canonical step directory name).  -ENOENT if
 * absent, -EBADMSG if malformed. */
int ea_ckpt_read_latest(const char *dir, char *name, size_t cap);

typedef struct {
  char name[EA_CKPT_NAME_MAX];
  uint64_t step, generation;
  bool has_manifest;   /* a MANIFEST file is present */
  bool complete;       /* ... and it parses and matches the directory name */
  bool latest;         /* DIR/LATEST names it */
  bool superseded;     /* complete, but a complete checkpoint of a newer
                          generation has a lower step: its timeline was
                          abandoned (a fenced-off stale controller wrote it) */
  uint32_t world_size; /* from the manifest; 0 when not complete */
  uint64_t bytes;      /* manifest total, or the sum of the files present */
  int64_t created;     /* manifest time, or the directory's mtime */
  char error[256];     /* why a present MANIFEST is not complete */
} ea_ckpt_entry;

/* Every step-*.gen-* directory of DIR, newest first (step desc, then
 * generation desc).  *out is malloc'd (free()); *n may be 0.  -ENOENT if DIR
 * does not exist. */
int ea_ckpt_list(const char *dir, ea_ckpt_entry **out, size_t *n);

typedef struct {
  uint32_t kept;             /* complete checkpoints kept */
  uint32_t removed_complete; /* complete checkpoints deleted */
  uint32_t removed_partial;  /* leftovers deleted (no or bad MANIFEST, temp files) */
} ea_ckpt_retain_stats;

/* Under the lock (the same bounded wait as commit: -ETIMEDOUT, nothing
 * removed): keeps the `keep_last` (at least 1) newest complete
 * checkpoints — the newest complete one and LATEST's target are never
 * deleted — deletes older complete ones (MANIFEST first, made durable,
 * then the shards), and deletes leftovers without a valid MANIFEST that are
 * not named in in_progress (directory names of saves under way) and are
 * either older than the newest complete checkpoint (by step, or by
 * generation) or beyond the EA_CKPT_PARTIAL_KEEP newest of the others, so
 * that commits which keep failing cannot fill the disk.  LATEST protects
 * only a complete checkpoint.  st may be NULL. */
/* Leftovers newer than the newest complete checkpoint that retention keeps
 * besides the caller's in-progress set: saves another node may still be
 * writing.  A healthy job has at most two steps in progress (one being
 * written, one being reported: agent/ckpt/ckpt_svc.h), so two. */
#define EA_CKPT_PARTIAL_KEEP 2u

int ea_ckpt_retain(const char *dir, uint32_t keep_last, const char *const *in_progress,
                   size_t n_in_progress, ea_ckpt_retain_stats *st, char *err, size_t errlen);

/* ea_ckpt_retain run by the commit of step `after_step` of generation
 * `after_gen` (committed or failed): leftovers of a later step in that
 * generation or a newer one are also kept, beyond EA_CKPT_PARTIAL_KEEP.
 * Ranks stage their shards in step order and train on while a commit runs,
 * so saves newer than the commit can be under way before their first
 * report reaches the controller, outside any in-progress set it could
 * give; the retention of a later commit judges them.  after_step
 * EA_CKPT_NO_STEP: none (ea_ckpt_retain). */
#define EA_CKPT_NO_STEP UINT64_MAX
int ea_ckpt_retain_after(const char *dir, uint32_t keep_last, uint64_t after_step,
                         uint64_t after_gen, const char *const *in_progress, size_t n_in_progress,
                         ea_ckpt_retain_stats *st, char *err, size_t errlen);

/* ---- cluster identity (DIR/CLUSTER) -------------------------------------
 *
 * The first cluster to commit into DIR records its identity in DIR/CLUSTER
 * (ea_ckpt_cluster_claim, on the commit path only, after its first commit);
 * before a resume, a commit or a retention pass the caller checks it
 * (ea_ckpt_cluster_check)
 * and refuses a directory of another cluster: -EXDEV, with err naming the
 * directory, both identities and the refused operation.  The same file
 * format is an agent's <data-dir>/cluster-id.  Text, three lines:
 *   "elastic-agent cluster 1", "id <uuid-like hex>", "bind keyed|none <64 hex>". */

#define EA_CKPT_CLUSTER_FILE "CLUSTER"
#define EA_CKPT_CLUSTER_ID_BYTES 16
#define EA_CKPT_CLUSTER_BIND_BYTES 32
/* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" and its NUL */
#define EA_CKPT_CLUSTER_STR 37

typedef struct {
  uint8_t id[EA_CKPT_CLUSTER_ID_BYTES]; /* random, made at the cluster's first formation */
  /* The binding to the cluster key: a keyed hash of id under the key
   * (keyed), or an unkeyed hash of it when the cluster has no key; made by
   * the caller.  Two identities are the same only if id, keyed and bind
   * all match: the same id under another key is another cluster. */
  bool keyed;
  uint8_t bind[EA_CKPT_CLUSTER_BIND_BYTES];
} ea_ckpt_cluster;

/* The id as 8-4-4-4-12 lower-case hex into out (EA_CKPT_CLUSTER_STR bytes). */
void ea_ckpt_cluster_id_str(const ea_ckpt_cluster *c, char *out);
/* 32 hex digits, dashes anywhere between pairs allowed: 0 or -EINVAL. */
int ea_ckpt_cluster_id_parse(const char *s, size_t len, uint8_t id[EA_CKPT_CLUSTER_ID_BYTES]);
bool ea_ckpt_cluster_same(const ea_ckpt_cluster *a, const ea_ckpt_cluster *b);
/* The file's text into buf: its length, or -ENOSPC. */
int ea_ckpt_cluster_format(const ea_ckpt_cluster *c, char *buf, size_t cap);
/* Bounded parser over [pos, end): 0, or -EBADMSG with "line N: …" in err. */
int ea_ckpt_cluster_parse(const char *pos, const char *end, ea_ckpt_cluster *c, char *err,
                          size_t errlen);
/* Read a cluster identity file: 0; -ENOENT when absent (err untouched);
 * -EBADMSG naming the file and the line; another -errno from open/read. */
int ea_ckpt_cluster_load(const char *path, ea_ckpt_cluster *c, char *err, size_t errlen);
/* Write it atomically (path.tmp.PID, fsync, rename, fsync the directory);
 * noreplace: -EEXIST when path exists (renameat2 RENAME_NOREPLACE), and
 * nothing is changed.  Through the fault-injection layer. */
int ea_ckpt_cluster_write(const char *path, const ea_ckpt_cluster *c, bool noreplace, char *err,
                          size_t errlen);
/* theirs (DIR/CLUSTER as read) against self: 0 when the same, else -EXDEV
 * with the refusal in err: "refusing to OP checkpoint.dir DIR: it belongs
 * to cluster X (DIR/CLUSTER), not to this cluster Y; …".  Pure. */
int ea_ckpt_cluster_match(const char *dir, const ea_ckpt_cluster *theirs,
                          const ea_ckpt_cluster *self, const char *op, char *err, size_t errlen);
/* May cluster self OP ("resume from", "commit into", "delete from") DIR?
 * 0: DIR/CLUSTER is self's; 1: DIR has no CLUSTER (not claimed yet; also when DIR
 * itself is missing or not a directory: what comes next fails on its own);
 * -EXDEV: another cluster's (err as ea_ckpt_cluster_match); -EBADMSG or
 * another -errno: the file cannot be read, refused too (err says why). */
int ea_ckpt_cluster_check(const char *dir, const ea_ckpt_cluster *self, const char *op, char *err,
                          size_t errlen);
/* Record self in DIR/CLUSTER when DIR has none (written no-replace: of two
 * racing clusters one wins and the other gets -EXDEV); as
 * ea_ckpt_cluster_check for "commit into" otherwise.  *claimed (may be
 * NULL): the file was written now. */
int ea_ckpt_cluster_claim(const char *dir, const ea_ckpt_cluster *self, bool *claimed, char *err,
                          size_t errlen);
/* Whether DIR holds a step directory with a MANIFEST: a directory without
 * CLUSTER that has one was written before identities, and the cluster that
 * claims it adopts it (the caller says so in its log). */
bool ea_ckpt_cluster_legacy(const char *dir);

/* ---- verification, resume, reading ------------------------------------- */

typedef enum {
  EA_CKPT_VERIFY_SIZE = 0, /* every shard file exists with the recorded length */
  EA_CKPT_VERIFY_FULL = 1, /* ... and every byte hashes to the recorded XXH3 */
} ea_ckpt_verify_mode;

typedef struct {
  int shard; /* rank of the bad shard; -1 for the manifest */
  char file[EA_CKPT_NAME_MAX];
  uint64_t file_lo, file_hi;   /* the bad byte range inside the shard file */
  uint64_t state_lo, state_hi; /* the same range as state offsets */
  char msg[1024];              /* one line for operators */
} ea_ckpt_verify_report;

/* Verifies the checkpoint in step directory `ckpt_path` against `m` (NULL:
 * load its MANIFEST).  Returns 0; -EBADMSG with rep naming the shard and the
 * byte range (the damaged hash blocks, or [actual size, recorded length)
 * for a short file); -ENOENT for a missing shard; other -errno for I/O
 * errors.  io_flags: EA_CKPT_IO_*. rep may be NULL. */
int ea_ckpt_verify(const char *ckpt_path, const ea_ckpt_manifest *m, ea_ckpt_verify_mode mode,
                   unsigned io_flags, ea_ckpt_verify_report *rep);
/* A resume in one pass: reads every shard of the checkpoint in ckpt_path
 * (m: its manifest, NULL to load it) once, with the reader's machinery
 * (io_uring, O_DIRECT), hashing each block as it arrives exactly as
 * ea_ckpt_verify does, and places the bytes at their state offsets in buf
 * (len must be the state's total_bytes).  Returns what ea_ckpt_verify
 * returns, with the same report; on any error buf holds garbage.  Nothing
 * in buf may be used unless it returned 0. */
int ea_ckpt_load_verified(const char *ckpt_path, const ea_ckpt_manifest *m, void *buf, size_t len,
                          unsigned io_flags, ea_ckpt_verify_report *rep);

#define EA_CKPT_RESUME_MAX_SKIPPED 16
typedef struct {
  char path[EA_CKPT_PATH_MAX]; /* the chosen step directory */
  char name[EA_CKPT_NAME_MAX];
  ea_ckpt_manifest manifest; /* owned: ea_ckpt_resume_close */
  bool listed;               /* a search listed DIR (false: it returned
                                ea_ckpt_list's error) */
  uint32_t n_skipped;        /* newer candidates that were passed over */
  struct {
    char name[EA_CKPT_NAME_MAX];
    char reason[1024];
  } skipped[EA_CKPT_RESUME_MAX_SKIPPED];
} ea_ckpt_resume;

/* A checkpoint the resume search found complete and verified, offered to
 * the caller's accept hook.  Valid for the duration of the call only. */
typedef struct {
  const char *name;                 /* "step-<s>.gen-<g>" */
  const char *path;                 /* DIR/name */
  const ea_ckpt_manifest *manifest; /* parsed and verified */
} ea_ckpt_candidate;

/* The caller's part in a resume search; every member is optional.
 *   accept   is offered each candidate that verified, newest first, and
 *            decides: 0 takes it (the search ends, out holds it); > 0
 *            passes over it with the reason written to why (recorded like
 *            damage, and the search goes on to older ones); < 0 ends the
 *            search with that error (why is the caller's to keep: nothing
 *            is recorded).  NULL takes the first that verifies.
 *   skipped  is told about every checkpoint passed over, newest first,
 *            with the reason, and whether it was superseded (an abandoned
 *            timeline, not damage); out->skipped keeps only the first
 *            EA_CKPT_RESUME_MAX_SKIPPED of them, this sees them all.
 * arg is passed to both; why is the search's buffer (whylen bytes, "" on
 * entry). */
typedef struct {
  int (*accept)(void *arg, const ea_ckpt_candidate *c, char *why, size_t whylen);
  void (*skipped)(void *arg, const char *name, const char *why, bool superseded);
  void *arg;
} ea_ckpt_resume_hooks;

/* The one resume-candidate search: DIR's checkpoints newest first (step,
 * then generation); a step directory without MANIFEST is no candidate (a
 * save in progress or a leftover) and is passed over silently; an
 * incomplete or superseded one, one that does not verify with `mode`, or
 * one accept passes over is recorded in out->skipped (verification names
 * the shard and byte range) and the search goes on.  Returns 0 (out holds
 * the one taken: ea_ckpt_resume_close), -ENOENT when none was taken,
 * accept's negative error, or ea_ckpt_list's (out->listed false).  hooks
 * may be NULL. */
int ea_ckpt_search_resume(const char *dir, ea_ckpt_verify_mode mode,
                          const ea_ckpt_resume_hooks *hooks, ea_ckpt_resume *out);
/* The newest complete, non-superseded checkpoint of DIR that verifies with
 * `mode` (ea_ckpt_search_resume without hooks).  -ENOENT when none. */
int ea_ckpt_find_resume(const char *dir, ea_ckpt_verify_mode mode, ea_ckpt_resume *out);
/* --resume-from: spec is NULL/""/"latest" (as find_resume), a step number
 * ("1200": the newest generation of that step), a directory name
 * ("step-1200.gen-3", under DIR), or a path to a step directory.  An
 * explicitly named checkpoint that fails verification is an error (no
 * fallback): -EBADMSG with the reason in out->skipped[0]. */
int ea_ckpt_resolve(const char *dir, const char *spec, ea_ckpt_verify_mode mode,
                    ea_ckpt_resume *out);
void ea_ckpt_resume_close(ea_ckpt_resume *r);

/* Reads byte ranges of the full state from a checkpoint, whatever world
 * size wrote it: a range may span shards.  O_DIRECT where the file system
 * allows (aligned staging reads, several in flight), else buffered.  One
 * reader per thread. */
typedef struct ea_ckpt_reader ea_ckpt_reader;
int ea_ckpt_reader_open(ea_ckpt_reader **out, const char *ckpt_path, unsigned io_flags, char *err,
                        size_t errlen);
const ea_ckpt_manifest *ea_ckpt_reader_manifest(const ea_ckpt_reader *r);
/* Fills buf with state bytes [offset, offset+len).  -EINVAL if the range
 * leaves the state, -EBADMSG if a shard file is shorter than recorded. */
int ea_ckpt_reader_read(ea_ckpt_reader *r, uint64_t offset, void *buf, size_t len, char *err,
                        size_t errlen);
/* Whether the last read used O_DIRECT for every shard it touched. */
bool ea_ckpt_reader_direct(const ea_ckpt_reader *r);
void ea_ckpt_reader_free(ea_ckpt_reader *r);

/* ---- command line ------------------------------------------------------ */

/* `elastic-agent ckpt ls DIR | show DIR [STEP] | verify DIR [STEP] [--size]`.
 * argv[0] is "ckpt" (or the subcommand itself).  Prints to stdout, errors to
 * stderr; returns the exit code: 0 ok, 1 verification failed / not found,
 * 2 usage. */
int ea_ckpt_cli(int argc, char **argv);

/* ---- fault injection (tests and the chaos harness) --------------------- */

/* Named points, counted per process, on every checkpoint file operation
 * that writes: "open" (opening a file or directory for writing or fsync),
 * "write" (each write submitted), "fsync" (file or directory), "rename",
 * and "torn" (counts writes like "write": the Nth one writes only a prefix
 * and then the process "crashes").
 *
 * ea_ckpt_fault_arm("fsync", 3, EIO): the 3rd fsync from now fails with EIO
 * (once).  A torn write then puts the layer in the crashed state: every
 * later checkpoint file operation fails with EIO and nothing is cleaned up,
 * as if the process had died — unless err is EA_CKPT_FAULT_KILL, which
 * raises SIGKILL right after the prefix is written (for real processes).
 * err EA_CKPT_FAULT_SLOW makes the Nth call succeed after sleeping for the
 * milliseconds of the spec "point:N:slow=MS" (a slow disk; through
 * ea_ckpt_fault_parse or the environment only, and not for torn).
 *
 * The environment variable EA_CKPT_FAULT="point:N[:errno]" (errno as a
 * number or a name such as EIO, ENOSPC; "kill" for torn; "slow=MS") arms
 * the same thing at the first checkpoint operation of a process.
 * Returns 0 or -EINVAL (unknown point, N = 0). */
#define EA_CKPT_FAULT_KILL (-1)
#define EA_CKPT_FAULT_SLOW (-2)
int ea_ckpt_fault_arm(const char *point, uint64_t nth, int err);
int ea_ckpt_fault_parse(const char *spec);
/* Disarms, zeroes the counters, leaves the crashed state. */
void ea_ckpt_fault_reset(void);
/* Whether the armed fault has fired / the layer is in the crashed state. */
bool ea_ckpt_fault_fired(void);
bool ea_ckpt_fault_crashed(void);

/* Crash simulation in the SQLite manner (tests only).  Between _begin and
 * _crash the layer records what is not yet durable: file data written since
 * the file's last fsync, and creations/renames/mkdirs since their
 * directory's last fsync.  Real fsyncs are skipped (durability is modelled,
 * which keeps thousands of simulated crashes fast).  _crash then applies a
 * crash chosen by `seed`: each unsynced file keeps, drops (truncates at its
 * first unsynced byte) or garbles its unsynced bytes; each unsynced
 * directory operation is lost or kept at random (in no particular order,
 * except that an operation on a name is lost when an earlier lost one
 * touched that name), lost ones are undone.  Then the crashed state is
 * cleared and recording stops.  Unlinks are not undone.  Returns 0 or
 * -errno if applying failed. */
void ea_ckpt_sim_begin(void);
int ea_ckpt_sim_crash(uint64_t seed);
void ea_ckpt_sim_end(void);

#endif
