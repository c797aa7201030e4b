/* The CPU hot loops of the LHC codec (dynamix/comm/): the structural peel, the replay, the sketch's
 * hash positions and the bitmap's set positions, each the same result as its tensor version in
 * dynamix/comm/peel.py, hashing.py and bitmap.py.
 *
 * The structural peel (`schedule`) in one pass, with the vectorised version's rounds, items, order and
 * counters: round r takes the counters that became pure in round r-1 (round 0: every counter
 * holding one item), reads each one's item from the id sum, keeps it where that counter is the first of the item's counters that is
 * pure at the start of the round, then removes the kept items and collects the counters they left
 * pure, in order, each once. tests/test_comm.py checks each function against its tensor version.
 *
 * Built on first use by dynamix/comm/native.py (cc -O2 -shared); no Python or torch headers.
 */
#include <stdint.h>
#include <stdlib.h>

/* pos: int64 [m, 3] counter positions; out_items / out_k: [m] the peeled items in schedule order and
 * the hash of their pure counter; out_round_len: [m + 1] items per round.
 * Returns the number of rounds, or -1 when memory runs out. */
int64_t dynamix_peel_schedule(const int64_t *pos, int64_t m, int64_t n_counters, int64_t *out_items,
                              int64_t *out_k, int64_t *out_round_len) {
    int64_t *count = calloc((size_t)n_counters, sizeof(int64_t));
    int64_t *idsum = calloc((size_t)n_counters, sizeof(int64_t));
    uint8_t *seen = calloc((size_t)n_counters, 1);
    int64_t *front = malloc(sizeof(int64_t) * (size_t)(n_counters > 0 ? n_counters : 1));
    int64_t *next = malloc(sizeof(int64_t) * (size_t)(3 * m > 0 ? 3 * m : 1));
    if (!count || !idsum || !seen || !front || !next) {
        free(count); free(idsum); free(seen); free(front); free(next);
        return -1;
    }
    for (int64_t i = 0; i < m; i++)
        for (int j = 0; j < 3; j++) {
            count[pos[3 * i + j]] += 1;
            idsum[pos[3 * i + j]] += i;
        }
    int64_t n_front = 0;
    for (int64_t c = 0; c < n_counters; c++)
        if (count[c] == 1) front[n_front++] = c;
    int64_t rounds = 0, done = 0;
    while (n_front > 0) {
        /* reads against the counts at the start of the round */
        int64_t start = done;
        for (int64_t f = 0; f < n_front; f++) {
            int64_t it = idsum[front[f]];
            const int64_t *pc = pos + 3 * it;
            int k = count[pc[0]] == 1 ? 0 : count[pc[1]] == 1 ? 1 : count[pc[2]] == 1 ? 2 : 0;
            if (pc[k] != front[f]) continue;
            out_items[done] = it;
            out_k[done] = k;
            done++;
        }
        for (int64_t d = start; d < done; d++)
            for (int j = 0; j < 3; j++) {
                int64_t c = pos[3 * out_items[d] + j];
                count[c] -= 1;
                idsum[c] -= out_items[d];
            }
        int64_t n_next = 0;
        for (int64_t d = start; d < done; d++)
            for (int j = 0; j < 3; j++) {
                int64_t c = pos[3 * out_items[d] + j];
                if (count[c] == 1 && !seen[c]) {
                    seen[c] = 1;
                    next[n_next++] = c;
                }
            }
        for (int64_t f = 0; f < n_next; f++) {
            seen[next[f]] = 0;
            front[f] = next[f];
        }
        out_round_len[rounds++] = done - start;
        n_front = n_next;
    }
    free(count); free(idsum); free(seen); free(front); free(next);
    return rounds;
}

/* The replay of a schedule (dynamix/comm/peel.py `replay`) in schedule order: each item's value is
 * read from its pure counter, then subtracted from its three counters. Within a round no item's pure
 * counter is touched by another item of the round, so this is the round-wise replay, bit for bit
 * (torch's index_add_ on the CPU adds in index order, as here). */
#define REPLAY(NAME, T)                                                                             \
    void NAME(const int64_t *items, const int64_t *ks, int64_t n, const int64_t *pos,             \
              const int64_t *sign, T *sketch, T *values) {                                          \
        for (int64_t d = 0; d < n; d++) {                                                           \
            int64_t it = items[d];                                                                  \
            const int64_t *pc = pos + 3 * it, *sc = sign + 3 * it;                                  \
            T v = sketch[pc[ks[d]]] * (T)sc[ks[d]];                                                 \
            values[it] = v;                                                                         \
            for (int j = 0; j < 3; j++) sketch[pc[j]] += (T)sc[j] * -v;                             \
        }                                                                                           \
    }
REPLAY(dynamix_peel_replay_f32, float)
REPLAY(dynamix_peel_replay_f64, double)

/* The set element indices of a bitmap of n elements (bit j of byte i is element 8i + j), ascending,
 * into out; with out NULL only their number. Returns their number. */
int64_t dynamix_bitmap_nonzero(const uint8_t *bits, int64_t n_bytes, int64_t n, int64_t *out) {
    int64_t w = 0;
    for (int64_t i = 0; i < n_bytes; i++) {
        uint8_t b = bits[i];
        while (b) {
            int j = __builtin_ctz(b);
            int64_t e = 8 * i + j;
            if (e < n) {
                if (out) out[w] = e;
                w++;
            }
            b &= (uint8_t)(b - 1);
        }
    }
    return w;
}

/* The count sketch's positions and signs of the items (element indices, each in bucket item / size)
 * from the hash table (dynamix/comm/hashing.py `bucket_positions`): per bucket its first counter,
 * its number of counters C = 3q and the sketch attempt whose table rows it reads. */
void dynamix_hash_positions(const int64_t *table, const int64_t *items, int64_t m, int64_t size,
                            const int64_t *offsets, const int64_t *sizes, const int64_t *attempts,
                            int64_t *pos, int64_t *sign) {
    const int64_t mask = (1 << 20) - 1;
    for (int64_t i = 0; i < m; i++) {
        int64_t b = items[i] / size, local = items[i] % size, q = sizes[b] / 3;
        int64_t h = table[local + size * attempts[b]];
        for (int k = 0; k < 3; k++) {
            pos[3 * i + k] = offsets[b] + k * q + ((((h >> (20 * k)) & mask) * q) >> 20);
            sign[3 * i + k] = 1 - 2 * ((h >> (60 + k)) & 1);
        }
    }
}
