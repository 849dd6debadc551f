/* The launcher's default ports, moved when taken: a second job on one
 * machine, or any server on 7777 or 8080, would otherwise stop the
 * coordinator at start. Only a default moves; a port given on the command
 * line is used as given (and its failure reported). */
#ifndef PX_LAUNCH_PORTS_H
#define PX_LAUNCH_PORTS_H

/* Whether TCP port `port` of the IPv4 address `host` can be listened on now
 * (as the coordinator would: SO_REUSEADDR): 0 free; 1 taken, with *other a
 * free port of that address the kernel chose; -1 when it cannot tell (not an
 * IPv4 literal, no socket): the caller goes on with `port`. */
int px_port_taken(const char *host, int port, int *other);

#endif
