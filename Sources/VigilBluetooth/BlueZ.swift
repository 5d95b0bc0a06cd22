import VigilDBus

/// BlueZ's names on the bus (doc/org.bluez.*.rst in the bluez repository).
public enum BlueZ {
    public static let service = "org.bluez"
    public static let adapter = "org.bluez.Adapter1"
    public static let device = "org.bluez.Device1"
    public static let gattService = "org.bluez.GattService1"
    public static let gattCharacteristic = "org.bluez.GattCharacteristic1"
    public static let gattDescriptor = "org.bluez.GattDescriptor1"
    public static let gattManager = "org.bluez.GattManager1"
    public static let advertisingManager = "org.bluez.LEAdvertisingManager1"
    public static let objectManager = "org.freedesktop.DBus.ObjectManager"
    public static let properties = "org.freedesktop.DBus.Properties"
    public static let root: ObjectPath = "/"

    /// Errors of Device1.Connect the central role handles itself.
    public enum Error {
        public static let inProgress = "org.bluez.Error.InProgress"
        public static let alreadyConnected = "org.bluez.Error.AlreadyConnected"
    }
}
