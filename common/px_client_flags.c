/* The coordinator client's flag table (px_client_flags.h). */
#include "px_client_flags.h"

#include "px_endpoint.h"

static const px_flag_t FLAGS[] = {
    {"--coordinator", PX_FLAG_STR, "ENDPOINT", .max = 512, .def = "tcp://127.0.0.1:7777",
     .check = px_endpoint_check_connect, .help = "the coordinator's ZeroMQ endpoint (tcp://HOST:PORT or ipc://PATH)", PX_FLAG_AT(px_client_flags_t, coordinator)},
    {"--curve-secret-key-file", PX_FLAG_STR, "PATH", .max = 4096, .note = "off",
     .help = "CURVE: this client's secret key (phalanxctl keygen)", PX_FLAG_AT(px_client_flags_t, curve_secret)},
    {"--coordinator-public-key-file", PX_FLAG_STR, "PATH", .max = 4096, .note = "none",
     .help = "CURVE: the coordinator's public key", PX_FLAG_AT(px_client_flags_t, curve_server_file)},
    {"--coordinator-key", PX_FLAG_STR, "Z85", .max = 64, .note = "none",
     .help = "CURVE: the coordinator's public key, inline", PX_FLAG_AT(px_client_flags_t, curve_server_key)},
    {"--token-file", PX_FLAG_TOKEN_FILE, "PATH", .note = "none",
     .help = "the job token to present (the first line of the file)", PX_FLAG_AT(px_client_flags_t, token)},
};

const px_flag_table_t px_client_flags = PX_FLAG_TABLE("the coordinator and the credentials to present:", FLAGS);
