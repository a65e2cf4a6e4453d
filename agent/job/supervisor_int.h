/* supervisor_int.h — internal to agent/job/, private to the supervisor's two
 * files: supervisor.c (worker processes: spawn, IPC, exit, stop and kill) and
 * supervisor_warm.c (spares: warm interpreters and their handover).  The
 * records (one per spawn: a worker, or a spare until it is taken) and the
 * supervisor itself, and the functions each file lends the other.
 */
#ifndef EA_SUPERVISOR_INT_H
#define EA_SUPERVISOR_INT_H

#include "supervisor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct wk wk;

/* A slot's spares. */
typedef struct {
  wk *w;       /* the spare now, or NULL */
  char **env;  /* its environment; NULL: the usual one */
  bool off;    /* starts are cold from now on */
  bool due;    /* a spare is to start at due_ms */
  bool notify; /* on_spare is owed (from a loop turn of its own) */
  uint64_t due_ms;
  char why[320];
  uint32_t lost_row; /* lost in a row */
  uint64_t warm, cold, lost;
} warm_slot;

struct ea__sup {
  uv_loop_t *loop;
  ea__sup_cbs cb;
  void *ctx;
  uint32_t n;
  wk **slot; /* running (or exited, not yet reported) records */
  char *command, *exe, *config, *bind;
  char **argv; /* exec form, NULL-terminated copy; NULL: none */
  bool no_ipc;
  uint64_t train_steps; /* EA_TRAIN_STEPS; 0: not exported */
  uint32_t stop_grace_ms, term_grace_ms;
  uint64_t bad_packets;
  size_t live; /* records not yet freed, + 1 for `guard` */
  bool closing;
  uv_timer_t guard; /* closed last-but-one: makes `closed` asynchronous */
  void (*closed)(void *ctx);
  void *closed_ctx;
  uint8_t rx[EA_IPC_MAX_MSG];
  uint8_t tx[EA_IPC_MAX_MSG];
  ea_ipc_msg msg;  /* the one being delivered */
  ea_ipc_msg stop; /* STOP, kept apart: ea__sup_stop may run inside on_message */
  /* spares (warm interpreters): NULL when off */
  warm_slot *warm;
  char *launcher, *preload_text;
  char **preload;
  uint32_t spare_delay_ms;
  uv_timer_t warm_timer;
  uint64_t warm_starts, cold_starts;
};

struct wk {
  ea__sup *s;
  uint32_t idx;
  uv_process_t proc;
  uv_poll_t poll;
  uv_timer_t timer;
  int fd;   /* agent's end; closed after the poll handle */
  int open; /* handles initialised and not yet closed */
  bool poll_on, exited, stopping;
  bool detached; /* out of its slot: exit reported already, or never (start failed) */
  int stage;     /* 0 STOP sent, 1 SIGTERM sent, 2 SIGKILL sent */
  int pid;
  /* a spare (warm interpreter) until it is taken */
  bool spare, ready;
  int ctl;         /* our end of its control socket */
  int out[2];      /* restart mode: our ends of its first stdout, stderr */
  uv_poll_t cpoll; /* on ctl */
  uint64_t born_ms;
  char **env;    /* the environment it started with */
  char **interp; /* its interpreter words */
  uint32_t ninterp;
};

/* ---- supervisor.c ---- */

/* Words and environments (malloc'd, NULL-terminated, deep). */
void ea__sup_words_free(char **w);
/* A deep copy of w (n words; n = SIZE_MAX: up to its NULL) with room for
 * `more` further entries; NULL when out of memory. */
char **ea__sup_words_dup(char *const *w, size_t n, size_t more);
/* Append a formatted entry to c, which has room (words_dup's `more`). */
bool ea__sup_words_add(char **c, const char *fmt, const char *v);
/* The usual environment of slot idx: the agent's without our names, then
 * ours, then `extra` ("NAME=value" or NULL). */
char **ea__sup_usual_env(ea__sup *s, uint32_t idx, const char *extra);
/* Slot idx's command line as spawned cold. */
char **ea__sup_cold_args(ea__sup *s, uint32_t idx);
const char *ea__sup_prog_name(const ea__sup *s);

/* Records. */
wk *ea__sup_wk_new(ea__sup *s, uint32_t idx);
int ea__sup_wk_spawn(wk *w, char **args, char **env, uv_pipe_t *out, uv_pipe_t *err,
                     const int fds[2], const int *extra, int nextra);
int ea__sup_wk_watch(wk *w, bool start);
void ea__sup_wk_handle_closed(uv_handle_t *h);
void ea__sup_wk_close(wk *w);
void ea__sup_signal_group(wk *w, int sig);
void ea__sup_on_readable(uv_poll_t *h, int status, int events);

/* ---- supervisor_warm.c ---- */

/* A spare exited before it was taken (from its exit callback). */
void ea__sup_spare_exited(ea__sup *s, wk *w, int64_t status, int sig);
/* Hand slot idx's start to its spare: 0 when the spare became the worker;
 * otherwise the caller starts it cold. */
int ea__sup_spare_take(ea__sup *s, uint32_t idx, char **cold, char **env, const ea__sup_spawn *sp);

#endif
