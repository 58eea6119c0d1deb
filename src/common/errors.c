/* Names and sentences for the CHIME_E* codes, generated from one list. */
#include "chime/errors.h"

const char *chime_strerror(int err) {
  switch (err) {
  case CHIME_OK:
    return "success";
#define CHIME__ERR_MSG(name, value, msg)                                       \
  case CHIME_##name:                                                           \
    return msg;
    CHIME_ERRNO_MAP(CHIME__ERR_MSG)
#undef CHIME__ERR_MSG
  }
  return "unknown error";
}

const char *chime_err_name(int err) {
  switch (err) {
  case CHIME_OK:
    return "CHIME_OK";
#define CHIME__ERR_NAME(name, value, msg)                                      \
  case CHIME_##name:                                                           \
    return "CHIME_" #name;
    CHIME_ERRNO_MAP(CHIME__ERR_NAME)
#undef CHIME__ERR_NAME
  }
  return "CHIME_UNKNOWN";
}
