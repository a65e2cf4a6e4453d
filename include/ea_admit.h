/* ea_admit.h — admission of incoming connections before they authenticate.
 *
 * Both TCP listeners an agent has — the gossip port's push-pull
 * (membership/transport_uv.c) and the control channel (agent/control.c) —
 * accept connections from anyone, and a connection says who it is only with
 * its first (sealed) frame header.  Until then it is on probation.  What a
 * flood of strangers may cost is decided here, the same way for both:
 *
 *   - a token bucket per source (an IPv4 address, an IPv6 /64): `burst`
 *     connects, refilled at `rate` a second; a connect without a token is
 *     closed as soon as it is accepted, before any buffer or timer is given
 *     to it;
 *   - a source that has authenticated before (a frame header opened with the
 *     key, or a sync we started succeeded) is never refused, and its
 *     connections are the last closed;
 *   - on probation, at most `per_source` connections from one source (its
 *     oldest goes) and `total` in all, shared max-min fairly: the oldest
 *     waiting connection of the source holding the most goes, so a newcomer
 *     holding none always gets a slot however many sources flood;
 *   - never closed to make room: a connection whose header has arrived (in
 *     the listener's buffer or the kernel's) — it is read this turn.
 *
 * Pure: no clock, no sockets (the caller passes both in); tested in
 * tests/unit/test_admit.c.  Issue 27: 25 sources reconnecting as fast as
 * they could kept every join through a seed out for as long as they ran. */
#ifndef EA_ADMIT_H
#define EA_ADMIT_H

#include "ea_wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Sources remembered; a new one takes the slot of the one seen least
 * recently, authenticated ones last. */
#define EA_ADMIT_SOURCES 256

typedef struct {
  double rate, burst;  /* the bucket: tokens a second, at most this many */
  uint32_t per_source; /* on probation from one source */
  uint32_t total;      /* on probation in all */
} ea_admit_config;

typedef struct ea_admit ea_admit;

/* NULL when out of memory. */
ea_admit *ea_admit_new(const ea_admit_config *cfg);
void ea_admit_free(ea_admit *a);

/* A connection from src was accepted at now_ms: true when it may stay
 * (a token taken, or a known source), false when it must be closed now. */
bool ea_admit_connect(ea_admit *a, const ea_addr *src, uint64_t now_ms);
/* src authenticated (a valid frame header, or a sync we started). */
void ea_admit_authed(ea_admit *a, const ea_addr *src, uint64_t now_ms);
bool ea_admit_known(const ea_admit *a, const ea_addr *src);
/* Same source: the address (IPv6: its /64), any port. */
bool ea_admit_same_source(const ea_addr *x, const ea_addr *y);

/* A connection on probation, as the caller lists them. */
typedef struct {
  ea_addr src;
  uint64_t since_ms; /* accepted */
  bool header_here;  /* its header has arrived: never closed to make room */
} ea_admit_wait;

/* A newcomer from src joins the n connections on probation w (itself not
 * among them).  Returns the index of the one to close to make room, -1
 * when none must go; *per_source tells which cap chose it (the source's
 * own, or the total). */
int ea_admit_victim(const ea_admit *a, const ea_admit_wait *w, size_t n, const ea_addr *src,
                    bool *per_source);

#endif
