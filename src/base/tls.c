/* The per-thread state (base/tls.h), defined in the lowest layer that
 * every other one may use. */
#include "base/tls.h"

__thread struct hak_tls hak_tls __attribute__((tls_model("initial-exec")));
