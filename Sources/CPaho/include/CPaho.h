// Eclipse Paho MQTT C (Debian: libpaho-mqtt-dev at build time,
// libpaho-mqtt1.3 at run time), the synchronous MQTTClient API with TLS
// (libpaho-mqtt3cs), and what Swift cannot import from it: the brace
// initializers, and a persistence store (MQTTCLIENT_PERSISTENCE_USER) whose
// writes can be fsync'd. docs/fleet.md says why Paho and why this store.
//
// The library is not linked: vigil_paho_load() opens it with dlopen the
// first time a connection is made, so a daemon without [mqtt] maps neither
// Paho nor the OpenSSL it pulls in (1.5-2.0 MB of idle RSS; issue 12,
// docs/performance.md "Memory (idle RSS)"). Swift calls Paho only through
// the vigil_paho_* functions below; calling an MQTTClient_* function
// directly fails to link, which keeps it so.
#ifndef VIGIL_CPAHO_H
#define VIGIL_CPAHO_H

#include <MQTTClient.h>
#include <MQTTClientPersistence.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <unistd.h>

// Names the calling thread (top, /proc/PID/task/*/status) as vigild's others are.
static inline void vigil_mqtt_name_thread(const char *name) {
    prctl(PR_SET_NAME, name, 0, 0, 0);
}

static inline MQTTClient_connectOptions vigil_mqtt_connect_options(void) {
    MQTTClient_connectOptions options = MQTTClient_connectOptions_initializer;
    return options;
}

static inline MQTTClient_SSLOptions vigil_mqtt_ssl_options(void) {
    MQTTClient_SSLOptions options = MQTTClient_SSLOptions_initializer;
    return options;
}

static inline MQTTClient_message vigil_mqtt_message(void) {
    MQTTClient_message message = MQTTClient_message_initializer;
    return message;
}

// The persistence store: one file per key in `directory`, written to a
// temporary name and renamed, fdatasync'd first (and the folder fsync'd after
// the rename) when `sync` is set. Paho stores a received QoS 1 message here
// (keys "q-N") before it sends PUBACK (MQTTProtocol_handlePublishes and
// Protocol_processPublication in Paho 1.3.12), and removes it when
// MQTTClient_receive hands the message out (MQTTClient_deliverMessage). That
// is before vigild has journaled it, so the store does not delete a "q-" key
// then: it remembers it (`deferred`) until vigil_mqtt_store_commit, which the
// receive thread calls once vigild has the message. A SIGKILL in between
// leaves the file, and Paho restores it at the next start: a documented
// duplicate, never a loss. Keys of messages Paho sends ("s-", "sc-", ...) are
// not stored: vigild's own outbox keeps those across restarts, and keeping
// them twice would only resend them twice. Paho removes "s-N" exactly when
// the broker's PUBACK for message id N arrives (MQTTProtocol_handlePubacks):
// the store reports that through `delivered`, which is how vigild learns of
// deliveries without Paho's deliveryComplete callback (which would need
// Paho's polling receive thread).
#define VIGIL_MQTT_DEFERRED_MAX 64
typedef struct {
    char directory[4096];
    int sync;
    char deferred[VIGIL_MQTT_DEFERRED_MAX][16];
    int deferredCount;
    void (*delivered)(void *context, int messageID);
    void *context;
} vigil_mqtt_store;

static inline int vigil_mqtt_store_keeps(const char *key) {
    return key[0] == 'q' || key[0] == 'r';
}

static inline int vigil_mqtt_store_path(vigil_mqtt_store *store, const char *key, const char *suffix, char *path, size_t size) {
    if (strchr(key, '/') || key[0] == '.') return -1;
    int n = snprintf(path, size, "%s/%s%s", store->directory, key, suffix);
    return (n < 0 || (size_t)n >= size) ? -1 : 0;
}

static inline int vigil_mqtt_store_open(void **handle, const char *clientID, const char *serverURI, void *context) {
    (void)clientID; (void)serverURI;
    *handle = context;
    return 0;
}

static inline int vigil_mqtt_store_close(void *handle) { (void)handle; return 0; }

static inline int vigil_mqtt_store_put(void *handle, char *key, int bufcount, char *buffers[], int buflens[]) {
    vigil_mqtt_store *store = handle;
    if (!vigil_mqtt_store_keeps(key)) return 0;
    char path[4200], temporary[4200];
    if (vigil_mqtt_store_path(store, key, "", path, sizeof path) || vigil_mqtt_store_path(store, key, ".tmp", temporary, sizeof temporary))
        return MQTTCLIENT_PERSISTENCE_ERROR;
    int fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return MQTTCLIENT_PERSISTENCE_ERROR;
    for (int i = 0; i < bufcount; i++) {
        const char *bytes = buffers[i];
        int left = buflens[i];
        while (left > 0) {
            ssize_t written = write(fd, bytes, (size_t)left);
            if (written < 0 && errno == EINTR) continue;
            if (written <= 0) { close(fd); unlink(temporary); return MQTTCLIENT_PERSISTENCE_ERROR; }
            bytes += written;
            left -= (int)written;
        }
    }
    if (store->sync && fdatasync(fd) != 0) { close(fd); unlink(temporary); return MQTTCLIENT_PERSISTENCE_ERROR; }
    close(fd);
    if (rename(temporary, path) != 0) { unlink(temporary); return MQTTCLIENT_PERSISTENCE_ERROR; }
    if (store->sync) {
        int dir = open(store->directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0) return MQTTCLIENT_PERSISTENCE_ERROR;
        int rc = fsync(dir);
        close(dir);
        if (rc != 0) return MQTTCLIENT_PERSISTENCE_ERROR;
    }
    return 0;
}

static inline int vigil_mqtt_store_get(void *handle, char *key, char **buffer, int *buflen) {
    vigil_mqtt_store *store = handle;
    char path[4200];
    if (vigil_mqtt_store_path(store, key, "", path, sizeof path)) return MQTTCLIENT_PERSISTENCE_ERROR;
    FILE *file = fopen(path, "rbe");
    if (!file) return MQTTCLIENT_PERSISTENCE_ERROR;
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    fseek(file, 0, SEEK_SET);
    char *bytes = size > 0 ? malloc((size_t)size) : NULL;
    if (size <= 0 || !bytes || fread(bytes, 1, (size_t)size, file) != (size_t)size) {
        free(bytes);
        fclose(file);
        return MQTTCLIENT_PERSISTENCE_ERROR;
    }
    fclose(file);
    *buffer = bytes;
    *buflen = (int)size;
    return 0;
}

static inline int vigil_mqtt_store_unlink(vigil_mqtt_store *store, const char *key) {
    char path[4200];
    if (vigil_mqtt_store_path(store, key, "", path, sizeof path)) return MQTTCLIENT_PERSISTENCE_ERROR;
    unlink(path);
    return 0;
}

static inline int vigil_mqtt_store_remove(void *handle, char *key) {
    vigil_mqtt_store *store = handle;
    if (key[0] == 's' && key[1] == '-') {
        // The PUBACK for a message we published (Paho removes "s5-", "sc5-",
        // "s-", "sc-" in that order for each; only "s-" is reported).
        if (store->delivered) store->delivered(store->context, atoi(key + 2));
        return 0;
    }
    // Never written ("s5-", "sc5-", "sc-": three unlinks that fail per PUBACK
    // otherwise), and `keys` never lists such a file: nothing to delete.
    if (!vigil_mqtt_store_keeps(key)) return 0;
    if (key[0] == 'q' && key[1] == '-') {
        // Kept until vigil_mqtt_store_commit; with no room left, kept on
        // disk until the next start (a duplicate, not a loss).
        if (store->deferredCount < VIGIL_MQTT_DEFERRED_MAX && strlen(key) < sizeof store->deferred[0])
            strcpy(store->deferred[store->deferredCount++], key);
        return 0;
    }
    return vigil_mqtt_store_unlink(store, key);
}

/// Deletes the received messages Paho handed out since the last commit
/// (the caller has them safe elsewhere now).
static inline void vigil_mqtt_store_commit(vigil_mqtt_store *store) {
    for (int i = 0; i < store->deferredCount; i++) vigil_mqtt_store_unlink(store, store->deferred[i]);
    store->deferredCount = 0;
}

static inline int vigil_mqtt_store_keys(void *handle, char ***keys, int *nkeys) {
    vigil_mqtt_store *store = handle;
    *keys = NULL;
    *nkeys = 0;
    DIR *dir = opendir(store->directory);
    if (!dir) return MQTTCLIENT_PERSISTENCE_ERROR;
    int capacity = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        const char *name = entry->d_name;
        size_t length = strlen(name);
        if (name[0] == '.' || (length > 4 && strcmp(name + length - 4, ".tmp") == 0) || !vigil_mqtt_store_keeps(name)) continue;
        if (*nkeys == capacity) {
            capacity = capacity ? capacity * 2 : 16;
            char **grown = realloc(*keys, sizeof(char *) * (size_t)capacity);
            if (!grown) break;
            *keys = grown;
        }
        (*keys)[(*nkeys)++] = strdup(name);
    }
    closedir(dir);
    return 0;
}

static inline int vigil_mqtt_store_clear(void *handle) {
    char **keys;
    int count;
    if (vigil_mqtt_store_keys(handle, &keys, &count) != 0) return MQTTCLIENT_PERSISTENCE_ERROR;
    for (int i = 0; i < count; i++) { vigil_mqtt_store_unlink(handle, keys[i]); free(keys[i]); }
    free(keys);
    return 0;
}

static inline int vigil_mqtt_store_containskey(void *handle, char *key) {
    vigil_mqtt_store *store = handle;
    char path[4200];
    if (vigil_mqtt_store_path(store, key, "", path, sizeof path)) return MQTTCLIENT_PERSISTENCE_ERROR;
    return access(path, F_OK) == 0 ? 0 : MQTTCLIENT_PERSISTENCE_ERROR;
}

/// The store's callbacks for MQTTClient_create (context: a vigil_mqtt_store
/// that outlives the client).
static inline MQTTClient_persistence vigil_mqtt_persistence(vigil_mqtt_store *store) {
    MQTTClient_persistence persistence;
    persistence.context = store;
    persistence.popen = vigil_mqtt_store_open;
    persistence.pclose = vigil_mqtt_store_close;
    persistence.pput = vigil_mqtt_store_put;
    persistence.pget = vigil_mqtt_store_get;
    persistence.premove = vigil_mqtt_store_remove;
    persistence.pkeys = vigil_mqtt_store_keys;
    persistence.pclear = vigil_mqtt_store_clear;
    persistence.pcontainskey = vigil_mqtt_store_containskey;
    return persistence;
}

// The receive thread's wait (MQTTConnection): an eventfd to wake it, and
// Paho's socket, found after MQTTClient_connect (Paho 1.3.12 has no call that
// returns it) as the one TCP socket to the broker's port that is new: its
// inode was not among those before the connect.
static inline int vigil_mqtt_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

static inline void vigil_mqtt_wake(int fd) {
    uint64_t one = 1;
    ssize_t rc = write(fd, &one, sizeof one);
    (void)rc;
}

/// Waits until `wake` is signalled (drained here), `sock` is readable
/// (ignored when negative) or `timeout_ms` passed (-1: no limit).
static inline int vigil_mqtt_wait(int wake, int sock, int timeout_ms) {
    struct pollfd fds[2] = {{.fd = wake, .events = POLLIN}, {.fd = sock, .events = POLLIN}};
    int rc = poll(fds, sock >= 0 ? 2 : 1, timeout_ms);
    if (rc > 0 && (fds[0].revents & POLLIN)) {
        uint64_t count;
        ssize_t n = read(wake, &count, sizeof count);
        (void)n;
    }
    return rc;
}

/// The inodes of this process's connected TCP sockets whose peer port is
/// `port`, with their fds; returns how many (at most `max`).
static inline int vigil_mqtt_tcp_sockets(int port, int *fds, unsigned long *inodes, int max) {
    DIR *dir = opendir("/proc/self/fd");
    if (!dir) return 0;
    int count = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL && count < max) {
        if (entry->d_name[0] == '.') continue;
        int fd = atoi(entry->d_name);
        if (fd == dirfd(dir)) continue;
        struct stat info;
        if (fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode)) continue;
        int type = 0;
        socklen_t length = sizeof type;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0 || type != SOCK_STREAM) continue;
        struct sockaddr_storage peer;
        socklen_t peerLength = sizeof peer;
        if (getpeername(fd, (struct sockaddr *)&peer, &peerLength) != 0) continue;
        int peerPort;
        if (peer.ss_family == AF_INET) peerPort = ntohs(((struct sockaddr_in *)&peer)->sin_port);
        else if (peer.ss_family == AF_INET6) peerPort = ntohs(((struct sockaddr_in6 *)&peer)->sin6_port);
        else continue;
        if (peerPort != port) continue;
        fds[count] = fd;
        inodes[count] = (unsigned long)info.st_ino;
        count++;
    }
    closedir(dir);
    return count;
}


// MARK: The library, loaded at run time (paho.c)

/// The library opened by vigil_paho_load.
#define VIGIL_PAHO_LIBRARY "libpaho-mqtt3cs.so.1"

/// Opens Paho once (thread-safe) and resolves every function below. Returns
/// 0, or -1 with a message naming the library and what failed (the library
/// is missing, or lacks a function) in `error`.
int vigil_paho_load(char *error, size_t size);

// Paho's functions by their own signatures (MQTTClient.h); each calls the
// resolved function, so call them only after vigil_paho_load returned 0.
int vigil_paho_create(MQTTClient *handle, const char *serverURI, const char *clientId, int persistence_type, void *persistence_context);
int vigil_paho_connect(MQTTClient handle, MQTTClient_connectOptions *options);
int vigil_paho_disconnect(MQTTClient handle, int timeout);
int vigil_paho_isConnected(MQTTClient handle);
int vigil_paho_subscribeMany(MQTTClient handle, int count, char *const *topic, int *qos);
int vigil_paho_unsubscribeMany(MQTTClient handle, int count, char *const *topic);
int vigil_paho_publishMessage(MQTTClient handle, const char *topicName, MQTTClient_message *msg, MQTTClient_deliveryToken *dt);
int vigil_paho_receive(MQTTClient handle, char **topicName, int *topicLen, MQTTClient_message **message, unsigned long timeout);
void vigil_paho_freeMessage(MQTTClient_message **msg);
void vigil_paho_free(void *ptr);
void vigil_paho_yield(void);
/// NULL when the library is not loaded.
const char *vigil_paho_strerror(int code);

#endif
