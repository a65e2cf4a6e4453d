/* Check suite for the process-wide metadata intern table
 * (membership/swim_meta.c).
 *
 * Promises: equal metadata interns to one blob (dedupe), and "equal" is
 * canonical — bytes after a string's NUL and unused address bytes do not
 * count, every field that reaches the wire does; each reference is counted
 * and the blob is freed with the last (the live count returns to where it
 * was), and a blob whose count reached zero is never handed out again;
 * wire_extra is exactly what the metadata adds to an update's encoded size,
 * whatever the update's state and incarnation (swim.c budgets packets and
 * push-pull bytes with it); growth past the first table keeps every blob
 * findable; and all of it holds with several threads interning and
 * releasing the same metadata at once.  The table is process-wide and Check
 * forks per case, so cases compare counts against where they started.
 */
#include "swim_meta.h"
#include "swim_unit.h"

#include "ea_membership.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>

static ea_meta meta_n(uint32_t i) {
  ea_meta m;
  memset(&m, 0, sizeof m);
  snprintf(m.name, sizeof m.name, "node-%u", i);
  m.gossip.family = 4;
  m.gossip.ip[0] = 10;
  m.gossip.ip[3] = (uint8_t)i;
  m.gossip.port = (uint16_t)(7946 + i);
  m.control = m.gossip;
  m.control.port = (uint16_t)(7947 + i);
  snprintf(m.role, sizeof m.role, "worker");
  snprintf(m.tags, sizeof m.tags, "zone=a,rack=%u", i % 7);
  snprintf(m.version, sizeof m.version, "0.1.0");
  m.last_gen = i;
  return m;
}

static uint32_t refs(ea__meta_blob *b) {
  return atomic_load(&b->refs);
}

START_TEST(test_equal_meta_is_one_blob) {
  size_t base = ea__meta_count();
  ea_meta m = meta_n(1), copy = meta_n(1);
  ea__meta_blob *a = ea__meta_intern(&m), *b = ea__meta_intern(&copy);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_eq(a, b);
  ck_assert_uint_eq(refs(a), 2);
  ck_assert_uint_eq(ea__meta_count(), base + 1);
  ck_assert(ea__meta_same(a, &copy));
  ck_assert(!ea__meta_same(NULL, &copy));
  ea__meta_release(a);
  ea__meta_release(b);
  ck_assert_uint_eq(ea__meta_count(), base);
}
END_TEST

START_TEST(test_canonical_form) {
  size_t base = ea__meta_count();
  ea_meta clean = meta_n(2), dirty = meta_n(2);
  /* Garbage after each string's NUL, and in the unused bytes of IPv4
   * addresses: none of it is on the wire. */
  memset(dirty.name + strlen(dirty.name) + 1, 'x', 10);
  memset(dirty.tags + strlen(dirty.tags) + 1, 0x7f, 20);
  memset(dirty.version + strlen(dirty.version) + 1, '!', 5);
  memset(dirty.gossip.ip + 4, 0xee, 12);
  memset(dirty.control.ip + 4, 0x11, 12);
  ea__meta_blob *a = ea__meta_intern(&clean), *b = ea__meta_intern(&dirty);
  ck_assert_ptr_eq(a, b);
  ck_assert(ea__meta_same(a, &dirty));
  /* The blob holds the canonical bytes. */
  ck_assert_int_eq(memcmp(&a->m, &clean, sizeof clean), 0);
  /* A string filling its whole field is cut to fit, NUL included. */
  ea_meta full = meta_n(2);
  memset(full.role, 'r', sizeof full.role);
  ea__meta_blob *c = ea__meta_intern(&full);
  ck_assert_uint_eq(strlen(c->m.role), sizeof full.role - 1);
  ea__meta_release(a);
  ea__meta_release(b);
  ea__meta_release(c);
  ck_assert_uint_eq(ea__meta_count(), base);
}
END_TEST

START_TEST(test_every_wire_field_counts) {
  size_t base = ea__meta_count();
  ea_meta m = meta_n(3);
  ea__meta_blob *ref = ea__meta_intern(&m);
  ea_meta v[8];
  for (int i = 0; i < 8; i++) v[i] = m;
  v[0].name[0] = 'N';
  v[1].gossip.port++;
  v[2].control.ip[3]++;
  v[3].role[0] = 'R';
  v[4].tags[0] = 'T';
  v[5].version[0] = '9';
  v[6].last_gen++;
  v[7].gossip.family = 6; /* now all 16 bytes count */
  ea__meta_blob *b[8];
  for (int i = 0; i < 8; i++) {
    b[i] = ea__meta_intern(&v[i]);
    ck_assert_ptr_ne(b[i], ref);
    ck_assert(!ea__meta_same(ref, &v[i]));
    for (int j = 0; j < i; j++) ck_assert_ptr_ne(b[i], b[j]);
  }
  ck_assert_uint_eq(ea__meta_count(), base + 9);
  /* IPv6: a byte past the fourth now differs. */
  ea_meta v6 = v[7];
  v6.gossip.ip[15] ^= 1;
  ea__meta_blob *b6 = ea__meta_intern(&v6);
  ck_assert_ptr_ne(b6, b[7]);
  ea__meta_release(b6);
  for (int i = 0; i < 8; i++) ea__meta_release(b[i]);
  ea__meta_release(ref);
  ck_assert_uint_eq(ea__meta_count(), base);
}
END_TEST

START_TEST(test_refcount_lifetime) {
  size_t base = ea__meta_count();
  ea_meta m = meta_n(4);
  ea__meta_blob *a = ea__meta_intern(&m);
  ck_assert_uint_eq(refs(a), 1);
  ck_assert_ptr_eq(ea__meta_retain(a), a);
  ck_assert_ptr_eq(ea__meta_retain(a), a);
  ck_assert_uint_eq(refs(a), 3);
  ea__meta_release(a);
  ea__meta_release(a);
  ck_assert_uint_eq(refs(a), 1);
  ck_assert_uint_eq(ea__meta_count(), base + 1); /* still held */
  ea__meta_release(a);
  ck_assert_uint_eq(ea__meta_count(), base); /* freed with the last */
  ea__meta_release(NULL);                    /* a no-op */
  /* Interning again makes a fresh blob with one reference. */
  ea__meta_blob *b = ea__meta_intern(&m);
  ck_assert_uint_eq(refs(b), 1);
  ck_assert_uint_eq(ea__meta_count(), base + 1);
  ea__meta_release(b);
  ck_assert_uint_eq(ea__meta_count(), base);
}
END_TEST

START_TEST(test_wire_extra_is_exact) {
  for (uint32_t i = 0; i < 200; i++) {
    ea_meta m = meta_n(i);
    if (i % 3 == 0) m.tags[0] = 0;
    if (i % 5 == 0) {
      m.gossip.family = 6;
      for (int k = 0; k < 16; k++) m.gossip.ip[k] = (uint8_t)rnd();
    }
    static const char long_name[] = "a-long-member-name-that-varies-the-encoded-size-of-meta";
    snprintf(m.name, sizeof m.name, "%.*s", (int)(rnd() % sizeof long_name), long_name);
    ea__meta_blob *b = ea__meta_intern(&m);
    ea_update u;
    memset(&u, 0, sizeof u);
    u.state = (uint8_t)(rnd() % 4);
    u.incarnation = (uint32_t)(rnd() >> (rnd() % 64)); /* small and large */
    u.id = test_id(i);
    u.from = test_id(i + 1);
    size_t without = ea_wire_update_size(&u);
    u.has_meta = true;
    u.meta = m;
    ck_assert_uint_eq(ea_wire_update_size(&u), without + b->wire_extra);
    ea__meta_release(b);
  }
}
END_TEST

START_TEST(test_growth_keeps_every_blob) {
  size_t base = ea__meta_count();
  enum { M = 5000 }; /* past the first table of 1024 chains, twice over */
  static ea__meta_blob *held[M];
  for (uint32_t i = 0; i < M; i++) {
    ea_meta m = meta_n(i);
    m.last_gen = 1000000 + i;
    held[i] = ea__meta_intern(&m);
    ck_assert_ptr_nonnull(held[i]);
  }
  ck_assert_uint_eq(ea__meta_count(), base + M);
  for (uint32_t i = 0; i < M; i++) {
    ea_meta m = meta_n(i);
    m.last_gen = 1000000 + i;
    ea__meta_blob *again = ea__meta_intern(&m);
    ck_assert_ptr_eq(again, held[i]);
    ea__meta_release(again);
  }
  for (uint32_t i = 0; i < M; i++) ea__meta_release(held[i]);
  ck_assert_uint_eq(ea__meta_count(), base);
}
END_TEST

/* Threads intern and release a few metas as fast as they can, so counts
 * keep crossing zero while another thread looks the same blob up. */
enum { THREADS = 4, ROUNDS = 20000, KINDS = 3 };
static atomic_int bad;

static void *churn(void *arg) {
  uint64_t x = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ULL;
  for (int r = 0; r < ROUNDS; r++) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    uint32_t k = (uint32_t)(x >> 33) % KINDS;
    ea_meta m = meta_n(100 + k);
    ea__meta_blob *b = ea__meta_intern(&m);
    if (!b) {
      atomic_fetch_add(&bad, 1);
      continue;
    }
    if (memcmp(&b->m, &m, sizeof m) != 0 || atomic_load(&b->refs) == 0) atomic_fetch_add(&bad, 1);
    if ((x >> 40) & 1) ea__meta_release(ea__meta_retain(b));
    ea__meta_release(b);
  }
  return NULL;
}

START_TEST(test_threads_intern_and_release) {
  size_t base = ea__meta_count();
  pthread_t t[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++)
    ck_assert_int_eq(pthread_create(&t[i], NULL, churn, (void *)(i + 1)), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  ck_assert_int_eq(atomic_load(&bad), 0);
  ck_assert_uint_eq(ea__meta_count(), base);
}
END_TEST

int main(void) {
  Suite *s = suite_create("swim_meta");
  TCase *t = tcase_create("intern");
  tcase_add_checked_fixture(t, seed_rng, NULL);
  tcase_add_test(t, test_equal_meta_is_one_blob);
  tcase_add_test(t, test_canonical_form);
  tcase_add_test(t, test_every_wire_field_counts);
  tcase_add_test(t, test_refcount_lifetime);
  tcase_add_test(t, test_wire_extra_is_exact);
  tcase_add_test(t, test_growth_keeps_every_blob);
  tcase_add_test(t, test_threads_intern_and_release);
  suite_add_tcase(s, t);
  return run_suite(s, "swim_meta");
}
