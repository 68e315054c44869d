/* model_code.h — the five built-in models as code, as src/nn/model.c built
 * them before they became models/NAME.model: the reference that
 * tests/test_models.c checks the descriptions against, bit for bit. */
#ifndef HERD_TEST_MODEL_CODE_H
#define HERD_TEST_MODEL_CODE_H

#include "nn/model.h"

/* The builder of built-in model `name`; NULL for another name. */
void (*herd_test_model_code(const char *name))(herd__builder *b);

#endif
