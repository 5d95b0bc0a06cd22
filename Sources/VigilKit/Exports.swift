// The protocol vocabulary (AppState, LifecycleNotification, JSONValue, AppInfo…)
// is part of VigilKit's API: an app imports VigilKit alone.
@_exported import VigilProtocol
