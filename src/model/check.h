/* check.h — load-time NaN/Inf scan of a tensor directory's floating-point weights. */
#ifndef INK_MODEL_CHECK_H
#define INK_MODEL_CHECK_H

#include "inkling.h"
#include "load/tdir.h"

/* Maps each float tensor of td and fails with INK_E_FORMAT naming the tensor, its file and the flat
 * index of the first NaN or Inf. Reads every weight byte once (slow on large models: opt-in). */
int ink_check_tensors(ink_tdir *td, ink_err *err);

#endif
