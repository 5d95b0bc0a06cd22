import VigilLifecycle
import VigilProtocol
import VigilTOML

extension AccountReference {
    enum Parsed {
        case success(AccountReference)
        case failure(String)
    }

    /// What a TOML value says, or why it is not an account: a name must be
    /// a plausible account name (no `:`, `/`, spaces or control characters,
    /// at most 256 bytes); digits alone are a number.
    static func parse(_ value: TOMLValue) -> Parsed {
        switch value {
        case let .integer(number):
            guard number >= 0, number <= Int64(maximumID) else {
                return .failure("\(number) is out of range: must be a name or an id from 0 to \(maximumID)")
            }
            return .success(AccountReference.id(UInt32(number)))
        case let .string(name):
            if name.isEmpty { return .failure("must not be empty") }
            if name.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
                guard name.utf8.count <= 10, let number = UInt64(name), number <= UInt64(maximumID) else {
                    return .failure("\(name) is out of range: must be a name or an id from 0 to \(maximumID)")
                }
                return .success(AccountReference.id(UInt32(number)))
            }
            guard name.utf8.count <= 256,
                  name.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F && $0 != ":" && $0 != "/" && $0 != "," }),
                  !name.hasPrefix("-")
            else {
                return .failure("'\(name)' is not a user or group name")
            }
            return .success(AccountReference.name(name))
        default:
            return .failure("must be a name (string) or a numeric id, not \(value.typeDescription)")
        }
    }
}

extension TOMLFields {
    /// A user or group, by name or id.
    func account(_ key: String) throws(ManifestProblem) -> AccountReference? {
        guard let value = table[key] else { return nil }
        switch AccountReference.parse(value) {
        case let .success(account): return account
        case let .failure(message): throw problem(key, message)
        }
    }

    /// An array of users or groups; at most `limit` of them.
    func accounts(_ key: String, limit: Int) throws(ManifestProblem) -> [AccountReference]? {
        guard let value = table[key] else { return nil }
        guard let array = value.array else {
            throw problem(key, "must be an array of group names or ids, not \(value.typeDescription)")
        }
        guard array.count <= limit else { throw problem(key, "has \(array.count) entries; at most \(limit)") }
        var accounts: [AccountReference] = []
        for (index, element) in array.enumerated() {
            switch AccountReference.parse(element) {
            case let .success(account): accounts.append(account)
            case let .failure(message): throw problem("\(key)[\(index)]", message)
            }
        }
        return accounts
    }
}

extension TOMLFields {
    /// A group by name or id, or `""` for none; `default` when the key is absent.
    func optionalGroup(_ key: String, default defaultValue: AccountReference?) throws(ManifestProblem) -> AccountReference? {
        guard let value = table[key] else { return defaultValue }
        if value.string == "" { return nil }
        switch AccountReference.parse(value) {
        case let .success(account): return account
        case let .failure(message): throw problem(key, message + " (\"\" for none)")
        }
    }
}
