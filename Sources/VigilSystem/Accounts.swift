import Glibc
import SystemPackage

/// A user of the account database (/etc/passwd or whatever NSS is configured
/// with), looked up with the reentrant calls: the daemon's threads may look
/// users up at once.
public struct UserAccount: Sendable, Hashable {
    public var name: String
    public var uid: uid_t
    /// The primary group.
    public var gid: gid_t
    public var home: String
    public var shell: String

    public init(name: String, uid: uid_t, gid: gid_t, home: String, shell: String) {
        self.name = name
        self.uid = uid
        self.gid = gid
        self.home = home
        self.shell = shell
    }

    /// The user called `name`; nil when there is none. Throws only when the
    /// database could not be read (an NSS failure), never for a missing user.
    public static func named(_ name: String) throws(SystemError) -> UserAccount? {
        try lookup("getpwnam_r", name) { entry, buffer, size, result in getpwnam_r(name, entry, buffer, size, result) }
    }

    /// The user with this uid; nil when there is none.
    public static func withID(_ uid: uid_t) throws(SystemError) -> UserAccount? {
        try lookup("getpwuid_r", "\(uid)") { entry, buffer, size, result in getpwuid_r(uid, entry, buffer, size, result) }
    }

    private static func lookup(
        _ call: String, _ key: String,
        _ body: (UnsafeMutablePointer<passwd>, UnsafeMutablePointer<CChar>, Int, UnsafeMutablePointer<UnsafeMutablePointer<passwd>?>) -> Int32
    ) throws(SystemError) -> UserAccount? {
        var entry = passwd()
        var size = 1024
        while true {
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
            defer { buffer.deallocate() }
            var result: UnsafeMutablePointer<passwd>?
            let error = body(&entry, buffer, size, &result)
            if error == ERANGE, size < 1 << 20 {
                size *= 4
                continue
            }
            // "Not found" is 0 with no result; some NSS modules say ENOENT or ESRCH instead.
            if error == 0 || error == ENOENT || error == ESRCH || error == EBADF || error == EPERM {
                guard let found = result?.pointee else { return nil }
                return UserAccount(
                    name: String(cString: found.pw_name), uid: found.pw_uid, gid: found.pw_gid,
                    home: found.pw_dir.map { String(cString: $0) } ?? "/",
                    shell: found.pw_shell.map { String(cString: $0) } ?? "")
            }
            throw SystemError(Errno(rawValue: error), call, path: key)
        }
    }
}

/// A group of the account database.
public struct GroupAccount: Sendable, Hashable {
    public var name: String
    public var gid: gid_t
    /// The users listed as members (not those who have it as primary group).
    public var members: [String]

    public init(name: String, gid: gid_t, members: [String]) {
        self.name = name
        self.gid = gid
        self.members = members
    }

    /// The group called `name`; nil when there is none.
    public static func named(_ name: String) throws(SystemError) -> GroupAccount? {
        try lookup("getgrnam_r", name) { entry, buffer, size, result in getgrnam_r(name, entry, buffer, size, result) }
    }

    /// The group with this gid; nil when there is none.
    public static func withID(_ gid: gid_t) throws(SystemError) -> GroupAccount? {
        try lookup("getgrgid_r", "\(gid)") { entry, buffer, size, result in getgrgid_r(gid, entry, buffer, size, result) }
    }

    private static func lookup(
        _ call: String, _ key: String,
        _ body: (UnsafeMutablePointer<group>, UnsafeMutablePointer<CChar>, Int, UnsafeMutablePointer<UnsafeMutablePointer<group>?>) -> Int32
    ) throws(SystemError) -> GroupAccount? {
        var entry = group()
        var size = 4096
        while true {
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
            defer { buffer.deallocate() }
            var result: UnsafeMutablePointer<group>?
            let error = body(&entry, buffer, size, &result)
            if error == ERANGE, size < 1 << 24 {
                size *= 4
                continue
            }
            if error == 0 || error == ENOENT || error == ESRCH || error == EBADF || error == EPERM {
                guard let found = result?.pointee else { return nil }
                var members: [String] = []
                if var member = found.gr_mem {
                    while let name = member.pointee {
                        members.append(String(cString: name))
                        member += 1
                    }
                }
                return GroupAccount(name: String(cString: found.gr_name), gid: found.gr_gid, members: members)
            }
            throw SystemError(Errno(rawValue: error), call, path: key)
        }
    }
}

/// The calling process's credentials.
public enum ProcessCredentials {
    /// The supplementary groups (getgroups), without the effective gid unless listed.
    public static func supplementaryGroups() -> [gid_t] {
        let count = getgroups(0, nil)
        guard count > 0 else { return [] }
        var groups = [gid_t](repeating: 0, count: Int(count))
        let got = getgroups(count, &groups)
        return got > 0 ? Array(groups.prefix(Int(got))) : []
    }
}
