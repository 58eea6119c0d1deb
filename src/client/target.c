/* Target strings: one server or a shard set (target.h). */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "chime/errors.h"
#include "client/target.h"
#include "common/errfmt.h"

static void free_addrs(char **addrs, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    free(addrs[i]);
  free(addrs);
}

void chime__target_free(chime__target_t *t) {
  if (!t)
    return;
  free_addrs(t->addrs, t->n);
  t->addrs = NULL;
  t->n = 0;
}

/* Appends prefix + the element [b, e) to the list. */
static int push(chime__target_t *t, const char *prefix, const char *b,
                const char *e) {
  size_t pl = strlen(prefix), len = (size_t)(e - b);
  char *s = malloc(pl + len + 1);
  char **grown = realloc(t->addrs, (t->n + 1) * sizeof(*grown));
  if (!s || !grown) {
    free(s);
    if (grown)
      t->addrs = grown;
    return CHIME_ENOMEM;
  }
  memcpy(s, prefix, pl);
  memcpy(s + pl, b, len);
  s[pl + len] = '\0';
  t->addrs = grown;
  t->addrs[t->n++] = s;
  return 0;
}

/* A target's port: a decimal number in 1..65535. gRPC hands the digits to
 * getaddrinfo, which wraps them (":99999" reached port 34463), and port 0
 * names no server. */
static int check_port(const char *target, const char *port, char *err,
                      size_t errlen) {
  unsigned long v = 0;
  size_t nd = 0;
  for (; port[nd] >= '0' && port[nd] <= '9' && v <= 65535; nd++)
    v = v * 10 + (unsigned long)(port[nd] - '0');
  if (nd == 0 || port[nd] != '\0' || v == 0 || v > 65535)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "target '%s': the port '%.16s' must be a number in "
                       "1..65535",
                       target, port);
  return 0;
}

/* An IP literal of family ip (4 or 6; 6 may carry a scope: fe80::1%eth0)
 * in [b, e). */
static int check_ip(const char *target, int ip, const char *b, const char *e,
                    char *err, size_t errlen) {
  char a[INET6_ADDRSTRLEN];
  unsigned char bin[sizeof(struct in6_addr)];
  size_t n = (size_t)(e - b);
  const char *zone = ip == 6 ? memchr(b, '%', n) : NULL;
  if (zone != NULL) {
    if (zone + 1 == e)
      n = sizeof(a); /* an empty scope: refused below */
    else
      n = (size_t)(zone - b);
  }
  if (n < sizeof(a)) {
    memcpy(a, b, n);
    a[n] = '\0';
    if (inet_pton(ip == 4 ? AF_INET : AF_INET6, a, bin) == 1)
      return 0;
  }
  return chime__fail(err, errlen, CHIME_EINVAL,
                     "target '%s': '%.*s' is not an IPv%d address", target,
                     (int)(e - b), b, ip);
}

/* "host:port" or "[v6]:port" (after the scheme, if any): a host, and a
 * valid port. ip: 4 or 6 when the host must be that kind of literal (an
 * ipv4:/ipv6: target), else 0 (a name, or an IPv6 literal in brackets). */
static int check_hostport(const char *target, const char *s, int ip, char *err,
                          size_t errlen) {
  const char *hb = s, *he, *port;
  if (s[0] == '[') {
    he = strchr(s, ']');
    if (he == NULL || (he[1] != ':' && he[1] != '\0'))
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "target '%s': '%s' is not [address]:port", target, s);
    hb++;
    port = he[1] == ':' ? he + 2 : NULL;
    if (ip == 0)
      ip = 6;
  } else {
    he = strrchr(s, ':');
    port = he != NULL ? he + 1 : NULL;
    if (ip == 6 || (he != NULL && memchr(s, ':', (size_t)(he - s)) != NULL))
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "target '%s': '%s': an IPv6 address goes in "
                         "brackets, [address]:port",
                         target, s);
    if (he == NULL)
      he = s + strlen(s);
  }
  if (he == hb)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "target '%s': '%s' names no host", target, s);
  if (port == NULL)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "target '%s': '%s' has no port (gRPC would pick "
                       "443)",
                       target, s);
  int rc = ip != 0 ? check_ip(target, ip, hb, he, err, errlen) : 0;
  return rc ? rc : check_port(target, port, err, errlen);
}

/* One server's address, as gRPC would take it: refused here with the
 * reason, rather than a channel that fails every call with gRPC's words
 * ("Failed to create secure client channel") or reaches another port. */
static int check_one(const char *target, const char *a, char *err,
                     size_t errlen) {
  struct sockaddr_un su;
  const char *path = NULL;
  if (strncmp(a, "unix:", 5) == 0)
    path = a + 5;
  else if (strncmp(a, "unix-abstract:", 14) == 0)
    path = a + 14;
  if (path != NULL) {
    if (path[0] == '\0' || strlen(path) >= sizeof(su.sun_path))
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "target '%s': a Unix socket path must be 1..%zu "
                         "bytes",
                         target, sizeof(su.sun_path) - 1);
    return 0;
  }
  int ip = strncmp(a, "ipv4:", 5) == 0   ? 4
           : strncmp(a, "ipv6:", 5) == 0 ? 6
                                         : 0;
  if (ip != 0) {
    a += 5;
    /* gRPC takes "ipv4:///a:p" too (an empty authority), and no other. */
    if (strncmp(a, "//", 2) == 0 && a[2] != '/')
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "target '%s': ipv%d: takes no authority", target, ip);
    a += strncmp(a, "///", 3) == 0 ? 3 : a[0] == '/';
  }
  return check_hostport(target, a, ip, err, errlen);
}

/* "dns:///name:port", "dns://authority/name:port" (the authority, a DNS
 * server of gRPC's own resolver, is not used: the system's is) or
 * "dns:name:port". */
static int parse_dns(const char *target, chime__target_t *t, char *err,
                     size_t errlen) {
  const char *p = target + 4;
  if (strncmp(p, "//", 2) == 0) {
    p = strchr(p + 2, '/');
    if (!p)
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "target '%s': dns:// needs a name after the "
                         "authority's '/'",
                         target);
    p++;
  }
  const char *colon = strrchr(p, ':');
  const char *close = strrchr(p, ']');
  if (!colon || colon == p || (close && close > colon) || colon[1] == '\0')
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "target '%s': a dns: target needs name:port", target);
  const char *hb = p, *he = colon;
  if (*hb == '[' && he > hb && he[-1] == ']') {
    hb++;
    he--;
  }
  if (he == hb)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "target '%s': a dns: target needs name:port", target);
  if ((size_t)(he - hb) >= sizeof(t->host) ||
      strlen(colon + 1) >= sizeof(t->port))
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "target '%s': the name or port is too long", target);
  memcpy(t->host, hb, (size_t)(he - hb));
  t->host[he - hb] = '\0';
  snprintf(t->port, sizeof(t->port), "%s", colon + 1);
  int rc = check_port(target, t->port, err, errlen);
  if (rc)
    return rc;
  t->dns = 1;
  t->sharded = 1;
  return 0;
}

int chime__target_parse(const char *target, uint32_t max, chime__target_t *out,
                        char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  if (!target || !*target)
    return chime__fail(err, errlen, CHIME_EINVAL, "the target is empty");
  if (strncmp(target, "dns:", 4) == 0 && !strchr(target, ','))
    return parse_dns(target, out, err, errlen);
  if (!strchr(target, ',')) {
    int rc = check_one(target, target, err, errlen);
    if (rc == 0 && (rc = push(out, "", target, target + strlen(target))) != 0)
      chime__fail(err, errlen, rc, "out of memory");
    if (rc)
      chime__target_free(out);
    return rc;
  }
  /* A list. gRPC's ipv4:/ipv6: lists name the scheme once; each element
   * becomes a target of its own with the scheme. */
  const char *prefix = "", *p = target;
  if (strncmp(target, "ipv4:", 5) == 0 || strncmp(target, "ipv6:", 5) == 0) {
    prefix = strncmp(target, "ipv4:", 5) == 0 ? "ipv4:" : "ipv6:";
    p += 5;
  }
  int rc = 0;
  for (;;) {
    const char *e = strchr(p, ',');
    if (!e)
      e = p + strlen(p);
    if (e == p) {
      rc = chime__fail(err, errlen, CHIME_EINVAL,
                       "target '%s': an empty address in the list", target);
      break;
    }
    if (strncmp(p, "dns:", 4) == 0) {
      rc = chime__fail(err, errlen, CHIME_EINVAL,
                       "target '%s': a dns: name cannot be one of a list "
                       "(it already names every address it resolves to)",
                       target);
      break;
    }
    if (out->n >= max) {
      rc = chime__fail(err, errlen, CHIME_EINVAL,
                       "target '%s': more than %u shards", target, max);
      break;
    }
    if ((rc = push(out, prefix, p, e)) != 0) {
      chime__fail(err, errlen, rc, "out of memory");
      break;
    }
    if ((rc = check_one(target, out->addrs[out->n - 1], err, errlen)) != 0)
      break;
    if (*e == '\0')
      break;
    p = e + 1;
  }
  if (rc) {
    chime__target_free(out);
    return rc;
  }
  out->sharded = 1;
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int chime__target_resolve(chime__target_t *t, uint32_t max, char *err,
                          size_t errlen) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int g = getaddrinfo(t->host, t->port, &hints, &res);
  if (g != 0)
    return chime__fail(err, errlen, CHIME_EUNAVAILABLE,
                       "dns:///%s:%s does not resolve: %s", t->host, t->port,
                       gai_strerror(g));
  chime__target_t got;
  memset(&got, 0, sizeof(got));
  int rc = 0;
  for (struct addrinfo *a = res; a && rc == 0; a = a->ai_next) {
    char ip[INET6_ADDRSTRLEN], s[INET6_ADDRSTRLEN + 32];
    if (a->ai_family == AF_INET) {
      const struct sockaddr_in *in = (const void *)a->ai_addr;
      inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
      snprintf(s, sizeof(s), "ipv4:%s:%s", ip, t->port);
    } else if (a->ai_family == AF_INET6) {
      const struct sockaddr_in6 *in6 = (const void *)a->ai_addr;
      inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
      snprintf(s, sizeof(s), "ipv6:[%s]:%s", ip, t->port);
    } else {
      continue;
    }
    int seen = 0;
    for (uint32_t i = 0; i < got.n && !seen; i++)
      seen = strcmp(got.addrs[i], s) == 0;
    if (!seen && got.n < max)
      rc = push(&got, "", s, s + strlen(s));
  }
  freeaddrinfo(res);
  if (rc == 0 && got.n == 0)
    rc = chime__fail(err, errlen, CHIME_EUNAVAILABLE,
                     "dns:///%s:%s resolves to no TCP address", t->host,
                     t->port);
  else if (rc)
    chime__fail(err, errlen, rc, "out of memory");
  if (rc) {
    chime__target_free(&got);
    return rc;
  }
  qsort(got.addrs, got.n, sizeof(*got.addrs), cmp_str);
  chime__target_free(t);
  t->addrs = got.addrs;
  t->n = got.n;
  return 0;
}
