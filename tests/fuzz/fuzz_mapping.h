/* SPDX-License-Identifier: MIT */
/*
 * The libFuzzer entry points of the mapping harness, shared by the
 * libFuzzer build and the plain replay driver.
 */
#ifndef FUZZ_MAPPING_H
#define FUZZ_MAPPING_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#endif
