/* hasher.c — the shard hash: one XXH3-64 of a whole shard and one per
 * block, computed in a single pass over pieces of any size.
 *
 * The writer hashes what it stages for io_uring, verify hashes what it
 * reads back, and both must cut the blocks at the same offsets, so the
 * block size is a function of the shard's length alone
 * (ea_ckpt_block_size) and the hasher does the cutting: callers feed bytes
 * in whatever pieces their I/O produced. */
#include "ckpt_int.h"

#include "ea_ckpt.h"

#include <errno.h>
#include <string.h>
#include <xxh_x86dispatch.h>

uint64_t ea_ckpt_block_size(uint64_t length) {
  uint64_t want = (length + EA_CKPT_MAX_BLOCKS - 1) / EA_CKPT_MAX_BLOCKS;
  uint64_t bs = EA_CKPT_MIN_BLOCK;
  while (bs < want) bs <<= 1;
  return bs;
}

int ea__ck_hasher_init(ea__ck_hasher *h, uint64_t length, uint64_t *blocks) {
  memset(h, 0, sizeof *h);
  h->whole = XXH3_createState();
  h->block = XXH3_createState();
  if (!h->whole || !h->block) {
    ea__ck_hasher_free(h);
    return -ENOMEM;
  }
  XXH3_64bits_reset(h->whole);
  XXH3_64bits_reset(h->block);
  h->length = length;
  h->block_size = ea_ckpt_block_size(length);
  h->blocks = blocks;
  return 0;
}

/* Pieces of 64 KiB, so the second hash (the block's) reads the bytes from
 * L2, where the first one just left them (every x86 core since 2008 has at
 * least 256 KiB of L2). */
#define HASH_PIECE (64u << 10)

void ea__ck_hasher_feed(ea__ck_hasher *h, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n > 0) {
    uint64_t room = h->block_size - h->pos % h->block_size;
    size_t k = n < HASH_PIECE ? n : HASH_PIECE;
    if (k > room) k = (size_t)room;
    XXH3_64bits_update_dispatch(h->whole, b, k);
    XXH3_64bits_update_dispatch(h->block, b, k);
    h->pos += k;
    b += k;
    n -= k;
    if (h->pos % h->block_size == 0) {
      if (h->n_blocks < EA_CKPT_MAX_BLOCKS) h->blocks[h->n_blocks++] = XXH3_64bits_digest(h->block);
      XXH3_64bits_reset(h->block);
    }
  }
}

uint64_t ea__ck_hasher_final(ea__ck_hasher *h, uint32_t *n_blocks) {
  if (h->pos % h->block_size != 0 && h->n_blocks < EA_CKPT_MAX_BLOCKS)
    h->blocks[h->n_blocks++] = XXH3_64bits_digest(h->block);
  if (n_blocks) *n_blocks = h->n_blocks;
  return XXH3_64bits_digest(h->whole);
}

void ea__ck_hasher_free(ea__ck_hasher *h) {
  if (h->whole) XXH3_freeState(h->whole);
  if (h->block) XXH3_freeState(h->block);
  h->whole = h->block = NULL;
}
