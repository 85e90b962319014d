/* The codec, codec-state and profile calls of ciuic.h from C alone, linked against libciuic.so (what
 * the Python package loads): specs and flags, wire sizes and chunks, encode/decode with error feedback
 * (the invariant decoded + new residual = input + old residual, the int8 block bound), the fused hop,
 * per-chunk encoding, state bytes that round-trip and continue bit for bit, every truncation and a
 * set of corruptions of those bytes refused with CIUIC_ERR_INPUT and the state left as it was, and
 * profile rule lookup. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ciuic.h"
#include "tests/c/check.h"

#define N 1000

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float draw(void) { /* uniform in [-1, 1), xorshift64 */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static void fill(float* x, size_t n, float scale) {
  for (size_t i = 0; i < n; ++i) x[i] = draw() * scale;
}

static ciuic_codec_t* make(const char* spec) {
  ciuic_codec_t* c = NULL;
  CHECK(ciuic_codec_create(spec, &c) == CIUIC_OK, "create %s: %s", spec, ciuic_last_error());
  return c;
}

static size_t wire_bytes(const ciuic_codec_t* c, size_t n) {
  size_t b = 0;
  CHECK(ciuic_codec_wire_bytes(c, n, &b) == CIUIC_OK, "wire_bytes: %s", ciuic_last_error());
  return b;
}

static void specs(void) {
  const char* bad[] = {"int9", "topk", "topk:2", "topk:0", "powersgd:0", "int8:3", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    ciuic_codec_t* c = NULL;
    CHECK(ciuic_codec_create(bad[i], &c) == CIUIC_ERR_USAGE && c == NULL, "codec '%s' accepted", bad[i]);
    CHECK(strlen(ciuic_last_error()) > 0, "codec '%s': no message", bad[i]);
  }
  ciuic_codec_t* c = NULL;
  CHECK(ciuic_codec_create(NULL, &c) == CIUIC_ERR_USAGE, "null spec accepted");
  struct {
    const char* spec;
    uint32_t flags;
  } want[] = {
      {"none", CIUIC_CODEC_LOSSLESS | CIUIC_CODEC_SUMMABLE},
      {"fp16", CIUIC_CODEC_SUMMABLE | CIUIC_CODEC_STATEFUL | CIUIC_CODEC_DECODE_ADD_ENCODE},
      {"int8", CIUIC_CODEC_STATEFUL | CIUIC_CODEC_DECODE_ADD_ENCODE},
      {"sign1", CIUIC_CODEC_STATEFUL | CIUIC_CODEC_DECODE_ADD_ENCODE},
      {"topk:0.01", CIUIC_CODEC_STATEFUL},
      {"randomk:0.1", CIUIC_CODEC_SUMMABLE | CIUIC_CODEC_STATEFUL},
      {"powersgd:2", CIUIC_CODEC_STATEFUL},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i) {
    ciuic_codec_t* k = make(want[i].spec);
    uint32_t flags = 0;
    CHECK(ciuic_codec_flags(k, &flags) == CIUIC_OK && flags == want[i].flags, "%s: flags %u, want %u", want[i].spec,
          flags, want[i].flags);
    char name[32];
    CHECK(ciuic_codec_name(k, name, sizeof name) == CIUIC_OK && strcmp(name, want[i].spec) == 0,
          "%s: canonical name '%s'", want[i].spec, name);
    CHECK(ciuic_codec_name(k, name, 3) == CIUIC_ERR_USAGE, "%s: name fitted into 3 bytes", want[i].spec);
    ciuic_codec_destroy(k);
  }
  ciuic_codec_t* k = make("int8");
  /* int8, block 256: a fp32 scale per block, then a byte per element */
  CHECK(wire_bytes(k, N) == 4 * 4 + N, "int8 wire of %d: %zu", N, wire_bytes(k, N));
  size_t prev = 0;
  for (int i = 0; i < 3; ++i) {
    size_t b = 0, e = 0;
    CHECK(ciuic_codec_chunk(k, N, 3, i, &b, &e) == CIUIC_OK, "chunk: %s", ciuic_last_error());
    CHECK(b == prev && (e == N || e % 256 == 0) && e >= b, "int8 chunk %d of 3: [%zu, %zu)", i, b, e);
    prev = e;
  }
  CHECK(prev == N, "chunks end at %zu", prev);
  size_t b = 0, e = 0;
  CHECK(ciuic_codec_chunk(k, N, 3, 3, &b, &e) == CIUIC_ERR_USAGE, "chunk 3 of 3 accepted");
  CHECK(ciuic_codec_chunk(k, N, 0, 0, &b, &e) == CIUIC_ERR_USAGE, "0 parts accepted");
  ciuic_codec_destroy(k);
  k = make("topk:0.01");
  CHECK(wire_bytes(k, N) == 10 * 8, "topk:0.01 wire of %d: %zu", N, wire_bytes(k, N));
  ciuic_codec_destroy(k);
}

/* int8 with error feedback over three steps: each step's decoded output plus the new residual is the
 * input plus the old residual (to float rounding), and the decoded output is within half a
 * quantisation step (absmax/127/2 per block) of input + old residual. */
static void error_feedback(void) {
  ciuic_codec_t* c = make("int8");
  ciuic_codec_state_t* st = NULL;
  CHECK(ciuic_codec_state_create(c, N, &st) == CIUIC_OK, "state: %s", ciuic_last_error());
  const size_t wb = wire_bytes(c, N);
  uint8_t* wire = malloc(wb);
  float x[N], y[N], r_old[N], r_new[N];
  CHECK(ciuic_codec_state_residual(st, r_old, N) == CIUIC_OK, "residual: %s", ciuic_last_error());
  for (int i = 0; i < N; ++i) CHECK(r_old[i] == 0.0f, "fresh residual[%d] = %g", i, r_old[i]);
  for (int s = 0; s < 3; ++s) {
    fill(x, N, 1.0f + s);
    uint64_t step = 99;
    CHECK(ciuic_codec_encode(c, st, x, N, wire, wb, &step) == CIUIC_OK, "encode: %s", ciuic_last_error());
    CHECK(step == (uint64_t)s, "encode step %llu, want %d", (unsigned long long)step, s);
    CHECK(ciuic_codec_decode(c, wire, wb, N, step, y) == CIUIC_OK, "decode: %s", ciuic_last_error());
    CHECK(ciuic_codec_state_residual(st, r_new, N) == CIUIC_OK, "residual: %s", ciuic_last_error());
    int bad = 0;
    for (int b0 = 0; b0 < N; b0 += 256) {
      float absmax = 0;
      const int b1 = b0 + 256 < N ? b0 + 256 : N;
      for (int i = b0; i < b1; ++i) absmax = fmaxf(absmax, fabsf(x[i] + r_old[i]));
      for (int i = b0; i < b1; ++i) {
        const double e = (double)x[i] + r_old[i];
        if (fabs((double)y[i] + r_new[i] - e) > 2e-6 * (fabs(e) + absmax) ||
            fabs((double)y[i] - e) > absmax / 127.0 * 0.5 * (1 + 1e-5))
          ++bad;
      }
    }
    CHECK(bad == 0, "int8 step %d: %d elements break the error-feedback invariant or the block bound", s, bad);
    memcpy(r_old, r_new, sizeof r_old);
  }
  size_t n = 0;
  uint64_t step = 0;
  CHECK(ciuic_codec_state_info(st, &n, &step) == CIUIC_OK && n == N && step == 3, "info: n %zu step %llu", n,
        (unsigned long long)step);
  /* misuse: wrong wire size, wrong n, state of another codec, NaN input */
  CHECK(ciuic_codec_encode(c, st, x, N, wire, wb - 1, NULL) == CIUIC_ERR_USAGE, "short wire accepted");
  CHECK(ciuic_codec_encode(c, st, x, N - 1, wire, wire_bytes(c, N - 1), NULL) == CIUIC_ERR_USAGE,
        "a state of %d elements took %d", N, N - 1);
  CHECK(ciuic_codec_decode(c, wire, wb + 1, N, 0, y) == CIUIC_ERR_USAGE, "long wire accepted");
  ciuic_codec_t* other = make("int4");
  CHECK(ciuic_codec_encode(other, st, x, N, wire, wire_bytes(other, N), NULL) == CIUIC_ERR_USAGE,
        "an int8 state encoded int4");
  CHECK(strstr(ciuic_last_error(), "int8") != NULL, "message: %s", ciuic_last_error());
  ciuic_codec_destroy(other);
  x[17] = NAN;
  CHECK(ciuic_codec_encode(c, st, x, N, wire, wb, NULL) == CIUIC_ERR_INPUT, "NaN encoded");
  float bad_r[N];
  fill(bad_r, N, 1);
  bad_r[3] = INFINITY;
  CHECK(ciuic_codec_state_set_residual(st, bad_r, N) == CIUIC_ERR_INPUT, "an infinite residual set");
  CHECK(ciuic_codec_state_set_residual(st, bad_r, N - 1) == CIUIC_ERR_USAGE, "a residual of N-1 set");
  free(wire);
  ciuic_codec_state_destroy(st);
  ciuic_codec_destroy(c);
  ciuic_codec_t* none = make("none");
  CHECK(ciuic_codec_state_create(none, N, &st) == CIUIC_OK, "state: %s", ciuic_last_error());
  CHECK(ciuic_codec_state_set_residual(st, x, N) == CIUIC_ERR_USAGE, "codec none took a residual");
  ciuic_codec_state_destroy(st);
  ciuic_codec_destroy(none);
}

/* decode_accumulate adds; decode_add_encode equals decode + add + encode (no state), bit for bit;
 * encode_chunks keeps the invariant over the whole tensor and matches chunk-wise decoding. */
static void hops(void) {
  const char* specs_[] = {"int8", "fp16", "sign1", "fp8e4m3"};
  for (size_t s = 0; s < sizeof specs_ / sizeof specs_[0]; ++s) {
    ciuic_codec_t* c = make(specs_[s]);
    const size_t wb = wire_bytes(c, N);
    uint8_t *w1 = malloc(wb), *w2 = malloc(wb), *w3 = malloc(wb), *w4 = malloc(wb);
    float a[N], b[N], y[N], z[N];
    fill(a, N, 2);
    fill(b, N, 3);
    CHECK(ciuic_codec_encode(c, NULL, a, N, w1, wb, NULL) == CIUIC_OK, "%s encode: %s", specs_[s], ciuic_last_error());
    CHECK(ciuic_codec_encode(c, NULL, b, N, w2, wb, NULL) == CIUIC_OK, "%s encode", specs_[s]);
    CHECK(ciuic_codec_decode(c, w1, wb, N, 0, y) == CIUIC_OK, "%s decode", specs_[s]);
    CHECK(ciuic_codec_decode(c, w2, wb, N, 0, z) == CIUIC_OK, "%s decode", specs_[s]);
    float acc[N];
    memcpy(acc, y, sizeof acc);
    CHECK(ciuic_codec_decode_accumulate(c, w2, wb, N, 0, acc) == CIUIC_OK, "%s accumulate", specs_[s]);
    int bad = 0;
    for (int i = 0; i < N; ++i) bad += acc[i] != y[i] + z[i];
    CHECK(bad == 0, "%s: decode_accumulate differs from decode + add at %d elements", specs_[s], bad);
    CHECK(ciuic_codec_decode_add_encode(c, w1, b, N, 0, w3, wb) == CIUIC_OK, "%s hop: %s", specs_[s],
          ciuic_last_error());
    for (int i = 0; i < N; ++i) acc[i] = y[i] + b[i];
    CHECK(ciuic_codec_encode(c, NULL, acc, N, w4, wb, NULL) == CIUIC_OK, "%s encode", specs_[s]);
    CHECK(memcmp(w3, w4, wb) == 0, "%s: decode_add_encode differs from decode, add, encode", specs_[s]);
    /* three chunks at one step, the residual over the whole tensor */
    ciuic_codec_state_t* st = NULL;
    CHECK(ciuic_codec_state_create(c, N, &st) == CIUIC_OK, "state");
    size_t cw = 0, begin[3], end[3];
    for (int i = 0; i < 3; ++i) {
      CHECK(ciuic_codec_chunk(c, N, 3, i, &begin[i], &end[i]) == CIUIC_OK, "chunk");
      cw += wire_bytes(c, end[i] - begin[i]);
    }
    uint8_t* chunks = malloc(cw);
    uint64_t step = 7;
    CHECK(ciuic_codec_encode_chunks(c, st, a, N, 3, chunks, cw - 1, &step) == CIUIC_ERR_USAGE, "short chunk wire");
    CHECK(ciuic_codec_encode_chunks(c, st, a, N, 3, chunks, cw, &step) == CIUIC_OK && step == 0, "%s chunks: %s",
          specs_[s], ciuic_last_error());
    size_t off = 0;
    for (int i = 0; i < 3; ++i) {
      const size_t len = end[i] - begin[i], w = wire_bytes(c, len);
      CHECK(ciuic_codec_decode(c, chunks + off, w, len, 0, y + begin[i]) == CIUIC_OK, "chunk decode");
      off += w;
    }
    float r[N];
    CHECK(ciuic_codec_state_residual(st, r, N) == CIUIC_OK, "residual");
    bad = 0;
    for (int i = 0; i < N; ++i) bad += fabsf(y[i] + r[i] - a[i]) > 2e-6f * (fabsf(a[i]) + 2);
    CHECK(bad == 0, "%s chunks: %d elements break decoded + residual = input", specs_[s], bad);
    uint64_t st_step = 0;
    CHECK(ciuic_codec_state_info(st, NULL, &st_step) == CIUIC_OK && st_step == 1, "one step for all chunks");
    free(chunks);
    ciuic_codec_state_destroy(st);
    free(w1), free(w2), free(w3), free(w4);
    ciuic_codec_destroy(c);
  }
  ciuic_codec_t* t = make("topk:0.01");
  uint8_t junk[80];
  for (size_t i = 0; i < sizeof junk; ++i) junk[i] = (uint8_t)((draw() + 1.0f) * 127.5f);
  float out[N];
  CHECK(ciuic_codec_decode(t, junk, sizeof junk, N, 0, out) == CIUIC_OK, "topk decode of junk: %s", ciuic_last_error());
  float a[N];
  fill(a, N, 1);
  uint8_t w[80];
  CHECK(ciuic_codec_decode_add_encode(t, w, a, N, 0, w, sizeof w) == CIUIC_ERR_USAGE, "topk took the fused hop");
  CHECK(ciuic_codec_encode_chunks(t, NULL, a, N, 2, w, sizeof w, NULL) == CIUIC_ERR_USAGE, "topk encoded in chunks");
  ciuic_codec_destroy(t);
}

static size_t saved(const ciuic_codec_state_t* st, uint8_t** out) {
  size_t size = 0;
  CHECK(ciuic_codec_state_save(st, NULL, 0, &size) == CIUIC_OK && size > 0, "save size: %s", ciuic_last_error());
  *out = malloc(size);
  size_t again = 0;
  CHECK(ciuic_codec_state_save(st, *out, size - 1, &again) == CIUIC_ERR_USAGE, "save into a short buffer");
  CHECK(ciuic_codec_state_save(st, *out, size, &again) == CIUIC_OK && again == size, "save: %s", ciuic_last_error());
  return size;
}

/* Saved bytes load into a fresh state that then encodes exactly as the original; truncations and
 * corruptions are refused with CIUIC_ERR_INPUT and leave the target state as it was. */
static void state_bytes(const char* spec) {
  ciuic_codec_t* c = make(spec);
  ciuic_codec_state_t *a = NULL, *b = NULL;
  CHECK(ciuic_codec_state_create(c, N, &a) == CIUIC_OK && ciuic_codec_state_create(c, N, &b) == CIUIC_OK, "state");
  const size_t wb = wire_bytes(c, N);
  uint8_t *wa = malloc(wb), *wb_ = malloc(wb);
  float x[N];
  for (int s = 0; s < 3; ++s) {
    fill(x, N, 1);
    CHECK(ciuic_codec_encode(c, a, x, N, wa, wb, NULL) == CIUIC_OK, "%s encode: %s", spec, ciuic_last_error());
  }
  uint8_t* bytes = NULL;
  const size_t size = saved(a, &bytes);
  /* b holds one step of its own: a refused load must leave exactly that */
  fill(x, N, 1);
  CHECK(ciuic_codec_encode(c, b, x, N, wb_, wb, NULL) == CIUIC_OK, "encode b");
  uint8_t* before = NULL;
  const size_t before_size = saved(b, &before);
  int accepted = 0;
  for (size_t len = 0; len < size; ++len) accepted += ciuic_codec_state_load(b, bytes, len) != CIUIC_ERR_INPUT;
  CHECK(accepted == 0, "%s: %d truncations of %zu state bytes were not refused as bad input", spec, accepted, size);
  uint8_t* copy = malloc(size + 1);
  /* magic, version 0, version 3 (newer), reserved word, codec name, count, a residual length, the checksum,
     trailing byte */
  const size_t name_len = strlen(spec);
  const size_t at_count = 8 + 4 + 4 + 8 + name_len, at_res = at_count + 16;
  struct {
    size_t offset;
    uint8_t value;
    const char* what;
  } flips[] = {{0, 'X', "magic"},
               {8, 0, "version 0"},
               {8, 3, "version 3"},
               {12, 1, "reserved word"},
               {24, 'Z', "codec name"},
               {at_count, 0xee, "count"},
               {at_res, 0x01, "residual length"},
               {size - 3, 0x5a, "checksum"}};
  for (size_t f = 0; f < sizeof flips / sizeof flips[0]; ++f) {
    memcpy(copy, bytes, size);
    copy[flips[f].offset] = flips[f].value;
    CHECK(ciuic_codec_state_load(b, copy, size) == CIUIC_ERR_INPUT, "%s: %s corruption loaded", spec, flips[f].what);
    CHECK(strstr(ciuic_last_error(), "codec state") != NULL, "%s %s: message '%s'", spec, flips[f].what,
          ciuic_last_error());
  }
  memcpy(copy, bytes, size);
  copy[size] = 0;
  CHECK(ciuic_codec_state_load(b, copy, size + 1) == CIUIC_ERR_INPUT, "%s: a trailing byte loaded", spec);
  if (size >= at_res + 8 + 4) { /* a NaN in the residual */
    const float nan = NAN;
    memcpy(copy, bytes, size);
    memcpy(copy + at_res + 8, &nan, 4);
    CHECK(ciuic_codec_state_load(b, copy, size) == CIUIC_ERR_INPUT, "%s: a NaN residual loaded", spec);
  }
  if (size >= at_res + 8 + 4) { /* one bit of a residual value: only the checksum can tell */
    memcpy(copy, bytes, size);
    copy[at_res + 8] ^= 0x01;
    CHECK(ciuic_codec_state_load(b, copy, size) == CIUIC_ERR_INPUT, "%s: a flipped residual bit loaded", spec);
    CHECK(strstr(ciuic_last_error(), "checksum mismatch") != NULL, "%s flipped bit: message '%s'", spec,
          ciuic_last_error());
  }
  uint8_t* after = NULL;
  const size_t after_size = saved(b, &after);
  CHECK(after_size == before_size && memcmp(before, after, before_size) == 0, "%s: a refused load changed the state",
        spec);
  ciuic_codec_state_t* small = NULL;
  CHECK(ciuic_codec_state_create(c, N / 2, &small) == CIUIC_OK, "state");
  CHECK(ciuic_codec_state_load(small, bytes, size) == CIUIC_ERR_INPUT, "%s: %d-element bytes loaded into %d", spec, N,
        N / 2);
  ciuic_codec_state_destroy(small);
  /* format 1 (no checksum), as saved before format 2, still loads */
  memcpy(copy, bytes, size);
  copy[8] = 1;
  CHECK(ciuic_codec_state_load(b, copy, size - 8) == CIUIC_OK, "%s: format 1 bytes: %s", spec, ciuic_last_error());
  /* the round trip continues bit for bit */
  CHECK(ciuic_codec_state_load(b, bytes, size) == CIUIC_OK, "%s load: %s", spec, ciuic_last_error());
  uint64_t sa = 0, sb = 0;
  ciuic_codec_state_info(a, NULL, &sa);
  ciuic_codec_state_info(b, NULL, &sb);
  CHECK(sa == 3 && sb == 3, "%s: steps %llu and %llu after load", spec, (unsigned long long)sa, (unsigned long long)sb);
  for (int s = 0; s < 3; ++s) {
    fill(x, N, 1);
    CHECK(ciuic_codec_encode(c, a, x, N, wa, wb, NULL) == CIUIC_OK, "encode a");
    CHECK(ciuic_codec_encode(c, b, x, N, wb_, wb, NULL) == CIUIC_OK, "encode b");
    CHECK(memcmp(wa, wb_, wb) == 0, "%s: the loaded state encodes other bytes at step %d", spec, s);
  }
  free(bytes), free(before), free(after), free(copy), free(wa), free(wb_);
  ciuic_codec_state_destroy(a);
  ciuic_codec_state_destroy(b);
  ciuic_codec_destroy(c);
}

static void profiles(void) {
  ciuic_profile_t* p = NULL;
  CHECK(ciuic_profile_load(CIUIC_SOURCE_DIR "/tests/data/profiles/dgx_a100_mixed.profile.json", &p) == CIUIC_OK,
        "load: %s", ciuic_last_error());
  if (!p) return;
  int nodes = 0, ranks = 0;
  size_t rules = 0;
  CHECK(ciuic_profile_info(p, &nodes, &ranks, &rules) == CIUIC_OK && rules == 5 && ranks >= nodes && nodes >= 1,
        "info: %d nodes %d ranks %zu rules", nodes, ranks, rules);
  ciuic_rule_t r;
  CHECK(ciuic_profile_rule_for(p, NULL, 1000, &r) == CIUIC_OK && strcmp(r.algo, "nccl") == 0 &&
            strcmp(r.codec, "none") == 0 && r.min_bytes == 0 && r.max_bytes == 65536,
        "rule for 1000 bytes: %s %s [%llu, %llu)", r.algo, r.codec, (unsigned long long)r.min_bytes,
        (unsigned long long)r.max_bytes);
  CHECK(ciuic_profile_rule_for(p, "allreduce", 300u << 20, &r) == CIUIC_OK && strcmp(r.algo, "sign2") == 0 &&
            strcmp(r.codec, "sign1") == 0 && r.bucket_bytes == 128u << 20 && r.max_bytes == 0,
        "rule for 300 MiB: %s %s bucket %llu", r.algo, r.codec, (unsigned long long)r.bucket_bytes);
  CHECK(ciuic_profile_rule_for(p, "allreduce", 20u << 20, &r) == CIUIC_OK && strcmp(r.precision, "bf16") == 0,
        "rule for 20 MiB: precision %s", r.precision);
  CHECK(ciuic_profile_rule_for(p, "broadcast", 1000, &r) == CIUIC_ERR_INPUT, "a broadcast rule found");
  CHECK(ciuic_profile_rule_at(p, 4, &r) == CIUIC_OK && strcmp(r.algo, "sign2") == 0, "rule 4: %s", r.algo);
  CHECK(ciuic_profile_rule_at(p, 5, &r) == CIUIC_ERR_USAGE, "rule 5 of 5 given");
  ciuic_profile_destroy(p);
  p = NULL;
  CHECK(ciuic_profile_load(CIUIC_SOURCE_DIR "/profiles/no-such.profile.json", &p) == CIUIC_ERR_INPUT && !p,
        "a missing file loaded");
  CHECK(ciuic_profile_parse("{\"schema\": \"ciuic.profile/9\"}", "inline", &p) == CIUIC_ERR_INPUT && !p,
        "a newer schema parsed");
  CHECK(ciuic_profile_parse("{", NULL, &p) == CIUIC_ERR_INPUT && !p, "broken JSON parsed");
  CHECK(ciuic_profile_parse(NULL, NULL, &p) == CIUIC_ERR_USAGE, "null text parsed");
}

int main(void) {
  specs();
  error_feedback();
  hops();
  state_bytes("int8");
  state_bytes("topk:0.1");
  state_bytes("sign1");
  state_bytes("powersgd:2");
  state_bytes("randomk:0.1");
  profiles();
  if (failures) {
    fprintf(stderr, "c_codec_api_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("c_codec_api_test: all checks passed\n");
  return 0;
}
