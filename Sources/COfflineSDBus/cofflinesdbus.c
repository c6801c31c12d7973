#include "cofflinesdbus.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#define MANAGER_PATH "/org/offlineagent/Agent1"
#define APP_PREFIX MANAGER_PATH "/app"
#define JOB_PREFIX MANAGER_PATH "/job"
#define MANAGER_INTERFACE "org.offlineagent.Agent1.Manager"
#define APP_INTERFACE "org.offlineagent.Agent1.App"
#define JOB_INTERFACE "org.offlineagent.Agent1.Job"

/* The entry points used, with sd-bus's own declarations: a mismatch does not compile. */
#define C_SDBUS_FUNCTIONS(X)                                                                 \
    X(sd_bus_open_user) X(sd_bus_open_system) X(sd_bus_flush_close_unref) X(sd_bus_request_name) \
    X(sd_bus_get_fd) X(sd_bus_get_events) X(sd_bus_get_timeout) X(sd_bus_process) X(sd_bus_flush) \
    X(sd_bus_add_object_vtable) X(sd_bus_add_fallback_vtable) X(sd_bus_add_node_enumerator)      \
    X(sd_bus_message_ref) X(sd_bus_message_unref) X(sd_bus_message_get_path)                     \
    X(sd_bus_message_get_interface) X(sd_bus_message_get_member) X(sd_bus_message_get_signature) \
    X(sd_bus_message_read_basic) X(sd_bus_message_new_method_return) X(sd_bus_message_new_signal) \
    X(sd_bus_message_append_basic) X(sd_bus_message_open_container) X(sd_bus_message_close_container) \
    X(sd_bus_send) X(sd_bus_reply_method_error) X(sd_bus_error_set) X(sd_bus_error_free)         \
    X(sd_bus_query_sender_creds) X(sd_bus_creds_get_euid) X(sd_bus_creds_get_egid)               \
    X(sd_bus_creds_get_supplementary_gids) X(sd_bus_creds_unref) X(sd_bus_path_encode)           \
    X(sd_bus_path_decode) X(sd_bus_emit_properties_changed_strv)

static struct {
#define C_SDBUS_FIELD(name) __typeof__(name) *name;
    C_SDBUS_FUNCTIONS(C_SDBUS_FIELD)
#undef C_SDBUS_FIELD
} api;

static int loaded;
static char failure[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static const unsigned *vtable_format;

static void load(void) {
    void *library = dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *reason = dlerror();
        snprintf(failure, sizeof failure, "cannot load libsystemd (install libsystemd0): %s", reason ? reason : "not found");
        return;
    }
#define C_SDBUS_RESOLVE(name)                                                                  \
    if ((api.name = (__typeof__(name) *)dlsym(library, #name)) == NULL) {                      \
        snprintf(failure, sizeof failure, "the loaded libsystemd has no %s (systemd 246 or later is needed)", #name); \
        return;                                                                                \
    }
    C_SDBUS_FUNCTIONS(C_SDBUS_RESOLVE)
#undef C_SDBUS_RESOLVE
    if ((vtable_format = dlsym(library, "sd_bus_object_vtable_format")) == NULL) {
        snprintf(failure, sizeof failure, "the loaded libsystemd has no sd_bus_object_vtable_format");
        return;
    }
    loaded = 1;
}

int c_sdbus_load(const char **reason) {
    pthread_once(&once, load);
    *reason = loaded ? NULL : failure;
    return loaded ? 0 : -1;
}

/* ---- routing ---------------------------------------------------------------------------- */

static int object_of(const char *interface) {
    if (interface == NULL) return -1;
    if (strcmp(interface, MANAGER_INTERFACE) == 0) return C_SDBUS_MANAGER;
    if (strcmp(interface, APP_INTERFACE) == 0) return C_SDBUS_APP;
    if (strcmp(interface, JOB_INTERFACE) == 0) return C_SDBUS_JOB;
    return -1;
}

/* The id `path` names under the object's prefix (malloc'd; "" for the manager), or NULL. */
static char *id_of(int object, const char *path) {
    if (path == NULL) return NULL;
    if (object == C_SDBUS_MANAGER) return strcmp(path, MANAGER_PATH) == 0 ? strdup("") : NULL;
    char *id = NULL;
    if (api.sd_bus_path_decode(path, object == C_SDBUS_APP ? APP_PREFIX : JOB_PREFIX, &id) <= 0) return NULL;
    return id;
}

static int on_method(sd_bus_message *m, void *userdata, sd_bus_error *error) {
    const c_sdbus_handlers *handlers = userdata;
    int object = object_of(api.sd_bus_message_get_interface(m));
    char *id = object < 0 ? NULL : id_of(object, api.sd_bus_message_get_path(m));
    if (id == NULL) return api.sd_bus_error_set(error, SD_BUS_ERROR_UNKNOWN_OBJECT, "no such object");
    int r = handlers->method(handlers->context, m, object, id, error);
    free(id);
    return r;
}

static int on_property(sd_bus *bus, const char *path, const char *interface, const char *property,
                       sd_bus_message *reply, void *userdata, sd_bus_error *error) {
    (void)bus;
    const c_sdbus_handlers *handlers = userdata;
    int object = object_of(interface);
    char *id = object < 0 ? NULL : id_of(object, path);
    if (id == NULL) return api.sd_bus_error_set(error, SD_BUS_ERROR_UNKNOWN_OBJECT, "no such object");
    int r = handlers->property(handlers->context, reply, object, id, property, error);
    free(id);
    return r;
}

static int find(int object, const char *path, void *userdata, void **found) {
    const c_sdbus_handlers *handlers = userdata;
    char *id = id_of(object, path);
    int exists = id != NULL && handlers->exists(handlers->context, object, id);
    free(id);
    if (exists) *found = userdata;
    return exists;
}

static int find_app(sd_bus *bus, const char *path, const char *interface, void *userdata, void **found, sd_bus_error *error) {
    (void)bus; (void)interface; (void)error;
    return find(C_SDBUS_APP, path, userdata, found);
}

static int find_job(sd_bus *bus, const char *path, const char *interface, void *userdata, void **found, sd_bus_error *error) {
    (void)bus; (void)interface; (void)error;
    return find(C_SDBUS_JOB, path, userdata, found);
}

struct c_sdbus_names {
    const char *prefix;
    char **paths;
    size_t count, capacity;
    int failed;
};

void c_sdbus_names_add(c_sdbus_names *names, const char *id) {
    if (names->failed) return;
    if (names->count + 2 > names->capacity) {
        size_t capacity = names->capacity ? names->capacity * 2 : 16;
        char **grown = realloc(names->paths, capacity * sizeof *grown);
        if (grown == NULL) { names->failed = 1; return; }
        names->paths = grown;
        names->capacity = capacity;
    }
    char *path = NULL;
    if (api.sd_bus_path_encode(names->prefix, id, &path) < 0) { names->failed = 1; return; }
    names->paths[names->count++] = path;
    names->paths[names->count] = NULL;
}

static int enumerate(int object, const char *prefix, void *userdata, char ***nodes) {
    const c_sdbus_handlers *handlers = userdata;
    c_sdbus_names names = { .prefix = prefix };
    handlers->enumerate(handlers->context, object, &names);
    if (names.failed) {
        for (size_t i = 0; i < names.count; i++) free(names.paths[i]);
        free(names.paths);
        return -ENOMEM;
    }
    if (names.paths == NULL) names.paths = calloc(1, sizeof *names.paths);
    if (names.paths == NULL) return -ENOMEM;
    *nodes = names.paths;
    return 0;
}

static int enumerate_apps(sd_bus *bus, const char *prefix, void *userdata, char ***nodes, sd_bus_error *error) {
    (void)bus; (void)prefix; (void)error;
    return enumerate(C_SDBUS_APP, APP_PREFIX, userdata, nodes);
}

static int enumerate_jobs(sd_bus *bus, const char *prefix, void *userdata, char ***nodes, sd_bus_error *error) {
    (void)bus; (void)prefix; (void)error;
    return enumerate(C_SDBUS_JOB, JOB_PREFIX, userdata, nodes);
}

/* ---- the tables (docs/dbus/org.offlineagent.Agent1.xml is what they export) ------------- */

/* SD_BUS_VTABLE_START names sd_bus_object_vtable_format, a libsystemd symbol that would
 * link the library: the start entry is written out, its reference filled in at register. */
#define START { .type = _SD_BUS_VTABLE_START, .flags = 0, \
    .x = { .start = { .element_size = sizeof(sd_bus_vtable), .features = _SD_BUS_VTABLE_PARAM_NAMES } } }
/* Methods check the caller themselves (the per-app lists of the config), so sd-bus's own
 * CAP_SYS_ADMIN check on the system bus is off. */
#define CALL SD_BUS_VTABLE_UNPRIVILEGED
#define CHANGES SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE
#define CONST SD_BUS_VTABLE_PROPERTY_CONST

static sd_bus_vtable manager_vtable[] = {
    START,
    SD_BUS_PROPERTY("Version", "s", on_property, 0, CONST),
    SD_BUS_PROPERTY("Root", "s", on_property, 0, CONST),
    SD_BUS_PROPERTY("Apps", "ao", on_property, 0, CHANGES),
    SD_BUS_METHOD_WITH_NAMES("GetApp", "s", SD_BUS_PARAM(name), "o", SD_BUS_PARAM(path), on_method, CALL),
    SD_BUS_METHOD_WITH_NAMES("Status", "", , "s", SD_BUS_PARAM(json), on_method, CALL),
    SD_BUS_SIGNAL_WITH_NAMES("VersionInstalled", "sss", SD_BUS_PARAM(app) SD_BUS_PARAM(version) SD_BUS_PARAM(previous), 0),
    SD_BUS_SIGNAL_WITH_NAMES("RolledBack", "ssss", SD_BUS_PARAM(app) SD_BUS_PARAM(from) SD_BUS_PARAM(to) SD_BUS_PARAM(reason), 0),
    SD_BUS_SIGNAL_WITH_NAMES("Progress", "sstt", SD_BUS_PARAM(app) SD_BUS_PARAM(phase) SD_BUS_PARAM(bytes) SD_BUS_PARAM(total), 0),
    SD_BUS_SIGNAL_WITH_NAMES("SyncFinished", "ssso", SD_BUS_PARAM(app) SD_BUS_PARAM(outcome) SD_BUS_PARAM(error_code) SD_BUS_PARAM(job), 0),
    SD_BUS_VTABLE_END,
};

static sd_bus_vtable app_vtable[] = {
    START,
    SD_BUS_PROPERTY("Name", "s", on_property, 0, CONST),
    SD_BUS_PROPERTY("ActiveVersion", "s", on_property, 0, CHANGES),
    SD_BUS_PROPERTY("State", "s", on_property, 0, CHANGES),
    SD_BUS_PROPERTY("LaunchesLeft", "u", on_property, 0, CHANGES),
    SD_BUS_PROPERTY("Held", "b", on_property, 0, CHANGES),
    SD_BUS_PROPERTY("Usable", "b", on_property, 0, CHANGES),
    SD_BUS_PROPERTY("Whitelist", "as", on_property, 0, CHANGES),
    SD_BUS_PROPERTY("LastCheck", "t", on_property, 0, CHANGES),
    SD_BUS_PROPERTY("LastCheckOutcome", "s", on_property, 0, CHANGES),
    SD_BUS_PROPERTY("BytesOnDisk", "t", on_property, 0, CHANGES),
    SD_BUS_METHOD_WITH_NAMES("Resolve", "s", SD_BUS_PARAM(url), "sss",
                             SD_BUS_PARAM(location) SD_BUS_PARAM(version) SD_BUS_PARAM(fallback), on_method, CALL),
    SD_BUS_METHOD_WITH_NAMES("ResolveFile", "s", SD_BUS_PARAM(url), "hss",
                             SD_BUS_PARAM(file) SD_BUS_PARAM(mime_type) SD_BUS_PARAM(version), on_method, CALL),
    SD_BUS_METHOD_WITH_NAMES("Confirm", "s", SD_BUS_PARAM(version), "", , on_method, CALL),
    SD_BUS_METHOD_WITH_NAMES("ReportBad", "ss", SD_BUS_PARAM(version) SD_BUS_PARAM(reason), "s", SD_BUS_PARAM(active), on_method, CALL),
    SD_BUS_METHOD_WITH_NAMES("Sync", "b", SD_BUS_PARAM(force), "o", SD_BUS_PARAM(job), on_method, CALL),
    SD_BUS_METHOD_WITH_NAMES("Status", "", , "s", SD_BUS_PARAM(json), on_method, CALL),
    SD_BUS_VTABLE_END,
};

static sd_bus_vtable job_vtable[] = {
    START,
    SD_BUS_PROPERTY("App", "s", on_property, 0, CONST),
    SD_BUS_PROPERTY("Finished", "b", on_property, 0, CHANGES),
    SD_BUS_PROPERTY("Outcome", "s", on_property, 0, CHANGES),
    SD_BUS_PROPERTY("ErrorCode", "s", on_property, 0, CHANGES),
    SD_BUS_VTABLE_END,
};

int c_sdbus_register(sd_bus *bus, const c_sdbus_handlers *handlers) {
    void *userdata = (void *)handlers;
    manager_vtable[0].x.start.vtable_format_reference = vtable_format;
    app_vtable[0].x.start.vtable_format_reference = vtable_format;
    job_vtable[0].x.start.vtable_format_reference = vtable_format;
    int r = api.sd_bus_add_object_vtable(bus, NULL, MANAGER_PATH, MANAGER_INTERFACE, manager_vtable, userdata);
    if (r >= 0) r = api.sd_bus_add_fallback_vtable(bus, NULL, APP_PREFIX, APP_INTERFACE, app_vtable, find_app, userdata);
    if (r >= 0) r = api.sd_bus_add_node_enumerator(bus, NULL, APP_PREFIX, enumerate_apps, userdata);
    if (r >= 0) r = api.sd_bus_add_fallback_vtable(bus, NULL, JOB_PREFIX, JOB_INTERFACE, job_vtable, find_job, userdata);
    if (r >= 0) r = api.sd_bus_add_node_enumerator(bus, NULL, JOB_PREFIX, enumerate_jobs, userdata);
    return r;
}

/* ---- thin wrappers ------------------------------------------------------------------------ */

int c_sdbus_open(int system, sd_bus **bus) { return system ? api.sd_bus_open_system(bus) : api.sd_bus_open_user(bus); }
void c_sdbus_close(sd_bus *bus) { if (bus != NULL) api.sd_bus_flush_close_unref(bus); }
int c_sdbus_request_name(sd_bus *bus, const char *name) { return api.sd_bus_request_name(bus, name, 0); }
int c_sdbus_fd(sd_bus *bus) { return api.sd_bus_get_fd(bus); }
int c_sdbus_events(sd_bus *bus) { return api.sd_bus_get_events(bus); }
int c_sdbus_timeout(sd_bus *bus, uint64_t *usec) { return api.sd_bus_get_timeout(bus, usec); }
int c_sdbus_process(sd_bus *bus) { return api.sd_bus_process(bus, NULL); }
int c_sdbus_flush(sd_bus *bus) { return api.sd_bus_flush(bus); }

sd_bus_message *c_sdbus_message_ref(sd_bus_message *m) { return api.sd_bus_message_ref(m); }
void c_sdbus_message_unref(sd_bus_message *m) { if (m != NULL) api.sd_bus_message_unref(m); }
const char *c_sdbus_message_member(sd_bus_message *m) { return api.sd_bus_message_get_member(m); }
const char *c_sdbus_message_signature(sd_bus_message *m) { return api.sd_bus_message_get_signature(m, 1); }

int c_sdbus_read_string(sd_bus_message *m, const char **value) { return api.sd_bus_message_read_basic(m, 's', value); }
int c_sdbus_read_bool(sd_bus_message *m, int *value) { return api.sd_bus_message_read_basic(m, 'b', value); }

int c_sdbus_new_return(sd_bus_message *call, sd_bus_message **reply) { return api.sd_bus_message_new_method_return(call, reply); }
int c_sdbus_new_signal(sd_bus *bus, const char *path, const char *interface, const char *member, sd_bus_message **signal) {
    return api.sd_bus_message_new_signal(bus, signal, path, interface, member);
}
int c_sdbus_append_string(sd_bus_message *m, const char *value) { return api.sd_bus_message_append_basic(m, 's', value); }
int c_sdbus_append_path(sd_bus_message *m, const char *value) { return api.sd_bus_message_append_basic(m, 'o', value); }
int c_sdbus_append_bool(sd_bus_message *m, int value) { return api.sd_bus_message_append_basic(m, 'b', &value); }
int c_sdbus_append_u32(sd_bus_message *m, uint32_t value) { return api.sd_bus_message_append_basic(m, 'u', &value); }
int c_sdbus_append_u64(sd_bus_message *m, uint64_t value) { return api.sd_bus_message_append_basic(m, 't', &value); }
int c_sdbus_append_fd(sd_bus_message *m, int fd) { return api.sd_bus_message_append_basic(m, 'h', &fd); }
int c_sdbus_open_array(sd_bus_message *m, const char *contents) { return api.sd_bus_message_open_container(m, 'a', contents); }
int c_sdbus_close_container(sd_bus_message *m) { return api.sd_bus_message_close_container(m); }
int c_sdbus_send(sd_bus_message *m) { return api.sd_bus_send(NULL, m, NULL); }

int c_sdbus_reply_error(sd_bus_message *call, const char *name, const char *message) {
    sd_bus_error error = SD_BUS_ERROR_NULL;
    api.sd_bus_error_set(&error, name, message);
    int r = api.sd_bus_reply_method_error(call, &error);
    api.sd_bus_error_free(&error);
    return r;
}

int c_sdbus_set_error(sd_bus_error *error, const char *name, const char *message) {
    return api.sd_bus_error_set(error, name, message);
}

int c_sdbus_properties_changed(sd_bus *bus, const char *path, const char *interface, char **names) {
    return api.sd_bus_emit_properties_changed_strv(bus, path, interface, names);
}

int c_sdbus_sender(sd_bus_message *call, uid_t *uid, gid_t *gids, int max, int *count) {
    sd_bus_creds *creds = NULL;
    int r = api.sd_bus_query_sender_creds(call, SD_BUS_CREDS_EUID | SD_BUS_CREDS_EGID | SD_BUS_CREDS_SUPPLEMENTARY_GIDS | SD_BUS_CREDS_AUGMENT, &creds);
    if (r < 0) return r;
    *count = 0;
    r = api.sd_bus_creds_get_euid(creds, uid);
    gid_t primary;
    if (r >= 0 && max > 0 && api.sd_bus_creds_get_egid(creds, &primary) >= 0) gids[(*count)++] = primary;
    const gid_t *supplementary = NULL;
    int n = r >= 0 ? api.sd_bus_creds_get_supplementary_gids(creds, &supplementary) : 0;
    for (int i = 0; i < n && *count < max; i++) gids[(*count)++] = supplementary[i];
    api.sd_bus_creds_unref(creds);
    return r < 0 ? r : 0;
}

char *c_sdbus_path_encode(const char *prefix, const char *id) {
    char *path = NULL;
    return api.sd_bus_path_encode(prefix, id, &path) < 0 ? NULL : path;
}

int c_sdbus_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }
