import FuzzSupport

FuzzMain.run("FuzzTOML") { data, size in
    TOMLFuzzer.fuzz(size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
