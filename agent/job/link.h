/* link.h — internal to agent/job/: the link probe (agent/job/link.c), which
 * finds a gray link that no collective names.
 *
 * A one-way (or heavily lossy) link between two members keeps SWIM happy
 * (indirect probes go around it) while the generation's collective hangs.
 * The built-in ring names the peer it could not exchange with (BLAME); a
 * library program's gloo names none.  So while a generation this node runs
 * makes no step for a while, or right after a local worker's communicator
 * failed without naming a peer, this agent pings every other member of the
 * generation over the control channel (JOB_LINK_PING, answered by
 * JOB_LINK_PONG, job.h) once a second; a member that answered none of
 * EA__LINK_MISSES pings in a row, each given EA__LINK_ROUND_MS, is
 * unreachable from here, and the controller hears it (JOB_LINK_DOWN, every
 * round while it lasts), which holds an end of the link out at once
 * (ea_rdzv_link_down).  A one-way drop breaks a TCP connection both ways,
 * so both ends find each other unreachable and a third member finds both
 * fine.  Before each ping that follows a miss, the cached connection to
 * that peer is dropped (cb.reset), so the next ping connects afresh: a
 * connection that lived through the drop may sit in the kernel's
 * retransmission back-off long after the link healed.
 *
 * Restart mode (EA__LINK_ALWAYS) has no quiet to go by: an unmodified
 * torchrun script reports no steps, and its gloo or NCCL collective, stuck
 * on a one-way link, fails only when the program's own timeout fires
 * (torch's default: 30 min) and names no peer then either.  So there the
 * probe runs for as long as the node runs a generation, at the same pace:
 * n-1 pings a second from each of n nodes (each answered: n-1 PONGs), a
 * frame of about 40 bytes each (80 sealed with the cluster key), and a
 * control connection kept open to each member, whether the link is fine
 * or not.  That is the price of finding the link
 * within (EA__LINK_MISSES + 1) rounds of the fault whatever the program
 * does; a trigger from the program's side (its own traffic, its pace)
 * does not exist without changing the program, which restart mode
 * promises not to.  The verdict is the same two missed rounds: each peer
 * is an agent answering from a loop that never blocks, so a second
 * without a PONG twice in a row is a link (or a loop) in trouble, not a
 * busy program.  Here `degraded` means a member missed a ping, not that
 * the probe runs (it always does).
 *
 * Pure: no clock, no socket, no loop.  The glue (job_glue.c) ticks it every
 * EA__LINK_TICK_MS with what the node runs, feeds it the frames, and does
 * what the callbacks ask.  One per agent; loop thread only.
 */
#ifndef EA_JOB_LINK_H
#define EA_JOB_LINK_H

#include "job.h"

#include "ea_rdzv.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A ping a second to each member: the rendezvous' REPORT pace, n-1 small
 * frames a second from each of n nodes, and only while training stands
 * (restart mode: while a generation runs, above). */
#define EA__LINK_ROUND_MS 1000u
/* Two misses in a row: one lost ping (a machine loaded for a second, a
 * connection that had to be made afresh) is not a verdict. */
#define EA__LINK_MISSES 2u
/* Probing starts once the generation has made no step for
 * max(EA__LINK_QUIET_MIN_MS, EA__LINK_QUIET_STEPS × the recent step time):
 * two seconds is well past any step of a job that steps several times a
 * second and well under a collective's timeout (distributed.
 * communication_timeout_seconds, 10 s by default); ten steps' time keeps a
 * slow job (a step of seconds) from probing between two of its steps. */
#define EA__LINK_QUIET_MIN_MS 2000u
#define EA__LINK_QUIET_STEPS 10u
/* After a local communicator failure that named no peer: probe this long,
 * across the re-formation it causes (two rounds and a margin). */
#define EA__LINK_FAIL_MS 5000u
/* How often the glue ticks it: a round starts at most this late. */
#define EA__LINK_TICK_MS 250u

typedef struct ea__link ea__link;

/* When this node probes: never (it still answers pings); while the
 * generation makes no step or after a local communicator failure (library
 * and built-in modes, whose workers report steps); or for as long as it
 * runs a generation (restart mode, whose programs report none). */
typedef enum { EA__LINK_OFF = 0, EA__LINK_QUIET = 1, EA__LINK_ALWAYS = 2 } ea__link_mode;

typedef struct {
  /* Send a job frame (plaintext) to member `to`; the glue finds its
   * control address.  Best effort. */
  void (*send)(void *ctx, const ea_node_id *to, const uint8_t *buf, size_t len);
  /* Drop the cached outgoing connection to `to` (ea__ctl_reset_peer). */
  void (*reset)(void *ctx, const ea_node_id *to);
  /* `peer` is unreachable from here (gen: the generation probed): tell the
   * controller (ourselves: ea_rdzv_link_down directly).  Called every
   * round while it lasts. */
  void (*down)(void *ctx, const ea_node_id *peer, uint64_t gen);
  /* Whether membership says `id` is alive (not suspect, dead or gone): a
   * member it does not is a node failure, membership's to judge, and
   * counts no miss here.  NULL: all are. */
  bool (*alive)(void *ctx, const ea_node_id *id);
} ea__link_cbs;

/* mode: when this node probes (above); every agent answers pings whatever
 * it says.  name: ours, for the status line.  NULL when out of memory. */
ea__link *ea__link_new(const ea_node_id *self, const char *name, ea__link_mode mode,
                       const ea__link_cbs *cb, void *ctx);
void ea__link_free(ea__link *L);

/* At mono ms `now`: running is the generation this node runs (NULL: none;
 * borrowed for the call), last_step the newest step its workers completed
 * (ea_rdzv_status.last_step).  Starts, goes on with or ends probing. */
void ea__link_tick(ea__link *L, uint64_t now, const ea_rdzv_plan *running, uint64_t last_step);
/* A local worker's communicator failed and named no peer: probe now. */
void ea__link_comm_failed(ea__link *L, uint64_t now);
/* A JOB_LINK_PING (answered) or JOB_LINK_PONG (matched); other types are
 * ignored (JOB_LINK_DOWN is the controller's, in the glue). */
void ea__link_on_msg(ea__link *L, uint64_t now, const ea__job_msg *m);

/* Whether probing now; whether that says something is wrong (status'
 * `degraded`): EA__LINK_QUIET, whenever it probes (no step is made);
 * EA__LINK_ALWAYS, while a member has missed a ping.  A one-line summary
 * ("" when not degraded): "link probe: n3 unreachable from n2" once a
 * verdict is in, else "link probe: pinging 2 members for 0.4 s (started:
 * no step for 2.0 s)", or in EA__LINK_ALWAYS "link probe: n3 missed 1 ping
 * from n2". */
bool ea__link_active(const ea__link *L);
bool ea__link_degraded(const ea__link *L);
void ea__link_text(const ea__link *L, uint64_t now, char *out, size_t cap);
/* Members found unreachable now (at most cap ids into out). */
size_t ea__link_down_now(const ea__link *L, ea_node_id *out, size_t cap);
/* The status object ("link_probe"): state, why, since, peers, counters.
 * A new reference; NULL when out of memory. */
json_t *ea__link_status(const ea__link *L, uint64_t now);

#endif
