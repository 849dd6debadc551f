/* Tables for the control plane's authentication logic: the authorized-keys
 * parser (coordinator/auth.c, line format in common/px_keys.h), the
 * constant-time token comparison (correctness only: timing is not asserted),
 * the bind policy (which endpoints count as loopback), and key files on disk
 * (keygen's modes, reading back, refusing a secret key others can read). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "auth.h"
#include "px_keys.h"

#include "../lib/px_check.h"

static int failed;

/* Two real keys (from zmq_curve_keypair), and K2 with '#' first: 40 Z85
 * characters that encode no key (a group beginning with '#' exceeds 2^32). */
#define K1 "HWy$t33VIvXNTH2[}Ij8X!<T1beeN[BhOpXH*tPP"
#define K2 "iP/-09[799O>{[WPDyR@JP?6D51{oK{QGGZBq>S["
#define KH "#P/-09[799O>{[WPDyR@JP?6D51{oK{QGGZBq>S["

typedef struct {
    const char *name, *text;
    int rc, n, bad_line;
    const char *why;   /* substring of the reason, NULL: not checked */
    const char *label0; /* label of the first key when rc == 0 */
} keys_case_t;

static const keys_case_t KEYS_CASES[] = {
    {"one key", K1 "\n", 0, 1, 0, NULL, ""},
    {"no trailing newline", K1, 0, 1, 0, NULL, ""},
    {"label", K1 " worker-g0@host1\n", 0, 1, 0, NULL, "worker-g0@host1"},
    {"label with spaces, tabs around", "\t" K1 "\t rack 4 node 2  \n", 0, 1, 0, NULL, "rack 4 node 2"},
    {"CRLF", K1 " a\r\n" K2 "\r\n", 0, 2, 0, NULL, "a"},
    {"comments and blanks", "# keys of job x\n\n   \n#" K1 "\n" K2 "\n", 0, 1, 0, NULL, ""},
    {"comment with a space after #", "# " K1 "\n" K2 "\n", 0, 1, 0, NULL, ""},
    {"duplicate kept once", K1 " a\n" K2 "\n" K1 " b\n", 0, 2, 0, NULL, "a"},
    {"a # line of 40 Z85 characters is a comment", KH "\n" K1 "\n", 0, 1, 0, NULL, ""},
    {"empty file", "", -1, 0, 0, "no keys", NULL},
    {"only comments", "# nothing\n\n", -1, 0, 0, "no keys", NULL},
    {"short key", K1 "\n" "abc\n", -1, 0, 2, "not a 40-character Z85 key", NULL},
    {"41 characters", K1 "x\n", -1, 0, 1, "not a 40-character Z85 key", NULL},
    {"bad character", "HWy$t33VIvXNTH2[}Ij8X!<T1beeN[BhOpXH*t~P\n", -1, 0, 1, "Z85", NULL},
    {"group above 2^32", "HWy$t33VIvXNTH2[}Ij8X!<T1beeN[BhOpX%%%%%\n", -1, 0, 1, "Z85", NULL},
    {"a '$' group encodes nothing", "$P/-09[799O>{[WPDyR@JP?6D51{oK{QGGZBq>S[\n", -1, 0, 1, "Z85", NULL},
    {"label too long", K1 " 0123456789012345678901234567890123456789012345678901234567890123456789\n", -1, 0, 1,
     "label longer", NULL},
    {"control byte in label", K1 " bad\x01label\n", -1, 0, 1, "printable ASCII", NULL},
    {"NUL byte", K1 "\n\0" K2 "\n", -1, 0, 2, "NUL", NULL},
    {"secret key file passed by mistake", "# phalanx CURVE secret key\n" K1 "\n", 0, 1, 0, NULL, ""},
};

static void test_keys_parse(void) {
    for (size_t i = 0; i < sizeof KEYS_CASES / sizeof KEYS_CASES[0]; i++) {
        const keys_case_t *c = &KEYS_CASES[i];
        size_t len = strlen(c->text);
        if (!strcmp(c->name, "NUL byte")) len = 40 + 1 + 1 + 40 + 1;
        px_auth_keys_t k = {0};
        int line = -1;
        char why[256] = "";
        int rc = px_auth_keys_parse(c->text, len, &k, &line, why, sizeof why);
        CHECK(rc == c->rc, "%s: rc %d, want %d (%s)", c->name, rc, c->rc, why);
        if (rc == 0) CHECK(k.n == c->n, "%s: %d keys, want %d", c->name, k.n, c->n);
        if (rc != 0) CHECK(line == c->bad_line, "%s: bad line %d, want %d", c->name, line, c->bad_line);
        if (c->why) CHECK(strstr(why, c->why) != NULL, "%s: reason '%s' lacks '%s'", c->name, why, c->why);
        if (rc == 0 && c->label0)
            CHECK(!strcmp(k.keys[0].label, c->label0), "%s: label '%s', want '%s'", c->name, k.keys[0].label,
                  c->label0);
        px_auth_keys_free(&k);
    }
    /* Lookup by the binary key, as ZAP hands it over. */
    px_auth_keys_t k = {0};
    int line;
    char why[256];
    const char *text = K1 " one\n" K2 " two\n";
    CHECK(px_auth_keys_parse(text, strlen(text), &k, &line, why, sizeof why) == 0, "two keys parse");
    uint8_t bin[32];
    zmq_z85_decode(bin, K2);
    const px_auth_key_t *f = px_auth_keys_find(&k, bin);
    CHECK(f && !strcmp(f->label, "two") && !strcmp(f->z85, K2), "find by binary key");
    bin[31] ^= 1;
    CHECK(!px_auth_keys_find(&k, bin), "a key one bit off is not found");
    px_auth_keys_free(&k);
}

static void test_token(void) {
    static const struct {
        const char *given, *expected;
        int eq;
    } T[] = {
        {"s3cret", "s3cret", 1},   {"s3cres", "s3cret", 0}, {"s3cre", "s3cret", 0}, {"s3crett", "s3cret", 0},
        {"", "s3cret", 0},         {"S3cret", "s3cret", 0}, {"a", "a", 1},          {"s3cret\n", "s3cret", 0},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        CHECK(px_auth_token_equal(T[i].given, T[i].expected) == T[i].eq, "token '%s' vs '%s': want %d", T[i].given,
              T[i].expected, T[i].eq);
}

/* The token file: every non-blank line is a token (rotation: "new\nold"). */
static void test_token_file(void) {
    static const struct {
        const char *name, *text;
        int rc, n;
        const char *first, *why;
    } T[] = {
        {"one line", "s3cret\n", 0, 1, "s3cret", NULL},
        {"no newline", "s3cret", 0, 1, "s3cret", NULL},
        {"CRLF", "new\r\nold\r\n", 0, 2, "new", NULL},
        {"blank lines skipped", "\n\nnew\n\nold\n\n", 0, 2, "new", NULL},
        {"empty file", "", -1, 0, NULL, "no token"},
        {"only blank", "\n\r\n\n", -1, 0, NULL, "no token"},
        {"nine tokens", "1\n2\n3\n4\n5\n6\n7\n8\n9\n", -1, 0, NULL, "line 9: at most 8"},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        px_auth_tokens_t t;
        char why[160] = "";
        int rc = px_auth_tokens_parse(T[i].text, strlen(T[i].text), &t, why, sizeof why);
        CHECK(rc == T[i].rc, "%s: rc %d, want %d (%s)", T[i].name, rc, T[i].rc, why);
        if (rc == 0) {
            CHECK(t.n == T[i].n, "%s: %d tokens, want %d", T[i].name, t.n, T[i].n);
            CHECK(!strcmp(t.tok[0], T[i].first), "%s: first '%s', want '%s'", T[i].name, t.tok[0], T[i].first);
        } else {
            CHECK(strstr(why, T[i].why) != NULL, "%s: reason '%s' lacks '%s'", T[i].name, why, T[i].why);
        }
    }
    char long_line[300];
    memset(long_line, 'x', 257);
    long_line[257] = '\0';
    px_auth_tokens_t t;
    char why[160];
    CHECK(px_auth_tokens_parse(long_line, 257, &t, why, sizeof why) == -1 && strstr(why, "line 1"),
          "a 257-byte token is refused naming its line: %s", why);
    CHECK(px_auth_tokens_parse("a\0b\n", 4, &t, why, sizeof why) == -1 && strstr(why, "NUL"), "a NUL byte is refused");
    CHECK(px_auth_tokens_parse("new\nold\n", 8, &t, why, sizeof why) == 0, "two tokens parse");
    CHECK(px_auth_tokens_match(&t, "new") && px_auth_tokens_match(&t, "old"), "both tokens admitted");
    CHECK(!px_auth_tokens_match(&t, "ne") && !px_auth_tokens_match(&t, "newold") && !px_auth_tokens_match(&t, ""),
          "a prefix, a concatenation or nothing is not a token");
}

static void test_bind_policy(void) {
    static const struct {
        const char *ep;
        int loopback;
    } E[] = {
        {"tcp://127.0.0.1:7777", 1}, {"tcp://127.1.2.3:7777", 1}, {"tcp://localhost:7777", 1},
        {"tcp://LOCALHOST:1", 1},    {"tcp://[::1]:7777", 1},     {"tcp://::1:7777", 1},
        {"tcp://[::ffff:127.0.0.1]:1", 1}, {"ipc:///tmp/px.sock", 1}, {"inproc://x", 1},
        {"tcp://0.0.0.0:7777", 0},   {"tcp://*:7777", 0},         {"tcp://192.0.2.2:7777", 0},
        {"tcp://10.0.0.1:7777", 0},  {"tcp://[::]:7777", 0},      {"tcp://eth0:7777", 0},
        {"tcp://coord.example:7777", 0}, {"tcp://128.0.0.1:7777", 0}, {"ws://127.0.0.1:7777", 0},
        {"tcp://127.0.0.1", 0},      {"tcp://:7777", 0},          {"pgm://eth0;239.1.1.1:5555", 0},
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++)
        CHECK(px_auth_endpoint_is_loopback(E[i].ep) == E[i].loopback, "%s: loopback %d, want %d", E[i].ep,
              px_auth_endpoint_is_loopback(E[i].ep), E[i].loopback);
    CHECK(px_auth_bind_allowed("tcp://127.0.0.1:1", 0, 0, 0), "loopback needs no credentials");
    CHECK(!px_auth_bind_allowed("tcp://0.0.0.0:1", 0, 0, 0), "0.0.0.0 without credentials refused");
    CHECK(px_auth_bind_allowed("tcp://0.0.0.0:1", 1, 0, 0), "0.0.0.0 with CURVE allowed");
    CHECK(px_auth_bind_allowed("tcp://0.0.0.0:1", 0, 1, 0), "0.0.0.0 with a token allowed");
    CHECK(px_auth_bind_allowed("tcp://0.0.0.0:1", 0, 0, 1), "0.0.0.0 with --insecure allowed");
    CHECK(px_auth_host_is_loopback("127.0.0.1") && !px_auth_host_is_loopback("0.0.0.0"), "HTTP hosts");
}

static void test_key_files(void) {
    char dir[] = "/tmp/px-test-keys-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    char prefix[128], path[160], err[600];
    snprintf(prefix, sizeof prefix, "%s/node", dir);
    px_keypair_t kp, back;
    CHECK(px_keys_generate(prefix, &kp, err, sizeof err) == 0, "keygen: %s", err);
    struct stat st;
    snprintf(path, sizeof path, "%s.key", prefix);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "secret key written 0600 (got %o)",
          (unsigned)(st.st_mode & 0777));
    CHECK(px_keys_read_secret(path, &back, err, sizeof err) == 0 && !strcmp(back.pub, kp.pub) &&
              !strcmp(back.sec, kp.sec),
          "secret key read back, public half derived: %s", err);
    CHECK(px_keys_generate(prefix, &kp, err, sizeof err) != 0 && strstr(err, "exists"), "keygen never overwrites");
    chmod(path, 0644);
    CHECK(px_keys_read_secret(path, &back, err, sizeof err) != 0 && strstr(err, "chmod 600"),
          "a secret key readable by others is refused: %s", err);
    chmod(path, 0640);
    CHECK(px_keys_read_secret(path, &back, err, sizeof err) == 0, "group-readable: a warning, not a refusal");
    snprintf(path, sizeof path, "%s.pub", prefix);
    char pub[PX_KEY_LEN + 1];
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644, "public key written 0644");
    CHECK(px_keys_read_public(path, pub, err, sizeof err) == 0 && !strcmp(pub, kp.pub), "public key read back");
    px_auth_keys_t k = {0};
    CHECK(px_auth_keys_load(path, &k, err, sizeof err) == 0 && k.n == 1 && !strcmp(k.keys[0].label, "node"),
          "a .pub file is an authorized-keys file, labelled with the prefix's basename");
    px_auth_keys_free(&k);
    snprintf(path, sizeof path, "%s/bad_keys", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "# ok\n%s\nnot-a-key\n", kp.pub);
    fclose(f);
    CHECK(px_auth_keys_load(path, &k, err, sizeof err) != 0 && strstr(err, path) && strstr(err, "line 3"),
          "a malformed line names the file and the line: %s", err);
    px_curve_client_t cc;
    CHECK(px_curve_client_load(NULL, NULL, NULL, &cc, err, sizeof err) == 0 && !cc.on, "no flags: plaintext");
    snprintf(path, sizeof path, "%s.key", prefix);
    CHECK(px_curve_client_load(path, NULL, NULL, &cc, err, sizeof err) != 0 &&
              strstr(err, "--coordinator-public-key-file"),
          "a secret key alone is refused, naming the missing flag: %s", err);
    CHECK(px_curve_client_load(path, NULL, kp.pub, &cc, err, sizeof err) == 0 && cc.on && !strcmp(cc.server, kp.pub),
          "secret key and an inline coordinator key: %s", err);
    CHECK(px_curve_client_load(path, NULL, "short", &cc, err, sizeof err) != 0 && strstr(err, "--coordinator-key"),
          "a bad inline key names --coordinator-key");
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    if (system(path) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
}

int main(void) {
    test_keys_parse();
    test_token();
    test_token_file();
    test_bind_policy();
    test_key_files();
    printf("test_auth_keys: %d failed\n", failed);
    return failed ? 1 : 0;
}
