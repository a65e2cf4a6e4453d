/* output.h — internal to agent/job/: a user program's stdout and stderr, line by
 * line, into the agent's log (with a `[rank R]` prefix, like torchrun's
 * --tee) and into per-generation files in the data dir (agent/job/output.c).
 *
 *   DATA/workers/gen-T/rank-R.stdout, rank-R.stderr   (appended, every byte)
 *
 * Nothing blocks the loop: the pipes are libuv streams read as they become
 * readable; file writes go through libuv's thread pool, one in flight per
 * file, from a bounded buffer (a program that writes faster than the disk
 * takes loses the excess, counted and said in the file); lines are cut at
 * EA__OUT_LINE_MAX bytes; and at most EA__OUT_LOG_PER_S lines a second per
 * worker reach the agent's log (the rest only the files, with a line saying
 * how many were left out).  The last EA__OUT_TAIL lines of stderr are kept
 * for the failure report of a program that left no error file.
 *
 * Lifetime: ea__out_new .. ea__out_free(closed); every pipe handed out by
 * ea__out_begin is owned here and closed here.
 */
#ifndef EA_OUTPUT_H
#define EA_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* A longer line is cut into pieces of this size (the agent's log line
 * holds about 1 KiB of message; the files get every byte anyway). */
#define EA__OUT_LINE_MAX 1000
/* A program printing a progress bar a hundred times a second stays
 * readable; one printing a million lines cannot flood the agent's log. */
#define EA__OUT_LOG_PER_S 200
/* Lines of stderr kept for a failure report: a Python traceback's last
 * frames and its exception line. */
#define EA__OUT_TAIL 12
/* Unwritten bytes buffered per file before output is dropped: a few
 * seconds of a very chatty program at disk speed. */
#define EA__OUT_BUF_MAX (1u << 20)

/* ---- the line splitter (pure; unit-tested) --------------------------------- */

typedef struct {
  char buf[EA__OUT_LINE_MAX + 1];
  size_t len;
} ea__linebuf;

/* Feed n bytes; for every complete line (without its '\n', a '\r' before
 * it dropped), or every EA__OUT_LINE_MAX bytes without one, call
 * emit(ctx, line, len, cut) — cut: the line was longer and continues.
 * Control bytes other than tab are replaced by '?', so one line of output
 * is one line of the log. */
void ea__linebuf_feed(ea__linebuf *lb, const char *p, size_t n,
                      void (*emit)(void *ctx, const char *line, size_t len, bool cut), void *ctx);
/* End of stream: emit what is left, if anything. */
void ea__linebuf_flush(ea__linebuf *lb, void (*emit)(void *, const char *, size_t, bool),
                       void *ctx);

/* ---- capture -------------------------------------------------------------------- */

typedef struct ea__out ea__out;

/* root: DATA/workers (exists); slots: workers per node. */
int ea__out_new(uv_loop_t *loop, const char *root, uint32_t slots, ea__out **out);
/* Slot k is about to start as rank `rank` of generation `term`: two fresh
 * pipes (initialised, for the spawn's stdout and stderr) and the files
 * gen-T/rank-R.{stdout,stderr}.  Output of the slot's previous process
 * still in flight is finished first.  0 or a negative errno (then the
 * worker inherits the agent's stdout and stderr: *o_pipe = *e_pipe = NULL). */
int ea__out_begin(ea__out *o, uint32_t k, uint32_t rank, uint64_t term, uv_pipe_t **o_pipe,
                  uv_pipe_t **e_pipe);
/* The spawn worked: start reading slot k's pipes. */
void ea__out_started(ea__out *o, uint32_t k);
/* The spawn failed: forget the pipes and files of slot k. */
void ea__out_abort(ea__out *o, uint32_t k);
/* Slot k's process exited: read what its pipes still hold, now (the
 * exit can be seen before the last output). */
void ea__out_drain(ea__out *o, uint32_t k);
/* The last stderr lines of slot k's latest process, joined by '\n'
 * (NUL-terminated, "" when none); returns the length. */
size_t ea__out_tail(const ea__out *o, uint32_t k, char *buf, size_t cap);
/* Counters: lines seen, lines not copied to the log, bytes not written. */
void ea__out_stats(const ea__out *o, uint64_t *lines, uint64_t *not_logged, uint64_t *dropped);
void ea__out_free(ea__out *o, void (*closed)(void *ctx), void *ctx);

#endif
