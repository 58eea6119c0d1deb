/* Internal: the one intrusive list (libuv's queue.h idea): a link embedded
 * in each record, doubly linked so that a record leaves in O(1), newest
 * first, NULL-terminated. Its owner's lock guards it. */
#ifndef CHIME_COMMON_LIST_H
#define CHIME_COMMON_LIST_H

#include <stddef.h>

typedef struct chime__link_s {
  struct chime__link_s *prev, *next; /* NULL, NULL: on no list */
} chime__link_t;

typedef struct {
  chime__link_t *head;
} chime__list_t;

/* The record a link is embedded in as member. */
#define CHIME__CONTAINER(link, type, member)                                   \
  ((type *)(void *)((char *)(link)-offsetof(type, member)))

/* Every link of list, as it: it may leave the list in the body (the next
 * is read first). */
#define CHIME__LIST_EACH(it, list)                                             \
  for (chime__link_t *it = (list)->head, *it##_next_ = it ? it->next : NULL;   \
       it != NULL; it = it##_next_, it##_next_ = it ? it->next : NULL)

static inline void chime__list_push(chime__list_t *l, chime__link_t *n) {
  n->prev = NULL;
  n->next = l->head;
  if (l->head != NULL)
    l->head->prev = n;
  l->head = n;
}

/* Whether n is on l (n on no list has both links NULL). */
static inline int chime__list_has(const chime__list_t *l,
                                  const chime__link_t *n) {
  return n->prev != NULL || n->next != NULL || l->head == n;
}

/* Takes n off l; nothing when it is not on it. */
static inline void chime__list_remove(chime__list_t *l, chime__link_t *n) {
  if (!chime__list_has(l, n))
    return;
  if (n->prev != NULL)
    n->prev->next = n->next;
  else
    l->head = n->next;
  if (n->next != NULL)
    n->next->prev = n->prev;
  n->prev = n->next = NULL;
}

#endif
