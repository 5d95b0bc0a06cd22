#ifndef VIGIL_CLIBFUZZER_H
#define VIGIL_CLIBFUZZER_H

#include <stddef.h>
#include <stdint.h>

/// libFuzzer's documented driver entry (compiler-rt FuzzerInterface.h), linked
/// from the fuzzer runtime when built with -sanitize=fuzzer. A SwiftPM
/// executable always defines its own `main`, which keeps libFuzzer's `main`
/// out of the link, so the fuzz targets start libFuzzer by calling this.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*UserCb)(const uint8_t *Data, size_t Size));

#endif
