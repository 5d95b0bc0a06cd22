import Foundation
import Testing
import VigilSerial

@Suite struct SerialSettingsTests {
    @Test func defaultIs115200EightNOneWithoutFlowControl() {
        let settings = SerialSettings.default
        #expect(settings == SerialSettings(baudRate: 115_200, dataBits: 8, parity: .none, stopBits: 1, flowControl: .none))
        #expect(settings.description == "115200 8N1")
        #expect(throws: Never.self) { try settings.validate() }
    }

    @Test func parsesTheUdevPropertyForm() throws {
        let settings = try SerialSettings(parsing: "115200 8N1 rtscts")
        #expect(settings == SerialSettings(baudRate: 115_200, flowControl: .rtsCts))
        #expect(try SerialSettings(parsing: "9600 7e2 XONXOFF")
            == SerialSettings(baudRate: 9600, dataBits: 7, parity: .even, stopBits: 2, flowControl: .xonXoff))
        #expect(try SerialSettings(parsing: "  57600,5O1  ") == SerialSettings(baudRate: 57600, dataBits: 5, parity: .odd))
        #expect(try SerialSettings(parsing: "crtscts 230400") == SerialSettings(baudRate: 230_400, flowControl: .rtsCts))
        #expect(try SerialSettings(parsing: "") == .default)
        #expect(try SerialSettings(parsing: "none") == .default)
    }

    @Test(arguments: [
        SerialSettings(),
        SerialSettings(baudRate: 50, dataBits: 5, parity: .odd, stopBits: 2, flowControl: .xonXoff),
        SerialSettings(baudRate: 4_000_000, dataBits: 6, parity: .even, stopBits: 1, flowControl: .rtsCts),
        SerialSettings(baudRate: 9600, dataBits: 7, parity: .none, stopBits: 2, flowControl: .none),
        SerialSettings(baudRate: 250_000, hangupOnClose: false),
        SerialSettings(baudRate: 1_250_000, flowControl: .rtsCts, hangupOnClose: true),
    ])
    func descriptionRoundTrips(settings: SerialSettings) throws {
        #expect(try SerialSettings(parsing: settings.description) == settings)
    }

    @Test func customRatesAndHupclParse() throws {
        let settings = try SerialSettings(parsing: "250000 8N1 nohupcl")
        #expect(settings.baudRate == 250_000)
        #expect(settings.isCustomBaudRate)
        #expect(settings.hangupOnClose == false)
        #expect(settings.description == "250000 8N1 nohupcl")
        #expect(try SerialSettings(parsing: "-hupcl").hangupOnClose == false)
        #expect(try SerialSettings(parsing: "HUPCL 9600").hangupOnClose == true)
        #expect(try SerialSettings(parsing: "9600").hangupOnClose == nil)
        #expect(try !SerialSettings(parsing: "115200").isCustomBaudRate)
        let decoded = try JSONDecoder().decode(SerialSettings.self, from: Data(#"{"baudRate":1250000,"hangupOnClose":false}"#.utf8))
        #expect(decoded == SerialSettings(baudRate: 1_250_000, hangupOnClose: false))
    }

    @Test func everySupportedRateRoundTrips() throws {
        #expect(SerialSettings.supportedBaudRates.count == 30)
        for rate in SerialSettings.supportedBaudRates {
            let settings = SerialSettings(baudRate: rate)
            #expect(try SerialSettings(parsing: settings.description) == settings)
        }
    }

    @Test func errorsNameTheBadToken() {
        let cases: [(String, SerialSettingsError, String)] = [
            ("115200 8X1", .unknownToken("8X1"), "\"8X1\""),
            ("115200 8N1 fast", .unknownToken("fast"), "\"fast\""),
            ("12 8N1", .invalidToken("12", .unsupportedBaudRate(12)), "\"12\""),
            ("30000000", .invalidToken("30000000", .unsupportedBaudRate(30_000_000)), "\"30000000\""),
            ("hupcl nohupcl", .duplicate(kind: "hupcl", token: "nohupcl"), "\"nohupcl\""),
            ("115200 9N1", .invalidToken("9N1", .invalidDataBits(9)), "\"9N1\""),
            ("115200 8N3", .invalidToken("8N3", .invalidStopBits(3)), "\"8N3\""),
            ("9600 19200", .duplicate(kind: "baud rate", token: "19200"), "\"19200\""),
            ("rtscts xonxoff", .duplicate(kind: "flow control", token: "xonxoff"), "\"xonxoff\""),
        ]
        for (text, expected, mention) in cases {
            #expect(throws: expected, "\(text)") { try SerialSettings(parsing: text) }
            do {
                _ = try SerialSettings(parsing: text)
            } catch {
                #expect(error.description.contains(mention), "\(error)")
            }
        }
    }

    @Test func validateRejectsValuesSetDirectly() {
        #expect(throws: SerialSettingsError.unsupportedBaudRate(49)) { try SerialSettings(baudRate: 49).validate() }
        #expect(throws: SerialSettingsError.unsupportedBaudRate(0)) { try SerialSettings(baudRate: 0).validate() }
        #expect(throws: SerialSettingsError.invalidDataBits(4)) { try SerialSettings(dataBits: 4).validate() }
        #expect(throws: SerialSettingsError.invalidStopBits(0)) { try SerialSettings(stopBits: 0).validate() }
    }

    @Test func codableRoundTripsAndValidates() throws {
        let settings = SerialSettings(baudRate: 19200, dataBits: 7, parity: .odd, stopBits: 2, flowControl: .xonXoff)
        let json = try JSONEncoder().encode(settings)
        #expect(String(decoding: json, as: UTF8.self).contains("\"xonxoff\""))
        #expect(try JSONDecoder().decode(SerialSettings.self, from: json) == settings)
        #expect(try JSONDecoder().decode(SerialSettings.self, from: Data(#"{"baudRate": 9600}"#.utf8))
            == SerialSettings(baudRate: 9600))
        #expect(throws: SerialSettingsError.invalidDataBits(9)) {
            try JSONDecoder().decode(SerialSettings.self, from: Data(#"{"dataBits": 9}"#.utf8))
        }
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(SerialSettings.self, from: Data(#"{"parity": "mark"}"#.utf8))
        }
    }
}
