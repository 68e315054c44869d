/* Tests of the gossip algorithms — being written. */
#include "harness.h"

const herd_test herd_tests_gossip[] = {
    HERD_TEST_END,
};
