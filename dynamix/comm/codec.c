/* The CPU hot loops of the LHC codec (dynamix/comm/): the gradient's bitmap, the bitmap's set
 * positions, the plan (sizes, hash positions, structural peel), the encoder and the replay, each the
 * same result as its tensor version in dynamix/comm/bitmap.py, lhc.py, hashing.py and peel.py
 * (tests/test_comm.py checks each against it).
 *
 * The structural peel has the tensor version's (peel.py `schedule`) rounds, items, order and counters:
 * round r takes the counters that became pure in round r-1 (round 0: every counter holding one item),
 * reads each one's item from the id sum, keeps it where that counter is the first of the item's
 * counters that is pure at the start of the round, then removes the kept items and collects the
 * counters they left pure, in order, each once.
 *
 * Built on first use by dynamix/comm/native.py (cc -O2 -shared); no Python or torch headers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* One counter of the structural peel: its unpeeled items' count and id sum, and whether it is queued
 * for the next round; together, so each visit touches one cache line (the counters of a 4 M-element
 * gradient at 1 % density span ~1 MB, beyond a core's L2 as three separate arrays). */
typedef struct {
    int64_t idsum;
    int32_t count;
    int32_t seen;
} counter_t;

/* The rounds of one segment: items [i0, i1) whose counters all lie in [c0, c1), disjoint from every
 * other segment's. Appends its items and pure-counter hashes in schedule order to items / ks and its
 * items per round to round_len; returns its number of rounds. */
static int64_t peel_segment(const int64_t *pos, int64_t i0, int64_t i1, int64_t c0, int64_t c1, counter_t *ctr,
                            int64_t *front, int64_t *next, int64_t *items, int64_t *ks, int64_t *round_len) {
    for (int64_t i = i0; i < i1; i++)
        for (int j = 0; j < 3; j++) {
            counter_t *c = ctr + pos[3 * i + j];
            c->count += 1;
            c->idsum += i;
        }
    int64_t n_front = 0;
    for (int64_t c = c0; c < c1; c++)
        if (ctr[c].count == 1) front[n_front++] = c;
    int64_t rounds = 0, done = 0;
    while (n_front > 0) {
        /* reads against the counts at the start of the round */
        int64_t start = done;
        for (int64_t f = 0; f < n_front; f++) {
            int64_t it = ctr[front[f]].idsum;
            const int64_t *pc = pos + 3 * it;
            int k = ctr[pc[0]].count == 1 ? 0 : ctr[pc[1]].count == 1 ? 1 : ctr[pc[2]].count == 1 ? 2 : 0;
            if (pc[k] != front[f]) continue;
            items[done] = it;
            ks[done] = k;
            done++;
        }
        for (int64_t d = start; d < done; d++)
            for (int j = 0; j < 3; j++) {
                counter_t *c = ctr + pos[3 * items[d] + j];
                c->count -= 1;
                c->idsum -= items[d];
            }
        int64_t n_next = 0;
        for (int64_t d = start; d < done; d++)
            for (int j = 0; j < 3; j++) {
                int64_t c = pos[3 * items[d] + j];
                if (ctr[c].count == 1 && !ctr[c].seen) {
                    ctr[c].seen = 1;
                    next[n_next++] = c;
                }
            }
        for (int64_t f = 0; f < n_next; f++) {
            ctr[next[f]].seen = 0;
            front[f] = next[f];
        }
        round_len[rounds++] = done - start;
        n_front = n_next;
    }
    return rounds;
}

/* Interleaves the segments' rounds: n_seg segments, segment s with seg_rounds[s] rounds whose lengths
 * follow each other in lens (segment after segment) and whose items and hashes start at items / ks +
 * cursor[s] (consumed). Round r of the result is every segment's round r, segment after segment: the
 * order one pass over all counters gives, as each round's front is ordered by counter and so by
 * segment. */
static void merge_rounds(const int64_t *items, const int64_t *ks, const int64_t *lens, const int64_t *seg_rounds,
                         int64_t *cursor, int64_t n_seg, int64_t rounds, int64_t *order, int64_t *order_k,
                         int64_t *round_len) {
    int64_t w = 0;
    for (int64_t r = 0; r < rounds; r++) {
        int64_t start = w, at = 0;
        for (int64_t s = 0; s < n_seg; s++) {
            if (r < seg_rounds[s]) {
                int64_t len = lens[at + r];
                memcpy(order + w, items + cursor[s], sizeof(int64_t) * (size_t)len);
                memcpy(order_k + w, ks + cursor[s], sizeof(int64_t) * (size_t)len);
                cursor[s] += len;
                w += len;
            }
            at += seg_rounds[s];
        }
        round_len[r] = w - start;
    }
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

/* Set bits of a word, without a call into libgcc (no -mpopcnt here). */
static inline int64_t pop64(uint64_t x) {
    x = x - ((x >> 1) & UINT64_C(0x5555555555555555));
    x = (x & UINT64_C(0x3333333333333333)) + ((x >> 2) & UINT64_C(0x3333333333333333));
    x = (x + (x >> 4)) & UINT64_C(0x0f0f0f0f0f0f0f0f);
    return (int64_t)((x * UINT64_C(0x0101010101010101)) >> 56);
}

/* The set element indices of a bitmap of n elements (bit j of byte i is element 8i + j), ascending,
 * into out; with out NULL only their number. Returns their number. Eight bytes at a time: a
 * little-endian word's bit b is element 64w + b, so ctz walks the set bits in order. */
int64_t dynamix_bitmap_nonzero(const uint8_t *bits, int64_t n_bytes, int64_t n, int64_t *out) {
    int64_t w = 0, words = n_bytes / 8;
    for (int64_t i = 0; i <= words; i++) {
        uint64_t b = 0;
        memcpy(&b, bits + 8 * i, (size_t)(i < words ? 8 : n_bytes - 8 * words));
        if (64 * (i + 1) > n && n - 64 * i < 64)  /* the last word: drop bits past n */
            b &= n > 64 * i ? (UINT64_C(1) << (n - 64 * i)) - 1 : 0;
        if (!out) {
            w += pop64(b);
            continue;
        }
        while (b) {
            out[w++] = 64 * i + __builtin_ctzll(b);
            b &= b - 1;
        }
    }
    return w;
}

/* The bitmap of x != 0 (NaN counts, -0.0 does not) into out [ceil(n/8)], bit j of byte i for element
 * 8i + j: 64 elements to a little-endian word, four (two) compared at once where SSE2 exists. */
#define PACK(NAME, T, WORDFN)                                                                       \
    void NAME(const T *x, int64_t n, uint8_t *out) {                                                \
        int64_t words = n / 64;                                                                     \
        for (int64_t i = 0; i < words; i++) {                                                       \
            uint64_t b = WORDFN(x + 64 * i);                                                        \
            memcpy(out + 8 * i, &b, 8);                                                             \
        }                                                                                           \
        int64_t tail = n - 64 * words;                                                              \
        if (tail) {                                                                                 \
            uint64_t b = 0;                                                                         \
            for (int64_t j = 0; j < tail; j++) b |= (uint64_t)(x[64 * words + j] != 0) << j;        \
            memcpy(out + 8 * words, &b, (size_t)((tail + 7) / 8));                                  \
        }                                                                                           \
    }
#if defined(__SSE2__)
#define WORD(NAME, T, VEC, ZERO, LOAD, CMPNEQ, MOVEMASK, LANES)                                     \
    static inline uint64_t NAME(const T *x) {                                                       \
        uint64_t b = 0;                                                                             \
        VEC z = ZERO();                                                                             \
        for (int j = 0; j < 64; j += LANES) b |= (uint64_t)MOVEMASK(CMPNEQ(LOAD(x + j), z)) << j;   \
        return b;                                                                                   \
    }
#else
#define WORD(NAME, T, ...)                                                                          \
    static inline uint64_t NAME(const T *x) {                                                       \
        uint64_t b = 0;                                                                             \
        for (int j = 0; j < 64; j++) b |= (uint64_t)(x[j] != 0) << j;                              \
        return b;                                                                                   \
    }
#endif
WORD(word_f32, float, __m128, _mm_setzero_ps, _mm_loadu_ps, _mm_cmpneq_ps, _mm_movemask_ps, 4)
WORD(word_f64, double, __m128d, _mm_setzero_pd, _mm_loadu_pd, _mm_cmpneq_pd, _mm_movemask_pd, 2)
PACK(dynamix_pack_nonzero_f32, float, word_f32)
PACK(dynamix_pack_nonzero_f64, double, word_f64)

/* The count sketch of w * g at the plan's items, added into sketch in item order (torch's index_add_
 * order): item d adds sign * (w * g[items[d]]) to its three counters. Zeros are skipped: adding
 * +-0.0 to a counter that starts at +0.0 changes no bit. */
#define ENCODE(NAME, T)                                                                             \
    void NAME(const int64_t *items, int64_t m, const int64_t *pos, const int64_t *sign, const T *g, \
              double w, T *sketch) {                                                                \
        for (int64_t d = 0; d < m; d++) {                                                           \
            T v = g[items[d]] * (T)w;                                                               \
            if (v == 0) continue;                                                                   \
            for (int j = 0; j < 3; j++) sketch[pos[3 * d + j]] += (T)sign[3 * d + j] * v;          \
        }                                                                                           \
    }
ENCODE(dynamix_sketch_encode_f32, float)
ENCODE(dynamix_sketch_encode_f64, double)

/* One item's three counters and signs: local position `local` in its bucket, read from row `attempt`
 * of the hash table (`size` entries a row), in a sketch of 3q counters starting at `offset`. */
static inline void hash_item(const int64_t *table, int64_t local, int64_t size, int64_t attempt, int64_t offset,
                             int64_t q, int64_t *pos, int64_t *sign) {
    const int64_t mask = (1 << 20) - 1;
    int64_t h = table[local + size * attempt];
    for (int k = 0; k < 3; k++) {
        pos[k] = offset + k * q + ((((h >> (20 * k)) & mask) * q) >> 20);
        sign[k] = 1 - 2 * ((h >> (60 + k)) & 1);
    }
}

/* The whole plan (dynamix/comm/lhc.py `make_plan`) in one pass over the buckets: bucket b holds the
 * merged non-zeros nz[first[b] .. first[b+1]) of its len[b] elements; trial[a * nb + b] is its sketch
 * size at attempt a. Each non-empty bucket takes the first attempt whose size is below len[b] and whose
 * sketch peels, else it is sent dense (size 0); its counters follow the sketched buckets before it,
 * so its positions are final when it is hashed and only a failed bucket is hashed and peeled again.
 * Out: sizes [nb]; the sketched items with their positions and signs ([*n_kept], [*n_kept, 3]);
 * the schedule of them (merge_rounds). Returns its rounds, or -1 when memory runs
 * out. */
int64_t dynamix_plan(const int64_t *nz, const int64_t *first, const int64_t *len, int64_t nb, const int64_t *trial,
                     int64_t attempts, const int64_t *table, int64_t size, int64_t *sizes,
                     int64_t *out_items, int64_t *out_pos, int64_t *out_sign, int64_t *order, int64_t *order_k,
                     int64_t *round_len, int64_t *n_kept) {
    int64_t m = first[nb], cap = 1, most = 1;
    for (int64_t b = 0; b < nb; b++) {
        int64_t big = 0;
        for (int64_t a = 0; a < attempts; a++)
            if (trial[a * nb + b] > big) big = trial[a * nb + b];
        cap += big;
        if (big > most) most = big;
    }
    counter_t *ctr = malloc(sizeof(counter_t) * (size_t)cap);
    int64_t *front = malloc(sizeof(int64_t) * (size_t)most);
    int64_t *next = malloc(sizeof(int64_t) * (size_t)(3 * m + 1));
    int64_t *items = malloc(sizeof(int64_t) * (size_t)(m + 1));
    int64_t *ks = malloc(sizeof(int64_t) * (size_t)(m + 1));
    int64_t *lens = malloc(sizeof(int64_t) * (size_t)(m + nb + 1));
    int64_t *seg_rounds = malloc(sizeof(int64_t) * (size_t)(nb + 1));
    int64_t *cursor = malloc(sizeof(int64_t) * (size_t)(nb + 1));
    int64_t rounds = -1;
    if (!ctr || !front || !next || !items || !ks || !lens || !seg_rounds || !cursor) goto out;
    int64_t kept = 0, offset = 0, n_lens = 0, n_seg = 0;
    rounds = 0;
    for (int64_t b = 0; b < nb; b++) {
        int64_t mb = first[b + 1] - first[b];
        sizes[b] = 0;
        if (mb == 0) continue;
        for (int64_t a = 0; a < attempts; a++) {
            int64_t c = trial[a * nb + b];
            if (c >= len[b]) break; /* a sketch no smaller than the bucket: send the bucket */
            for (int64_t i = 0; i < mb; i++) {
                int64_t e = nz[first[b] + i];
                out_items[kept + i] = e;
                hash_item(table, e % size, size, a, offset, c / 3, out_pos + 3 * (kept + i), out_sign + 3 * (kept + i));
            }
            memset(ctr + offset, 0, sizeof(counter_t) * (size_t)c);
            int64_t r = peel_segment(out_pos, kept, kept + mb, offset, offset + c, ctr, front, next, items + kept,
                                     ks + kept, lens + n_lens);
            int64_t done = 0;
            for (int64_t j = 0; j < r; j++) done += lens[n_lens + j];
            if (done == mb) {
                sizes[b] = c;
                seg_rounds[n_seg] = r;
                cursor[n_seg++] = kept;
                n_lens += r;
                if (r > rounds) rounds = r;
                kept += mb;
                offset += c;
                break;
            }
        }
    }
    merge_rounds(items, ks, lens, seg_rounds, cursor, n_seg, rounds, order, order_k, round_len);
    *n_kept = kept;
out:
    free(ctr); free(front); free(next); free(items); free(ks); free(lens); free(seg_rounds); free(cursor);
    return rounds;
}
