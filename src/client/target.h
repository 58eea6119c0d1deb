/* Internal to the client: what a target string names. One server
 * ("host:port", "unix:/path", "ipv4:1.2.3.4:5", "dns:///name:port" of one
 * address: any target gRPC takes) or many shards:
 *   - a comma-separated list of such targets: "10.0.0.1:7001,10.0.0.2:7001";
 *   - gRPC's multi-address targets: "ipv4:10.0.0.1:7001,10.0.0.2:7001",
 *     "ipv6:[::1]:7001,[::1]:7002";
 *   - "dns:///name:port" (or "dns:name:port"): every address the name
 *     resolves to, resolved again later (a Kubernetes headless Service has
 *     one per pod), so shards that come and go are followed.
 * A target with one address and no dns: is not sharded: the client is
 * exactly the one-server client it always was. */
#ifndef CHIME_CLIENT_TARGET_H
#define CHIME_CLIENT_TARGET_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int sharded;    /* names a shard set (a list, or dns:) */
  int dns;        /* resolved with getaddrinfo, and again later */
  char host[256]; /* dns: the name to resolve */
  char port[16];  /* dns: its port */
  uint32_t n;     /* addresses: the list's, or the last resolution's */
  char **addrs;   /* each a one-server gRPC target */
} chime__target_t;

/* Parses target into *out (zeroed first; dns: names are not resolved yet).
 * CHIME_EINVAL with err naming the target for an empty element, an
 * address gRPC would misread or refuse only at the first call (a port
 * missing or outside 1..65535, an ipv4:/ipv6: or [bracketed] literal that
 * does not parse, an empty or too long Unix path), a dns: name without a
 * port, more than max addresses. Free with chime__target_free. */
int chime__target_parse(const char *target, uint32_t max, chime__target_t *out,
                        char *err, size_t errlen);
/* A dns: target: resolves host:port with getaddrinfo into addrs (each
 * "ipv4:a.b.c.d:port" or "ipv6:[...]:port", sorted, no repeats), replacing
 * the last resolution. CHIME_EUNAVAILABLE with err when the name does not
 * resolve (the last addresses are kept). */
int chime__target_resolve(chime__target_t *t, uint32_t max, char *err,
                          size_t errlen);
void chime__target_free(chime__target_t *t);

#endif
