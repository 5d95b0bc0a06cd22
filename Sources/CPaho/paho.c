// Paho, opened with dlopen on first use (why: include/CPaho.h).
#include "CPaho.h"

#include <dlfcn.h>
#include <pthread.h>

// Each function Swift uses, typed by Paho's own declaration (MQTTClient.h),
// so a signature that does not match is a compile error.
#define VIGIL_PAHO_FUNCTIONS(X) \
    X(MQTTClient_create) X(MQTTClient_connect) X(MQTTClient_disconnect) X(MQTTClient_isConnected) \
    X(MQTTClient_subscribeMany) X(MQTTClient_unsubscribeMany) X(MQTTClient_publishMessage) \
    X(MQTTClient_receive) X(MQTTClient_freeMessage) X(MQTTClient_free) X(MQTTClient_yield) \
    X(MQTTClient_strerror)

#define VIGIL_PAHO_POINTER(name) __typeof__(name) *name;
static struct { VIGIL_PAHO_FUNCTIONS(VIGIL_PAHO_POINTER) } paho;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char failure[512];

static void load(void) {
    // RTLD_LOCAL: Paho's symbols (and OpenSSL's) stay out of the global
    // scope; RTLD_NOW: a missing function shows here, not at its first call.
    void *library = dlopen(VIGIL_PAHO_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        const char *reason = dlerror();
        snprintf(failure, sizeof failure, "cannot load %s, Eclipse Paho's MQTT C client (Debian: apt install libpaho-mqtt1.3): %s",
                 VIGIL_PAHO_LIBRARY, reason ? reason : "unknown error");
        return;
    }
#define VIGIL_PAHO_RESOLVE(name)                                                                          \
    paho.name = (__typeof__(name) *)dlsym(library, #name);                                                \
    if (!paho.name) {                                                                                     \
        snprintf(failure, sizeof failure, "%s has no function %s (Paho 1.3 or later is needed)", VIGIL_PAHO_LIBRARY, #name); \
        return;                                                                                           \
    }
    VIGIL_PAHO_FUNCTIONS(VIGIL_PAHO_RESOLVE)
    failure[0] = 0;
}

int vigil_paho_load(char *error, size_t size) {
    pthread_once(&once, load);
    if (paho.MQTTClient_strerror && failure[0] == 0) return 0;
    if (error && size > 0) snprintf(error, size, "%s", failure[0] ? failure : "Paho is not loaded");
    return -1;
}

int vigil_paho_create(MQTTClient *handle, const char *serverURI, const char *clientId, int persistence_type, void *persistence_context) {
    return paho.MQTTClient_create(handle, serverURI, clientId, persistence_type, persistence_context);
}
int vigil_paho_connect(MQTTClient handle, MQTTClient_connectOptions *options) { return paho.MQTTClient_connect(handle, options); }
int vigil_paho_disconnect(MQTTClient handle, int timeout) { return paho.MQTTClient_disconnect(handle, timeout); }
int vigil_paho_isConnected(MQTTClient handle) { return paho.MQTTClient_isConnected(handle); }
int vigil_paho_subscribeMany(MQTTClient handle, int count, char *const *topic, int *qos) {
    return paho.MQTTClient_subscribeMany(handle, count, topic, qos);
}
int vigil_paho_unsubscribeMany(MQTTClient handle, int count, char *const *topic) {
    return paho.MQTTClient_unsubscribeMany(handle, count, topic);
}
int vigil_paho_publishMessage(MQTTClient handle, const char *topicName, MQTTClient_message *msg, MQTTClient_deliveryToken *dt) {
    return paho.MQTTClient_publishMessage(handle, topicName, msg, dt);
}
int vigil_paho_receive(MQTTClient handle, char **topicName, int *topicLen, MQTTClient_message **message, unsigned long timeout) {
    return paho.MQTTClient_receive(handle, topicName, topicLen, message, timeout);
}
void vigil_paho_freeMessage(MQTTClient_message **msg) { paho.MQTTClient_freeMessage(msg); }
void vigil_paho_free(void *ptr) { paho.MQTTClient_free(ptr); }
void vigil_paho_yield(void) { paho.MQTTClient_yield(); }
const char *vigil_paho_strerror(int code) { return paho.MQTTClient_strerror ? paho.MQTTClient_strerror(code) : NULL; }
