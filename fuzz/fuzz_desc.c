/* libFuzzer target: model descriptions (herd_model_create_from_description,
 * src/nn/desc.c). A description either builds, and then runs a forward
 * and backward pass, or fails with a message that names its source. Inputs
 * with a number of four digits or more are skipped: the target looks for
 * the reader's faults, not for the allocations a large layer asks for. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "herd/herd_nn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = strndup((const char *)data, size); /* a NUL ends the text, as it ends a file's read */
    if (!text)
        return 0;
    size_t digits = 0;
    for (size_t i = 0; text[i] && digits < 4; i++)
        digits = isdigit((unsigned char)text[i]) ? digits + 1 : 0;
    if (digits >= 4) {
        free(text);
        return 0;
    }
    herd_model *m = NULL;
    herd_err err = {0};
    herd_status st = herd_model_create_from_description("fuzz.model", text, 2, 9, 7, 4, 2, 1, &m, &err);
    if (st == HERD_OK) {
        float x[2 * 2 * 9 * 7];
        int32_t y[2] = {0, 3};
        for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
            x[i] = (float)(i % 7) - 3.0f;
        herd_model_forward(m, x, 2, true);
        herd_model_loss(m, y, 2, NULL);
        if (herd_model_backward(m, 2, NULL, NULL) != HERD_OK)
            abort();
        herd_model_free(m);
    } else if (m || !strstr(err.msg, "fuzz.model")) {
        abort(); /* a failure leaves no model and names the description */
    }
    free(text);
    return 0;
}
