import FuzzSupport

FuzzMain.run("FuzzFrames") { data, size in
    FramesFuzzer.fuzz(size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
