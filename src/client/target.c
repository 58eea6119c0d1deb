/* Target strings: one server or a shard set (target.h). */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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
  for (const char *c = t->port; *c; c++)
    if (*c < '0' || *c > '9')
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "target '%s': the port must be a number", target);
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
    int rc = push(out, "", target, target + strlen(target));
    return rc ? chime__fail(err, errlen, rc, "out of memory") : 0;
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
