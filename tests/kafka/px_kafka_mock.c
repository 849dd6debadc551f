/* px-kafka-mock: a Kafka cluster for tests, without a broker package.
 *
 * librdkafka ships a mock cluster that speaks the real Kafka protocol on
 * loopback TCP, so the coordinator, the event-log tests and kcat can all talk
 * to it as to a real cluster. This helper hosts one and lets a test script
 * drive it through stdin, so a test can cut the brokers off and bring them
 * back at the moment it chooses.
 *
 *   px-kafka-mock [--brokers N] [--partitions P] TOPIC...
 *
 * Topics are created up front with P partitions (default 1: auto-created
 * topics get 4, and order is only total within one partition). The first
 * line on stdout is the bootstrap server list. Then, one command per stdin
 * line, each answered by one line, "ok" or "error: ...":
 *   down               every broker drops its connections and refuses new ones
 *   up                 every broker accepts connections again
 *   topic NAME [P]     create another topic
 *   fail N ERR         the next N produce requests fail with Kafka error ERR
 *                      (a name such as TOPIC_AUTHORIZATION_FAILED, or a code)
 *   quit               exit; end of input does the same, so the cluster
 *                      never outlives the test that started it. */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PRODUCE_API_KEY = 0, MAX_FAILS = 1000 };

static int lookup_error(const char *name, rd_kafka_resp_err_t *out) {
    char *end;
    long v = strtol(name, &end, 10);
    if (*name && !*end) {
        *out = (rd_kafka_resp_err_t)v;
        return 0;
    }
    const struct rd_kafka_err_desc *descs;
    size_t n;
    rd_kafka_get_err_descs(&descs, &n);
    for (size_t i = 0; i < n; i++) {
        if (descs[i].name && !strcmp(descs[i].name, name)) {
            *out = descs[i].code;
            return 0;
        }
    }
    return -1;
}

static int set_all(rd_kafka_mock_cluster_t *mc, int brokers, int up) {
    for (int id = 1; id <= brokers; id++) {
        rd_kafka_resp_err_t err =
            up ? rd_kafka_mock_broker_set_up(mc, id) : rd_kafka_mock_broker_set_down(mc, id);
        if (err) {
            printf("error: broker %d %s: %s\n", id, up ? "up" : "down", rd_kafka_err2str(err));
            return -1;
        }
    }
    return 0;
}

static int create_topic(rd_kafka_mock_cluster_t *mc, const char *name, int partitions,
                        int brokers) {
    int rf = brokers < 3 ? brokers : 3;
    rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mc, name, partitions, rf);
    if (err) {
        printf("error: cannot create topic %s: %s\n", name, rd_kafka_err2str(err));
        return -1;
    }
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: px-kafka-mock [--brokers N (1..10, default 3)] [--partitions P "
                    "(1..64, default 1)] TOPIC...\n");
    exit(2);
}

int main(int argc, char **argv) {
    int brokers = 3, partitions = 1, first_topic = argc;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--brokers") && i + 1 < argc) {
            brokers = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--partitions") && i + 1 < argc) {
            partitions = atoi(argv[++i]);
        } else if (argv[i][0] == '-') {
            usage();
        } else {
            first_topic = i;
            break;
        }
    }
    if (brokers < 1 || brokers > 10 || partitions < 1 || partitions > 64) usage();
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    char why[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "3", why, sizeof why); /* quiet unless broken */
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
    if (!rk) {
        fprintf(stderr, "px-kafka-mock: %s\n", why);
        return 1;
    }
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, brokers);
    if (!mc) {
        fprintf(stderr, "px-kafka-mock: cannot create the mock cluster\n");
        return 1;
    }
    for (int i = first_topic; i < argc; i++)
        if (create_topic(mc, argv[i], partitions, brokers) != 0) return 1;
    printf("%s\n", rd_kafka_mock_cluster_bootstraps(mc));

    char line[512];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[32] = "", a1[256] = "", a2[256] = "";
        if (sscanf(line, "%31s %255s %255s", cmd, a1, a2) < 1) continue;
        if (!strcmp(cmd, "quit")) {
            break;
        } else if (!strcmp(cmd, "down") || !strcmp(cmd, "up")) {
            if (set_all(mc, brokers, cmd[0] == 'u') == 0) printf("ok\n");
        } else if (!strcmp(cmd, "topic") && a1[0]) {
            if (create_topic(mc, a1, a2[0] ? atoi(a2) : partitions, brokers) == 0) printf("ok\n");
        } else if (!strcmp(cmd, "fail") && a1[0] && a2[0]) {
            int n = atoi(a1);
            rd_kafka_resp_err_t err;
            if (n < 1 || n > MAX_FAILS || lookup_error(a2, &err) != 0) {
                printf("error: usage: fail N (1..%d) ERROR_NAME\n", MAX_FAILS);
                continue;
            }
            rd_kafka_resp_err_t errs[MAX_FAILS];
            for (int i = 0; i < n; i++) errs[i] = err;
            rd_kafka_mock_push_request_errors_array(mc, PRODUCE_API_KEY, (size_t)n, errs);
            printf("ok\n");
        } else {
            printf("error: unknown command '%s' (down, up, topic NAME [P], fail N ERR, quit)\n",
                   cmd);
        }
    }
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return 0;
}
