import FuzzSupport

FuzzMain.run("FuzzGATT") { data, size in
    GATTFuzzer.fuzz(size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
