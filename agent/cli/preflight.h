/* preflight.h — internal to agent/cli/: what preflight.c (the command, the
 * local checks, the row table and its printers) shares with preflight_net.c
 * (the checks over the network). */
#ifndef EA_PREFLIGHT_H
#define EA_PREFLIGHT_H

#include "ea_wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* A row's verdict: PASS, WARN (works, but worth knowing), FAIL. */
enum { ST_PASS, ST_WARN, ST_FAIL };

/* Add a row to the table (at most 64; the rest are dropped): its name, its
 * verdict, a hint shown unless it passed, and the detail. */
void ea__pf_add(const char *name, int status, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Monotonic milliseconds. */
double ea__pf_mono_ms(void);
/* Poll fd for ev (POLLIN, POLLOUT) until deadline (ea__pf_mono_ms): 0,
 * -ETIMEDOUT or a negative errno. */
int ea__pf_wait_fd(int fd, short ev, double deadline);

/* One seed of --join and what its push-pull answered (ups: its members,
 * malloc'd; the caller frees). */
typedef struct {
  char spec[300];
  ea_addr addr; /* the address that answered */
  struct sockaddr_storage local;
  bool ok;
  ea_node_id id;
  ea_update *ups;
  size_t n;
} ea__pf_seed;

/* Rows `seed` (one per seed of the comma-separated join list, each a real
 * push-pull sealed with key, NULL: none) and `cluster_key`; fills res (at
 * most cap) and returns how many. */
size_t ea__pf_check_seeds(const char *join, const uint8_t *key, ea__pf_seed *res, size_t cap);
/* Rows `ckpt_shared` and `clock`: probe every alive worker agent the seeds
 * know, over the control channel, for a token written into ckdir. */
void ea__pf_check_shared(const char *ckdir, const uint8_t *key, ea__pf_seed *seeds, size_t nseeds);

#endif
