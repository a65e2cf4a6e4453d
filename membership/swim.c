/* swim.c — the SWIM + Lifeguard membership core.
 *
 * WHY IT IS BUILT THIS WAY
 *
 * A training cluster loses money every second a dead node is still counted
 * in the worker group, and loses more when a live node is thrown out by
 * mistake: every false positive re-forms every communicator.  So the
 * membership layer has to be fast to notice a crash, slow to believe a
 * rumour, and cheap enough to run on thousands of nodes.  SWIM (Das, Gupta,
 * Motivala, DSN 2002) gives constant per-node load: each node probes one
 * member per interval, asks k others to probe on its behalf before it
 * suspects anyone, and spreads what it learns by piggybacking on the probe
 * traffic it sends anyway.  Lifeguard (Dadgar et al., 2018, as in
 * hashicorp/memberlist) fixes SWIM's weak spot, a slow or overloaded *prober*
 * accusing healthy members: a node that misses nacks it was promised, or has
 * to refute accusations against itself, raises a local health score that
 * stretches its own timeouts; and a suspicion times out slowly when only one
 * member suspects, quickly once several independent members confirm it.
 *
 * The core is pure.  It never reads a clock (time arrives as now_ms), never
 * touches a socket (an ea_msg leaves through io->send, a push-pull through
 * io->sync and comes back through ea_swim_merge), never calls a random
 * device (base's ea_rng, seeded by the caller, picks probe orders
 * and gossip targets), and never logs (io->on_change reports every change).
 * That is what lets one implementation run in the agent on libuv and, by
 * the thousand, in tests/sim/sim.c in virtual time, where a test can state
 * a timing promise to the millisecond and replay any failure from its seed.
 * The shape follows tarantool's swim.c: protocol here, codec in wire.c,
 * loop and sockets elsewhere.
 *
 * THE STATE MACHINE
 *
 * A member is (incarnation, state) with state ALIVE < SUSPECT < DEAD < LEFT.
 * An update wins iff its (incarnation, state) pair is lexicographically
 * larger than what we hold: alive(i) beats suspect/dead/left(j<i),
 * suspect(i) beats alive(i), dead(i) and left(i) beat alive/suspect(i), and
 * left(i) is final for incarnation i.  Only the member itself raises its
 * incarnation: when it hears itself suspected, declared dead or left (and it
 * has not left), or a record of itself with a higher incarnation (it was
 * restarted), it bumps past the accusation and gossips ALIVE.  A dead member
 * that comes back therefore returns with a higher incarnation and is
 * re-added as alive.
 *
 * Probing is randomized round-robin (swim_probelist.c): the probe list is
 * shuffled at the end of every round and newcomers are inserted at random
 * positions, so every member is probed by every other once per round (a
 * worst-case bound SWIM's pure random choice lacks) while the order stays
 * unpredictable.  A probe is
 * PING → ACK(seq); after probe_timeout without an ack we send PING_REQ to k
 * random alive members, who ping the target, relay its ack, and send a NACK
 * if they hear nothing within 4/5 of their probe timeout (Lifeguard §IV-B:
 * the nack must reach us before our interval ends).  At the end of the probe
 * interval without any ack we mark the target SUSPECT at the incarnation it
 * had when the probe began, from=self (a newer one heard meanwhile makes
 * the failure no news: see probe_finish).  Alongside the ping-reqs we ping the target
 * directly once more: memberlist sends a TCP ping at this point so that UDP
 * loss alone cannot fail a probe; our seam has no TCP ping, and a second
 * datagram gets most of the way (five times fewer false suspicions at 10%
 * loss).  When we probe a member we already suspect, the SUSPECT update
 * rides on the ping itself (memberlist's "buddy system"), and on our
 * ping-reqs for the helpers to pass on, so a live suspect learns of the
 * accusation within one probe and refutes; a helper relays the target's own
 * piggyback (its refutation) ahead of its queue on the ack it forwards.
 *
 * Local health h ∈ [0, awareness_max-1]: +1 when a failed probe had nacks
 * expected but missing (we, not the target, may be the slow one), +1 when we
 * must refute, −1 on every successful probe.  The probe interval and the
 * probe timeout are both multiplied by (h+1).  A failed probe with no helper
 * to ask does not move h: with nobody to vouch, a failed probe says nothing
 * about which side is slow.  We add one signal: +1 per probe interval while
 * the dissemination queue holds more than we can send in one interval.  A
 * backlog means news arrives faster than we pass it on — under heavy loss
 * every member suspects others, and every suspicion and refutation goes to
 * all N — and probing more slowly is what drains it.
 *
 * The suspicion timer (memberlist's formula; swim_suspicion.c), with
 * N = members alive or suspect in our view, ourselves included:
 *     min = suspicion_mult · log10(max(N,10)) · probe_interval
 *     max = suspicion_max_mult · min
 *     K   = suspicion_mult − 2  (0 when N − 2 < K: too few members to confirm)
 *     timeout(C) = max − (max − min) · ln(C+1) / ln(K+1),  never below min
 * where C counts distinct `from`s of SUSPECT updates other than the first.
 * The timer starts at max, shrinks as confirmations arrive, and on expiry
 * the member is DEAD (from=self).  A lone suspicion, the typical false
 * positive under packet loss, waits the full max; a real crash is confirmed
 * by every member that probes it and falls to min.
 *
 * Dissemination (swim_queue.c): every accepted change is queued once per
 * member (a newer update about the same member replaces the older), sent
 * least-transmitted first and newest first among equals, and dropped after
 * retransmit_mult · ceil(log10(N+1)) transmissions.  Updates ride on every
 * ping, ack, ping-req and nack until the packet reaches cfg->max_packet
 * (exact sizes from ea_wire_update_size / ea_wire_msg_base_size), and while
 * the queue is non-empty it is also flushed to gossip_nodes random members
 * every gossip_interval.  Push-pull (full state over TCP) runs at join and
 * every push_pull_interval · pushpull_scale(N) as anti-entropy; a merged
 * record is treated exactly like a gossiped update.  A node that knew only
 * itself does not re-gossip what a join taught it (its peer already knew).
 *
 * WHAT CLOSES THE GAPS OF BOUNDED GOSSIP
 *
 * Push gossip with a fixed retransmit count leaves a straggler now and then
 * (a few percent of updates at 10% loss miss some member).  The simulator
 * showed each kind of straggler turning into a false DEAD or a view that
 * stays incomplete, so each has a repair, all of them pull-shaped (the one
 * who is wrong asks) and all of them idle in a healthy cluster:
 *  - A suspicion we still hold after min/2 (a refutation normally spreads in
 *    a few gossip rounds) makes us probe the suspect ourselves, every other
 *    probe, until resolved: the buddy ping makes it re-assert, and its ack
 *    carries that ALIVE first (not left to the queue, where it may have
 *    sunk).  Between those probes the accusation alone goes to the suspect
 *    every two probe intervals, and the refutation comes straight back.  A
 *    member accused with an incarnation it has already refuted re-queues
 *    its ALIVE (without a bump) if it is no longer queued.
 *  - A refutation goes straight back to whoever sent the accusation, as well
 *    as into the queue: gossip only reaches whom we hold alive, and after a
 *    partition the accusers are exactly the ones we hold dead.
 *  - Members held DEAD (not LEFT) stay in the probe round (one plain ping, no
 *    ping-req, no consequence if unanswered).  One that answers — a healed
 *    partition, a pause longer than its suspicion — is told it is dead, and
 *    refutes back: this is how a partition heals (memberlist needs serf's
 *    reconnect loop for it).
 *  - After our join (the first push-pull merged after ea_swim_join), our
 *    probes carry our own ALIVE, on both of their pings (and once more on
 *    its own when the target's ack did not come), for one full round,
 *    which reaches every member exactly once: a member that missed our
 *    ALIVE in a burst of joins learns it from us.  A
 *    gossip or ping-req from a sender we do not know triggers a push-pull
 *    with it (at most one per probe interval).
 *  - A new core queues its own ALIVE (memberlist does too), so it spreads
 *    from the joiner as well as from the seed.
 *  - A leaving member sends its LEFT directly to every live member once, and
 *    on every ack afterwards: a leave must never be mistaken for a death.
 *  - When the agent saw the kernel reset a connection to a member's process
 *    (ea_swim_peer_gone), that member is probed at once, and if the probe
 *    fails it is probed again at once, the accusation riding on every ping
 *    and ping-req of that second probe (gone_reprobe); only if nothing at
 *    all answers that one either is it declared DEAD, one interval after
 *    the suspicion began instead of min: the kernel's word and two failed
 *    probes stand in for the K confirmations.  A live suspect that hears
 *    the accusation answers inside that probe, so a timer can never run out
 *    on it before its refutation could arrive.  Only the detection of a
 *    process that is gone gets faster; a frozen or unplugged node resets
 *    nothing and keeps the bound below.
 *
 * THE DETECTION BOUND (docs/membership.md has the same, with numbers)
 *
 * Let I = probe_interval, T = probe_timeout, G = gossip_interval,
 * g = gossip_nodes, d = one-way network delay, all members healthy (h = 0).
 * From a crash until every live member holds the crashed node DEAD:
 *
 *   T_detect = T_first + I + T_susp + T_spread
 *
 *  1. T_first, until some member starts a probe whose ping arrives after the
 *     crash.  Each interval, each of the N−1 live members probes one member;
 *     the chance that none of them picks the crashed one is
 *     (1 − 1/(N−1))^(N−1) ≈ 1/e (round-robin only helps), so
 *     P(T_first > j·I) ≤ e^(−j): j = ⌈ln(1/ε)⌉ intervals cover all but ε.
 *     (SWIM's expectation: I·e/(e−1) from crash to first suspicion.)
 *  2. I: that probe fails at the end of its interval (direct timeout T,
 *     then the indirect round I − T), and the prober marks it SUSPECT.
 *  3. T_susp = timeout(C).  Every other member probes the crashed node about
 *     once per interval ((N−2)/(N−1) probes per interval in expectation), and
 *     each failed probe is an independent confirmation.  The K-th arrives
 *     after about K·I + a gossip hop; while K·I + G + 2d ≤ min the first
 *     suspector's timer runs exactly min.  No member can declare DEAD before
 *     min has passed since *some* suspicion began, and no suspicion can begin
 *     before crash + I − d, which is the lower bound the tests assert.
 *  4. T_spread: the DEAD update spreads as an epidemic with fanout g every G
 *     (plus piggybacking): ⌈log_{g+1} N + ln(N)/g⌉ rounds (Pittel's bound
 *     for push gossip) of G + d each.  Meanwhile every member that heard the
 *     suspicion runs its own timer, which also fires near min.
 *
 * So T_detect ≤ ⌈ln(1/ε)⌉·I + I + min + ⌈log_{g+1}N + ln N/g⌉·(G + d) with
 * probability 1 − ε.  ea_sim_detect_bound() in sim.c computes exactly this,
 * and tests/unit/test_swim.c asserts it.  At the defaults (I = 150 ms,
 * α = 4, G = 50 ms, g = 3) and N = 64, d ≤ 5 ms: min = 1083 ms, 5 spread
 * rounds, bound 1050 + 150 + 1083 + 275 = 2558 ms at ε = 1e-3 (3008 ms at
 * ε = 1e-4); lower bound 150 − 5 + 1083 = 1228 ms; expected
 * 237 + 1083 + 275 ≈ 1.6 s; the simulator measures p50 1.3 s, p99 2.2 s.
 *
 * DATA STRUCTURES (each in a file of its own, behind a private header)
 *
 * The simulator runs 5000 of these cores in one process, so nothing here is
 * O(N) per packet.  Members live in a dense array indexed through an
 * open-addressing map on the id (swim_idmap.c, which reads the ids from the
 * array rather than storing them twice).  The probe order (swim_probelist.c,
 * randomized round-robin), the dissemination queue (swim_queue.c, a pool
 * ordered by (transmissions, age)) and the suspicion timers
 * (swim_suspicion.c, a pool ordered by deadline) refer to members by index,
 * each member holds its handle into each of them (the probe list and the
 * queue keep it current through a slot callback), and all are fixed up on
 * the rare swap-remove when a member is reaped (reap_member).  The queue
 * and the timers are ordered by the same indexed binary heap (swim_heap.c).
 * None of these files sees struct ea_swim.  Reap deadlines stay here, a
 * FIFO ring, because dead_reclaim_ms is a constant.
 * Metadata is interned process-wide and reference counted (swim_meta.c):
 * 5000 views of 5000 members share 5000 copies of ea_meta instead of 25
 * million.  The public ea_member view is materialized on request
 * (ea_swim_members copies the table; ea_swim_find fills one of a small ring
 * of slots).  A digest of the table (XOR of a hash of each member's id,
 * incarnation and state) lets the simulator skip push-pulls between
 * identical views, and a running total of the export's encoded size lets it
 * count their bytes without building them.
 *
 * WHY THIS FILE IS STILL OVER 1000 LINES
 *
 * What is left is the protocol, and it is one state machine over one
 * struct: set_state, add_member and reap_member keep the id map, the
 * probe, queue and timer handles, the live and alive counts, the digest and
 * the export size in step, and apply, probing, the relays and the tick all
 * lean on those invariants.  Splitting it further (memberlist puts its
 * packet handlers in net.go) would mean publishing struct ea_swim to
 * several files and turning a dozen static helpers into an internal API,
 * so that no one file could be read to check an invariant.  A seventh of
 * the file is this comment.
 */
#include "ea_base.h"
#include "ea_membership.h"

#include "swim_idmap.h"
#include "swim_int.h"
#include "swim_meta.h"
#include "swim_probelist.h"
#include "swim_queue.h"
#include "swim_suspicion.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define NONE EA__NONE
#define NEVER UINT64_MAX

/* Ping-reqs we relay at once.  Each costs a few hundred bytes; a node asked
 * for more than this is either under attack or the cluster is collapsing,
 * and refusing (the requester then sees a missing nack) is the right signal. */
#define RELAY_MAX 128
/* Ring of materialized ea_swim_find() results, so a caller may hold a few
 * pointers at once (e.g. compare two members) without copying. */
#define FIND_SLOTS 8
/* Suspicions we have held long enough to doubt our own view (see
 * recheck_push).  64 covers every suspicion a node holds outside a mass
 * failure, where the round-robin probes the rest anyway. */
#define PRIO_MAX 64
#define URGENT_MAX 8
/* Our own fresh suspicions held back from gossip while the suspect may
 * still refute (hold_push).  Past this many the next is gossiped at once. */
#define HOLD_MAX 64
/* Relays nack after 4/5 of their probe timeout (Lifeguard §IV-B), so the nack
 * lands inside the requester's remaining interval I − T even with I = 2T. */
#define NACK_NUM 4
#define NACK_DEN 5

/* ---- the core's types -------------------------------------------------- */

typedef struct {
  ea_node_id id; /* first: the id map reads it from here (swim_idmap.h) */
  uint32_t inc;
  uint8_t state;
  uint32_t probe_pos; /* index into probe list, NONE for self */
  uint32_t susp;      /* its suspicion timer, NONE unless SUSPECT */
  uint32_t qpos;      /* its entry in the dissemination queue, or NONE */
  /* Ourselves: the incarnation at which our metadata last changed.  Others:
   * the latest incarnation at which our copy of theirs is known current (0:
   * not known, learned from a SUSPECT record).  See enqueue_x. */
  uint32_t meta_at;
  uint64_t since;
  ea__meta_blob *meta;
} member;

_Static_assert(offsetof(member, id) == 0, "ea__idmap reads the id at the record's start");

typedef struct {
  uint64_t deadline, since;
  ea_node_id id;
} reap_ent;

typedef struct {
  bool used;
  uint32_t seq;        /* our ping to the target */
  uint32_t origin_seq; /* the requester's probe */
  ea_addr reply_to;
  ea_node_id target;
  uint64_t deadline; /* nack due */
} relay;

/* Hot fields first: with 5000 cores in one simulator process every event
 * lands on a cold core, and each cache line touched is a miss. */
struct ea_swim {
  /* timers and the probe in flight: read on every tick and packet */
  uint64_t probe_at;   /* end of the current probe = start of the next */
  uint64_t gossip_at;  /* next gossip round (only while the queue is non-empty) */
  uint64_t pp_at;      /* next periodic push-pull */
  uint64_t contact_at; /* earliest next push-pull with an unknown sender */
  struct {
    bool active, acked, indirect;
    bool heard; /* the ack came from the target itself: it got one of our pings */
    bool dead;  /* probing a member we hold DEAD: see probe_start */
    bool gone;  /* asked for by ea_swim_peer_gone: see probe_finish */
    /* The target was SUSPECT when the probe began, so every ping and
     * ping-req of it carried the accusation (buddy_update). */
    bool accusing;
    /* The target's incarnation when the probe began: the probe's silence
     * is news about that incarnation only (probe_finish). */
    uint32_t inc;
    ea_node_id target;
    ea_addr addr;
    uint32_t seq;
    uint64_t timeout_at;
    uint32_t expected_nacks, nacks;
  } probe;
  uint32_t seq;
  uint32_t health;
  bool reprobe;          /* gone_reprobe: the next probe is of reprobe_id */
  ea_node_id reprobe_id; /* a gone member whose first probe just failed */
  bool intro;            /* our probes carry our own ALIVE until this round ends (after a join) */
  bool joining;          /* ea_swim_join called, no push-pull merged since: the next starts intro */
  uint32_t reap_len, nrelays, prio_len;
  bool left;
  bool last_prio;    /* the current probe came from prio: next is round-robin */
  bool accused;      /* set by apply_self: answer the packet's sender directly */
  bool accused_full; /* …with our metadata: an accusation named an older copy */
  bool want_meta;    /* set by apply: a refutation needed metadata we lack (ea_swim_recv) */
  uint32_t self_idx;
  ea_node_id self_id;
  ea_swim_io io;

  /* member table + id map */
  member *mem;
  uint32_t nmem, capmem;
  ea__idmap ids;
  uint32_t nlive;  /* alive + suspect, self included */
  uint32_t nalive; /* alive, self included */
  uint64_t digest; /* XOR of rec_hash over the table: equal views, equal digests */
  uint64_t xbytes; /* encoded size of ea_swim_export()'s records, kept current */

  ea__plist pl; /* randomized round-robin (swim_probelist.h) */
  ea_rng r;

  ea__bq q;          /* dissemination queue */
  ea__susp_set susp; /* suspicion timers */

  /* reaping: FIFO ring (deadlines are monotone) */
  reap_ent *reap;
  uint32_t reap_head, reap_cap;

  /* reaped DEAD members still tried (cfg.reconnect_*): a bounded list */
  struct recon {
    ea_node_id id;
    ea_addr addr;
    uint64_t until;
  } * recon;
  uint32_t nrecon, caprecon, recon_next;
  uint64_t recon_at; /* next reconnect attempt (NEVER: none due) */

  uint64_t pp_last; /* last periodic push-pull (NEVER: none yet) */
  uint64_t created;
  double pp_phase; /* in [0,1): where in its interval our first one falls */
  ea_swim_config cfg;
  ea_swim_stats st;
  ea_msg *msg; /* scratch outgoing message */

  /* cold: rarely used, large */
  struct {
    ea_node_id id;
    uint32_t inc;
    uint64_t due;
    uint64_t poke;  /* next direct accusation (recheck_poke), from due on */
  } prio[PRIO_MAX]; /* suspicions to re-check by probing (unordered) */
  uint64_t poke_at; /* no entry's poke is earlier (NEVER: none) */
  struct {
    ea_node_id id;
    uint64_t at;        /* when it was asked for */
    bool gone;          /* ea_swim_peer_gone: the kernel reported its process gone */
  } urgent[URGENT_MAX]; /* ea_swim_probe_soon: probed next, oldest first */
  uint32_t urgent_len;
  struct {
    ea_node_id id;
    uint64_t at;
  } urgent_seen[URGENT_MAX]; /* recently asked for (rate limit), a ring */
  uint32_t urgent_seen_next;
  struct {
    ea_node_id id;
    uint32_t inc;
    uint64_t due;
  } hold[HOLD_MAX]; /* our own suspicions not gossiped yet (hold_push), FIFO */
  uint32_t hold_head, hold_len;
  relay relays[RELAY_MAX];

  /* materialized views (logically const accessors fill these) */
  ea_member *view;
  uint32_t view_cap;
  uint32_t find_next;
  ea_member self_view;
  ea_member find_ring[FIND_SLOTS];
};

/* ---- small helpers ----------------------------------------------------- */

static bool id_eq(const ea_node_id *a, const ea_node_id *b) {
  return memcmp(a, b, sizeof *a) == 0;
}

/* One member's (id, incarnation, state), for the table digest. */
static uint64_t rec_hash(const ea_node_id *id, uint32_t inc, uint8_t state) {
  return ea__mix64(ea__id_hash(id) ^ (((uint64_t)inc << 8 | state) * 0x9e3779b97f4a7c15ULL));
}

/* Encoded size of one member's export record (state, incarnation, two ids,
 * metadata), without building it. */
static size_t rec_bytes(uint8_t state, uint32_t inc, const ea__meta_blob *b) {
  ea_update u;
  memset(&u, 0, sizeof u);
  u.state = state;
  u.incarnation = inc;
  return ea_wire_update_size(&u) + (b ? b->wire_extra : 0);
}

static bool is_live(uint8_t st) {
  return st == EA_STATE_ALIVE || st == EA_STATE_SUSPECT;
}

static uint64_t umin(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}

static uint32_t scale(const ea_swim *s) {
  return s->health + 1;
}

/* ceil(log10(n+1)) · retransmit_mult, memberlist's retransmitLimit. */
static uint32_t retransmit_limit(const ea_swim *s) {
  return ea__bq_limit(s->cfg.retransmit_mult, s->nlive);
}

/* memberlist's pushPullScale: double the interval for every doubling of the
 * cluster past 32 members, so the total TCP state traffic stays bounded. */
static uint64_t pushpull_interval(const ea_swim *s) {
  uint64_t iv = s->cfg.push_pull_interval_ms;
  if (s->nlive <= 32) return iv;
  double mult = ceil(log2((double)s->nlive) - log2(32.0)) + 1.0;
  return iv * (uint64_t)mult;
}

/* When the next periodic push-pull is due for the present cluster size. */
static uint64_t pp_due(const ea_swim *s) {
  uint64_t iv = pushpull_interval(s);
  if (s->pp_last != NEVER) return s->pp_last + iv;
  return s->created + 1 + (uint64_t)((1.0 - s->pp_phase) * (double)iv);
}

static uint32_t find_idx(const ea_swim *s, const ea_node_id *id) {
  return ea__idmap_find(&s->ids, s->mem, sizeof *s->mem, id);
}

/* ---- dissemination (the queue itself: swim_queue.c) ----------------------- */

/* Where the queue keeps each member's entry handle. */
static uint32_t *qpos_of(void *ctx, uint32_t midx) {
  return &((ea_swim *)ctx)->mem[midx].qpos;
}

/* Queue news about member midx; a newer update replaces any queued one.
 * A refutation (first) goes out ahead of everything else queued.
 *
 * What travels in the metadata's slot (ea_update.meta_inc):
 *  - an ALIVE carries the metadata when `full`; else it is a refutation for
 *    members that already hold the metadata, and carries mc = the
 *    incarnation at which the member last changed it (its own meta_at), so
 *    that one holding an older copy does not take it (apply);
 *  - a SUSPECT or DEAD carries mc = the accuser's meta_at for the member,
 *    so that the accused sends its metadata with the refutation when the
 *    accuser's copy is older than its last change (refute: a member that
 *    restarted on a new port refutes the suspicion of its old one).
 * Without metadata a refutation is the size of a SUSPECT (48 bytes instead
 * of ~115), which is what lets thousands of them through at 20 % loss. */
static void enqueue_x(ea_swim *s, uint64_t now, uint32_t midx, uint8_t state, uint32_t inc,
                      const ea_node_id *from, bool first, bool full, uint32_t mc) {
  member *m = &s->mem[midx];
  /* Empty once m's older entry is replaced: news goes out at once. */
  if (ea__bq_len(&s->q) == (m->qpos != NONE ? 1u : 0u) && s->gossip_at < now) s->gossip_at = now;
  ea__meta_blob *meta = state == EA_STATE_ALIVE && full ? m->meta : NULL;
  if (first)
    ea__bq_push_first(&s->q, midx, &m->id, from, state, inc, meta, mc);
  else
    ea__bq_push(&s->q, midx, &m->id, from, state, inc, meta, mc);
}

/* News: an ALIVE with the metadata, a SUSPECT or DEAD with its accuser's
 * meta_at (mc), a LEFT with nothing (mc 0). */
static void enqueue(ea_swim *s, uint64_t now, uint32_t midx, uint8_t state, uint32_t inc,
                    const ea_node_id *from, uint32_t mc) {
  enqueue_x(s, now, midx, state, inc, from, false, true, mc);
}

/* Append queued updates to msg (already holding `used` bytes) until the
 * packet budget or the update cap is reached.  Each included update counts
 * one transmission and leaves the queue at its retransmit limit. */
static void q_fill(ea_swim *s, ea_msg *msg, size_t used) {
  size_t budget = s->cfg.max_packet;
  if (used >= budget || ea__bq_len(&s->q) == 0) return;
  s->st.updates_sent += ea__bq_fill(&s->q, msg, budget - used, retransmit_limit(s));
}

/* Our own ALIVE, as the queue would send it, for packets that carry it
 * outside the queue (introductions, direct refutations). */
static void self_alive(const ea_swim *s, ea_update *u) {
  const member *self = &s->mem[s->self_idx];
  u->state = EA_STATE_ALIVE;
  u->incarnation = self->inc;
  u->id = self->id;
  u->from = self->id;
  u->has_meta = self->meta != NULL;
  u->meta_inc = 0;
  if (self->meta) u->meta = self->meta->m;
}

/* Our ALIVE as a refutation sent to an accuser: with our metadata when
 * `full` (its copy predates our last change), else naming that change
 * (enqueue_x). */
static void self_refutation(const ea_swim *s, bool full, ea_update *u) {
  self_alive(s, u);
  if (!full) {
    u->has_meta = false;
    u->meta_inc = s->mem[s->self_idx].meta_at;
  }
}

/* ---- suspicion (the timers themselves: swim_suspicion.c) ------------------ */

static void susp_cancel(ea_swim *s, uint32_t midx) {
  member *m = &s->mem[midx];
  if (m->susp == NONE) return;
  ea__susp_cancel(&s->susp, m->susp);
  m->susp = NONE;
}

static int susp_start(ea_swim *s, uint64_t now, uint32_t midx, const ea_node_id *from) {
  susp_cancel(s, midx);
  uint64_t mn, mx;
  ea__susp_bounds(&s->cfg, s->nlive, &mn, &mx);
  return ea__susp_start(&s->susp, now, midx, from, mn, mx, ea__susp_k(&s->cfg, s->nlive),
                        &s->mem[midx].susp);
}

/* A SUSPECT update from `from` about a member we already suspect.  Returns
 * true when it was a new independent confirmation (worth re-gossiping). */
static bool susp_confirm(ea_swim *s, uint32_t midx, const ea_node_id *from) {
  uint32_t si = s->mem[midx].susp;
  return si != NONE && ea__susp_confirm(&s->susp, si, from);
}

/* ---- member table ------------------------------------------------------- */

static void materialize(const ea_swim *s, uint32_t midx, ea_member *out) {
  const member *m = &s->mem[midx];
  out->id = m->id;
  if (m->meta)
    out->meta = m->meta->m;
  else
    memset(&out->meta, 0, sizeof out->meta);
  out->incarnation = m->inc;
  out->state = m->state;
  out->since_ms = m->since;
}

static void refresh_self_view(ea_swim *s) {
  materialize(s, s->self_idx, &s->self_view);
}

static void notify(ea_swim *s, uint32_t midx, uint8_t old) {
  if (midx == s->self_idx) refresh_self_view(s);
  if (!s->io.on_change) return;
  ea_member tmp;
  materialize(s, midx, &tmp);
  s->io.on_change(s->io.ctx, &tmp, old);
}

static int reap_push(ea_swim *s, uint64_t deadline, uint64_t since, const ea_node_id *id) {
  if (s->reap_len == s->reap_cap) {
    uint32_t nc = s->reap_cap ? s->reap_cap * 2 : 64;
    reap_ent *nr = malloc((size_t)nc * sizeof *nr);
    if (!nr) return -ENOMEM;
    for (uint32_t i = 0; i < s->reap_len; i++) nr[i] = s->reap[(s->reap_head + i) % s->reap_cap];
    free(s->reap);
    s->reap = nr;
    s->reap_head = 0;
    s->reap_cap = nc;
  }
  reap_ent *e = &s->reap[(s->reap_head + s->reap_len++) % s->reap_cap];
  e->deadline = deadline;
  e->since = since;
  e->id = *id;
  return 0;
}

/* Change a member's (state, incarnation, meta) and keep every index and
 * counter in step.  newmeta is borrowed (retained here when it changes). */
static void set_state(ea_swim *s, uint64_t now, uint32_t midx, uint8_t st, uint32_t inc,
                      ea__meta_blob *newmeta) {
  member *m = &s->mem[midx];
  uint8_t old = m->state;
  bool meta_changed = newmeta && newmeta != m->meta;
  if (old == EA_STATE_SUSPECT) susp_cancel(s, midx);
  s->nlive += (uint32_t)is_live(st) - (uint32_t)is_live(old);
  s->nalive += (uint32_t)(st == EA_STATE_ALIVE) - (uint32_t)(old == EA_STATE_ALIVE);
  s->digest ^= rec_hash(&m->id, m->inc, old) ^ rec_hash(&m->id, inc, st);
  s->xbytes -= rec_bytes(old, m->inc, m->meta);
  m->inc = inc;
  m->state = st;
  if (meta_changed) {
    ea__meta_release(m->meta);
    m->meta = ea__meta_retain(newmeta);
  }
  s->xbytes += rec_bytes(st, inc, m->meta);
  if (old != st) {
    m->since = now;
    if ((st == EA_STATE_DEAD || st == EA_STATE_LEFT) && midx != s->self_idx)
      reap_push(s, now + s->cfg.dead_reclaim_ms, now, &m->id);
  }
  if (old != st || meta_changed) notify(s, midx, old);
}

/* The probe list's hooks: each member's position, and our generator (every
 * draw from one seeded stream, so the simulator replays). */
static uint32_t *ppos_of(void *ctx, uint32_t midx) {
  return &((ea_swim *)ctx)->mem[midx].probe_pos;
}
static uint32_t draw_below(void *ctx, uint32_t n) {
  return ea_rng_below(&((ea_swim *)ctx)->r, n);
}

/* After the join that taught us the cluster: one full round of probes, each
 * carrying our ALIVE (see probe_start), starting now. */
static void intro_start(ea_swim *s) {
  /* After the join, not "after a merge into a core that knew only itself":
   * in a burst of joins the seed gossips the other joiners to us before
   * its push-pull answer arrives, and a joiner that started its round only
   * when it knew nobody never introduced itself (test_every_node_elects_*,
   * EA_SEED=278648319882666: node 61 learned 11 members from gossip 7 ms
   * before the answer; node 23 missed its ALIVE in the burst and did not
   * know it 15 s later). */
  s->joining = false;
  s->intro = s->pl.n > 0;
  ea__plist_restart(&s->pl); /* the list is already in random order (random insertion) */
}

/* Room for `more` members without reallocating mid-merge (a 5000-record
 * push-pull would otherwise copy the table a dozen times). */
static void reserve(ea_swim *s, uint32_t more) {
  uint32_t want = s->nmem + more;
  if (want > s->capmem) {
    member *nm = realloc(s->mem, (size_t)want * sizeof *nm);
    if (nm) {
      s->mem = nm;
      s->capmem = want;
    }
  }
  ea__plist_reserve(&s->pl, want);
  ea__idmap_reserve(&s->ids, s->mem, sizeof *s->mem, s->nmem, want);
}

/* Add a member (not in the table).  Returns its index or NONE. */
/* ---- reconnecting to reaped dead members --------------------------------
 * Reaping forgets a dead member after dead_reclaim_ms; while it is in the
 * table the probe round keeps pinging it (how a shorter partition heals).
 * Past that, two sides of a partition would never talk again: each
 * forgot the other.  So a member reaped while DEAD is remembered (id and
 * address, at most RECON_MAX, the oldest dropped) and, every
 * reconnect_interval_ms, the next one in turn gets a push-pull — the same
 * exchange a join makes.  One that answers is merged back (with everyone
 * it knows) and leaves the list when it reappears in the table; one that
 * never does is dropped reconnect_timeout_ms after it was reaped.  LEFT
 * members left on purpose and are not tried. */
#define RECON_MAX 1024

static void recon_del(ea_swim *s, const ea_node_id *id) {
  for (uint32_t i = 0; i < s->nrecon; i++)
    if (id_eq(&s->recon[i].id, id)) {
      s->recon[i] = s->recon[--s->nrecon];
      break;
    }
  if (!s->nrecon) s->recon_at = NEVER;
}

static void recon_add(ea_swim *s, uint64_t now, const ea_node_id *id, const ea_addr *addr) {
  if (!s->cfg.reconnect_interval_ms || !s->cfg.reconnect_timeout_ms || s->left) return;
  recon_del(s, id);
  if (s->nrecon == RECON_MAX) { /* drop the one reaped first */
    uint32_t old = 0;
    for (uint32_t i = 1; i < s->nrecon; i++)
      if (s->recon[i].until < s->recon[old].until) old = i;
    s->recon[old] = s->recon[--s->nrecon];
  }
  if (s->nrecon == s->caprecon) {
    uint32_t nc = s->caprecon ? s->caprecon * 2 : 8;
    struct recon *nr = realloc(s->recon, (size_t)nc * sizeof *nr);
    if (!nr) return;
    s->recon = nr;
    s->caprecon = nc;
  }
  s->recon[s->nrecon++] = (struct recon){*id, *addr, now + s->cfg.reconnect_timeout_ms};
  if (s->recon_at == NEVER) s->recon_at = now + s->cfg.reconnect_interval_ms;
}

static void recon_try(ea_swim *s, uint64_t now) {
  for (uint32_t i = 0; i < s->nrecon;) /* expired ones go */
    if (s->recon[i].until <= now)
      s->recon[i] = s->recon[--s->nrecon];
    else
      i++;
  if (!s->nrecon || s->left) {
    s->recon_at = NEVER;
    return;
  }
  struct recon *r = &s->recon[s->recon_next++ % s->nrecon];
  s->st.reconnects++;
  s->st.syncs_started++;
  if (s->io.sync) s->io.sync(s->io.ctx, &r->addr, EA_SYNC_PERIODIC);
  s->recon_at = now + s->cfg.reconnect_interval_ms;
}

static uint32_t add_member(ea_swim *s, uint64_t now, const ea_node_id *id, uint8_t st, uint32_t inc,
                           ea__meta_blob *meta) {
  if (s->nmem == s->capmem) {
    uint32_t nc = s->capmem ? s->capmem * 2 : 16;
    member *nm = realloc(s->mem, (size_t)nc * sizeof *nm);
    if (!nm) return NONE;
    s->mem = nm;
    s->capmem = nc;
  }
  if (ea__idmap_reserve(&s->ids, s->mem, sizeof *s->mem, s->nmem, s->nmem + 1) != 0) return NONE;
  uint32_t midx = s->nmem++;
  member *m = &s->mem[midx];
  memset(m, 0, sizeof *m);
  m->id = *id;
  m->inc = inc;
  m->state = st;
  m->probe_pos = NONE;
  m->susp = NONE;
  m->qpos = NONE;
  m->since = now;
  m->meta = meta ? ea__meta_retain(meta) : NULL;
  ea__idmap_put(&s->ids, id, midx);
  s->digest ^= rec_hash(id, inc, st);
  s->xbytes += rec_bytes(st, inc, m->meta);
  if (is_live(st)) s->nlive++;
  if (st == EA_STATE_ALIVE) s->nalive++;
  if (!id_eq(id, &s->self_id)) ea__plist_insert(&s->pl, midx);
  recon_del(s, id);
  return midx;
}

/* Remove a dead/left member: swap the last member into its slot and fix
 * every structure that refers to the moved one by index. */
static void reap_member(ea_swim *s, uint32_t midx) {
  member *m = &s->mem[midx];
  if (m->qpos != NONE) ea__bq_drop(&s->q, m->qpos);
  susp_cancel(s, midx);
  ea__plist_remove(&s->pl, midx);
  ea__idmap_del(&s->ids, s->mem, sizeof *s->mem, &m->id);
  s->digest ^= rec_hash(&m->id, m->inc, m->state);
  s->xbytes -= rec_bytes(m->state, m->inc, m->meta);
  if (is_live(m->state)) s->nlive--;
  if (m->state == EA_STATE_ALIVE) s->nalive--;
  ea__meta_release(m->meta);
  uint32_t last = s->nmem - 1;
  if (midx != last) {
    *m = s->mem[last];
    ea__idmap_move(&s->ids, s->mem, sizeof *s->mem, &m->id, midx);
    if (m->probe_pos != NONE) ea__plist_rekey(&s->pl, m->probe_pos, midx);
    if (m->qpos != NONE) ea__bq_rekey(&s->q, m->qpos, midx);
    if (m->susp != NONE) ea__susp_at(&s->susp, m->susp)->key = midx;
    if (last == s->self_idx) s->self_idx = midx;
  }
  s->nmem--;
}

/* ---- sending ------------------------------------------------------------ */

static ea_msg *msg_begin(ea_swim *s, uint8_t type, uint32_t seq, const ea_node_id *target) {
  ea_msg *m = s->msg;
  m->type = type;
  m->seq = seq;
  m->src = s->self_id;
  if (target)
    m->target = *target;
  else
    memset(&m->target, 0, sizeof m->target);
  memset(&m->target_addr, 0, sizeof m->target_addr);
  memset(&m->reply_to, 0, sizeof m->reply_to);
  m->nupdates = 0;
  return m;
}

static void msg_send(ea_swim *s, const ea_addr *to, ea_msg *m) {
  size_t used = ea_wire_msg_base_size(m);
  for (uint32_t i = 0; i < m->nupdates; i++) used += ea_wire_update_size(&m->updates[i]);
  q_fill(s, m, used);
  s->st.msgs_out++;
  s->io.send(s->io.ctx, to, m);
}

static const ea_addr *member_addr(const ea_swim *s, uint32_t midx) {
  return &s->mem[midx].meta->m.gossip;
}

/* Up to want distinct random members satisfying the filter, excluding self
 * and `skip`.  Rejection sampling (O(want) when most members qualify), then
 * a scan when the table is mostly dead. */
static uint32_t pick_random(ea_swim *s, uint32_t want, bool alive_only, const ea_node_id *skip,
                            uint32_t *out) {
  uint32_t got = 0, tries = 0;
  if (want == 0 || s->nmem <= 1) return 0;
#define PICK_OK(mi)                                                                     \
  ((mi) != s->self_idx && s->mem[(mi)].meta &&                                          \
   (alive_only ? s->mem[(mi)].state == EA_STATE_ALIVE : is_live(s->mem[(mi)].state)) && \
   !(skip && id_eq(&s->mem[(mi)].id, skip)))
  while (got < want && tries < 8 * want + 8) {
    tries++;
    uint32_t mi = ea_rng_below(&s->r, s->nmem);
    if (!PICK_OK(mi)) continue;
    bool dup = false;
    for (uint32_t i = 0; i < got; i++) dup |= out[i] == mi;
    if (!dup) out[got++] = mi;
  }
  if (got < want) {
    /* Reservoir over the qualifying members not yet chosen. */
    uint32_t seen = 0;
    uint32_t base = got;
    for (uint32_t mi = 0; mi < s->nmem; mi++) {
      if (!PICK_OK(mi)) continue;
      bool dup = false;
      for (uint32_t i = 0; i < base; i++) dup |= out[i] == mi;
      if (dup) continue;
      seen++;
      if (got < want)
        out[got++] = mi;
      else {
        uint32_t j = ea_rng_below(&s->r, seen);
        if (j < want - base) out[base + j] = mi;
      }
    }
  }
#undef PICK_OK
  return got;
}

/* ---- applying updates ---------------------------------------------------- */

enum { ORIG_GOSSIP, ORIG_MERGE, ORIG_MERGE_FRESH };

typedef struct {
  uint8_t state;
  uint32_t inc;
  ea_node_id id, from;
  const ea_meta *meta; /* may be NULL */
  ea__meta_blob *blob; /* when the caller already holds an interned copy */
  uint32_t meta_inc;   /* without meta: ea_update.meta_inc */
} rec;

static int rank_of(uint8_t st) {
  return st; /* ALIVE < SUSPECT < DEAD < LEFT */
}

/* Bump past an accusation of incarnation `accused`.  full: the accuser's
 * copy of our metadata is older than its last change (or it holds other
 * metadata), so the refutation carries ours. */
static void refute(ea_swim *s, uint64_t now, uint32_t accused, bool full) {
  member *self = &s->mem[s->self_idx];
  uint32_t inc = self->inc + 1;
  if (accused >= inc) inc = accused + 1;
  s->digest ^= rec_hash(&self->id, self->inc, self->state) ^ rec_hash(&self->id, inc, self->state);
  s->xbytes +=
      rec_bytes(self->state, inc, self->meta) - rec_bytes(self->state, self->inc, self->meta);
  self->inc = inc;
  refresh_self_view(s);
  if (s->health + 1 < s->cfg.awareness_max) s->health++;
  s->st.refutations++;
  enqueue_x(s, now, s->self_idx, EA_STATE_ALIVE, inc, &s->self_id, true, full, self->meta_at);
}

static void apply_self(ea_swim *s, uint64_t now, const rec *r) {
  const member *self = &s->mem[s->self_idx];
  if (r->state == EA_STATE_ALIVE) {
    /* Someone holds a newer incarnation of us (we restarted), or the same
     * incarnation with other metadata: out-shout it. */
    if (r->inc > self->inc ||
        (r->inc == self->inc && r->meta && !ea__meta_same(self->meta, r->meta)))
      refute(s, now, r->inc, true);
    return;
  }
  s->accused = true;
  /* The accuser's copy of our metadata predates its last change. */
  bool full = r->meta_inc < self->meta_at;
  s->accused_full |= full;
  if (r->inc < self->inc) {
    /* Someone still believes an accusation we already refuted: our ALIVE
     * missed it.  Say it again (without a bump) unless it is still queued;
     * the ack to a buddy ping then carries it straight to the doubter. */
    s->st.stale_dropped++;
    if (s->mem[s->self_idx].qpos == NONE)
      enqueue_x(s, now, s->self_idx, EA_STATE_ALIVE, self->inc, &s->self_id, true, full,
                self->meta_at);
    return;
  }
  refute(s, now, r->inc, full);
}

/* Whether prio entry k still names a suspicion we hold. */
static bool recheck_valid(const ea_swim *s, uint32_t k, uint32_t *midx) {
  uint32_t c = find_idx(s, &s->prio[k].id);
  *midx = c;
  return c != NONE && s->mem[c].state == EA_STATE_SUSPECT && s->mem[c].inc == s->prio[k].inc;
}

/* Re-checking suspicions.  A live suspect refutes, and its ALIVE normally
 * reaches everyone in a few gossip rounds; but push gossip with a bounded
 * retransmit count leaves a straggler now and then (a few percent of
 * updates at 10% loss), and a straggler that holds the suspicion declares a
 * live member dead when its timer runs out.  So a suspicion still held after
 * half the minimum timeout — far longer than a refutation takes to spread —
 * makes us probe the suspect ourselves, every other probe, until it is
 * resolved: the buddy ping tells it what we believe, it re-asserts its
 * ALIVE, and the ack brings that back.  Only stragglers do this, so a
 * refuted suspect is not flooded; for a real crash the probes fail and are
 * counted as our (independent) confirmation. */
static void recheck_push(ea_swim *s, uint64_t due, uint64_t poke, uint32_t midx) {
  /* Full: most entries are suspicions refuted since (under heavy loss every
   * member hears hundreds a second, each entered here for min/2); drop those
   * before giving up on this one — a straggler without an entry is never
   * re-checked. */
  uint32_t c;
  for (uint32_t k = 0; s->prio_len == PRIO_MAX && k < s->prio_len; k++)
    if (!recheck_valid(s, k, &c)) s->prio[k--] = s->prio[--s->prio_len];
  if (s->prio_len == PRIO_MAX) return;
  uint32_t k = s->prio_len++;
  s->prio[k].id = s->mem[midx].id;
  s->prio[k].inc = s->mem[midx].inc;
  s->prio[k].due = due;
  s->prio[k].poke = poke;
  s->poke_at = umin(s->poke_at, poke);
}

static void suspect_noted(ea_swim *s, uint64_t now, uint32_t midx) {
  uint32_t si = s->mem[midx].susp;
  if (si == NONE) return;
  uint64_t due = now + ea__susp_at(&s->susp, si)->min / 2;
  recheck_push(s, due, due, midx);
}

static void apply(ea_swim *s, uint64_t now, const rec *r, int origin) {
  if (s->left) return;
  if (id_eq(&r->id, &s->self_id)) {
    apply_self(s, now, r);
    return;
  }
  uint32_t mi = find_idx(s, &r->id);
  if (mi == NONE) {
    /* A stranger's death teaches nothing; without metadata we cannot reach it. */
    if (!is_live(r->state) || !r->meta) return;
    /* r->blob is borrowed; an interned one is ours to drop after add_member
     * took its own reference (atomics cost, at 25 million adds). */
    ea__meta_blob *owned = r->blob ? NULL : ea__meta_intern(r->meta);
    ea__meta_blob *b = r->blob ? r->blob : owned;
    if (!b) return;
    mi = add_member(s, now, &r->id, r->state, r->inc, b);
    ea__meta_release(owned);
    if (mi == NONE) return;
    /* A SUSPECT record's metadata is its sender's copy, of unknown age. */
    s->mem[mi].meta_at = r->state == EA_STATE_ALIVE ? r->inc : 0;
    if (r->state == EA_STATE_SUSPECT) {
      susp_start(s, now, mi, &r->from);
      suspect_noted(s, now, mi);
    }
    notify(s, mi, 0xff);
    if (origin != ORIG_MERGE_FRESH) enqueue(s, now, mi, r->state, r->inc, &r->from, r->meta_inc);
    return;
  }
  member *m = &s->mem[mi];
  if (r->inc < m->inc || (r->inc == m->inc && rank_of(r->state) < rank_of(m->state))) {
    s->st.stale_dropped++;
    return;
  }
  if (r->inc == m->inc && r->state == m->state) {
    /* Same fact.  For SUSPECT it may be an independent confirmation; merged
     * records are second-hand, so they never count as one. */
    if (r->state == EA_STATE_SUSPECT && origin == ORIG_GOSSIP && susp_confirm(s, mi, &r->from))
      enqueue(s, now, mi, r->state, r->inc, &r->from, r->meta_inc);
    return;
  }
  /* Newer.  ALIVE brings (possibly new) metadata.  An ALIVE with a newer
   * incarnation is a refutation (or, rarely, new metadata): it is passed on
   * ahead of the queue, so that under a flood of suspicions the one thing
   * that cancels a suspicion is not the last to arrive. */
  bool alive = r->state == EA_STATE_ALIVE;
  /* An ALIVE without metadata is for members whose copy is current as of
   * the member's last change (enqueue_x).  Ours is older: taking the new
   * incarnation would keep old addresses under it (a member restarted on a
   * new port, its new ALIVE not yet here), so it waits for the one with
   * the metadata — the suspicion it would cancel names our older copy, and
   * the member answers that with its metadata. */
  if (alive && !r->meta && m->meta_at < r->meta_inc) {
    s->st.stale_meta++;
    if (origin == ORIG_GOSSIP) s->want_meta = true;
    return;
  }
  bool refutation = alive && r->inc > m->inc && (!r->meta || ea__meta_same(m->meta, r->meta));
  ea__meta_blob *b = NULL, *owned = NULL;
  if (alive && r->meta) {
    if (r->blob)
      b = r->blob;
    else if (!ea__meta_same(m->meta, r->meta))
      b = owned = ea__meta_intern(r->meta);
  }
  set_state(s, now, mi, r->state, r->inc, b);
  ea__meta_release(owned);
  if (alive) m->meta_at = r->inc; /* with the metadata, or ours is current */
  if (r->state == EA_STATE_SUSPECT) {
    susp_start(s, now, mi, &r->from);
    suspect_noted(s, now, mi);
  }
  /* Relayed as it came: a refutation without metadata stays without it. */
  if (origin != ORIG_MERGE_FRESH)
    enqueue_x(s, now, mi, r->state, r->inc, &r->from, refutation, r->meta != NULL, r->meta_inc);
}

static void rec_from_update(rec *r, const ea_update *u) {
  r->state = u->state;
  r->inc = u->incarnation;
  r->id = u->id;
  r->from = u->from;
  r->meta = u->has_meta ? &u->meta : NULL;
  r->blob = NULL;
  r->meta_inc = u->has_meta ? 0 : u->meta_inc;
}

/* ---- probing -------------------------------------------------------------- */

static void health_dec(ea_swim *s) {
  if (s->health > 0) s->health--;
}

static void buddy_update(const ea_swim *s, uint32_t mi, ea_update *u) {
  u->state = EA_STATE_SUSPECT;
  u->incarnation = s->mem[mi].inc;
  u->id = s->mem[mi].id;
  u->from = s->self_id;
  u->meta_inc = s->mem[mi].meta_at;
  u->has_meta = false;
}

/* Re-checking suspicions, continued (recheck_push).  The re-check probes
 * are shared — every other probe, most overdue first, slowed by local
 * health — so a member holding several stale suspicions re-checks each only
 * every few seconds: at N = 1000 and 20% loss one straggler went 2 s
 * between two re-checks, the one it made lost every packet, and its timer
 * declared a live member dead (bench/gossip --trace).  So each suspicion due
 * for a re-check is also told to the suspect directly, in a message of its
 * own, every two probe intervals (not scaled: one small packet each way),
 * and a live suspect answers with its refutation straight back
 * (ea_swim_recv).  Unanswered, nothing changes: only probes confirm. */
static void recheck_poke(ea_swim *s, uint64_t now) {
  uint64_t next = NEVER;
  for (uint32_t k = 0; k < s->prio_len; k++) {
    if (s->prio[k].poke > now) {
      next = umin(next, s->prio[k].poke);
      continue;
    }
    uint32_t c;
    if (!recheck_valid(s, k, &c) || !s->mem[c].meta) {
      s->prio[k--] = s->prio[--s->prio_len]; /* resolved meanwhile */
      continue;
    }
    ea_msg *out = msg_begin(s, EA_MSG_GOSSIP, 0, NULL);
    buddy_update(s, c, &out->updates[out->nupdates++]);
    s->st.msgs_out++;
    s->st.recheck_pokes++;
    s->io.send(s->io.ctx, member_addr(s, c), out);
    s->prio[k].poke = now + 2 * (uint64_t)s->cfg.probe_interval_ms;
    next = umin(next, s->prio[k].poke);
  }
  s->poke_at = next;
}

/* Holding a fresh suspicion back.  Under heavy loss most suspicions are
 * false, and gossiping one costs every member a few transmissions of it and
 * then of its refutation; at 20% loss and thousands of members that is
 * more than the packets can carry, and the backlog is what turns a
 * suspicion into a false DEAD (a member that got the accusation but not
 * yet the refutation).  So our own new suspicion waits one probe timeout
 * (the suspect was told directly, and its refutation comes straight back)
 * before it is queued: refuted by then, nobody else ever hears of it.  Our
 * own timer runs from the start, and confirmations from other probers are
 * gossiped as usual, so a real crash is declared no later: the K-th
 * confirmation still reaches us well within min (swim.c's bound). */
static void hold_push(ea_swim *s, uint64_t now, uint32_t mi) {
  member *m = &s->mem[mi];
  if (s->hold_len == HOLD_MAX) {
    enqueue(s, now, mi, EA_STATE_SUSPECT, m->inc, &s->self_id, m->meta_at);
    return;
  }
  uint32_t k = (s->hold_head + s->hold_len++) % HOLD_MAX;
  s->hold[k].id = m->id;
  s->hold[k].inc = m->inc;
  s->hold[k].due = now + (uint64_t)s->cfg.probe_timeout_ms * scale(s);
}

/* Held suspicions whose grace ran out and that still stand go to the queue
 * (unless news about the member is queued already: a confirmation from
 * someone else carries the same accusation). */
static void hold_release(ea_swim *s, uint64_t now) {
  while (s->hold_len && s->hold[s->hold_head].due <= now) {
    uint32_t k = s->hold_head;
    s->hold_head = (s->hold_head + 1) % HOLD_MAX;
    s->hold_len--;
    uint32_t mi = find_idx(s, &s->hold[k].id);
    if (mi == NONE || s->mem[mi].state != EA_STATE_SUSPECT || s->mem[mi].inc != s->hold[k].inc ||
        s->mem[mi].qpos != NONE)
      continue;
    enqueue(s, now, mi, EA_STATE_SUSPECT, s->mem[mi].inc, &s->self_id, s->mem[mi].meta_at);
  }
}

/* A suspicion that ran out, or ended by the shortcut below: DEAD, from us. */
static void declare_dead(ea_swim *s, uint64_t now, uint32_t mi) {
  uint32_t inc = s->mem[mi].inc;
  set_state(s, now, mi, EA_STATE_DEAD, inc, NULL); /* frees the timer */
  s->st.declared_dead++;
  enqueue(s, now, mi, EA_STATE_DEAD, inc, &s->self_id, s->mem[mi].meta_at);
}

/* The shortcut for a member the kernel reported gone (ea_swim_peer_gone).
 * Lifeguard would have its suspicion wait for K confirmations (min = 600 ms
 * even at 4 nodes); the kernel's reset stands in for them, but the reset
 * only says a *worker* of that node died, and its agent is usually alive.
 * So the shortcut never runs a timer against the suspect.  When the probe
 * asked for fails, the member is suspected as usual, told so at once, and
 * probed again at once (probe_start takes it ahead of everything): every
 * ping and ping-req of that second probe carries the accusation, so a live
 * suspect refutes on the ack, through a helper's relay, or straight back to
 * the direct accusation.  Only if that probe too gets no answer at all
 * (probe_finish, s->probe.accusing) is the member declared DEAD, one
 * probe interval after the suspicion began.
 *
 * A capped timer (the earlier design) ran out whenever the re-probe was
 * late — queued behind other urgent probes, or behind the probe in flight —
 * and the direct accusation was lost: at 10% loss 1 capped suspicion in
 * about 15 declared a live member dead (test_swim, EA_SEED=78788629751937).
 * Now a live member is declared dead only if every path of two probes and
 * the direct accusation is lost, which the accusing probe makes rarer
 * still by sending its ping-reqs at its start as well as after the probe
 * timeout (probe_start). */
static void gone_reprobe(ea_swim *s, uint32_t mi) {
  s->reprobe = true;
  s->reprobe_id = s->mem[mi].id;
}

static void probe_finish(ea_swim *s, uint64_t now) {
  if (!s->probe.active) return;
  s->probe.active = false;
  /* Our introduction rode on this probe's pings, and only the target's own
   * ack says one arrived.  Without it (both pings lost, the ack relayed or
   * none), one more copy in a message of its own: the round reaches each
   * member once, and a member that had also missed our ALIVE in the gossip
   * kept our previous incarnation's metadata without push-pull
   * (test_restart_with_new_meta_reaches_every_view, EA_SEED=60253037351284:
   * one gossip copy and both pings lost at 10% loss). */
  if (s->intro && !s->probe.heard && !s->probe.dead) {
    ea_msg *out = msg_begin(s, EA_MSG_GOSSIP, 0, NULL);
    self_alive(s, &out->updates[out->nupdates++]);
    msg_send(s, &s->probe.addr, out);
  }
  if (s->probe.acked || s->probe.dead) return; /* a corpse not answering is no news */
  if (s->probe.expected_nacks > 0 && s->probe.nacks < s->probe.expected_nacks &&
      s->health + 1 < s->cfg.awareness_max)
    s->health++;
  uint32_t mi = find_idx(s, &s->probe.target);
  if (mi == NONE) return;
  member *m = &s->mem[mi];
  /* A newer incarnation reached us while the probe ran: the member refuted
   * or restarted, which only it can do, so it was alive after the probe
   * began, and the probe's silence says nothing about the incarnation we
   * hold now (memberlist suspects the incarnation its probe started with,
   * and a stale suspicion is dropped).  Suspecting the new one anyway
   * accused a member the moment it had proved itself alive: a node paused
   * 700 ms refuted twice, and a straggler kept the first refutation
   * (test_pause_shorter_than_suspicion_refutes, EA_SEED=94603029983602);
   * a restarted node refuted its own restart, and that refutation, without
   * metadata, displaced the restart's ALIVE with metadata from every queue
   * it reached (test_restart_with_new_meta_reaches_every_view,
   * EA_SEED=112931315964778). */
  if (m->inc != s->probe.inc) return;
  if (m->state == EA_STATE_ALIVE) {
    set_state(s, now, mi, EA_STATE_SUSPECT, m->inc, NULL);
    susp_start(s, now, mi, &s->self_id);
    if (s->probe.gone) gone_reprobe(s, mi);
    suspect_noted(s, now, mi);
    s->st.suspicions++;
    /* Lifeguard: tell the suspect itself, at once.  A live one refutes
     * straight back to us (apply_self, then the direct reply in
     * ea_swim_recv), instead of waiting for the gossip to reach it or for
     * a buddy ping. */
    ea_msg *out = msg_begin(s, EA_MSG_GOSSIP, 0, NULL);
    buddy_update(s, mi, &out->updates[out->nupdates++]);
    msg_send(s, &s->probe.addr, out);
    /* And give it that long before the accusation goes to everyone. */
    hold_push(s, now, mi);
  } else if (m->state == EA_STATE_SUSPECT) {
    if (susp_confirm(s, mi, &s->self_id))
      enqueue(s, now, mi, EA_STATE_SUSPECT, m->inc, &s->self_id, m->meta_at);
    if (!s->probe.gone) return;
    if (s->probe.accusing) {
      /* It was told, on every path of this probe, and nothing answered. */
      declare_dead(s, now, mi);
    } else {
      gone_reprobe(s, mi); /* suspected during the probe: accuse, then judge */
    }
  }
}

/* Whether the dissemination queue holds more transmissions than we can send
 * in one probe interval (pings, acks and gossip rounds, packets full of
 * average-size updates).  When it does, news is arriving faster than we can
 * pass it on — typically because heavy loss makes every member suspect
 * others — and each further probe we send adds to it. */
static bool backlogged(const ea_swim *s) {
  if (ea__bq_len(&s->q) == 0) return false;
  uint64_t per_iv = 2 + (uint64_t)s->cfg.gossip_nodes *
                            ((s->cfg.probe_interval_ms + s->cfg.gossip_interval_ms - 1) /
                             s->cfg.gossip_interval_ms);
  uint64_t cap = per_iv * (s->cfg.max_packet / (2 * s->q.min_size)); /* ~2× the smallest */
  return (uint64_t)ea__bq_len(&s->q) * retransmit_limit(s) > cap;
}

/* PING_REQ to indirect_checks random alive members for the probe in flight
 * (each nack they owe is counted in expected_nacks). */
static void ping_reqs(ea_swim *s) {
  uint32_t k = s->cfg.indirect_checks;
  uint32_t pick[64];
  if (k > 64) k = 64;
  uint32_t n = pick_random(s, k, true, &s->probe.target, pick);
  const ea_addr *self_addr = member_addr(s, s->self_idx);
  uint32_t ti = find_idx(s, &s->probe.target);
  bool buddy = ti != NONE && s->mem[ti].state == EA_STATE_SUSPECT;
  for (uint32_t i = 0; i < n; i++) {
    ea_msg *msg = msg_begin(s, EA_MSG_PING_REQ, s->probe.seq, &s->probe.target);
    msg->target_addr = s->probe.addr;
    msg->reply_to = *self_addr;
    if (buddy) /* for the helper to pass on: see handle_ping_req */
      buddy_update(s, ti, &msg->updates[msg->nupdates++]);
    s->st.ping_reqs_sent++;
    msg_send(s, member_addr(s, pick[i]), msg);
  }
  s->probe.expected_nacks += n;
}

static void probe_start(ea_swim *s, uint64_t now) {
  /* Lifeguard's local health, extended: a dissemination backlog is as much
   * a sign that we cannot keep up as a missed nack, and slowing our probes
   * is what lets the backlog drain (fewer probes, fewer false suspicions). */
  if (backlogged(s) && s->health + 1 < s->cfg.awareness_max) s->health++;
  uint64_t iv = (uint64_t)s->cfg.probe_interval_ms * scale(s);
  s->probe_at = now + iv;
  uint32_t mi = NONE;
  bool gone = false;
  /* The second probe of a gone member (gone_reprobe): now, ahead of all. */
  if (s->reprobe) {
    s->reprobe = false;
    uint32_t c = find_idx(s, &s->reprobe_id);
    if (c != NONE && s->mem[c].state == EA_STATE_SUSPECT && s->mem[c].meta) {
      mi = c;
      gone = true;
    }
  }
  /* A suspicion due for a re-check takes every other probe (recheck_push);
   * the rest stay round-robin, so a crash nobody suspects yet is still found. */
  bool use_prio = !s->last_prio && mi == NONE;
  if (mi == NONE) s->last_prio = false;
  while (use_prio && s->prio_len && mi == NONE) {
    /* The most overdue entry (a linear pass: at most PRIO_MAX, and only while
     * we hold suspicions). */
    uint32_t best = NONE;
    for (uint32_t k = 0; k < s->prio_len; k++)
      if (s->prio[k].due <= now && (best == NONE || s->prio[k].due < s->prio[best].due)) best = k;
    if (best == NONE) break;
    uint32_t c;
    bool valid = recheck_valid(s, best, &c);
    uint64_t poke = s->prio[best].poke; /* its own cadence (recheck_poke) */
    s->prio[best] = s->prio[--s->prio_len];
    if (!valid) continue; /* resolved meanwhile */
    mi = c;
    s->last_prio = true;
    recheck_push(s, now + 2 * iv, poke, c); /* again, while it stays suspect */
  }
  /* ea_swim_probe_soon: before the round, oldest first; one that is no
   * longer ALIVE (suspected or declared meanwhile) needs no extra probe. */
  while (mi == NONE && s->urgent_len) {
    uint32_t c = find_idx(s, &s->urgent[0].id);
    bool g = s->urgent[0].gone;
    memmove(&s->urgent[0], &s->urgent[1], (size_t)(--s->urgent_len) * sizeof s->urgent[0]);
    if (c != NONE && c != s->self_idx && s->mem[c].meta &&
        (s->mem[c].state == EA_STATE_ALIVE || (g && s->mem[c].state == EA_STATE_SUSPECT))) {
      mi = c;
      gone = g;
      s->st.urgent_probes++;
    }
  }
  for (uint32_t steps = 0; mi == NONE && steps <= s->pl.n; steps++) {
    bool new_round;
    uint32_t c = ea__plist_next(&s->pl, &new_round);
    if (new_round) s->intro = false; /* a round is complete */
    if (c == NONE) break;
    if (s->mem[c].state != EA_STATE_LEFT && s->mem[c].meta) {
      mi = c;
      break;
    }
  }
  if (mi == NONE) return;
  member *m = &s->mem[mi];
  s->probe.active = true;
  s->probe.acked = s->probe.heard = false;
  s->probe.dead = m->state == EA_STATE_DEAD;
  s->probe.gone = gone;
  s->probe.accusing = m->state == EA_STATE_SUSPECT;
  s->probe.inc = m->inc;
  s->probe.indirect = s->probe.dead; /* no ping-req for the dead */
  s->probe.target = m->id;
  s->probe.addr = *member_addr(s, mi);
  s->probe.seq = ++s->seq;
  s->probe.timeout_at = now + (uint64_t)s->cfg.probe_timeout_ms * scale(s);
  s->probe.expected_nacks = 0;
  s->probe.nacks = 0;
  ea_msg *msg = msg_begin(s, EA_MSG_PING, s->probe.seq, &m->id);
  /* Buddy system: tell a suspect it is suspected, so it can refute now. */
  if (m->state == EA_STATE_SUSPECT) buddy_update(s, mi, &msg->updates[msg->nupdates++]);
  /* A newcomer introduces itself on every probe of its first round: the
   * round-robin reaches each member exactly once, so a member that missed
   * our ALIVE in a burst of joins learns it directly within one round. */
  if (s->intro) self_alive(s, &msg->updates[msg->nupdates++]);
  s->st.pings_sent++;
  msg_send(s, &s->probe.addr, msg);
  /* A probe whose failure declares the member DEAD (gone_reprobe) asks its
   * helpers at once as well as after the timeout: twice the paths for a
   * live suspect to hear the accusation and answer, in the same interval. */
  if (gone && s->probe.accusing) {
    s->st.gone_suspicions++;
    ping_reqs(s);
  }
}

static void probe_indirect(ea_swim *s, uint64_t now) {
  (void)now;
  s->probe.indirect = true;
  ping_reqs(s);
  /* And ping it directly once more.  memberlist sends a TCP ping here, so
   * that random UDP loss alone cannot fail a probe; our seam has no TCP
   * ping, and a second datagram gives most of the benefit: at loss p the
   * direct path fails with (1−(1−p)²)² instead of 1−(1−p)², which cuts false
   * suspicions five-fold at 10% loss.  Same seq: whichever ack comes first. */
  uint32_t ti = find_idx(s, &s->probe.target);
  ea_msg *msg = msg_begin(s, EA_MSG_PING, s->probe.seq, &s->probe.target);
  if (ti != NONE && s->mem[ti].state == EA_STATE_SUSPECT)
    buddy_update(s, ti, &msg->updates[msg->nupdates++]);
  /* The introduction too (probe_start): the round reaches each member once,
   * and with a single ping 1 in 10 of them missed it at 10% loss; a member
   * that had also missed our ALIVE in the gossip then kept our previous
   * incarnation's metadata for good without push-pull
   * (test_restart_with_new_meta_reaches_every_view,
   * EA_SEED=46723920531081). */
  if (s->intro) self_alive(s, &msg->updates[msg->nupdates++]);
  s->st.pings_sent++;
  msg_send(s, &s->probe.addr, msg);
}

/* ---- public API ----------------------------------------------------------- */

ea_swim *ea_swim_new(const ea_swim_config *cfg, const ea_node_id *self, const ea_meta *self_meta,
                     const ea_swim_io *io, uint64_t seed, uint64_t now_ms) {
  ea_swim *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->cfg = *cfg;
  if (s->cfg.probe_interval_ms == 0) s->cfg.probe_interval_ms = 1;
  if (s->cfg.gossip_interval_ms == 0) s->cfg.gossip_interval_ms = 1;
  if (s->cfg.awareness_max == 0) s->cfg.awareness_max = 1;
  if (s->cfg.max_packet == 0) s->cfg.max_packet = EA_WIRE_MAX_PACKET - EA_WIRE_SEAL_RP_OVERHEAD;
  s->io = *io;
  ea_rng_seed(&s->r, seed, EA_RNG_SWIM, 0);
  s->self_id = *self;
  ea__susp_init(&s->susp);
  ea__bq_init(&s->q, qpos_of, s);
  ea__plist_init(&s->pl, ppos_of, draw_below, s);
  s->msg = malloc(sizeof *s->msg);
  int ids_rc = ea__idmap_init(&s->ids, 16);
  ea__meta_blob *b = ea__meta_intern(self_meta);
  if (!s->msg || ids_rc != 0 || !b) {
    ea__meta_release(b);
    ea_swim_free(s);
    return NULL;
  }
  s->self_idx = add_member(s, now_ms, self, EA_STATE_ALIVE, 0, b);
  ea__meta_release(b);
  if (s->self_idx == NONE) {
    ea_swim_free(s);
    return NULL;
  }
  refresh_self_view(s);
  /* Announce ourselves (memberlist does the same): once a join has taught
   * us some members, our own ALIVE spreads from us as well as from the seed,
   * which is what keeps a burst of simultaneous joins from leaving
   * stragglers for push-pull to find. */
  enqueue(s, now_ms, s->self_idx, EA_STATE_ALIVE, 0, self, 0);
  /* Stagger the loops so that a cluster started at once does not probe and
   * push-pull in lockstep. */
  s->probe_at = now_ms + ea_rng_below(&s->r, s->cfg.probe_interval_ms);
  s->gossip_at = now_ms;
  /* The first push-pull falls at a random fraction of the (cluster-size
   * scaled) interval, re-evaluated as the cluster grows, so 5000 nodes
   * started together spread their exchanges over the whole interval. */
  s->created = now_ms;
  s->pp_last = NEVER;
  s->pp_phase = ea_rng_double(&s->r);
  s->pp_at = s->cfg.push_pull_interval_ms ? pp_due(s) : NEVER;
  s->recon_at = NEVER;
  s->poke_at = NEVER;
  return s;
}

void ea_swim_free(ea_swim *s) {
  if (!s) return;
  ea__bq_close(&s->q);
  for (uint32_t i = 0; i < s->nmem; i++) ea__meta_release(s->mem[i].meta);
  free(s->mem);
  ea__idmap_close(&s->ids);
  ea__plist_close(&s->pl);
  ea__susp_close(&s->susp);
  free(s->reap);
  free(s->recon);
  free(s->msg);
  free(s->view);
  free(s);
}

static bool urgent_ask(ea_swim *s, uint64_t now_ms, const ea_node_id *id, bool gone) {
  if (s->left) return false;
  uint32_t mi = find_idx(s, id);
  if (mi == NONE || mi == s->self_idx) return false;
  uint8_t st = s->mem[mi].state;
  if (st != EA_STATE_ALIVE && !(gone && st == EA_STATE_SUSPECT)) return false;
  /* A probe of it in flight began before the report: its failure counts
   * (and, for a reset, leads to the shortcut), but its ack may have left
   * before the process died (EA_SEED=131499302663186: acked 2 ms after the
   * crash, the report dropped, suspected only by others' rounds 370 ms
   * later).  So a fresh probe is still queued, to start when it ends. */
  bool marked = false;
  if (gone && s->probe.active && id_eq(&s->probe.target, id) && !s->probe.acked && !s->probe.gone)
    marked = s->probe.gone = true;
  for (uint32_t k = 0; k < s->urgent_len; k++)
    if (id_eq(&s->urgent[k].id, id)) {
      if (!gone || s->urgent[k].gone) return marked;
      s->urgent[k].gone = true;
      return true;
    }
  for (uint32_t k = 0; k < URGENT_MAX; k++)
    if (id_eq(&s->urgent_seen[k].id, id) && s->urgent_seen[k].at &&
        now_ms < s->urgent_seen[k].at + s->cfg.probe_interval_ms)
      return marked;
  if (s->urgent_len == URGENT_MAX) return marked;
  s->urgent[s->urgent_len].id = *id;
  s->urgent[s->urgent_len].gone = gone;
  s->urgent[s->urgent_len++].at = now_ms;
  s->urgent_seen[s->urgent_seen_next].id = *id;
  s->urgent_seen[s->urgent_seen_next].at = now_ms;
  s->urgent_seen_next = (s->urgent_seen_next + 1) % URGENT_MAX;
  /* Start it now unless a probe still waits for its ack (that one ends at
   * probe_at, at most one interval away). */
  if (!s->probe.active || s->probe.acked || s->probe.dead) s->probe_at = now_ms;
  return true;
}

bool ea_swim_probe_soon(ea_swim *s, uint64_t now_ms, const ea_node_id *id) {
  return urgent_ask(s, now_ms, id, false);
}

bool ea_swim_peer_gone(ea_swim *s, uint64_t now_ms, const ea_node_id *id) {
  return urgent_ask(s, now_ms, id, true);
}

void ea_swim_join(ea_swim *s, uint64_t now_ms, const ea_addr *seeds, size_t n) {
  (void)now_ms;
  if (s->left) return;
  const ea_addr *self = member_addr(s, s->self_idx);
  s->joining = true; /* the first merge from now on starts our introduction */
  for (size_t i = 0; i < n; i++) {
    if (ea_addr_eq(&seeds[i], self)) continue;
    s->st.syncs_started++;
    if (s->io.sync) s->io.sync(s->io.ctx, &seeds[i], EA_SYNC_JOIN);
  }
}

static void left_update(const ea_swim *s, ea_update *u) {
  const member *self = &s->mem[s->self_idx];
  u->state = EA_STATE_LEFT;
  u->incarnation = self->inc;
  u->id = self->id;
  u->from = self->id;
  u->meta_inc = 0;
  u->has_meta = false;
}

void ea_swim_leave(ea_swim *s, uint64_t now_ms) {
  if (s->left) return;
  member *self = &s->mem[s->self_idx];
  ea__bq_clear(&s->q);
  set_state(s, now_ms, s->self_idx, EA_STATE_LEFT, self->inc, NULL);
  s->left = true;
  s->probe.active = false;
  s->nrelays = 0;
  memset(s->relays, 0, sizeof s->relays);
  enqueue(s, now_ms, s->self_idx, EA_STATE_LEFT, self->inc, &s->self_id, 0);
  s->gossip_at = now_ms;
  /* Tell every live member directly, once, as well.  A leave is rare and
   * must not be mistaken for a death (that would cost a generation and a
   * false alert); bounded gossip alone leaves a straggler in a few percent
   * of leaves, which would then see us vanish and declare us dead. */
  for (uint32_t i = 0; i < s->nmem; i++) {
    if (i == s->self_idx || !is_live(s->mem[i].state) || !s->mem[i].meta) continue;
    ea_msg *out = msg_begin(s, EA_MSG_GOSSIP, 0, NULL);
    left_update(s, &out->updates[out->nupdates++]);
    s->st.msgs_out++;
    s->io.send(s->io.ctx, member_addr(s, i), out);
  }
}

void ea_swim_set_meta(ea_swim *s, uint64_t now_ms, const ea_meta *meta) {
  if (s->left) return;
  ea__meta_blob *b = ea__meta_intern(meta);
  if (!b) return;
  member *self = &s->mem[s->self_idx];
  set_state(s, now_ms, s->self_idx, EA_STATE_ALIVE, self->inc + 1, b);
  ea__meta_release(b);
  self->meta_at = self->inc;
  refresh_self_view(s);
  enqueue(s, now_ms, s->self_idx, EA_STATE_ALIVE, self->inc, &s->self_id, 0);
}

void ea_swim_set_incarnation(ea_swim *s, uint64_t now_ms, uint32_t inc) {
  member *self = &s->mem[s->self_idx];
  if (s->left || inc <= self->inc) return;
  set_state(s, now_ms, s->self_idx, EA_STATE_ALIVE, inc, self->meta);
  /* A restart (the boot epoch): whoever holds an older incarnation may hold
   * the previous run's addresses. */
  self->meta_at = inc;
  refresh_self_view(s);
  enqueue(s, now_ms, s->self_idx, EA_STATE_ALIVE, inc, &s->self_id, 0);
}

uint64_t ea_swim_next_deadline(const ea_swim *s) {
  uint64_t d = NEVER;
  if (ea__bq_len(&s->q)) d = s->gossip_at;
  if (s->left) return d;
  d = umin(d, s->probe_at);
  if (s->probe.active && !s->probe.acked && !s->probe.indirect) d = umin(d, s->probe.timeout_at);
  d = umin(d, s->pp_at);
  if (ea__susp_count(&s->susp)) d = umin(d, ea__susp_first(&s->susp)->deadline);
  if (s->reap_len) d = umin(d, s->reap[s->reap_head].deadline);
  d = umin(d, s->recon_at);
  if (s->hold_len) d = umin(d, s->hold[s->hold_head].due);
  if (s->prio_len) d = umin(d, s->poke_at);
  for (uint32_t i = 0; i < RELAY_MAX && s->nrelays; i++)
    if (s->relays[i].used) d = umin(d, s->relays[i].deadline);
  return d;
}

static void gossip_round(ea_swim *s, uint64_t now) {
  uint32_t g = s->cfg.gossip_nodes, pick[64];
  if (g > 64) g = 64;
  uint32_t n = pick_random(s, g, false, NULL, pick);
  for (uint32_t i = 0; i < n && ea__bq_len(&s->q); i++) {
    ea_msg *msg = msg_begin(s, EA_MSG_GOSSIP, 0, NULL);
    q_fill(s, msg, ea_wire_msg_base_size(msg));
    if (msg->nupdates == 0) break;
    s->st.msgs_out++;
    s->io.send(s->io.ctx, member_addr(s, pick[i]), msg);
  }
  s->gossip_at = now + s->cfg.gossip_interval_ms;
}

uint64_t ea_swim_tick(ea_swim *s, uint64_t now) {
  if (!s->left) {
    /* Relayed probes whose nack is due. */
    for (uint32_t i = 0; i < RELAY_MAX && s->nrelays; i++) {
      relay *rl = &s->relays[i];
      if (!rl->used || rl->deadline > now) continue;
      ea_msg *msg = msg_begin(s, EA_MSG_NACK, rl->origin_seq, &rl->target);
      rl->used = false;
      s->nrelays--;
      msg_send(s, &rl->reply_to, msg);
    }
    hold_release(s, now);
    if (s->prio_len && now >= s->poke_at) recheck_poke(s, now);
    /* Suspicions that ran out. */
    const ea__susp *first;
    while ((first = ea__susp_first(&s->susp)) && first->deadline <= now)
      declare_dead(s, now, first->key);
    /* Reaping. */
    while (s->reap_len && s->reap[s->reap_head].deadline <= now) {
      reap_ent e = s->reap[s->reap_head];
      s->reap_head = (s->reap_head + 1) % s->reap_cap;
      s->reap_len--;
      uint32_t mi = find_idx(s, &e.id);
      if (mi == NONE || mi == s->self_idx) continue;
      member *m = &s->mem[mi];
      if ((m->state == EA_STATE_DEAD || m->state == EA_STATE_LEFT) && m->since == e.since) {
        if (m->state == EA_STATE_DEAD) recon_add(s, now, &m->id, member_addr(s, mi));
        reap_member(s, mi);
      }
    }
    if (s->probe.active && !s->probe.acked && !s->probe.indirect && now >= s->probe.timeout_at)
      probe_indirect(s, now);
    if (now >= s->probe_at) {
      probe_finish(s, now);
      probe_start(s, now);
    }
    if (now >= s->recon_at) recon_try(s, now);
    if (now >= s->pp_at && now >= (s->pp_at = pp_due(s))) {
      uint32_t pick;
      if (pick_random(s, 1, true, NULL, &pick) == 1) {
        s->st.syncs_started++;
        if (s->io.sync) s->io.sync(s->io.ctx, member_addr(s, pick), EA_SYNC_PERIODIC);
      }
      s->pp_last = now;
      s->pp_at = pp_due(s);
    }
  }
  if (ea__bq_len(&s->q) && now >= s->gossip_at) gossip_round(s, now);
  return ea_swim_next_deadline(s);
}

static void handle_ping_req(ea_swim *s, uint64_t now, const ea_addr *from, const ea_msg *m) {
  (void)from;
  if (s->nrelays >= RELAY_MAX) return;
  relay *rl = NULL;
  for (uint32_t i = 0; i < RELAY_MAX; i++)
    if (!s->relays[i].used) {
      rl = &s->relays[i];
      break;
    }
  rl->used = true;
  rl->seq = ++s->seq;
  rl->origin_seq = m->seq;
  rl->reply_to = m->reply_to;
  rl->target = m->target;
  rl->deadline = now + (uint64_t)s->cfg.probe_timeout_ms * NACK_NUM / NACK_DEN;
  s->nrelays++;
  ea_msg *out = msg_begin(s, EA_MSG_PING, rl->seq, &m->target);
  /* The requester's buddy SUSPECT rides on to the target: a live target
   * then re-asserts its ALIVE, and our relayed ack carries it back. */
  for (uint32_t i = 0; i < m->nupdates && i < EA_WIRE_MAX_UPDATES; i++)
    if (m->updates[i].state == EA_STATE_SUSPECT && id_eq(&m->updates[i].id, &m->target)) {
      out->updates[out->nupdates++] = m->updates[i];
      break;
    }
  s->st.pings_sent++;
  msg_send(s, &m->target_addr, out);
}

static void handle_ack(ea_swim *s, const ea_addr *from, const ea_msg *m) {
  if (s->probe.active && !s->probe.acked && m->seq == s->probe.seq &&
      id_eq(&m->target, &s->probe.target)) {
    s->probe.acked = true;
    s->probe.heard = ea_addr_eq(from, &s->probe.addr);
    s->st.acks_recv++;
    health_dec(s);
    if (s->probe.dead) {
      /* A member we hold DEAD answered (a healed partition, a pause longer
       * than the suspicion): tell it, so it refutes and returns. */
      uint32_t mi = find_idx(s, &m->target);
      if (mi != NONE && s->mem[mi].state == EA_STATE_DEAD) {
        ea_msg *out = msg_begin(s, EA_MSG_GOSSIP, 0, NULL);
        ea_update *u = &out->updates[out->nupdates++];
        u->state = EA_STATE_DEAD;
        u->incarnation = s->mem[mi].inc;
        u->id = s->mem[mi].id;
        u->from = s->self_id;
        u->meta_inc = s->mem[mi].meta_at;
        u->has_meta = false;
        msg_send(s, from, out);
      }
    }
    return;
  }
  for (uint32_t i = 0; i < RELAY_MAX && s->nrelays; i++) {
    relay *rl = &s->relays[i];
    if (!rl->used || rl->seq != m->seq || !id_eq(&rl->target, &m->target)) continue;
    rl->used = false;
    s->nrelays--;
    ea_msg *out = msg_begin(s, EA_MSG_ACK, rl->origin_seq, &rl->target);
    /* Pass on what the target itself piggybacked (typically its refutation
     * of the very suspicion that made the requester ask), ahead of our own
     * queue: we may know it already and not be gossiping it any more. */
    size_t used = ea_wire_msg_base_size(out);
    for (uint32_t i = 0; i < m->nupdates && i < EA_WIRE_MAX_UPDATES; i++) {
      size_t sz = ea_wire_update_size(&m->updates[i]);
      if (used + sz > s->cfg.max_packet) break;
      out->updates[out->nupdates++] = m->updates[i];
      used += sz;
    }
    msg_send(s, &rl->reply_to, out);
    return;
  }
}

void ea_swim_recv(ea_swim *s, uint64_t now_ms, const ea_addr *from, const ea_msg *m) {
  s->st.msgs_in++;
  if (s->left) {
    /* Gone: answer probes so nobody suspects us — always with our LEFT, for
     * whoever still probes us missed it — and hear nothing else. */
    if (m->type == EA_MSG_PING && id_eq(&m->target, &s->self_id)) {
      ea_msg *ack = msg_begin(s, EA_MSG_ACK, m->seq, &s->self_id);
      left_update(s, &ack->updates[ack->nupdates++]);
      s->st.msgs_out++;
      s->io.send(s->io.ctx, from, ack);
    }
    return;
  }
  uint32_t n = m->nupdates > EA_WIRE_MAX_UPDATES ? EA_WIRE_MAX_UPDATES : m->nupdates;
  s->accused = s->accused_full = s->want_meta = false;
  for (uint32_t i = 0; i < n; i++) {
    rec r;
    rec_from_update(&r, &m->updates[i]);
    apply(s, now_ms, &r, ORIG_GOSSIP);
  }
  /* This packet accused us (suspect, dead, or a stale version of either):
   * the refutation goes straight back to the one who believes the
   * accusation — gossip alone only reaches whom we consider alive, and after
   * a partition the accusers are exactly the ones we consider dead.  A ping
   * (a buddy ping) gets it first on its ack, below; anyone else in a packet
   * of its own. */
  const bool accused = s->accused, accused_full = s->accused_full;
  if (accused && m->type != EA_MSG_PING) {
    ea_msg *out = msg_begin(s, EA_MSG_GOSSIP, 0, NULL);
    self_refutation(s, accused_full, &out->updates[out->nupdates++]);
    s->st.msgs_out++; /* just the refutation: the queue has its own copy */
    s->io.send(s->io.ctx, from, out);
  }
  s->accused = false;
  /* This packet carried an ALIVE without metadata that we turned down: our
   * copy predates the member's change.  When we suspect the member, our
   * accusation names the old copy and the member answers with its
   * metadata; when we hold it ALIVE nobody ever will, and its new ALIVE
   * with the metadata was gossiped a bounded number of times: a view that
   * missed every copy and the introduction kept the old addresses for good
   * without push-pull (test_restart_with_new_meta_reaches_every_view,
   * EA_SEED=17137037285361).  The sender took that ALIVE, so its copy is
   * current: one push-pull with it, sharing the rate limit below. */
  if (s->want_meta && now_ms >= s->contact_at) {
    s->contact_at = now_ms + (uint64_t)s->cfg.probe_interval_ms * scale(s);
    s->st.syncs_started++;
    if (s->io.sync) s->io.sync(s->io.ctx, from, EA_SYNC_PERIODIC);
  }
  s->want_meta = false;
  /* Anti-entropy on contact: a member that talks to us although we do not
   * know it (we missed its ALIVE in a burst of joins, or reaped it while a
   * partition kept it away) is worth one push-pull, at most one per probe
   * interval.  Updates were applied first, so its own ALIVE riding on this
   * packet — the usual case — costs nothing.  Only gossip and ping-reqs are
   * checked: a member with news gossips (so a straggler is found within a
   * gossip round), while checking every ping would cost a table lookup on
   * the hottest path — 40% of a 5000-node simulation's time. */
  if ((m->type == EA_MSG_GOSSIP || m->type == EA_MSG_PING_REQ) && now_ms >= s->contact_at &&
      !id_eq(&m->src, &s->self_id) && find_idx(s, &m->src) == NONE) {
    s->contact_at = now_ms + (uint64_t)s->cfg.probe_interval_ms * scale(s);
    s->st.syncs_started++;
    if (s->io.sync) s->io.sync(s->io.ctx, from, EA_SYNC_PERIODIC);
  }
  switch (m->type) {
    case EA_MSG_PING:
      /* A ping for another id (a stale address) must not be acked for it. */
      if (id_eq(&m->target, &s->self_id)) {
        ea_msg *ack = msg_begin(s, EA_MSG_ACK, m->seq, &s->self_id);
        /* Not left to the queue: behind a backlog our ALIVE, transmitted
         * often already, loses its place to fresher news, and a prober
         * re-checking a suspicion of us got ack after ack without it until
         * its timer declared us dead (bench/gossip --trace, N = 5000, 20%
         * loss: both false DEADs of EA_SEED=7's ten seconds). */
        if (accused) self_refutation(s, accused_full, &ack->updates[ack->nupdates++]);
        msg_send(s, from, ack);
      }
      break;
    case EA_MSG_ACK:
      handle_ack(s, from, m);
      break;
    case EA_MSG_PING_REQ:
      handle_ping_req(s, now_ms, from, m);
      break;
    case EA_MSG_NACK:
      if (s->probe.active && m->seq == s->probe.seq && id_eq(&m->target, &s->probe.target)) {
        s->probe.nacks++;
        s->st.nacks_recv++;
      }
      break;
    default:
      break;
  }
}

int ea_swim_export(const ea_swim *s, ea_update **ups, size_t *n) {
  *ups = NULL;
  *n = 0;
  ea_update *a = malloc((size_t)(s->nmem ? s->nmem : 1) * sizeof *a);
  if (!a) return -ENOMEM;
  size_t k = 0;
  for (uint32_t i = 0; i < s->nmem; i++) {
    const member *m = &s->mem[i];
    if (!m->meta) continue;
    ea_update *u = &a[k++];
    u->state = m->state;
    u->incarnation = m->inc;
    u->id = m->id;
    u->from = (m->susp != NONE) ? s->susp.sp[m->susp].from[0] : s->self_id;
    u->has_meta = true;
    u->meta_inc = 0;
    u->meta = m->meta->m;
  }
  *ups = a;
  *n = k;
  return 0;
}

static bool knows_only_self(const ea_swim *s) {
  return s->nmem == 1;
}

void ea_swim_merge(ea_swim *s, uint64_t now_ms, const ea_update *ups, size_t n) {
  if (s->left) return;
  int origin = knows_only_self(s) ? ORIG_MERGE_FRESH : ORIG_MERGE;
  s->st.syncs_merged++;
  if (origin == ORIG_MERGE_FRESH) reserve(s, n > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)n);
  for (size_t i = 0; i < n; i++) {
    rec r;
    rec_from_update(&r, &ups[i]);
    apply(s, now_ms, &r, origin);
  }
  if (origin == ORIG_MERGE_FRESH || s->joining) intro_start(s);
}

/* Internal fast path for the simulator (declared in sim.h): merge another
 * in-process core's state without copying metadata — the same rules as
 * ea_swim_export() followed by ea_swim_merge(). */
void ea__swim_merge_core(ea_swim *dst, uint64_t now_ms, const ea_swim *src) {
  if (dst->left) return;
  int origin = knows_only_self(dst) ? ORIG_MERGE_FRESH : ORIG_MERGE;
  dst->st.syncs_merged++;
  /* Identical (id, incarnation, state) sets: every record would be a no-op.
   * The common case of anti-entropy in a healthy cluster, and the reason a
   * 5000-node simulation can afford push-pull at all. */
  if (dst->digest == src->digest) return;
  if (origin == ORIG_MERGE_FRESH) reserve(dst, src->nmem);
  for (uint32_t i = 0; i < src->nmem; i++) {
    const member *m = &src->mem[i];
    if (!m->meta) continue;
    rec r = {.state = m->state, .inc = m->inc, .id = m->id, .meta = &m->meta->m, .blob = m->meta};
    r.from = (m->susp != NONE) ? src->susp.sp[m->susp].from[0] : src->self_id;
    apply(dst, now_ms, &r, origin);
  }
  if (origin == ORIG_MERGE_FRESH || dst->joining) intro_start(dst);
}

/* Encoded bytes of ea_swim_export()'s records, for the simulator's traffic
 * accounting in its fast mode. */
size_t ea__swim_export_bytes(const ea_swim *s) {
  return (size_t)s->xbytes;
}

size_t ea_swim_members(const ea_swim *cs, const ea_member **out) {
  ea_swim *s = (ea_swim *)cs; /* the view is a cache; the table is untouched */
  if (s->view_cap < s->nmem) {
    ea_member *nv = realloc(s->view, (size_t)s->nmem * sizeof *nv);
    if (!nv) {
      *out = NULL;
      return 0;
    }
    s->view = nv;
    s->view_cap = s->nmem;
  }
  for (uint32_t i = 0; i < s->nmem; i++) materialize(s, i, &s->view[i]);
  *out = s->view;
  return s->nmem;
}

const ea_member *ea_swim_find(const ea_swim *cs, const ea_node_id *id) {
  ea_swim *s = (ea_swim *)cs; /* ring of materialized copies: a cache */
  uint32_t mi = find_idx(s, id);
  if (mi == NONE) return NULL;
  if (mi == s->self_idx) return &s->self_view;
  ea_member *slot = &s->find_ring[s->find_next++ % FIND_SLOTS];
  materialize(s, mi, slot);
  return slot;
}

/* The simulator's bootstrap stands for a cluster that converged long ago:
 * no introductions are due. */
void ea__swim_settle(ea_swim *s) {
  s->intro = s->joining = false;
}

/* The simulator installs its observer after creating the cores, and skips
 * the per-change materialization (8 GB of copying for a 5000-node
 * bootstrap) while nobody observes. */
void ea__swim_set_on_change(ea_swim *s, void (*fn)(void *ctx, const ea_member *m, uint8_t old)) {
  s->io.on_change = fn;
}

/* State of a member without materializing it (simulator fast path). */
int ea__swim_state_of(const ea_swim *s, const ea_node_id *id, uint32_t *inc) {
  uint32_t mi = find_idx(s, id);
  if (mi == NONE) return -1;
  if (inc) *inc = s->mem[mi].inc;
  return s->mem[mi].state;
}

const ea_member *ea_swim_self(const ea_swim *s) {
  return &s->self_view;
}

size_t ea_swim_alive_count(const ea_swim *s) {
  return s->nalive;
}

void ea_swim_stats_get(const ea_swim *s, ea_swim_stats *out) {
  *out = s->st;
  out->health = s->health;
}

void ea_swim_suspicion_bounds(const ea_swim *s, uint64_t *min_ms, uint64_t *max_ms) {
  ea__susp_bounds(&s->cfg, s->nlive, min_ms, max_ms);
}

const char *ea_member_state_str(uint8_t state) {
  switch (state) {
    case EA_STATE_ALIVE:
      return "alive";
    case EA_STATE_SUSPECT:
      return "suspect";
    case EA_STATE_DEAD:
      return "dead";
    case EA_STATE_LEFT:
      return "left";
    default:
      return "unknown";
  }
}
