/// How to reach the broker (the daemon fills this from `[mqtt]` in vigild.toml).
public struct MQTTClientOptions: Sendable {
    /// `tcp://host:port`, `mqtt://…`, `ssl://…` or `mqtts://…`.
    public var serverURI: String
    public var clientID: String
    public var username: String?
    /// Never logged, never shown (`description` leaves it out).
    public var password: String?
    /// TLS: the CA bundle to check the broker against, and the client
    /// certificate and key (PEM) for brokers that ask for one.
    public var caFile: String?
    public var certificateFile: String?
    public var keyFile: String?
    /// Seconds between keep-alive pings when nothing else is sent.
    public var keepAlive: Int
    /// Paho's persistence folder (received messages between PUBACK and hand-over).
    public var storeDirectory: String
    /// fdatasync persisted messages (vigild's `durability = "power"`).
    public var sync: Bool
    /// Reconnection backoff: doubles from `minimumRetry` up to `maximumRetry` seconds.
    public var minimumRetry: Double = 0.25
    public var maximumRetry: Double = 10

    public init(
        serverURI: String, clientID: String, username: String? = nil, password: String? = nil, caFile: String? = nil,
        certificateFile: String? = nil, keyFile: String? = nil, keepAlive: Int = 60, storeDirectory: String, sync: Bool
    ) {
        self.serverURI = serverURI
        self.clientID = clientID
        self.username = username
        self.password = password
        self.caFile = caFile
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        self.keepAlive = keepAlive
        self.storeDirectory = storeDirectory
        self.sync = sync
    }

    /// Whether the connection uses TLS (by scheme, or because a CA or client certificate is given).
    public var usesTLS: Bool {
        serverURI.hasPrefix("ssl://") || serverURI.hasPrefix("mqtts://") || caFile != nil || certificateFile != nil
    }
}

/// An MQTT incoming message, copied out of Paho.
public struct MQTTIncoming: Sendable, Equatable {
    public var topic: String
    public var payload: [UInt8]
    public var qos: Int
    public var retained: Bool
    /// The broker says it may have sent this message before (QoS 1 redelivery).
    public var duplicate: Bool

    public init(topic: String, payload: [UInt8], qos: Int, retained: Bool, duplicate: Bool) {
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retained = retained
        self.duplicate = duplicate
    }
}

/// What the connection reports, from Paho's or its own thread.
public enum MQTTEvent: Sendable, Equatable {
    /// Connected and subscribed; `sessionPresent`: the broker kept our session.
    case connected(sessionPresent: Bool)
    case connectFailed(String)
    case connectionLost(String)
    /// The broker acknowledged the QoS 1 message published with this token.
    case delivered(token: Int32)
    case subscribeFailed(String)
}

public struct MQTTError: Error, Sendable, CustomStringConvertible {
    public var code: Int32
    public var description: String

    public init(code: Int32, _ description: String) {
        self.code = code
        self.description = description
    }
}
