print("vigil-hrm-bridge: not built yet")
