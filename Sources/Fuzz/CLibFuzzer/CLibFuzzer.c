// Declarations only (include/CLibFuzzer.h); SwiftPM needs a source file per C target.
#include "CLibFuzzer.h"
