/// Vigil's release version: the one place it is written. `vigild --version`,
/// `vigilctl --version`, the daemon's `welcome` and `status` replies, and the
/// Debian package (scripts/build-deb reads it from this file) all take it
/// from here.
public enum VigilVersion {
    public static let current = "0.1.0"
}
